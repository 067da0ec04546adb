-- Clusters (#74): N allocations of one SKU placed together within one leaf switch, spine group
-- or fabric, or not at all. Each member is an ordinary allocation (it is provisioned, billed,
-- released and certified as any other) that names its cluster and its place in it.
--
-- All or nothing is the database's rule, not only the code's: a cluster commits with exactly
-- its number of members, all in its project, SKU and region, all on nodes of its fabric with
-- no fabric drift. A launch that placed some members and failed on the next can't leave a
-- partial cluster behind, whatever the code did.

CREATE TABLE clusters (
    id                  uuid PRIMARY KEY,
    tenant_id           uuid NOT NULL REFERENCES tenants (id),
    project_id          uuid NOT NULL REFERENCES projects (id),
    -- Members are named <name>-<index>, which must still be an allocation name.
    name                text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,54}[a-z0-9])?$'),
    sku_id              uuid NOT NULL REFERENCES skus (id),
    region              text NOT NULL,
    size                integer NOT NULL CHECK (size BETWEEN 2 AND 128),
    locality            text NOT NULL CHECK (locality IN ('leaf', 'spine', 'fabric')),
    locality_required   boolean NOT NULL,
    -- Where placement put it: the fabric, and the narrowest locality that holds every member.
    fabric              text NOT NULL,
    placed_within       text NOT NULL CHECK (placed_within IN ('leaf', 'spine', 'fabric')),
    placement_why       text NOT NULL CHECK (length(placement_why) <= 2000),
    idempotency_key     text NOT NULL CHECK (length(idempotency_key) BETWEEN 8 AND 200),
    request_fingerprint text NOT NULL,
    requested_by        uuid NOT NULL REFERENCES users (id),
    created_at          timestamptz NOT NULL DEFAULT now(),
    -- Set once a release of the whole cluster was asked for (by its owner, or because a
    -- member failed to provision): every member is then on its way out.
    release_requested_at timestamptz,
    failure             text CHECK (length(failure) <= 2000),
    UNIQUE (project_id, idempotency_key),
    -- A required locality is where it is; a preferred one may have been widened.
    CHECK (NOT locality_required OR placed_within = locality)
);

CREATE UNIQUE INDEX clusters_live_name ON clusters (project_id, name)
    WHERE release_requested_at IS NULL;

ALTER TABLE allocations
    ADD COLUMN cluster_id    uuid REFERENCES clusters (id),
    ADD COLUMN cluster_index integer CHECK (cluster_index BETWEEN 1 AND 128),
    ADD CONSTRAINT allocations_cluster_member
        CHECK ((cluster_id IS NULL) = (cluster_index IS NULL));

CREATE UNIQUE INDEX allocations_cluster_members ON allocations (cluster_id, cluster_index)
    WHERE cluster_id IS NOT NULL;

-- At commit: a new cluster has exactly its members, numbered 1 to its size, and they agree
-- with it. Checked again for a member added later, which would make one too many.
CREATE FUNCTION cluster_is_whole(cluster uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c clusters;
    members integer;
    agreeing integer;
BEGIN
    SELECT * INTO c FROM clusters WHERE id = cluster;
    SELECT count(*),
           count(*) FILTER (WHERE a.project_id = c.project_id AND a.sku_id = c.sku_id
                              AND a.region = c.region AND a.cluster_index <= c.size
                              AND p.fabric = c.fabric AND p.drift_seen_at IS NULL)
      INTO members, agreeing
      FROM allocations a LEFT JOIN node_fabric_places p ON p.node_id = a.node_id
     WHERE a.cluster_id = c.id;
    IF members <> c.size THEN
        RAISE EXCEPTION 'cluster % has % of its % members', c.id, members, c.size
            USING ERRCODE = 'check_violation', CONSTRAINT = 'clusters_whole';
    END IF;
    IF agreeing <> c.size THEN
        RAISE EXCEPTION 'cluster %: % of its members are outside its project, SKU, region or fabric %',
            c.id, members - agreeing, c.fabric
            USING ERRCODE = 'check_violation', CONSTRAINT = 'clusters_whole';
    END IF;
END $$;

CREATE FUNCTION clusters_whole() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'clusters' THEN
        PERFORM cluster_is_whole(NEW.id);
    ELSE
        PERFORM cluster_is_whole(NEW.cluster_id);
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER clusters_whole AFTER INSERT ON clusters
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION clusters_whole();

CREATE CONSTRAINT TRIGGER clusters_whole AFTER INSERT ON allocations
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.cluster_id IS NOT NULL)
    EXECUTE FUNCTION clusters_whole();

-- A member stays in its cluster: no allocation joins or leaves one after it is made.
CREATE FUNCTION allocations_cluster_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.cluster_id IS DISTINCT FROM OLD.cluster_id
       OR NEW.cluster_index IS DISTINCT FROM OLD.cluster_index THEN
        RAISE EXCEPTION 'allocation %: its cluster is fixed at launch', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'allocations_cluster_fixed';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER allocations_cluster_fixed BEFORE UPDATE OF cluster_id, cluster_index ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_cluster_fixed();
