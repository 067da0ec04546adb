//! `cargo xtask bench peers [--nodes N] [--clients N] [--seconds S] [--limit N] [--workers N]`:
//! our placement beside OpenStack Placement's, on this machine, in one run, on one durable
//! PostgreSQL cluster, with the same fleet, request mix and concurrency, one system at a time.
//!
//! - Ours: `bench placement` as it stands (its empty-fleet phase is the comparison).
//! - OpenStack Placement: the API from PyPI at the versions `xtask/peers/placement-requirements.txt`
//!   pins, in a virtualenv under the target directory, served by gunicorn on loopback, and
//!   driven by `bench peer-placement` as Nova's scheduler drives it.
//! - Slurm: not run; [`SLURM_BLOCKED`] says why.
//!
//! Prints each system's own lines, then `RESULT peers …`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::proc::{http_status, run, terminate};
use crate::tools::{self, Needs};
use crate::{Result, root, step, target_dir};

/// Why Slurm is not in the comparison on this machine. Debian's `slurm-wlm-emulator` daemons
/// are built with `--enable-front-end` (they stop with "No front end nodes defined" without a
/// `FrontendName`), but they load the shared `libslurmfull.so` of `slurm-wlm-basic-plugins`,
/// built without it, which refuses any `FrontendName` ("Use of FrontendName in slurm.conf
/// without Slurm being configured/built with the --enable-front-end option"). So no
/// configuration starts them. The ordinary `slurmctld` runs, but its nodes stay `UNKNOWN`
/// until a `slurmd` registers each one, and one `slurmd` per node is 10,000 processes.
pub const SLURM_BLOCKED: &str = "Debian's slurm-wlm-emulator daemons (22.05.8) need a front-end build of libslurmfull.so that Debian does not ship; see docs/PERFORMANCE.md, Peers";

const REQUIREMENTS: &str = "xtask/peers/placement-requirements.txt";

/// What building psycopg2 from source needs, and the virtualenv itself.
const PLACEMENT_BUILD_DEPS: &[&str] = &["libpq-dev", "python3-dev", "python3-venv", "gcc"];

