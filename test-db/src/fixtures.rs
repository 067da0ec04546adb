//! Builder fixtures shared by every database test, bench and crash test: people, enrolled
//! nodes answering with the agent's own fixture discoveries, approved slot maps, the catalog
//! rows an allocation needs, and cleanup proofs signed the agent's way.

use control_plane::prelude::*;

use std::path::Path;
use std::time::Duration;

use agent_protocol::{Discovery, HealthStatus, TaskOutcome, TaskOutput, TaskSpec};
use control_plane::agent_api::NodeAgent;
use control_plane::auth::{Platform, PlatformOperators};
use control_plane::fleet::{NewNode, SlotMapDecision};
use control_plane::{ControlPlane, NodeId};

pub fn discovery(fixture: &str) -> Discovery {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../node-agent/fixtures")
        .join(fixture)
        .join("expected-discovery.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub async fn operator(cp: &ControlPlane, email: &str) -> Platform<PlatformOperators> {
    let id = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, email, display_name, platform_role) VALUES ($1, $2, $3, 'operator')")
        .bind(id)
        .bind(email)
        .bind(email)
        .execute(cp.pool())
        .await
        .unwrap();
    cp.principal(id.into())
        .await
        .unwrap()
        .unwrap()
        .platform::<PlatformOperators>()
        .unwrap()
}

pub fn node(hostname: &str, region: &str, family: &str, shapes: &[&str]) -> NewNode {
    NewNode {
        hostname: hostname.into(),
        region: region.into(),
        rack: "r12".into(),
        family: family.into(),
        capacity_shapes: shapes.iter().map(|s| s.to_string()).collect(),
    }
}

pub async fn enrolled(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    node: NewNode,
) -> (NodeId, NodeAgent) {
    let (id, agent, _) = enrolled_with_credential(cp, ops, node).await;
    (id, agent)
}

/// An enrolled node that has heartbeaten once; also returns its credential.
pub async fn enrolled_with_credential(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    node: NewNode,
) -> (NodeId, NodeAgent, String) {
    let e = cp.enrol_node(ops, &node, None).await.unwrap();
    let cred = cp
        .exchange_bootstrap_token(&e.bootstrap_token, &node.hostname, "0.1.0")
        .await
        .unwrap();
    let agent = cp.authenticate_node(&cred.credential).await.unwrap();
    cp.heartbeat(&agent, "0.1.0", HealthStatus::Healthy, None, &[])
        .await
        .unwrap();
    (e.node_id, agent, cred.credential)
}

/// Claims the queued discovery (or queues one) and answers it with `d`; returns the generation.
pub async fn discover(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    node: NodeId,
    agent: &NodeAgent,
    d: &Discovery,
) -> i32 {
    let task = match cp.claim_task(agent, Duration::ZERO).await.unwrap() {
        Some(t) => t,
        None => {
            cp.request_discovery(ops, node, None).await.unwrap();
            cp.claim_task(agent, Duration::ZERO).await.unwrap().unwrap()
        }
    };
    assert_eq!(task.spec, TaskSpec::TopologyDiscover {});
    cp.finish_task(
        agent,
        task.id,
        &TaskOutcome::Succeeded {
            output: TaskOutput::TopologyDiscovered(Box::new(d.clone())),
        },
    )
    .await
    .unwrap()
    .unwrap()
}

pub fn approve_all(policy: &str) -> SlotMapDecision {
    SlotMapDecision::Approve {
        only: None,
        wipe_policy: Some(policy.into()),
    }
}

/// An enrolled node with its fixture's slots approved; returns the node, its agent and the
/// agent's credential (to sign cleanup proofs).
pub async fn approved(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    new: NewNode,
    fixture: &str,
    wipe: &str,
) -> (NodeId, NodeAgent, String) {
    let (id, agent, credential) = enrolled_with_credential(cp, ops, new).await;
    let generation = discover(cp, ops, id, &agent, &discovery(fixture)).await;
    cp.decide_slot_map(ops, id, generation, &approve_all(wipe), None)
        .await
        .unwrap();
    (id, agent, credential)
}

