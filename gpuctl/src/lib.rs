//! `gpuctl`: the GPU cloud from a terminal or a script, through the public API (`/api/v1`).
//!
//! Every command prints a table for people or, with `--output json`, the API's own JSON for
//! programs. A refusal prints the problem's explanation and exits with a code scripts can
//! test ([`exit`]). `main.rs` only parses the arguments, calls [`run`] and exits (or runs
//! `ssh`), so the tests drive the same [`run`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use portal_types::Problem;
use portal_types::account::SshKey;
use portal_types::allocations::{AllocationDetail, AllocationSummary, tags_label};
use portal_types::billing::Overview;
use portal_types::catalog::Offer;
use portal_types::clusters::Cluster;
use portal_types::marketplace::Image;
use portal_types::volumes::{Snapshot, Volume};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Exit codes, stable for scripts.
pub mod exit {
    pub const OK: i32 = 0;
    /// The server could not be reached, or answered something unexpected.
    pub const FAILED: i32 = 1;
    /// Bad arguments (clap's own code).
    pub const USAGE: i32 = 2;
    /// No token, a token that no longer works, or one without the scope.
    pub const AUTH: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
    /// Refused: no capacity, a policy, a quota or budget, a conflicting idempotency key.
    pub const REFUSED: i32 = 5;
    /// The request broke a rule; the message names the field.
    pub const INVALID: i32 = 6;
    /// Rate-limited or a fault on the server's side: retrying later may work.
    pub const RETRY: i32 = 7;
    /// `--wait` gave up before the instance was running.
    pub const TIMED_OUT: i32 = 8;
    /// The instance failed (or was released) while `--wait` waited.
    pub const INSTANCE_FAILED: i32 = 9;
}

#[derive(Debug, Parser)]
#[command(
    name = "gpuctl",
    version,
    about = "Launch and manage GPU instances through the API."
)]
pub struct Cli {
    /// The API's address, e.g. `https://gpu.example.com/api/v1` (default: what `login` saved).
    #[arg(long, env = "GPUCTL_API", global = true)]
    pub api: Option<String>,
    /// A file holding an API token, `gpk_…` (default: `GPUCTL_TOKEN`, else what `login` saved
    /// for this address). Never the token itself: arguments are visible to every process.
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// Where `login` keeps the address and token (default: `$XDG_CONFIG_HOME/gpuctl/config.json`).
    #[arg(long, env = "GPUCTL_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    #[arg(long, short, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Saves the API address and a token (typed without echo, unless `--token-file` or
    /// `GPUCTL_TOKEN` gives it), readable only by you (0600), after checking that the token
    /// works. The token is sent only to that address.
    Login,
    /// What could launch where now, and its hourly price.
    Offers {
        #[arg(long)]
        region: Option<String>,
        #[arg(long)]
        gpu_model: Option<String>,
    },
    /// The images a project may launch, with the SKUs each runs on.
    Images {
        /// The project whose policies apply; needed for its own allow-lists when the token
        /// reaches the whole organization.
        #[arg(long)]
        project: Option<String>,
    },
    /// Launches an instance; with `--wait`, follows it to running and prints how to connect.
    Launch(Box<LaunchArgs>),
    /// Lists instances, newest first (every page).
    Ls {
        #[arg(long)]
        project: Option<String>,
        /// A state, or `active` (the default) for every one not released, or `all`.
        #[arg(long, default_value = "active")]
        state: String,
        /// `key` or `key=value`.
        #[arg(long)]
        tag: Option<String>,
    },
    /// One instance: state, phases, how to connect.
    Show { id: String },
    /// Runs `ssh -p PORT -- USER@HOST` to the instance; arguments after `--` are the command
    /// to run there (ssh options belong in `~/.ssh/config`).
    Ssh {
        id: String,
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Releases an instance (idempotent); a stopped one's saved disk is erased.
    Release { id: String },
    /// Stops an instance: its disk is kept (billed as storage), its GPUs are released
    /// (idempotent).
    Stop { id: String },
    /// Starts a stopped instance on its saved disk, anywhere in its region with its SKU free
    /// (idempotent); `gpuctl show ID` follows it to running.
    Start { id: String },
    /// Your saved SSH public keys.
    Keys {
        #[command(subcommand)]
        action: Option<KeysAction>,
    },
    /// Clusters: instances of one SKU placed together on one leaf switch, spine group or
    /// fabric, launched and released as one.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Volumes: a project's block storage, kept when instances go.
    Volume {
        #[command(subcommand)]
        action: VolumeAction,
    },
    /// Snapshots: point-in-time copies of volumes, to make new volumes from.
    Snapshot {
        #[command(subcommand)]
        action: SnapshotAction,
    },
    /// Prints a dstack SSH fleet (`dstack apply -f FILE`) of the running instances that match,
    /// each reached at its public SSH endpoint.
    DstackFleet {
        /// The fleet's name in dstack: 1 to 40 lowercase letters, digits and `-`, starting
        /// with a letter.
        #[arg(long, default_value = "gpuaas")]
        name: String,
        #[arg(long)]
        project: Option<String>,
        /// `key` or `key=value`: only the instances with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// The private key dstack connects with (the pair of a key the instances were launched
        /// with).
        #[arg(long, default_value = "~/.ssh/id_ed25519")]
        identity_file: String,
    },
    /// This month's spend, forecast and budgets (a token with the billing scope).
    Usage,
    /// Prints shell completions.
    Completions { shell: clap_complete::Shell },
}

#[derive(Debug, Subcommand)]
pub enum KeysAction {
    /// Saves the public key in FILE (e.g. `~/.ssh/id_ed25519.pub`); needs a whole-organization
    /// token with the `keys` scope.
    Add {
        #[arg(long)]
        name: String,
        file: PathBuf,
    },
    /// Deletes a saved key.
    Rm { id: String },
}

#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// Launches every member within the locality, or none; with `--wait`, follows them until
    /// all run and prints how to reach each.
    Launch(Box<ClusterLaunchArgs>),
    /// Lists the clusters (every project the token reaches, or one).
    Ls {
        #[arg(long)]
        project: Option<String>,
    },
    /// One cluster: its members, their leaf and spine, state and SSH command.
    Show { id: String },
    /// Prints the members' place in the fabric as a Slurm topology.conf, or with
    /// `--format hosts` their private addresses as /etc/hosts lines.
    Topology {
        id: String,
        #[arg(long, default_value = "slurm", value_parser = ["slurm", "hosts"])]
        format: String,
    },
    /// Releases every member (idempotent).
    Release { id: String },
}

