//! The server's pool against a database that drops its connections. A binary of its own: the
//! outage mark (`control_plane::pool::outage_seen`) is per process, and another test's
//! stopped database would keep setting it.

mod support;

fn config(database_url: &str) -> server::config::Config {
    support::config(database_url, &[])
}

/// A connection the database dropped (a restart, an administrator ending backends) is checked
/// and replaced before a statement sees it once it has sat past the check window; one dropped
/// inside the window fails the one statement that gets it (neither sqlx's pool nor the
/// statements' connections check one that came back healthy a moment ago:
/// control_plane::pool), as an outage, and is then closed, so the statement after it gets a
/// new one; once an outage is seen, every connection idle since is checked. Both ways a
/// statement reaches the database: sqlx's pool and the handle's `Db`.
#[tokio::test]
async fn the_pool_replaces_connections_the_database_dropped() {
    let db = test_db::migrated().await;
    let pool = server::pool(&config(&db.url())).unwrap();
    dropped_connections_are_replaced(&pool, db.pool()).await;
    let statements = control_plane::pool::Db::new(server::pool(&config(&db.url())).unwrap());
    dropped_connections_are_replaced(&statements, db.pool()).await;
}

async fn dropped_connections_are_replaced<'a, E>(statements: E, killer: &sqlx::PgPool)
where
    E: sqlx::Executor<'a, Database = sqlx::Postgres> + Copy,
{
    let backend = || async {
        sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
            .fetch_one(statements)
            .await
    };
    let drop_backend = |pid: i32| async move {
        let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
            .bind(pid)
            .fetch_one(killer)
            .await
            .unwrap();
        assert!(ended, "backend {pid} ended");
    };
    let window = control_plane::pool::CHECK_AFTER_IDLE;

    // Past the window: checked, replaced, and the statement never sees the dead one.
    let first = backend().await.unwrap();
    drop_backend(first).await;
    tokio::time::sleep(window + std::time::Duration::from_millis(100)).await;
    let second = backend().await.expect("a fresh connection, at once");
    assert_ne!(first, second);

    // Inside the window: the one statement that gets the dead connection fails with the
    // database's word for it, and the next gets a new connection. (A machine too slow to
    // end a backend inside the window would see it checked instead; try again then.)
    let mut used = second;
    let mut failed_once = false;
    for _ in 0..5 {
        let before = std::time::Instant::now();
        drop_backend(used).await;
        if before.elapsed() >= window / 2 {
            used = backend().await.unwrap();
            continue;
        }
        let error = match backend().await {
            Err(error) => error,
            // Checked after all (an outage this process noted after the connection came
            // back); try again.
            Ok(pid) => {
                used = pid;
                continue;
            }
        };
        assert!(
            error.as_database_error().and_then(|e| e.code()).as_deref() == Some("57P01"),
            "ended by the administrator: {error}"
        );
        assert!(
            matches!(
                control_plane::Error::from(error),
                control_plane::Error::Outage(_)
            ),
            "answered as an outage (503, Retry-After), as a request in flight during a restart is"
        );
        let next = backend().await.expect("a new connection after the failure");
        assert_ne!(next, used);
        failed_once = true;
        used = next;
        break;
    }
    assert!(
        failed_once,
        "five tries, and the dropped connection was never handed out unchecked"
    );

    // Once the process has seen an outage, a connection idle since is checked however briefly
    // it sat: a restart costs one failed statement, not one per pooled connection.
    drop_backend(used).await;
    control_plane::pool::outage_seen();
    let after = backend().await.expect("checked, and replaced");
    assert_ne!(after, used);
}
