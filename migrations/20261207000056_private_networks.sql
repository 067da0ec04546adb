-- A project's private network across hosts (docs/decisions/2026-12-07-private-networks.md):
-- the project's VXLAN segment, each member's address on it, and each host's tunnel endpoint.

-- One segment per project, for its lifetime; below 4096 is left to the operator's own.
CREATE SEQUENCE project_vni_seq AS integer MINVALUE 4096 MAXVALUE 16777215 NO CYCLE;
ALTER TABLE projects
    ADD COLUMN vni integer NOT NULL DEFAULT nextval('project_vni_seq')
        CHECK (vni BETWEEN 4096 AND 16777215);
ALTER SEQUENCE project_vni_seq OWNED BY projects.vni;
ALTER TABLE projects ADD CONSTRAINT projects_vni_unique UNIQUE (vni);

-- A member's host number on its project's segment (10.128.0.0/16; the address and MAC
-- follow from it), given when its provision is queued, while its project allows east-west
-- traffic. Unique among the project's allocations that are not released, so that an
-- address is not given again while the guest that had it may still be up.
ALTER TABLE allocations
    ADD COLUMN private_host integer CHECK (private_host BETWEEN 10 AND 65534);
CREATE UNIQUE INDEX allocations_private_host ON allocations (project_id, private_host)
    WHERE private_host IS NOT NULL AND state <> 'released';

-- Where other hosts send this host's guests' private traffic, as its agent reports it. One
-- host's endpoint can't be claimed by another.
ALTER TABLE nodes
    ADD COLUMN vtep inet CHECK (family(vtep) = 4 AND masklen(vtep) = 32);
CREATE UNIQUE INDEX nodes_vtep ON nodes (vtep);
