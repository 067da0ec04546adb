//! Logging: `tracing` with a request id on every line of a request (the `request` span).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::{Config, LogFormat};
use crate::error::ServerError;

pub fn init(config: &Config) -> Result<(), ServerError> {
    let filter = EnvFilter::try_new(&config.log_filter)
        .map_err(|e| ServerError::Config(format!("RUST_LOG {:?}: {e}", config.log_filter)))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::NONE)
        .with_target(true)
        // Colour only for people: files and log shippers get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let result = match config.log_format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
    // A second init (tests) is harmless.
    let _ = result;
    Ok(())
}
