//! Demo data for `cargo xtask dev`: two tenants, their projects and four people. Idempotent:
//! fixed ids and `ON CONFLICT DO NOTHING`, so running it twice changes nothing (and writes no
//! second audit record).

use crate::prelude::*;

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

/// Seeding the demo, on the control plane's handle.
#[allow(async_fn_in_trait)]
pub trait DemoApi {
    /// The demo tenants, SKUs, listings and fleet ([`seed`]); idempotent.
    async fn seed_demo(&self) -> Result<SeedReport>;
    /// The demo organizations' identity providers at `issuer` ([`seed_identity_providers`]).
    async fn seed_demo_identity_providers(&self, issuer: &str, secret: &str) -> Result<()>;

    /// The platform operator (or admin) with this email, for the demo fleet's set-up.
    async fn demo_operator(
        &self,
        email: &str,
    ) -> Result<crate::auth::Platform<crate::auth::PlatformOperators>>;

    /// The node enrolled under a demo hostname, if any.
    async fn demo_node_id(&self, hostname: &str) -> Result<Option<crate::NodeId>>;

    /// Enrols the demo hosts named in `hosts` (or issues a fresh bootstrap token to those
    /// already enrolled); returns (host, token) for each.
    async fn demo_fleet_tokens(
        &self,
        who: &crate::auth::Platform<crate::auth::PlatformOperators>,
        hosts: &[&str],
    ) -> Result<Vec<(DemoHost, String)>>;

    /// Approves every pending slot-map proposal of a demo host (all slots, the demo wipe
    /// policy), as `who`; audited like any approval. Returns how many hosts have approved
    /// slots afterwards.
    async fn demo_fleet_approve(
        &self,
        who: &crate::auth::Platform<crate::auth::PlatformOperators>,
    ) -> Result<usize>;

    /// An API token made by the person with this email for their (first) organization, as
    /// the tokens page would make it (the same rules: only admins may); returns its secret.
    /// For trying the API and for the API's test run.
    async fn demo_api_token(
        &self,
        email: &str,
        scopes: &[crate::api_tokens::TokenScope],
        days: u32,
    ) -> Result<String>;
}

/// A demo person, signed in, found by email.
async fn demo_principal(cp: &crate::ControlPlane, email: &str) -> Result<crate::auth::Principal> {
    let id = sqlx::query_scalar!(
        r#"SELECT id AS "id: UserId" FROM users WHERE lower(email) = lower($1)"#,
        email
    )
    .fetch_optional(cp.pool())
    .await?
    .ok_or(crate::Error::NotFound { what: "user" })?;
    cp.principal(id)
        .await?
        .ok_or(crate::Error::NotFound { what: "user" })
}

impl DemoApi for crate::ControlPlane {
    async fn seed_demo(&self) -> Result<SeedReport> {
        seed(self.pool().sqlx(), self.naming()).await
    }

    async fn seed_demo_identity_providers(&self, issuer: &str, secret: &str) -> Result<()> {
        seed_identity_providers(self.pool().sqlx(), self.secrets(), issuer, secret).await
    }

    async fn demo_api_token(
        &self,
        email: &str,
        scopes: &[crate::api_tokens::TokenScope],
        days: u32,
    ) -> Result<String> {
        let p = demo_principal(self, email).await?;
        // Their home organization, read with the principal.
        let tenant = p
            .home
            .as_ref()
            .map(|h| h.id)
            .ok_or(crate::Error::NotFound {
                what: "organization",
            })?;
        let made = self
            .create_api_token(
                &p,
                tenant,
                &crate::api_tokens::NewToken {
                    name: "demo".into(),
                    project: None,
                    scopes: scopes.to_vec(),
                    days,
                },
                None,
            )
            .await?;
        Ok(made.secret)
    }

    async fn demo_operator(
        &self,
        email: &str,
    ) -> Result<crate::auth::Platform<crate::auth::PlatformOperators>> {
        let p = demo_principal(self, email).await?;
        p.platform::<crate::auth::PlatformOperators>()
    }

    async fn demo_node_id(&self, hostname: &str) -> Result<Option<crate::NodeId>> {
        Ok(sqlx::query_scalar!(
            r#"SELECT id AS "id: crate::NodeId" FROM nodes WHERE hostname = $1"#,
            hostname
        )
        .fetch_optional(self.pool())
        .await?)
    }

