//! One typed configuration, from flags and environment (`.env.example` documents each).
//! Secrets are wrapped so that `Debug` (and so every log line) shows them redacted.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// A Postgres URL whose password never reaches a log.
#[derive(Clone)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        let url = &self.0;
        let Some(scheme_end) = url.find("://") else {
            return "***".into();
        };
        let rest = &url[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let redacted_query = redact_query(&rest[authority_end..]);
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                let user = userinfo.split(':').next().unwrap_or("");
                let masked = if userinfo.contains(':') {
                    format!("{user}:***")
                } else {
                    user.to_string()
                };
                format!(
                    "{}://{masked}@{}{redacted_query}",
                    &url[..scheme_end],
                    &authority[at + 1..]
                )
            }
            None => format!("{}://{authority}{redacted_query}", &url[..scheme_end]),
        }
    }
}

/// `?password=…` is also a way to pass a secret in a libpq URL.
fn redact_query(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(Self(s.to_string()))
        } else {
            Err("expected a postgres:// or postgresql:// URL".into())
        }
    }
}

/// A secret setting: `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"[redacted]\"")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_string()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SiteEnv {
    Dev,
    Prod,
}

#[derive(Clone, Debug, Args)]
pub struct Config {
    /// PostgreSQL connection URL.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: DatabaseUrl,

    /// Most database connections the server opens: half (rounded up) for transactions and held
    /// connections, as many for single statements (`control_plane::pool`).
    #[arg(long, env = "PORTAL_DB_MAX_CONNECTIONS", default_value_t = 10)]
    pub db_max_connections: u32,

    /// Seconds a request waits for a pooled connection before failing.
    #[arg(long, env = "PORTAL_DB_ACQUIRE_TIMEOUT_SECS", default_value_t = 5)]
    pub db_acquire_timeout_secs: u64,

    /// Address the portal listens on.
    #[arg(long, env = "LEPTOS_SITE_ADDR", default_value = "127.0.0.1:3000")]
    pub site_addr: SocketAddr,

    /// Directory holding the built site (`pkg/`, CSS, static files).
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,

    /// Sub-directory of the site root holding the wasm and JS bundle.
    #[arg(long, env = "LEPTOS_SITE_PKG_DIR", default_value = "pkg")]
    pub site_pkg_dir: String,

    /// Base name of the bundle files (`pkg/{name}.js`, `.wasm`, `.css`).
    #[arg(long, env = "LEPTOS_OUTPUT_NAME", default_value = "portal")]
    pub output_name: String,

