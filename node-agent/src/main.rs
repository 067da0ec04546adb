//! `node-agent`: enrol a host, discover its topology, run the pull loop, show its state.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_protocol::{Heartbeat, Task, TaskOutcome, TaskResult, TaskSpec};
use clap::{Parser, Subcommand};
use node_agent::agent::{Agent, Faults, Stop};
use node_agent::client::{Client, ClientError, hello};
use node_agent::config::Settings;
use node_agent::driver::{Driver, GuestReady, LibvirtDriver, SimulatedDriver};
use node_agent::state::{NodeFile, State};
use node_agent::telemetry::Aggregator;
use node_agent::tools::HostTools;
use node_agent::traces::{TaskTrace, Tracing};

#[derive(Parser)]
#[command(
    name = "node-agent",
    version,
    about = "The GPU host agent (agent protocol v1)."
)]
struct Cli {
    /// A TOML settings file; flags override it.
    #[arg(long, global = true, env = "NODE_AGENT_CONFIG")]
    config: Option<PathBuf>,
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
        /// Defaults to the host's (or the fixture's) hostname.
        #[arg(long)]
        hostname: Option<String>,
        #[command(flatten)]
        settings: Settings,
    },
    /// Read the host and print the topology and proposed slot map as JSON.
    Discover {
        #[command(flatten)]
        settings: Settings,
    },
    /// Recover from any interrupted work, then heartbeat, claim tasks and run them until
    /// SIGTERM.
    Run {
        #[command(flatten)]
        settings: Settings,
    },
    /// Print this host's leases, VMs and last tasks (no control plane needed).
    Status {
        #[command(flatten)]
        settings: Settings,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = cli.config.as_deref();
    let result = match cli.command {
        Command::Enroll {
            server,
            token,
            hostname,
            settings,
        } => match settings.over_file(config) {
            Ok(s) => enroll(server, token, hostname, s).await,
            Err(e) => Err(e),
        },
        Command::Discover { settings } => settings.over_file(config).and_then(|s| {
            let driver = build_driver(&s)?;
            driver.topology_discover(&mut |_| {}).map(|d| {
                println!("{}", serde_json::to_string_pretty(&d).expect("serializes"));
            })
        }),
        Command::Run { settings } => match settings.over_file(config) {
            Ok(s) => run(s).await,
            Err(e) => Err(e),
        },
        Command::Status { settings } => settings.over_file(config).and_then(status),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("node-agent: {e}");
            ExitCode::FAILURE
        }
    }
}

fn build_driver(s: &Settings) -> Result<Arc<dyn Driver>, String> {
    let state_dir = s.state_dir();
    match s.driver.as_deref().unwrap_or("libvirt") {
        "simulated" => {
            let fixture = s
                .fixture
                .clone()
                .ok_or("the simulated driver needs --fixture (a host fixture directory)")?;
            let mut d = SimulatedDriver::new(fixture, &state_dir);
            if let Some(ms) = s.phase_ms {
                d.phase_time = Duration::from_millis(ms);
            }
            Ok(Arc::new(d))
        }
        "libvirt" => {
            let tools = HostTools {
                fabric_partitions_cmd: s
                    .fabric_partitions_cmd
                    .as_deref()
                    .map(|c| c.split_whitespace().map(String::from).collect()),
            };
            let mut d = LibvirtDriver::new(
                s.root.clone().unwrap_or_else(|| PathBuf::from("/")),
                tools,
                s.libvirt_uri.as_deref().unwrap_or("qemu:///system"),
            );
            d.disk_dir = s.disk_dir.clone();
            if let Some(dir) = &s.image_dir {
                d.image_dir = dir.clone();
            }
            d.guest_ready = match s.guest_ready.as_deref().unwrap_or("ssh") {
                "ssh" => GuestReady::Ssh,
                "domain-running" => GuestReady::DomainRunning,
                other => {
                    return Err(format!(
                        "guest_ready {other:?} is not one of: ssh, domain-running"
                    ));
                }
            };
            Ok(Arc::new(d))
        }
        other => Err(format!(
            "driver {other:?} is not one of: libvirt, simulated"
        )),
    }
}

