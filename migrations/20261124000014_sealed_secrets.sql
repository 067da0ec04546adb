-- Identity providers' client secrets are stored sealed (control-plane/src/secrets.rs):
-- `sealed:v1:<key id>:<base64>`. New and changed rows must be sealed; rows written before
-- this migration are plain text until the server, which has the key, seals them at start
-- (ControlPlane::reseal_secrets), hence NOT VALID. `VALIDATE CONSTRAINT` proves it later.
ALTER TABLE identity_providers DROP CONSTRAINT identity_providers_client_secret_check;
ALTER TABLE identity_providers ADD CONSTRAINT identity_providers_client_secret_sealed
    CHECK (client_secret ~ '^sealed:v1:[a-z0-9-]{1,32}:[A-Za-z0-9+/]+={0,2}$'
           AND length(client_secret) <= 1500) NOT VALID;
