-- A cluster's own SSH key pair, so that its members reach each other at boot
-- (docs/decisions/2026-12-07-private-networks.md). The private key is kept sealed like the
-- identity providers' client secrets, and forgotten when the cluster is released.
ALTER TABLE clusters
    ADD COLUMN ssh_public_key text
        CHECK (ssh_public_key ~ '^ssh-ed25519 [A-Za-z0-9+/]+={0,2} [A-Za-z0-9@._-]{1,100}$'),
    ADD COLUMN ssh_private_key_sealed text
        CHECK (ssh_private_key_sealed ~ '^sealed:v1:[a-z0-9-]{1,32}:[A-Za-z0-9+/]+={0,2}$');
-- A sealed private key always has its public half (clusters launched before this have none).
ALTER TABLE clusters ADD CONSTRAINT clusters_key_pair
    CHECK (ssh_private_key_sealed IS NULL OR ssh_public_key IS NOT NULL);
