-- Sessions and the platform admins' break-glass login.

-- The table tower-sessions-sqlx-store 0.15 reads and writes (its PostgresStore defaults).
-- Created here, not by the store's own migrate(), so every schema change is a migration.
CREATE SCHEMA tower_sessions;
CREATE TABLE tower_sessions.session (
    id          text PRIMARY KEY NOT NULL,
    data        bytea NOT NULL,
    expiry_date timestamptz NOT NULL
);
CREATE INDEX session_expiry_idx ON tower_sessions.session (expiry_date);

-- Target of the foreign key below: lets a row insist on the user's platform role.
ALTER TABLE users ADD CONSTRAINT users_id_platform_role_key UNIQUE (id, platform_role);

-- A password, for platform admins only: the foreign key pins platform_role = 'admin', so a
-- credential can't be given to anyone else, and an admin holding one can't be demoted
-- without removing it first.
CREATE TABLE break_glass_credentials (
    user_id       uuid PRIMARY KEY,
    platform_role text NOT NULL DEFAULT 'admin' CHECK (platform_role = 'admin'),
    password_hash text NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (user_id, platform_role) REFERENCES users (id, platform_role)
);