/// A minimal allocation row (tenant, project, user, SKU and listing made for it), for tests of
/// claim invariants below the launch path.
pub async fn bare_allocation(cp: &ControlPlane, node: NodeId) -> uuid::Uuid {
    let n = uuid::Uuid::new_v4();
    let short = &n.simple().to_string()[..12];
    // A published platform listing version to launch it with.
    let version: uuid::Uuid = sqlx::query_scalar(&format!(
        "WITH l AS (INSERT INTO listings (id, publisher_id, slug, name, category)
                    VALUES (gen_random_uuid(), '00000000-0000-4000-8000-0000000000f1', 'i-{short}', 'I', 'os_image') RETURNING id)
         INSERT INTO listing_versions (id, listing_id, version, summary, image_source, ssh_user, shapes)
         SELECT gen_random_uuid(), l.id, '1', 'I', '/var/lib/gpuaas/images/i.qcow2', 'ubuntu', ARRAY['gpu_slice'] FROM l RETURNING id"
    ))
    .fetch_one(cp.pool())
    .await
    .unwrap();
    for state in ["in_review", "approved", "published"] {
        sqlx::query("UPDATE listing_versions SET state = $2 WHERE id = $1")
            .bind(version)
            .bind(state)
            .execute(cp.pool())
            .await
            .unwrap();
    }
    let sql = format!(
        "WITH t AS (INSERT INTO tenants (id, slug, display_name) VALUES (gen_random_uuid(), 't-{short}', 'T') RETURNING id),
              p AS (INSERT INTO projects (id, tenant_id, slug, display_name) SELECT gen_random_uuid(), t.id, 'p-{short}', 'P' FROM t RETURNING id, tenant_id),
              u AS (INSERT INTO users (id, email, display_name) VALUES (gen_random_uuid(), 'u-{short}@example.com', 'U') RETURNING id),
              s AS (INSERT INTO skus (id, name, display_name, shape, gpu_model, gpu_count, vcpus, memory_gib, nvme_gib, regions, families, price_per_hour_minor, currency)
                    VALUES (gen_random_uuid(), 's-{short}', 'S', 'gpu_slice', 'm', 1, 1, 1, 0, '{{eu-west-1}}', '{{f1}}', 100, 'USD') RETURNING id),
              i AS (SELECT $3::uuid AS id)
         INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id, listing_version_id,
                                  ssh_public_key, price_per_hour_minor, currency, idempotency_key, request_fingerprint,
                                  requested_by, placement, state, requested_at)
         SELECT $1, p.tenant_id, p.id, 'a', s.id, 'gpu_slice', 1, 'eu-west-1', $2, i.id, 'k', 100, 'USD', 'key-{short}', 'f', u.id, '{{}}', 'placed', now()
         FROM p, u, s, i"
    );
    sqlx::query(&sql)
        .bind(n)
        .bind(node.0)
        .bind(version)
        .execute(cp.pool())
        .await
        .unwrap();
    n
}

/// The cleanup proof the node agent would send for a release plan: every check passed,
/// signed the agent's way.
pub fn signed_proof(
    node: NodeId,
    credential: &str,
    plan: &agent_protocol::ReleasePlan,
) -> agent_protocol::CleanupProof {
    let slots = plan
        .slots
        .iter()
        .map(|s| agent_protocol::SlotCleanup {
            slot_id: s.slot_id.clone(),
            nvme_serial: s.nvme_serial.clone(),
            wipe_method: s.wipe_policy.clone(),
            wipe_ms: 950,
            wipe_verified: true,
            verified_samples: 64,
            gpu_reset: true,
            gpu_firmware: "96.00.99.00.01".into(),
            firmware_ok: true,
        })
        .collect();
    node_agent::proof::sign(credential, &node.to_string(), &plan.allocation_id, slots)
}

/// The same operator, with the proof that reads the fleet's pages.
pub async fn staff(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
) -> control_plane::auth::Platform<control_plane::auth::PlatformStaff> {
    cp.principal(ops.principal().user_id)
        .await
        .unwrap()
        .unwrap()
        .platform::<control_plane::auth::PlatformStaff>()
        .unwrap()
}

