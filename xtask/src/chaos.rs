//! `cargo xtask chaos [--seconds S] [--seed N]`: the whole system on this machine — a durable
//! PostgreSQL, two server replicas, the Stripe test server, the demo fleet of simulated
//! agents, the first replica's storage worker on the qemu backend — with clients launching and
//! releasing over the public API (`bench chaos-load`), half of them with a volume made,
//! attached once the instance runs, and deleted after it, two of them also launching and
//! releasing clusters,
//! while faults chosen by the seed are injected one after another:
//!
//! | fault | how |
//! | --- | --- |
//! | `replica_kill` | `kill -9` of a server replica, restarted after 2–6 s |
//! | `agent_kill` | `kill -9` of an agent (at whatever phase it is in), restarted after 1–4 s |
//! | `pg_restart_fast`, `pg_restart_immediate` | PostgreSQL stopped (`-m fast` / `-m immediate`, i.e. a crash and WAL replay) and started again |
//! | `pool_exhaustion` | every free connection slot of PostgreSQL held by sessions sleeping 3–6 s |
//! | `stripe_faults` | the Stripe test server answers 503 for 4 s, loses two answers, answers two only after the client's 20 s timeout, and sends the held webhooks twice and newest first |
//! | `agent_cutoff` | an agent stopped (`SIGSTOP`) past the heartbeat timeout, then continued (runs of 150 s and more) |
//!
//! Then it stops injecting, restores anything down, and `bench chaos-audit` releases what is
//! left, waits for the system to settle and checks it (see `control-plane/benches/bench/chaos.rs`).
//! Ends with `RESULT chaos …`; fails when a check does. `cargo xtask test` runs 60 s of it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgcluster::{Durability, PgCluster, StopMode, StopOnDrop};

use crate::fleet::{self, Agent};
use crate::ha::{self, HaSet};
use crate::portal::{self, Launch};
use crate::proc::{http_post, http_status, terminate, wait_ready};
use crate::test::cargo;
use crate::tools::{self, Needs};
use crate::{Result, root, step, target_dir};

/// Acme Inference: a demo project with no policies, so what limits launches is the fleet.
const PROJECT: &str = "0a0e0000-0000-4000-8001-000000000002";
/// How long a node may be silent before it is unavailable (the control plane's threshold).
const HEARTBEAT_TIMEOUT_S: u64 = 60;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// splitmix64, as the load uses: the same seed injects the same faults at the same times.
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
    fn secs(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo * 1000 + self.below((hi - lo) * 1000 + 1))
    }
}

pub fn flag(args: &[String], name: &str, default: u64) -> Result<u64> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("`{name}` takes a number")),
    }
}

/// `cargo xtask chaos [--seconds S] [--seed N]`
pub fn run(args: &[String]) -> Result {
    for (i, a) in args.iter().enumerate() {
        let value_of_flag = i > 0 && matches!(args[i - 1].as_str(), "--seconds" | "--seed");
        if !value_of_flag && a != "--seconds" && a != "--seed" {
            return Err(format!(
                "`cargo xtask chaos` takes `--seconds S` and `--seed N` (got `{a}`)"
            ));
        }
    }
    let seconds = flag(args, "--seconds", 300)?;
    let seed = flag(args, "--seed", 1)?;
    build()?;
    chaos(seconds, seed)
}

/// What a run needs installed and built: the server, the node agent, the Stripe test server
/// and the load client.
pub fn build() -> Result {
    tools::ensure_all(Needs {
        postgres: true,
        chromium: false,
        npm: false,
        // qemu-img and qemu-storage-daemon for the volumes.
        host_tools: true,
    })?;
    step("building the server, the node agent, the Stripe test server and the load client");
    crate::proc::run(
        Command::new("cargo")
            .args(["leptos", "build", "--server-only"])
            .current_dir(root()),
    )?;
    crate::proc::run(&mut cargo(&[
        "build",
        "--package",
        "node-agent",
        "--package",
        "stripe-test-server",
    ]))?;
    crate::proc::run(&mut cargo(&[
        "test",
        "--no-run",
        "--package",
        "control-plane",
        "--bench",
        "bench",
    ]))
}

/// The bench binary's `chaos-load` / `chaos-audit` with `args`.
fn bench(mode: &str, args: &[String]) -> Command {
    let mut c = cargo(&[
        "test",
        "--quiet",
        "--package",
        "control-plane",
        "--bench",
        "bench",
        "--",
        mode,
    ]);
    c.args(args);
    c
}