async fn enroll(
    server: String,
    token: String,
    hostname: Option<String>,
    settings: Settings,
) -> Result<(), String> {
    let hostname = match (hostname, &settings.fixture) {
        (Some(h), _) => h,
        (None, Some(f)) => read_hostname(&f.join("proc/sys/kernel/hostname"))?,
        (None, None) => read_hostname(Path::new("/proc/sys/kernel/hostname"))?,
    };
    let state = State::new(settings.state_dir());
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

fn read_hostname(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("reading {}: {e}; pass --hostname", path.display()))
}

fn status(settings: Settings) -> Result<(), String> {
    let state_dir = settings.state_dir();
    let (node, _) = State::new(&state_dir).load()?;
    let driver = build_driver(&settings)?;
    println!(
        "node {} → {} ({})",
        node.node_id,
        node.server,
        driver.describe()
    );
    let leases = node_agent::lease::LeaseStore::new(&state_dir).all()?;
    println!("\nleases ({}):", leases.len());
    for l in &leases {
        println!(
            "  slot {:>2}  {}  allocation {}  {:?} at phase {}  task {}",
            l.slot_index, l.slot_id, l.allocation_id, l.kind, l.phase, l.task_id
        );
    }
    let domains = driver.domains()?;
    println!("\nVMs ({}):", domains.len());
    for d in &domains {
        let state = driver.domain_state(d)?;
        println!("  {d}  {state:?}");
    }
    let journal = std::fs::read_to_string(state_dir.join("tasks.log")).unwrap_or_default();
    let lines: Vec<&str> = journal.lines().collect();
    println!("\nlast tasks:");
    for line in lines.iter().rev().take(10).rev() {
        println!("  {line}");
    }
    Ok(())
}

/// The real fabrics where the settings name them; otherwise simulated ones (a simulated host's
/// NVLink partitions are its fixture's).
fn fabrics(settings: &Settings, state_dir: &Path, agent: &mut Agent) -> Result<(), String> {
    use node_agent::fabric::{FabricManager, OpenSmPartitions, SimulatedNvlink};
    if let Some(path) = &settings.ib_partitions_file {
        let reload = settings.ib_reload.as_deref().unwrap_or("pkill -HUP opensm");
        agent.ib = Arc::new(OpenSmPartitions {
            path: path.clone(),
            reload: reload.split_whitespace().map(String::from).collect(),
        });
    }
    let host = agent.driver.topology_discover(&mut |_| {})?.host;
    match &settings.fabric_manager {
        Some(cmd) => {
            let mut words = cmd.split_whitespace().map(String::from);
            let program = words.next().ok_or("fabric_manager is empty")?;
            agent.nvlink = Arc::new(FabricManager {
                program,
                args: words.collect(),
                gpus: host.gpus.iter().map(|g| g.pci_address.clone()).collect(),
            });
        }
        None => {
            agent.nvlink = Arc::new(SimulatedNvlink::new(state_dir, host.fabric_partitions));
        }
    }
    Ok(())
}

/// The real slot network, where the settings name an uplink.
fn host_network(
    settings: &Settings,
    state_dir: &Path,
    telemetry_listen: &str,
) -> Result<Option<node_agent::network::HostNetwork>, String> {
    let Some(uplink) = &settings.uplink else {
        return Ok(None);
    };
    let public = settings.public_address.as_deref().ok_or(
        "uplink is set but public_address is not: give the host's IPv4 address on the uplink",
    )?;
    let public = public
        .parse()
        .map_err(|_| format!("public_address {public:?} is not an IPv4 address"))?;
    let port = telemetry_listen
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| format!("telemetry_listen {telemetry_listen:?} has no port"))?;
    let mut cfg = node_agent::network::NetConfig::new(uplink, public, port);
    if let Some(blocked) = &settings.blocked_egress {
        cfg.blocked_egress = blocked.clone();
    }
    cfg.vtep = vtep(settings)?;
    node_agent::network::HostNetwork::new(state_dir, cfg).map(Some)
}

