use std::process::ExitCode;

use clap::{Parser, Subcommand};
use server::config::Config;
use server::error::ServerError;
use server::{AppState, control_plane, leptos_options, serve, telemetry};

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
    /// Apply pending migrations and exit.
    Migrate,
    /// Load the demo tenants and users (idempotent) and exit.
    SeedDemo,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = telemetry::init(&cli.config) {
        eprintln!("server: {e}");
        return ExitCode::from(2);
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server exiting");
            eprintln!("server: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), ServerError> {
    let config = cli.config;
    tracing::info!(config = ?config, "starting");
    let cp = control_plane(&config)?;
    let (migrate, seed, serve_after) = match cli.command {
        None => (false, false, true),
        Some(Command::Serve { migrate, seed_demo }) => (migrate, seed_demo, true),
        Some(Command::Migrate) => (true, false, false),
        Some(Command::SeedDemo) => (false, true, false),
    };
    if migrate {
        cp.migrate().await?;
        tracing::info!("migrations applied");
    }
    if seed {
        let report = cp.seed_demo().await?;
        tracing::info!(?report, "demo data loaded");
    }
    if serve_after {
        let state = AppState {
            leptos: leptos_options(&config),
            cp,
        };
        serve(&config, state).await?;
    }
    Ok(())
}
