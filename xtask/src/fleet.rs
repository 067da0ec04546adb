//! The demo fleet for `cargo xtask dev`: one simulated node agent per demo host (two HGX H100
//! hosts and a 4×L40S host selling slices, one HGX host offered as bare metal), each a separate
//! `node-agent` process with its state in `.data/agents/{host}`. Hosts are enrolled through the
//! real bootstrap-token exchange and their discovered slot maps approved by the platform admin
//! (audited), so a newcomer can launch at once.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::portal::{ADMIN_EMAIL, Launch};
use crate::proc::run as run_cmd;
use crate::{Result, root, target_dir};

struct Host {
    hostname: String,
    fixture: String,
    node_id: String,
}

fn listing(launch: &Launch, enrol: &[String]) -> Result<Vec<(Host, Option<String>)>> {
    let out = launch.output(&[
        "demo-fleet-tokens",
        "--operator",
        ADMIN_EMAIL,
        "--enrol",
        &enrol.join(","),
    ])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4).then(|| {
                (
                    Host {
                        hostname: f[0].into(),
                        fixture: f[1].into(),
                        node_id: f[2].into(),
                    },
                    (f[3] != "-").then(|| f[3].to_string()),
                )
            })
        })
        .collect())
}

/// The node id an agent state directory was enrolled as.
fn enrolled_as(dir: &Path) -> Option<String> {
    let json = std::fs::read_to_string(dir.join("node.json")).ok()?;
    // `"node_id": "…"`, as the agent writes it.
    let rest = json.split_once("\"node_id\"")?.1;
    let id = rest.split('"').nth(1)?.to_string();
    dir.join("credential").exists().then_some(id)
}

/// Enrols what is not enrolled yet, starts every agent, approves their slot maps.
pub fn start(launch: &Launch, portal_url: &str) -> Result<Vec<Child>> {
    start_in(launch, portal_url, &root().join(".data/agents"))
}

/// [`start`], with the agents' state directories and logs under `agents`.
pub fn start_in(launch: &Launch, portal_url: &str, agents: &Path) -> Result<Vec<Child>> {
    Ok(start_agents(launch, portal_url, agents)?
        .into_iter()
        .map(|(_, child)| child)
        .collect())
}

/// One simulated agent of the demo fleet, as started: [`Agent::spawn`] starts it again (with
/// the same state directory, so it resumes what it was doing, as after a crash).
pub struct Agent {
    pub hostname: String,
    dir: PathBuf,
    fixture: PathBuf,
    metrics: String,
    log: PathBuf,
}

impl Agent {
    pub fn spawn(&self) -> Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("opening {}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        Command::new(target_dir().join("debug/node-agent"))
            .args([
                "run",
                "--driver",
                "simulated",
                "--telemetry-listen",
                "127.0.0.1:0",
                "--metrics-listen",
                &self.metrics,
            ])
            .arg("--state-dir")
            .arg(&self.dir)
            .arg("--fixture")
            .arg(&self.fixture)
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting the {} agent: {e}", self.hostname))
    }
}

/// [`start_in`], keeping what it takes to start each agent again.
pub fn start_agents(
    launch: &Launch,
    portal_url: &str,
    agents: &Path,
) -> Result<Vec<(Agent, Child)>> {
    std::fs::create_dir_all(agents).map_err(|e| format!("{}: {e}", agents.display()))?;
    let binary = target_dir().join("debug/node-agent");
    // A state directory from an older database (or none) is enrolled again.
    let stale: Vec<String> = listing(launch, &[])?
        .into_iter()
        .filter(|(h, _)| enrolled_as(&agents.join(&h.hostname)).as_deref() != Some(&h.node_id))
        .map(|(h, _)| h.hostname)
        .collect();
    let hosts = listing(launch, &stale)?;
    for (h, token) in &hosts {
        let Some(token) = token else { continue };
        let dir = agents.join(&h.hostname);
        let _ = std::fs::remove_dir_all(&dir);
        run_cmd(
            Command::new(&binary)
                .args(["enroll", "--server", portal_url, "--hostname", &h.hostname])
                .arg("--state-dir")
                .arg(&dir)
                .env("NODE_AGENT_BOOTSTRAP_TOKEN", token)
                .stdout(Stdio::null()),
        )?;
    }
    let mut started = Vec::new();
    // Each agent's /metrics on the ports after the portal's (none when the portal has none).
    let metrics = launch.metrics_port();
    for (i, (h, _)) in hosts.iter().enumerate() {
        let log = agents.join(format!("{}.log", h.hostname));
        // A fresh log per start of the fleet; restarts append.
        std::fs::File::create(&log).map_err(|e| format!("creating the agent log: {e}"))?;
        let agent = Agent {
            hostname: h.hostname.clone(),
            dir: agents.join(&h.hostname),
            fixture: root().join("node-agent/fixtures").join(&h.fixture),
            metrics: metrics.map_or("off".to_string(), |p| {
                format!("127.0.0.1:{}", usize::from(p) + 1 + i)
            }),
            log,
        };
        let child = agent.spawn()?;
        started.push((agent, child));
    }
    let out = launch.output(&[
        "demo-fleet-approve",
        "--operator",
        ADMIN_EMAIL,
        "--wait-s",
        "60",
    ])?;
    eprint!("{out}");
    for (h, _) in &hosts {
        eprintln!(
            "    {} ({}) — log in {}",
            h.hostname,
            h.fixture,
            agents.join(format!("{}.log", h.hostname)).display()
        );
    }
    Ok(started)
}