/// The tunnel endpoint the settings name: both of its settings, or neither.
fn vtep(settings: &Settings) -> Result<Option<node_agent::overlay::Vtep>, String> {
    match (&settings.vtep_device, &settings.vtep_address) {
        (None, None) => Ok(None),
        (Some(device), Some(address)) => Ok(Some(node_agent::overlay::Vtep {
            device: device.clone(),
            address: address
                .parse()
                .map_err(|_| format!("vtep_address {address:?} is not an IPv4 address"))?,
        })),
        _ => Err("give both vtep_device and vtep_address, or neither".into()),
    }
}

/// Runs the agent until SIGTERM or Ctrl-C: the telemetry sink, heartbeats and metrics beside
/// the task loop ([`work`]).
async fn run(settings: Settings) -> Result<(), String> {
    let state_dir = settings.state_dir();
    let (node, credential) = State::new(&state_dir).load()?;
    let driver = build_driver(&settings)?;
    let client = Client::new(&node.server, Some(credential.clone()));
    let tracing = start_tracing(&node.node_id).await?;
    let listen = settings
        .telemetry_listen
        .clone()
        .unwrap_or_else(|| format!("{}:9400", node_agent::image::TELEMETRY_HOST));
    let mut agent = Agent::new(
        node.node_id.clone(),
        credential,
        driver.clone(),
        state_dir.clone(),
    );
    agent.faults = Faults {
        fail_at: settings.fail_at.clone(),
        crash_at: settings.crash_at.clone(),
    };
    attach_networks(&settings, &state_dir, &listen, &mut agent)?;
    eprintln!(
        "node-agent {}: node {} → {} with driver {}",
        env!("CARGO_PKG_VERSION"),
        node.node_id,
        node.server,
        driver.describe()
    );

    let totals = Arc::new(Aggregator::default());
    let listener = tokio::net::TcpListener::bind(&listen).await;
    if let Ok(l) = &listener
        && let Ok(addr) = l.local_addr()
    {
        agent.telemetry_port = addr.port();
        eprintln!("telemetry sink listening on {addr}");
    }
    let agent = Arc::new(agent);
    let simulated = settings.driver.as_deref() == Some("simulated");
    let mut background = Vec::new();
    match listener {
        Ok(l) => background.extend(serve_telemetry(l, &agent, &totals, simulated)),
        Err(e) => eprintln!("telemetry sink not started: binding {listen}: {e}"),
    }
    let watch = Arc::new(node_agent::gpu_health::Watch::default());
    let every = Duration::from_secs(settings.heartbeat_s.unwrap_or(15));
    let vtep = if settings.uplink.is_some() {
        vtep(&settings)?.map(|v| v.address.to_string())
    } else {
        None
    };
    background.push(spawn_heartbeats(
        client.clone(),
        driver.clone(),
        agent.clone(),
        totals,
        watch.clone(),
        (every, vtep),
    ));
    let agent_metrics = node_agent::metrics::AgentMetrics::default();
    background.extend(serve_metrics(&settings, &agent, &agent_metrics, &watch).await);

    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let result = tokio::select! {
        r = work(&client, &agent, &state_dir, &agent_metrics, &tracing) => r,
        () = &mut shutdown => Ok(()),
    };
    if result.is_ok() {
        eprintln!("node-agent: stopped");
    }
    // The exporter's client blocks: flush off the runtime's threads.
    let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
    for task in background {
        task.abort();
    }
    result
}

/// The trace exporter, on when the `OTEL_*` environment asks for it.
async fn start_tracing(node: &str) -> Result<Arc<Tracing>, String> {
    let traces = otel::export::Traces::from_env()?;
    let node = node.to_owned();
    // Building the exporter's client blocks.
    let tracing = tokio::task::spawn_blocking(move || Tracing::new(&traces, &node))
        .await
        .map_err(|e| format!("starting the trace exporter: {e}"))??;
    if tracing.is_on() {
        eprintln!("exporting traces over OTLP (OTEL_* environment)");
    }
    Ok(Arc::new(tracing))
}

