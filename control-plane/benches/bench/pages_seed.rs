//! `bench pages-seed`: the data `cargo xtask bench pages` serves, written into the portal's
//! own (migrated, demo-seeded) database through the control plane: a synthetic fleet of 200
//! nodes, 200 allocations in each of Acme's two projects in mixed states (provisioning,
//! running, releasing), and this month's finished, rated usage for the billing page.
//!
//! Flags: `--per-project N` (default 200). Needs `DATABASE_URL` (the portal's database).

use control_plane::prelude::*;

use std::time::Instant;

use control_plane::AllocationId;
use control_plane::billing::history::{ImportedRun, import_run};
use control_plane::billing::rating::rate_until;
use control_plane::demo::{ACME, ACME_INFERENCE, ACME_RESEARCH};
use control_plane::tenancy::ProjectOperators;

use crate::common::{ALICE, flag, launch_request};

const SKUS: [&str; 3] = ["h100.1x", "h100.2x", "h100.4x"];

#[tokio::main(flavor = "multi_thread")]
pub async fn main() {
    let per_project: usize = flag("--per-project", 200);
    let t = Instant::now();
    let (pool, cp) = crate::common::seeded(8).await;
    crate::placement::build_fleet(&pool, 200)
        .await
        .expect("builds the fleet");
    let principal = cp.principal(ALICE).await.unwrap().expect("alice");
    let mut launched: Vec<AllocationId> = Vec::new();
    let mut refused = 0;
    for project in [ACME_RESEARCH, ACME_INFERENCE] {
        let who = cp
            .project_access::<ProjectOperators>(&principal, project)
            .await
            .expect("alice operates both projects");
        for n in 0..per_project {
            let req = launch_request(
                SKUS[n % SKUS.len()],
                format!("pages-{n}"),
                format!("pages-{project}-{n}"),
            );
            // A project's policies may refuse some (the smoke run seeds the browser tests'
            // database, whose projects have policies by then): counted, not fatal.
            let id = match cp.launch(&who, &req, None).await {
                Ok(l) => l.id,
                Err(e) => {
                    refused += 1;
                    if refused == 1 {
                        println!("a launch was refused: {e}");
                    }
                    continue;
                }
            };
            // Mixed states: a quarter released (waiting for their wipe), half running (as an
            // agent's result would leave them), the rest still provisioning.
            match n % 4 {
                0 => cp
                    .release_allocation(&who, id, None)
                    .await
                    .expect("releases"),
                1 | 2 => launched.push(id),
                _ => {}
            }
        }
    }
    sqlx::query(
        "UPDATE agent_tasks SET state = 'succeeded', claimed_at = now(), finished_at = now()
         WHERE allocation_id = ANY($1) AND state = 'queued'",
    )
    .bind(launched.iter().map(|a| a.0).collect::<Vec<_>>())
    .execute(&pool)
    .await
    .expect("finishes the provisions");
    sqlx::query(
        "UPDATE allocations SET state = 'running', observed_state = 'running', ssh_host = '203.0.113.7',
                ssh_port = 22000, ssh_user = 'ubuntu'
         WHERE id = ANY($1)",
    )
    .bind(launched.iter().map(|a| a.0).collect::<Vec<_>>())
    .execute(&pool)
    .await
    .expect("runs them");

    // This month's finished usage, rated (earlier months are already invoiced: the server
    // closes them): 120 runs spread from the 1st until an hour ago.
    let now = time::OffsetDateTime::now_utc();
    let month = now
        .replace_day(1)
        .unwrap()
        .replace_time(time::Time::MIDNIGHT);
    let span_h = (now - month).whole_hours() - 1;
    let mut conn = pool.acquire().await.unwrap();
    for i in 0..if span_h >= 24 { 120i64 } else { 0 } {
        let started = month + time::Duration::hours(i * span_h / 120);
        let ended =
            (started + time::Duration::hours(1 + i % 20)).min(now - time::Duration::hours(1));
        if ended <= started {
            continue;
        }
        import_run(
            &mut conn,
            &ImportedRun {
                tenant: ACME,
                project: if i % 2 == 0 {
                    ACME_RESEARCH
                } else {
                    ACME_INFERENCE
                },
                sku: SKUS[(i as usize) % SKUS.len()],
                listing: "ubuntu-24.04-cuda",
                name: &format!("history-{i}"),
                started_at: started,
                ended_at: ended,
                price_per_hour_minor: None,
                by: ALICE,
                key: &format!("pages-history-{i}"),
            },
        )
        .await
        .expect("imports");
    }
    drop(conn);
    let rated = rate_until(cp.pool(), now - time::Duration::minutes(5), 5000)
        .await
        .expect("rates");
    println!(
        "pages data: {} allocations in 2 projects ({refused} refused; {} running), 120 past runs ({} usage rows rated) in {:.1} s",
        2 * per_project - refused,
        launched.len(),
        rated.charges,
        t.elapsed().as_secs_f64()
    );
}
