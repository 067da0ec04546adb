//! The two halves of `cargo xtask chaos` that speak HTTP and SQL (xtask, std-only, starts the
//! processes and injects the faults):
//!
//! - `chaos-load`: clients that launch and release over the public API the way a program
//!   does (an `Idempotency-Key` per intended launch, retried on the other replica when a
//!   connection drops or a 5xx comes back), two of them launching a cluster of two every
//!   other round and releasing it whole, for `--seconds`; every answer is written to
//!   `--answers` (time, call, status, replica) for the audit.
//! - `chaos-audit`: once the faults have stopped, releases whatever the run left live
//!   (through the API), waits for the system to settle, and checks what the issue names:
//!   double-bookings, leaked slots, unconverged allocations, partial clusters, lost or
//!   duplicated tasks, the
//!   ledger against the allocations' intervals, invoices against Stripe, open reconciliation
//!   findings, and 500s outside the injected faults' windows (`--faults`). Prints a table
//!   and `RESULT chaos …`; exits 1 when a check fails.
//!
//! Flags: `--urls A,B` (the replicas), `--tokens-file F` (API tokens, one per line),
//! `--project ID`, `--seconds S`, `--seed N`, `--clients N`, `--answers F`, `--faults F`,
//! `--since-ms T` (the run's start, Unix ms), `--stripe URL`, `--settle-s S`. The audit reads
//! `DATABASE_URL`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use control_plane::ControlPlane;
use control_plane::Naming;
use control_plane::reconcile::ReconcileApi;
use serde_json::{Value, json};

use crate::common::{KEY, flag};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// splitmix64: the run's choices follow from `--seed`.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// Every answer the clients got.
#[derive(Default)]
struct Answers(Mutex<Vec<String>>);
impl Answers {
    /// One line: time, call, status, replica, refusal code, and the id of what a 2xx answer
    /// made or found (`-` for none).
    fn record(&self, call: &str, status: u16, replica: usize, code: &str, id: &str) {
        let line = format!("{}\t{call}\t{status}\t{replica}\t{code}\t{id}", now_ms());
        self.0.lock().unwrap().push(line);
    }
}

/// One API call: what, where, with what, and how the answers file names it.
struct Req<'a> {
    method: reqwest::Method,
    path: &'a str,
    body: Option<&'a Value>,
    key: Option<&'a str>,
    label: &'a str,
}

struct Api {
    http: reqwest::Client,
    urls: Vec<String>,
    answers: Answers,
}

impl Api {
    fn new(urls: Vec<String>) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("an HTTP client"),
            urls,
            answers: Answers::default(),
        }
    }

    /// One call; status 0 when no answer came (refused, reset, timed out).
    async fn call(&self, replica: usize, token: &str, req: Req<'_>) -> (u16, Value) {
        let Req {
            method,
            path,
            body,
            key,
            label,
        } = req;
        let url = format!("{}/api/v1{path}", self.urls[replica % self.urls.len()]);
        let mut req = self.http.request(method, url).bearer_auth(token);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(serde_json::to_vec(b).expect("serializes"));
        }
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let (status, value) = match req.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let bytes = r.bytes().await.unwrap_or_default();
                (
                    status,
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                )
            }
            Err(_) => (0, Value::Null),
        };
        // A refusal's machine-readable code (`sku_unavailable`, `rate_limited`, …).
        let code = value["code"].as_str().unwrap_or("-");
        let id = match status {
            200..=299 => value["id"].as_str().unwrap_or("-"),
            _ => "-",
        };
        self.answers
            .record(label, status, replica % self.urls.len(), code, id);
        (status, value)
    }
}

fn list_flag(name: &str) -> Vec<String> {
    flag::<String>(name, String::new())
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn tokens() -> Vec<String> {
    let path: String = flag("--tokens-file", String::new());
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("--tokens-file {path}: {e}"))
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("gpk_"))
        .map(String::from)
        .collect()
}

fn retryable(status: u16) -> bool {
    status == 0 || status == 429 || status >= 500
}

/// `bench chaos-load`
pub fn load() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(load_async());
}

