-- Browser sessions, each with the user it is signed in as in a column of its own (#22).
--
-- tower-sessions' table keeps the whole session as one opaque value, so every page read the
-- session, then the user named inside it: two statements, each with the pool's round trips.
-- With the user beside the session, one statement reads both (`SessionsApi::session`), and a
-- deleted user's sessions go with the user.
--
-- The old table, `tower_sessions.session`, is left in place: during a rolling upgrade the
-- replicas still on the previous build read and write it. Its sessions are not carried over
-- (the store kept them as MessagePack), so everyone signs in once more after the upgrade.
CREATE TABLE sessions (
    -- tower-sessions' id: 128 random bits, base64url (22 characters).
    id          text PRIMARY KEY CHECK (length(id) BETWEEN 16 AND 64),
    user_id     uuid REFERENCES users (id) ON DELETE CASCADE,
    -- What the web layer keeps in the session (its sign-in, a pending SSO flow, where to go
    -- back to after signing in): a JSON object, never the user's row.
    data        jsonb NOT NULL CHECK (jsonb_typeof(data) = 'object'),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_at);
-- For ending a user's sessions (and the cascade from `users`).
CREATE INDEX sessions_user ON sessions (user_id) WHERE user_id IS NOT NULL;
