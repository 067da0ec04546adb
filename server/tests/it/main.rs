//! The server's integration tests, one binary (one link, tests in parallel across files).
//! `pool.rs` keeps a process of its own: it asserts on the process-wide outage mark, which the
//! tests here that stop their database would set.

mod api;
mod bad_input;
mod cli;
mod clusters;
mod http;
mod isolation;
mod stop_start;
mod stripe;
#[path = "../support/mod.rs"]
mod support;
mod volumes;
