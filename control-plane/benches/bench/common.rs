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

/// A placement client's choices (xorshift64, seeded by the client's number): client `i` of
/// `bench placement` and of `bench peer-placement` ask for the same SKUs in the same order and
/// toss the same coin for each release.
pub struct ClientStream(u64);

impl ClientStream {
    pub fn for_client(me: usize) -> Self {
        ClientStream((me as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// An index of `weights`, drawn in proportion to them.
    pub fn pick(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut pick = (self.next() % total.max(1) as u64) as u32;
        weights
            .iter()
            .position(|&w| {
                if pick < w {
                    true
                } else {
                    pick -= w;
                    false
                }
            })
            .unwrap_or(0)
    }

    /// Whether to release one of the client's allocations after this launch (every other, on
    /// average).
    pub fn release_now(&mut self) -> bool {
        self.next().is_multiple_of(2)
    }
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

/// CPU seconds (user and system, including reaped children's) used so far by `root` and every
/// live process below it, read from `/proc`. Taken before and after a phase, the difference is
/// what that process tree spent on it: a child that exits is reaped into its parent's
/// `cutime`/`cstime`, so it is neither lost nor counted twice.
pub fn tree_cpu_seconds(root: u32) -> f64 {
    let mut procs: Vec<(u32, u32, u64)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some((ppid, ticks)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_ticks(&s))
            {
                procs.push((pid, ppid, ticks));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(procs.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    let ticks: u64 = procs
        .iter()
        .filter(|p| tree.contains(&p.0))
        .map(|p| p.2)
        .sum();
    // USER_HZ, the unit of /proc's times, is 100 on every Linux this runs on.
    ticks as f64 / 100.0
}

/// `(ppid, utime + stime + cutime + cstime)` from a `/proc/PID/stat` line. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted from its last `)`.
fn stat_ticks(stat: &str) -> Option<(u32, u64)> {
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), … utime (14), stime (15), cutime (16), cstime (17).
    let ppid = f.get(1)?.parse().ok()?;
    let ticks = f
        .get(11..15)?
        .iter()
        .map(|v| v.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((ppid, ticks))
}

/// The PostgreSQL postmaster's pid, from the `postmaster.pid` file `PG_POSTMASTER_PID` names
/// (as `cargo xtask bench` sets it), so a benchmark can count the database's CPU time too.
pub fn postmaster_pid() -> Option<u32> {
    let file = std::env::var("PG_POSTMASTER_PID").ok()?;
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// CPU seconds so far of this process and, where `cargo xtask bench` said where it is, the
/// database's postmaster and its backends.
pub fn ours_and_database_cpu_seconds() -> f64 {
    tree_cpu_seconds(std::process::id()) + postmaster_pid().map_or(0.0, tree_cpu_seconds)
}