    async fn demo_fleet_tokens(
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

    async fn demo_fleet_approve(
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
        if ready as usize == DEMO_FLEET.len() {
            demo_fabric(self, who).await?;
        }
        Ok(ready as usize)
    }
}

/// The demo fabric, once (an operator's later moves stay theirs): eu-west-1's two HGX slice
/// hosts on leaves l1 and l2 under spine s1, so that a cluster of four 2-GPU members fits on
/// one leaf and one of eight needs the spine.
async fn demo_fabric(
    cp: &crate::ControlPlane,
    who: &crate::auth::Platform<crate::auth::PlatformOperators>,
) -> Result<()> {
    let hosts = ["hgx-demo-01", "hgx-demo-02"].map(String::from);
    let placed = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM node_fabric_places p JOIN nodes n ON n.id = p.node_id
           WHERE n.hostname = ANY($1)"#,
        &hosts
    )
    .fetch_one(cp.pool())
    .await?;
    if placed == 0 {
        cp.import_fabric(
            who,
            DEMO_FABRIC,
            crate::fleet::TopologyFormat::SlurmTopology,
            "SwitchName=l1 Nodes=hgx-demo-01\nSwitchName=l2 Nodes=hgx-demo-02\n\
             SwitchName=s1 Switches=l[1-2]\n",
            None,
        )
        .await?;
    }
    Ok(())
}

/// The fabric the demo fleet's eu-west-1 slice hosts are placed on.
pub const DEMO_FABRIC: &str = "ib-demo";

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

/// Active SKUs in eu-west-1 and us-east-1, their storage prices, and the marketplace
/// (idempotent; edits are kept).
async fn seed_catalog(tx: &mut sqlx::PgConnection) -> Result<()> {
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
    // Block storage at 0.10 USD per GiB-month in both regions.
    sqlx::query!(
        "INSERT INTO storage_prices (region, currency, price_per_gib_month_micro)
         SELECT r, 'USD', 100000 FROM unnest(ARRAY['eu-west-1', 'us-east-1']) AS r
         ON CONFLICT (region) DO NOTHING"
    )
    .execute(&mut *tx)
    .await?;
    seed_marketplace(tx).await
}

/// One demo listing: the listing, then its versions oldest first.
struct DemoListing {
    slug: &'static str,
    name: &'static str,
    category: &'static str,
    /// `None`: the platform.
    publisher: Option<TenantId>,
    logo: Option<(&'static str, &'static str)>,
    versions: &'static [DemoVersion],
}

struct DemoVersion {
    version: &'static str,
    summary: &'static str,
    description: &'static str,
    notes: &'static str,
    image: &'static str,
    user: &'static str,
    cloud_init: &'static str,
    shapes: &'static [&'static str],
    gpu_models: &'static [&'static str],
    min_gpus: i32,
    fee_cents: i64,
    /// The guest ports a launch publishes unless the tenant changes them.
    ports: &'static [i32],
    /// Where curation left it.
    state: &'static str,
}

const OS_SHAPES: &[&str] = &["gpu_slice", "baremetal"];

