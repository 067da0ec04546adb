//! `cargo xtask bench volumes`: how long a tenant waits for a volume to attach to a running
//! instance, and to detach from it; then for the instance to stop (its disk saved into a root
//! volume the storage worker makes and serves, its release answered) and to start again.
//!
//! Enrols a fleet of HGX nodes (default 8 × 8 slots), runs one simulated agent per node in this
//! process (provisions answered at once, volumes updates answered with what the plan lists),
//! the dispatchers, and the storage worker the server runs, on the real qemu backend: one
//! `qemu-storage-daemon` serving qcow2 files over NBD on 127.0.0.1. It launches `--instances`
//! instances (default 32), makes a 1 GiB volume for each, then attaches them at `--rate` per
//! second (default 8) and, once all are in use, detaches them at the same rate.
//!
//! Prints attach → in use (the backend serves it, the host plugged it in), detach → available
//! (the host unplugged it, the backend no longer serves it), stop → stopped (the root volume
//! made and served, the release answered with its proof) and start → running (placed again and
//! provisioned), as p50/p99 in milliseconds. The state is read every 2 ms. Needs `DATABASE_URL`, and `qemu-img` and
//! `qemu-storage-daemon` (without them it says SKIPPED).

use control_plane::prelude::*;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_protocol::{Provisioned, TaskOutcome, TaskOutput, TaskSpec};
use control_plane::demo::ACME_RESEARCH;
use control_plane::policy::{PolicyValue, Target};
use control_plane::tenancy::ProjectOperators;
use control_plane::volumes::{Made, VolumeRequest, VolumesApi};
use control_plane::{AllocationId, VolumeId};

use test_db::fixtures as support;

use crate::common::{ALICE, flag, launch_request, pct};