#[derive(Debug, clap::Args)]
pub struct ClusterLaunchArgs {
    #[arg(long)]
    pub sku: String,
    /// How many members: 2 to 128.
    #[arg(long)]
    pub members: u32,
    /// `leaf`, `spine` or `fabric`.
    #[arg(long, default_value = "leaf")]
    pub locality: String,
    /// Within the locality or not at all (without it: the next wider one if it must).
    #[arg(long)]
    pub required: bool,
    /// The image (a marketplace listing's slug), e.g. `ubuntu-24.04-cuda`.
    #[arg(long)]
    pub image: String,
    /// Members are named NAME-1, NAME-2, …
    #[arg(long)]
    pub name: String,
    /// The project's id; needed when the token reaches the whole organization.
    #[arg(long)]
    pub project: Option<String>,
    #[arg(long)]
    pub region: Option<String>,
    /// A saved key's id (repeatable).
    #[arg(long = "key-id")]
    pub key_ids: Vec<String>,
    /// A public key file to install on every member (repeatable).
    #[arg(long = "ssh-key")]
    pub ssh_keys: Vec<PathBuf>,
    /// Makes a retry of this command launch once (default: a new random key).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Follow the members until all run, then print how to reach each.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits, in seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

#[derive(Debug, Subcommand)]
pub enum VolumeAction {
    /// Lists the volumes (every project the token reaches, or one).
    Ls {
        #[arg(long)]
        project: Option<String>,
    },
    /// Creates a volume; it is `available` once the storage backend has made it.
    Create {
        #[arg(long)]
        name: String,
        /// Where it lives (with `--snapshot`: the snapshot's, if left out).
        #[arg(long, default_value = "")]
        region: String,
        /// Its size (with `--snapshot`: the snapshot's, if left out).
        #[arg(long = "size-gib")]
        size_gib: Option<u32>,
        /// Made holding what this snapshot holds.
        #[arg(long)]
        snapshot: Option<String>,
        /// The project's id; needed when the token reaches the whole organization.
        #[arg(long)]
        project: Option<String>,
        /// Makes a retry of this command create one volume (default: a new UUID).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// One volume.
    Show { id: String },
    /// Grows a volume (never shrinks), attached or not.
    Grow {
        id: String,
        #[arg(long = "size-gib")]
        size_gib: u32,
    },
    /// Attaches a volume to a running instance of its project and region.
    Attach {
        id: String,
        #[arg(long)]
        instance: String,
    },
    /// Detaches a volume from its instance.
    Detach { id: String },
    /// Deletes a detached volume: it is erased, then gone.
    Rm { id: String },
}

#[derive(Debug, Subcommand)]
pub enum SnapshotAction {
    /// Lists the snapshots (every project the token reaches, or one).
    Ls {
        #[arg(long)]
        project: Option<String>,
    },
    /// Takes a snapshot of a volume that is available or attached.
    Create {
        /// The volume's id.
        volume: String,
        #[arg(long)]
        name: String,
        /// Makes a retry of this command take one snapshot (default: a new UUID).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// One snapshot.
    Show { id: String },
    /// Deletes a snapshot: it is erased, then gone.
    Rm { id: String },
}

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    #[arg(long)]
    pub sku: String,
    /// The image (a marketplace listing's slug), e.g. `ubuntu-24.04-cuda`.
    #[arg(long)]
    pub image: String,
    #[arg(long)]
    pub name: String,
    /// The project's id; needed when the token reaches the whole organization.
    #[arg(long)]
    pub project: Option<String>,
    #[arg(long)]
    pub region: Option<String>,
    #[arg(long)]
    pub version: Option<String>,
    /// A saved key's id (repeatable).
    #[arg(long = "key-id")]
    pub key_ids: Vec<String>,
    /// A public key file to install (repeatable).
    #[arg(long = "ssh-key")]
    pub ssh_keys: Vec<PathBuf>,
    /// `key=value` (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    #[arg(long)]
    pub lifetime_hours: Option<u32>,
    /// A guest TCP port to publish (repeatable).
    #[arg(long = "port")]
    pub ports: Vec<u16>,
    /// A cloud-init user-data file (`#cloud-config` or a `#!` script, at most 16 KiB), for
    /// images that accept one (`gpuctl images`).
    #[arg(long)]
    pub user_data: Option<PathBuf>,
    /// An available volume of the project to attach (repeatable; the instance goes to the
    /// volumes' region).
    #[arg(long = "volume")]
    pub volumes: Vec<String>,
    /// Makes a retry of this command launch once (default: a new random key).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Follow the instance until it runs, then print the SSH command.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits, in seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

/// How a command ended: an exit code, or `ssh` to run in its place.
#[derive(Debug, PartialEq, Eq)]
pub enum Done {
    Exit(i32),
    Exec(Vec<String>),
}

/// What `login` keeps.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    api: String,
    token: String,
}

/// Why a command stopped.
#[derive(Debug)]
enum Failure {
    Problem(StatusCode, Box<Problem>),
    Other(i32, String),
}

impl Failure {
    fn code(&self) -> i32 {
        match self {
            Failure::Problem(status, p) => match p.code.as_str() {
                "unauthenticated" | "forbidden" => exit::AUTH,
                "not_found" => exit::NOT_FOUND,
                "invalid" | "bad_request" => exit::INVALID,
                "conflict" | "volume_in_use" | "sku_unavailable" | "policy_denied"
                | "quota_exceeded" | "budget_exceeded" => exit::REFUSED,
                _ if status.as_u16() == 429 || status.is_server_error() => exit::RETRY,
                _ => exit::FAILED,
            },
            Failure::Other(code, _) => *code,
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Problem(status, p) => {
                let mut m = format!("error: {} ({})", p.detail, p.code);
                if let Some(f) = &p.field {
                    m.push_str(&format!(" [field: {f}]"));
                }
                if let Some(r) = &p.request_id {
                    m.push_str(&format!(" [request id: {r}]"));
                }
                if p.code.is_empty() {
                    m = format!("error: the server answered {status}");
                }
                m
            }
            Failure::Other(_, m) => format!("error: {m}"),
        }
    }
}

type Result<T> = std::result::Result<T, Failure>;

fn other(code: i32, m: impl Into<String>) -> Failure {
    Failure::Other(code, m.into())
}

/// The API, with a token.
struct Api {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Api {
    /// One request; the answer's text as sent, or the problem a refusal answered.
    async fn call_text(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, String)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(Duration::from_secs(90));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let res = req
            .send()
            .await
            .map_err(|e| other(exit::FAILED, format!("{}: {e}", self.base)))?;
        let status = res.status();
        let headers = res.headers().clone();
        let text = res
            .text()
            .await
            .map_err(|e| other(exit::FAILED, e.to_string()))?;
        if status.is_client_error() || status.is_server_error() {
            // A proxy's page, say: no code, so the status alone decides the exit code.
            let problem = serde_json::from_str(&text).unwrap_or(Problem {
                status: status.as_u16(),
                ..Problem::default()
            });
            return Err(Failure::Problem(status, Box::new(problem)));
        }
        Ok((status, headers, text))
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Value)> {
        let (status, headers, text) = self.call_text(method, path, body, headers).await?;
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| {
                other(
                    exit::FAILED,
                    format!("the server's answer is not JSON ({e})"),
                )
            })?
        };
        Ok((status, headers, value))
    }

