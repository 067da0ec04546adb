//! What the benchmarks share: their flags and how they print latencies.
#![allow(dead_code)]

use std::time::Duration;

use control_plane::allocations::LaunchRequest;
use control_plane::prelude::*;
use control_plane::{ControlPlane, Naming, UserId};
use sqlx::PgPool;

/// The demo's alice, who operates Acme's projects.
pub const ALICE: UserId = UserId(uuid::uuid!("0a0e0000-0000-4000-8002-000000000001"));
pub const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bench";

/// A launch of `sku` with the platform's Ubuntu image, any region, the bench key.
pub fn launch_request(sku: &str, name: String, idempotency_key: String) -> LaunchRequest {
    LaunchRequest {
        sku: sku.into(),
        region: String::new(),
        listing: "ubuntu-24.04-cuda".into(),
        version: String::new(),
        ssh_public_key: KEY.into(),
        name,
        idempotency_key,
        lifetime_hours: None,
        published_ports: Vec::new(),
        tags: Default::default(),
        user_data: None,
        volumes: Vec::new(),
    }
}

/// A control plane on `DATABASE_URL` (an empty database) with up to `connections`, migrated
/// and seeded with the demo data.
pub async fn seeded(connections: u32) -> (PgPool, ControlPlane) {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL names an empty database");
    let pool = control_plane::pool::sized(connections)
        .connect(&url)
        .await
        .expect("connects");
    let cp = ControlPlane::new(pool.clone(), Naming::default());
    cp.migrate().await.expect("migrates");
    cp.seed_demo().await.expect("seeds");
    (pool, cp)
}

/// `--name VALUE` from the command line, or `default`.
pub fn flag<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p` quantile (0–1) of sorted latencies, in milliseconds; NaN when there are none.
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    ms(sorted[i])
}