    /// `dev` enables cargo-leptos live reload; use `prod` in production.
    #[arg(
        long,
        env = "LEPTOS_ENV",
        value_enum,
        ignore_case = true,
        default_value = "dev"
    )]
    pub site_env: SiteEnv,

    /// Port of cargo-leptos's live-reload websocket (dev only).
    #[arg(long, env = "LEPTOS_RELOAD_PORT", default_value_t = 3001)]
    pub reload_port: u32,

    /// First segment of every canonical resource name.
    #[arg(long, env = "PORTAL_PARTITION", default_value = "gpuaas")]
    pub partition: String,

    /// Second segment of every canonical resource name.
    #[arg(long, env = "PORTAL_SERVICE", default_value = "portal")]
    pub service: String,

    /// Log line format.
    #[arg(long, env = "PORTAL_LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,

    /// Log filter, in `tracing_subscriber::EnvFilter` syntax.
    #[arg(
        long,
        env = "RUST_LOG",
        default_value = "info,tower_http=info,sqlx=warn"
    )]
    pub log_filter: String,

    /// The URL people use to reach the portal (scheme, host, port). State-changing requests
    /// must come from this origin; OIDC redirect URIs are built from it.
    #[arg(
        long,
        env = "PORTAL_PUBLIC_URL",
        default_value = "http://127.0.0.1:3000"
    )]
    pub public_url: String,

    /// Mark the session cookie `Secure` (sent over HTTPS only). On unless turned off:
    /// `cargo xtask dev` and the tests turn it off for their plain-HTTP loopback portal.
    #[arg(long, env = "PORTAL_COOKIE_SECURE", default_value_t = true, action = clap::ArgAction::Set)]
    pub cookie_secure: bool,

    /// Milliseconds this server keeps who a signed-in session is, at most; the database
    /// announces every change to it as the change commits, and the server drops what it kept
    /// then (`control_plane::sessions::PrincipalCache`). 0 reads every session from the
    /// database. At most 60000: a change whose announcement went unheard is seen within this.
    #[arg(
        long,
        env = "PORTAL_SESSION_KEEP_MS",
        default_value_t = control_plane::sessions::PRINCIPAL_TTL.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(0..=60_000)
    )]
    pub session_keep_ms: u64,

    /// Live API tokens one organization may hold; making one more is refused until one is
    /// revoked or expires.
    #[arg(long, env = "PORTAL_MAX_TOKENS_PER_ORG", default_value_t = control_plane::TOKEN_CAP,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_tokens_per_org: u32,

    /// Minutes without a request after which a session ends.
    #[arg(long, env = "PORTAL_SESSION_IDLE_MINUTES", default_value_t = 60)]
    pub session_idle_minutes: u32,

    /// Hours after sign-in at which a session ends, however active.
    #[arg(long, env = "PORTAL_SESSION_ABSOLUTE_HOURS", default_value_t = 12)]
    pub session_absolute_hours: u32,

    /// Demo data only: the issuer of the demo identity provider (`cargo xtask dev` runs one).
    /// With `seed-demo`, Acme and Globex are registered to sign in through it.
    #[arg(long, env = "PORTAL_DEMO_IDP_ISSUER")]
    pub demo_idp_issuer: Option<String>,

    /// Demo data only: the client secret the demo identity provider expects.
    #[arg(long, env = "PORTAL_DEMO_IDP_CLIENT_SECRET")]
    pub demo_idp_client_secret: Option<Secret>,

    /// Stripe's API base URL (`cargo xtask dev` and the tests point it at the local Stripe
    /// test server).
    #[arg(
        long,
        env = "STRIPE_API_BASE",
        default_value = "https://api.stripe.com/"
    )]
    pub stripe_api_base: String,

    /// Stripe secret key (`sk_…`). Without it and the webhook secret, billing still rates
    /// and invoices, but nothing is synced to Stripe.
    #[arg(long, env = "STRIPE_SECRET_KEY")]
    pub stripe_secret_key: Option<Secret>,

    /// The webhook endpoint's signing secret (`whsec_…`).
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET")]
    pub stripe_webhook_secret: Option<Secret>,

    /// The DNS resolver (`ip:port`) that checks tenants' email-domain proofs (TXT records).
    /// Unset: the machine's resolvers (`/etc/resolv.conf`). Point it at a resolver you trust.
    #[arg(long, env = "PORTAL_DNS_RESOLVER")]
    pub dns_resolver: Option<std::net::SocketAddr>,

    /// The keys that seal stored secrets (identity providers' client secrets), as
    /// `id:base64-key[,id:base64-key…]`: 32 random bytes each (`openssl rand -base64 32`).
    /// The first seals; all open. To rotate, put a new key first, restart, then drop the old.
    /// Required to serve.
    #[arg(long, env = "PORTAL_SECRET_KEYS")]
    pub secret_keys: Option<Secret>,

    /// Development only: lets tenants' identity providers be plain `http://` on a loopback
    /// address (the dev command's and the tests' local provider). Off, the portal calls
    /// identity providers over https on public addresses only.
    #[arg(long, env = "PORTAL_DEV_LOOPBACK_IDP", default_value_t = false, action = clap::ArgAction::Set)]
    pub dev_loopback_idp: bool,

    /// Where `/metrics` (Prometheus) listens: loopback by default; `off` for nowhere. Callers
    /// off loopback must send the scrape token.
    #[arg(long, env = "PORTAL_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: String,

    /// The scrape token (`Authorization: Bearer …`): needed off loopback on the metrics
    /// listener, and on the public listener, which serves `/metrics` to nobody without it.
    /// At least 32 characters (`MIN_SCRAPE_TOKEN_LEN`; `openssl rand -hex 32`).
    #[arg(long, env = "PORTAL_METRICS_TOKEN")]
    pub metrics_token: Option<Secret>,

    /// Seconds in-flight requests get to finish after SIGTERM/Ctrl-C.
    #[arg(long, env = "PORTAL_SHUTDOWN_GRACE_SECS", default_value_t = 20)]
    pub shutdown_grace_secs: u64,

    /// Seconds between SIGTERM/Ctrl-C and no longer accepting connections, during which
    /// `/readyz` answers 503 `shutting_down` (so load balancers stop sending new requests)
    /// while everything is still served.
    #[arg(long, env = "PORTAL_SHUTDOWN_DRAIN_SECS", default_value_t = 5)]
    pub shutdown_drain_secs: u64,

    /// Seconds between reconciliation runs (hosts against allocations, usage against the
    /// ledger); at least 1.
    #[arg(long, env = "PORTAL_RECONCILE_EVERY_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub reconcile_every_secs: u64,

    /// Where volumes live. `qemu-nbd`: qcow2 files under PORTAL_VOLUME_DIR served over NBD on
    /// PORTAL_VOLUME_LISTEN by a qemu-storage-daemon this server drives (it runs on the storage
    /// node). `rbd`: Ceph RBD, through the `rbd` command line (PORTAL_RBD_*). Left out: no
    /// storage worker runs here, and volumes wait in `creating` for a server that has one.
    #[arg(long, env = "PORTAL_STORAGE", value_parser = ["qemu-nbd", "rbd"])]
    pub storage: Option<String>,
    /// `qemu-nbd`: the directory holding the volumes' qcow2 files, on the storage node.
    #[arg(
        long,
        env = "PORTAL_VOLUME_DIR",
        default_value = "/var/lib/gpuaas/volumes"
    )]
    pub volume_dir: std::path::PathBuf,
    /// `qemu-nbd`: the storage network address hosts reach volumes at.
    #[arg(long, env = "PORTAL_VOLUME_LISTEN", default_value = "127.0.0.1:10809")]
    pub volume_listen: SocketAddr,
    /// `rbd`: the Ceph pool volumes are images in.
    #[arg(long, env = "PORTAL_RBD_POOL", default_value = "volumes")]
    pub rbd_pool: String,
    /// `rbd`: comma-separated `address:port` of the Ceph monitors.
    #[arg(long, env = "PORTAL_RBD_MONITORS", default_value = "")]
    pub rbd_monitors: String,
    /// `rbd`: the CephX user this server acts as (`client.<id>`).
    #[arg(long, env = "PORTAL_RBD_ID", default_value = "portal")]
    pub rbd_id: String,
    /// `rbd`: the Ceph configuration file the `rbd` command line reads.
    #[arg(long, env = "PORTAL_RBD_CONF", default_value = "/etc/ceph/ceph.conf")]
    pub rbd_conf: std::path::PathBuf,
    /// `rbd`: the CephX user hosts map volumes as (their keyring is on each host).
    #[arg(long, env = "PORTAL_RBD_HOST_USER", default_value = "gpu-host")]
    pub rbd_host_user: String,
}

