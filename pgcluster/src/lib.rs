//! A private PostgreSQL cluster, started from the system's own server binaries.
//!
//! `cargo xtask dev` keeps one under `.data/postgres` so data survives restarts; tests make
//! throwaway ones. Only `std` is used, so `xtask` stays quick to build.
//!
//! PostgreSQL refuses to run as root. When this process is root, every server binary runs
//! through `runuser -u postgres --`, from a directory owned by `postgres`.

use std::fmt;
use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The role every cluster is initialised with (trust auth on loopback only).
pub const SUPERUSER: &str = "portal";

#[derive(Debug)]
pub enum Error {
    /// No `initdb`/`pg_ctl` was found; the message says where we looked.
    BinariesMissing(String),
    Io(io::Error),
    /// A PostgreSQL tool exited non-zero; its output is included.
    Tool {
        tool: String,
        output: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BinariesMissing(m) => write!(f, "PostgreSQL server binaries not found: {m}"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Tool { tool, output } => write!(f, "{tool} failed:\n{output}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the cluster is tuned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Normal settings: what `cargo xtask dev` uses, so demo data survives a crash.
    Durable,
    /// `fsync=off` and friends: test clusters only. `CREATE DATABASE` gets ~10x faster.
    Throwaway,
}

/// How [`PgCluster::stop_with`] shuts the server down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopMode {
    /// Disconnects clients, checkpoints, exits.
    Fast,
    /// Exits at once, as after a crash: the next start replays the WAL.
    Immediate,
}

#[derive(Debug)]
pub struct PgCluster {
    bin_dir: PathBuf,
    /// Holds `data/`, `socket/`, `port` and `server.log`; owned by `postgres` when we are root.
    root: PathBuf,
    port: u16,
    durability: Durability,
    as_postgres: bool,
}

impl PgCluster {
    /// Prepares (but does not start) a cluster under `root`, running `initdb` if `root/data`
    /// holds no cluster yet. A port is remembered in `root/port` so URLs stay stable across
    /// restarts; if that port is taken by something else, a fresh one is chosen.
    pub fn init(root: impl Into<PathBuf>, durability: Durability) -> Result<Self> {
        let root = root.into();
        fs::create_dir_all(root.join("socket"))?;
        let root = root.canonicalize()?;
        let bin_dir = find_bin_dir()?;
        let as_postgres = running_as_root();
        if as_postgres {
            chown_postgres(&root)?;
        }
        let data = root.join("data");
        let mut cluster = PgCluster {
            bin_dir,
            root: root.clone(),
            port: 0,
            durability,
            as_postgres,
        };
        if !data.join("PG_VERSION").exists() {
            cluster.run(
                "initdb",
                &[
                    "-D",
                    path_str(&data)?,
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
            )?;
        }
        cluster.port = match fs::read_to_string(root.join("port"))
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok())
        {
            Some(p) if cluster.is_running() || port_is_free(p) => p,
            _ => free_port()?,
        };
        fs::write(root.join("port"), cluster.port.to_string())?;
        Ok(cluster)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `postgres://portal@127.0.0.1:PORT/{database}`
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// The same database through the cluster's Unix socket (`socket/.s.PGSQL.PORT`), for a
    /// client on this machine: no TCP stack on either side of each round trip. The socket's
    /// directory goes in the `host` parameter, percent-encoded.
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@localhost/{database}?host={}&port={}",
            percent_encoded(&self.root.join("socket")),
            self.port
        )
    }

    /// Whether the postmaster of this data directory is up.
    pub fn is_running(&self) -> bool {
        let data = self.root.join("data");
        self.command("pg_ctl")
            .args(["status", "-D"])
            .arg(&data)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// Starts the server and waits until it accepts connections. Idempotent.
    pub fn start(&self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        let socket = self.root.join("socket");
        let mut opts = format!("-h 127.0.0.1 -p {} -k {}", self.port, path_str(&socket)?);
        if self.durability == Durability::Throwaway {
            opts.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        // For profiling a benchmark (docs/PERFORMANCE.md): e.g. `-c
        // shared_preload_libraries=pg_stat_statements`.
        if let Ok(extra) = std::env::var("PGCLUSTER_OPTIONS") {
            opts.push(' ');
            opts.push_str(&extra);
        }
        let data = self.root.join("data");
        let log = self.root.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-w",
                "-t",
                "60",
                "start",
                "-D",
                path_str(&data)?,
                "-l",
                path_str(&log)?,
                "-o",
                &opts,
            ],
        )?;
        Ok(())
    }

    /// Fast shutdown; waits until the server is gone. Idempotent.
    pub fn stop(&self) -> Result<()> {
        self.stop_with(StopMode::Fast)
    }

    /// Shuts down the way `mode` says; waits until the server is gone. Idempotent.
    pub fn stop_with(&self, mode: StopMode) -> Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        let data = self.root.join("data");
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        self.run(
            "pg_ctl",
            &["-w", "-t", "60", "stop", "-m", mode, "-D", path_str(&data)?],
        )?;
        Ok(())
    }

