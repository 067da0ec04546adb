//! The node agent: enrolment, the pull loop (heartbeats, task claims, phase reports, results),
//! the task executor with its leases and crash recovery, and the two drivers. It runs bounded
//! host primitives only; there is no generic shell.

pub mod agent;
pub mod client;
pub mod config;
pub mod discover;
pub mod domain;
pub mod driver;
pub mod image;
pub mod lease;
pub mod proof;
pub mod state;
pub mod telemetry;
pub mod tools;
pub mod virsh;
pub mod wipe;