/// Everything the run started, stopped when dropped.
struct System {
    launch: Launch,
    replica: Launch,
    servers: [Option<Child>; 2],
    agents: Vec<(Agent, Option<Child>)>,
    stripe: Option<Child>,
    stripe_port: u16,
    ports: [u16; 2],
}

impl Drop for System {
    fn drop(&mut self) {
        self.stop();
    }
}

impl System {
    /// Stops the agents (continued first if cut off), the servers and Stripe. Idempotent.
    fn stop(&mut self) {
        for (_, child) in &mut self.agents {
            if let Some(c) = child {
                let _ = Command::new("kill")
                    .args(["-CONT", &c.id().to_string()])
                    .status();
                terminate(c, Duration::from_secs(5));
            }
        }
        self.agents.clear();
        for c in self.servers.iter_mut().flatten() {
            terminate(c, Duration::from_secs(10));
        }
        self.servers = [None, None];
        if let Some(c) = &mut self.stripe {
            terminate(c, Duration::from_secs(5));
        }
        self.stripe = None;
    }

    fn start_server(&mut self, i: usize) -> Result {
        let mut child = if i == 0 {
            self.launch.start_replica()?
        } else {
            self.replica.start_replica()?
        };
        let ready = wait_ready(&mut child, self.ports[i], Duration::from_secs(90));
        self.servers[i] = Some(child);
        ready
    }
}

/// Waits until the load client says it has started (its first line, `chaos-load: N clients
/// …`), forwarding what it prints; the rest is forwarded as it comes.
fn until_the_load_runs(load: &mut Child) -> Result {
    use std::io::BufRead;
    let stderr = load.stderr.take().ok_or("the load's stderr is not piped")?;
    let (started, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(|l| l.ok())
        {
            eprintln!("{line}");
            if line.starts_with("chaos-load:") {
                let _ = started.send(());
            }
        }
    });
    loop {
        match wait.recv_timeout(Duration::from_millis(200)) {
            Ok(()) => return Ok(()),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the load client ended before it started".into());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Some(status) = load.try_wait().map_err(|e| e.to_string())? {
                    return Err(format!(
                        "the load client ended before it started ({status})"
                    ));
                }
            }
        }
    }
}

/// One fault as injected: when, what, for how long.
struct Injected {
    kind: &'static str,
    detail: String,
    start_ms: u64,
    end_ms: u64,
}

/// Where the run's database lives, and so what can go wrong with it.
pub enum Database {
    /// One durable PostgreSQL: restarted (fast, and as after a crash) and starved of
    /// connections.
    Single(StopOnDrop),
    /// Patroni's pair behind HAProxy (`xtask/src/ha.rs`): its primary lost.
    Ha(HaSet),
}

impl Database {
    fn url(&self, database: &str) -> String {
        match self {
            Database::Single(pg) => pg.url(database),
            Database::Ha(set) => set.url(database),
        }
    }

    /// The faults that fit this database, for a run of `seconds`.
    fn faults(&self, seconds: u64) -> Vec<&'static str> {
        match self {
            Database::Single(_) => {
                let mut kinds = vec![
                    "replica_kill",
                    "agent_kill",
                    "pg_restart_fast",
                    "pg_restart_immediate",
                    "pool_exhaustion",
                    "stripe_faults",
                ];
                // Long enough runs also cut an agent off for longer than the heartbeat timeout.
                if seconds >= 150 {
                    kinds.push("agent_cutoff");
                }
                kinds
            }
            Database::Ha(_) => vec!["primary_kill"],
        }
    }
}

/// The run itself, once everything is built (`cargo xtask test` calls this after its builds).
pub fn chaos(seconds: u64, seed: u64) -> Result {
    let dir = fresh_dir("chaos")?;
    step(
        "chaos: a durable PostgreSQL, the Stripe test server, two server replicas, the demo fleet",
    );
    let pg = StopOnDrop(
        PgCluster::init(dir.join("pg"), Durability::Durable).map_err(|e| e.to_string())?,
    );
    pg.start().map_err(|e| e.to_string())?;
    pg.ensure_database("chaos").map_err(|e| e.to_string())?;
    let mut run = Run::start(&dir, Database::Single(pg))?;
    let round = run.round(seconds, seed, Faults::Inject)?;
    step("chaos: faults stopped; releasing what is left, settling, auditing");
    run.audit(&round)?.passed()
}

