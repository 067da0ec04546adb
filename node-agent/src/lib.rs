//! The node agent: enrolment, the pull loop (heartbeats, task claims, phase reports, results)
//! and its drivers. It runs bounded host primitives only; there is no generic shell.

pub mod client;
pub mod discover;
pub mod driver;
pub mod proof;
pub mod state;
pub mod tools;
