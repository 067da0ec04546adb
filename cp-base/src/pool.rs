//! The control plane's database: how its connections are checked, and where single
//! statements run.
//!
//! sqlx 0.8 checks a connection with a round trip (a `Sync` and its `ReadyForQuery`) each time
//! it comes back to its pool, and by default again each time the pool hands it out. A
//! statement run on the pool therefore cost three round trips, two of them checks: at
//! saturation the checks were ~12% of the server's samples (docs/PERFORMANCE.md),
//! and each also wakes a backend on the other core.
//!
//! - **sqlx's pool** ([`options`]) hands out without a second check a connection that came back
//!   healthy less than [`CHECK_AFTER_IDLE`] ago (as HikariCP's `aliveBypassWindowMs` does), and
//!   checks any that sat longer. Transactions and connections a caller holds come from it: its
//!   check on return also flushes a dropped transaction's `ROLLBACK`.
//! - **A single statement** run on [`Db`] (`.fetch_one(cp.pool())`, most of what pages read)
//!   takes a connection from a second set of its own (as many as the pool's), which needs no
//!   check when the connection comes back: a statement that finished leaves nothing to flush,
//!   and a connection whose statement was cancelled, broke or ended in a `FATAL` is closed, not
//!   kept. The same window decides when it is checked before use. Its rows are read whole
//!   before the first is handed on, so it never holds a connection while its caller works.
//!
//! What the window gives up: a connection the database drops inside it (a restart, an
//! administrator ending backends) reaches one statement, which fails with the database's
//! error, as an outage (503, `Retry-After`), instead of going to a new connection; the failed
//! connection is then closed, so the next statement gets a new one. Such a failure is noted
//! ([`outage_seen`]), and from then on every connection that sat idle since is checked before
//! use, so a restart the process didn't see costs it one failed statement. A restart fails
//! requests in flight anyway.
//!
//! What it bought (docs/PERFORMANCE.md, "the connection checks removed from the hot path"):
//! database sends a page 13.6 → 9.5 with the window, 9.5 → 6.0 with [`Db`], +20% and +3%
//! pages/s in interleaved pairs. Remove [`Db`] when sqlx lets a pool skip its check on return
//! (it can't in 0.8), and the window when it offers one; then rerun `cargo xtask bench pages`
//! interleaved with this build, and keep whichever is faster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::postgres::{
    PgConnectOptions, PgConnection, PgDatabaseError, PgPoolOptions, PgQueryResult, PgRow,
    PgSeverity, PgStatement, PgTypeInfo,
};
use sqlx::{Connection, Either, Execute, Executor, PgPool, Postgres};

/// How long a connection may sit in the pool after its last check and still be handed out
/// without another.
pub const CHECK_AFTER_IDLE: Duration = Duration::from_millis(500);

/// When this process last saw a statement fail because the database was unreachable or
/// restarting (micro-seconds after [`epoch`], 0 for never). Any connection that has sat idle
/// since then is checked before its next use, however briefly it sat: a restart costs a process
/// one failed statement, not one per pooled connection.
static LAST_OUTAGE_US: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Notes that a statement just failed as an outage ([`is_outage`]); the one mapping of
/// database errors (`Error::from`) and readiness call it.
pub fn outage_seen() {
    let now = epoch().elapsed().as_micros() as u64 + 1;
    LAST_OUTAGE_US.fetch_max(now, Ordering::Relaxed);
}

/// Whether a database error means the database is unreachable or restarting, rather than that
/// a statement is wrong: no connection (I/O, pool timeout, a closed pool), a connection closed
/// before it began (a proxy with no server behind it, HAProxy during a failover, accepts a
/// connection and closes it; sqlx reports the end of its first read, the answer to
/// `SSLRequest`, as a protocol error), or PostgreSQL's
/// connection exceptions (class 08), too many connections (53300), shutting down, crashed
/// or not yet accepting connections (57P01–57P03), and a write refused because the server
/// reached is a standby (25006: a failover moved the primary under an open connection).
pub fn is_outage(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Protocol(m) => m.starts_with(CLOSED_AT_ONCE),
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| {
            c.starts_with("08")
                || matches!(
                    c.as_ref(),
                    "53300" | "57P01" | "57P02" | "57P03" | READ_ONLY
                )
        }),
        _ => false,
    }
}