/// The slot network (prepared on the host) and the fabrics the settings name.
fn attach_networks(
    settings: &Settings,
    state_dir: &Path,
    listen: &str,
    agent: &mut Agent,
) -> Result<(), String> {
    if let Some(network) = host_network(settings, state_dir, listen)? {
        use node_agent::network::SlotNetwork;
        network.prepare()?;
        agent.network = Arc::new(network);
    }
    fabrics(settings, state_dir, agent)?;
    eprintln!("slot network: {}", agent.network.describe());
    eprintln!(
        "fabrics: {}; {}",
        agent.ib.describe(),
        agent.nvlink.describe()
    );
    Ok(())
}

/// The guest telemetry sink, on the host-only slot network; on a simulated host, the
/// simulated guests that report to it too.
fn serve_telemetry(
    listener: tokio::net::TcpListener,
    agent: &Arc<Agent>,
    totals: &Arc<Aggregator>,
    simulated: bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    let addr = listener.local_addr().ok();
    let app = node_agent::telemetry::router(agent.clone(), totals.clone());
    let mut tasks = vec![tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })];
    if let (true, Some(addr)) = (simulated, addr) {
        tasks.push(tokio::spawn(node_agent::telemetry::simulate_guests(
            agent.clone(),
            format!("http://{addr}/v1/gpu"),
            Duration::from_secs(2),
        )));
    }
    tasks
}

