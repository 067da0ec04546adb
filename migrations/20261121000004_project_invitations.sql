-- Project invitations, and the rule that a project always keeps an admin.

-- An invitation waits until that person first signs in through the tenant's provider; then
-- it becomes a project membership (and accepted_at is set).
CREATE TABLE project_invitations (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL,
    project_id  uuid NOT NULL,
    email       text NOT NULL CHECK (email = lower(email) AND email ~ '^[^@\s]+@[^@\s]+$'),
    role        text NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    invited_by  uuid NOT NULL REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    accepted_at timestamptz,
    FOREIGN KEY (tenant_id, project_id) REFERENCES projects (tenant_id, id)
);
-- One open invitation per person per project.
CREATE UNIQUE INDEX project_invitations_open_key
    ON project_invitations (project_id, email) WHERE accepted_at IS NULL;
CREATE INDEX project_invitations_email_idx ON project_invitations (email) WHERE accepted_at IS NULL;

-- The last admin of a project can't be removed or demoted. The project row is locked first,
-- so two concurrent removals of the last two admins can't both pass.
CREATE FUNCTION project_keeps_an_admin() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.role = 'admin' AND (TG_OP = 'DELETE' OR NEW.role <> 'admin') THEN
        PERFORM 1 FROM projects WHERE id = OLD.project_id FOR UPDATE;
        IF NOT EXISTS (
            SELECT 1 FROM project_memberships
            WHERE project_id = OLD.project_id AND role = 'admin' AND user_id <> OLD.user_id
        ) THEN
            RAISE EXCEPTION 'a project must keep at least one admin'
                USING ERRCODE = 'check_violation', CONSTRAINT = 'project_keeps_an_admin';
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER project_keeps_an_admin
    BEFORE UPDATE OF role OR DELETE ON project_memberships
    FOR EACH ROW EXECUTE FUNCTION project_keeps_an_admin();
