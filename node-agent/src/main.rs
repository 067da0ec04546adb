//! `node-agent`: enrol a host, discover its topology, run the pull loop.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agent_protocol::{Heartbeat, TaskOutcome, TaskOutput, TaskResult, TaskSpec};
use clap::{Parser, Subcommand, ValueEnum};
use node_agent::client::{Client, ClientError, hello};
use node_agent::driver::{Driver, HostDriver, SimulatedDriver};
use node_agent::state::{NodeFile, State};
use node_agent::tools::HostTools;

#[derive(Parser)]
#[command(
    name = "node-agent",
    version,
    about = "The GPU host agent (agent protocol v1)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Exchange a one-time bootstrap token for this node's credential.
    Enroll {
        /// The control plane, e.g. https://portal.example.com
        #[arg(long, env = "NODE_AGENT_SERVER")]
        server: String,
        /// The bootstrap token the operator was shown (prefer the environment variable).
        #[arg(long, env = "NODE_AGENT_BOOTSTRAP_TOKEN", hide_env_values = true)]
        token: String,
        #[arg(
            long,
            env = "NODE_AGENT_STATE_DIR",
            default_value = "/var/lib/gpu-node-agent"
        )]
        state_dir: PathBuf,
        /// Defaults to the host's (or the fixture's) hostname.
        #[arg(long)]
        hostname: Option<String>,
        /// Read the hostname from this fixture (the simulated driver).
        #[arg(long)]
        fixture: Option<PathBuf>,
    },
    /// Read the host and print the topology and proposed slot map as JSON.
    Discover {
        #[command(flatten)]
        driver: DriverArgs,
    },
    /// Heartbeat, claim tasks and run them until stopped.
    Run {
        #[arg(
            long,
            env = "NODE_AGENT_STATE_DIR",
            default_value = "/var/lib/gpu-node-agent"
        )]
        state_dir: PathBuf,
        #[command(flatten)]
        driver: DriverArgs,
        #[arg(long, default_value_t = 15)]
        heartbeat_s: u64,
    },
}

