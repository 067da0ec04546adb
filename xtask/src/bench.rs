//! `cargo xtask bench placement [--clients N] [--seconds S] [--nodes N]` and
//! `cargo xtask bench dispatch [--rate N] [--seconds S] [--nodes N]` and
//! `cargo xtask bench ledger [--tenants N] [--runs N] [--hours N] [--batch N]`: the benchmarks in
//! control-plane/benches/ (one binary, `bench`) against a private PostgreSQL cluster with durable commits (fsync and
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
            .args([
                "bench",
                "--package",
                "control-plane",
                "--bench",
                "bench",
                "--",
                name,
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

/// Each benchmark at a size that runs in seconds: `cargo xtask test` runs them so a schema or
/// API change that breaks one fails there, not months later. Each checks its invariants and
/// exits non-zero when one breaks (a double booking, an agent call refused, an unbalanced
/// ledger); the figures mean nothing at this size.
const SMOKE: &[(&str, &[&str])] = &[
    (
        "placement",
        &["--clients", "4", "--seconds", "1", "--nodes", "100"],
    ),
    (
        "dispatch",
        &["--rate", "20", "--seconds", "2", "--nodes", "20"],
    ),
    (
        "ledger",
        &[
            "--tenants",
            "5",
            "--runs",
            "2",
            "--hours",
            "24",
            "--batch",
            "100",
        ],
    ),
];

/// Runs [`SMOKE`] against fresh databases on `pg`, in the test profile (debug, sharing the
/// tests' build). `cargo_test` is how the caller runs `cargo test` (its flags and env).
pub fn smoke(pg: &PgCluster, cargo_test: impl Fn() -> Command) -> Result {
    for (name, args) in SMOKE {
        let db = format!("bench_smoke_{name}");
        pg.ensure_database(&db).map_err(|e| e.to_string())?;
        run_cmd(
            cargo_test()
                .args(["--package", "control-plane", "--bench", "bench", "--", name])
                .args(*args)
                .env("DATABASE_URL", pg.url(&db)),
        )
        .map_err(|e| format!("the {name} benchmark broke at smoke size: {e}"))?;
    }
    Ok(())
}
