//! `cargo xtask test`: every check CI runs, cheapest first.
//!
//! fmt → clippy (ssr) → clippy (hydrate, wasm32) → unit and database tests against a private
//! throwaway PostgreSQL → every benchmark at smoke size → the site's release build with cargo-leptos (wasm-opt included) and a
//! debug server → browser tests in Chromium against them → the portal's image built and started
//! (podman) → a minute of the chaos run → a minute of the HA drill (the primary lost under
//! load, then a point-in-time restore).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::proc::{run as sh, show, terminate, wait_ready};
use crate::tools::{self, Needs};
use crate::{Result, layers, portal, root, standalone, step, target_dir};

/// Debug builds share artifacts with `cargo leptos build`, which adds this flag.
const DEBUG_RUSTFLAGS: &str = "--cfg erase_components";

pub(crate) fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    c.args(args).current_dir(root());
    c.env("RUSTFLAGS", DEBUG_RUSTFLAGS);
    c
}

pub fn run(args: &[String]) -> Result {
    // `cargo xtask test browser`: only the builds for and the browser tests, for iterating
    // on a page. CI runs everything.
    let browser_only = match args.first().map(String::as_str) {
        None => false,
        Some("browser") if args.len() == 1 => true,
        Some(a) => {
            return Err(format!(
                "`cargo xtask test` takes no arguments, or `browser` (got `{a}`)"
            ));
        }
    };
    step("the repository stands alone (no tracked file refers to a path outside it)");
    standalone::check()?;
    step("the crate graph and the control plane's modules point one way (xtask/src/layers.rs)");
    layers::check()?;
    layers::check_modules()?;

    tools::ensure_all(Needs::everything())?;
    if browser_only {
        step("starting a throwaway PostgreSQL");
        let pg = throwaway_cluster("unit")?;
        sh(&mut cargo(&[
            "build",
            "--package",
            "stripe-test-server",
            "--package",
            "node-agent",
        ]))?;
        browser_tests(pg)?;
        eprintln!("\n\x1b[1mthe browser tests passed\x1b[0m");
        return Ok(());
    }

    step("cargo fmt --check");
    sh(&mut cargo(&["fmt", "--all", "--check"]))?;

    step("clippy, ssr feature set (server, control plane, agent, xtask)");
    sh(&mut cargo(&[
        "clippy",
        "--workspace",
        "--exclude",
        "frontend",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;

    step("clippy, hydrate feature set (wasm32)");
    sh(&mut cargo(&[
        "clippy",
        "--package",
        "frontend",
        "--target",
        "wasm32-unknown-unknown",
        "--",
        "-D",
        "warnings",
    ]))?;

    step("starting a throwaway PostgreSQL");
    let pg = throwaway_cluster("unit")?;

    let dstack = crate::integrations::dstack_python()?;
    step("unit and database tests");
    sh(cargo(&["test", "--workspace", "--exclude", "frontend"])
        .env("DATABASE_URL", pg.url("postgres"))
        // The CLI test checks `gpuctl dstack-fleet`'s file with dstack's own model.
        .env("DSTACK_PYTHON", dstack))?;

    step("the benchmarks at smoke size (they must keep running; `cargo xtask bench` measures)");
    crate::bench::smoke(&pg, || cargo(&["test"]))?;
    step("ours beside OpenStack Placement at smoke size (`cargo xtask bench peers` measures)");
    crate::peers::smoke(&pg, || cargo(&["test"]))?;

    step("deploy/: alert rules, their unit tests and the scrape configuration (promtool)");
    let prom = root().join("deploy/prometheus");
    sh(Command::new("promtool")
        .args(["check", "rules"])
        .arg(prom.join("alerts.yml")))?;
    sh(Command::new("promtool")
        .args(["test", "rules"])
        .arg(prom.join("alerts.test.yml")))?;
    sh(Command::new("promtool")
        .args(["check", "config", "--syntax-only"])
        .arg(prom.join("prometheus.yml")))?;

    step(
        "deploy/kubernetes: the sample manifests against Kubernetes' own schemas (kubernetes-validate, strict)",
    );
    sh(Command::new(kubernetes_validate()?)
        .args(["--strict", "--quiet", "--kubernetes-version", KUBERNETES])
        .arg(root().join("deploy/kubernetes/portal.yaml")))?;

    step("the node agent's Debian package: its contents, its unit (systemd-analyze verify)");
    crate::package::check()?;

    // The local Stripe test server, for the browser tests (a debug build is plenty).
    sh(&mut cargo(&["build", "--package", "stripe-test-server"]))?;
    browser_tests(pg)?;

    // With the debug server and the site the browser tests used.
    {
        let pg = throwaway_cluster("image")?;
        pg.ensure_database("image").map_err(|e| e.to_string())?;
        crate::image::check(&pg.url("image"))?;
    }

    // With the servers, agents and Stripe the browser tests used, already built.
    step("a short chaos run (`cargo xtask chaos` runs 5 minutes)");
    crate::chaos::chaos(CHAOS_SECONDS, CHAOS_SEED)?;

    step(
        "PostgreSQL's primary lost under load, then a point-in-time restore (`cargo xtask ha drill` runs 3 minutes)",
    );
    crate::ha::drill(HA_DRILL_SECONDS, CHAOS_SEED)?;

    eprintln!("\n\x1b[1mall checks passed\x1b[0m");
    Ok(())
}

/// The chaos run inside `cargo xtask test`: a minute, a fixed seed (every fault kind but the
/// agent cut-off, which needs longer than the heartbeat timeout).
const CHAOS_SECONDS: u64 = 60;
const CHAOS_SEED: u64 = 1;
/// Long enough for one lost primary: the leader lock's expiry, the promotion, the lost server
/// back as a replica.
const HA_DRILL_SECONDS: u64 = 60;

/// The site as shipped (wasm in the `wasm-release` profile, wasm-opt'd) and a debug server,
/// then the browser tests against them. The debug server shares the test step's compiled
/// dependencies (cargo-leptos adds the same `--cfg erase_components`); a release server would
/// compile every dependency again, which was two thirds of a cold run. The Dockerfile still
/// ships a release server.
fn browser_tests(pg: Throwaway) -> Result {
    step("the site, as shipped (cargo leptos build --release --frontend-only)");
    sh(Command::new("cargo")
        .args(["leptos", "build", "--release", "--frontend-only"])
        .current_dir(root()))?;
    step("the server, debug (cargo leptos build --server-only)");
    sh(Command::new("cargo")
        .args(["leptos", "build", "--server-only"])
        .current_dir(root()))?;

    step("browser tests (Chromium)");
    pg.ensure_database("e2e").map_err(|e| e.to_string())?;
    std::fs::create_dir_all(root().join("test-artifacts")).map_err(|e| e.to_string())?;
    let port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let admin_password = portal::random_password()?;
    let idp_secret = portal::random_password()?;
    let idp_port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let idp_log = std::fs::File::create(root().join("test-artifacts/idp.log"))
        .map_err(|e| format!("creating test-artifacts/idp.log: {e}"))?;
    let (mut idp, issuer) = portal::start_demo_idp(
        idp_port,
        &format!("http://127.0.0.1:{port}"),
        &idp_secret,
        Some(idp_log),
    )?;
    let stripe_port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let webhook_secret = format!("whsec_{}", portal::random_password()?);
    let stripe_log = std::fs::File::create(root().join("test-artifacts/stripe.log"))
        .map_err(|e| format!("creating test-artifacts/stripe.log: {e}"))?;
    let (mut stripe, stripe_api) = match portal::start_stripe(
        &target_dir().join("debug/stripe-test-server"),
        stripe_port,
        &format!("http://127.0.0.1:{port}"),
        &webhook_secret,
        Some(stripe_log),
    ) {
        Ok(s) => s,
        Err(e) => {
            terminate(&mut idp, Duration::from_secs(5));
            return Err(e);
        }
    };
    // The browser tests start `dnsmasq` on this port when they need DNS (domain proofs).
    let dns_port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let metrics_port = pgcluster::free_port().map_err(|e| e.to_string())?;
    // The server refuses a scrape token under 32 characters.
    let metrics_token = format!(
        "{}{}",
        portal::random_password()?,
        portal::random_password()?
    );
    let (launch, mut server) = match start_test_server(
        &pg.url("e2e"),
        port,
        &admin_password,
        (issuer.clone(), idp_secret),
        (stripe_api.clone(), webhook_secret),
        dns_port,
        (metrics_port, &metrics_token),
    ) {
        Ok(s) => s,
        Err(e) => {
            terminate(&mut idp, Duration::from_secs(5));
            terminate(&mut stripe, Duration::from_secs(5));
            return Err(e);
        }
    };
    // A second replica on the same database: `end2end/tests/replicas.test.mjs` launches on
    // one and releases on the other.
    let replica_port = pgcluster::free_port().map_err(|e| e.to_string())?;
    let mut replica: Option<std::process::Child> = None;
    let server_pid = server.id();
    let result = wait_ready(&mut server, port, Duration::from_secs(60)).and_then(|()| {
        let log = std::fs::File::create(root().join("test-artifacts/server-2.log"))
            .map_err(|e| format!("creating test-artifacts/server-2.log: {e}"))?;
        let second = launch.replica(format!("127.0.0.1:{replica_port}"), Some(log));
        let child = replica.insert(second.start_replica()?);
        wait_ready(child, replica_port, Duration::from_secs(60))?;
        let artifacts = root().join("test-artifacts");
        std::fs::create_dir_all(&artifacts).map_err(|e| e.to_string())?;
        // `E2E_TESTS="end2end/tests/ops.test.mjs …"` runs only those files (for iterating).
        let files = std::env::var("E2E_TESTS").unwrap_or_else(|_| "end2end/tests/".into());
        sh(Command::new("node")
            .args(["--test", "--test-concurrency=1"])
            .args(files.split_whitespace())
            .env("PORTAL_URL", format!("http://127.0.0.1:{port}"))
            .env(
                "PORTAL_URL_REPLICA",
                format!("http://127.0.0.1:{replica_port}"),
            )
            .env("ARTIFACTS_DIR", &artifacts)
            .env("PORTAL_ADMIN_EMAIL", portal::ADMIN_EMAIL)
            .env("PORTAL_ADMIN_PASSWORD", &admin_password)
            .env("PORTAL_IDP_ISSUER", &issuer)
            .env("STRIPE_API", &stripe_api)
            .env("PORTAL_DNS_PORT", dns_port.to_string())
            // The operations panel's figures are checked against the database itself.
            .env("PORTAL_TEST_DATABASE_URL", pg.url("e2e"))
            .env(
                "PORTAL_TEST_PSQL",
                pgcluster::find_bin_dir()
                    .map_err(|e| e.to_string())?
                    .join("psql"),
            )
            // The server's own /metrics listener (on every address) and its scrape token.
            .env("PORTAL_METRICS_PORT", metrics_port.to_string())
            .env("PORTAL_METRICS_TOKEN", &metrics_token)
            // Built by the test step above (node-agent has integration tests).
            .env("NODE_AGENT_BIN", target_dir().join("debug/node-agent"))
            .current_dir(root()))
        .and_then(|()| api_conformance(&launch, port))
        .and_then(|()| pages_smoke(&pg, port, server_pid))
    });
    if let Some(r) = &mut replica {
        terminate(r, Duration::from_secs(10));
    }
    terminate(&mut server, Duration::from_secs(10));
    terminate(&mut idp, Duration::from_secs(5));
    terminate(&mut stripe, Duration::from_secs(5));
    if let Some((dir, _)) = &launch.volumes {
        portal::stop_volume_daemon(dir);
    }
    result?;
    drop(pg);
    Ok(())
}

/// `cargo xtask bench pages` at smoke size, after the browser tests and against their (debug)
/// server and database: 10 allocations a project, 2 sessions, 2 seconds, no launch-page
/// timing (`cargo xtask bench pages` measures that on the release build). It must keep running
/// (the seed through the control plane, the sign-in, the pages it loads); its figures mean
/// nothing here (the CPU a page is read the same way, so that reading is exercised too).
fn pages_smoke(pg: &PgCluster, port: u16, server_pid: u32) -> Result {
    step("the pages benchmark at smoke size (`cargo xtask bench pages` measures)");
    sh(cargo(&[
        "test",
        "--package",
        "control-plane",
        "--bench",
        "bench",
        "--",
        "pages-seed",
        "--per-project",
        "10",
    ])
    .env("DATABASE_URL", pg.url("e2e")))?;
    sh(Command::new("node")
        .arg("end2end/bench/pages.mjs")
        .env("PORTAL_URL", format!("http://127.0.0.1:{port}"))
        .env("PAGES_CLIENTS", "2")
        .env("PAGES_SECONDS", "2")
        .env("PAGES_INTERACTIVE", "0")
        .env("PAGES_LOADER", crate::pageload::loader()?)
        .env("SITE_PKG", target_dir().join("site/pkg"))
        .env("SERVER_PID", server_pid.to_string())
        .env("PG_POSTMASTER_PID", pg.root().join("data/postmaster.pid"))
        .current_dir(root()))
}

/// The validator of the Kubernetes sample, with the API's schemas bundled, from PyPI.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";
/// The oldest Kubernetes release the sample is written for.
const KUBERNETES: &str = "1.30.0";

/// `kubernetes-validate` in a virtualenv of its own, made once.
fn kubernetes_validate() -> Result<PathBuf> {
    let venv = crate::integrations::pinned_venv("kubernetes-venv", KUBERNETES_VALIDATE, "seconds")?;
    Ok(venv.join("bin/kubernetes-validate"))
}

/// The schemathesis release the API is checked with, from PyPI.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
/// The generator of the client that must work from the OpenAPI document, from PyPI.
const CLIENT_GENERATOR: &str = "openapi-python-client==0.29.1";

/// Schemathesis against the running server's `/api/v1`, with a real token of a demo
/// organization admin: every operation from its examples, the coverage and fuzzing phases, and
/// stateful sequences along the document's links (launch → get → release, add key → delete).
/// Every check but `use_after_free`: releasing an instance keeps it on record (its state says
/// `released`), which is what `DELETE` means here, so a later `GET` answering 200 is right.
/// Its summary is part of the test output; its JUnit report goes to test-artifacts/.
fn api_conformance(launch: &portal::Launch, port: u16) -> Result {
    let venv = target_dir().join("schemathesis-venv");
    let st = venv.join("bin/st");
    if !st.exists() {
        step(&format!(
            "installing {SCHEMATHESIS} and {CLIENT_GENERATOR} into {} (once, about 20 s)",
            venv.display()
        ));
        sh(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        sh(Command::new(venv.join("bin/pip")).args([
            "install",
            "-q",
            SCHEMATHESIS,
            CLIENT_GENERATOR,
        ]))?;
    }
    step("the API against its OpenAPI document (schemathesis, with a real token)");
    let printed = launch.output(&[
        "demo-api-token",
        "--email",
        "alice@acme.example",
        "--scopes",
        "read,launch,billing",
    ])?;
    // Its log lines share standard output; the secret is the line that is one.
    let token = printed
        .lines()
        .find(|l| l.starts_with("gpk_"))
        .ok_or("`server demo-api-token` printed no token")?
        .to_owned();
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let auth = format!("Authorization: Bearer {}", token.trim());
    let artifacts = root().join("test-artifacts");
    let mut cmd = Command::new(&st);
    // end2end/schemathesis.toml: the exceptions to its checks, each with its reason.
    cmd.args(["--config-file", "end2end/schemathesis.toml"])
        .args(["run", &format!("{api}/openapi.json"), "--url", &api])
        .args(["--header", &auth])
        .args(["--checks", "all", "--exclude-checks", "use_after_free"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", "30", "--seed", "20261125"])
        // Under the per-token limit (100 calls per 10 s), so what is tested is the API, not
        // the rate limiter (which answers a documented 429 when it is hit anyway).
        .args(["--rate-limit", "9/s", "--workers", "1"])
        .args(["--request-timeout", "70", "--no-color"])
        .args(["--report", "junit"])
        .arg("--report-junit-path")
        .arg(artifacts.join("schemathesis.xml"))
        // Its example database stays out of the repository.
        .args(["--generation-database", ":memory:"])
        .current_dir(root());
    // The token is a secret: shown redacted in the echoed command line.
    let shown = show(&cmd).replace(token.trim(), "gpk_…");
    eprintln!("    $ {shown}");
    let status = cmd
        .status()
        .map_err(|e| format!("starting schemathesis: {e}"))?;
    if !status.success() {
        return Err(format!("schemathesis found problems in /api/v1 ({status})"));
    }
    generated_client(launch, port, &venv, token.trim())
}

/// A client generated from the served document by openapi-python-client lists offers,
/// launches (twice with one Idempotency-Key), waits for running and releases, against the
/// demo fleet of simulated agents (end2end/api_client.py).
fn generated_client(launch: &portal::Launch, port: u16, venv: &Path, token: &str) -> Result {
    step("a client generated from the OpenAPI document launches, waits and releases");
    let api = format!("http://127.0.0.1:{port}/api/v1");
    let out = target_dir().join("api-client");
    let _ = std::fs::remove_dir_all(&out);
    sh(Command::new(venv.join("bin/openapi-python-client"))
        .args([
            "generate",
            "--url",
            &format!("{api}/openapi.json"),
            "--meta",
            "none",
        ])
        .arg("--output-path")
        .arg(out.join("gpu_cloud_api_client")))?;
    let agents_dir = target_dir().join("api-fleet");
    let _ = std::fs::remove_dir_all(&agents_dir);
    let mut agents =
        crate::fleet::start_in(launch, &format!("http://127.0.0.1:{port}"), &agents_dir)?;
    // Acme Inference: a project the browser tests leave without policies.
    const PROJECT: &str = "0a0e0000-0000-4000-8001-000000000002";
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg(root().join("end2end/api_client.py"))
        .args([api.as_str(), token, PROJECT])
        .env("PYTHONPATH", &out);
    eprintln!("    $ python end2end/api_client.py {api} gpk_… {PROJECT}");
    let result = cmd
        .status()
        .map_err(|e| format!("starting python: {e}"))
        .and_then(|s| {
            if s.success() {
                Ok(())
            } else {
                Err(format!(
                    "the generated client failed ({s}); agent logs in {}",
                    agents_dir.display()
                ))
            }
        })
        .and_then(|()| {
            python_sdk(
                &out.join("gpu_cloud_api_client"),
                venv,
                &api,
                token,
                PROJECT,
            )
        })
        .and_then(|()| crate::integrations::skypilot(&api, token, PROJECT))
        .and_then(|()| crate::integrations::dstack(&api, token, PROJECT))
        .map_err(|e| format!("{e}; agent logs in {}", agents_dir.display()));
    for a in &mut agents {
        terminate(a, Duration::from_secs(5));
    }
    result
}

/// The Python SDK (`sdk/python`): its generated layer must be what the generator just made of
/// the served document, and its tests run against this server and fleet.
fn python_sdk(generated: &Path, venv: &Path, api: &str, token: &str, project: &str) -> Result {
    step("the Python SDK: its generated layer is current, and its tests pass");
    let committed = root().join("sdk/python/src/gpuaas/_generated");
    let differ = differing_files(generated, &committed)?;
    if !differ.is_empty() {
        return Err(format!(
            "sdk/python/src/gpuaas/_generated is not what openapi-python-client makes of the served document ({}); refresh it: rm -r {} && cp -r {} {}",
            differ.join(", "),
            committed.display(),
            generated.display(),
            committed.display()
        ));
    }
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(root().join("sdk/python/tests"))
        .env("PYTHONPATH", root().join("sdk/python/src"))
        .env("GPUAAS_API", api)
        .env("GPUAAS_TOKEN", token)
        .env("GPUAAS_PROJECT", project);
    eprintln!("    $ python -m unittest discover -s sdk/python/tests (GPUAAS_API={api})");
    let status = cmd.status().map_err(|e| format!("starting python: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the Python SDK's tests failed ({status})"))
    }
}

/// The `.py` files that are in one tree and not the other, or differ (caches ignored).
fn differing_files(a: &Path, b: &Path) -> Result<Vec<String>> {
    fn files(
        root: &Path,
        dir: &Path,
        out: &mut std::collections::BTreeMap<String, Vec<u8>>,
    ) -> Result {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    files(root, &path, out)?;
                }
            } else if path.extension().is_some_and(|e| e == "py") {
                let rel = path.strip_prefix(root).map_err(|e| e.to_string())?;
                let body = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                out.insert(rel.display().to_string(), body);
            }
        }
        Ok(())
    }
    let (mut left, mut right) = (Default::default(), Default::default());
    files(a, a, &mut left)?;
    if b.is_dir() {
        files(b, b, &mut right)?;
    }
    let mut names: Vec<&String> = left.keys().chain(right.keys()).collect();
    names.sort();
    names.dedup();
    Ok(names
        .into_iter()
        .filter(|n| left.get(*n) != right.get(*n))
        .cloned()
        .collect())
}

/// A fresh cluster in a temporary directory, removed again when dropped.
pub struct Throwaway {
    cluster: Option<StopOnDrop>,
    dir: PathBuf,
}

impl std::ops::Deref for Throwaway {
    type Target = PgCluster;
    fn deref(&self) -> &PgCluster {
        self.cluster.as_ref().expect("present until drop")
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        drop(self.cluster.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn throwaway_cluster(label: &str) -> Result<Throwaway> {
    let dir = std::env::temp_dir().join(format!("portal-pg-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pg = PgCluster::init(&dir, Durability::Throwaway).map_err(|e| e.to_string())?;
    pg.start().map_err(|e| e.to_string())?;
    eprintln!("    PostgreSQL on port {}", pg.port());
    Ok(Throwaway {
        cluster: Some(StopOnDrop(pg)),
        dir,
    })
}

fn start_test_server(
    database_url: &str,
    port: u16,
    admin_password: &str,
    demo_idp: (String, String),
    stripe: (String, String),
    dns_port: u16,
    (metrics_port, metrics_token): (u16, &str),
) -> Result<(portal::Launch, Child)> {
    let dir = root().join("test-artifacts");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("server.log"))
        .map_err(|e| format!("creating test-artifacts/server.log: {e}"))?;
    let launch = portal::Launch {
        binary: target_dir().join("debug/server"),
        database_url: database_url.to_string(),
        addr: format!("127.0.0.1:{port}"),
        site_root: target_dir().join("site"),
        site_env: "prod",
        admin_password: admin_password.to_string(),
        demo_idp: Some(demo_idp),
        stripe: Some(stripe),
        dns_resolver: Some(format!("127.0.0.1:{dns_port}")),
        secret_keys: portal::random_keyring("test")?,
        // On every address, so the metrics test can check that a caller off loopback needs
        // the token.
        metrics_addr: format!("0.0.0.0:{metrics_port}"),
        metrics_token: Some(metrics_token.to_string()),
        log: Some(log),
        volumes: Some((
            {
                // A daemon left by an interrupted run would answer this directory's socket.
                let dir = target_dir().join("e2e-volumes");
                portal::stop_volume_daemon(&dir);
                dir
            },
            format!(
                "127.0.0.1:{}",
                pgcluster::free_port().map_err(|e| e.to_string())?
            ),
        )),
    };
    let child = launch.start()?;
    Ok((launch, child))
}

const SQLX_TABLE: &str = "CREATE TABLE _sqlx_migrations (
    version BIGINT PRIMARY KEY, description TEXT NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL,
    checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)";

/// Regenerates `.sqlx/` against a throwaway, migrated database.
pub fn sqlx_prepare() -> Result {
    tools::prepend_path();
    step("starting a throwaway PostgreSQL");
    let pg = throwaway_cluster("prepare")?;
    pg.ensure_database("prepare").map_err(|e| e.to_string())?;
    let url = pg.url("prepare");

    step("migrating");
    // The server can't migrate yet (it is what we are about to compile), so psql applies the
    // files, and sqlx's own bookkeeping table is created as sqlx 0.8 does it.
    sh(Command::new("psql").args(["-v", "ON_ERROR_STOP=1", "-q", "-d", &url, "-c", SQLX_TABLE]))?;
    let mut files: Vec<_> = std::fs::read_dir(root().join("migrations"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    for f in &files {
        sh(Command::new("psql")
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-d", &url, "-f"])
            .arg(f))?;
    }

    step("regenerating .sqlx/");
    let dir = root().join(".sqlx");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // The query macros only write metadata when they actually run: force the crates that
    // use them to recompile.
    let domain = ["cp-base"].iter().chain(crate::layers::AREAS);
    for krate in domain.chain(&["control-plane", "server", "app"]) {
        sh(&mut cargo(&["clean", "--package", krate]))?;
    }
    sh(cargo(&[
        "check",
        "--workspace",
        "--exclude",
        "frontend",
        "--all-targets",
    ])
    .env("SQLX_OFFLINE", "false")
    .env("SQLX_OFFLINE_DIR", &dir)
    .env("DATABASE_URL", &url))?;
    let n = std::fs::read_dir(&dir).map_err(|e| e.to_string())?.count();
    eprintln!("    {n} queries recorded in .sqlx/");
    Ok(())
}
