//! `cargo xtask bench placement [--clients N] [--seconds S] [--nodes N] [--servers N]` and
//! `cargo xtask bench dispatch [--rate N] [--seconds S] [--nodes N] [--connections N]` and
//! `cargo xtask bench ledger [--tenants N] [--runs N] [--hours N] [--batch N] [--step H]` and
//! `cargo xtask bench volumes [--nodes N] [--instances N] [--rate N]`: the benchmarks in
//! control-plane/benches/ (one binary, `bench`) against a private PostgreSQL cluster with durable commits (fsync and
//! synchronous_commit on), removed afterwards.
//! `cargo xtask bench pages [--clients N] [--seconds S] [--server PATH] [--page NAME]`: the portal's release build serving
//! signed-in users (see [`pages`]).
//! `cargo xtask bench peers [--nodes N] [--clients N] [--seconds S] [--limit N] [--workers N]`: ours beside OpenStack
//! Placement on the same fleet and load (see `crate::peers`).

use std::process::Command;

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::proc::{run as run_cmd, terminate, wait_ready};
use crate::tools::{self, Needs};
use crate::{Result, portal, root, step, target_dir};

const USAGE: &str = "usage: cargo xtask bench placement [--clients N] [--seconds S] [--nodes N] [--servers N]\n       cargo xtask bench dispatch [--rate N] [--seconds S] [--nodes N] [--connections N]\n       cargo xtask bench ledger [--tenants N] [--runs N] [--hours N] [--batch N] [--step H]\n       cargo xtask bench volumes [--nodes N] [--instances N] [--rate N]\n       cargo xtask bench pages [--clients N] [--seconds S] [--server PATH] [--page list|allocation|catalog|billing] [--database tcp|socket]\n       cargo xtask bench peers [--nodes N] [--clients N] [--seconds S] [--limit N] [--workers N]";

pub fn run(args: &[String]) -> Result {
    match args.first().map(String::as_str) {
        Some("placement") => bench(
            "placement",
            &["--clients", "--seconds", "--nodes", "--servers"],
            &args[1..],
        ),
        Some("dispatch") => bench(
            "dispatch",
            &["--rate", "--seconds", "--nodes", "--connections"],
            &args[1..],
        ),
        Some("ledger") => bench(
            "ledger",
            &["--tenants", "--runs", "--hours", "--batch", "--step"],
            &args[1..],
        ),
        Some("volumes") => bench("volumes", &["--nodes", "--instances", "--rate"], &args[1..]),
        Some("clusters") => bench(
            "clusters",
            &["--clients", "--nodes", "--members", "--clusters"],
            &args[1..],
        ),
        Some("pages") => pages(&args[1..]),
        Some("peers") => crate::peers::run_peers(&args[1..]),
        _ => Err(USAGE.into()),
    }
}

pub(crate) fn checked_flags(flags: &[&str], args: &[String]) -> Result {
    for pair in args.chunks(2) {
        let ok = flags.contains(&pair[0].as_str())
            && pair
                .get(1)
                .is_some_and(|v| v.parse::<u32>().is_ok_and(|n| n > 0));
        if !ok {
            return Err(format!("bad argument {:?}\n{USAGE}", pair.join(" ")));
        }
    }
    Ok(())
}

