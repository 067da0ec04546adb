//! `stripe-test-server`: the local Stripe for `cargo xtask dev` and the browser tests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(about = "A local Stripe test server built on Stripe's published fixtures")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:12111")]
    listen: SocketAddr,
    /// Another copy of Stripe's fixtures3.json (default: the one compiled in).
    #[arg(long, env = "STRIPE_FIXTURES")]
    fixtures: Option<PathBuf>,
    /// Where to send webhooks, e.g. http://127.0.0.1:3000/stripe/webhook.
    #[arg(long)]
    webhook_url: Option<String>,
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET")]
    webhook_secret: String,
    /// Attempt payment this many milliseconds after an invoice is finalised (0: never).
    #[arg(long, default_value_t = 0)]
    autopay_ms: u64,
    /// Always decline payments of this organization (its slug); repeatable.
    #[arg(long)]
    decline_tenant: Vec<String>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let a = Args::parse();
    let fixtures = match &a.fixtures {
        Some(path) => stripe_test_server::Config::from_fixture_file(path)?,
        None => stripe_test_server::Config::bundled_fixtures(),
    };
    let h = stripe_test_server::start(
        stripe_test_server::Config {
            fixtures,
            webhook_url: a.webhook_url,
            webhook_secret: a.webhook_secret,
            autopay_after: (a.autopay_ms > 0).then(|| Duration::from_millis(a.autopay_ms)),
            decline_tenants: a.decline_tenant,
        },
        a.listen,
    )
    .await?;
    println!("stripe-test-server listening on {}", h.base_url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