pub fn run_peers(args: &[String]) -> Result {
    crate::bench::checked_flags(
        &["--nodes", "--clients", "--seconds", "--limit", "--workers"],
        args,
    )?;
    let value = |name: &str, default: &str| crate::bench::flag_value(args, name, default);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sizes = Sizes {
        nodes: value("--nodes", "10000"),
        clients: value("--clients", "32"),
        seconds: value("--seconds", "10"),
        limit: value("--limit", "1000"),
        workers: value("--workers", &(2 * cores).to_string()),
    };
    tools::ensure_all(Needs {
        postgres: true,
        chromium: false,
        npm: false,
        host_tools: false,
    })?;
    step("starting PostgreSQL with durable commits (one cluster for every system, run in turn)");
    let dir = std::env::temp_dir().join(format!("portal-pg-peers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = StopOnDrop(PgCluster::init(&dir, Durability::Durable).map_err(|e| e.to_string())?);
    pg.start().map_err(|e| e.to_string())?;
    let result = compare(&pg, &sizes, crate::bench::bench_binary);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", result?);
    Ok(())
}

/// What `cargo xtask test` runs: the whole comparison on a tiny fleet for a second each, in
/// the test profile, so that a change to the schema, the fleet or Placement's pins that breaks
/// it fails there. The figures mean nothing at this size.
pub fn smoke(pg: &PgCluster, cargo_test: impl Fn() -> Command) -> Result {
    let sizes = Sizes {
        nodes: "60".into(),
        clients: "4".into(),
        seconds: "1".into(),
        limit: "20".into(),
        workers: "2".into(),
    };
    let line = compare(pg, &sizes, |name, url| {
        let mut c = cargo_test();
        c.args(["--package", "control-plane", "--bench", "bench", "--", name])
            .env("DATABASE_URL", url);
        c
    })?;
    println!("{line}");
    Ok(())
}

/// The comparison's sizes, as the flags give them.
struct Sizes {
    nodes: String,
    clients: String,
    seconds: String,
    /// Allocation candidates asked of Placement per launch.
    limit: String,
    /// gunicorn workers serving Placement.
    workers: String,
}

/// Ours, then Placement, on fresh databases of `pg`, each alone; `bench(name, database_url)`
/// is how the benchmark binary is run. The `RESULT peers` line.
fn compare(pg: &PgCluster, sizes: &Sizes, bench: impl Fn(&str, &str) -> Command) -> Result<String> {
    tools::ensure_debian_packages(PLACEMENT_BUILD_DEPS)?;
    let venv = placement_venv()?;
    for db in ["peers_ours", "peers_placement"] {
        pg.ensure_database(db).map_err(|e| e.to_string())?;
    }
    let postmaster_pid = pg.root().join("data/postmaster.pid");
    let common = [
        "--nodes",
        &sizes.nodes,
        "--clients",
        &sizes.clients,
        "--seconds",
        &sizes.seconds,
    ];

    step("ours: bench placement");
    let ours = tee(bench("placement", &pg.url("peers_ours"))
        .args(common)
        .env("PG_POSTMASTER_PID", &postmaster_pid))?;
    let ours = result_fields(&ours, "placement")?;

    step(&format!(
        "OpenStack Placement: its schema, then gunicorn with {} workers on loopback",
        sizes.workers
    ));
    let work = pg.root().join("placement");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let conf = work.join("placement.conf");
    std::fs::write(&conf, placement_conf(&pg.url("peers_placement")))
        .map_err(|e| format!("{}: {e}", conf.display()))?;
    run(Command::new(venv.join("bin/placement-manage"))
        .arg("--config-file")
        .arg(&conf)
        .args(["db", "sync"]))?;
    let port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let mut api = start_placement(&venv, &work, port, &sizes.workers)?;
    let peer = wait_for_placement(&mut api, port).and_then(|()| {
        step("Placement under the same load: bench peer-placement");
        tee(bench("peer-placement", &pg.url("peers_placement"))
            .args(common)
            .args(["--limit", &sizes.limit])
            .env("PLACEMENT_URL", format!("http://127.0.0.1:{port}"))
            .env("PEER_PIDS", api.id().to_string())
            .env("PG_POSTMASTER_PID", &postmaster_pid))
    });
    terminate(&mut api, Duration::from_secs(10));
    let peer = result_fields(&peer?, "peer-placement")?;
    println!("Slurm: not measured: {SLURM_BLOCKED}");
    summary(&sizes.nodes, &sizes.clients, &ours, &peer)
}

/// The virtualenv with Placement at the pinned versions, made once (and again when the pins
/// change: the requirements are copied in beside what they installed).
fn placement_venv() -> Result<PathBuf> {
    let venv = target_dir().join("peers/placement-venv");
    let wanted = std::fs::read_to_string(root().join(REQUIREMENTS))
        .map_err(|e| format!("{REQUIREMENTS}: {e}"))?;
    let installed = venv.join("requirements.txt");
    if std::fs::read_to_string(&installed).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(venv);
    }
    step(&format!(
        "installing OpenStack Placement ({REQUIREMENTS}) into {} (once, about a minute: psycopg2 is built from source)",
        venv.display()
    ));
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--no-binary", "psycopg2", "-r"])
        .arg(root().join(REQUIREMENTS)))?;
    std::fs::write(&installed, wanted).map_err(|e| format!("{}: {e}", installed.display()))?;
    Ok(venv)
}

/// Placement's configuration: no Keystone (`noauth2`, the token is the role), the database,
/// and candidates shuffled, which an operator sets so that concurrent schedulers don't all
/// race for the first provider.
fn placement_conf(database_url: &str) -> String {
    let connection = database_url.replacen("postgres://", "postgresql+psycopg2://", 1);
    format!(
        "[DEFAULT]\n\
         debug = False\n\
         [api]\n\
         auth_strategy = noauth2\n\
         [placement_database]\n\
         connection = {connection}\n\
         max_pool_size = 16\n\
         max_overflow = 16\n\
         [placement]\n\
         randomize_allocation_candidates = True\n"
    )
}

fn start_placement(venv: &Path, work: &Path, port: u16, workers: &str) -> Result<Child> {
    let log = std::fs::File::create(work.join("gunicorn.log")).map_err(|e| e.to_string())?;
    Command::new(venv.join("bin/gunicorn"))
        // A request for candidates on a large fleet runs for many seconds on two cores; gunicorn's
        // default 30 s would kill the worker mid-request and count Placement's slowness as errors.
        .args(["--workers", workers, "--timeout", "900", "--bind"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--log-level", "warning", "placement.wsgi.api:application"])
        .env("OS_PLACEMENT_CONFIG_DIR", work)
        .current_dir(work)
        .stdout(Stdio::from(log.try_clone().map_err(|e| e.to_string())?))
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("starting gunicorn: {e}"))
}

fn wait_for_placement(api: &mut Child, port: u16) -> Result {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Some(status) = api.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "the Placement API exited before it answered ({status})"
            ));
        }
        if http_status(port, "/") == Some(200) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err("the Placement API did not answer within 60 s".into())
}

