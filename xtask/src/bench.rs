//! `cargo xtask bench placement [--clients N] [--seconds S] [--nodes N]`: the placement
//! benchmark (control-plane/benches/placement.rs) against a private PostgreSQL cluster with
//! durable commits (fsync and synchronous_commit on), removed afterwards.

use std::process::Command;

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::proc::run as run_cmd;
use crate::tools::{self, Needs};
use crate::{Result, root, step};

const USAGE: &str = "usage: cargo xtask bench placement [--clients N] [--seconds S] [--nodes N]";

pub fn run(args: &[String]) -> Result {
    match args.first().map(String::as_str) {
        Some("placement") => placement(&args[1..]),
        _ => Err(USAGE.into()),
    }
}

fn placement(args: &[String]) -> Result {
    for pair in args.chunks(2) {
        let ok = matches!(pair[0].as_str(), "--clients" | "--seconds" | "--nodes")
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
    step("building and running the placement benchmark (release)");
    let result = run_cmd(
        Command::new("cargo")
            .args([
                "bench",
                "--package",
                "control-plane",
                "--bench",
                "placement",
                "--",
            ])
            .args(args)
            .env("DATABASE_URL", pg.url("bench"))
            .env("SQLX_OFFLINE", "true")
            .current_dir(root()),
    );
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
    result
}
