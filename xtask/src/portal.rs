//! Starting the portal's server binary the way `dev` and `test` both need it: migrate, give
//! the platform admin a break-glass password, then serve with the demo data loaded.

use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::proc::show;
use crate::{Result, root};

pub const ADMIN_EMAIL: &str = "admin@platform.example";

pub struct Launch {
    pub binary: PathBuf,
    pub database_url: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    pub site_root: PathBuf,
    /// `dev` or `prod`
    pub site_env: &'static str,
    pub admin_password: String,
    /// The demo identity provider's issuer and client secret, for the demo tenants.
    pub demo_idp: Option<(String, String)>,
    /// The local Stripe test server: its API base URL and the webhook signing secret.
    pub stripe: Option<(String, String)>,
    /// The DNS resolver (`ip:port`) for email-domain proofs; the system's when None.
    pub dns_resolver: Option<String>,
    /// `PORTAL_SECRET_KEYS`: the keys that seal stored secrets.
    pub secret_keys: String,
    /// `PORTAL_METRICS_ADDR`: where `/metrics` listens (`off` for nowhere).
    pub metrics_addr: String,
    /// `PORTAL_METRICS_TOKEN`, when scrapers off loopback are to be let in.
    pub metrics_token: Option<String>,
    /// Where server output goes; the terminal when None.
    pub log: Option<File>,
    /// Volumes as qcow2 files in this directory, served over NBD on this loopback address by
    /// the server's storage worker (`PORTAL_STORAGE=qemu-nbd`); none: no storage worker.
    pub volumes: Option<(PathBuf, String)>,
}

impl Launch {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.binary);
        c.env("DATABASE_URL", &self.database_url)
            .env("LEPTOS_SITE_ADDR", &self.addr)
            .env("LEPTOS_SITE_ROOT", &self.site_root)
            .env("LEPTOS_ENV", self.site_env)
            .env("PORTAL_PUBLIC_URL", format!("http://{}", self.addr))
            // Plain HTTP on loopback: a `Secure` cookie would be the server's default.
            .env("PORTAL_COOKIE_SECURE", "false")
            // The demo identity provider is plain HTTP on loopback too.
            .env("PORTAL_DEV_LOOPBACK_IDP", "true")
            .env("PORTAL_METRICS_ADDR", &self.metrics_addr)
            // No load balancer to drain on one machine: stop at once on Ctrl-C.
            .env("PORTAL_SHUTDOWN_DRAIN_SECS", "0")
            // Findings show up within seconds in the demo and the browser tests.
            .env("PORTAL_RECONCILE_EVERY_SECS", "5")
            .current_dir(root());
        if let Some(token) = &self.metrics_token {
            c.env("PORTAL_METRICS_TOKEN", token);
        }
        if let Some((dir, listen)) = &self.volumes {
            c.env("PORTAL_STORAGE", "qemu-nbd")
                .env("PORTAL_VOLUME_DIR", dir)
                .env("PORTAL_VOLUME_LISTEN", listen);
        }
        c
    }

    /// The port `/metrics` listens on, when it listens.
    pub fn metrics_port(&self) -> Option<u16> {
        self.metrics_addr.rsplit_once(':')?.1.parse().ok()
    }

    /// Runs a server subcommand and returns its standard output.
    pub fn output(&self, args: &[&str]) -> Result<String> {
        crate::proc::checked_output(self.command().args(args))
    }

    fn run_quiet(&self, args: &[&str], stdin: Option<&str>) -> Result {
        let mut cmd = self.command();
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let shown = show(&cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting `{shown}`: {e}"))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin is piped");
            writeln!(pipe, "{input}").map_err(|e| e.to_string())?;
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`{shown}` failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Migrates, sets the admin's password, then starts serving (returns at once).
    pub fn start(&self) -> Result<Child> {
        self.run_quiet(&["migrate"], None)?;
        self.run_quiet(
            &[
                "set-admin-password",
                "--email",
                ADMIN_EMAIL,
                "--name",
                "Platform admin",
            ],
            Some(&self.admin_password),
        )?;
        let mut cmd = self.serve_command(&["serve", "--seed-demo"])?;
        if let Some((issuer, secret)) = &self.demo_idp {
            cmd.env("PORTAL_DEMO_IDP_ISSUER", issuer)
                .env("PORTAL_DEMO_IDP_CLIENT_SECRET", secret);
        }
        cmd.spawn().map_err(|e| format!("starting the server: {e}"))
    }

    /// The same portal as another replica on `addr`: the same database, secrets, Stripe and
    /// identity provider; no metrics listener of its own (the first one's has the shared
    /// gauges).
    pub fn replica(&self, addr: String, log: Option<File>) -> Launch {
        Launch {
            addr,
            metrics_addr: "off".into(),
            metrics_token: None,
            log,
            binary: self.binary.clone(),
            database_url: self.database_url.clone(),
            site_root: self.site_root.clone(),
            site_env: self.site_env,
            admin_password: self.admin_password.clone(),
            demo_idp: self.demo_idp.clone(),
            stripe: self.stripe.clone(),
            dns_resolver: self.dns_resolver.clone(),
            secret_keys: self.secret_keys.clone(),
            // One storage worker drives the storage node's daemon.
            volumes: None,
        }
    }

    /// Another replica on the same database (already migrated and seeded by [`Launch::start`]):
    /// serves at once.
    pub fn start_replica(&self) -> Result<Child> {
        self.serve_command(&["serve"])?
            .spawn()
            .map_err(|e| format!("starting the replica on {}: {e}", self.addr))
    }

    /// `server <args>` with the secrets, Stripe, DNS and log settings.
    fn serve_command(&self, args: &[&str]) -> Result<Command> {
        let mut cmd = self.command();
        cmd.args(args).env("PORTAL_SECRET_KEYS", &self.secret_keys);
        if let Some((api_base, webhook_secret)) = &self.stripe {
            cmd.env("STRIPE_API_BASE", api_base)
                .env("STRIPE_SECRET_KEY", "sk_test_local_stripe_test_server")
                .env("STRIPE_WEBHOOK_SECRET", webhook_secret);
        }
        if let Some(resolver) = &self.dns_resolver {
            cmd.env("PORTAL_DNS_RESOLVER", resolver);
        }
        if let Some(log) = &self.log {
            let out = log.try_clone().map_err(|e| e.to_string())?;
            let err = log.try_clone().map_err(|e| e.to_string())?;
            cmd.stdout(out).stderr(err);
        }
        Ok(cmd)
    }
}

