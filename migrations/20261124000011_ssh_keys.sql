-- Saved SSH public keys: each user keeps named keys on their account page and picks them at
-- launch. A key is stored as the one normalised line `sshd` reads (validated by the control
-- plane: type, body matching its type, RSA >= 2048 bits), with its SHA-256 fingerprint.

CREATE TABLE user_ssh_keys (
    id          uuid PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name        text NOT NULL CHECK (name ~ '^[^[:cntrl:]]{1,64}$' AND name = btrim(name)),
    public_key  text NOT NULL CHECK (length(public_key) BETWEEN 1 AND 16384
                                     AND public_key !~ '[\r\n]'),
    -- `SHA256:` and the unpadded base64 of the key blob's digest, as `ssh-keygen -l` prints.
    fingerprint text NOT NULL CHECK (fingerprint ~ '^SHA256:[A-Za-z0-9+/]{43}$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);

-- A user saves a key once, and names are unique per user (case-insensitively).
CREATE UNIQUE INDEX user_ssh_keys_one_per_user ON user_ssh_keys (user_id, fingerprint);
CREATE UNIQUE INDEX user_ssh_keys_name_per_user ON user_ssh_keys (user_id, lower(name));

-- Bounded: at most 50 keys per user. The user's row is locked so two concurrent adds can't
-- both pass the count.
CREATE FUNCTION user_ssh_keys_bounded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM users WHERE id = NEW.user_id FOR UPDATE;
    IF (SELECT count(*) FROM user_ssh_keys WHERE user_id = NEW.user_id) >= 50 THEN
        RAISE EXCEPTION 'a user keeps at most 50 SSH keys; delete one first'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'user_ssh_keys_at_most_50';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER user_ssh_keys_bounded BEFORE INSERT ON user_ssh_keys
    FOR EACH ROW EXECUTE FUNCTION user_ssh_keys_bounded();

-- An allocation may carry several keys, one per line (each validated like a saved key).
ALTER TABLE allocations DROP CONSTRAINT IF EXISTS allocations_ssh_public_key_check;
ALTER TABLE allocations ADD CONSTRAINT allocations_ssh_public_key_lines
    CHECK (length(ssh_public_key) BETWEEN 1 AND 16384
           AND array_length(string_to_array(ssh_public_key, E'\n'), 1) <= 10);