    async fn get(&self, path: &str) -> Result<Value> {
        Ok(self.call(Method::GET, path, None, &[]).await?.2)
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| {
        other(
            exit::FAILED,
            format!("unexpected answer from the server ({e})"),
        )
    })
}

/// `$XDG_CONFIG_HOME/gpuctl/config.json`, or `~/.config/gpuctl/config.json`.
/// Refuses to send a token where it could be read on the way: https, or plain http only to
/// this machine.
fn check_address(base: &str) -> Result<()> {
    let url = reqwest::Url::parse(base)
        .map_err(|e| other(exit::USAGE, format!("the API address {base:?}: {e}")))?;
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(other(
            exit::USAGE,
            format!("{base}: use https; a token goes over plain http only to this machine"),
        )),
        s => Err(other(
            exit::USAGE,
            format!("{base}: an API address is https://… (not {s}:)"),
        )),
    }
}

/// The token named on this run: `--token-file`, else `GPUCTL_TOKEN`.
fn given_token(file: Option<&Path>) -> Result<Option<String>> {
    let token = match file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| other(exit::USAGE, format!("{}: {e}", f.display())))?,
        ),
        None => std::env::var("GPUCTL_TOKEN").ok(),
    };
    Ok(token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()))
}

/// A token typed at the terminal, not echoed (a line from standard input when it is not one).
fn typed_token(err: &mut dyn Write) -> Result<String> {
    let _ = writeln!(
        err,
        "Paste an API token (Account → API tokens in the portal); it is not shown:"
    );
    let _ = err.flush();
    let token = rpassword::read_password().map_err(|e| other(exit::FAILED, e.to_string()))?;
    Ok(token.trim().to_owned())
}

/// The token `login` saved, if it was saved for `base`: a token is never sent to an address
/// it was not given for (an `--api` pointing elsewhere, by mistake or by a script's design).
fn saved_token_for(saved: Option<&Saved>, base: &str) -> Result<Option<String>> {
    match saved {
        None => Ok(None),
        Some(s) if s.api.trim_end_matches('/') == base => Ok(Some(s.token.clone())),
        Some(s) => Err(other(
            exit::AUTH,
            format!(
                "the saved token is for {}, not {base}: run `gpuctl login --api {base}`, or give \
                 a token with --token-file or GPUCTL_TOKEN",
                s.api
            ),
        )),
    }
}

fn default_config() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("gpuctl").join("config.json"))
}

fn read_saved(path: &Path) -> Option<Saved> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Writes the config readable by its owner only, from the moment it exists.
fn write_saved(path: &Path, saved: &Saved) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(serde_json::to_string_pretty(saved)?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Runs one command, printing to `out` (results) and `err` (progress and errors).
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Done {
    match execute(cli, out, err).await {
        Ok(done) => done,
        Err(f) => {
            let _ = writeln!(err, "{}", f.message());
            Done::Exit(f.code())
        }
    }
}

async fn execute(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Done> {
    if let Command::Completions { shell } = cli.command {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut cmd, "gpuctl", out);
        return Ok(Done::Exit(exit::OK));
    }
    let config = cli.config.clone().or_else(default_config);
    let api = connect(&cli, config.as_deref(), err)?;
    let json_out = cli.output == Output::Json;
    match cli.command {
        Command::Completions { .. } => unreachable!("answered above"),
        Command::Login => login(&api, config, err).await?,
        Command::Offers { region, gpu_model } => {
            offers(&api, region, gpu_model, json_out, out).await?
        }
        Command::Images { project } => images(&api, project, json_out, out).await?,
        Command::Launch(a) => return launch(&api, *a, json_out, out, err).await,
        Command::Ls {
            project,
            state,
            tag,
        } => ls(&api, project, state, tag, json_out, out).await?,
        Command::Show { id } => show_instance(&api, &id, json_out, out).await?,
        Command::Ssh { id, args } => return ssh(&api, &id, args).await,
        Command::Release { id } => release(&api, &id, json_out, out).await?,
        Command::Stop { id } => stop_or_start(&api, &id, "stop", json_out, out).await?,
        Command::Start { id } => stop_or_start(&api, &id, "start", json_out, out).await?,
        Command::Usage => usage(&api, json_out, out).await?,
        Command::DstackFleet {
            name,
            project,
            tag,
            identity_file,
        } => dstack_fleet(&api, &name, project, tag, &identity_file, out).await?,
        Command::Keys { action: None } => keys(&api, json_out, out).await?,
        Command::Keys {
            action: Some(KeysAction::Add { name, file }),
        } => add_key(&api, name, &file, json_out, out).await?,
        Command::Keys {
            action: Some(KeysAction::Rm { id }),
        } => remove_key(&api, &id).await?,
        Command::Cluster { action } => return cluster(&api, action, json_out, out, err).await,
        Command::Volume { action } => volume(&api, action, json_out, out).await?,
        Command::Snapshot { action } => snapshot(&api, action, json_out, out).await?,
    }
    Ok(Done::Exit(exit::OK))
}

/// The API this run talks to: its address (`--api`, else the saved one) and its token
/// (`--token-file` or `GPUCTL_TOKEN`, typed at `login`, else the one saved for that address).
fn connect(cli: &Cli, config: Option<&Path>, err: &mut dyn Write) -> Result<Api> {
    let saved = config.and_then(read_saved);
    let base = cli
        .api
        .clone()
        .or_else(|| saved.as_ref().map(|s| s.api.clone()))
        .ok_or_else(|| {
            other(
                exit::USAGE,
                "no API address: run `gpuctl login --api https://…/api/v1` or set GPUCTL_API",
            )
        })?
        .trim_end_matches('/')
        .to_owned();
    check_address(&base)?;
    let given = given_token(cli.token_file.as_deref())?;
    let token = match (&cli.command, given) {
        (_, Some(t)) => Some(t),
        (Command::Login, None) => Some(typed_token(err)?),
        (_, None) => saved_token_for(saved.as_ref(), &base)?,
    };
    Ok(Api {
        base,
        token,
        http: reqwest::Client::new(),
    })
}

fn print_json(out: &mut dyn Write, v: &Value) {
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_default()
    );
}