async fn load_async() {
    let urls = list_flag("--urls");
    let tokens = tokens();
    assert!(
        !urls.is_empty() && !tokens.is_empty(),
        "--urls and --tokens-file"
    );
    let project: String = flag("--project", String::new());
    let seconds: u64 = flag("--seconds", 60);
    let seed: u64 = flag("--seed", 1);
    let clients: usize = flag("--clients", 6);
    let out: String = flag("--answers", "chaos-answers.tsv".to_string());
    let api = Arc::new(Api::new(urls));

    // What can be launched: the 1-GPU offers, as a program would look them up.
    let (status, offers) = api
        .call(
            0,
            &tokens[0],
            Req {
                method: reqwest::Method::GET,
                path: "/offers",
                body: None,
                key: None,
                label: "offers",
            },
        )
        .await;
    let offers: Vec<(String, String)> = offers["offers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["gpu_count"] == 1 && o["launchable"].as_i64().unwrap_or(0) > 0)
        .map(|o| {
            (
                o["sku"].as_str().unwrap_or_default().to_string(),
                o["region"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        !offers.is_empty(),
        "no 1-GPU offer can launch (GET /offers: {status})"
    );
    eprintln!("chaos-load: {clients} clients for {seconds} s over {offers:?}");

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let api = api.clone();
        let token = tokens[c % tokens.len()].clone();
        let offers = offers.clone();
        let project = project.clone();
        tasks.push(tokio::spawn(async move {
            client(c, &api, &token, &project, &offers, seed, deadline).await
        }));
    }
    let mut totals = Tally::default();
    for t in tasks {
        totals.add(&t.await.expect("a client ran"));
    }
    let lines = api.answers.0.lock().unwrap().join("\n");
    std::fs::write(&out, lines + "\n").unwrap_or_else(|e| panic!("{out}: {e}"));
    println!(
        "chaos-load: launched={} refused={} released={} gave_up={} volumes_made={} volumes_attached={} volumes_deleted={} restarted={} clusters_launched={} clusters_released={}",
        totals.launched,
        totals.refused,
        totals.released,
        totals.gave_up,
        totals.volumes_made,
        totals.volumes_attached,
        totals.volumes_deleted,
        totals.restarted,
        totals.clusters_launched,
        totals.clusters_released
    );
}

#[derive(Default)]
struct Tally {
    launched: u64,
    refused: u64,
    released: u64,
    gave_up: u64,
    volumes_made: u64,
    volumes_attached: u64,
    volumes_deleted: u64,
    restarted: u64,
    clusters_launched: u64,
    clusters_released: u64,
}
impl Tally {
    fn add(&mut self, o: &Tally) {
        self.launched += o.launched;
        self.refused += o.refused;
        self.released += o.released;
        self.gave_up += o.gave_up;
        self.volumes_made += o.volumes_made;
        self.volumes_attached += o.volumes_attached;
        self.volumes_deleted += o.volumes_deleted;
        self.restarted += o.restarted;
        self.clusters_launched += o.clusters_launched;
        self.clusters_released += o.clusters_released;
    }
}

async fn client(
    c: usize,
    api: &Api,
    token: &str,
    project: &str,
    offers: &[(String, String)],
    seed: u64,
    deadline: Instant,
) -> Tally {
    let mut rng = Rng(seed ^ ((c as u64 + 1) << 32));
    let mut tally = Tally::default();
    let mut n = 0;
    // Two clients launch a cluster every other round, on the fabric the demo fleet's
    // eu-west-1 hosts share.
    let cluster_offer = offers.iter().find(|(_, r)| r == "eu-west-1");
    while Instant::now() < deadline {
        n += 1;
        if let (true, 0, Some((sku, region))) = (c < 2, n % 2, cluster_offer) {
            let name = format!("chaos-{c}-{n}");
            cluster_round(
                api,
                token,
                project,
                (sku, region),
                &name,
                &mut rng,
                &mut tally,
            )
            .await;
            continue;
        }
        let (sku, region) = &offers[rng.below(offers.len() as u64) as usize];
        let body = json!({
            "project": project, "sku": sku, "region": region, "image": "ubuntu-24.04-cuda",
            "name": format!("chaos-{c}-{n}"), "ssh_public_keys": [KEY],
        });
        let key = uuid::Uuid::new_v4().to_string();
        // The same key on every try: a retry after a lost answer finds the first launch.
        let mut replica = rng.below(api.urls.len() as u64) as usize;
        let tried_until = Instant::now() + Duration::from_secs(45);
        let id = loop {
            let (status, v) = api
                .call(
                    replica,
                    token,
                    Req {
                        method: reqwest::Method::POST,
                        path: "/instances",
                        body: Some(&body),
                        key: Some(&key),
                        label: "launch",
                    },
                )
                .await;
            if status == 201 {
                break v["id"].as_str().map(String::from);
            }
            if !retryable(status) || Instant::now() > tried_until {
                break None;
            }
            replica += 1;
            tokio::time::sleep(rng.millis(300, 1200)).await;
        };
        let Some(id) = id else {
            tally.refused += 1;
            tokio::time::sleep(rng.millis(300, 1500)).await;
            continue;
        };
        tally.launched += 1;
        // Half the instances get a volume of their own, attached once they run.
        let volume = if rng.below(2) == 0 {
            let name = format!("chaos-{c}-{n}");
            with_volume(
                api, token, project, region, &name, &id, &mut rng, &mut tally,
            )
            .await
        } else {
            None
        };
        tokio::time::sleep(rng.millis(500, 3000)).await;
        // A quarter of them are stopped and started again first (their volumes stay).
        if rng.below(4) == 0 && stop_and_start(api, token, &id, &mut rng).await {
            tally.restarted += 1;
        }
        if release(api, token, &id, &mut rng, Duration::from_secs(60)).await {
            tally.released += 1;
        } else {
            tally.gave_up += 1;
        }
        // Its attachment ends with the instance; then it is deleted, as its owner would.
        if let Some(v) = volume {
            if delete_volume(api, token, &v, &mut rng, Duration::from_secs(60)).await {
                tally.volumes_deleted += 1;
            } else {
                tally.gave_up += 1;
            }
        }
    }
    tally
}

/// Launches a cluster of two (leaf preferred), waits a little, and releases it whole.
async fn cluster_round(
    api: &Api,
    token: &str,
    project: &str,
    (sku, region): (&str, &str),
    name: &str,
    rng: &mut Rng,
    tally: &mut Tally,
) {
    let body = json!({
        "project": project, "sku": sku, "region": region, "members": 2, "locality": "leaf",
        "image": "ubuntu-24.04-cuda", "name": name, "ssh_public_keys": [KEY],
    });
    let Some(id) = created(api, token, "/clusters", "cluster", &body, rng).await else {
        tally.refused += 1;
        tokio::time::sleep(rng.millis(300, 1500)).await;
        return;
    };
    tally.clusters_launched += 1;
    tokio::time::sleep(rng.millis(500, 3000)).await;
    if release_cluster(api, token, &id, rng, Duration::from_secs(60)).await {
        tally.clusters_released += 1;
    } else {
        tally.gave_up += 1;
    }
}

/// `POST path` with `body` under one new `Idempotency-Key` (the same on every try, so a retry
/// after a lost answer finds what the first made), retried as [`retried`] does; the id of
/// what it made or found.
async fn created(
    api: &Api,
    token: &str,
    path: &str,
    label: &str,
    body: &Value,
    rng: &mut Rng,
) -> Option<String> {
    let key = uuid::Uuid::new_v4().to_string();
    let req = Req {
        method: reqwest::Method::POST,
        path,
        body: Some(body),
        key: Some(&key),
        label,
    };
    let (status, v) = retried(api, token, req, rng, Duration::from_secs(45)).await;
    v["id"]
        .as_str()
        .filter(|_| matches!(status, 200 | 201))
        .map(String::from)
}

/// A call retried on the other replica while it has no answer or a 5xx, for up to `patience`.
async fn retried(
    api: &Api,
    token: &str,
    req: Req<'_>,
    rng: &mut Rng,
    patience: Duration,
) -> (u16, Value) {
    let until = Instant::now() + patience;
    let mut replica = rng.below(api.urls.len() as u64) as usize;
    loop {
        let (status, v) = api
            .call(
                replica,
                token,
                Req {
                    method: req.method.clone(),
                    path: req.path,
                    body: req.body,
                    key: req.key,
                    label: req.label,
                },
            )
            .await;
        if !retryable(status) || Instant::now() > until {
            return (status, v);
        }
        replica += 1;
        tokio::time::sleep(rng.millis(300, 1200)).await;
    }
}

/// Stops a running instance and starts it again, each until it reads so; false when a step
/// was refused (a start with no room in its region stays stopped) or ran out of patience.
async fn stop_and_start(api: &Api, token: &str, id: &str, rng: &mut Rng) -> bool {
    let path = format!("/instances/{id}");
    if !until_state(api, token, &path, "running", rng, Duration::from_secs(60)).await {
        return false;
    }
    for (action, want) in [("stop", "stopped"), ("start", "running")] {
        let req = Req {
            method: reqwest::Method::POST,
            path: &format!("{path}/{action}"),
            body: None,
            key: None,
            label: action,
        };
        let (status, _) = retried(api, token, req, rng, Duration::from_secs(60)).await;
        if status != 202
            || !until_state(api, token, &path, want, rng, Duration::from_secs(90)).await
        {
            return false;
        }
    }
    true
}

/// Reads `path` until its `state` is `want` (or it can't be, or `patience` runs out).
async fn until_state(
    api: &Api,
    token: &str,
    path: &str,
    want: &str,
    rng: &mut Rng,
    patience: Duration,
) -> bool {
    let until = Instant::now() + patience;
    while Instant::now() < until {
        let req = Req {
            method: reqwest::Method::GET,
            path,
            body: None,
            key: None,
            label: "read",
        };
        let (status, v) = retried(api, token, req, rng, patience).await;
        match (status, v["state"].as_str()) {
            (200, Some(s)) if s == want => return true,
            (200, Some("error" | "released" | "deleted")) => return false,
            (200, _) => {}
            _ if !retryable(status) => return false,
            _ => {}
        }
        tokio::time::sleep(rng.millis(200, 600)).await;
    }
    false
}

/// Makes a 1 GiB volume in the instance's region and attaches it once both are ready; its id
/// when it was made (attached or not: it is deleted either way).
#[allow(clippy::too_many_arguments)]
async fn with_volume(
    api: &Api,
    token: &str,
    project: &str,
    region: &str,
    name: &str,
    instance: &str,
    rng: &mut Rng,
    tally: &mut Tally,
) -> Option<String> {
    let body = json!({"project": project, "name": name, "region": region, "size_gib": 1});
    let volume = created(api, token, "/volumes", "volume", &body, rng).await?;
    tally.volumes_made += 1;
    let patience = Duration::from_secs(30);
    let ready = until_state(
        api,
        token,
        &format!("/volumes/{volume}"),
        "available",
        rng,
        patience,
    )
    .await
        && until_state(
            api,
            token,
            &format!("/instances/{instance}"),
            "running",
            rng,
            patience,
        )
        .await;
    if ready {
        let body = json!({"instance": instance});
        let req = Req {
            method: reqwest::Method::POST,
            path: &format!("/volumes/{volume}/attach"),
            body: Some(&body),
            key: None,
            label: "attach",
        };
        if retried(api, token, req, rng, patience).await.0 == 202 {
            tally.volumes_attached += 1;
        }
    }
    Some(volume)
}

/// Asks for the volume's deletion until it is accepted (or the volume is gone); a volume still
/// detaching from its released instance is refused for now, and asked again.
async fn delete_volume(
    api: &Api,
    token: &str,
    id: &str,
    rng: &mut Rng,
    patience: Duration,
) -> bool {
    let path = format!("/volumes/{id}");
    delete_until_accepted(api, token, &path, "vdelete", &[404], rng, patience).await
}

/// Asks for a cluster's release until it is accepted.
async fn release_cluster(
    api: &Api,
    token: &str,
    id: &str,
    rng: &mut Rng,
    patience: Duration,
) -> bool {
    let path = format!("/clusters/{id}");
    delete_until_accepted(api, token, &path, "crelease", &[], rng, patience).await
}

/// Asks for the release until it is accepted (or the instance is already gone).
async fn release(api: &Api, token: &str, id: &str, rng: &mut Rng, patience: Duration) -> bool {
    let path = format!("/instances/{id}");
    delete_until_accepted(api, token, &path, "release", &[], rng, patience).await
}

/// `DELETE path`, on the replicas in turn, until a 2xx (or one of `also`) answers or
/// `patience` runs out; whether it was accepted.
async fn delete_until_accepted(
    api: &Api,
    token: &str,
    path: &str,
    label: &str,
    also: &[u16],
    rng: &mut Rng,
    patience: Duration,
) -> bool {
    let until = Instant::now() + patience;
    let mut replica = rng.below(api.urls.len() as u64) as usize;
    loop {
        let req = Req {
            method: reqwest::Method::DELETE,
            path,
            body: None,
            key: None,
            label,
        };
        let (status, _) = api.call(replica, token, req).await;
        if (200..300).contains(&status) || also.contains(&status) {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        replica += 1;
        tokio::time::sleep(rng.millis(300, 1200)).await;
    }
}

/// A fault's window as xtask wrote it: `start_ms end_ms kind detail`.
struct Window {
    start: u64,
    end: u64,
}

/// After a fault ends, how long answers may still show it (a restarted replica's first
/// requests, a pool refilling after PostgreSQL came back).
const AFTERMATH_MS: u64 = 5_000;

/// `bench chaos-audit`
pub fn audit() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let failed = rt.block_on(audit_async());
    if failed {
        std::process::exit(1);
    }
}

struct Check {
    name: &'static str,
    value: i64,
    ok: bool,
    detail: String,
}

async fn audit_async() -> bool {
    let urls = list_flag("--urls");
    let tokens = tokens();
    let project: String = flag("--project", String::new());
    let project_id: uuid::Uuid = project.parse().expect("--project is a UUID");
    let since_ms: i64 = flag("--since-ms", 0);
    let settle_s: u64 = flag("--settle-s", 240);
    let stripe: String = flag("--stripe", String::new());
    let answers: String = flag("--answers", "chaos-answers.tsv".to_string());
    let faults: String = flag("--faults", "chaos-faults.tsv".to_string());
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let pool = control_plane::pool::sized(4)
        .connect(&url)
        .await
        .expect("connects");
    let cp = ControlPlane::new(pool.clone(), Naming::default());
    let since = time::OffsetDateTime::from_unix_timestamp_nanos(since_ms as i128 * 1_000_000)
        .expect("--since-ms is a time");
    let api = Api::new(urls);

    // 1. Release what the run left live (a launch whose answer was lost, a release that gave
    //    up), the way its owner would: through the API, a cluster whole.
    let clusters: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM clusters WHERE project_id = $1 AND created_at >= $2
           AND release_requested_at IS NULL",
    )
    .bind(project_id)
    .bind(since)
    .fetch_all(&pool)
    .await
    .expect("reads");
    let mut rng = Rng(7);
    for id in &clusters {
        let id = id.to_string();
        release_cluster(&api, &tokens[0], &id, &mut rng, Duration::from_secs(60)).await;
    }
    // Stopped instances too: their kept disks are erased with them.
    let live: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT coalesce(instance_id, id) FROM allocations WHERE project_id = $1 AND created_at >= $2
           AND cluster_id IS NULL AND superseded_by IS NULL
           AND (desired_state = 'running' OR (state = 'released' AND stop_root_volume IS NOT NULL))",
    )
    .bind(project_id)
    .bind(since)
    .fetch_all(&pool)
    .await
    .expect("reads");
    for id in &live {
        release(
            &api,
            &tokens[0],
            &id.to_string(),
            &mut rng,
            Duration::from_secs(60),
        )
        .await;
    }
    println!(
        "audit: released {} clusters and {} allocations the run left live",
        clusters.len(),
        live.len()
    );
    // And deletes the volumes it left (a client that gave up, or whose answer was lost).
    let kept: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM volumes WHERE project_id = $1 AND created_at >= $2
           AND state NOT IN ('deleting', 'deleted') AND root_of IS NULL",
    )
    .bind(project_id)
    .bind(since)
    .fetch_all(&pool)
    .await
    .expect("reads");
    for id in &kept {
        delete_volume(
            &api,
            &tokens[0],
            &id.to_string(),
            &mut rng,
            Duration::from_secs(90),
        )
        .await;
    }
    println!("audit: deleted {} volumes the run left", kept.len());

    // 2. Settle: every allocation of the run released and fully rated, no task waiting.
    let started = Instant::now();
    let mut waiting;
    loop {
        waiting = sqlx::query_as::<_, (i64, i64, i64, i64)>(
            "SELECT (SELECT count(*) FROM allocations
                     WHERE project_id = $1 AND created_at >= $2 AND state <> 'released'),
                    (SELECT count(*) FROM agent_tasks t JOIN allocations a ON a.id = t.allocation_id
                     WHERE a.project_id = $1 AND a.created_at >= $2 AND t.state IN ('queued', 'running')),
                    (SELECT count(*) FROM usage_intervals i JOIN allocations a ON a.id = i.allocation_id
                     WHERE a.project_id = $1 AND a.created_at >= $2 AND NOT i.fully_rated),
                    (SELECT count(*) FROM volumes
                     WHERE project_id = $1 AND created_at >= $2 AND state NOT IN ('deleted', 'error'))
                    + (SELECT count(*) FROM storage_intervals
                       WHERE project_id = $1 AND started_at >= $2 AND NOT fully_rated)",
        )
        .bind(project_id)
        .bind(since)
        .fetch_one(&pool)
        .await
        .expect("reads");
        if waiting == (0, 0, 0, 0) || started.elapsed() > Duration::from_secs(settle_s) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "audit: settled in {:.0} s (unreleased, unfinished tasks, unrated, volumes not deleted or not rated: {waiting:?})",
        started.elapsed().as_secs_f64()
    );
    // The hosts' reports must be fresh and the run's last changes older than reconciliation's
    // settling time before a run can judge them.
    tokio::time::sleep(Duration::from_secs_f64(
        control_plane::reconcile::SETTLE_S + 2.0,
    ))
    .await;
    let run = cp.reconcile_once().await.expect("reconciles");

    let mut checks = Vec::new();
    let mut scalar = |name: &'static str, value: i64, detail: String| {
        checks.push(Check {
            name,
            value,
            ok: value == 0,
            detail,
        })
    };
    let q = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .bind(project_id)
                .bind(since)
                .fetch_one(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
    };
    // Over the whole fleet, not only the run's project.
    let g = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
    };
    let launches =
        q("SELECT count(*) FROM allocations WHERE project_id = $1 AND created_at >= $2").await;
    scalar(
        "double_bookings",
        g("SELECT count(*) FROM (SELECT slot_id FROM resource_claims
             WHERE released_at IS NULL AND slot_id IS NOT NULL
             GROUP BY slot_id HAVING count(*) > 1) d")
        .await,
        "slots with two live claims".into(),
    );
    scalar(
        "leaked_slots",
        g("SELECT count(*) FROM node_resource_slots s
           WHERE s.retired_at IS NULL
             AND NOT (s.cleanup_state = 'blocked' AND s.cleanup_detail IS NOT NULL)
             AND (s.cleanup_state = 'cleaning'
                  OR EXISTS (SELECT 1 FROM resource_claims c JOIN allocations a ON a.id = c.allocation_id
                             WHERE c.slot_id = s.id AND c.released_at IS NULL AND a.state = 'released'))")
        .await,
        "slots neither free, held by a live allocation, nor blocked with a reason".into(),
    );
    let blocked = g("SELECT count(*) FROM node_resource_slots
                     WHERE cleanup_state = 'blocked' AND retired_at IS NULL")
    .await;
    scalar(
        "unconverged",
        q("SELECT count(*) FROM allocations a WHERE a.project_id = $1 AND a.created_at >= $2 AND (
             a.state <> 'released'
             OR EXISTS (SELECT 1 FROM resource_claims c WHERE c.allocation_id = a.id AND c.slot_id IS NOT NULL
                          AND NOT EXISTS (SELECT 1 FROM cleanup_certificates z
                                          WHERE z.allocation_id = a.id AND z.slot_id = c.slot_id)
                          -- (an allocation no agent ever had a task of needs no wipe: 0033)
                          AND EXISTS (SELECT 1 FROM agent_tasks t
                                      WHERE t.allocation_id = a.id AND t.claimed_at IS NOT NULL)))")
        .await,
        "not released, or a slot some host had released without a verified certificate".into(),
    );
    scalar(
        "partial_clusters",
        q(
            "SELECT count(*) FROM clusters c WHERE c.project_id = $1 AND c.created_at >= $2 AND (
             (SELECT count(*) FROM allocations a WHERE a.cluster_id = c.id) <> c.size
             OR (c.release_requested_at IS NULL
                 AND EXISTS (SELECT 1 FROM allocations a
                             WHERE a.cluster_id = c.id AND a.desired_state = 'released'))
             OR (c.release_requested_at IS NOT NULL
                 AND EXISTS (SELECT 1 FROM allocations a
                             WHERE a.cluster_id = c.id AND a.desired_state = 'running')))",
        )
        .await,
        "clusters of the run with a member missing, or with members on both sides of a release"
            .into(),
    );
    scalar(
        "lost_tasks",
        q(
            "SELECT count(*) FROM agent_tasks t JOIN allocations a ON a.id = t.allocation_id
           WHERE a.project_id = $1 AND a.created_at >= $2 AND t.state IN ('queued', 'running')",
        )
        .await,
        "tasks still queued or running after the settle".into(),
    );
    scalar(
        "duplicated_tasks",
        q(
            "SELECT count(*) FROM (SELECT t.allocation_id, t.kind FROM agent_tasks t
             JOIN allocations a ON a.id = t.allocation_id
             WHERE a.project_id = $1 AND a.created_at >= $2 AND t.state = 'succeeded'
               AND t.kind NOT LIKE '%network%'
             GROUP BY t.allocation_id, t.kind HAVING count(*) > 1) d",
        )
        .await,
        "an allocation's provision or release done twice".into(),
    );
    // Volumes: every one the run made is deleted, through its erasure, with no step left. (A
    // volume on two instances at once is not checked here: `attached_to` is one column, and
    // the database refuses a second attachment.)
    let volumes =
        q("SELECT count(*) FROM volumes WHERE project_id = $1 AND created_at >= $2").await;
    scalar(
        "volumes_unconverged",
        q("SELECT count(*) FROM volumes
           WHERE project_id = $1 AND created_at >= $2 AND state <> 'deleted'")
        .await,
        "volumes of the run not deleted after the settle (stuck in a step, or in error)".into(),
    );
    scalar(
        "volumes_unerased",
        q("SELECT count(*) FROM volumes v
           WHERE v.project_id = $1 AND v.created_at >= $2 AND v.state = 'deleted'
             AND NOT EXISTS (SELECT 1 FROM volume_erasures e WHERE e.volume_id = v.id)")
        .await,
        "deleted volumes without a sealed erasure record".into(),
    );
    // Stop and start: a started run that ran booted a disk a host saved at a stop before: the
    // stop's release, with the copy in its plan, succeeded (an agent answers it only after the
    // copy, or after a try of it that made the copy). Its phase reports are not the evidence:
    // they are best-effort, and a run lost them all under pool exhaustion. A root disk is then
    // erased like any volume: the checks above cover it.
    scalar(
        "restored_unsaved",
        q("SELECT count(*) FROM allocations n
           WHERE n.project_id = $1 AND n.created_at >= $2 AND n.restore_from IS NOT NULL
             AND EXISTS (SELECT 1 FROM usage_intervals u WHERE u.allocation_id = n.id)
             AND NOT EXISTS (SELECT 1 FROM allocations p
                             JOIN agent_tasks t ON t.allocation_id = p.id
                             WHERE p.stop_root_volume = n.restore_from
                               AND t.kind IN ('slice.vm_release', 'baremetal.release')
                               AND t.state = 'succeeded' AND t.spec ? 'save_root')")
        .await,
        "a started run booted a disk no stop had saved".into(),
    );
    scalar(
        "volume_steps_left",
        q(
            "SELECT count(*) FROM volume_jobs j JOIN volumes v ON v.id = j.volume_id
           WHERE v.project_id = $1 AND v.created_at >= $2 AND j.done_at IS NULL",
        )
        .await,
        "storage steps of the run's volumes not done".into(),
    );
    // The ledger: every interval of the run charged for exactly its time, at its price.
    let ledger = sqlx::query_as::<_, (i64, i64, f64)>(
        "SELECT coalesce(sum(abs(extract(epoch FROM i.ended_at - i.started_at) * 1000000
                                 - coalesce(c.us, 0)))::bigint, 0),
                count(*) FILTER (WHERE (extract(epoch FROM i.ended_at - i.started_at) * 1000000)::bigint
                                       <> coalesce(c.us, 0)),
                coalesce(sum(abs(extract(epoch FROM i.ended_at - i.started_at) * 1000000
                                 * i.price_per_hour_minor / 360000.0 - coalesce(c.micro, 0))) / 10000, 0)::float8
         FROM usage_intervals i JOIN allocations a ON a.id = i.allocation_id
         LEFT JOIN (SELECT allocation_id, sum(rated_us) AS us, sum(amount_micro) AS micro
                    FROM usage_charges GROUP BY allocation_id) c ON c.allocation_id = i.allocation_id
         WHERE a.project_id = $1 AND a.created_at >= $2",
    )
    .bind(project_id)
    .bind(since)
    .fetch_one(&pool)
    .await
    .expect("reads the ledger");
    let (gap_us, gap_intervals, diff_minor) = ledger;
    checks.push(Check {
        name: "ledger_diff_minor",
        value: diff_minor.round() as i64,
        // Each charge rounds down to a micro-unit (a millionth of the currency, as
        // `micro_until` rates): under one minor unit in all.
        ok: gap_intervals == 0 && diff_minor < 1.0,
        detail: format!(
            "{gap_intervals} intervals whose charges don't cover their time ({gap_us} µs); money off by {diff_minor:.6} minor units"
        ),
    });
    // The same for storage: every interval of the run's volumes charged for exactly its time,
    // at its size and price (`storage_micro_until`).
    let (storage_gaps, storage_diff_minor) = sqlx::query_as::<_, (i64, f64)>(
        "SELECT count(*) FILTER (WHERE (extract(epoch FROM i.ended_at - i.started_at) * 1000000)::bigint
                                       <> coalesce(c.us, 0)),
                coalesce(sum(abs(extract(epoch FROM i.ended_at - i.started_at) * 1000000
                                 * i.size_gib * i.price_per_gib_month_micro / 2628000000000.0
                                 - coalesce(c.micro, 0))) / 10000, 0)::float8
         FROM storage_intervals i
         LEFT JOIN (SELECT interval_id, sum(rated_us) AS us, sum(amount_micro) AS micro
                    FROM storage_charges GROUP BY interval_id) c ON c.interval_id = i.id
         WHERE i.project_id = $1 AND i.started_at >= $2",
    )
    .bind(project_id)
    .bind(since)
    .fetch_one(&pool)
    .await
    .expect("reads the storage ledger");
    checks.push(Check {
        name: "storage_ledger_diff_minor",
        value: storage_diff_minor.round() as i64,
        ok: storage_gaps == 0 && storage_diff_minor < 1.0,
        detail: format!(
            "{storage_gaps} storage intervals whose charges don't cover their time; money off by {storage_diff_minor:.6} minor units"
        ),
    });
    let (mismatched, compared) = invoices_against_stripe(&pool, &stripe).await;
    checks.push(Check {
        name: "invoice_mismatches",
        value: mismatched,
        ok: mismatched == 0,
        detail: format!("{compared} invoices with a Stripe id compared (total, status)"),
    });
    let stripe_left = sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM billing_outbox WHERE done_at IS NULL AND last_error IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .expect("reads");
    checks.push(Check {
        name: "stripe_sync_failing",
        value: stripe_left,
        ok: stripe_left == 0,
        detail: "Stripe syncs whose last try failed, after the settle".into(),
    });
    let findings = sqlx::query_as::<_, (String, String)>(
        "SELECT kind, evidence->>'summary' FROM reconciliation_findings
         WHERE cleared_at IS NULL AND found_at >= $1 ORDER BY kind",
    )
    .bind(since)
    .fetch_all(&pool)
    .await
    .expect("reads findings");
    checks.push(Check {
        name: "reconciliation_findings",
        value: findings.len() as i64,
        ok: findings.is_empty(),
        detail: format!(
            "open findings since the run began (the last run: {} seen, {} new){}",
            run.seen,
            run.new,
            findings
                .iter()
                .map(|(k, s)| format!("\n      {k}: {s}"))
                .collect::<String>()
        ),
    });

    // Every launch and cluster the clients were told was made must still be there: an
    // answer sent before a commit was durable (or before a failover kept it) is a lost one.
    let mut acknowledged: Vec<uuid::Uuid> = std::fs::read_to_string(&answers)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let made = matches!(f.get(1), Some(&"launch" | &"cluster"))
                && matches!(f.get(2), Some(&"200" | &"201"));
            made.then(|| f.get(5)?.parse().ok())?
        })
        .collect();
    acknowledged.sort();
    acknowledged.dedup();
    let found: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM allocations WHERE id = ANY($1))
              + (SELECT count(*) FROM clusters WHERE id = ANY($1))",
    )
    .bind(&acknowledged)
    .fetch_one(&pool)
    .await
    .expect("reads");
    let lost = acknowledged.len() as i64 - found;
    checks.push(Check {
        name: "lost",
        value: lost,
        ok: lost == 0,
        detail: format!(
            "launches and clusters answered 200/201 that are not in the database (of {} acknowledged)",
            acknowledged.len()
        ),
    });

    // 500s, and when they came: inside a fault's window (or its aftermath) they are the
    // fault showing; outside, they are ours.
    let windows: Vec<Window> = std::fs::read_to_string(&faults)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some(Window {
                start: f.first()?.parse().ok()?,
                end: f.get(1)?.parse().ok()?,
            })
        })
        .collect();
    let mut by_status: BTreeMap<(String, u16, String), u64> = BTreeMap::new();
    let mut errors_500 = 0;
    let mut during_faults = 0;
    for l in std::fs::read_to_string(&answers)
        .unwrap_or_default()
        .lines()
    {
        let f: Vec<&str> = l.split('\t').collect();
        let (Some(t), Some(call), Some(status)) = (
            f.first().and_then(|v| v.parse::<u64>().ok()),
            f.get(1),
            f.get(2).and_then(|v| v.parse::<u16>().ok()),
        ) else {
            continue;
        };
        let code = f.get(4).unwrap_or(&"-").to_string();
        *by_status
            .entry((call.to_string(), status, code))
            .or_default() += 1;
        if status >= 500 {
            if windows
                .iter()
                .any(|w| t + 1_000 >= w.start && t <= w.end + AFTERMATH_MS)
            {
                during_faults += 1;
            } else {
                errors_500 += 1;
            }
        }
    }
    checks.push(Check {
        name: "errors_500",
        value: errors_500,
        ok: errors_500 == 0,
        detail: format!("5xx answers outside every fault's window ({during_faults} inside one)"),
    });

    println!("\nanswers the clients got (call, status, code: count; status 0 = no answer):");
    for ((call, status, code), n) in &by_status {
        println!("  {call:<8} {status:>3} {code:<18} {n}");
    }
    println!("\n{:<24} {:>8}  result  what", "check", "value");
    for c in &checks {
        println!(
            "{:<24} {:>8}  {:<6}  {}",
            c.name,
            c.value,
            if c.ok { "ok" } else { "FAILED" },
            c.detail
        );
    }
    println!(
        "{:<24} {:>8}  {:<6}  slots blocked with a reason (not leaked; an operator looks)",
        "blocked_slots", blocked, "-"
    );
    let value = |name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .map_or(0, |c| c.value)
    };
    println!(
        "RESULT chaos launches={launches} volumes={volumes} faults={} acknowledged={} lost={} double_bookings={} leaked_slots={} unconverged={} lost_tasks={} duplicated_tasks={} volumes_unconverged={} volumes_unerased={} restored_unsaved={} ledger_diff_minor={} invoice_mismatches={} findings={} errors_500={}",
        windows.len(),
        acknowledged.len(),
        value("lost"),
        value("double_bookings"),
        value("leaked_slots"),
        value("unconverged"),
        value("lost_tasks"),
        value("duplicated_tasks"),
        value("volumes_unconverged"),
        value("volumes_unerased"),
        value("restored_unsaved"),
        value("ledger_diff_minor"),
        value("invoice_mismatches"),
        value("reconciliation_findings"),
        value("errors_500"),
    );
    let _ = std::io::stdout().flush();
    checks.iter().any(|c| !c.ok)
}