    /// `psql` against `database` on this cluster, as the superuser (not started).
    pub fn psql(&self, database: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("psql"));
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.url(database));
        cmd
    }

    /// Creates `name` unless it exists.
    pub fn ensure_database(&self, name: &str) -> Result<()> {
        let port = self.port.to_string();
        let out = self
            .command("createdb")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", SUPERUSER, name])
            .output()?;
        if out.status.success() || String::from_utf8_lossy(&out.stderr).contains("already exists") {
            Ok(())
        } else {
            Err(tool_error("createdb", &out))
        }
    }

    /// Drops `name` if it exists (forcing other sessions off).
    pub fn drop_database(&self, name: &str) -> Result<()> {
        let port = self.port.to_string();
        self.run(
            "dropdb",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                SUPERUSER,
                "--if-exists",
                "--force",
                name,
            ],
        )
        .map(|_| ())
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin_dir.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        // postgres must be able to stat its working directory.
        cmd.current_dir(&self.root);
        cmd
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<Output> {
        let out = self.command(tool).args(args).output()?;
        if out.status.success() {
            Ok(out)
        } else {
            let mut err = tool_error(tool, &out);
            if let Error::Tool { output, .. } = &mut err
                && let Ok(log) = fs::read_to_string(self.root.join("server.log"))
            {
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                output.push_str("\nserver.log (last lines):\n");
                for line in tail.into_iter().rev() {
                    output.push_str(line);
                    output.push('\n');
                }
            }
            Err(err)
        }
    }
}

/// A cluster that is stopped when dropped: for tests and `cargo xtask test`.
pub struct StopOnDrop(pub PgCluster);

impl std::ops::Deref for StopOnDrop {
    type Target = PgCluster;
    fn deref(&self) -> &PgCluster {
        &self.0
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.0.stop() {
            eprintln!("pgcluster: could not stop {}: {e}", self.0.root.display());
        }
    }
}

fn tool_error(tool: &str, out: &Output) -> Error {
    Error::Tool {
        tool: tool.to_string(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| {
        Error::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path is not UTF-8: {}", p.display()),
        ))
    })
}

/// The newest `/usr/lib/postgresql/N/bin`, or `pg_config --bindir`, or the directory of
/// `initdb` on PATH.
pub fn find_bin_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
            return Ok(dir);
        }
    }
    Err(Error::BinariesMissing(
        "looked in /usr/lib/postgresql/*/bin, `pg_config --bindir` and PATH; \
         install them with `apt-get install postgresql` or set PG_BINDIR"
            .into(),
    ))
}

pub fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Hands `dir` (recursively) to the `postgres` user, and lets it traverse every ancestor.
fn chown_postgres(dir: &Path) -> Result<()> {
    let out = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(dir)
        .output()?;
    if !out.status.success() {
        return Err(tool_error("chown", &out));
    }
    // postgres needs +x on each parent to reach its data directory.
    let mut p = dir.parent();
    while let Some(parent) = p {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = fs::metadata(parent) {
            let mode = meta.permissions().mode();
            if mode & 0o001 == 0 {
                let mut perms = meta.permissions();
                perms.set_mode(mode | 0o001);
                fs::set_permissions(parent, perms)?;
            }
        }
        p = parent.parent();
    }
    Ok(())
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Bytes a query value may not carry as they are: all but RFC 3986's unreserved ones and `/`.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path as a URL's query value: unreserved bytes and `/` as they are, the rest as `%XX`.
fn percent_encoded(path: &Path) -> String {
    percent_encoding::percent_encode(path.as_os_str().as_encoded_bytes(), QUERY_VALUE).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_directory_is_a_query_value() {
        assert_eq!(
            percent_encoded(Path::new("/tmp/portal-pg_1.x/socket")),
            "/tmp/portal-pg_1.x/socket"
        );
        assert_eq!(
            percent_encoded(Path::new("/tmp/a b&c=d?/é")),
            "/tmp/a%20b%26c%3Dd%3F/%C3%A9"
        );
    }
}