/// A heartbeat every `every`: health, the guests' utilisation, what the host holds, and the
/// GPU health events read just before it (kept until a heartbeat carrying them is answered).
fn spawn_heartbeats(
    client: Client,
    driver: Arc<dyn Driver>,
    agent: Arc<Agent>,
    totals: Arc<Aggregator>,
    watch: Arc<node_agent::gpu_health::Watch>,
    (every, vtep): (Duration, Option<String>),
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            read_gpu_health(driver.clone(), watch.clone()).await;
            let holding = {
                let a = agent.clone();
                tokio::task::spawn_blocking(move || a.holding())
                    .await
                    .ok()
                    .and_then(|h| h.map_err(|e| eprintln!("holding not read: {e}")).ok())
            };
            let beat = Heartbeat {
                hello: hello(),
                health: driver.health(),
                utilisation: totals.drain(),
                gpu_events: watch.pending(),
                holding,
                vtep: vtep.clone(),
            };
            match client.heartbeat(&beat).await {
                Ok(ack) => {
                    watch.acknowledged(&beat.gpu_events);
                    if let Some(overlay) = ack.overlay {
                        apply_overlay(&agent, overlay).await;
                    }
                }
                Err(e) => eprintln!("heartbeat failed: {e}"),
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// The segments' members a heartbeat's answer listed, applied when they changed (blocking
/// commands, off the runtime's threads).
async fn apply_overlay(agent: &Arc<Agent>, overlay: agent_protocol::Overlay) {
    let a = agent.clone();
    match tokio::task::spawn_blocking(move || a.set_overlay(overlay)).await {
        Ok(Ok(true)) => eprintln!("private networks: applied the members' new list"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => eprintln!("private networks not applied: {e}"),
        Err(e) => eprintln!("private networks not applied: {e}"),
    }
}

/// Reads each GPU's figures and the kernel's XIDs into `watch` (blocking reads, off the
/// runtime's threads).
async fn read_gpu_health(driver: Arc<dyn Driver>, watch: Arc<node_agent::gpu_health::Watch>) {
    let _ = tokio::task::spawn_blocking(move || {
        let mut warnings = Vec::new();
        let samples = driver.gpu_samples(&mut warnings);
        let records = driver.kernel_log();
        watch.observe(
            samples,
            &records,
            &driver.boot_id(),
            node_agent::lease::now_s() as i64,
        );
        for warning in warnings {
            eprintln!("gpu health: {warning}");
        }
    })
    .await;
}

/// The agent's `/metrics` for Prometheus (loopback by default, `off` for none).
async fn serve_metrics(
    settings: &Settings,
    agent: &Arc<Agent>,
    metrics: &node_agent::metrics::AgentMetrics,
    health: &Arc<node_agent::gpu_health::Watch>,
) -> Option<tokio::task::JoinHandle<()>> {
    let addr = settings
        .metrics_listen
        .as_deref()
        .unwrap_or("127.0.0.1:9401");
    if addr == "off" {
        return None;
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("metrics not served: binding {addr}: {e}");
            return None;
        }
    };
    if let Ok(a) = listener.local_addr() {
        eprintln!("metrics listening on http://{a}/metrics");
    }
    let app = node_agent::metrics::router(node_agent::metrics::Scrape {
        agent: agent.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        token: settings.metrics_token.clone(),
    });
    Some(tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await;
    }))
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Recovery first, then the claim loop. Cancelled at an await point on shutdown; a task in
/// progress runs on a blocking thread, which [`run_task`] stops at its next phase.
async fn work(
    client: &Client,
    agent: &Arc<Agent>,
    state_dir: &Path,
    metrics: &node_agent::metrics::AgentMetrics,
    tracing: &Tracing,
) -> Result<(), String> {
    let view = loop {
        match client.reconcile().await {
            Ok(v) => break v,
            Err(e) => {
                fatal(&e)?;
                eprintln!("reconcile failed: {e}; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    let a = agent.clone();
    let v = view.clone();
    let done = tokio::task::spawn_blocking(move || a.reconcile(&v))
        .await
        .map_err(|e| format!("reconcile panicked: {e}"))??;
    for line in done {
        eprintln!("recovery: {line}");
    }
    for task in view.running_tasks {
        eprintln!(
            "recovery: resuming task {} ({})",
            task.task_id,
            task.spec.kind()
        );
        let trace = tracing.task(&task, true);
        run_task(client, agent, state_dir, task, metrics, trace).await;
    }
    // Tasks this agent ran to the end (their result delivered or refused). The control plane
    // sends a running task again when the agent claims while idle (its first answer was lost);
    // one whose result was refused must not run again and again.
    let mut done: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    loop {
        match client.claim(agent_protocol::MAX_CLAIM_WAIT_S).await {
            Ok(answer) => {
                if let Some(task) = answer.task {
                    if done.contains(&task.task_id) {
                        eprintln!(
                            "task {}: sent again after it ran here to the end; waiting 30 s",
                            task.task_id
                        );
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        continue;
                    }
                    let id = task.task_id.clone();
                    let trace = tracing.task(&task, false);
                    run_task(client, agent, state_dir, task, metrics, trace).await;
                    done.push_back(id);
                    if done.len() > 256 {
                        done.pop_front();
                    }
                }
            }
            Err(e) => {
                fatal(&e)?;
                eprintln!("claim failed: {e}; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

/// An answer that says the control plane failed, not that it refuses: worth sending again.
fn passing(e: &agent_protocol::ApiError) -> bool {
    e.code == agent_protocol::codes::UNAVAILABLE || e.code == agent_protocol::codes::INTERNAL
}

/// The errors that no retry will fix.
fn fatal(e: &ClientError) -> Result<(), String> {
    match e {
        ClientError::Api(e) if e.code == agent_protocol::codes::UNSUPPORTED_PROTOCOL => Err(
            format!("the control plane refused this agent: {}", e.message),
        ),
        ClientError::Api(e) if e.code == agent_protocol::codes::UNAUTHENTICATED => Err(format!(
            "the control plane refused the credential: {}",
            e.message
        )),
        _ => Ok(()),
    }
}

/// Stops the running task at its next phase when dropped (the agent is shutting down).
struct StopOnDrop(Arc<Agent>, bool);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if !self.1 {
            self.0.stopping.store(true, Ordering::SeqCst);
        }
    }
}

async fn run_task(
    client: &Client,
    agent: &Arc<Agent>,
    state_dir: &Path,
    task: Task,
    metrics: &node_agent::metrics::AgentMetrics,
    trace: TaskTrace<'_>,
) {
    eprintln!("task {}: {}", task.task_id, task.spec.kind());
    let mut guard = StopOnDrop(agent.clone(), false);
    // Plans are checked against what the control plane approved for this node, now.
    let view = if matches!(task.spec, TaskSpec::TopologyDiscover {}) {
        agent_protocol::ReconcileResponse {
            approved_slots: Vec::new(),
            running_tasks: Vec::new(),
            active_allocations: Vec::new(),
        }
    } else {
        loop {
            match client.reconcile().await {
                Ok(v) => break v,
                Err(e) => {
                    eprintln!(
                        "task {}: reading the approved slots failed ({e}); retrying",
                        task.task_id
                    );
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let job = {
        let agent = agent.clone();
        let task = task.clone();
        tokio::task::spawn_blocking(move || {
            let mut report = |p| {
                let _ = tx.send(p);
            };
            agent.execute(&task.task_id, &task.spec, &view, &mut report)
        })
    };
    while let Some(report) = rx.recv().await {
        if report.status != agent_protocol::PhaseStatus::Started {
            metrics.phase_ended(
                &report.phase,
                report.status == agent_protocol::PhaseStatus::Succeeded,
                report.elapsed_ms as f64 / 1000.0,
            );
        }
        trace.phase(&report);
        if let Err(e) = client
            .phase(&task.task_id, &report, trace.traceparent())
            .await
        {
            eprintln!("task {}: phase report failed: {e}", task.task_id);
        }
    }
    let outcome = match job.await {
        Ok(Ok(output)) => TaskOutcome::Succeeded { output },
        Ok(Err(Stop::Failed(error))) => TaskOutcome::Failed { error },
        Ok(Err(Stop::Interrupted)) => {
            eprintln!(
                "task {}: interrupted by shutdown; the next start resumes it",
                task.task_id
            );
            trace.finish(None);
            return;
        }
        Err(e) => TaskOutcome::Failed {
            error: format!("the task panicked: {e}"),
        },
    };
    guard.1 = true;
    if matches!(outcome, TaskOutcome::Failed { .. }) {
        metrics.task_failed(task.spec.kind());
    }
    journal(state_dir, &task, &outcome);
    let result = TaskResult { outcome };
    // Results matter: retry until the control plane has it.
    for attempt in 0.. {
        match client
            .result(&task.task_id, &result, trace.traceparent())
            .await
        {
            Ok(()) => break,
            // A refusal stands; the control plane's own failure (its database restarting)
            // passes, and the result is sent again like after a dropped connection.
            Err(ClientError::Api(e)) if !passing(&e) => {
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
    trace.finish(Some(&result.outcome));
}

/// One line per finished task in `{state_dir}/tasks.log`, for `node-agent status`.
fn journal(state_dir: &Path, task: &Task, outcome: &TaskOutcome) {
    use std::io::Write;
    let allocation = match &task.spec {
        TaskSpec::VmProvision(p) | TaskSpec::BaremetalProvision(p) => p.allocation_id.as_str(),
        TaskSpec::VmRelease(p) | TaskSpec::BaremetalRelease(p) => p.allocation_id.as_str(),
        TaskSpec::NetworkUpdate(p) => p.allocation_id.as_str(),
        TaskSpec::VolumesUpdate(p) => p.allocation_id.as_str(),
        TaskSpec::TopologyDiscover {} => "-",
    };
    let how = match outcome {
        TaskOutcome::Succeeded { .. } => "succeeded".to_string(),
        TaskOutcome::Failed { error } => format!("failed: {error}"),
    };
    let line = format!(
        "{} {} {} allocation {} {}\n",
        node_agent::lease::now_s(),
        task.task_id,
        task.spec.kind(),
        allocation,
        how
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state_dir.join("tasks.log"))
    {
        let _ = f.write_all(line.as_bytes());
    }
}
