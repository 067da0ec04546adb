//! The benchmarks, in one binary so that they compile and link once:
//! `bench placement|dispatch|ledger|pages-seed|chaos-load|chaos-audit|volumes|peer-placement|clusters [flags]`, each described in its module. `cargo xtask bench
//! <name> [flags]` runs one against a private cluster with durable commits; `cargo xtask test`
//! runs each at smoke size.

#[path = "bench/chaos.rs"]
mod chaos;
#[path = "bench/clusters.rs"]
mod clusters;
#[path = "bench/common.rs"]
mod common;
#[path = "bench/dispatch.rs"]
mod dispatch;
#[path = "bench/ledger.rs"]
mod ledger;
#[path = "bench/pages_seed.rs"]
mod pages_seed;
#[path = "bench/peer_placement.rs"]
mod peer_placement;
#[path = "bench/placement.rs"]
mod placement;
#[path = "bench/volumes.rs"]
mod volumes;

fn main() {
    // `cargo bench` appends `--bench` after the arguments it was given.
    match std::env::args().skip(1).find(|a| a != "--bench").as_deref() {
        Some("placement") => placement::main(),
        Some("dispatch") => dispatch::main(),
        Some("ledger") => ledger::main(),
        Some("pages-seed") => pages_seed::main(),
        Some("chaos-load") => chaos::load(),
        Some("chaos-audit") => chaos::audit(),
        Some("volumes") => volumes::main(),
        Some("peer-placement") => peer_placement::main(),
        Some("clusters") => clusters::main(),
        other => {
            eprintln!(
                "usage: bench placement|dispatch|ledger|pages-seed|chaos-load|chaos-audit|volumes|peer-placement|clusters [flags] (got {other:?})"
            );
            std::process::exit(2);
        }
    }
}