/// Every invoice Stripe holds, compared with ours: (mismatched, compared).
async fn invoices_against_stripe(pool: &sqlx::PgPool, stripe: &str) -> (i64, i64) {
    if stripe.is_empty() {
        return (0, 0);
    }
    let ours = sqlx::query_as::<_, (String, i64, String)>(
        "SELECT stripe_invoice_id, total_minor, status FROM invoices
         WHERE stripe_invoice_id IS NOT NULL ORDER BY stripe_invoice_id",
    )
    .fetch_all(pool)
    .await
    .expect("reads invoices");
    let http = reqwest::Client::new();
    let mut mismatched = 0;
    for (id, total, status) in &ours {
        let theirs: Value = match http
            .get(format!("{stripe}/v1/invoices/{id}"))
            .bearer_auth("sk_test_local_stripe_test_server")
            .send()
            .await
        {
            Ok(r) => {
                serde_json::from_slice(&r.bytes().await.unwrap_or_default()).unwrap_or(Value::Null)
            }
            Err(_) => Value::Null,
        };
        let same_total = theirs["total"].as_i64() == Some(*total);
        let same_status = theirs["status"].as_str() == Some(status.as_str())
            || (status == "draft" && theirs["status"] == "draft");
        if !(same_total && same_status) {
            mismatched += 1;
            println!(
                "  invoice {id}: ours {total} {status}, Stripe's {} {}",
                theirs["total"], theirs["status"]
            );
        }
    }
    (mismatched, ours.len() as i64)
}
