//! How the control plane's connection pool checks its connections: one policy for the server,
//! the benchmarks and whatever else opens a pool for the control plane.
//!
//! sqlx 0.8 checks a connection with a round trip (a `Sync` and its `ReadyForQuery`) each time
//! it comes back to the pool, and by default again each time the pool hands it out. A statement
//! run on the pool therefore cost three round trips, two of them checks: at saturation the
//! checks were ~12% of the server's samples (docs/PERFORMANCE.md, session 38), and each also
//! wakes a backend on the other core. The second check tells nothing new about a connection
//! that passed the first a moment ago, so, as HikariCP's `aliveBypassWindowMs` does, the pool
//! hands out without a check a connection that came back healthy less than
//! [`CHECK_AFTER_IDLE`] ago, and checks any that has sat longer.
//!
//! What this gives up: a connection the database drops inside that window (a restart, an
//! administrator ending backends) reaches one statement, which fails with the database's
//! error instead of going to a new connection; the failed connection then fails its check on
//! the way back and is closed, so the next statement gets a new one. A restart fails requests
//! in flight anyway; this adds at most one per pooled connection, in the first half second.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::PgPoolOptions;

/// How long a connection may sit in the pool after its last check and still be handed out
/// without another.
pub const CHECK_AFTER_IDLE: Duration = Duration::from_millis(500);

/// Pool options with the control plane's connection checks; the caller adds its size and
/// timeouts.
pub fn options() -> PgPoolOptions {
    PgPoolOptions::new()
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= CHECK_AFTER_IDLE {
                    // An error closes this connection and the pool tries another.
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}
