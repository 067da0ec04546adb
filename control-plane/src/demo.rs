//! Demo data for `cargo xtask dev`: two tenants, their projects and four people. Idempotent:
//! fixed ids and `ON CONFLICT DO NOTHING`, so running it twice changes nothing (and writes no
//! second audit record).

use serde_json::json;
use sqlx::PgPool;
use uuid::{Uuid, uuid};

use crate::audit::{self, Actor, AuditEntry};
use crate::error::Result;
use crate::ids::{ProjectId, TenantId, UserId};
use crate::naming::Naming;

pub const ACME: TenantId = TenantId(uuid!("0a0e0000-0000-4000-8000-000000000001"));
pub const GLOBEX: TenantId = TenantId(uuid!("0a0e0000-0000-4000-8000-000000000002"));
pub const ACME_RESEARCH: ProjectId = ProjectId(uuid!("0a0e0000-0000-4000-8001-000000000001"));
pub const ACME_INFERENCE: ProjectId = ProjectId(uuid!("0a0e0000-0000-4000-8001-000000000002"));
pub const GLOBEX_DEFAULT: ProjectId = ProjectId(uuid!("0a0e0000-0000-4000-8001-000000000003"));

struct DemoTenant {
    id: TenantId,
    slug: &'static str,
    name: &'static str,
}

struct DemoProject {
    id: ProjectId,
    tenant: TenantId,
    slug: &'static str,
    name: &'static str,
}

struct DemoUser {
    id: Uuid,
    email: &'static str,
    name: &'static str,
    tenant: TenantId,
    tenant_role: &'static str,
    projects: &'static [(ProjectId, &'static str)],
}

const TENANTS: &[DemoTenant] = &[
    DemoTenant {
        id: ACME,
        slug: "acme",
        name: "Acme Corp",
    },
    DemoTenant {
        id: GLOBEX,
        slug: "globex",
        name: "Globex",
    },
];

const PROJECTS: &[DemoProject] = &[
    DemoProject {
        id: ACME_RESEARCH,
        tenant: ACME,
        slug: "research",
        name: "Research",
    },
    DemoProject {
        id: ACME_INFERENCE,
        tenant: ACME,
        slug: "inference",
        name: "Inference",
    },
    DemoProject {
        id: GLOBEX_DEFAULT,
        tenant: GLOBEX,
        slug: "default",
        name: "Default",
    },
];

const USERS: &[DemoUser] = &[
    DemoUser {
        id: uuid!("0a0e0000-0000-4000-8002-000000000001"),
        email: "alice@acme.example",
        name: "Alice Anders",
        tenant: ACME,
        tenant_role: "admin",
        projects: &[(ACME_RESEARCH, "admin"), (ACME_INFERENCE, "admin")],
    },
    DemoUser {
        id: uuid!("0a0e0000-0000-4000-8002-000000000002"),
        email: "bob@acme.example",
        name: "Bob Baker",
        tenant: ACME,
        tenant_role: "member",
        projects: &[(ACME_RESEARCH, "operator")],
    },
    DemoUser {
        id: uuid!("0a0e0000-0000-4000-8002-000000000003"),
        email: "fiona@acme.example",
        name: "Fiona Fischer",
        tenant: ACME,
        tenant_role: "finance",
        projects: &[],
    },
    DemoUser {
        id: uuid!("0a0e0000-0000-4000-8002-000000000004"),
        email: "carol@globex.example",
        name: "Carol Chen",
        tenant: GLOBEX,
        tenant_role: "admin",
        projects: &[(GLOBEX_DEFAULT, "admin")],
    },
];

/// What one run of [`seed`] created.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub tenants: usize,
    pub projects: usize,
    pub users: usize,
}