const LISTINGS: &[DemoListing] = &[
    DemoListing {
        slug: "ubuntu-24.04-cuda",
        name: "Ubuntu 24.04 + CUDA 12.6",
        category: "os_image",
        publisher: None,
        logo: None,
        versions: &[DemoVersion {
            version: "1",
            summary: "Ubuntu 24.04 LTS with the NVIDIA 560 driver and CUDA 12.6.",
            description: "The platform's default image: **Ubuntu 24.04 LTS**, the NVIDIA data-center driver, CUDA 12.6, `nvidia-container-toolkit` and Docker.",
            notes: "",
            image: "/var/lib/gpuaas/images/ubuntu-24.04-cuda-12.6.qcow2",
            user: "ubuntu",
            cloud_init: "{}",
            shapes: OS_SHAPES,
            gpu_models: &[],
            min_gpus: 1,
            fee_cents: 0,
            ports: &[],
            state: "published",
        }],
    },
    DemoListing {
        slug: "rocky-9-cuda",
        name: "Rocky Linux 9 + CUDA 12.6",
        category: "os_image",
        publisher: None,
        logo: None,
        versions: &[DemoVersion {
            version: "1",
            summary: "Rocky Linux 9 with the NVIDIA 560 driver and CUDA 12.6.",
            description: "Rocky Linux 9, the NVIDIA data-center driver and CUDA 12.6.",
            notes: "",
            image: "/var/lib/gpuaas/images/rocky-9-cuda-12.6.qcow2",
            user: "rocky",
            cloud_init: "{}",
            shapes: OS_SHAPES,
            gpu_models: &[],
            min_gpus: 1,
            fee_cents: 0,
            ports: &[],
            state: "published",
        }],
    },
    DemoListing {
        slug: "pytorch",
        name: "PyTorch",
        category: "ml_stack",
        publisher: None,
        logo: Some(("#ee4c2c", "Py")),
        versions: &[
            DemoVersion {
                version: "2.4",
                summary: "PyTorch 2.4 with CUDA 12.4, cuDNN 9 and NCCL, ready for torchrun.",
                description: "PyTorch 2.4 on Ubuntu 24.04.",
                notes: "First release.",
                image: "/var/lib/gpuaas/images/pytorch-2.4-cuda-12.4.qcow2",
                user: "ubuntu",
                cloud_init: r#"{"packages": ["nvtop"]}"#,
                shapes: OS_SHAPES,
                gpu_models: &[],
                min_gpus: 1,
                fee_cents: 25,
                ports: &[],
                state: "published",
            },
            DemoVersion {
                version: "2.5",
                summary: "PyTorch 2.5 with CUDA 12.6, cuDNN 9, NCCL and torchrun, on Ubuntu 24.04.",
                description: "## PyTorch, ready to train\n\nA tuned **PyTorch 2.5** environment:\n\n- CUDA 12.6, cuDNN 9, NCCL 2.23 wired for NVLink and InfiniBand\n- `torchrun` and `torch.compile` ready; `python3 -c 'import torch; print(torch.cuda.device_count())'` shows your GPUs\n- JupyterLab on port 8888 behind your SSH tunnel\n\nSee the [PyTorch documentation](https://pytorch.org/docs/2.5/).",
                notes: "CUDA 12.6 and NCCL 2.23; `torch.compile` cache on the NVMe.",
                image: "/var/lib/gpuaas/images/pytorch-2.5-cuda-12.6.qcow2",
                user: "ubuntu",
                cloud_init: r#"{"packages": ["nvtop", "python3-venv"], "final_message": "PyTorch 2.5 is ready; torch.compile caches in /mnt/nvme/torch-cache."}"#,
                shapes: OS_SHAPES,
                gpu_models: &[],
                min_gpus: 1,
                fee_cents: 25,
                ports: &[],
                state: "published",
            },
        ],
    },
    DemoListing {
        slug: "jupyterlab",
        name: "JupyterLab",
        category: "ml_stack",
        publisher: None,
        logo: Some(("#f37726", "Ju")),
        versions: &[DemoVersion {
            version: "4.3",
            summary: "JupyterLab 4.3 with PyTorch, JAX and RAPIDS kernels.",
            description: "JupyterLab listens on `localhost:8888`; reach it with `ssh -L 8888:localhost:8888`.",
            notes: "",
            image: "/var/lib/gpuaas/images/jupyterlab-4.3.qcow2",
            user: "ubuntu",
            cloud_init: r#"{"final_message": "JupyterLab listens on 127.0.0.1:8888; reach it through an SSH tunnel."}"#,
            shapes: &["gpu_slice"],
            gpu_models: &[],
            min_gpus: 1,
            fee_cents: 0,
            ports: &[],
            state: "published",
        }],
    },
    DemoListing {
        slug: "vllm",
        name: "vLLM inference server",
        category: "ml_stack",
        publisher: Some(GLOBEX),
        logo: Some(("#30a2ff", "vL")),
        versions: &[
            DemoVersion {
                version: "0.6.4",
                summary: "An OpenAI-compatible LLM server with paged attention, tuned for H100.",
                description: "Serves any Hugging Face model with **vLLM 0.6.4**: `vllm serve <model>` listens on port 8000.",
                notes: "",
                image: "/var/lib/gpuaas/images/vllm-0.6.4.qcow2",
                user: "ubuntu",
                cloud_init: "{}",
                shapes: &["gpu_slice"],
                gpu_models: &[H100],
                min_gpus: 1,
                fee_cents: 40,
                ports: &[8000],
                state: "published",
            },
            DemoVersion {
                version: "0.6.5",
                summary: "An OpenAI-compatible LLM server with paged attention, tuned for H100 and H200.",
                description: "Serves any Hugging Face model with **vLLM 0.6.5**: `vllm serve <model>` listens on port 8000.",
                notes: "vLLM 0.6.5; H200 support; the fee goes up to 0.45 USD.",
                image: "/var/lib/gpuaas/images/vllm-0.6.5.qcow2",
                user: "ubuntu",
                cloud_init: r#"{"packages": ["nvtop"], "final_message": "vLLM 0.6.5: vllm serve <model> listens on port 8000."}"#,
                shapes: &["gpu_slice"],
                gpu_models: &[H100],
                min_gpus: 1,
                fee_cents: 45,
                ports: &[8000],
                state: "in_review",
            },
        ],
    },
    DemoListing {
        slug: "ray-cluster",
        name: "Ray cluster head",
        category: "app",
        publisher: Some(GLOBEX),
        logo: Some(("#028cf0", "Ry")),
        versions: &[DemoVersion {
            version: "2.40",
            summary: "A Ray head node with its own autoscaling scheduler and dashboard.",
            description: "Starts `ray start --head`; workers join with the address it prints. Ray schedules inside the capacity you launched: it never owns inventory.",
            notes: "",
            image: "/var/lib/gpuaas/images/ray-2.40.qcow2",
            user: "ubuntu",
            cloud_init: r#"{"packages": ["htop"], "final_message": "Start the head with: ray start --head --dashboard-host=127.0.0.1"}"#,
            shapes: OS_SHAPES,
            gpu_models: &[],
            min_gpus: 2,
            fee_cents: 100,
            ports: &[],
            state: "published",
        }],
    },
    DemoListing {
        slug: "slurm-head",
        name: "Slurm head node",
        category: "app",
        publisher: Some(GLOBEX),
        logo: None,
        versions: &[DemoVersion {
            version: "24.05",
            summary: "slurmctld and slurmdbd on a whole node; compute nodes join by token.",
            description: "A Slurm 24.05 controller for a whole HGX node.",
            notes: "",
            image: "/var/lib/gpuaas/images/slurm-24.05.qcow2",
            user: "ubuntu",
            cloud_init: "{}",
            shapes: &["baremetal"],
            gpu_models: &[],
            min_gpus: 8,
            fee_cents: 200,
            ports: &[],
            state: "in_review",
        }],
    },
];

