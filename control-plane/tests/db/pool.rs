//! The handle's statement connections (`control_plane::pool::Db`), against a real database:
//! what they keep, what they close, how many they open. What a connection the database dropped
//! does to them is in `server/tests/pool.rs`.

use control_plane::pool::{Db, options};
use control_plane::{Error, Naming};
use sqlx::Executor;

async fn backend(db: &Db) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(db)
        .await
}

#[tokio::test]
async fn a_statement_connection_is_kept_after_an_answer_and_closed_after_a_cancel() {
    let test_db = crate::support::empty_db().await;
    let cp = control_plane::ControlPlane::new(test_db.pool().clone(), Naming::default());
    let db = cp.pool();

    let first = backend(db).await.unwrap();
    assert_eq!(backend(db).await.unwrap(), first, "kept and used again");

    // The database's refusal leaves the connection ready for the next statement.
    let refused = sqlx::query_scalar::<_, i32>("SELECT 1 / 0")
        .fetch_one(db)
        .await
        .expect_err("division by zero");
    assert_eq!(
        refused
            .as_database_error()
            .and_then(|e| e.code())
            .as_deref(),
        Some("22012")
    );
    assert_eq!(backend(db).await.unwrap(), first, "kept after a refusal");

    // A statement given up on midway leaves its connection busy: it is closed, not handed to
    // the next statement (which would first wait for the abandoned one to finish).
    let abandoned = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        sqlx::query("SELECT pg_sleep(30)").execute(db),
    )
    .await;
    assert!(abandoned.is_err(), "gave up on the sleep");
    let after = backend(db).await.unwrap();
    assert_ne!(
        after, first,
        "a new connection after the cancelled statement"
    );
    let gone: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(first)
        .fetch_one(test_db.pool())
        .await
        .unwrap();
    assert!(gone, "the abandoned backend ended");

    // Rows come back whole and in order, and a write says what it changed.
    let rows: Vec<i32> = sqlx::query_scalar("SELECT g FROM generate_series(1, 1000) g")
        .fetch_all(db)
        .await
        .unwrap();
    assert_eq!(rows, (1..=1000).collect::<Vec<_>>());
    let done = db
        .execute("SELECT 1 FROM generate_series(1, 3)")
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 3);
}

/// Behind a proxy, a connection opened before a failover can end up on a server that is now a
/// standby. Its refusal to write (25006) is an outage for the caller (503, retry), and the
/// connection is closed rather than handed to the next statement. A session set read-only
/// answers a write exactly as a standby does.
#[tokio::test]
async fn a_standbys_refusal_to_write_is_an_outage_and_its_connection_is_closed() {
    let test_db = crate::support::empty_db().await;
    let cp = control_plane::ControlPlane::new(test_db.pool().clone(), Naming::default());
    let db = cp.pool();

    let first = backend(db).await.unwrap();
    db.execute("SET SESSION default_transaction_read_only = on")
        .await
        .unwrap();
    assert_eq!(
        backend(db).await.unwrap(),
        first,
        "still the same connection"
    );
    let refused = db
        .execute("CREATE TABLE written_on_a_standby (x int)")
        .await
        .expect_err("a read-only session refuses to write");
    assert_eq!(
        refused
            .as_database_error()
            .and_then(|e| e.code())
            .as_deref(),
        Some("25006")
    );
    assert!(
        matches!(Error::from(refused), Error::Outage(_)),
        "an outage, not a bug"
    );
    assert_ne!(
        backend(db).await.unwrap(),
        first,
        "the read-only connection was closed, not kept"
    );
    db.execute("CREATE TABLE written_on_the_primary (x int)")
        .await
        .expect("a new connection writes");
}

#[tokio::test]
async fn statements_open_no_more_connections_than_the_pool_and_wait_then_time_out_as_an_outage() {
    let test_db = crate::support::empty_db().await;
    let pool = options()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_millis(300))
        .connect_lazy_with(test_db.pool().connect_options().as_ref().clone());
    let db = Db::new(pool.clone());
    assert_eq!(
        db.max_connections(),
        2,
        "the pool's one and one for statements"
    );

    let busy = {
        let db = db.clone();
        tokio::spawn(async move {
            sqlx::query("SELECT pg_sleep(1.5)")
                .execute(&db)
                .await
                .map(|_| ())
        })
    };
    // Wait until the sleep holds the one statement connection (a statement that never
    // starts fails the test rather than hanging it).
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while db.connections().0 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the sleeping statement took the connection within 10 s");
    assert_eq!(db.connections(), (1, 0));
    let waited = backend(&db)
        .await
        .expect_err("no connection within the timeout");
    assert!(matches!(waited, sqlx::Error::PoolTimedOut), "{waited}");
    assert!(matches!(Error::from(waited), Error::Outage(_)));

    busy.await.unwrap().unwrap();
    assert_eq!(db.connections(), (0, 1), "back and idle");
    backend(&db).await.expect("free again");

    // Transactions come from sqlx's pool, beside the statements' connection.
    let mut tx = db.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    backend(&db)
        .await
        .expect("a statement beside an open transaction");
    tx.commit().await.unwrap();

    pool.close().await;
    let closed = backend(&db).await.expect_err("the pool is closed");
    assert!(matches!(closed, sqlx::Error::PoolClosed), "{closed}");
}
