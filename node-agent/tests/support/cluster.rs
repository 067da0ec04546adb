//! A control plane and real `node-agent` processes on simulated hosts: what the tests that run
//! the agent binary against the control plane share.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use control_plane::{AllocationId, NodeId};
use sqlx::PgPool;

/// A simulated host: its agent's state directory and the sysfs fixture it reads.
pub struct Host {
    pub state: PathBuf,
    pub fixture: PathBuf,
}

impl Host {
    /// Starts `node-agent run` on the simulated driver (20 ms phases, 2 s heartbeats), dying
    /// at `crash_at` when given, with `env` added to its environment.
    pub fn agent(&self, crash_at: Option<&str>) -> Running {
        self.agent_with(crash_at, &[])
    }

    pub fn agent_with(&self, crash_at: Option<&str>, env: &[(&str, &str)]) -> Running {
        let mut c = Command::new(env!("CARGO_BIN_EXE_node-agent"));
        c.envs(env.iter().copied());
        c.args([
            "run",
            "--driver",
            "simulated",
            "--phase-ms",
            "20",
            "--heartbeat-s",
            "2",
        ])
        .arg("--state-dir")
        .arg(&self.state)
        .arg("--fixture")
        .arg(&self.fixture)
        .args(["--telemetry-listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        if let Some(p) = crash_at {
            c.args(["--crash-at", p]);
        }
        Running(c.spawn().expect("the node-agent binary runs"))
    }

    pub fn domains(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.state.join("sim/domains"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()?
                            .strip_suffix(".xml")
                            .map(String::from)
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The simulated InfiniBand fabric's membership: (partition key, member count).
    pub fn ib(&self) -> Vec<(u16, usize)> {
        node_agent::fabric::SimulatedIb::new(&self.state)
            .membership()
            .unwrap()
            .into_iter()
            .map(|(k, g)| (k, g.len()))
            .collect()
    }

    pub fn leases(&self) -> usize {
        node_agent::lease::LeaseStore::new(&self.state)
            .all()
            .unwrap()
            .len()
    }
}

/// A running agent, killed if the test fails first.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits without blocking the runtime (the control plane runs on it).
pub async fn wait_exit(child: &mut Running, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the agent did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn stop(mut child: Running) {
    let _ = Command::new("kill").arg(child.0.id().to_string()).status();
    let status = wait_exit(&mut child, Duration::from_secs(20)).await;
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
}

pub async fn state(pool: &PgPool, id: AllocationId) -> String {
    sqlx::query_scalar("SELECT state FROM allocations WHERE id = $1")
        .bind(id.0)
        .fetch_one(pool)
        .await
        .unwrap()
}

pub async fn until(pool: &PgPool, id: AllocationId, want: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = state(pool, id).await;
        if s == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: allocation is {s}, never became {want}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The agent's state as enrolment leaves it: its node, the control plane's URL, the credential.
pub fn write_state(dir: &Path, node: NodeId, server: &str, credential: &str) {
    let s = node_agent::state::State::new(dir);
    s.save(
        &node_agent::state::NodeFile {
            node_id: node.to_string(),
            server: server.into(),
        },
        credential,
    )
    .unwrap();
}

/// Serves `app` on a loopback port (with the peer address, as the server binary does) and
/// runs the control plane's workers; the URL agents are given.
pub async fn control_plane(app: axum::Router, cp: &control_plane::ControlPlane) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    tokio::spawn(server::workers::run(cp.clone()));
    url
}
