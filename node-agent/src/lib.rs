//! The node agent: enrolment, the pull loop (heartbeats, task claims, phase reports, results),
//! the task executor with its leases and crash recovery, and the two drivers. It runs bounded
//! host primitives only; there is no generic shell.

pub mod agent;
pub mod client;
pub mod cluster_boot;
pub mod config;
pub mod discover;
pub mod domain;
pub mod driver;
pub mod fabric;
pub mod gpu_health;
pub mod image;
pub mod lease;
pub mod metrics;
pub mod network;
pub mod overlay;
pub mod proof;
pub mod state;
pub mod telemetry;
pub mod tools;
pub mod traces;
pub mod virsh;
pub mod wipe;

/// `N` bytes from the kernel's random source (wipe seeds, telemetry tokens).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use std::io::Read;
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("/dev/urandom is readable");
    b
}
