use control_plane::prelude::*;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use server::config::Config;
use server::error::ServerError;
use server::{app_state, serve, telemetry};

/// The GPU cloud portal: pages, server functions, the node API and webhooks.
#[derive(Parser)]
#[command(name = "server", version, about)]
struct Cli {
    #[command(flatten)]
    config: Config,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the portal (the default).
    Serve {
        /// Apply pending migrations before serving.
        #[arg(long)]
        migrate: bool,
        /// Load the demo tenants and users (idempotent) before serving.
        #[arg(long)]
        seed_demo: bool,
    },
    /// Print the API's OpenAPI document (as `/api/v1/openapi.json` serves it) and exit.
    Openapi,
    /// Apply pending migrations and exit.
    Migrate,
    /// Load the demo tenants and users (idempotent) and exit.
    SeedDemo,
    /// Demo fleet: print each demo host as `hostname fixture node-id token`, enrolling (or issuing a
    /// new bootstrap token to) the hosts named in `--enrol`; `-` where none was asked for.
    DemoFleetTokens {
        #[arg(long)]
        operator: String,
        /// Comma-separated hostnames.
        #[arg(long, default_value = "")]
        enrol: String,
    },
    /// Demo fleet: approve the demo hosts' pending slot maps until all have slots (or the
    /// wait runs out).
    DemoFleetApprove {
        #[arg(long)]
        operator: String,
        #[arg(long, default_value_t = 60)]
        wait_s: u64,
    },
    /// Demo: make an API token for a demo person's organization (as the tokens page would,
    /// so only admins may) and print its secret.
    DemoApiToken {
        #[arg(long)]
        email: String,
        /// Comma-separated: read, launch, billing, admin.
        #[arg(long, default_value = "read,launch")]
        scopes: String,
        #[arg(long, default_value_t = 1)]
        days: u32,
    },
    /// Create a platform admin with a break-glass password, or set a new one. The password
    /// is read from standard input (one line), never from a flag or a default.
    SetAdminPassword {
        #[arg(long)]
        email: String,
        #[arg(long, default_value = "Platform admin")]
        name: String,
    },
}

/// mimalloc instead of glibc's malloc: rendering a page makes many small short-lived
/// allocations on many threads, where glibc's arenas spent a quarter of the server's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let telemetry = match telemetry::init(&cli.config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("server: {e}");
            return ExitCode::from(2);
        }
    };
    if telemetry.traces_on() {
        tracing::info!("exporting traces over OTLP (OTEL_* environment)");
    }
    let code = match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server exiting");
            eprintln!("server: {e}");
            ExitCode::FAILURE
        }
    };
    // The exporter's client blocks: flush off the runtime's threads.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}

async fn run(cli: Cli) -> Result<(), ServerError> {
    if let Some(Command::Openapi) = cli.command {
        let doc = server::api::document();
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    let config = cli.config;
    tracing::info!(config = ?config, "starting");
    let state = app_state(&config)?;
    let cp = &state.cp;
    let (migrate, seed, serve_after) = match cli.command {
        None => (false, false, true),
        Some(Command::Serve { migrate, seed_demo }) => (migrate, seed_demo, true),
        // Printed before the configuration is read, above.
        Some(Command::Openapi) => return Ok(()),
        Some(Command::Migrate) => (true, false, false),
        Some(Command::SeedDemo) => (false, true, false),
        Some(Command::DemoFleetTokens { operator, enrol }) => {
            let who = cp.demo_operator(&operator).await?;
            let asked: Vec<&str> = enrol
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .collect();
            let tokens = cp.demo_fleet_tokens(&who, &asked).await?;
            for h in control_plane::demo::DEMO_FLEET {
                let token = tokens
                    .iter()
                    .find(|(t, _)| t.hostname == h.hostname)
                    .map(|(_, tok)| tok.as_str())
                    .unwrap_or("-");
                let node = cp
                    .demo_node_id(h.hostname)
                    .await?
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into());
                println!("{} {} {node} {token}", h.hostname, h.fixture);
            }
            return Ok(());
        }
        Some(Command::DemoFleetApprove { operator, wait_s }) => {
            let who = cp.demo_operator(&operator).await?;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_s);
            loop {
                let ready = cp.demo_fleet_approve(&who).await?;
                if ready == control_plane::demo::DEMO_FLEET.len() {
                    println!("demo fleet: {ready} hosts approved");
                    return Ok(());
                }
                if std::time::Instant::now() >= deadline {
                    println!(
                        "demo fleet: {ready} of {} hosts approved; the rest have not reported a discovery yet",
                        control_plane::demo::DEMO_FLEET.len()
                    );
                    return Ok(());
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
        Some(Command::DemoApiToken {
            email,
            scopes,
            days,
        }) => {
            let scopes = scopes
                .split(',')
                .map(|s| control_plane::api_tokens::TokenScope::parse(s.trim()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ServerError::Config(e.to_string()))?;
            println!("{}", cp.demo_api_token(&email, &scopes, days).await?);
            return Ok(());
        }
        Some(Command::SetAdminPassword { email, name }) => {
            let password = read_password()?;
            let user = cp
                .set_break_glass_password(&email, &name, &password)
                .await?;
            tracing::info!(user.id = %user, "break-glass password set");
            eprintln!("Platform admin {email} can now sign in at /login.");
            return Ok(());
        }
    };
    let stores_secrets = serve_after || (seed && config.demo_idp_issuer.is_some());
    if stores_secrets && config.secret_keys.is_none() {
        return Err(ServerError::Config(
            "PORTAL_SECRET_KEYS is not set: the portal seals identity providers' client \
             secrets with it. Give id:base64-key, e.g. main:$(openssl rand -base64 32)"
                .into(),
        ));
    }
    if migrate {
        cp.migrate().await?;
        tracing::info!("migrations applied");
    }
    if seed {
        let report = cp.seed_demo().await?;
        tracing::info!(?report, "demo data loaded");
        let runs =
            control_plane::demo::seed_billing(cp.pool().sqlx(), time::OffsetDateTime::now_utc())
                .await?;
        tracing::info!(billing.imported_runs = runs, "demo billing history loaded");
        if let (Some(issuer), Some(secret)) =
            (&config.demo_idp_issuer, &config.demo_idp_client_secret)
        {
            cp.seed_demo_identity_providers(issuer, secret.expose())
                .await?;
            tracing::info!(sso.issuer = %issuer, "demo tenants sign in through the demo identity provider");
        }
    }
    if serve_after {
        cp.reseal_secrets().await?;
        serve(&config, state).await?;
    }
    Ok(())
}

/// One line from standard input; when it is a terminal, asks for it without echo.
fn read_password() -> Result<String, ServerError> {
    use std::io::{BufRead, IsTerminal, Write};
    let interactive = std::io::stdin().is_terminal();
    let echo = |on: bool| {
        let _ = std::process::Command::new("stty")
            .arg(if on { "echo" } else { "-echo" })
            .stdin(std::process::Stdio::inherit())
            .status();
    };
    if interactive {
        eprint!("Password: ");
        let _ = std::io::stderr().flush();
        echo(false);
    }
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if interactive {
        echo(true);
        eprintln!();
    }
    read.map_err(|e| ServerError::Config(format!("reading the password from stdin: {e}")))?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}