/// Starts `demo-idp/provider.mjs` (npm `oidc-provider`) on `127.0.0.1:{port}` and waits until
/// it serves its discovery document. Returns the process and the issuer URL.
pub fn start_demo_idp(
    port: u16,
    portal_url: &str,
    client_secret: &str,
    log: Option<File>,
) -> Result<(Child, String)> {
    let mut cmd = Command::new("node");
    cmd.arg(root().join("demo-idp/provider.mjs"))
        .env("IDP_PORT", port.to_string())
        .env("PORTAL_URL", portal_url)
        .env("IDP_CLIENT_SECRET", client_secret)
        .current_dir(root());
    if let Some(log) = log {
        let err = log.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(log).stderr(err);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting the demo identity provider: {e}"))?;
    let child = wait_until_serving(
        child,
        port,
        "the demo identity provider",
        |status| status == Some(200),
        "/.well-known/openid-configuration",
    )?;
    Ok((child, format!("http://127.0.0.1:{port}")))
}

/// Waits (up to 30 s) until `path` on `port` answers as `ready` says; the child is killed if
/// it never does, and an early exit is reported as such.
fn wait_until_serving(
    mut child: Child,
    port: u16,
    what: &str,
    ready: impl Fn(Option<u16>) -> bool,
    path: &str,
) -> Result<Child> {
    let start = std::time::Instant::now();
    while !ready(crate::proc::http_status(port, path)) {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited ({status})"));
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            return Err(format!("{what} did not start on port {port}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(child)
}

/// Starts the local Stripe test server (`stripe-test-server`, built from this workspace) on
/// `127.0.0.1:{port}`, sending webhooks to the portal, paying invoices `autopay_ms` after
/// they are finalised and declining Globex's card (the demo's failed payment). Its objects
/// are built from Stripe's fixtures, vendored in `stripe-test-server/fixtures/` and compiled
/// into it (`$STRIPE_FIXTURES` overrides them). Returns the process and the API base URL.
pub fn start_stripe(
    binary: &std::path::Path,
    port: u16,
    portal_url: &str,
    webhook_secret: &str,
    log: Option<File>,
) -> Result<(Child, String)> {
    let mut cmd = Command::new(binary);
    cmd.args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--autopay-ms",
        "3000",
        "--decline-tenant",
        "globex",
    ])
    .args(["--webhook-url", &format!("{portal_url}/stripe/webhook")])
    .env("STRIPE_WEBHOOK_SECRET", webhook_secret)
    .current_dir(root());
    if let Some(log) = log {
        let err = log.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(log).stderr(err);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting the Stripe test server: {e}"))?;
    // Any answer (a 404 for a customer that doesn't exist) means it is serving.
    let child = wait_until_serving(
        child,
        port,
        "the Stripe test server",
        |s| s.is_some(),
        "/v1/customers/cus_probe",
    )?;
    Ok((child, format!("http://127.0.0.1:{port}/")))
}

/// 24 characters from the kernel's random source; no default password exists anywhere.
pub fn random_password() -> Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut bytes = [0u8; 24];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    Ok(bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect())
}

/// A keyring for `PORTAL_SECRET_KEYS` with one key, `{id}`, of 32 random bytes.
pub fn random_keyring(id: &str) -> Result<String> {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bytes = [0u8; 33]; // 33 bytes are 44 characters; the last one is dropped as padding
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes[..32]))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
        for shift in [18, 12, 6, 0] {
            out.push(B64[((n >> shift) & 63) as usize] as char);
        }
    }
    out.truncate(43);
    Ok(format!("{id}:{out}="))
}

/// A dev secret kept in `.data/{name}` (mode 0600), so it is the same on every start; made
/// on first use.
pub fn dev_secret(name: &str) -> Result<String> {
    dev_value(name, random_password)
}

/// Like [`dev_secret`], made by `make`.
pub fn dev_value(name: &str, make: impl FnOnce() -> Result<String>) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = root().join(".data").join(name);
    if let Ok(p) = std::fs::read_to_string(&path)
        && p.trim().len() >= 12
    {
        return Ok(p.trim().to_string());
    }
    let password = make()?;
    std::fs::create_dir_all(root().join(".data")).map_err(|e| e.to_string())?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    writeln!(f, "{password}").map_err(|e| e.to_string())?;
    Ok(password)
}

/// Stops the qemu-storage-daemon a server's storage worker started for the volumes under
/// `dir` (it outlives its server by design, as guests keep their disks through a restart),
/// and removes what it kept there.
pub fn stop_volume_daemon(dir: &std::path::Path) {
    if let Ok(pid) = std::fs::read_to_string(dir.join("qemu-storage-daemon.pid")) {
        let _ = Command::new("kill").arg(pid.trim()).status();
    }
    let _ = std::fs::remove_dir_all(dir);
}