/// The sentence a call was refused with; panics if it succeeded. For
/// `assert_eq!(refusal(cp.invite_member(…)).await, "…")`.
pub async fn refusal<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = control_plane::Result<T>>,
) -> String {
    match call.await {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// Runs `sql` behind the control plane's back and checks the database refuses it with a
/// message containing `needle` (a constraint's or a trigger's): the invariant holds even when
/// the Rust is bypassed.
pub async fn assert_db_refuses(cp: &ControlPlane, sql: &str, needle: &str) {
    let err = sqlx::query(sql)
        .execute(cp.pool())
        .await
        .expect_err("the database should refuse it")
        .to_string();
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
}

/// An existing person (a demo user, say), signed in: their principal, found by email.
pub async fn principal(cp: &ControlPlane, email: &str) -> control_plane::auth::Principal {
    let id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM users WHERE email = $1")
        .bind(email)
        .fetch_one(cp.pool())
        .await
        .unwrap_or_else(|e| panic!("{email}: {e}"));
    cp.principal(control_plane::UserId(id))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{email} may not sign in"))
}

/// The proof that `who` holds a role of `R` in `project`; panics if they don't.
pub async fn in_project<R: control_plane::tenancy::ProjectRequirement>(
    cp: &ControlPlane,
    who: &control_plane::auth::Principal,
    project: control_plane::ProjectId,
) -> control_plane::tenancy::Project<R> {
    cp.project_access::<R>(who, project)
        .await
        .unwrap_or_else(|e| panic!("{} in project {project}: {e}", who.email))
}

/// The proof that `who` holds a role of `R` in `tenant`; panics if they don't.
pub async fn in_tenant<R: control_plane::tenancy::TenantRequirement>(
    cp: &ControlPlane,
    who: &control_plane::auth::Principal,
    tenant: control_plane::TenantId,
) -> control_plane::tenancy::Tenant<R> {
    cp.tenant_access::<R>(who, tenant)
        .await
        .unwrap_or_else(|e| panic!("{} in organization {tenant}: {e}", who.email))
}

/// Answers the agent's next task as the simulated agent would: phases, then `outcome`.
pub async fn answer(
    cp: &ControlPlane,
    agent: &NodeAgent,
    phases: &[&str],
    outcome: impl FnOnce(&TaskSpec) -> TaskOutcome,
) -> TaskSpec {
    let control_plane::agent_api::ClaimedTask { id: task, spec, .. } = cp
        .claim_task(agent, Duration::ZERO)
        .await
        .unwrap()
        .expect("a queued task");
    for p in phases {
        for status in [
            agent_protocol::PhaseStatus::Started,
            agent_protocol::PhaseStatus::Succeeded,
        ] {
            cp.report_phase(
                agent,
                task,
                &agent_protocol::PhaseReport {
                    phase: p.to_string(),
                    status,
                    elapsed_ms: 5,
                    detail: None,
                },
            )
            .await
            .unwrap();
        }
    }
    let outcome = outcome(&spec);
    cp.finish_task(agent, task, &outcome).await.unwrap();
    spec
}

/// What the agent answers a provision with: the public address and SSH port its plan names.
pub fn provisioned(spec: &TaskSpec) -> TaskOutcome {
    let (host, port) = match spec {
        TaskSpec::VmProvision(plan) | TaskSpec::BaremetalProvision(plan) => (
            plan.network.public_host.clone().expect("a public host"),
            plan.network.ssh_port.expect("an SSH port"),
        ),
        // A late answer to a task the test doesn't look into.
        _ => ("gpu-late".into(), 22000),
    };
    TaskOutcome::Succeeded {
        output: TaskOutput::Provisioned(agent_protocol::Provisioned {
            ssh_host: host,
            ssh_port: port,
            ssh_user: "ubuntu".into(),
        }),
    }
}

/// An API token made by `maker` in `tenant`, for `project` or the whole organization (as the
/// tokens page makes them); its secret and id.
pub async fn api_token(
    cp: &ControlPlane,
    maker: &str,
    tenant: control_plane::TenantId,
    project: Option<control_plane::ProjectId>,
    scopes: &[control_plane::api_tokens::TokenScope],
) -> (String, control_plane::ApiTokenId) {
    let maker = principal(cp, maker).await;
    let made = cp
        .create_api_token(
            &maker,
            tenant,
            &control_plane::api_tokens::NewToken {
                name: format!("test {scopes:?}"),
                project,
                scopes: scopes.to_vec(),
                days: 1,
            },
            None,
        )
        .await
        .unwrap();
    (made.secret, made.token.id)
}