pub(crate) fn flag_value(args: &[String], name: &str, default: &str) -> String {
    args.chunks(2)
        .find(|p| p[0] == name)
        .and_then(|p| p.get(1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// Takes `name VALUE` out of `args` (pairs), where VALUE must be one of `allowed`; the value
/// if given and the pairs left.
fn one_of<'a>(
    args: Vec<&'a [String]>,
    name: &str,
    allowed: &[&str],
) -> Result<(Option<String>, Vec<&'a [String]>)> {
    let (this, rest): (Vec<_>, Vec<_>) = args.into_iter().partition(|p| p[0] == name);
    match this.first() {
        None => Ok((None, rest)),
        Some([_, v]) if allowed.contains(&v.as_str()) => Ok((Some(v.clone()), rest)),
        Some(p) => Err(format!(
            "bad argument {:?}: {name} is one of {}\n{USAGE}",
            p.join(" "),
            allowed.join(", ")
        )),
    }
}

/// What `--page` may name: the pages `end2end/bench/pages.mjs` loads in turn.
const PAGE_NAMES: &[&str] = &["list", "allocation", "catalog", "billing"];

/// The page-load benchmark: the site and the server built for release, a durable cluster, the
/// demo identity provider, the server with the demo data plus `bench pages-seed`'s (400
/// allocations in mixed states, a month of rated usage), then `end2end/bench/pages.mjs`:
/// sessions signed in through SSO in Chromium, keep-alive page loads, the bundle's size and
/// the launch page's time to interactive.
fn pages(args: &[String]) -> Result {
    // `--server PATH`: a release server built earlier (a copy of target/server-release/server),
    // so two builds can be measured in turn on the same hour; the site is the one built last.
    let (server, args): (Vec<_>, Vec<_>) = args.chunks(2).partition(|p| p[0] == "--server");
    // `--page NAME`: every session loads that one page, to see what each page costs.
    let (page, args) = one_of(args, "--page", PAGE_NAMES)?;
    // `--database tcp|socket`: how the server reaches PostgreSQL (default tcp, as every figure
    // in docs/PERFORMANCE.md was measured unless it says otherwise).
    let (database, args) = one_of(args, "--database", &["tcp", "socket"])?;
    let over_tcp = database.as_deref() != Some("socket");
    let args: Vec<String> = args.concat();
    checked_flags(&["--clients", "--seconds"], &args)?;
    tools::ensure_all(Needs {
        postgres: true,
        chromium: true,
        npm: true,
        host_tools: false,
    })?;
    let binary = match server.first() {
        Some([_, path]) if std::path::Path::new(path).is_file() => std::path::PathBuf::from(path),
        Some([_, path]) => return Err(format!("--server {path}: no such file")),
        Some(_) => return Err(format!("--server needs a path\n{USAGE}")),
        None => {
            step(
                "the site and the server, as shipped (cargo leptos build --release; minutes when cold)",
            );
            run_cmd(
                Command::new("cargo")
                    .args(["leptos", "build", "--release"])
                    .current_dir(root()),
            )?;
            target_dir().join("server-release/server")
        }
    };
    step("starting PostgreSQL with durable commits");
    let dir = std::env::temp_dir().join(format!("portal-pg-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = StopOnDrop(PgCluster::init(&dir, Durability::Durable).map_err(|e| e.to_string())?);
    pg.start().map_err(|e| e.to_string())?;
    pg.ensure_database("pages").map_err(|e| e.to_string())?;
    let port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let idp_port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let idp_secret = portal::random_password()?;
    let artifacts = root().join("test-artifacts");
    std::fs::create_dir_all(&artifacts).map_err(|e| e.to_string())?;
    let log = |name: &str| {
        std::fs::File::create(artifacts.join(name))
            .map_err(|e| format!("creating test-artifacts/{name}: {e}"))
    };
    step("starting the demo identity provider and the release server");
    let (mut idp, issuer) = portal::start_demo_idp(
        idp_port,
        &format!("http://127.0.0.1:{port}"),
        &idp_secret,
        Some(log("bench-idp.log")?),
    )?;
    let launch = portal::Launch {
        binary,
        database_url: if over_tcp {
            pg.url("pages")
        } else {
            pg.socket_url("pages")
        },
        addr: format!("127.0.0.1:{port}"),
        site_root: target_dir().join("site"),
        site_env: "prod",
        admin_password: portal::random_password()?,
        demo_idp: Some((issuer, idp_secret)),
        stripe: None,
        dns_resolver: None,
        secret_keys: portal::random_keyring("bench")?,
        metrics_addr: "off".into(),
        metrics_token: None,
        log: Some(log("bench-server.log")?),
        volumes: None,
    };
    let mut server = match launch.start() {
        Ok(s) => s,
        Err(e) => {
            terminate(&mut idp, std::time::Duration::from_secs(5));
            return Err(e);
        }
    };
    let server_pid = server.id();
    let result = wait_ready(&mut server, port, std::time::Duration::from_secs(60))
        .and_then(|()| {
            step("the benchmark's data (bench pages-seed, release)");
            run_cmd(&mut bench_binary("pages-seed", &pg.url("pages")))
        })
        .and_then(|()| {
            step("signing in and loading pages (end2end/bench/pages.mjs)");
            run_cmd(
                Command::new("node")
                    .arg("end2end/bench/pages.mjs")
                    .env("PORTAL_URL", format!("http://127.0.0.1:{port}"))
                    .env("PAGES_CLIENTS", flag_value(&args, "--clients", "64"))
                    .env("PAGES_SECONDS", flag_value(&args, "--seconds", "20"))
                    .env("SITE_PKG", target_dir().join("site/pkg"))
                    .env("PAGES_KEEP_DIR", artifacts.join("bench-pages"))
                    .env("PAGES_ONLY", page.as_deref().unwrap_or(""))
                    .env("PAGES_LOADER", crate::pageload::loader()?)
                    // Whose CPU time it reads to report each process's share of a page.
                    .env("SERVER_PID", server_pid.to_string())
                    .env("PG_POSTMASTER_PID", pg.root().join("data/postmaster.pid"))
                    .current_dir(root()),
            )
        });
    terminate(&mut server, std::time::Duration::from_secs(10));
    terminate(&mut idp, std::time::Duration::from_secs(5));
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `cargo bench` of control-plane's one benchmark binary, running `name` on `database_url`
/// (release; the queries' metadata from `.sqlx/`).
pub(crate) fn bench_binary(name: &str, database_url: &str) -> Command {
    let mut c = Command::new("cargo");
    c.args([
        "bench",
        "--package",
        "control-plane",
        "--bench",
        "bench",
        "--",
        name,
    ])
    .env("DATABASE_URL", database_url)
    .env("SQLX_OFFLINE", "true")
    .current_dir(root());
    c
}

fn bench(name: &str, flags: &[&str], args: &[String]) -> Result {
    checked_flags(flags, args)?;
    tools::ensure_all(Needs {
        postgres: true,
        chromium: false,
        npm: false,
        // qemu-img and qemu-storage-daemon for the volumes benchmark's backend.
        host_tools: name == "volumes",
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
    let result = run_cmd(bench_binary(name, &pg.url("bench")).args(args));
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
    (
        "volumes",
        &["--nodes", "2", "--instances", "4", "--rate", "20"],
    ),
    (
        "clusters",
        &[
            "--clients",
            "2",
            "--nodes",
            "200",
            "--members",
            "4",
            "--clusters",
            "12",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_flag_takes_an_allowed_value_and_leaves_the_rest() {
        let args: Vec<String> = ["--database", "socket", "--seconds", "5"]
            .map(String::from)
            .into();
        let pairs: Vec<&[String]> = args.chunks(2).collect();
        let (v, rest) = one_of(pairs, "--database", &["tcp", "socket"]).unwrap();
        assert_eq!(v.as_deref(), Some("socket"));
        assert_eq!(rest.concat(), ["--seconds", "5"]);

        let pairs: Vec<&[String]> = args.chunks(2).collect();
        let (v, rest) = one_of(pairs, "--page", PAGE_NAMES).unwrap();
        assert_eq!(v, None);
        assert_eq!(rest.len(), 2);

        let bad: Vec<String> = ["--database", "udp"].map(String::from).into();
        let e = one_of(bad.chunks(2).collect(), "--database", &["tcp", "socket"]).unwrap_err();
        assert!(e.contains("--database is one of tcp, socket"), "{e}");
    }
}
