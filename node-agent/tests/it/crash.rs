//! Crash recovery with the real binary: a control plane (the agent API and the outbox
//! dispatcher, in this process, on loopback) and the `node-agent` executable with the
//! simulated driver. For every provision and release phase the agent dies the moment the
//! phase starts (exit, no cleanup: what SIGKILL leaves), and a fresh agent is started on the
//! same state directory. Each time the allocation must converge (running, or released with a
//! verified proof), with one domain at most and no leaked slot, lease or claim. A cluster's
//! members do the same: a crash at any phase of one member's provision still ends with every
//! member running and booting with the cluster's files, and the cluster released whole.

use control_plane::prelude::*;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use control_plane::allocations::LaunchRequest;
use control_plane::demo::ACME_RESEARCH;
use control_plane::tenancy::{Project, ProjectOperators};
use control_plane::{AllocationId, ControlPlane, Naming, UserId};
use sqlx::PgPool;
use uuid::uuid;

use crate::support;

use support::cluster::{Host, control_plane, state, stop, until, wait_exit, write_state};
use support::{PROVISION, RELEASE};
use test_db::fixtures;

const BOB: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000002"));
const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop";

/// No claim, no unclean slot, and one certificate per slot the allocation had.
async fn assert_released_clean(pool: &PgPool, id: AllocationId, slots: i64, what: &str) {
    let (claims, certs, unclean): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM resource_claims WHERE allocation_id = $1 AND released_at IS NULL),
                (SELECT count(*) FROM cleanup_certificates WHERE allocation_id = $1),
                (SELECT count(*) FROM node_resource_slots WHERE cleanup_state <> 'clean')",
    )
    .bind(id.0)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!((claims, certs, unclean), (0, slots, 0), "{what}");
}

async fn launch(cp: &ControlPlane, who: &Project<ProjectOperators>, name: &str) -> AllocationId {
    let req = LaunchRequest {
        sku: "l40s.1x".into(),
        region: String::new(),
        listing: "ubuntu-24.04-cuda".into(),
        version: String::new(),
        ssh_public_key: KEY.into(),
        name: name.into(),
        idempotency_key: uuid::Uuid::new_v4().to_string(),
        lifetime_hours: None,
        published_ports: Vec::new(),
        tags: Default::default(),
        user_data: None,
        volumes: Vec::new(),
    };
    cp.launch(who, &req, None).await.unwrap().id
}

/// The partition key the control plane gave Acme.
async fn acme_pkey(pool: &PgPool) -> u16 {
    let k: i32 = sqlx::query_scalar("SELECT pkey FROM tenant_ib_partitions WHERE tenant_id = $1")
        .bind(control_plane::demo::ACME.0)
        .fetch_one(pool)
        .await
        .unwrap();
    k as u16
}

/// What each crash test runs on: a demo database, its control plane serving the agent API on
/// loopback with the workers, and an approved `pcie-l40s-4x` host named `hostname` whose agent
/// state is written (no agent running yet), with bob's proof in Acme Research.
struct Setup {
    _db: test_db::TestDb,
    pool: PgPool,
    cp: ControlPlane,
    ops: control_plane::auth::Platform<control_plane::auth::PlatformOperators>,
    host: Host,
    dir: std::path::PathBuf,
    principal: control_plane::auth::Principal,
    bob: Project<ProjectOperators>,
}

async fn setup(hostname: &str) -> Setup {
    let db = test_db::demo().await;
    let pool = db.pool().clone();
    let cp = ControlPlane::new(pool.clone(), Naming::default());
    let ops = fixtures::operator(&cp, "ops@platform.example").await;
    let (node, _agent, credential) = fixtures::approved(
        &cp,
        &ops,
        fixtures::node(hostname, "us-east-1", "pcie-l40s-4x", &["gpu_slice"]),
        "pcie-l40s-4x",
        "overwrite-verify",
    )
    .await;
    let url = control_plane(server::agent_api::routes().with_state(cp.clone()), &cp).await;
    let dir = std::env::temp_dir().join(format!("agent-crash-{}", uuid::Uuid::new_v4()));
    let host = Host {
        state: dir.join("state"),
        fixture: Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pcie-l40s-4x"),
    };
    write_state(&host.state, node, &url, &credential);
    let principal = cp.principal(BOB).await.unwrap().unwrap();
    let bob = cp
        .project_access::<ProjectOperators>(&principal, ACME_RESEARCH)
        .await
        .unwrap();
    Setup {
        _db: db,
        pool,
        cp,
        ops,
        host,
        dir,
        principal,
        bob,
    }
}