fn missing_tool() -> Option<&'static str> {
    ["qemu-img", "qemu-storage-daemon"].into_iter().find(|t| {
        !std::process::Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A free port on loopback for the storage daemon.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[tokio::main(flavor = "multi_thread")]
pub async fn main() {
    if let Some(tool) = missing_tool() {
        println!("SKIPPED: the volumes benchmark needs {tool}, which is not installed");
        return;
    }
    let nodes: u64 = flag("--nodes", 8);
    let instances: usize = flag("--instances", 32);
    let rate: u64 = flag("--rate", 8);
    let (pool, cp) = crate::common::seeded(10).await;
    let ops = support::operator(&cp, "bench-ops@platform.example").await;

    let mut agents = Vec::new();
    for i in 0..nodes {
        agents.push(
            support::approved(
                &cp,
                &ops,
                support::node(
                    &format!("volumes-{i}"),
                    "eu-west-1",
                    "hgx-h100-8x",
                    &["gpu_slice"],
                ),
                "hgx-h100-8x",
                "nvme-format-crypto",
            )
            .await,
        );
    }
    sqlx::query("UPDATE nodes SET last_heartbeat_at = now() + interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();

    let errors = Arc::new(Mutex::new(0usize));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (node, agent, credential) in agents {
        let (cp, stop, errors) = (cp.clone(), stop.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(control_plane::agent_api::ClaimedTask { id: task, spec, .. }) = cp
                    .claim_task(&agent, Duration::from_millis(500))
                    .await
                    .expect("claims")
                else {
                    continue;
                };
                let output = match &spec {
                    TaskSpec::VmProvision(plan) => TaskOutput::Provisioned(Provisioned {
                        ssh_host: plan.network.public_host.clone().unwrap_or_default(),
                        ssh_port: plan.network.ssh_port.unwrap_or(22),
                        ssh_user: "ubuntu".into(),
                    }),
                    TaskSpec::VolumesUpdate(plan) => TaskOutput::VolumesUpdated {
                        attached: plan.volumes.iter().map(|v| v.volume_id.clone()).collect(),
                    },
                    TaskSpec::VmRelease(plan) => {
                        TaskOutput::Cleaned(support::signed_proof(node, &credential, plan))
                    }
                    other => panic!("unexpected task {other:?}"),
                };
                let outcome = TaskOutcome::Succeeded { output };
                if let Err(e) = cp.finish_task(&agent, task, &outcome).await {
                    eprintln!("agent: the result failed: {e}");
                    *errors.lock().unwrap() += 1;
                }
            }
        }));
    }
    let dispatcher = {
        let cp = cp.clone();
        tokio::spawn(async move { cp.dispatcher().await })
    };
    let dir = std::env::temp_dir().join(format!("bench-volumes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let backend = Arc::new(storage::QemuNbd::new(
        &dir,
        std::net::SocketAddr::from(([127, 0, 0, 1], free_port())),
        None,
    ));
    let worker = {
        let (cp, backend) = (cp.clone(), backend.clone());
        tokio::spawn(control_plane::volumes::worker::run(cp, backend))
    };

    let principal = cp.principal(ALICE).await.unwrap().unwrap();
    let scope = cp
        .policy_scope(&principal, Target::Project(ACME_RESEARCH))
        .await
        .unwrap();
    for value in [
        PolicyValue::MaxVolumes(instances as u32 + 10),
        PolicyValue::MaxVolumeGib(instances as u32 + 100),
    ] {
        cp.set_policy(&scope, value.key(), Some(value), None)
            .await
            .unwrap();
    }
    let who = Arc::new(
        cp.project_access::<ProjectOperators>(&principal, ACME_RESEARCH)
            .await
            .unwrap(),
    );

    // The instances and their volumes, made before anything is timed.
    let t = Instant::now();
    let mut pairs: Vec<(AllocationId, VolumeId)> = Vec::new();
    for n in 0..instances {
        let req = launch_request(
            "h100.1x",
            format!("v-{n}"),
            uuid::Uuid::new_v4().to_string(),
        );
        let id = cp.launch(&who, &req, None).await.expect("launches").id;
        let Made { id: volume, .. } = cp
            .create_volume(
                &who,
                &VolumeRequest {
                    name: format!("data-{n}"),
                    region: "eu-west-1".into(),
                    size_gib: 1,
                    idempotency_key: uuid::Uuid::new_v4().to_string(),
                    snapshot: None,
                },
                None,
            )
            .await
            .expect("makes a volume");
        pairs.push((id, volume));
    }
    for (id, volume) in &pairs {
        wait_for(&pool, "allocations", id.0, "running").await;
        wait_for(&pool, "volumes", volume.0, "available").await;
    }
    println!(
        "{instances} instances running with a 1 GiB volume each, on {nodes} nodes, in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let attach = timed(&pool, &pairs, rate, "in_use", {
        let (cp, who) = (cp.clone(), who.clone());
        move |(id, volume)| {
            let (cp, who) = (cp.clone(), who.clone());
            async move { cp.attach_volume(&who, volume, id, None).await }
        }
    })
    .await;
    let detach = timed(&pool, &pairs, rate, "available", {
        let (cp, who) = (cp.clone(), who.clone());
        move |(_, volume)| {
            let (cp, who) = (cp.clone(), who.clone());
            async move { cp.detach_volume(&who, volume, None).await }
        }
    })
    .await;

    let ids: Vec<AllocationId> = pairs.iter().map(|&(id, _)| id).collect();
    let stopping = timed_instances(&pool, &ids, rate, "stopped", {
        let (cp, who) = (cp.clone(), who.clone());
        move |id| {
            let (cp, who) = (cp.clone(), who.clone());
            async move { cp.stop_instance(&who, id, None).await }
        }
    })
    .await;
    let starting = timed_instances(&pool, &ids, rate, "running", {
        let (cp, who) = (cp.clone(), who.clone());
        move |id| {
            let (cp, who) = (cp.clone(), who.clone());
            async move { cp.start_instance(&who, id, None).await.map(drop) }
        }
    })
    .await;

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    worker.abort();
    dispatcher.abort();
    let _ = backend.stop_daemon();
    let _ = std::fs::remove_dir_all(&dir);

    let errors = *errors.lock().unwrap();
    println!("{:<32} {:>7} {:>9} {:>9}", "", "count", "p50 ms", "p99 ms");
    for (name, v) in [
        ("attach -> in use", &attach),
        ("detach -> available", &detach),
        ("stop -> stopped", &stopping),
        ("start -> running", &starting),
    ] {
        println!(
            "{name:<32} {:>7} {:>9.1} {:>9.1}",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99)
        );
    }
    println!(
        "RESULT volumes instances={instances} rate={rate} attach_p50_ms={:.1} attach_p99_ms={:.1} detach_p50_ms={:.1} detach_p99_ms={:.1} stop_p50_ms={:.1} stop_p99_ms={:.1} start_p50_ms={:.1} start_p99_ms={:.1} agent_errors={errors}",
        pct(&attach, 0.5),
        pct(&attach, 0.99),
        pct(&detach, 0.5),
        pct(&detach, 0.99),
        pct(&stopping, 0.5),
        pct(&stopping, 0.99),
        pct(&starting, 0.5),
        pct(&starting, 0.99),
    );
    if errors != 0
        || [&attach, &detach, &stopping, &starting]
            .iter()
            .any(|v| v.len() != instances)
    {
        std::process::exit(1);
    }
}

