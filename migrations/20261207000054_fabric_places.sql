-- Where each node hangs off the InfiniBand fabric, as an operator approved it (#74): the
-- fabric, the group of spine switches above the node's leaf, and the leaf switch. Clusters
-- are placed by these, so they are kept like a slot map: an import is the operator's decision
-- for nodes not yet placed, but a later import that puts a placed node somewhere else does not
-- move it. It is kept beside the approved place as drift, and while drift is set the node is
-- left out of clusters, until an operator approves the new place.

CREATE TABLE node_fabric_places (
    node_id       uuid PRIMARY KEY REFERENCES nodes (id),
    fabric        text NOT NULL,
    spine_group   text NOT NULL,
    leaf          text NOT NULL,
    source        text NOT NULL CHECK (source IN ('ibnetdiscover', 'slurm_topology', 'operator')),
    approved_by   uuid NOT NULL REFERENCES users (id),
    approved_at   timestamptz NOT NULL DEFAULT now(),
    drift_fabric       text,
    drift_spine_group  text,
    drift_leaf         text,
    drift_source       text CHECK (drift_source IN ('ibnetdiscover', 'slurm_topology', 'operator')),
    drift_seen_at      timestamptz,
    -- Names as the parsers allow them: letters, digits, '-', '_', '.', at most 64.
    CHECK (fabric ~ '^[A-Za-z0-9._-]{1,64}$' AND spine_group ~ '^[A-Za-z0-9._-]{1,64}$'
           AND leaf ~ '^[A-Za-z0-9._-]{1,64}$'),
    CHECK (drift_fabric ~ '^[A-Za-z0-9._-]{1,64}$' AND drift_spine_group ~ '^[A-Za-z0-9._-]{1,64}$'
           AND drift_leaf ~ '^[A-Za-z0-9._-]{1,64}$'),
    -- Drift is all of a place or none of one, and never the place already approved.
    CHECK ((drift_fabric IS NULL) = (drift_spine_group IS NULL)
           AND (drift_fabric IS NULL) = (drift_leaf IS NULL)
           AND (drift_fabric IS NULL) = (drift_source IS NULL)
           AND (drift_fabric IS NULL) = (drift_seen_at IS NULL)),
    CHECK (drift_fabric IS NULL
           OR (drift_fabric, drift_spine_group, drift_leaf) <> (fabric, spine_group, leaf))
);

-- Cluster placement reads the nodes of a leaf, a spine group or a fabric that have no drift.
CREATE INDEX node_fabric_places_tree ON node_fabric_places (fabric, spine_group, leaf)
    WHERE drift_seen_at IS NULL;
