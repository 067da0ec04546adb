-- Who a session is signed in as is kept for a few seconds by each server process
-- (`cp_identity::sessions::PrincipalCache`, #22), so a signed-in page no longer starts with
-- the session's statement. Whatever changes what that statement returns tells every process
-- on the channel `gpuaas_principals`, as the change commits, and each drops what it kept:
--
--   * a signed-in session written or ended (sign-out, the idle expiry moved, the sweep): its
--     user's id;
--   * a user's row changed or deleted (email, name, platform role): the user's id;
--   * a tenant membership added, changed or removed (the home organization and its role):
--     the user's id;
--   * a tenant renamed or deleted (the home organization's name): `*`, everything.
--
-- The payload is a user id, never a session id: any role that can connect may LISTEN, and a
-- session id is a credential. PostgreSQL folds identical notifications of one transaction
-- into one, so a sweep of many sessions of one user sends one.
CREATE FUNCTION notify_principal_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    who uuid;
BEGIN
    IF TG_TABLE_NAME = 'tenants' THEN
        PERFORM pg_notify('gpuaas_principals', '*');
        RETURN NULL;
    END IF;
    -- Each branch names only its own table's columns: PL/pgSQL plans an expression whole.
    IF TG_TABLE_NAME = 'users' THEN
        who := OLD.id;
    ELSIF TG_OP <> 'INSERT' THEN
        who := OLD.user_id;
    END IF;
    IF who IS NOT NULL THEN
        PERFORM pg_notify('gpuaas_principals', who::text);
    END IF;
    -- A membership moved to another user (not something the product does) tells both.
    IF TG_OP <> 'DELETE' AND TG_TABLE_NAME = 'tenant_memberships' THEN
        PERFORM pg_notify('gpuaas_principals', NEW.user_id::text);
    END IF;
    RETURN NULL;
END
$$;

-- A session nobody signed in to is never kept, so only a signed-in one tells; a new session
-- has an id no process has seen.
CREATE TRIGGER sessions_principal_changed
    AFTER UPDATE OR DELETE ON sessions
    FOR EACH ROW WHEN (OLD.user_id IS NOT NULL)
    EXECUTE FUNCTION notify_principal_changed();

CREATE TRIGGER users_principal_changed
    AFTER UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION notify_principal_changed();

CREATE TRIGGER tenant_memberships_principal_changed
    AFTER INSERT OR UPDATE OR DELETE ON tenant_memberships
    FOR EACH ROW EXECUTE FUNCTION notify_principal_changed();

CREATE TRIGGER tenants_principal_changed
    AFTER UPDATE OF display_name OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION notify_principal_changed();
