//! The project's automation. `cargo xtask dev` runs the portal; `cargo xtask test` runs every
//! check. Both install what is missing first. Only `pgcluster` and small crates (`ctrlc`,
//! `serde_json`, `httparse`), so this crate builds in seconds on a fresh machine.

mod bench;
mod chaos;
mod dev;
mod fleet;
mod ha;
mod image;
mod integrations;
mod layers;
mod package;
mod pageload;
mod peers;
mod portal;
mod proc;
mod standalone;
mod test;
mod tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub type Result<T = ()> = std::result::Result<T, String>;

const USAGE: &str = "\
usage: cargo xtask <command>

  dev            install what is missing, start PostgreSQL (unless DATABASE_URL is set),
                 migrate, load demo data, serve the portal at http://127.0.0.1:3000
  test           fmt, clippy (ssr + hydrate), unit and database tests, release build,
                 browser tests in Chromium
  test browser   only the release build and the browser tests
  bench placement [--clients N] [--seconds S] [--nodes N]
                 placement benchmark: a synthetic 10,000-node fleet, N concurrent clients
                 launching and releasing, against PostgreSQL with durable commits
  bench dispatch [--rate N] [--seconds S] [--nodes N]
                 launch → agent acknowledgement and release → claimable latency
  bench ledger [--tenants N] [--runs N] [--hours N] [--batch N] [--step H]
                 usage rows rated per second, and a month's invoices for N tenants
  bench clusters [--clients N] [--nodes N] [--members N] [--clusters N]
                 clusters of N 8-GPU slices placed on the fleet's fabric (leaves of 18
                 nodes), all or nothing: rate, latency and the locality audit
  bench pages [--clients N] [--seconds S]
                 the release server: N signed-in sessions (default 64) loading pages, the
                 hydration bundle's size, and the launch page's time to interactive
  chaos [--seconds S] [--seed N]
                 the whole system (two replicas, PostgreSQL, Stripe, simulated agents) under
                 launches and releases while seeded faults are injected, then an audit
  ha             PostgreSQL made highly available (Patroni, etcd, HAProxy) with
                 continuous backups (pgBackRest) on loopback, for an operator to try
  ha drill [--seconds S] [--seed N]
                 the primary lost under load (launches, releases, agents), the chaos
                 audit, then a point-in-time restore into a new cluster with a portal on it
  package        the node agent's Debian package and the portal's container image (release
                 builds; podman, no registry) in target/package/
  package check  the package's check from `test`: contents, unit, and install, upgrade,
                 remove and purge in a Debian root made by debootstrap
  package check-image
                 the image's check from `test`: built from the debug server, inspected,
                 started against a throwaway database, signed in to
  sqlx-prepare   regenerate .sqlx/ (query metadata for offline builds) against a live database
  setup          only install what is missing
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("dev") => dev::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("chaos") => chaos::run(&args[1..]),
        Some("ha") => ha::run(&args[1..]),
        // The page benchmark's load generator, which end2end/bench/pages.mjs runs.
        Some("pages-load") => pageload::run(&args[1..]),
        Some("test") => test::run(&args[1..]),
        Some("package") => package::run(&args[1..]),
        Some("sqlx-prepare") => test::sqlx_prepare(),
        Some("setup") => tools::ensure_all(tools::Needs::everything()),
        Some("-h") | Some("--help") | Some("help") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    if matches!(args.first().map(String::as_str), Some("test")) {
        timings::print_summary();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nxtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the directory holding the top-level Cargo.toml).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` if set (CI may keep one outside the clone).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() { d } else { root().join(d) }
        }
        None => root().join("target"),
    }
}

/// Prints a step header, like `==> clippy (ssr)`, and closes the previous step's timer.
pub fn step(name: &str) {
    timings::start(name);
    eprintln!("\n\x1b[1m==> {name}\x1b[0m");
}

/// How long each step took, printed at the end so CI budgets can be checked against figures.
pub mod timings {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    static STEPS: Mutex<Vec<(String, Instant, Option<Duration>)>> = Mutex::new(Vec::new());

    pub fn start(name: &str) {
        let mut steps = STEPS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, began, took @ None)) = steps.last_mut() {
            *took = Some(began.elapsed());
        }
        steps.push((name.to_string(), Instant::now(), None));
    }

    pub fn print_summary() {
        let mut steps = STEPS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, began, took @ None)) = steps.last_mut() {
            *took = Some(began.elapsed());
        }
        let total: Duration = steps.iter().filter_map(|s| s.2).sum();
        eprintln!("\nstep timings:");
        for (name, _, took) in steps.iter() {
            eprintln!("  {:>7.1}s  {name}", took.unwrap_or_default().as_secs_f64());
        }
        eprintln!("  {:>7.1}s  total", total.as_secs_f64());
    }
}
