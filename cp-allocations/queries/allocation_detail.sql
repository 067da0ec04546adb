-- One allocation's page (`lifecycle::detail`): an instance's current run, with its stopped
-- disk if it has one, its history, phases,
-- latest task, cleanup certificates, GPU utilisation and health notices as JSON beside it.
SELECT a.name, s.name AS sku, a.shape, a.gpu_count, a.region, n.hostname,
       l.name || ' ' || v.version AS "image!", l.slug AS listing, a.fee_per_hour_minor,
       a.price_per_hour_minor, a.currency, a.desired_state,
       a.observed_state, a.state, a.failure, a.placement, a.ssh_host, a.ssh_port,
       a.ssh_user, a.created_at, a.expires_at, n.public_port_base, a.tags,
       a.published_ports AS "published_ports: Vec<Option<i32>>",
       a.stop_root_volume IS NOT NULL AS "stops!", a.cluster_id IS NOT NULL AS "in_cluster!",
       r.size_gib AS "root_gib?", r.price_per_gib_month_micro AS root_price_micro,
       r.currency AS "root_currency?",
       -- What a stop would keep: the first slot's disk, at the region's storage price.
       (SELECT s.nvme_size_bytes FROM resource_claims c
          JOIN node_resource_slots s
            ON s.id = c.slot_id OR (c.kind = 'baremetal' AND s.node_id = c.node_id)
        WHERE c.allocation_id = a.id
        ORDER BY s.slot_index LIMIT 1) AS boot_disk_bytes,
       sp.price_per_gib_month_micro AS "storage_price_micro?", sp.currency AS "storage_currency?",
       ui.started_at AS "running_since?", ui.ended_at AS "ran_until?",
       round(date_part('epoch', coalesce(ui.ended_at, now()) - ui.started_at))::bigint
         AS ran_for_s,
       -- As the list computes it (`allocation_page`): rounded down to the cent.
       div((ui.price_per_hour_minor + ui.fee_per_hour_minor)::numeric
           * round(date_part('epoch', coalesce(ui.ended_at, now()) - ui.started_at)
                   * 1e6)::bigint,
           3600000000)::bigint AS cost_minor,
       (SELECT coalesce(json_agg(json_build_object(
                   'from', t.from_state, 'to', t.to_state, 'at', t.at,
                   'after_ms', t.after_ms, 'detail', t.detail) ORDER BY t.id), '[]')
        FROM (SELECT id, from_state, to_state, at, detail,
                     coalesce((extract(epoch FROM at - lag(at) OVER (ORDER BY id))
                               * 1000)::bigint, 0) AS after_ms
              FROM allocation_transitions WHERE allocation_id = a.id) t
       ) AS "transitions!: Json<Vec<Transition>>",
       (SELECT coalesce(json_agg(json_build_object(
                   'task', t.kind, 'phase', p.phase, 'status', p.status,
                   'elapsed_ms', p.elapsed_ms, 'detail', p.detail) ORDER BY p.id), '[]')
        FROM agent_task_phases p JOIN agent_tasks t ON t.id = p.task_id
        WHERE t.allocation_id = a.id AND p.status <> 'started'
       ) AS "phases!: Json<Vec<Phase>>",
       (SELECT json_build_object(
                   'kind', t.kind, 'state', t.state, 'error', t.error,
                   'last_phase', (SELECT p.phase || ' ' || p.status
                                  FROM agent_task_phases p
                                  WHERE p.task_id = t.id ORDER BY p.id DESC LIMIT 1))
        FROM agent_tasks t WHERE t.allocation_id = a.id
        ORDER BY t.created_at DESC LIMIT 1
       ) AS "execution: Json<Execution>",
       (SELECT coalesce(json_agg(json_build_object(
                   'slot_index', s.slot_index, 'nvme_serial', c.nvme_serial,
                   'wipe_method', c.wipe_method, 'wipe_verified', c.wipe_verified,
                   'gpu_reset', c.gpu_reset, 'firmware_ok', c.firmware_ok,
                   'wipe_ms', c.wipe_ms, 'verified_samples', c.verified_samples,
                   'gpu_firmware', c.gpu_firmware, 'signature', c.signature,
                   'received_at', c.received_at) ORDER BY s.slot_index), '[]')
        FROM cleanup_certificates c JOIN node_resource_slots s ON s.id = c.slot_id
        WHERE c.allocation_id = a.id
       ) AS "certificates!: Json<Vec<Certificate>>",
       (SELECT json_build_object('percent', u.gpu_util_pct, 'at', u.at)
        FROM allocation_gpu_utilisation u
        WHERE u.allocation_id = a.id ORDER BY u.at DESC LIMIT 1
       ) AS "gpu_utilisation: Json<GpuUtilisation>",
       (SELECT coalesce(json_agg(json_build_object(
                   'slot_index', h.slot_index, 'detail', h.detail,
                   'observed_at', h.observed_at,
                   'out_of_service', h.took_out_of_service)
                   ORDER BY h.recorded_at DESC, h.observed_at DESC), '[]')
        FROM (SELECT s.slot_index, e.detail, e.observed_at, e.took_out_of_service,
                     e.recorded_at
              FROM resource_claims c
              JOIN gpu_health_events e
                ON e.node_id = c.node_id
               AND (c.slot_id IS NULL OR e.slot_id = c.slot_id)
               AND e.recorded_at >= c.claimed_at
               AND (c.released_at IS NULL OR e.recorded_at <= c.released_at)
              JOIN node_resource_slots s ON s.id = e.slot_id
              WHERE c.allocation_id = a.id
              ORDER BY e.recorded_at DESC, e.observed_at DESC LIMIT 20) h
       ) AS "gpu_health!: Json<Vec<GpuHealthNotice>>"
FROM allocations a JOIN skus s ON s.id = a.sku_id JOIN nodes n ON n.id = a.node_id
LEFT JOIN usage_intervals ui ON ui.allocation_id = a.id
LEFT JOIN volumes r ON r.id = a.stop_root_volume
LEFT JOIN storage_prices sp ON sp.region = a.region
     JOIN listing_versions v ON v.id = a.listing_version_id
     JOIN listings l ON l.id = v.listing_id
WHERE a.id = $1 AND a.project_id = $2