#[derive(clap::Args)]
struct DriverArgs {
    #[arg(long, value_enum, default_value = "host")]
    driver: DriverKind,
    /// The simulated host: a fixture directory (sys/, proc/, tools/).
    #[arg(long, required_if_eq("driver", "simulated"))]
    fixture: Option<PathBuf>,
    /// The root to read sysfs under (host driver).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// The command that prints the NVLink fabric partition table, split on spaces.
    #[arg(long, env = "NODE_AGENT_FABRIC_PARTITIONS_CMD")]
    fabric_partitions_cmd: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum DriverKind {
    Host,
    Simulated,
}

impl DriverArgs {
    fn build(self) -> Arc<dyn Driver> {
        match self.driver {
            DriverKind::Simulated => Arc::new(SimulatedDriver::new(
                self.fixture
                    .expect("clap requires --fixture for the simulated driver"),
            )),
            DriverKind::Host => Arc::new(HostDriver {
                root: self.root,
                tools: HostTools {
                    fabric_partitions_cmd: self
                        .fabric_partitions_cmd
                        .map(|c| c.split_whitespace().map(String::from).collect()),
                },
            }),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Enroll {
            server,
            token,
            state_dir,
            hostname,
            fixture,
        } => enroll(server, token, state_dir, hostname, fixture).await,
        Command::Discover { driver } => {
            let driver = driver.build();
            driver.topology_discover(&mut |_| {}).map(|d| {
                println!("{}", serde_json::to_string_pretty(&d).expect("serializes"));
            })
        }
        Command::Run {
            state_dir,
            driver,
            heartbeat_s,
        } => {
            run(
                State::new(state_dir),
                driver.build(),
                Duration::from_secs(heartbeat_s),
            )
            .await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("node-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn enroll(
    server: String,
    token: String,
    state_dir: PathBuf,
    hostname: Option<String>,
    fixture: Option<PathBuf>,
) -> Result<(), String> {
    let hostname = match (hostname, fixture) {
        (Some(h), _) => h,
        (None, Some(f)) => read_hostname(&f.join("proc/sys/kernel/hostname"))?,
        (None, None) => read_hostname(std::path::Path::new("/proc/sys/kernel/hostname"))?,
    };
    let state = State::new(state_dir);
    if state.credential_path().exists() {
        return Err(format!(
            "{} already exists: this node is enrolled",
            state.credential_path().display()
        ));
    }
    let client = Client::new(&server, None);
    let answer = client
        .enroll(token.trim(), &hostname)
        .await
        .map_err(|e| format!("enrolment refused: {e}"))?;
    state.save(
        &NodeFile {
            node_id: answer.node_id.clone(),
            server,
        },
        &answer.node_credential,
    )?;
    println!(
        "enrolled {hostname} as node {}; credential saved in {}",
        answer.node_id,
        state.credential_path().display()
    );
    Ok(())
}

fn read_hostname(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("reading {}: {e}; pass --hostname", path.display()))
}

async fn run(state: State, driver: Arc<dyn Driver>, heartbeat: Duration) -> Result<(), String> {
    let (node, credential) = state.load()?;
    let client = Client::new(&node.server, Some(credential.clone()));
    let signer = Arc::new(Signer {
        node_id: node.node_id.clone(),
        credential,
    });
    eprintln!(
        "node-agent {}: node {} → {} with driver {}",
        env!("CARGO_PKG_VERSION"),
        node.node_id,
        node.server,
        driver.describe()
    );

    let beats = {
        let client = client.clone();
        let driver = driver.clone();
        tokio::spawn(async move {
            loop {
                let beat = Heartbeat {
                    hello: hello(),
                    health: driver.health(),
                };
                if let Err(e) = client.heartbeat(&beat).await {
                    eprintln!("heartbeat failed: {e}");
                }
                tokio::time::sleep(heartbeat).await;
            }
        })
    };

    let work = async {
        loop {
            match client.claim(agent_protocol::MAX_CLAIM_WAIT_S).await {
                Ok(answer) => {
                    if let Some(task) = answer.task {
                        execute(&client, driver.clone(), &signer, task).await;
                    }
                }
                Err(ClientError::Api(e))
                    if e.code == agent_protocol::codes::UNSUPPORTED_PROTOCOL =>
                {
                    return Err(format!(
                        "the control plane refused this agent: {}",
                        e.message
                    ));
                }
                Err(ClientError::Api(e)) if e.code == agent_protocol::codes::UNAUTHENTICATED => {
                    return Err(format!(
                        "the control plane refused the credential: {}",
                        e.message
                    ));
                }
                Err(e) => {
                    eprintln!("claim failed: {e}; retrying in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            }
        }
    };
    let result = tokio::select! {
        r = work => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    beats.abort();
    result
}

/// What signs cleanup proofs: the node's id and credential.
struct Signer {
    node_id: String,
    credential: String,
}

async fn execute(
    client: &Client,
    driver: Arc<dyn Driver>,
    signer: &Arc<Signer>,
    task: agent_protocol::Task,
) {
    eprintln!("task {}: {}", task.task_id, task.spec.kind());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let signer = signer.clone();
    let job = tokio::task::spawn_blocking(move || {
        let mut report = |p| {
            let _ = tx.send(p);
        };
        match task.spec {
            TaskSpec::TopologyDiscover {} => driver
                .topology_discover(&mut report)
                .map(|d| TaskOutput::TopologyDiscovered(Box::new(d))),
            TaskSpec::VmProvision(plan) => driver
                .provision(&plan, false, &mut report)
                .map(TaskOutput::Provisioned),
            TaskSpec::BaremetalProvision(plan) => driver
                .provision(&plan, true, &mut report)
                .map(TaskOutput::Provisioned),
            TaskSpec::VmRelease(plan) | TaskSpec::BaremetalRelease(plan) => {
                driver.release(&plan, &mut report).map(|slots| {
                    TaskOutput::Cleaned(node_agent::proof::sign(
                        &signer.credential,
                        &signer.node_id,
                        &plan.allocation_id,
                        slots,
                    ))
                })
            }
        }
    });
    while let Some(report) = rx.recv().await {
        if let Err(e) = client.phase(&task.task_id, &report).await {
            eprintln!("task {}: phase report failed: {e}", task.task_id);
        }
    }
    let outcome = match job.await {
        Ok(Ok(output)) => TaskOutcome::Succeeded { output },
        Ok(Err(error)) => TaskOutcome::Failed { error },
        Err(e) => TaskOutcome::Failed {
            error: format!("the task panicked: {e}"),
        },
    };
    let result = TaskResult { outcome };
    // Results matter: retry until the control plane has it.
    for attempt in 0.. {
        match client.result(&task.task_id, &result).await {
            Ok(()) => break,
            Err(ClientError::Api(e)) => {
                eprintln!("task {}: result refused: {e:?}", task.task_id);
                break;
            }
            Err(e) => {
                eprintln!(
                    "task {}: result not delivered ({e}), attempt {attempt}",
                    task.task_id
                );
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}