/// `target/{name}`, emptied.
pub fn fresh_dir(name: &str) -> Result<PathBuf> {
    let dir = target_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Whether a round of load has faults injected into it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Faults {
    Inject,
    None,
}

/// The whole system on one database, its clients' API tokens, and the run's files.
pub struct Run {
    dir: PathBuf,
    pub db: Database,
    sys: System,
    stripe_api: String,
    tokens_file: PathBuf,
}

/// One round of load: when it began, what was injected, and what each lost primary cost.
pub struct Round {
    since_ms: u64,
    faults_file: PathBuf,
    pub failovers: Vec<Failover>,
}

/// A primary lost under load: how long the portal could not serve, whether `/readyz` said so
/// meanwhile, and how long the lost server took to come back as a replica.
pub struct Failover {
    pub unavailable: Duration,
    pub degraded_seen: bool,
    pub rejoined_after: Duration,
}

/// What the audit printed, and whether its checks passed.
pub struct Audit {
    pub ok: bool,
    /// `RESULT chaos key=value …`
    pub result: String,
    dir: PathBuf,
}

impl Audit {
    /// One value of the `RESULT chaos` line.
    pub fn value(&self, key: &str) -> Option<i64> {
        self.result.split_whitespace().find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == key).then(|| v.parse().ok())?
        })
    }

    pub fn passed(&self) -> Result {
        if self.ok {
            Ok(())
        } else {
            Err(format!(
                "the chaos audit failed (logs in {}; server logs server-1.log, server-2.log)",
                self.dir.display()
            ))
        }
    }
}

impl Run {
    /// The Stripe test server, two server replicas and the demo fleet on `db` (whose `chaos`
    /// database exists), and the clients' tokens.
    pub fn start(dir: &Path, db: Database) -> Result<Run> {
        let (sys, stripe_api) = start_system(dir, &db.url("chaos"))?;
        let tokens_file = api_tokens(&sys.launch, dir)?;
        Ok(Run {
            dir: dir.to_path_buf(),
            db,
            sys,
            stripe_api,
            tokens_file,
        })
    }

    fn client_args(&self, extra: &[(&str, String)]) -> Vec<String> {
        let [a, b] = self.sys.ports;
        let mut v = vec![
            "--urls".to_string(),
            format!("http://127.0.0.1:{a},http://127.0.0.1:{b}"),
            "--tokens-file".into(),
            self.tokens_file.display().to_string(),
            "--project".into(),
            PROJECT.into(),
            "--answers".into(),
            self.dir.join("answers.tsv").display().to_string(),
        ];
        for (k, val) in extra {
            v.push(k.to_string());
            v.push(val.clone());
        }
        v
    }

    /// `seconds` of launches and releases over the API, with the seed's faults injected
    /// one after another when asked.
    pub fn round(&mut self, seconds: u64, seed: u64, faults: Faults) -> Result<Round> {
        let since_ms = now_ms();
        step(&format!(
            "chaos: {seconds} s of launches and releases over the API, {} (logs in {})",
            match faults {
                Faults::Inject => format!("faults from seed {seed}"),
                Faults::None => "no faults".into(),
            },
            self.dir.display()
        ));
        let mut load = bench(
            "chaos-load",
            &self.client_args(&[
                ("--seconds", seconds.to_string()),
                ("--seed", seed.to_string()),
                ("--clients", "6".into()),
            ]),
        )
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the load: {e}"))?;
        // Faults go into load, not into the load client's build.
        until_the_load_runs(&mut load)?;
        let mut failovers = Vec::new();
        let injected = match faults {
            Faults::Inject => inject(self, &mut load, seconds, seed, &mut failovers)?,
            Faults::None => Vec::new(),
        };
        let faults_file = self.dir.join("faults.tsv");
        write_faults(&injected, &faults_file)?;
        let load_status = load.wait().map_err(|e| e.to_string())?;
        if !load_status.success() {
            return Err(format!("the load client failed ({load_status})"));
        }
        if faults == Faults::Inject {
            print_faults(&injected, since_ms);
        }
        Ok(Round {
            since_ms,
            faults_file,
            failovers,
        })
    }

