-- The isolation matrix's callers and resources, on top of the demo (tests/isolation.rs).

-- In each organization: a plain member, a viewer, an operator and an admin of its first
-- project (Acme: Research; Globex: Default), the organization's admin and its finance.
INSERT INTO users (id, email, display_name, platform_role)
SELECT gen_random_uuid(), 'm-' || r.name || '@' || t.domain, 'Matrix ' || r.name || ' ' || t.slug, NULL
FROM (VALUES ('acme', 'acme.example'), ('globex', 'globex.example')) AS t (slug, domain),
     (VALUES ('member'), ('viewer'), ('operator'), ('padmin'), ('orgadmin'), ('finance')) AS r (name);

INSERT INTO tenant_memberships (tenant_id, user_id, role)
SELECT t.id, u.id,
       CASE split_part(split_part(u.email, '@', 1), '-', 2)
           WHEN 'orgadmin' THEN 'admin' WHEN 'finance' THEN 'finance' ELSE 'member' END
FROM users u JOIN tenants t ON u.email LIKE 'm-%@' || t.slug || '.example';

INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
SELECT p.id, p.tenant_id, u.id,
       CASE split_part(split_part(u.email, '@', 1), '-', 2)
           WHEN 'viewer' THEN 'viewer' WHEN 'operator' THEN 'operator' ELSE 'admin' END
FROM users u
JOIN tenants t ON u.email LIKE 'm-%@' || t.slug || '.example'
JOIN projects p ON p.tenant_id = t.id AND p.slug IN ('research', 'default')
WHERE split_part(split_part(u.email, '@', 1), '-', 2) IN ('viewer', 'operator', 'padmin');

-- Platform staff.
INSERT INTO users (id, email, display_name, platform_role)
VALUES (gen_random_uuid(), 'm-operator@platform.example', 'Matrix platform operator', 'operator'),
       (gen_random_uuid(), 'm-finance@platform.example', 'Matrix platform finance', 'finance'),
       (gen_random_uuid(), 'm-admin@platform.example', 'Matrix platform admin', 'admin');

-- A node, and an allocation of Acme's Research placed on it.
INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, enrolled_by)
VALUES ('0a0e0000-0000-4000-800f-000000000001', 'matrix-01', 'eu-west-1', 'r1', 'hgx-h100-8x',
        ARRAY['gpu_slice'], (SELECT id FROM users WHERE email = 'm-operator@platform.example'));

INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                         listing_version_id, ssh_public_key, price_per_hour_minor, currency,
                         idempotency_key, request_fingerprint, requested_by, placement, state,
                         requested_at)
SELECT '0a0e0000-0000-4000-800f-000000000002', p.tenant_id, p.id, 'existing', s.id, 'gpu_slice', 1,
       'eu-west-1', '0a0e0000-0000-4000-800f-000000000001', v.id, 'k', 299, 'USD', 'existing', 'f',
       (SELECT id FROM users WHERE email = 'alice@acme.example'), '{}', 'placed', now()
FROM projects p, skus s, listing_versions v
WHERE p.slug = 'research' AND s.name = 'h100.1x'
  AND v.listing_id = (SELECT id FROM listings WHERE slug = 'ubuntu-24.04-cuda')
  AND v.state = 'published';

-- A break-glass account locked after failed sign-ins.
INSERT INTO users (id, email, display_name, platform_role)
VALUES (gen_random_uuid(), 'm-locked@platform.example', 'Matrix locked admin', 'admin');
INSERT INTO break_glass_credentials (user_id, password_hash, failed_attempts, locked_until)
SELECT id, '$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA', 5,
       now() + interval '15 minutes'
FROM users WHERE email = 'm-locked@platform.example';

-- An invitation to Acme's Research still waiting for its first sign-in.
INSERT INTO project_invitations (id, tenant_id, project_id, email, role, invited_by)
SELECT gen_random_uuid(), p.tenant_id, p.id, 'm-invited@acme.example', 'viewer',
       (SELECT id FROM users WHERE email = 'alice@acme.example')
FROM projects p WHERE p.slug = 'research';