/// How sqlx reports a connection the other end closed before answering its first message.
const CLOSED_AT_ONCE: &str = "unexpected response from SSLRequest";

/// `read_only_sql_transaction`: what a standby answers a write.
const READ_ONLY: &str = "25006";

/// Whether an outage was seen since a connection that has sat idle for `idle_for` was last
/// used.
fn outage_since(idle_for: Duration) -> bool {
    let outage = LAST_OUTAGE_US.load(Ordering::Relaxed);
    outage != 0 && Duration::from_micros(outage) >= epoch().elapsed().saturating_sub(idle_for)
}

/// Whether a connection that has sat idle for `idle_for` may be handed out: checked with a
/// round trip once it sat [`CHECK_AFTER_IDLE`] or an outage was seen since. After an outage
/// the check also asks whether the server is still a primary: behind a proxy, a connection
/// made before a failover may reach a server that has since become a standby (a demoted
/// primary) and would refuse every write; it is closed instead.
async fn usable(conn: &mut PgConnection, idle_for: Duration) -> bool {
    if outage_since(idle_for) {
        return matches!(
            sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()")
                .fetch_one(&mut *conn)
                .await,
            Ok(false)
        );
    }
    idle_for < CHECK_AFTER_IDLE || conn.ping().await.is_ok()
}

/// Options for sqlx's pool of a handle that may open `connections` in all: half of them (rounded
/// up) for the pool, and [`Db::new`] opens as many again for single statements. Splitting one
/// budget keeps what an operator sizes PostgreSQL for; on two cores, twice the connections
/// measured slower than the same number split (docs/PERFORMANCE.md).
pub fn sized(connections: u32) -> PgPoolOptions {
    options().max_connections(connections.div_ceil(2))
}

/// Pool options with the control plane's connection checks; the caller adds its size and
/// timeouts ([`sized`] does the size).
pub fn options() -> PgPoolOptions {
    PgPoolOptions::new()
        .test_before_acquire(false)
        // `false` closes this connection and the pool tries another.
        .before_acquire(|conn, meta| Box::pin(async move { Ok(usable(conn, meta.idle_for).await) }))
}

/// A connection older than this is closed rather than reused (sqlx's pool does the same with
/// its `max_lifetime`), so memory a backend grew over a long life goes back.
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// The control plane's database: sqlx's pool for transactions and held connections
/// ([`Db::begin`], [`Db::acquire`]), and single statements run on `&Db` on connections of its
/// own that skip sqlx's check on return (see the module's documentation). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    statements: Arc<Statements>,
}

/// The connections single statements run on.
struct Statements {
    connect: PgConnectOptions,
    idle: Mutex<Vec<Idle>>,
    /// One for each connection open or opening; as many as sqlx's pool has at most
    /// ([`Db::statement_max`]).
    permits: tokio::sync::Semaphore,
    acquire_timeout: Duration,
}

impl std::fmt::Debug for Statements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Statements")
            .field("idle", &self.idle.lock().map(|i| i.len()).unwrap_or(0))
            .field("available", &self.permits.available_permits())
            .finish()
    }
}

struct Idle {
    conn: PgConnection,
    since: Instant,
    born: Instant,
}

/// A statement's connection; back to the idle set only if [`Lease::keep_if`] saw the statement
/// end with the database's answer.
struct Lease<'a> {
    statements: &'a Statements,
    conn: Option<(PgConnection, Instant)>,
    keep: bool,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Lease<'_> {
    fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn.as_mut().expect("held until dropped").0
    }

    /// A statement that succeeded, or that the database refused with an ordinary error, leaves
    /// the connection ready for the next (sqlx reads any answer still owed before its next
    /// statement); anything else (a `FATAL` that ends the backend, a broken socket, a protocol
    /// error, a decode error midway) may not.
    fn keep_if<T>(&mut self, result: &Result<T, sqlx::Error>) {
        self.keep = match result {
            Ok(_) => true,
            // A standby's refusal to write: the next statement belongs on the primary.
            Err(sqlx::Error::Database(e)) => {
                e.try_downcast_ref::<PgDatabaseError>().is_some_and(|e| {
                    !matches!(e.severity(), PgSeverity::Fatal | PgSeverity::Panic)
                        && e.code() != READ_ONLY
                })
            }
            Err(_) => false,
        };
        if let Err(e) = result
            && is_outage(e)
        {
            outage_seen();
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let (true, Some((conn, born))) = (self.keep, self.conn.take())
            && let Ok(mut idle) = self.statements.idle.lock()
        {
            idle.push(Idle {
                conn,
                since: Instant::now(),
                born,
            });
        }
        // Otherwise the connection is dropped here (its socket closed) and its permit with it.
    }
}