/// Checks the token and saves it, with the address, for later runs.
async fn login(api: &Api, config: Option<PathBuf>, err: &mut dyn Write) -> Result<()> {
    let token = api
        .token
        .clone()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| other(exit::USAGE, "no token given"))?;
    // Any answer but 401 means the token works (a token without `read` gets 403).
    match api.get("/instances?limit=1").await {
        Ok(_) => {}
        Err(Failure::Problem(s, _)) if s == StatusCode::FORBIDDEN => {}
        Err(e) => return Err(e),
    }
    let path = config.ok_or_else(|| other(exit::FAILED, "no home directory for the config"))?;
    write_saved(
        &path,
        &Saved {
            api: api.base.clone(),
            token,
        },
    )
    .map_err(|e| other(exit::FAILED, format!("{}: {e}", path.display())))?;
    let _ = writeln!(err, "Saved to {} (readable only by you).", path.display());
    Ok(())
}

async fn offers(
    api: &Api,
    region: Option<String>,
    gpu_model: Option<String>,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let mut q = Vec::new();
    if let Some(r) = region {
        q.push(format!("region={}", encode(&r)));
    }
    if let Some(m) = gpu_model {
        q.push(format!("gpu_model={}", encode(&m)));
    }
    let v = api.get(&format!("/offers?{}", q.join("&"))).await?;
    if json_out {
        print_json(out, &v);
    } else {
        let offers: Vec<Offer> = parse(v["offers"].clone())?;
        let rows = offers
            .iter()
            .map(|o| {
                vec![
                    o.sku.clone(),
                    o.region.clone(),
                    o.gpu_model.clone(),
                    o.gpu_count.to_string(),
                    o.vcpus.to_string(),
                    format!("{} GiB", o.memory_gib),
                    format!("{}/h", o.price_per_hour),
                    o.launchable.to_string(),
                ]
            })
            .collect();
        table(
            out,
            &[
                "SKU",
                "REGION",
                "GPU",
                "GPUS",
                "VCPUS",
                "MEMORY",
                "PRICE",
                "LAUNCHABLE",
            ],
            rows,
        );
    }
    Ok(())
}

async fn images(
    api: &Api,
    project: Option<String>,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let q = project
        .map(|p| format!("?project={}", encode(&p)))
        .unwrap_or_default();
    let v = api.get(&format!("/images{q}")).await?;
    if json_out {
        print_json(out, &v);
    } else {
        let images: Vec<Image> = parse(v["images"].clone())?;
        let rows = images
            .iter()
            .map(|i| {
                vec![
                    i.slug.clone(),
                    i.version.clone(),
                    i.category.as_str().to_owned(),
                    i.fee_per_hour
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |f| format!("+{f}/h")),
                    if i.accepts_user_data { "yes" } else { "no" }.to_owned(),
                    match i.published_ports.as_slice() {
                        [] => "-".to_owned(),
                        ports => ports
                            .iter()
                            .map(u16::to_string)
                            .collect::<Vec<_>>()
                            .join(","),
                    },
                    i.skus.join(","),
                ]
            })
            .collect();
        table(
            out,
            &[
                "IMAGE",
                "VERSION",
                "KIND",
                "FEE",
                "USER-DATA",
                "PORTS",
                "SKUS",
            ],
            rows,
        );
    }
    Ok(())
}

/// Every page of the instances that match.
async fn every_instance(
    api: &Api,
    project: Option<&str>,
    state: &str,
    tag: Option<&str>,
) -> Result<Vec<Value>> {
    let mut all: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = vec![format!("state={}", encode(state)), "limit=200".to_owned()];
        if let Some(p) = project {
            q.push(format!("project={}", encode(p)));
        }
        if let Some(t) = tag {
            q.push(format!("tag={}", encode(t)));
        }
        if let Some(c) = &cursor {
            q.push(format!("cursor={}", encode(c)));
        }
        let v = api.get(&format!("/instances?{}", q.join("&"))).await?;
        all.extend(v["instances"].as_array().cloned().unwrap_or_default());
        cursor = v["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return Ok(all);
        }
    }
}