    /// `bench chaos-audit` over what `round` did: releases what it left, settles, checks.
    pub fn audit(&self, round: &Round) -> Result<Audit> {
        let out = bench(
            "chaos-audit",
            &self.client_args(&[
                ("--faults", round.faults_file.display().to_string()),
                ("--since-ms", round.since_ms.to_string()),
                (
                    "--stripe",
                    self.stripe_api.trim_end_matches('/').to_string(),
                ),
            ]),
        )
        .env("DATABASE_URL", self.db.url("chaos"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("starting the audit: {e}"))?;
        let printed = String::from_utf8_lossy(&out.stdout);
        print!("{printed}");
        Ok(Audit {
            ok: out.status.success(),
            result: printed
                .lines()
                .find(|l| l.starts_with("RESULT chaos"))
                .unwrap_or_default()
                .to_string(),
            dir: self.dir.clone(),
        })
    }

    /// Stops both server replicas (the agents go on, and wait for them).
    pub fn stop_servers(&mut self) {
        for c in self.sys.servers.iter_mut().flatten() {
            terminate(c, Duration::from_secs(20));
        }
        self.sys.servers = [None, None];
    }

    /// Starts both server replicas again.
    pub fn start_servers(&mut self) -> Result {
        self.sys.start_server(0)?;
        self.sys.start_server(1)
    }

    /// The first replica's launch settings, to start one more server like it.
    pub fn launch(&self) -> &Launch {
        &self.sys.launch
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // Everything that uses the volume daemon and the database first.
        self.sys.stop();
        portal::stop_volume_daemon(&self.dir.join("volumes"));
    }
}

/// The Stripe test server, two server replicas (the first migrates and loads the demo data)
/// and the demo fleet's agents; and the Stripe API's address.
fn start_system(dir: &Path, database_url: &str) -> Result<(System, String)> {
    let log = |name: &str| -> Result<File> {
        File::create(dir.join(name)).map_err(|e| format!("creating {name}: {e}"))
    };
    let free = || pgcluster::free_port().map_err(|e| e.to_string());
    let ports = [free()?, free()?];
    let portal_url = format!("http://127.0.0.1:{}", ports[0]);
    let stripe_port = free()?;
    let webhook_secret = format!("whsec_{}", portal::random_password()?);
    let (stripe, stripe_api) = portal::start_stripe(
        &target_dir().join("debug/stripe-test-server"),
        stripe_port,
        &portal_url,
        &webhook_secret,
        Some(log("stripe.log")?),
    )?;
    let launch = Launch {
        binary: target_dir().join("debug/server"),
        database_url: database_url.to_string(),
        addr: format!("127.0.0.1:{}", ports[0]),
        site_root: target_dir().join("site"),
        site_env: "dev",
        admin_password: portal::random_password()?,
        demo_idp: None,
        stripe: Some((stripe_api.clone(), webhook_secret)),
        dns_resolver: None,
        secret_keys: portal::random_keyring("chaos")?,
        metrics_addr: "off".into(),
        metrics_token: None,
        log: Some(log("server-1.log")?),
        // The first replica's storage worker serves the run's volumes (the second has none).
        volumes: Some((dir.join("volumes"), format!("127.0.0.1:{}", free()?))),
    };
    let replica = launch.replica(
        format!("127.0.0.1:{}", ports[1]),
        Some(log("server-2.log")?),
    );
    let mut sys = System {
        servers: [None, None],
        agents: Vec::new(),
        stripe: Some(stripe),
        stripe_port,
        ports,
        replica,
        launch,
    };
    // The first start migrates and loads the demo data; restarts only serve.
    let mut first = sys.launch.start()?;
    wait_ready(&mut first, ports[0], Duration::from_secs(90))?;
    sys.servers[0] = Some(first);
    sys.start_server(1)?;
    sys.agents = fleet::start_agents(&sys.launch, &portal_url, &dir.join("agents"))?
        .into_iter()
        .map(|(a, c)| (a, Some(c)))
        .collect();
    Ok((sys, stripe_api))
}

/// API tokens, as a program would hold them (one per two clients: the per-token limit is the
/// API's, not what is under test), written one per line to a file; returns its path.
fn api_tokens(launch: &Launch, dir: &Path) -> Result<PathBuf> {
    let mut tokens = String::new();
    for _ in 0..3 {
        let out = launch.output(&[
            "demo-api-token",
            "--email",
            "alice@acme.example",
            "--scopes",
            "read,launch",
        ])?;
        let t = out
            .lines()
            .find(|l| l.starts_with("gpk_"))
            .ok_or("`server demo-api-token` printed no token")?;
        tokens.push_str(t);
        tokens.push('\n');
    }
    let tokens_file = dir.join("tokens");
    std::fs::write(&tokens_file, tokens).map_err(|e| e.to_string())?;
    Ok(tokens_file)
}

/// The faults injected, one per line: start and end (ms since the epoch), kind, detail.
fn write_faults(injected: &[Injected], file: &Path) -> Result {
    let mut faults = String::new();
    for f in injected {
        faults.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            f.start_ms, f.end_ms, f.kind, f.detail
        ));
    }
    std::fs::write(file, faults).map_err(|e| e.to_string())
}

