//! `cargo xtask bench placement [--clients N] [--seconds S] [--nodes N]` and
//! `cargo xtask bench dispatch [--rate N] [--seconds S] [--nodes N]` and
//! `cargo xtask bench ledger [--tenants N] [--runs N] [--hours N] [--batch N]`: the benchmarks in
//! control-plane/benches/ against a private PostgreSQL cluster with durable commits (fsync and
//! synchronous_commit on), removed afterwards.

use std::process::Command;

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::proc::run as run_cmd;
use crate::tools::{self, Needs};
use crate::{Result, root, step};

const USAGE: &str = "usage: cargo xtask bench placement [--clients N] [--seconds S] [--nodes N]\n       cargo xtask bench dispatch [--rate N] [--seconds S] [--nodes N]\n       cargo xtask bench ledger [--tenants N] [--runs N] [--hours N] [--batch N]";

pub fn run(args: &[String]) -> Result {
    match args.first().map(String::as_str) {
        Some("placement") => bench(
            "placement",
            &["--clients", "--seconds", "--nodes"],
            &args[1..],
        ),
        Some("dispatch") => bench("dispatch", &["--rate", "--seconds", "--nodes"], &args[1..]),
        Some("ledger") => bench(
            "ledger",
            &["--tenants", "--runs", "--hours", "--batch"],
            &args[1..],
        ),
        _ => Err(USAGE.into()),
    }
}

fn bench(name: &str, flags: &[&str], args: &[String]) -> Result {
    for pair in args.chunks(2) {
        let ok = flags.contains(&pair[0].as_str())
            && pair
                .get(1)
                .is_some_and(|v| v.parse::<u32>().is_ok_and(|n| n > 0));
        if !ok {
            return Err(format!("bad argument {:?}\n{USAGE}", pair.join(" ")));
        }
    }
    tools::ensure_all(Needs {
        postgres: true,
        chromium: false,
        npm: false,
        host_tools: false,
    })?;
    step("starting PostgreSQL with durable commits");
    let dir = std::env::temp_dir().join(format!("portal-pg-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = StopOnDrop(PgCluster::init(&dir, Durability::Durable).map_err(|e| e.to_string())?);
    pg.start().map_err(|e| e.to_string())?;
    pg.ensure_database("bench").map_err(|e| e.to_string())?;
    step(&format!(
        "building and running the {name} benchmark (release)"
    ));
    let result = run_cmd(
        Command::new("cargo")
            .args(["bench", "--package", "control-plane", "--bench", name, "--"])
            .args(args)
            .env("DATABASE_URL", pg.url("bench"))
            .env("SQLX_OFFLINE", "true")
            .current_dir(root()),
    );
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
    result
}
