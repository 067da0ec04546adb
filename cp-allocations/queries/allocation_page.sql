-- One page of the allocations list (`AllocationsApi::allocation_page`), newest first, with
-- what each has cost so far: each instance's current run, under the instance's id.
SELECT a.id AS "run!: AllocationId",
       coalesce(a.instance_id, a.id) AS "id!: AllocationId",
       a.stop_root_volume IS NOT NULL AS "stops!",
       a.project_id AS "project_id!: ProjectId",
       a.name AS "name!", s.name AS sku, a.gpu_count AS "gpu_count!",
       a.region AS "region!", a.state AS "state!",
       a.desired_state AS "desired_state!", a.observed_state AS "observed_state!",
       a.failure, a.price_per_hour_minor AS "price_per_hour_minor!",
       a.currency AS "currency!", a.created_at AS "created_at!",
       a.tags AS "tags!", a.ssh_host, a.ssh_port, a.ssh_user,
       a.published_ports AS "published_ports!: Vec<Option<i32>>",
       a.expires_at,
       -- What it has cost so far, its listing's fee included: its usage
       -- interval's price over the time it has run (until now, or its end),
       -- rounded down to the cent, as rating rounds.
       (SELECT div((u.price_per_hour_minor + u.fee_per_hour_minor)::numeric
                   * round(date_part('epoch', coalesce(u.ended_at, now()) - u.started_at)
                           * 1e6)::bigint,
                   3600000000)::bigint
        FROM usage_intervals u WHERE u.allocation_id = a.id) AS cost_minor,
       -- Where its published ports are reached: only a running allocation that
       -- publishes some has any, so only its row reads its node and first slot
       -- (`CASE` evaluates its branch only when the test holds). Joined and
       -- expanded for every row, the statement took 0.235 ms for a page of 51;
       -- this way 0.115 ms (docs/PERFORMANCE.md).
       CASE WHEN a.state = 'running' AND a.ssh_host IS NOT NULL
                 AND cardinality(a.published_ports) > 0
            THEN (SELECT n.public_port_base FROM nodes n WHERE n.id = a.node_id)
       END AS public_port_base,
       CASE WHEN a.state = 'running' AND a.ssh_host IS NOT NULL
                 AND cardinality(a.published_ports) > 0
            THEN (SELECT min(x::int)
                  FROM jsonb_array_elements_text(a.placement -> 'slot_indexes') x)
       END AS first_slot
FROM (SELECT page.*
      FROM (SELECT DISTINCT unnest($1::uuid[]) AS id) p
      CROSS JOIN LATERAL (
          SELECT a.id, a.project_id, a.name, a.sku_id, a.node_id, a.gpu_count,
                 a.region, a.state, a.desired_state, a.observed_state, a.failure,
                 a.price_per_hour_minor, a.currency, a.created_at, a.tags,
                 a.ssh_host, a.ssh_port, a.ssh_user, a.published_ports, a.placement,
                 a.expires_at, a.instance_id, a.stop_root_volume
          FROM allocations a
          WHERE a.project_id = p.id AND a.superseded_by IS NULL
            AND (a.created_at, a.id) < (coalesce($5::timestamptz, 'infinity'),
                                        coalesce($6::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
            AND CASE WHEN $2::text IS NULL THEN true
                     -- A stopped instance is still the tenant's, and still costs its disk.
                     WHEN $2 = 'active' THEN a.state <> 'released' OR a.stop_root_volume IS NOT NULL
                     WHEN $2 = 'stopped' THEN a.state = 'released' AND a.stop_root_volume IS NOT NULL
                     ELSE a.state = $2 END
            AND CASE WHEN $3::text IS NULL THEN true
                     ELSE a.tags ? $3 AND ($4::text IS NULL OR a.tags ->> $3 = $4) END
          ORDER BY a.created_at DESC, a.id DESC
          LIMIT $7) page
      ORDER BY page.created_at DESC, page.id DESC
      LIMIT $7) a
JOIN skus s ON s.id = a.sku_id
ORDER BY a.created_at DESC, a.id DESC