/// dstack's rule for a resource name.
fn dstack_name_ok(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The running instances that match as a dstack SSH fleet file. Every value is written as a
/// JSON string, which YAML reads as the same double-quoted scalar, so nothing the server
/// answered can change the file's structure.
async fn dstack_fleet(
    api: &Api,
    name: &str,
    project: Option<String>,
    tag: Option<String>,
    identity_file: &str,
    out: &mut dyn Write,
) -> Result<()> {
    if !dstack_name_ok(name) {
        return Err(Failure::Other(
            exit::INVALID,
            format!(
                "--name {name:?}: a dstack fleet name is 1 to 40 lowercase letters, digits and '-', starting with a letter"
            ),
        ));
    }
    let all = every_instance(api, project.as_deref(), "running", tag.as_deref()).await?;
    let list: Vec<AllocationSummary> = parse(Value::Array(all))?;
    let hosts: Vec<_> = list
        .iter()
        .filter_map(|a| a.ssh_endpoint.as_ref())
        .collect();
    if hosts.is_empty() {
        return Err(Failure::Other(
            exit::NOT_FOUND,
            "no running instance matches; nothing to put in a fleet".into(),
        ));
    }
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut y = format!(
        "# {} running instance(s) as a dstack SSH fleet: dstack apply -f THIS_FILE\ntype: fleet\nname: {}\nssh_config:\n  identity_file: {}\n  hosts:\n",
        hosts.len(),
        q(name),
        q(identity_file)
    );
    for e in hosts {
        y.push_str(&format!(
            "    - hostname: {}\n      port: {}\n      user: {}\n",
            q(&e.host),
            e.port,
            q(&e.user)
        ));
    }
    let _ = write!(out, "{y}");
    Ok(())
}

/// Every page of the instances, then one table.
async fn ls(
    api: &Api,
    project: Option<String>,
    state: String,
    tag: Option<String>,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let all = every_instance(api, project.as_deref(), &state, tag.as_deref()).await?;
    if json_out {
        print_json(out, &Value::Array(all));
    } else {
        let list: Vec<AllocationSummary> = parse(Value::Array(all))?;
        let rows = list
            .into_iter()
            .map(|a| {
                vec![
                    a.id.to_string(),
                    a.name,
                    a.projected,
                    a.sku,
                    a.region,
                    tags_label(&a.tags),
                    a.ssh.unwrap_or_default(),
                ]
            })
            .collect();
        table(
            out,
            &["ID", "NAME", "STATE", "SKU", "REGION", "TAGS", "CONNECT"],
            rows,
        );
    }
    Ok(())
}

async fn show_instance(api: &Api, id: &str, json_out: bool, out: &mut dyn Write) -> Result<()> {
    let v = api.get(&format!("/instances/{}", encode(id))).await?;
    if json_out {
        print_json(out, &v);
    } else {
        show(out, &parse(v)?);
    }
    Ok(())
}

/// The `ssh` command line for a running instance.
async fn ssh(api: &Api, id: &str, args: Vec<String>) -> Result<Done> {
    let d: AllocationDetail = parse(api.get(&format!("/instances/{}", encode(id))).await?)?;
    let ssh = d.ssh_endpoint.ok_or_else(|| {
        other(
            exit::REFUSED,
            format!(
                "{} is {}, not running: nothing to connect to yet",
                d.name, d.projected
            ),
        )
    })?;
    // From the fields, never by splitting the display string.
    Ok(Done::Exec(ssh.argv(args)))
}

async fn release(api: &Api, id: &str, json_out: bool, out: &mut dyn Write) -> Result<()> {
    let (_, _, v) = api
        .call(
            Method::DELETE,
            &format!("/instances/{}", encode(id)),
            None,
            &[],
        )
        .await?;
    if json_out {
        print_json(out, &v);
    } else {
        let d: AllocationDetail = parse(v)?;
        let _ = writeln!(out, "{} {} ({})", d.id, d.name, d.projected);
    }
    Ok(())
}

/// `POST /instances/{id}/stop` or `…/start`, then the instance's state.
async fn stop_or_start(
    api: &Api,
    id: &str,
    action: &str,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let (_, _, v) = api
        .call(
            Method::POST,
            &format!("/instances/{}/{action}", encode(id)),
            None,
            &[],
        )
        .await?;
    if json_out {
        print_json(out, &v);
    } else {
        let d: AllocationDetail = parse(v)?;
        let _ = writeln!(out, "{} {} ({})", d.id, d.name, d.projected);
        if let Some(disk) = d.stopped_disk {
            let _ = writeln!(out, "disk kept: {}", disk.label());
        }
    }
    Ok(())
}

/// `gpuctl cluster …`: each action one call (a launch with `--wait` polls until every member
/// runs); a cluster as its members' table, or the API's JSON with `-o json`.
async fn cluster(
    api: &Api,
    action: ClusterAction,
    json_out: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Done> {
    let path = |id: &str, rest: &str| format!("/clusters/{}{rest}", encode(id));
    let v = match action {
        ClusterAction::Ls { project } => {
            let q = project
                .map(|p| format!("?project={}", encode(&p)))
                .unwrap_or_default();
            let v = api.get(&format!("/clusters{q}")).await?;
            if json_out {
                print_json(out, &v);
            } else {
                let clusters: Vec<Cluster> = parse(v["clusters"].clone())?;
                let rows = clusters
                    .iter()
                    .map(|c| {
                        vec![
                            c.id.to_string(),
                            c.name.clone(),
                            c.state.clone(),
                            format!("{} × {}", c.size, c.sku),
                            c.region.clone(),
                            format!("{} {}", c.placed_within, c.fabric),
                        ]
                    })
                    .collect();
                table(
                    out,
                    &["ID", "NAME", "STATE", "MEMBERS", "REGION", "WITHIN"],
                    rows,
                );
            }
            return Ok(Done::Exit(exit::OK));
        }
        ClusterAction::Topology { id, format } => {
            // clap allows only the two formats, so the query needs no encoding.
            let rest = format!("/topology?format={format}");
            let (_, _, text) = api
                .call_text(Method::GET, &path(&id, &rest), None, &[])
                .await?;
            let _ = write!(out, "{text}");
            return Ok(Done::Exit(exit::OK));
        }
        ClusterAction::Show { id } => api.get(&path(&id, "")).await?,
        ClusterAction::Release { id } => {
            api.call(Method::DELETE, &path(&id, ""), None, &[]).await?.2
        }
        ClusterAction::Launch(a) => return cluster_launch(api, *a, json_out, out, err).await,
    };
    if json_out {
        print_json(out, &v);
    } else {
        cluster_table(out, &parse(v)?);
    }
    Ok(Done::Exit(exit::OK))
}

/// The cluster's line, then a row per member.
fn cluster_table(out: &mut dyn Write, c: &Cluster) {
    let _ = writeln!(
        out,
        "{} {}: {} × {} in {}, {} ({})",
        c.id, c.name, c.size, c.sku, c.region, c.state, c.why
    );
    if let Some(f) = &c.failure {
        let _ = writeln!(out, "failed: {f}");
    }
    let rows = c
        .members
        .iter()
        .map(|m| {
            vec![
                m.index.to_string(),
                m.name.clone(),
                m.state.clone(),
                m.spine.clone(),
                m.leaf.clone(),
                m.private_address.clone().unwrap_or_default(),
                m.ssh.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "#", "MEMBER", "STATE", "SPINE", "LEAF", "PRIVATE", "CONNECT",
        ],
        rows,
    );
}

async fn cluster_launch(
    api: &Api,
    a: ClusterLaunchArgs,
    json_out: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Done> {
    let keys = a
        .ssh_keys
        .iter()
        .map(|f| read_key(f))
        .collect::<Result<Vec<_>>>()?;
    let body = json!({
        "project": a.project, "sku": a.sku, "members": a.members, "locality": a.locality,
        "locality_required": a.required, "image": a.image, "name": a.name, "region": a.region,
        "ssh_key_ids": a.key_ids, "ssh_public_keys": keys,
    });
    let key = a
        .idempotency_key
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let (_, _, launched) = api
        .call(
            Method::POST,
            "/clusters",
            Some(&body),
            &[("idempotency-key", &key)],
        )
        .await?;
    let mut c: Cluster = parse(launched.clone())?;
    if a.wait {
        let _ = writeln!(
            err,
            "Launched {} ({}): {}; waiting for every member to run…",
            c.name, c.id, c.why
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout);
        let mut last = String::new();
        while c.state != "running" {
            if matches!(c.state.as_str(), "releasing" | "released" | "failed") {
                cluster_table(out, &c);
                return Err(other(
                    exit::INSTANCE_FAILED,
                    format!(
                        "{} is {}: {}",
                        c.name,
                        c.state,
                        c.failure.as_deref().unwrap_or("released")
                    ),
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(other(
                    exit::TIMED_OUT,
                    format!(
                        "{} is still {} after {} s; `gpuctl cluster show {}` follows it",
                        c.name, c.state, a.timeout, c.id
                    ),
                ));
            }
            let running = c.members.iter().filter(|m| m.state == "running").count();
            let now = format!("{running} of {} members running", c.size);
            if now != last {
                let _ = writeln!(err, "{now}");
                last = now;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            c = parse(api.get(&format!("/clusters/{}", c.id)).await?)?;
        }
    }
    if json_out {
        print_json(out, &serde_json::to_value(&c).unwrap_or(launched));
    } else {
        cluster_table(out, &c);
    }
    Ok(Done::Exit(exit::OK))
}

/// `gpuctl volume …`: each action one call; a volume or the list as a table, or as the API's
/// JSON with `-o json`.
async fn volume(
    api: &Api,
    action: VolumeAction,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let path = |id: &str, rest: &str| format!("/volumes/{}{rest}", encode(id));
    let v = match action {
        VolumeAction::Ls { project } => {
            let q = project
                .map(|p| format!("?project={}", encode(&p)))
                .unwrap_or_default();
            let v = api.get(&format!("/volumes{q}")).await?;
            if json_out {
                print_json(out, &v);
            } else {
                let volumes: Vec<Volume> = parse(v["volumes"].clone())?;
                let rows = volumes.iter().map(volume_row).collect();
                table(
                    out,
                    &[
                        "ID",
                        "NAME",
                        "REGION",
                        "SIZE",
                        "PER MONTH",
                        "STATE",
                        "ATTACHED TO",
                    ],
                    rows,
                );
            }
            return Ok(());
        }
        VolumeAction::Create {
            name,
            region,
            size_gib,
            snapshot,
            project,
            idempotency_key,
        } => {
            let key = idempotency_key.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let body = json!({"project": project, "name": name, "region": region,
                              "size_gib": size_gib, "snapshot": snapshot});
            api.call(
                Method::POST,
                "/volumes",
                Some(&body),
                &[("idempotency-key", &key)],
            )
            .await?
            .2
        }
        VolumeAction::Show { id } => api.get(&path(&id, "")).await?,
        VolumeAction::Grow { id, size_gib } => {
            api.call(
                Method::PATCH,
                &path(&id, ""),
                Some(&json!({"size_gib": size_gib})),
                &[],
            )
            .await?
            .2
        }
        VolumeAction::Attach { id, instance } => {
            api.call(
                Method::POST,
                &path(&id, "/attach"),
                Some(&json!({"instance": instance})),
                &[],
            )
            .await?
            .2
        }
        VolumeAction::Detach { id } => {
            api.call(Method::POST, &path(&id, "/detach"), None, &[])
                .await?
                .2
        }
        VolumeAction::Rm { id } => {
            api.call(Method::DELETE, &path(&id, ""), None, &[]).await?;
            let _ = writeln!(out, "{id} deleting");
            return Ok(());
        }
    };
    if json_out {
        print_json(out, &v);
    } else {
        let volume: Volume = parse(v)?;
        table(
            out,
            &[
                "ID",
                "NAME",
                "REGION",
                "SIZE",
                "PER MONTH",
                "STATE",
                "ATTACHED TO",
            ],
            vec![volume_row(&volume)],
        );
        if let Some(id) = volume.source_snapshot {
            let name = volume.source_snapshot_name.unwrap_or_default();
            let _ = writeln!(out, "made from snapshot {name} ({id})");
        }
    }
    Ok(())
}

async fn snapshot(
    api: &Api,
    action: SnapshotAction,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let path = |id: &str| format!("/snapshots/{}", encode(id));
    let header = [
        "ID",
        "NAME",
        "VOLUME",
        "REGION",
        "SIZE",
        "PER MONTH",
        "STATE",
    ];
    let v = match action {
        SnapshotAction::Ls { project } => {
            let q = project
                .map(|p| format!("?project={}", encode(&p)))
                .unwrap_or_default();
            let v = api.get(&format!("/snapshots{q}")).await?;
            if json_out {
                print_json(out, &v);
            } else {
                let snapshots: Vec<Snapshot> = parse(v["snapshots"].clone())?;
                table(out, &header, snapshots.iter().map(snapshot_row).collect());
            }
            return Ok(());
        }
        SnapshotAction::Create {
            volume,
            name,
            idempotency_key,
        } => {
            let key = idempotency_key.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            api.call(
                Method::POST,
                &format!("/volumes/{}/snapshots", encode(&volume)),
                Some(&json!({"name": name})),
                &[("idempotency-key", &key)],
            )
            .await?
            .2
        }
        SnapshotAction::Show { id } => api.get(&path(&id)).await?,
        SnapshotAction::Rm { id } => {
            api.call(Method::DELETE, &path(&id), None, &[]).await?;
            let _ = writeln!(out, "{id} deleting");
            return Ok(());
        }
    };
    if json_out {
        print_json(out, &v);
    } else {
        let s: Snapshot = parse(v)?;
        table(out, &header, vec![snapshot_row(&s)]);
    }
    Ok(())
}

fn snapshot_row(s: &Snapshot) -> Vec<String> {
    vec![
        s.id.to_string(),
        s.name.clone(),
        s.volume_name.clone(),
        s.region.clone(),
        format!("{} GiB", s.size_gib),
        s.monthly_cost.to_string(),
        s.state.as_str().to_owned(),
    ]
}

fn volume_row(v: &Volume) -> Vec<String> {
    vec![
        v.id.to_string(),
        v.name.clone(),
        v.region.clone(),
        format!("{} GiB", v.size_gib),
        v.monthly_cost
            .as_ref()
            .map_or_else(|| "-".into(), |m| m.to_string()),
        v.state.as_str().to_owned(),
        v.attached_name
            .clone()
            .or_else(|| v.attached_to.map(|a| a.to_string()))
            .unwrap_or_else(|| "-".into()),
    ]
}

/// This month so far: totals, budgets, and the spend per project and SKU.
async fn usage(api: &Api, json_out: bool, out: &mut dyn Write) -> Result<()> {
    let v = api.get("/usage").await?;
    if json_out {
        print_json(out, &v);
    } else {
        let o: Overview = parse(v)?;
        let _ = writeln!(out, "month         {}", o.month);
        let _ = writeln!(out, "to date       {}", o.month_to_date);
        let _ = writeln!(out, "forecast      {}", o.forecast);
        let _ = writeln!(out, "running       {}/h", o.running_per_hour);
        let _ = writeln!(out, "credit        {}", o.credit_balance);
        for b in &o.budgets {
            let _ = writeln!(
                out,
                "budget        {}: {} of {} ({}%, {})",
                b.scope, b.spent, b.limit, b.percent, b.alert
            );
        }
        let mut by: std::collections::BTreeMap<(String, String), i64> = Default::default();
        for p in &o.daily {
            *by.entry((p.project.clone(), p.sku.clone())).or_default() += p.amount_minor;
        }
        let rows = by
            .into_iter()
            .map(|((project, sku), minor)| {
                vec![
                    project,
                    sku,
                    portal_types::Money {
                        amount_minor: minor,
                        currency: o.currency.as_str().into(),
                    }
                    .to_string(),
                ]
            })
            .collect();
        let _ = writeln!(out);
        table(out, &["PROJECT", "SKU", "THIS MONTH"], rows);
    }
    Ok(())
}

async fn keys(api: &Api, json_out: bool, out: &mut dyn Write) -> Result<()> {
    let v = api.get("/ssh-keys").await?;
    if json_out {
        print_json(out, &v);
    } else {
        let keys: Vec<SshKey> = parse(v["ssh_keys"].clone())?;
        let rows = keys
            .into_iter()
            .map(|k| vec![k.id.to_string(), k.name, k.kind, k.fingerprint])
            .collect();
        table(out, &["ID", "NAME", "KIND", "FINGERPRINT"], rows);
    }
    Ok(())
}

async fn add_key(
    api: &Api,
    name: String,
    file: &Path,
    json_out: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let public_key = read_key(file)?;
    let (_, _, v) = api
        .call(
            Method::POST,
            "/ssh-keys",
            Some(&json!({"name": name, "public_key": public_key})),
            &[],
        )
        .await?;
    if json_out {
        print_json(out, &v);
    } else {
        let k: SshKey = parse(v)?;
        let _ = writeln!(out, "{} {} {}", k.id, k.name, k.fingerprint);
    }
    Ok(())
}

async fn remove_key(api: &Api, id: &str) -> Result<()> {
    api.call(
        Method::DELETE,
        &format!("/ssh-keys/{}", encode(id)),
        None,
        &[],
    )
    .await?;
    Ok(())
}

/// A public key file's one line, bounded.
fn read_key(file: &Path) -> Result<String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| other(exit::INVALID, format!("{}: {e}", file.display())))?;
    if text.len() > 16 * 1024 {
        return Err(other(
            exit::INVALID,
            format!("{}: too long for a public key", file.display()),
        ));
    }
    Ok(text.trim().to_owned())
}

async fn launch(
    api: &Api,
    a: LaunchArgs,
    json_out: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Done> {
    let mut tags = serde_json::Map::new();
    for t in &a.tags {
        let (k, v) = t.split_once('=').unwrap_or((t.as_str(), ""));
        tags.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    let keys = a
        .ssh_keys
        .iter()
        .map(|f| read_key(f))
        .collect::<Result<Vec<_>>>()?;
    let user_data = match &a.user_data {
        None => None,
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| other(exit::INVALID, format!("{}: {e}", file.display())))?;
            if text.len() > 16 * 1024 {
                return Err(other(
                    exit::INVALID,
                    format!(
                        "{}: {} bytes; user data is at most 16384",
                        file.display(),
                        text.len()
                    ),
                ));
            }
            Some(text)
        }
    };
    let body = json!({
        "project": a.project, "sku": a.sku, "image": a.image, "name": a.name,
        "region": a.region, "version": a.version, "ssh_key_ids": a.key_ids,
        "ssh_public_keys": keys, "tags": tags, "lifetime_hours": a.lifetime_hours,
        "published_ports": a.ports, "user_data": user_data, "volumes": a.volumes,
    });
    let key = a
        .idempotency_key
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let (_, headers, launched) = api
        .call(
            Method::POST,
            "/instances",
            Some(&body),
            &[("idempotency-key", &key)],
        )
        .await?;
    let id = launched["id"].as_str().unwrap_or_default().to_owned();
    let replayed = headers.contains_key("idempotent-replayed");
    if !a.wait {
        if json_out {
            let _ = writeln!(out, "{launched}");
        } else {
            let _ = writeln!(
                out,
                "{id} {}{}",
                a.name,
                if replayed {
                    " (launched before, same key)"
                } else {
                    ""
                }
            );
        }
        return Ok(Done::Exit(exit::OK));
    }
    let _ = writeln!(err, "Launched {} ({id}); waiting for it to run…", a.name);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout);
    let path = format!("/instances/{id}");
    let (mut etag, mut seen_phases, mut last_state) = (String::new(), 0usize, String::new());
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(other(
                exit::TIMED_OUT,
                format!(
                    "{} is still {last_state} after {} s; `gpuctl show {id}` follows it",
                    a.name, a.timeout
                ),
            ));
        }
        let wait = left.as_secs().clamp(1, 30);
        let (status, headers, v) = if etag.is_empty() {
            api.call(Method::GET, &path, None, &[]).await?
        } else {
            api.call(
                Method::GET,
                &format!("{path}?wait={wait}"),
                None,
                &[("if-none-match", &etag)],
            )
            .await?
        };
        if status == StatusCode::NOT_MODIFIED {
            continue;
        }
        etag = headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let d: AllocationDetail = parse(v.clone())?;
        for p in d.phases.iter().skip(seen_phases) {
            let _ = writeln!(
                err,
                "  {} {}: {} ({} ms)",
                p.task, p.phase, p.status, p.elapsed_ms
            );
        }
        seen_phases = d.phases.len();
        if d.projected != last_state {
            let _ = writeln!(err, "  state: {}", d.projected);
            last_state = d.projected.clone();
        }
        match d.projected.as_str() {
            "running" if d.ssh.is_some() => {
                if json_out {
                    let _ = writeln!(out, "{v}");
                } else {
                    let _ = writeln!(out, "{}", d.ssh.unwrap_or_default());
                }
                return Ok(Done::Exit(exit::OK));
            }
            "failed" | "failing" | "released" | "releasing" => {
                return Err(other(
                    exit::INSTANCE_FAILED,
                    format!(
                        "{} did not start: {}",
                        d.name,
                        d.failure.unwrap_or_else(|| d.projected.clone())
                    ),
                ));
            }
            _ => {}
        }
    }
}

fn show(out: &mut dyn Write, d: &AllocationDetail) {
    let mut lines = vec![
        ("id", d.id.to_string()),
        ("name", d.name.clone()),
        ("state", d.projected.clone()),
        ("sku", format!("{} ({} GPUs)", d.sku, d.gpu_count)),
        ("image", d.image.clone()),
        ("where", format!("{} / {}", d.region, d.node)),
        ("price", d.price_label()),
        ("tags", tags_label(&d.tags)),
        ("connect", d.ssh.clone().unwrap_or_else(|| "-".into())),
    ];
    for p in &d.published {
        lines.push(("port", format!("{} at {}", p.guest_port, p.address)));
    }
    if let Some(disk) = &d.stopped_disk {
        lines.push(("disk", format!("kept: {}", disk.label())));
    }
    if let Some(f) = &d.failure {
        lines.push(("failure", f.clone()));
    }
    for n in &d.gpu_health {
        lines.push(("gpu", n.sentence()));
    }
    for p in &d.phases {
        lines.push((
            "phase",
            format!("{} {}: {} ({} ms)", p.task, p.phase, p.status, p.elapsed_ms),
        ));
    }
    for (k, v) in lines {
        let _ = writeln!(out, "{k:<8} {v}");
    }
}

/// Columns padded to their widest cell.
fn table(out: &mut dyn Write, header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in &rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

/// Bytes a query value or path segment may not carry as they are: all but RFC 3986's
/// unreserved ones.
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a query or path value (every byte but RFC 3986's unreserved ones).
pub fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_goes_over_https_or_to_this_machine_only() {
        for ok in [
            "https://gpu.example.com/api/v1",
            "http://127.0.0.1:3000/api/v1",
            "http://127.9.9.9/api/v1",
            "http://[::1]:3000/api/v1",
            "http://localhost:3000/api/v1",
        ] {
            assert!(check_address(ok).is_ok(), "{ok}");
        }
        for refused in [
            "http://gpu.example.com/api/v1",
            "http://10.0.0.5/api/v1",
            "ftp://gpu.example.com/",
            "gpu.example.com",
        ] {
            let e = check_address(refused).unwrap_err();
            assert_eq!(e.code(), exit::USAGE, "{refused}");
        }
    }

    #[test]
    fn a_saved_token_is_sent_only_to_its_own_address() {
        let saved = Saved {
            api: "https://gpu.example.com/api/v1/".into(),
            token: "gpk_x".into(),
        };
        assert_eq!(
            saved_token_for(Some(&saved), "https://gpu.example.com/api/v1").unwrap(),
            Some("gpk_x".into())
        );
        let e = saved_token_for(Some(&saved), "https://evil.example/api/v1").unwrap_err();
        assert_eq!(e.code(), exit::AUTH);
        assert!(
            e.message()
                .contains("the saved token is for https://gpu.example.com")
        );
        assert_eq!(saved_token_for(None, "https://x.example").unwrap(), None);
    }

    #[test]
    fn problems_map_to_exit_codes_scripts_can_test() {
        let p = |status: u16, code: &str| {
            Failure::Problem(
                StatusCode::from_u16(status).unwrap(),
                Box::new(Problem {
                    detail: "d".into(),
                    code: code.into(),
                    ..Problem::default()
                }),
            )
            .code()
        };
        assert_eq!(p(401, "unauthenticated"), exit::AUTH);
        assert_eq!(p(403, "forbidden"), exit::AUTH);
        assert_eq!(p(403, "quota_exceeded"), exit::REFUSED);
        assert_eq!(p(409, "sku_unavailable"), exit::REFUSED);
        assert_eq!(p(409, "volume_in_use"), exit::REFUSED);
        assert_eq!(p(400, "invalid"), exit::INVALID);
        assert_eq!(p(404, "not_found"), exit::NOT_FOUND);
        assert_eq!(p(429, "rate_limited"), exit::RETRY);
        assert_eq!(p(500, "internal"), exit::RETRY);
    }

    #[test]
    fn values_are_encoded_for_urls() {
        assert_eq!(encode("team=vision"), "team%3Dvision");
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(encode("eu-west-1"), "eu-west-1");
    }
}