-- A volume of Acme's Research, available, in the allocation's region.
INSERT INTO volumes (id, tenant_id, project_id, region, name, size_gib, idempotency_key,
                     request_fingerprint, created_by, price_per_gib_month_micro, currency)
SELECT '0a0e0000-0000-4000-800f-000000000003', p.tenant_id, p.id, 'eu-west-1', 'matrix-data', 10,
       'matrix-volume', 'f', (SELECT id FROM users WHERE email = 'alice@acme.example'), 100000, 'USD'
FROM projects p WHERE p.slug = 'research';
UPDATE volumes SET state = 'available', backend_size_gib = 10
WHERE id = '0a0e0000-0000-4000-800f-000000000003';

-- Another, with an available snapshot.
INSERT INTO volumes (id, tenant_id, project_id, region, name, size_gib, idempotency_key,
                     request_fingerprint, created_by, price_per_gib_month_micro, currency)
SELECT '0a0e0000-0000-4000-800f-000000000005', p.tenant_id, p.id, 'eu-west-1', 'matrix-kept', 10,
       'matrix-kept', 'f', (SELECT id FROM users WHERE email = 'alice@acme.example'), 100000, 'USD'
FROM projects p WHERE p.slug = 'research';
UPDATE volumes SET state = 'available', backend_size_gib = 10
WHERE id = '0a0e0000-0000-4000-800f-000000000005';
INSERT INTO volume_snapshots (id, volume_id, tenant_id, project_id, region, name, size_gib,
                              price_per_gib_month_micro, currency, idempotency_key,
                              request_fingerprint, created_by)
SELECT '0a0e0000-0000-4000-800f-000000000004', v.id, v.tenant_id, v.project_id, v.region,
       'matrix-snap', 10, 100000, 'USD', 'matrix-snapshot', 'f', v.created_by
FROM volumes v WHERE v.id = '0a0e0000-0000-4000-800f-000000000005';
UPDATE volume_snapshots SET state = 'available' WHERE id = '0a0e0000-0000-4000-800f-000000000004';

-- A cluster of Acme's Research: two members on the matrix node, which has a fabric place.
-- One transaction: the database checks at commit that a cluster has all its members.
BEGIN;
INSERT INTO node_fabric_places (node_id, fabric, spine_group, leaf, source, approved_by)
VALUES ('0a0e0000-0000-4000-800f-000000000001', 'ib0', 's1', 'l1', 'operator',
        (SELECT id FROM users WHERE email = 'm-operator@platform.example'));
INSERT INTO clusters (id, tenant_id, project_id, name, sku_id, region, size, locality,
                      locality_required, fabric, placed_within, placement_why, idempotency_key,
                      request_fingerprint, requested_by)
SELECT '0a0e0000-0000-4000-800f-000000000006', p.tenant_id, p.id, 'matrix-ring', s.id, 'eu-west-1',
       2, 'leaf', true, 'ib0', 'leaf', '2 members on 1 leaf switch', 'matrix-cluster', 'f',
       (SELECT id FROM users WHERE email = 'alice@acme.example')
FROM projects p, skus s WHERE p.slug = 'research' AND s.name = 'h100.1x';
INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                         listing_version_id, ssh_public_key, price_per_hour_minor, currency,
                         idempotency_key, request_fingerprint, requested_by, placement, state,
                         requested_at, cluster_id, cluster_index)
SELECT gen_random_uuid(), p.tenant_id, p.id, 'matrix-ring-' || i, s.id, 'gpu_slice', 1,
       'eu-west-1', '0a0e0000-0000-4000-800f-000000000001', v.id, 'k', 299, 'USD',
       'matrix-cluster-' || i, 'f', (SELECT id FROM users WHERE email = 'alice@acme.example'), '{}',
       'placed', now(), '0a0e0000-0000-4000-800f-000000000006', i
FROM projects p, skus s, listing_versions v, generate_series(1, 2) AS i
WHERE p.slug = 'research' AND s.name = 'h100.1x'
  AND v.listing_id = (SELECT id FROM listings WHERE slug = 'ubuntu-24.04-cuda')
  AND v.state = 'published';
COMMIT;