impl Statements {
    async fn lease(&self) -> Result<Lease<'_>, sqlx::Error> {
        tokio::time::timeout(self.acquire_timeout, self.lease_now())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
    }

    async fn lease_now(&self) -> Result<Lease<'_>, sqlx::Error> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        loop {
            // The most recently used first: under load the same few stay warm.
            let idle = self.idle.lock().ok().and_then(|mut i| i.pop());
            let Some(mut idle) = idle else { break };
            if idle.born.elapsed() >= MAX_LIFETIME {
                continue;
            }
            if !usable(&mut idle.conn, idle.since.elapsed()).await {
                continue;
            }
            return Ok(Lease {
                statements: self,
                conn: Some((idle.conn, idle.born)),
                keep: false,
                _permit: permit,
            });
        }
        let conn = PgConnection::connect_with(&self.connect).await?;
        Ok(Lease {
            statements: self,
            conn: Some((conn, Instant::now())),
            keep: false,
            _permit: permit,
        })
    }
}

impl Db {
    /// Single statements get as many connections of their own as `pool` may open, with its
    /// connect options and acquire timeout; the pool keeps transactions and held connections.
    pub fn new(pool: PgPool) -> Db {
        let max = pool.options().get_max_connections() as usize;
        let statements = Statements {
            connect: pool.connect_options().as_ref().clone(),
            idle: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(max),
            acquire_timeout: pool.options().get_acquire_timeout(),
        };
        Db {
            pool,
            statements: Arc::new(statements),
        }
    }

    /// sqlx's pool, for what takes one (migrations, the benchmarks' set-up).
    pub fn sqlx(&self) -> &PgPool {
        &self.pool
    }

    pub async fn begin(&self) -> Result<sqlx::Transaction<'static, Postgres>, sqlx::Error> {
        self.pool.begin().await
    }

    pub async fn acquire(&self) -> Result<sqlx::pool::PoolConnection<Postgres>, sqlx::Error> {
        self.pool.acquire().await
    }

    /// Closing sqlx's pool (at shutdown) closes the statements' too.
    fn open(&self) -> Result<(), sqlx::Error> {
        if self.pool.is_closed() {
            if let Ok(mut idle) = self.statements.idle.lock() {
                idle.clear();
            }
            return Err(sqlx::Error::PoolClosed);
        }
        Ok(())
    }

    /// This handle's open connections, sqlx's pool's and the statements' together:
    /// (in use, idle).
    pub fn connections(&self) -> (u64, u64) {
        let idle = self.statements.idle.lock().map(|i| i.len()).unwrap_or(0);
        let open = self
            .statement_max()
            .saturating_sub(self.statements.permits.available_permits());
        let pool_idle = self.pool.num_idle();
        let pool_used = (self.pool.size() as usize).saturating_sub(pool_idle);
        (
            (pool_used + open.saturating_sub(idle)) as u64,
            (pool_idle + idle) as u64,
        )
    }

    /// The most connections this handle opens: sqlx's pool's and as many again for
    /// statements.
    pub fn max_connections(&self) -> u64 {
        (self.pool.options().get_max_connections() as u64) + self.statement_max() as u64
    }

    /// The most connections statements open: as many as sqlx's pool (the semaphore's permits
    /// were made from it).
    fn statement_max(&self) -> usize {
        self.pool.options().get_max_connections() as usize
    }
}

/// A single statement on `&Db` runs on a statement connection (see the module's
/// documentation). Its rows are read whole before the first is handed on, so a statement never
/// holds its connection while the caller works through them.
impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let all = async move {
            self.open()?;
            let mut lease = self.statements.lease().await?;
            let result: Result<Vec<_>, sqlx::Error> =
                lease.conn().fetch_many(query).try_collect().await;
            lease.keep_if(&result);
            result
        };
        futures_util::stream::once(all)
            .map_ok(|steps| futures_util::stream::iter(steps.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move {
            self.open()?;
            let mut lease = self.statements.lease().await?;
            let result = lease.conn().fetch_optional(query).await;
            lease.keep_if(&result);
            result
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.describe(sql)
    }
}