#[tracing::instrument(skip_all)]
pub async fn seed(pool: &PgPool, naming: &Naming) -> Result<SeedReport> {
    let mut tx = pool.begin().await?;
    let mut report = SeedReport::default();

    for t in TENANTS {
        let created = sqlx::query_scalar!(
            "INSERT INTO tenants (id, slug, display_name) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING RETURNING id",
            t.id as TenantId,
            t.slug,
            t.name,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if created.is_some() {
            report.tenants += 1;
            let resource = naming.tenant(t.id);
            audit::record(
                &mut tx,
                AuditEntry {
                    actor: Actor::System,
                    action: "tenant.create",
                    resource: &resource,
                    before: None,
                    after: Some(json!({ "slug": t.slug, "display_name": t.name })),
                    request_id: None,
                },
            )
            .await?;
        }
    }

    for p in PROJECTS {
        let created = sqlx::query_scalar!(
            "INSERT INTO projects (id, tenant_id, slug, display_name) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING RETURNING id",
            p.id as ProjectId,
            p.tenant as TenantId,
            p.slug,
            p.name,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if created.is_some() {
            report.projects += 1;
            let resource = naming.project(p.tenant, p.id);
            audit::record(
                &mut tx,
                AuditEntry {
                    actor: Actor::System,
                    action: "project.create",
                    resource: &resource,
                    before: None,
                    after: Some(json!({ "slug": p.slug, "display_name": p.name })),
                    request_id: None,
                },
            )
            .await?;
        }
    }

    for u in USERS {
        let created = sqlx::query_scalar!(
            "INSERT INTO users (id, email, display_name) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING RETURNING id",
            UserId(u.id) as UserId,
            u.email,
            u.name,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if created.is_some() {
            report.users += 1;
        }
        sqlx::query!(
            "INSERT INTO tenant_memberships (tenant_id, user_id, role) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            u.tenant as TenantId,
            UserId(u.id) as UserId,
            u.tenant_role,
        )
        .execute(&mut *tx)
        .await?;
        for (project, role) in u.projects {
            sqlx::query!(
                "INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
                 VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                *project as ProjectId,
                u.tenant as TenantId,
                UserId(u.id) as UserId,
                role,
            )
            .execute(&mut *tx)
            .await?;
        }
    }

    seed_catalog(&mut tx).await?;
    tx.commit().await?;
    Ok(report)
}

/// `(name, display name, shape, GPU model, GPUs, vCPUs, memory GiB, NVMe GiB, family, cents/h)`
type DemoSku = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    i32,
    i32,
    i32,
    i32,
    &'static str,
    i64,
);

const H100: &str = "NVIDIA H100 80GB HBM3";
const L40S: &str = "NVIDIA L40S";
const SKUS: &[DemoSku] = &[
    (
        "h100.1x",
        "1× H100 80GB",
        "gpu_slice",
        H100,
        1,
        22,
        240,
        3500,
        "hgx-h100-8x",
        299,
    ),
    (
        "h100.2x",
        "2× H100 80GB (NVLink)",
        "gpu_slice",
        H100,
        2,
        44,
        480,
        7000,
        "hgx-h100-8x",
        598,
    ),
    (
        "h100.4x",
        "4× H100 80GB (NVLink)",
        "gpu_slice",
        H100,
        4,
        88,
        960,
        14000,
        "hgx-h100-8x",
        1196,
    ),
    (
        "h100.8x",
        "8× H100 80GB (NVLink)",
        "gpu_slice",
        H100,
        8,
        176,
        1920,
        28000,
        "hgx-h100-8x",
        2392,
    ),
    (
        "h100.8x.metal",
        "HGX H100 bare metal",
        "baremetal",
        H100,
        8,
        192,
        2048,
        28000,
        "hgx-h100-8x",
        2200,
    ),
    (
        "l40s.1x",
        "1× L40S 48GB",
        "gpu_slice",
        L40S,
        1,
        28,
        240,
        7000,
        "pcie-l40s-4x",
        119,
    ),
    (
        "l40s.2x",
        "2× L40S 48GB",
        "gpu_slice",
        L40S,
        2,
        56,
        480,
        14000,
        "pcie-l40s-4x",
        238,
    ),
];

/// Demo images and active SKUs in eu-west-1 and us-east-1 (idempotent; edits are kept).
async fn seed_catalog(tx: &mut sqlx::PgConnection) -> Result<()> {
    for (name, display, source, user) in [
        (
            "ubuntu-24.04-cuda",
            "Ubuntu 24.04 + CUDA 12.6",
            "/var/lib/gpuaas/images/ubuntu-24.04-cuda-12.6.qcow2",
            "ubuntu",
        ),
        (
            "rocky-9-cuda",
            "Rocky Linux 9 + CUDA 12.6",
            "/var/lib/gpuaas/images/rocky-9-cuda-12.6.qcow2",
            "rocky",
        ),
    ] {
        sqlx::query!(
            "INSERT INTO images (id, name, display_name, source, ssh_user)
             VALUES (gen_random_uuid(), $1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
            name,
            display,
            source,
            user
        )
        .execute(&mut *tx)
        .await?;
    }
    for &(name, display, shape, model, gpus, vcpus, mem, nvme, family, cents) in SKUS {
        sqlx::query!(
            "INSERT INTO skus (id, name, display_name, shape, gpu_model, gpu_count, vcpus,
                               memory_gib, nvme_gib, regions, families, price_per_hour_minor,
                               currency, state)
             VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, $7, $8,
                     ARRAY['eu-west-1', 'us-east-1'], ARRAY[$9], $10, 'USD', 'active')
             ON CONFLICT (name) DO NOTHING",
            name,
            display,
            shape,
            model,
            gpus,
            vcpus,
            mem,
            nvme,
            family,
            cents
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

struct DemoProvider {
    tenant: TenantId,
    client_id: &'static str,
    domain: &'static str,
    /// (group, tenant role)
    mappings: &'static [(&'static str, &'static str)],
}

const PROVIDERS: &[DemoProvider] = &[
    DemoProvider {
        tenant: ACME,
        client_id: "portal-acme",
        domain: "acme.example",
        mappings: &[("acme-admins", "admin"), ("acme-finance", "finance")],
    },
    DemoProvider {
        tenant: GLOBEX,
        client_id: "portal-globex",
        domain: "globex.example",
        mappings: &[("globex-admins", "admin")],
    },
];

/// Registers Acme and Globex with the demo identity provider (`demo-idp/provider.mjs`):
/// clients `portal-acme` and `portal-globex`, their email domains, and group-to-role
/// mappings. Idempotent; a changed issuer or secret (a new dev port, a new test run) is
/// updated in place.
#[tracing::instrument(skip(pool, secret))]
pub async fn seed_identity_providers(pool: &PgPool, issuer: &str, secret: &str) -> Result<()> {
    let mut tx = pool.begin().await?;
    for &DemoProvider {
        tenant,
        client_id,
        domain,
        mappings,
    } in PROVIDERS
    {
        sqlx::query!(
            "INSERT INTO identity_providers (tenant_id, issuer_url, client_id, client_secret)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant_id) DO UPDATE
             SET issuer_url = EXCLUDED.issuer_url, client_id = EXCLUDED.client_id,
                 client_secret = EXCLUDED.client_secret, updated_at = now()",
            tenant as TenantId,
            issuer,
            client_id,
            secret,
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "INSERT INTO tenant_email_domains (domain, tenant_id) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            domain,
            tenant as TenantId,
        )
        .execute(&mut *tx)
        .await?;
        for (value, role) in mappings {
            sqlx::query!(
                "INSERT INTO identity_provider_role_mappings (tenant_id, claim_value, role)
                 VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                tenant as TenantId,
                *value,
                *role,
            )
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// One host of the demo fleet that `cargo xtask dev` runs as simulated agents.
#[derive(Clone, Copy, Debug)]
pub struct DemoHost {
    pub hostname: &'static str,
    pub region: &'static str,
    pub family: &'static str,
    pub shapes: &'static [&'static str],
    /// The node agent's topology fixture (`node-agent/fixtures/…`).
    pub fixture: &'static str,
}

/// Two HGX H100 hosts and one 4×L40S host selling slices, and one HGX host offered as bare
/// metal only.
pub const DEMO_FLEET: [DemoHost; 4] = [
    DemoHost {
        hostname: "hgx-demo-01",
        region: "eu-west-1",
        family: "hgx-h100-8x",
        shapes: &["gpu_slice"],
        fixture: "hgx-h100-8x",
    },
    DemoHost {
        hostname: "hgx-demo-02",
        region: "eu-west-1",
        family: "hgx-h100-8x",
        shapes: &["gpu_slice"],
        fixture: "hgx-h100-8x",
    },
    DemoHost {
        hostname: "l40s-demo-01",
        region: "us-east-1",
        family: "pcie-l40s-4x",
        shapes: &["gpu_slice"],
        fixture: "pcie-l40s-4x",
    },
    DemoHost {
        hostname: "metal-demo-01",
        region: "eu-west-1",
        family: "hgx-h100-8x",
        shapes: &["baremetal"],
        fixture: "hgx-h100-8x",
    },
];

/// The wipe policy the demo fleet's slots are approved with (the simulated NVMe namespaces
/// are files, so the agent overwrites and reads back).
pub const DEMO_WIPE_POLICY: &str = "overwrite-verify";

impl crate::ControlPlane {
    /// The platform operator (or admin) with this email, for the demo fleet's set-up.
    pub async fn demo_operator(
        &self,
        email: &str,
    ) -> Result<crate::auth::Platform<crate::auth::PlatformOperators>> {
        let id = sqlx::query_scalar!(
            r#"SELECT id AS "id: UserId" FROM users WHERE lower(email) = lower($1)"#,
            email
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(crate::Error::NotFound { what: "user" })?;
        let p = self
            .principal(id)
            .await?
            .ok_or(crate::Error::NotFound { what: "user" })?;
        p.platform::<crate::auth::PlatformOperators>()
    }

    /// The node enrolled under a demo hostname, if any.
    pub async fn demo_node_id(&self, hostname: &str) -> Result<Option<crate::NodeId>> {
        Ok(sqlx::query_scalar!(
            r#"SELECT id AS "id: crate::NodeId" FROM nodes WHERE hostname = $1"#,
            hostname
        )
        .fetch_optional(self.pool())
        .await?)
    }

    /// Enrols the demo hosts named in `hosts` (or issues a fresh bootstrap token to those
    /// already enrolled); returns (host, token) for each.
    pub async fn demo_fleet_tokens(
        &self,
        who: &crate::auth::Platform<crate::auth::PlatformOperators>,
        hosts: &[&str],
    ) -> Result<Vec<(DemoHost, String)>> {
        let mut out = Vec::new();
        for h in DEMO_FLEET.iter().filter(|h| hosts.contains(&h.hostname)) {
            let enrolment = match self.demo_node_id(h.hostname).await? {
                Some(node) => self.reissue_bootstrap_token(who, node, None).await?,
                None => {
                    let new = crate::fleet::NewNode {
                        hostname: h.hostname.into(),
                        region: h.region.into(),
                        rack: "demo".into(),
                        family: h.family.into(),
                        capacity_shapes: h.shapes.iter().map(|s| s.to_string()).collect(),
                    };
                    self.enrol_node(who, &new, None).await?
                }
            };
            out.push((*h, enrolment.bootstrap_token));
        }
        Ok(out)
    }

    /// Approves every pending slot-map proposal of a demo host (all slots, the demo wipe
    /// policy), as `who`; audited like any approval. Returns how many hosts have approved
    /// slots afterwards.
    pub async fn demo_fleet_approve(
        &self,
        who: &crate::auth::Platform<crate::auth::PlatformOperators>,
    ) -> Result<usize> {
        let names: Vec<String> = DEMO_FLEET.iter().map(|h| h.hostname.to_string()).collect();
        let pending = sqlx::query!(
            r#"SELECT p.node_id AS "node_id: crate::NodeId", p.generation
               FROM slot_map_proposals p JOIN nodes n ON n.id = p.node_id
               WHERE n.hostname = ANY($1) AND p.status = 'pending'"#,
            &names
        )
        .fetch_all(self.pool())
        .await?;
        for p in pending {
            let decision = crate::fleet::SlotMapDecision::Approve {
                only: None,
                wipe_policy: Some(DEMO_WIPE_POLICY.into()),
            };
            self.decide_slot_map(who, p.node_id, p.generation, &decision, None)
                .await?;
        }
        let ready = sqlx::query_scalar!(
            r#"SELECT count(DISTINCT n.id) AS "n!" FROM nodes n
               JOIN node_resource_slots s ON s.node_id = n.id AND s.retired_at IS NULL
               WHERE n.hostname = ANY($1)"#,
            &names
        )
        .fetch_one(self.pool())
        .await?;
        Ok(ready as usize)
    }
}

/// Demo billing history (idempotent): last month's and this month's finished runs for Acme
/// and Globex, imported as usage (see [`crate::billing::history`]). The billing worker rates
/// them, closes last month into invoices and syncs those to Stripe.
#[tracing::instrument(skip_all)]
pub async fn seed_billing(pool: &PgPool, now: time::OffsetDateTime) -> Result<usize> {
    use crate::billing::history::{ImportedRun, import_run};
    let (month, _) = crate::billing::month_bounds(now);
    let (last, _) = crate::billing::month_bounds(month - time::Duration::days(1));
    let h = time::Duration::hours;
    let bob = UserId(uuid!("0a0e0000-0000-4000-8002-000000000002"));
    let carol = UserId(uuid!("0a0e0000-0000-4000-8002-000000000004"));
    // (tenant, project, sku, name, start, hours, by): last month's runs, then this month's,
    // cut off two hours ago so nothing ends in the future.
    let runs: [(
        TenantId,
        ProjectId,
        &str,
        &str,
        time::OffsetDateTime,
        i64,
        UserId,
    ); 7] = [
        (
            ACME,
            ACME_RESEARCH,
            "h100.8x",
            "pretrain-7b",
            last + h(49),
            72,
            bob,
        ),
        (
            ACME,
            ACME_RESEARCH,
            "h100.1x",
            "notebook",
            last + h(24 * 3 + 9),
            230,
            bob,
        ),
        (
            ACME,
            ACME_INFERENCE,
            "l40s.1x",
            "serving",
            last + h(2),
            24 * 27,
            bob,
        ),
        (
            GLOBEX,
            GLOBEX_DEFAULT,
            "h100.2x",
            "sweep",
            last + h(24 * 10),
            120,
            carol,
        ),
        (
            ACME,
            ACME_RESEARCH,
            "h100.2x",
            "finetune",
            month + h(1),
            40,
            bob,
        ),
        (
            ACME,
            ACME_INFERENCE,
            "l40s.1x",
            "serving-v2",
            month,
            24 * 20,
            bob,
        ),
        (
            ACME,
            ACME_RESEARCH,
            "h100.1x",
            "eval",
            month + h(30),
            9,
            bob,
        ),
    ];
    let cutoff = now - h(2);
    let mut conn = pool.acquire().await?;
    let mut imported = 0;
    for (i, (tenant, project, sku, name, start, hours, by)) in runs.into_iter().enumerate() {
        let end = (start + h(hours)).min(cutoff);
        if end <= start {
            continue;
        }
        let key = format!("demo-{}-{i}", crate::billing::month_label(start.date()));
        import_run(
            &mut conn,
            &ImportedRun {
                tenant,
                project,
                sku,
                name,
                started_at: start,
                ended_at: end,
                price_per_hour_minor: None,
                by,
                key: &key,
            },
        )
        .await?;
        imported += 1;
    }
    Ok(imported)
}