/// Calls `act` for each pair at `rate` per second, and times each until its volume is `state`.
async fn timed<F, Fut>(
    pool: &sqlx::PgPool,
    pairs: &[(AllocationId, VolumeId)],
    rate: u64,
    state: &'static str,
    act: F,
) -> Vec<Duration>
where
    F: Fn((AllocationId, VolumeId)) -> Fut,
    Fut: std::future::Future<Output = control_plane::error::Result<()>> + Send + 'static,
{
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut waits = Vec::new();
    for &(id, volume) in pairs {
        tick.tick().await;
        let call = act((id, volume));
        let pool = pool.clone();
        waits.push(tokio::spawn(async move {
            let t0 = Instant::now();
            call.await.expect("the volume call is accepted");
            wait_for(&pool, "volumes", volume.0, state).await;
            t0.elapsed()
        }));
    }
    let mut took = Vec::new();
    for w in waits {
        took.push(w.await.expect("timed"));
    }
    took.sort();
    took
}

/// Calls `act` for each instance at `rate` per second, and times each until the instance
/// reads `state` (`stopped`, or `running` on its current run).
async fn timed_instances<F, Fut>(
    pool: &sqlx::PgPool,
    ids: &[AllocationId],
    rate: u64,
    state: &'static str,
    act: F,
) -> Vec<Duration>
where
    F: Fn(AllocationId) -> Fut,
    Fut: std::future::Future<Output = control_plane::error::Result<()>> + Send + 'static,
{
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut waits = Vec::new();
    for &id in ids {
        tick.tick().await;
        let call = act(id);
        let pool = pool.clone();
        waits.push(tokio::spawn(async move {
            let t0 = Instant::now();
            call.await.expect("the instance call is accepted");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let now: String = sqlx::query_scalar(
                    "SELECT CASE WHEN state = 'released' AND stop_root_volume IS NOT NULL
                                 THEN 'stopped' ELSE state END
                     FROM allocations
                     WHERE (id = $1 OR instance_id = $1) AND superseded_by IS NULL",
                )
                .bind(id.0)
                .fetch_one(&pool)
                .await
                .expect("reads the state");
                if now == state {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "instance {id} is still {now}, not {state}, after a minute"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            t0.elapsed()
        }));
    }
    let mut took = Vec::new();
    for w in waits {
        took.push(w.await.expect("timed"));
    }
    took.sort();
    took
}

/// Waits until the row `id` of `table` (allocations or volumes) is in `state`; gives up after
/// a minute.
async fn wait_for(pool: &sqlx::PgPool, table: &str, id: uuid::Uuid, state: &str) {
    let sql = format!("SELECT state FROM {table} WHERE id = $1");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now: String = sqlx::query_scalar(&sql)
            .bind(id)
            .fetch_one(pool)
            .await
            .expect("reads the state");
        if now == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{table} {id} is still {now}, not {state}, after a minute"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