/// A square monogram logo.
fn demo_logo(color: &str, letters: &str) -> Vec<u8> {
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect width="64" height="64" rx="14" fill="{color}"/><text x="32" y="41" font-family="sans-serif" font-size="26" font-weight="700" fill="#fff" text-anchor="middle">{letters}</text></svg>"##
    )
    .into_bytes()
}

/// Globex publishes (approved, 70 % share); the listings above, moved through curation to
/// where the demo wants them.
async fn seed_marketplace(tx: &mut sqlx::PgConnection) -> Result<()> {
    sqlx::query!(
        "INSERT INTO publishers (id, tenant_id, display_name, status, revenue_share_bps, decided_at)
         VALUES ('0a0e0000-0000-4000-8003-000000000001', $1, 'Globex Labs', 'approved', 7000, now())
         ON CONFLICT DO NOTHING",
        GLOBEX as TenantId
    )
    .execute(&mut *tx)
    .await?;
    for l in LISTINGS {
        let publisher = match l.publisher {
            None => crate::marketplace::PLATFORM_PUBLISHER.0,
            Some(t) => {
                sqlx::query_scalar!(
                    "SELECT id FROM publishers WHERE tenant_id = $1",
                    t as TenantId
                )
                .fetch_one(&mut *tx)
                .await?
            }
        };
        let logo = l.logo.map(|(c, t)| demo_logo(c, t));
        sqlx::query!(
            "INSERT INTO listings (id, publisher_id, slug, name, category, logo, logo_type)
             VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, CASE WHEN $5::bytea IS NULL THEN NULL ELSE 'image/svg+xml' END)
             ON CONFLICT (slug) DO NOTHING",
            publisher,
            l.slug,
            l.name,
            l.category,
            logo
        )
        .execute(&mut *tx)
        .await?;
        for v in l.versions {
            let fee_currency = (v.fee_cents > 0).then_some("USD");
            let created = sqlx::query_scalar!(
                "INSERT INTO listing_versions (id, listing_id, version, summary, description_md,
                                               release_notes, image_source, ssh_user, cloud_init,
                                               shapes, gpu_models, min_gpus, fee_per_hour_minor,
                                               fee_currency, accepts_user_data,
                                               published_ports)
                 SELECT gen_random_uuid(), id, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9, $10, $11, $12, $13,
                        -- The platform's plain OS images accept tenant user data.
                        category = 'os_image' AND $14, $15
                 FROM listings WHERE slug = $1
                 ON CONFLICT (listing_id, version) DO NOTHING RETURNING id",
                l.slug,
                v.version,
                v.summary,
                v.description,
                v.notes,
                v.image,
                v.user,
                v.cloud_init,
                &v.shapes.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                &v.gpu_models.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                v.min_gpus,
                v.fee_cents,
                fee_currency,
                l.publisher.is_none(),
                v.ports
            )
            .fetch_optional(&mut *tx)
            .await?;
            let Some(id) = created else { continue };
            let path: &[&str] = match v.state {
                "in_review" => &["in_review"],
                _ => &["in_review", "approved", "published"],
            };
            for state in path {
                sqlx::query!(
                    "UPDATE listing_versions SET state = $2 WHERE id = $1",
                    id,
                    state
                )
                .execute(&mut *tx)
                .await?;
            }
        }
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
/// clients `portal-acme` and `portal-globex`, their email domains (verified, as if by an
/// operator: the demo's `.example` domains have no DNS to publish a proof in), and group-to-role
/// mappings. Idempotent; a changed issuer or secret (a new dev port, a new test run) is
/// updated in place.
#[tracing::instrument(skip(pool, keys, secret))]
pub async fn seed_identity_providers(
    pool: &PgPool,
    keys: &crate::secrets::Keyring,
    issuer: &str,
    secret: &str,
) -> Result<()> {
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
            keys.seal(secret, &crate::sso::secret_place(tenant)),
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "INSERT INTO tenant_email_domains (domain, tenant_id, verification_token, verified_at, verified_via)
             VALUES ($1, $2, $3, now(), 'operator')
             ON CONFLICT DO NOTHING",
            domain,
            tenant as TenantId,
            crate::dns::new_token(),
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
    // (tenant, project, sku, listing, name, start, hours, by): last month's runs, then this
    // month's, cut off two hours ago so nothing ends in the future. The notebook and eval runs
    // are Globex Labs' vLLM, so invoices carry a marketplace fee line and Globex Labs is owed
    // its share.
    type Run<'a> = (
        TenantId,
        ProjectId,
        &'a str,
        &'a str,
        &'a str,
        time::OffsetDateTime,
        i64,
        UserId,
    );
    let runs: [Run; 7] = [
        (
            ACME,
            ACME_RESEARCH,
            "h100.8x",
            "ubuntu-24.04-cuda",
            "pretrain-7b",
            last + h(49),
            72,
            bob,
        ),
        (
            ACME,
            ACME_RESEARCH,
            "h100.1x",
            "vllm",
            "notebook",
            last + h(24 * 3 + 9),
            230,
            bob,
        ),
        (
            ACME,
            ACME_INFERENCE,
            "l40s.1x",
            "ubuntu-24.04-cuda",
            "serving",
            last + h(2),
            24 * 27,
            bob,
        ),
        (
            GLOBEX,
            GLOBEX_DEFAULT,
            "h100.2x",
            "ubuntu-24.04-cuda",
            "sweep",
            last + h(24 * 10),
            120,
            carol,
        ),
        (
            ACME,
            ACME_RESEARCH,
            "h100.2x",
            "ubuntu-24.04-cuda",
            "finetune",
            month + h(1),
            40,
            bob,
        ),
        (
            ACME,
            ACME_INFERENCE,
            "l40s.1x",
            "ubuntu-24.04-cuda",
            "serving-v2",
            month,
            24 * 20,
            bob,
        ),
        (
            ACME,
            ACME_RESEARCH,
            "h100.1x",
            "vllm",
            "eval",
            month + h(30),
            9,
            bob,
        ),
    ];
    let cutoff = now - h(2);
    let mut conn = pool.acquire().await?;
    let mut imported = 0;
    for (i, (tenant, project, sku, listing, name, start, hours, by)) in runs.into_iter().enumerate()
    {
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
                listing,
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
