//! The agent's integration tests, one binary (one link, tests in parallel across files).
//! `trace.rs` keeps a process of its own: it installs the process's tracing subscriber and
//! expects every span it receives to be its launch's.

mod crash;
mod fixtures;
mod host;
mod network;
mod overlay;
mod stop_start;
#[path = "../support/mod.rs"]
mod support;
mod telemetry;
