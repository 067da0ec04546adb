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
use crate::portal::{self, Launch};
use crate::proc::{http_post, terminate, wait_ready};
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

fn flag(args: &[String], name: &str, default: u64) -> Result<u64> {
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
    chaos(seconds, seed)
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
        for (_, child) in &mut self.agents {
            if let Some(c) = child {
                let _ = Command::new("kill")
                    .args(["-CONT", &c.id().to_string()])
                    .status();
                terminate(c, Duration::from_secs(5));
            }
        }
        for c in self.servers.iter_mut().flatten() {
            terminate(c, Duration::from_secs(10));
        }
        if let Some(c) = &mut self.stripe {
            terminate(c, Duration::from_secs(5));
        }
    }
}

impl System {
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

/// One fault as injected: when, what, for how long.
struct Injected {
    kind: &'static str,
    detail: String,
    start_ms: u64,
    end_ms: u64,
}

/// The run itself, once everything is built (`cargo xtask test` calls this after its builds).
pub fn chaos(seconds: u64, seed: u64) -> Result {
    let dir = target_dir().join("chaos");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

    step(
        "chaos: a durable PostgreSQL, the Stripe test server, two server replicas, the demo fleet",
    );
    let pg = StopOnDrop(
        PgCluster::init(dir.join("pg"), Durability::Durable).map_err(|e| e.to_string())?,
    );
    pg.start().map_err(|e| e.to_string())?;
    pg.ensure_database("chaos").map_err(|e| e.to_string())?;
    let (mut sys, stripe_api) = start_system(&dir, &pg)?;
    let ports = sys.ports;
    let tokens_file = api_tokens(&sys.launch, &dir)?;

    let urls = format!(
        "http://127.0.0.1:{},http://127.0.0.1:{}",
        ports[0], ports[1]
    );
    let answers = dir.join("answers.tsv");
    let faults_file = dir.join("faults.tsv");
    let common = |extra: &[(&str, String)]| -> Vec<String> {
        let mut v = vec![
            "--urls".to_string(),
            urls.clone(),
            "--tokens-file".into(),
            tokens_file.display().to_string(),
            "--project".into(),
            PROJECT.into(),
            "--answers".into(),
            answers.display().to_string(),
        ];
        for (k, val) in extra {
            v.push(k.to_string());
            v.push(val.clone());
        }
        v
    };
    let since_ms = now_ms();
    step(&format!(
        "chaos: {seconds} s of launches and releases over the API, faults from seed {seed} (logs in {})",
        dir.display()
    ));
    let mut load = bench(
        "chaos-load",
        &common(&[
            ("--seconds", seconds.to_string()),
            ("--seed", seed.to_string()),
            ("--clients", "6".into()),
        ]),
    )
    .spawn()
    .map_err(|e| format!("starting the load: {e}"))?;

    let injected = inject(&mut sys, &pg, &mut load, seconds, seed)?;
    write_faults(&injected, &faults_file)?;
    let load_status = load.wait().map_err(|e| e.to_string())?;
    if !load_status.success() {
        return Err(format!("the load client failed ({load_status})"));
    }

    print_faults(&injected, since_ms);
    step("chaos: faults stopped; releasing what is left, settling, auditing");
    let audit = bench(
        "chaos-audit",
        &common(&[
            ("--faults", faults_file.display().to_string()),
            ("--since-ms", since_ms.to_string()),
            ("--stripe", stripe_api.trim_end_matches('/').to_string()),
        ]),
    )
    .env("DATABASE_URL", pg.url("chaos"))
    .status()
    .map_err(|e| format!("starting the audit: {e}"))?;
    drop(sys);
    portal::stop_volume_daemon(&dir.join("volumes"));
    if audit.success() {
        Ok(())
    } else {
        Err(format!(
            "the chaos audit failed (logs in {}; server logs server-1.log, server-2.log)",
            dir.display()
        ))
    }
}

/// The Stripe test server, two server replicas (the first migrates and loads the demo data)
/// and the demo fleet's agents; and the Stripe API's address.
fn start_system(dir: &Path, pg: &StopOnDrop) -> Result<(System, String)> {
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
        database_url: pg.url("chaos"),
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
    sys: &mut System,
    pg: &PgCluster,
    load: &mut Child,
    seconds: u64,
    seed: u64,
) -> Result<Vec<Injected>> {
    let mut rng = Rng(seed);
    let mut done = Vec::new();
    let ends = Instant::now() + Duration::from_secs(seconds);
    let mut kinds = vec![
        "replica_kill",
        "agent_kill",
        "pg_restart_fast",
        "pg_restart_immediate",
        "pool_exhaustion",
        "stripe_faults",
    ];
    // Long enough runs also cut an agent off for longer than the heartbeat timeout.
    let cutoff_fits = seconds >= 150;
    if cutoff_fits {
        kinds.push("agent_cutoff");
    }
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
        let start_ms = now_ms();
        let detail = one_fault(kind, sys, pg, &mut rng)?;
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
    let out = pg
        .psql("chaos")
        .args(["-At", "-c", sql])
        .output()
        .map_err(|e| format!("running psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "psql `{sql}`: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