#[tokio::test]
async fn allocations_converge_after_a_crash_at_every_phase() {
    // `_db` is bound so the database lives to the end of the test.
    let Setup {
        _db,
        pool,
        cp,
        host,
        dir,
        bob,
        ..
    } = setup("gpu-crash-01").await;

    for phase in PROVISION {
        let what = format!("crash at provision phase {phase}");
        let id = launch(&cp, &bob, &format!("p-{}", phase.replace('_', "-"))).await;
        let mut crashing = host.agent(Some(phase));
        let status = wait_exit(&mut crashing, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(86), "{what}: the knob killed it");
        assert_ne!(state(&pool, id).await, "running", "{what}");
        let agent = host.agent(None);
        until(&pool, id, "running", &what).await;
        let domain = format!("gpuaas-{id}");
        assert_eq!(host.domains(), [domain], "{what}: exactly one VM");
        assert_eq!(host.leases(), 1, "{what}");
        let pkey = acme_pkey(&pool).await;
        assert_eq!(
            host.ib(),
            [(pkey, 1)],
            "{what}: its VF is in Acme's partition"
        );
        cp.release_allocation(&bob, id, None).await.unwrap();
        until(&pool, id, "released", &what).await;
        assert_released_clean(&pool, id, 1, &what).await;
        assert!(host.domains().is_empty(), "{what}: the VM is gone");
        assert_eq!(host.leases(), 0, "{what}: no lease left");
        assert!(host.ib().is_empty(), "{what}: the VF left the partition");
        stop(agent).await;
    }

    for phase in RELEASE {
        let what = format!("crash at release phase {phase}");
        let agent = host.agent(None);
        let id = launch(&cp, &bob, &format!("r-{}", phase.replace('_', "-"))).await;
        until(&pool, id, "running", &what).await;
        stop(agent).await;
        cp.release_allocation(&bob, id, None).await.unwrap();
        let mut crashing = host.agent(Some(phase));
        let status = wait_exit(&mut crashing, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(86), "{what}: the knob killed it");
        // Not freed while the wipe is unproven.
        let unclean_or_claimed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM node_resource_slots s
             WHERE s.cleanup_state <> 'clean'
                OR EXISTS (SELECT 1 FROM resource_claims c WHERE c.slot_id = s.id
                           AND c.allocation_id = $1 AND c.released_at IS NULL)",
        )
        .bind(id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(unclean_or_claimed, 1, "{what}: the slot is not free yet");
        let agent = host.agent(None);
        until(&pool, id, "released", &what).await;
        assert_released_clean(&pool, id, 1, &what).await;
        assert!(host.domains().is_empty(), "{what}: no VM left");
        assert_eq!(host.leases(), 0, "{what}: no lease left");
        assert!(host.ib().is_empty(), "{what}: the VF left the partition");
        stop(agent).await;
    }

    // A release of slots no tenant reached, on a host with no firmware baseline for the GPU
    // yet: a crash at any phase still ends clean. The chaos run found this one: the baseline
    // was recorded only at `check_firmware`, and an agent restarted after the release took its
    // leases no longer knew the slot was untouched, so it blocked a slot no one had used.
    // (A release before any agent claimed the provision needs no agent since migration 0033,
    // so here the provision is one an agent claimed and never ran, as when a claim's answer
    // is lost and the allocation released meanwhile.)
    for phase in RELEASE {
        let what = format!("crash at phase {phase} of an untouched slot's release");
        let _ = std::fs::remove_dir_all(host.state.join("gpu-firmware"));
        let id = launch(&cp, &bob, &format!("u-{}", phase.replace('_', "-"))).await;
        sqlx::query(
            "UPDATE agent_tasks SET state = 'failed', claimed_at = now(), finished_at = now(),
                    error = 'claimed, never run'
             WHERE allocation_id = $1 AND kind = 'slice.vm_provision' AND state = 'queued'",
        )
        .bind(id.0)
        .execute(&pool)
        .await
        .unwrap();
        cp.release_allocation(&bob, id, None).await.unwrap();
        let mut crashing = host.agent(Some(phase));
        let status = wait_exit(&mut crashing, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(86), "{what}: the knob killed it");
        let agent = host.agent(None);
        until(&pool, id, "released", &what).await;
        assert_released_clean(&pool, id, 1, &what).await;
        assert_eq!(host.leases(), 0, "{what}: no lease left");
        stop(agent).await;
    }

    // `status` shows the host's view without the control plane.
    let out = Command::new(env!("CARGO_BIN_EXE_node-agent"))
        .args(["status", "--driver", "simulated"])
        .arg("--state-dir")
        .arg(&host.state)
        .arg("--fixture")
        .arg(&host.fixture)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("leases (0):") && text.contains("VMs (0):"),
        "{text}"
    );
    assert!(text.contains("slice.vm_release allocation"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The members' states, in member order.
async fn member_states(pool: &PgPool, cluster: control_plane::ClusterId) -> Vec<String> {
    sqlx::query_scalar("SELECT state FROM allocations WHERE cluster_id = $1 ORDER BY cluster_index")
        .bind(cluster.0)
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn members_until(pool: &PgPool, cluster: control_plane::ClusterId, want: &str, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let states = member_states(pool, cluster).await;
        if states.iter().all(|s| s == want) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: members are {states:?}, not all {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn cluster_members_converge_after_a_crash_at_every_provision_phase() {
    use control_plane::allocations::clusters::ClusterOrder;
    use control_plane::allocations::{LaunchOrder, OrderKeys};
    use control_plane::fleet::TopologyFormat;

    let Setup {
        _db,
        pool,
        cp,
        ops,
        host,
        dir,
        principal,
        bob,
    } = setup("gpu-crash-02").await;
    cp.import_fabric(
        &ops,
        "ib-crash",
        TopologyFormat::SlurmTopology,
        "SwitchName=l1 Nodes=gpu-crash-02\nSwitchName=s1 Switches=l1\n",
        None,
    )
    .await
    .unwrap();

    for phase in PROVISION {
        let what = format!("a cluster member's crash at provision phase {phase}");
        let name = format!("c-{}", phase.replace('_', "-"));
        let order = ClusterOrder {
            launch: LaunchOrder {
                sku: "l40s.1x".into(),
                image: "ubuntu-24.04-cuda".into(),
                name: name.clone(),
                keys: OrderKeys {
                    typed: vec![KEY.into()],
                    ..Default::default()
                },
                idempotency_key: uuid::Uuid::new_v4().to_string(),
                ..Default::default()
            },
            members: 2,
            locality: "leaf".into(),
            locality_required: true,
        };
        let cluster = cp
            .launch_cluster(&principal, &bob, order, None)
            .await
            .unwrap();
        let mut crashing = host.agent(Some(phase));
        let status = wait_exit(&mut crashing, Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(86), "{what}: the knob killed it");
        let agent = host.agent(None);
        members_until(&pool, cluster.id, "running", &what).await;
        assert_eq!(host.domains().len(), 2, "{what}: a VM per member");
        assert_eq!(host.leases(), 2, "{what}");
        // Each member boots with the cluster: both names in its hostfile.
        let ids: Vec<uuid::Uuid> =
            sqlx::query_scalar("SELECT id FROM allocations WHERE cluster_id = $1")
                .bind(cluster.id.0)
                .fetch_all(&pool)
                .await
                .unwrap();
        for id in &ids {
            let seed = host
                .state
                .join("allocations")
                .join(id.to_string())
                .join("seed/user-data");
            let user_data = std::fs::read_to_string(&seed)
                .unwrap_or_else(|e| panic!("{what}: {}: {e}", seed.display()));
            for member in [1, 2] {
                assert!(
                    user_data.contains(&format!("{name}-{member} slots=1")),
                    "{what}: the hostfile names member {member}:\n{user_data}"
                );
            }
        }
        cp.release_cluster(&bob, cluster.id, None).await.unwrap();
        members_until(&pool, cluster.id, "released", &what).await;
        for id in ids {
            assert_released_clean(&pool, AllocationId(id), 1, &what).await;
        }
        assert!(host.domains().is_empty(), "{what}: no VM left");
        assert_eq!(host.leases(), 0, "{what}: no lease left");
        stop(agent).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The slot disk a run's first slot has on the simulated host.
async fn boot_disk(pool: &PgPool, host: &Host, run: AllocationId) -> std::path::PathBuf {
    let namespace: String = sqlx::query_scalar(
        "SELECT s.nvme_namespace FROM resource_claims c
         JOIN node_resource_slots s ON s.id = c.slot_id
         WHERE c.allocation_id = $1 ORDER BY s.slot_index LIMIT 1",
    )
    .bind(run.0)
    .fetch_one(pool)
    .await
    .unwrap();
    host.state.join("sim/nvme").join(format!("{namespace}.raw"))
}

async fn current_run(pool: &PgPool, instance: AllocationId) -> AllocationId {
    AllocationId(
        sqlx::query_scalar(
            "SELECT id FROM allocations
             WHERE (id = $1 OR instance_id = $1) AND superseded_by IS NULL",
        )
        .bind(instance.0)
        .fetch_one(pool)
        .await
        .unwrap(),
    )
}

/// Stop and start with the real storage worker (qemu-storage-daemon over NBD on loopback):
/// the agent dies at each phase of a stop's release (the copy of the disk among them) and at
/// the restore of a start. Each time the instance converges, stopped with its slot clean, then
/// running again on whichever slot placement chose, with what the guest wrote before the stop.
#[tokio::test]
async fn stops_and_starts_converge_after_a_crash_at_every_phase() {
    let missing = ["qemu-img", "qemu-storage-daemon"]
        .into_iter()
        .find(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if let Some(tool) = missing {
        println!("SKIPPED: {tool} is not installed");
        return;
    }
    let Setup {
        _db,
        pool,
        cp,
        host,
        dir,
        bob,
        ..
    } = setup("gpu-crash-03").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let backend = std::sync::Arc::new(storage::QemuNbd::new(
        dir.join("storage"),
        format!("127.0.0.1:{port}").parse().unwrap(),
        None,
    ));
    let worker = tokio::spawn(server::workers::storage(cp.clone(), backend.clone()));
    let secret = b"GUEST-CHECKPOINT-7";
    let mut stop_phases = RELEASE.to_vec();
    let at = stop_phases
        .iter()
        .position(|p| *p == "destroy_domain")
        .unwrap();
    stop_phases.insert(at + 1, "save_root_disk");
    let crashes = stop_phases
        .iter()
        .map(|p| (Some(*p), None))
        .chain([(None, Some("write_image")), (None, Some("start_vm"))]);

    for (stop_crash, start_crash) in crashes {
        let what = format!("crash at stop phase {stop_crash:?}, start phase {start_crash:?}");
        let agent = host.agent(None);
        let id = launch(&cp, &bob, &format!("s-{}", uuid::Uuid::new_v4().simple())).await;
        until(&pool, id, "running", &what).await;
        // The guest writes to its disk.
        let disk = boot_disk(&pool, &host, id).await;
        let mut bytes = std::fs::read(&disk).unwrap();
        bytes[4096..4096 + secret.len()].copy_from_slice(secret);
        std::fs::write(&disk, bytes).unwrap();

        stop(agent).await;
        cp.stop_instance(&bob, id, None).await.unwrap();
        // The storage worker serves the root volume, and the release is queued.
        until(&pool, id, "releasing", &what).await;
        let agent = match stop_crash {
            Some(phase) => {
                let mut crashing = host.agent(Some(phase));
                let status = wait_exit(&mut crashing, Duration::from_secs(30)).await;
                assert_eq!(status.code(), Some(86), "{what}: the knob killed it");
                host.agent(None)
            }
            None => host.agent(None),
        };
        until(&pool, id, "released", &what).await;
        assert_released_clean(&pool, id, 1, &what).await;
        assert_eq!(host.leases(), 0, "{what}: no lease left");
        let stops: bool = sqlx::query_scalar(
            "SELECT stop_root_volume IS NOT NULL FROM allocations WHERE id = $1",
        )
        .bind(id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert!(stops, "{what}: it is stopped, not released");

        let agent = match start_crash {
            Some(phase) => {
                stop(agent).await;
                cp.start_instance(&bob, id, None).await.unwrap();
                let mut crashing = host.agent(Some(phase));
                let status = wait_exit(&mut crashing, Duration::from_secs(30)).await;
                assert_eq!(status.code(), Some(86), "{what}: the knob killed it");
                host.agent(None)
            }
            None => {
                cp.start_instance(&bob, id, None).await.unwrap();
                agent
            }
        };
        let run = current_run(&pool, id).await;
        assert_ne!(run, id, "{what}: a start is a new run");
        until(&pool, run, "running", &what).await;
        assert_eq!(host.domains(), [format!("gpuaas-{run}")], "{what}: one VM");
        let restored = std::fs::read(boot_disk(&pool, &host, run).await).unwrap();
        assert_eq!(
            &restored[4096..4096 + secret.len()],
            secret,
            "{what}: the started run boots what the guest wrote"
        );
        cp.release_allocation(&bob, id, None).await.unwrap();
        until(&pool, run, "released", &what).await;
        assert_released_clean(&pool, run, 1, &what).await;
        stop(agent).await;
    }
    worker.abort();
    backend.stop_daemon().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
