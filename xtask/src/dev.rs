//! `cargo xtask dev`: the portal on http://127.0.0.1:3000 with a private, persistent
//! PostgreSQL under `.data/postgres` (or `DATABASE_URL`'s database), migrated and seeded.
//! `--replicas 2` adds a second server process on :3001 sharing that database (sessions,
//! workers and the agents' API are all shared; sign in on :3000, since the demo identity
//! provider knows that address, and the session works on both). Ctrl-C stops everything this
//! command started.

use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pgcluster::{Durability, PgCluster, StopOnDrop};

use crate::proc::{run as run_cmd, terminate, wait_ready};
use crate::tools::{self, Needs};
use crate::{Result, fleet, portal, root, step, target_dir};

pub const ADDR: &str = "127.0.0.1:3000";
const IDP_PORT: u16 = 3002;
const STRIPE_PORT: u16 = 12111;

/// The most replicas `--replicas` starts (3002 is the identity provider's port).
const MAX_REPLICAS: u16 = 2;

fn replicas(args: &[String]) -> Result<u16> {
    match args {
        [] => Ok(1),
        [flag, n] if flag == "--replicas" => match n.parse::<u16>() {
            Ok(n) if (1..=MAX_REPLICAS).contains(&n) => Ok(n),
            _ => Err(format!(
                "`--replicas {n}`: give a number from 1 to {MAX_REPLICAS}"
            )),
        },
        _ => Err(format!(
            "`cargo xtask dev` takes nothing, or `--replicas N` (got `{}`)",
            args.join(" ")
        )),
    }
}

pub fn run(args: &[String]) -> Result {
    let replicas = replicas(args)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("installing the Ctrl-C handler: {e}"))?;
    }

    let external = std::env::var("DATABASE_URL").ok();
    tools::ensure_all(Needs {
        postgres: external.is_none(),
        chromium: false,
        npm: true,
        host_tools: true,
    })?;

    // Held until the end of this function: dropping it stops the cluster.
    let (database_url, cluster) = database(external)?;
    build()?;
    if stop.load(Ordering::SeqCst) {
        return Ok(());
    }

    // Everything started from here on is stopped when `started` is dropped: on any error, and
    // after Ctrl-C.
    let mut started = Started::default();
    let launch = start_helpers(&mut started, database_url)?;
    let port = start_servers(&mut started, &launch, replicas)?;
    step("starting the demo fleet (simulated node agents)");
    started.agents = fleet::start(&launch, &format!("http://{ADDR}"))?;
    welcome(replicas, port, cluster.is_some(), &launch.admin_password);
    until_stopped(&stop, &mut started)?;
    drop(started);
    drop(cluster);
    eprintln!("stopped.");
    Ok(())
}

/// `DATABASE_URL` when set; otherwise a durable cluster in `.data/postgres`, stopped when the
/// returned guard drops.
fn database(external: Option<String>) -> Result<(String, Option<StopOnDrop>)> {
    let mut cluster: Option<StopOnDrop> = None;
    let database_url = match external {
        Some(url) => {
            step("using DATABASE_URL (no PostgreSQL started)");
            url
        }
        None => {
            step("starting PostgreSQL in .data/postgres");
            let pg = PgCluster::init(root().join(".data/postgres"), Durability::Durable)
                .map_err(|e| e.to_string())?;
            pg.start().map_err(|e| e.to_string())?;
            pg.ensure_database("portal").map_err(|e| e.to_string())?;
            let url = pg.url("portal");
            eprintln!(
                "    PostgreSQL on port {} (data survives restarts)",
                pg.port()
            );
            cluster = Some(StopOnDrop(pg));
            url
        }
    };
    Ok((database_url, cluster))
}

/// The portal (cargo leptos), the node agent and the local Stripe.
fn build() -> Result {
    step("building the portal (cargo leptos build) and the node agent");
    run_cmd(
        Command::new("cargo")
            .args(["leptos", "build"])
            .current_dir(root()),
    )?;
    run_cmd(
        Command::new("cargo")
            .args([
                "build",
                "--package",
                "node-agent",
                "--package",
                "stripe-test-server",
            ])
            .env("RUSTFLAGS", "--cfg erase_components")
            .current_dir(root()),
    )?;
    Ok(())
}