/// Runs `cmd`, passing its output through as it comes, and returns its standard output.
fn tee(cmd: &mut Command) -> Result<String> {
    use std::io::BufRead;
    eprintln!("    $ {}", crate::proc::show(cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start `{}`: {e}", crate::proc::show(cmd)))?;
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.map_err(|e| e.to_string())?;
            println!("{line}");
            out.push_str(&line);
            out.push('\n');
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if status.success() {
        Ok(out)
    } else {
        Err(format!("`{}` failed ({status})", crate::proc::show(cmd)))
    }
}

/// The `key=value` fields of the line `RESULT <name> …` in `output`.
fn result_fields(output: &str, name: &str) -> Result<Vec<(String, String)>> {
    let prefix = format!("RESULT {name} ");
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .ok_or_else(|| format!("no `RESULT {name}` line in the benchmark's output"))?;
    Ok(line
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn field(fields: &[(String, String)], key: &str) -> Result<f64> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| format!("the RESULT line has no number {key}"))
}

/// The comparison line. Slurm's figures are `NA` while [`SLURM_BLOCKED`] holds; the ratio is
/// ours over the best peer that ran.
fn summary(
    nodes: &str,
    clients: &str,
    ours: &[(String, String)],
    placement: &[(String, String)],
) -> Result<String> {
    let ours_rate = field(ours, "placements_per_s")?;
    let peer_rate = field(placement, "placements_per_s")?;
    Ok(format!(
        "RESULT peers nodes={nodes} clients={clients} ours_per_s={ours_rate:.0} ours_p99_ms={:.1} placement_per_s={peer_rate:.2} placement_p99_ms={:.1} slurm_per_s=NA slurm_p99_ms=NA ours_over_best_peer={:.1} ours_what_free_p99_ms={:.2} placement_what_free_p99_ms={:.1} ours_cpu_ms_per_alloc={:.2} placement_cpu_ms_per_alloc={:.2} placement_overcommitted={}",
        field(ours, "p99_ms")?,
        field(placement, "p99_ms")?,
        ours_rate / peer_rate.max(1e-9),
        field(ours, "availability_p99_ms")?,
        field(placement, "what_free_p99_ms")?,
        field(ours, "cpu_ms_per_placement")?,
        field(placement, "cpu_ms_per_placement")?,
        field(placement, "overcommitted")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_line_is_read_into_its_fields_and_a_missing_one_is_named() {
        let out =
            "fleet: built\nRESULT placement placements_per_s=612 p99_ms=71.5 errors=0\ndone\n";
        let f = result_fields(out, "placement").unwrap();
        assert_eq!(field(&f, "placements_per_s").unwrap(), 612.0);
        assert_eq!(field(&f, "p99_ms").unwrap(), 71.5);
        assert!(
            field(&f, "cpu_ms_per_placement")
                .unwrap_err()
                .contains("cpu_ms_per_placement")
        );
        assert!(
            result_fields(out, "peer-placement")
                .unwrap_err()
                .contains("RESULT peer-placement")
        );
    }

    #[test]
    fn the_summary_divides_ours_by_the_peer_and_says_slurm_did_not_run() {
        let ours = result_fields(
            "RESULT placement placements_per_s=600 p99_ms=80.0 availability_p99_ms=1.25 cpu_ms_per_placement=2.50\n",
            "placement",
        )
        .unwrap();
        let peer = result_fields(
            "RESULT peer-placement placements_per_s=150 p99_ms=400.0 what_free_p99_ms=900.0 cpu_ms_per_placement=20.00 overcommitted=0\n",
            "peer-placement",
        )
        .unwrap();
        let line = summary("10000", "32", &ours, &peer).unwrap();
        assert!(line.starts_with("RESULT peers nodes=10000 clients=32 ours_per_s=600 ours_p99_ms=80.0 placement_per_s=150.00 placement_p99_ms=400.0 slurm_per_s=NA"), "{line}");
        assert!(line.contains(" ours_over_best_peer=4.0 "), "{line}");
        assert!(line.ends_with("placement_overcommitted=0"), "{line}");
    }

    #[test]
    fn placement_reaches_the_database_through_psycopg2_and_shuffles_candidates() {
        let conf = placement_conf("postgres://portal:pw@127.0.0.1:5432/placement");
        assert!(
            conf.contains(
                "connection = postgresql+psycopg2://portal:pw@127.0.0.1:5432/placement\n"
            )
        );
        assert!(conf.contains("auth_strategy = noauth2\n"));
        assert!(conf.contains("randomize_allocation_candidates = True\n"));
    }

    #[test]
    fn every_pin_names_one_version() {
        let pins = std::fs::read_to_string(root().join(REQUIREMENTS)).unwrap();
        let lines: Vec<&str> = pins.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(lines.iter().any(|l| l.starts_with("openstack-placement==")));
        assert!(lines.iter().any(|l| l.starts_with("gunicorn==")));
        for l in lines {
            let (name, version) = l
                .split_once("==")
                .unwrap_or_else(|| panic!("{l} is not pinned"));
            assert!(
                !name.is_empty() && !version.is_empty() && !version.contains(['<', '>', '*']),
                "{l}"
            );
        }
    }
}