/// The shortest scrape token the server starts with: it guards the fleet's metrics off
/// loopback, so it must not be guessable.
pub const MIN_SCRAPE_TOKEN_LEN: usize = 32;

impl Config {
    /// The scrape token, refused when it is too short to keep anyone out.
    pub fn scrape_token(&self) -> Result<Option<&str>, String> {
        match &self.metrics_token {
            None => Ok(None),
            Some(t) if t.expose().trim().chars().count() < MIN_SCRAPE_TOKEN_LEN => Err(format!(
                "PORTAL_METRICS_TOKEN is {} characters: use at least {MIN_SCRAPE_TOKEN_LEN} \
                 (`openssl rand -hex 32`)",
                t.expose().trim().chars().count()
            )),
            Some(t) => Ok(Some(t.expose().trim())),
        }
    }

    /// `scheme://host[:port]` of [`Config::public_url`], as browsers send it in `Origin`.
    pub fn public_origin(&self) -> Result<String, String> {
        let url = self.public_url.trim_end_matches('/');
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("PORTAL_PUBLIC_URL {url:?} has no scheme"))?;
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "PORTAL_PUBLIC_URL {url:?} must be http:// or https://"
            ));
        }
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty() {
            return Err(format!("PORTAL_PUBLIC_URL {url:?} has no host"));
        }
        Ok(format!("{scheme}://{}", host.to_ascii_lowercase()))
    }

    pub fn stripe_settings(&self) -> Option<control_plane::billing::stripe::StripeSettings> {
        Some(control_plane::billing::stripe::StripeSettings {
            api_base: self.stripe_api_base.clone(),
            secret_key: self.stripe_secret_key.as_ref()?.expose().to_string(),
            webhook_secret: self.stripe_webhook_secret.as_ref()?.expose().to_string(),
            timeout: control_plane::billing::stripe::StripeSettings::TIMEOUT,
        })
    }

    pub fn session_idle(&self) -> Duration {
        Duration::from_secs(u64::from(self.session_idle_minutes) * 60)
    }

    pub fn session_absolute(&self) -> Duration {
        Duration::from_secs(u64::from(self.session_absolute_hours) * 3600)
    }

    pub fn db_acquire_timeout(&self) -> Duration {
        Duration::from_secs(self.db_acquire_timeout_secs)
    }

    /// The metrics listener's address, or `None` for `off`.
    pub fn metrics_listen(&self) -> Result<Option<SocketAddr>, String> {
        match self.metrics_addr.trim() {
            "off" => Ok(None),
            a => a.parse().map(Some).map_err(|e| {
                format!("PORTAL_METRICS_ADDR {a:?}: {e} (an address like 127.0.0.1:9464, or off)")
            }),
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    pub fn shutdown_drain(&self) -> Duration {
        Duration::from_secs(self.shutdown_drain_secs)
    }

    /// The storage backend volumes live on, if this server drives one.
    pub fn storage_backend(
        &self,
    ) -> Result<Option<std::sync::Arc<dyn storage::StorageBackend>>, String> {
        Ok(match self.storage.as_deref() {
            None => None,
            Some("qemu-nbd") => Some(std::sync::Arc::new(storage::QemuNbd::new(
                &self.volume_dir,
                self.volume_listen,
                None,
            ))),
            Some("rbd") => {
                let monitors = self
                    .rbd_monitors
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(|m| {
                        m.parse().map_err(|_| {
                            format!("PORTAL_RBD_MONITORS: {m:?} is not an address and port")
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let cli = storage::RbdCli {
                    id: self.rbd_id.clone(),
                    conf: self.rbd_conf.clone(),
                };
                Some(std::sync::Arc::new(
                    storage::Rbd::new(cli, &self.rbd_pool, &self.rbd_host_user, monitors)
                        .map_err(|e| format!("PORTAL_RBD_*: {e}"))?,
                ))
            }
            Some(other) => return Err(format!("PORTAL_STORAGE {other:?}: qemu-nbd or rbd")),
        })
    }

    pub fn reconcile_every(&self) -> Duration {
        Duration::from_secs(self.reconcile_every_secs)
    }

    /// How long a signed-in session's read is kept; `None` keeps none.
    pub fn session_keep(&self) -> Option<Duration> {
        (self.session_keep_ms > 0).then(|| Duration::from_millis(self.session_keep_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> DatabaseUrl {
        s.parse().unwrap()
    }

    #[test]
    fn redacts_passwords_everywhere_they_can_hide() {
        assert_eq!(
            url("postgres://portal:hunter2@db.internal:5432/portal").redacted(),
            "postgres://portal:***@db.internal:5432/portal"
        );
        assert_eq!(
            url("postgresql://portal@127.0.0.1:5432/portal").redacted(),
            "postgresql://portal@127.0.0.1:5432/portal"
        );
        assert_eq!(
            url("postgres://u:p%40ss@h/db?sslmode=require&password=x").redacted(),
            "postgres://u:***@h/db?sslmode=require&password=***"
        );
        assert_eq!(
            url("postgres://h/db?password=x").redacted(),
            "postgres://h/db?password=***"
        );
        let debug = format!("{:?}", url("postgres://portal:hunter2@h/db"));
        assert!(!debug.contains("hunter2"), "{debug}");
        let secret: Secret = "hunter2".parse().unwrap();
        assert_eq!(format!("{secret:?}"), "\"[redacted]\"");
    }

    #[test]
    fn public_origin_drops_paths_and_checks_the_scheme() {
        use clap::Parser;
        #[derive(Parser)]
        struct F {
            #[command(flatten)]
            c: Config,
        }
        let origin = |u: &str| {
            F::parse_from(["s", "--database-url", "postgres://h/d", "--public-url", u])
                .c
                .public_origin()
        };
        assert_eq!(
            origin("https://Portal.Example/"),
            Ok("https://portal.example".into())
        );
        assert_eq!(
            origin("http://127.0.0.1:3000/x/y"),
            Ok("http://127.0.0.1:3000".into())
        );
        assert_eq!(
            origin("ftp://x"),
            Err("PORTAL_PUBLIC_URL \"ftp://x\" must be http:// or https://".into())
        );
        assert!(origin("portal.example").unwrap_err().contains("no scheme"));
    }

    #[test]
    fn a_short_scrape_token_and_a_long_session_keep_are_refused_at_start() {
        use clap::Parser;
        #[derive(Parser)]
        struct F {
            #[command(flatten)]
            c: Config,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["s", "--database-url", "postgres://h/d"];
            argv.extend_from_slice(extra);
            F::try_parse_from(argv).map(|f| f.c)
        };
        let short = parse(&["--metrics-token", "hunter2"]).unwrap();
        let e = short.scrape_token().unwrap_err();
        assert!(e.contains("is 7 characters: use at least 32"), "{e}");
        let long = "x".repeat(32);
        assert_eq!(
            parse(&["--metrics-token", &long]).unwrap().scrape_token(),
            Ok(Some(long.as_str()))
        );
        assert_eq!(parse(&[]).unwrap().scrape_token(), Ok(None));

        assert!(parse(&["--session-keep-ms", "60001"]).is_err());
        assert_eq!(
            parse(&["--session-keep-ms", "60000"])
                .unwrap()
                .session_keep(),
            Some(Duration::from_secs(60))
        );
        assert!(parse(&["--max-tokens-per-org", "0"]).is_err());
        assert_eq!(parse(&[]).unwrap().max_tokens_per_org, 50);
    }

    /// Every setting as the code defines it, one table row each: its variable, its flag, its
    /// default, and its documentation comment.
    fn reference() -> String {
        use clap::Args;
        let command = Config::augment_args(clap::Command::new("server"));
        let mut rows = String::from(
            "| variable | flag | default | what it does |\n| --- | --- | --- | --- |\n",
        );
        for arg in command.get_arguments() {
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            let env = env.unwrap_or_else(|| panic!("--{} has no variable", arg.get_id()));
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(!help.is_empty(), "{env} has no documentation comment");
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| format!("`{}`", v.to_string_lossy()))
                .collect();
            let cell = |s: &str| {
                s.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .replace('|', "\\|")
            };
            rows.push_str(&format!(
                "| `{env}` | `--{}` | {} | {} |\n",
                arg.get_long().unwrap_or_default(),
                if default.is_empty() {
                    "—".into()
                } else {
                    default.join(", ")
                },
                cell(&help),
            ));
        }
        rows
    }

    const BEGIN: &str = "<!-- settings: generated from server/src/config.rs; to renew it, \
                         UPDATE_DOCS=1 cargo test -p server --lib config -->\n";
    const END: &str = "<!-- settings end -->";

    /// docs/OPERATIONS.md's configuration reference is the code's, so it can't drift; and
    /// `.env.example` names every setting.
    #[test]
    fn the_operators_guide_lists_every_setting_as_the_code_defines_it() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let guide_path = root.join("docs/OPERATIONS.md");
        let guide = std::fs::read_to_string(&guide_path).expect("docs/OPERATIONS.md");
        let (start, end) = (
            guide
                .find(BEGIN)
                .expect("the guide has the settings' start marker")
                + BEGIN.len(),
            guide
                .find(END)
                .expect("the guide has the settings' end marker"),
        );
        let want = reference();
        if guide[start..end] != want {
            if std::env::var_os("UPDATE_DOCS").is_some() {
                let renewed = format!("{}{want}{}", &guide[..start], &guide[end..]);
                std::fs::write(&guide_path, renewed).expect("writes the guide");
            } else {
                panic!(
                    "docs/OPERATIONS.md's settings differ from the code's; renew them with \
                     `UPDATE_DOCS=1 cargo test -p server --lib config`. The code's:\n{want}"
                );
            }
        }
        let example = std::fs::read_to_string(root.join(".env.example")).expect(".env.example");
        for line in want.lines().skip(2) {
            let env = line.split('`').nth(1).expect("a variable");
            assert!(example.contains(env), ".env.example does not name {env}");
        }
    }

    #[test]
    fn rejects_non_postgres_urls_with_a_clear_message() {
        let err = "mysql://x".parse::<DatabaseUrl>().err().unwrap();
        assert_eq!(err, "expected a postgres:// or postgresql:// URL");
    }
}