/// The demo identity provider and the local Stripe, and how the server is to be launched
/// with them.
fn start_helpers(started: &mut Started, database_url: String) -> Result<portal::Launch> {
    step("starting the demo identity provider (oidc-provider) on 127.0.0.1:3002");
    let idp_secret = portal::dev_secret("idp-client-secret")?;
    let (idp, issuer) =
        portal::start_demo_idp(IDP_PORT, &format!("http://{ADDR}"), &idp_secret, None)?;
    started.helpers.push(idp);

    step("starting the local Stripe test server on 127.0.0.1:12111");
    let webhook_secret = format!("whsec_{}", portal::dev_secret("stripe-webhook-secret")?);
    let (stripe, stripe_api) = portal::start_stripe(
        &target_dir().join("debug/stripe-test-server"),
        STRIPE_PORT,
        &format!("http://{ADDR}"),
        &webhook_secret,
        Some(
            std::fs::File::create(root().join(".data/stripe.log"))
                .map_err(|e| format!("creating .data/stripe.log: {e}"))?,
        ),
    )?;
    started.helpers.push(stripe);
    let admin_password = portal::dev_secret("admin-password")?;
    Ok(portal::Launch {
        binary: target_dir().join("debug/server"),
        database_url,
        addr: ADDR.to_string(),
        site_root: target_dir().join("site"),
        site_env: "dev",
        admin_password,
        demo_idp: Some((issuer, idp_secret)),
        stripe: Some((stripe_api, webhook_secret)),
        dns_resolver: None,
        secret_keys: portal::dev_value("secret-keys", || portal::random_keyring("dev"))?,
        metrics_addr: "127.0.0.1:9464".into(),
        metrics_token: None,
        log: None,
        volumes: Some((root().join(".data/volumes"), "127.0.0.1:10809".into())),
    })
}

/// The server, and with `--replicas` more on the next ports (`Launch::replica`), each waited
/// for until ready; returns the first one's port.
fn start_servers(started: &mut Started, launch: &portal::Launch, replicas: u16) -> Result<u16> {
    step("starting the server");
    let port: u16 = ADDR
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    for i in 0..replicas {
        let addr = format!("127.0.0.1:{}", port + i);
        let child = if i == 0 {
            launch.start()?
        } else {
            step(&format!("starting replica {} on http://{addr}", i + 1));
            launch.replica(addr, None).start_replica()?
        };
        let child = started.servers.push_mut(child);
        wait_ready(child, port + i, Duration::from_secs(60))?;
    }
    Ok(port)
}

/// Where everything is, and how to sign in.
fn welcome(replicas: u16, port: u16, own_cluster: bool, admin_password: &str) {
    for i in 1..replicas {
        eprintln!(
            "Replica {} at http://127.0.0.1:{} (same database; sign in on :{port}, then use either)",
            i + 1,
            port + i
        );
    }
    eprintln!(
        "\n\x1b[1mThe portal is up at http://{ADDR}\x1b[0m  (Ctrl-C stops the server{})",
        if own_cluster { " and PostgreSQL" } else { "" }
    );
    eprintln!(
        "Tenant users: sign in at http://{ADDR}/login with alice@acme.example, bob@acme.example,\n\
         fiona@acme.example or carol@globex.example (any password at the demo identity provider)\n\
         Platform admin (break-glass, same page): {} / {admin_password}\n\
         (kept in .data/admin-password)",
        portal::ADMIN_EMAIL
    );
}

/// Until Ctrl-C; a server that stops on its own is an error.
fn until_stopped(stop: &AtomicBool, started: &mut Started) -> Result {
    loop {
        if stop.load(Ordering::SeqCst) {
            step("stopping");
            return Ok(());
        }
        for server in &mut started.servers {
            if let Some(status) = server.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("a server stopped ({status})"));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The processes `cargo xtask dev` started, stopped when dropped: agents first, then the
/// servers (which finish in-flight requests), then the identity provider and Stripe.
#[derive(Default)]
struct Started {
    agents: Vec<Child>,
    servers: Vec<Child>,
    helpers: Vec<Child>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for a in &mut self.agents {
            terminate(a, Duration::from_secs(10));
        }
        for s in &mut self.servers {
            terminate(s, Duration::from_secs(25));
        }
        for h in &mut self.helpers {
            terminate(h, Duration::from_secs(5));
        }
    }
}