/// The faults as a table: when each began (seconds into the run) and how long it lasted.
fn print_faults(injected: &[Injected], since_ms: u64) {
    eprintln!("\n{:<22} {:>8} {:>9}  detail", "fault", "at (s)", "for (s)");
    for f in injected {
        eprintln!(
            "{:<22} {:>8.1} {:>9.1}  {}",
            f.kind,
            f.start_ms.saturating_sub(since_ms) as f64 / 1000.0,
            f.end_ms.saturating_sub(f.start_ms) as f64 / 1000.0,
            f.detail
        );
    }
}

/// Injects faults until the load ends, one at a time, each restored before the next; returns
/// what it did. Everything is up again when it returns.
fn inject(
    run: &mut Run,
    load: &mut Child,
    seconds: u64,
    seed: u64,
    failovers: &mut Vec<Failover>,
) -> Result<Vec<Injected>> {
    let mut rng = Rng(seed);
    let mut done = Vec::new();
    let ends = Instant::now() + Duration::from_secs(seconds);
    let kinds = run.db.faults(seconds);
    let mut next = Instant::now() + rng.secs(2, 5);
    // Each kind once before any repeats, in the seed's order.
    let mut bag: Vec<&'static str> = Vec::new();
    loop {
        if load.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let left = ends.saturating_duration_since(Instant::now());
        if left < Duration::from_secs(8) {
            // Too close to the end to restore before the clients stop.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if bag.is_empty() {
            bag = kinds.clone();
        }
        let mut kind = bag.remove(rng.below(bag.len() as u64) as usize);
        if kind == "agent_cutoff" && left < Duration::from_secs(HEARTBEAT_TIMEOUT_S + 15) {
            kind = "agent_kill";
        }
        // A lost primary needs the leader lock to expire and the server to come back: it is
        // not started where the load would end before that.
        if kind == "primary_kill" && left < Duration::from_secs(ha::LEADER_TTL_S + 20) {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let start_ms = now_ms();
        let detail = match (kind, &mut run.db) {
            ("primary_kill", Database::Ha(set)) => {
                let f = lose_primary(set, run.sys.ports)?;
                let detail = format!(
                    "the portal unavailable {:.1} s ({}), the lost server a replica again {:.1} s after",
                    f.unavailable.as_secs_f64(),
                    if f.degraded_seen {
                        "/readyz said so"
                    } else {
                        "/readyz never said so"
                    },
                    f.rejoined_after.as_secs_f64()
                );
                failovers.push(f);
                detail
            }
            (kind, Database::Single(pg)) => one_fault(kind, &mut run.sys, pg, &mut rng)?,
            (kind, Database::Ha(_)) => return Err(format!("{kind} does not fit the HA set")),
        };
        eprintln!("    fault: {kind} ({detail})");
        done.push(Injected {
            kind,
            detail,
            start_ms,
            end_ms: now_ms(),
        });
        next = Instant::now() + rng.secs(2, 6);
    }
    Ok(done)
}

/// Kills the primary (Patroni and PostgreSQL, `SIGKILL`), watches both replicas' `/readyz`
/// until each answers 200 again, then starts the lost server again and waits until it follows
/// the new primary.
fn lose_primary(set: &mut HaSet, ports: [u16; 2]) -> Result<Failover> {
    let lost = set
        .primary()
        .ok_or("no server is primary before the kill")?;
    let killed = Instant::now();
    set.kill(lost)?;
    let mut degraded_seen = false;
    let mut back = [None::<Duration>; 2];
    while back.iter().any(Option::is_none) {
        if killed.elapsed() > Duration::from_secs(120) {
            return Err("the portal did not answer /readyz 200 within 120 s of the kill".into());
        }
        for (i, port) in ports.iter().enumerate() {
            if back[i].is_some() {
                continue;
            }
            match http_status(*port, "/readyz") {
                Some(200) if degraded_seen => back[i] = Some(killed.elapsed()),
                Some(503) => degraded_seen = true,
                _ => {}
            }
        }
        // A replica that never saw the outage must still be seen to answer after it.
        if !degraded_seen && killed.elapsed() > Duration::from_secs(ha::LEADER_TTL_S + 30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let unavailable = back
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or(killed.elapsed());
    // The lost machine is repaired and its server started again.
    std::thread::sleep(Duration::from_secs(2));
    set.restart(lost)?;
    set.wait_member(lost, "/replica", Duration::from_secs(120))?;
    Ok(Failover {
        unavailable,
        degraded_seen,
        rejoined_after: killed.elapsed(),
    })
}

fn one_fault(kind: &str, sys: &mut System, pg: &PgCluster, rng: &mut Rng) -> Result<String> {
    Ok(match kind {
        "replica_kill" => {
            let i = rng.below(2) as usize;
            if let Some(c) = &mut sys.servers[i] {
                let _ = c.kill();
                let _ = c.wait();
            }
            let down = rng.secs(2, 6);
            std::thread::sleep(down);
            sys.start_server(i)?;
            format!("replica {} down {:.1} s", i + 1, down.as_secs_f64())
        }
        "agent_kill" | "agent_cutoff" => {
            let i = rng.below(sys.agents.len() as u64) as usize;
            let (agent, child) = &mut sys.agents[i];
            let name = agent.hostname.clone();
            if kind == "agent_kill" {
                if let Some(c) = child {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let down = rng.secs(1, 4);
                std::thread::sleep(down);
                *child = Some(agent.spawn()?);
                format!("{name} down {:.1} s", down.as_secs_f64())
            } else {
                let pid = child
                    .as_ref()
                    .map(|c| c.id().to_string())
                    .unwrap_or_default();
                let _ = Command::new("kill").args(["-STOP", &pid]).status();
                let away = Duration::from_secs(HEARTBEAT_TIMEOUT_S + 5);
                std::thread::sleep(away);
                let _ = Command::new("kill").args(["-CONT", &pid]).status();
                format!("{name} silent {} s", away.as_secs())
            }
        }
        "pg_restart_fast" | "pg_restart_immediate" => {
            let mode = if kind == "pg_restart_fast" {
                StopMode::Fast
            } else {
                StopMode::Immediate
            };
            pg.stop_with(mode).map_err(|e| e.to_string())?;
            let down = rng.secs(1, 3);
            std::thread::sleep(down);
            pg.start().map_err(|e| e.to_string())?;
            format!("down {:.1} s", down.as_secs_f64())
        }
        "pool_exhaustion" => {
            let hold = rng.secs(3, 6);
            let free: i64 = pg_output(
                pg,
                "SELECT current_setting('max_connections')::int - count(*) FROM pg_stat_activity",
            )?
            .trim()
            .parse()
            .map_err(|e| format!("reading free connections: {e}"))?;
            let sleep = format!("SELECT pg_sleep({})", hold.as_secs_f64());
            let mut held: Vec<Child> = Vec::new();
            for _ in 0..free.max(0) - 1 {
                held.push(
                    pg.psql("chaos")
                        .args(["-c", &sleep])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .map_err(|e| format!("starting psql: {e}"))?,
                );
            }
            // Once they are all taken, the servers' own connections are cut: their pools must
            // open new ones where one slot (this session's, once it ends) is left for both.
            std::thread::sleep(Duration::from_millis(500));
            let cut = pg_output(
                pg,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND application_name <> 'psql'
                   AND pid <> pg_backend_pid()",
            )
            .unwrap_or_default();
            for mut c in held {
                let _ = c.wait();
            }
            format!(
                "{} of {free} free connections held {:.1} s, the servers' {} cut",
                free - 1,
                hold.as_secs_f64(),
                cut.trim()
            )
        }
        "stripe_faults" => {
            let port = sys.stripe_port;
            let set = |body: &str| {
                http_post(port, "/_test/faults", body)
                    .filter(|s| *s == 204)
                    .ok_or_else(|| format!("the Stripe test server refused faults {body}"))
            };
            set(
                r#"{"fail_for_ms": 4000, "lose_responses": 2, "delay_requests": 2, "delay_ms": 21000, "duplicate_events": true, "hold_events": true}"#,
            )?;
            std::thread::sleep(Duration::from_secs(6));
            // Held events go out twice, newest first; then back to normal.
            let _ = http_post(port, "/_test/flush", "{}");
            set("{}")?;
            "503s for 4 s, 2 lost answers, 2 answers past the client's timeout, webhooks twice and reversed".into()
        }
        other => return Err(format!("unknown fault {other}")),
    })
}

fn pg_output(pg: &PgCluster, sql: &str) -> Result<String> {
    crate::proc::checked_output(pg.psql("chaos").args(["-At", "-c", sql]))
}
