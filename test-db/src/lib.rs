//! Test databases copied from a template.
//!
//! Replaying every migration (and seeding the demo) for each of a hundred tests is most of what
//! they wait for. Here a test process builds each kind of database once, as a template, and
//! every test gets `CREATE DATABASE … TEMPLATE …`: a copy in milliseconds, dropped when the
//! test's [`TestDb`] is dropped (also when the test panics).
//!
//! The server is the one `DATABASE_URL` names (`cargo xtask test` starts a private throwaway
//! cluster and sets it). Templates are per process (`tmpl_<kind>_<pid>`), so test binaries
//! running at once never share one; those a finished process left behind are dropped by the
//! next process that starts, when its pid is gone from this machine.
//!
//! The control plane's kinds are here ([`migrated`], [`demo`], [`blank`]) so that every test
//! crate shares them. (This crate depends on `control-plane`, which has it as a
//! dev-dependency: integration tests link the one `control-plane` library, so the types agree.)

pub mod dns;
pub mod fixtures;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool};

/// What a template is built with: given a pool on the fresh template database, migrate it (and
/// seed it). Runs once per process and kind.
pub type Build = fn(PgPool) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// A test's own database. Dropping it drops the database (closing any connection still open).
#[derive(Debug)]
pub struct TestDb {
    pool: PgPool,
    name: String,
    admin: PgConnectOptions,
}

impl TestDb {
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A control plane on this database, with the default naming.
    pub fn control_plane(&self) -> control_plane::ControlPlane {
        control_plane::ControlPlane::new(self.pool.clone(), control_plane::Naming::default())
    }

    /// The connection URL of this database, for code that connects by itself (a server
    /// under test, say).
    pub fn url(&self) -> String {
        let base = admin_url();
        match base.rsplit_once('/') {
            Some((server, rest)) => {
                let query = rest.split_once('?').map(|(_, q)| format!("?{q}"));
                format!("{server}/{}{}", self.name, query.unwrap_or_default())
            }
            None => base,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        watchdog::forget(&self.name);
        // Drop is synchronous and may run inside a runtime: a thread of its own does it.
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            rt.block_on(async {
                let mut conn = PgConnection::connect_with(&admin).await?;
                conn.execute(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#).as_str())
                    .await
                    .map(drop)
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("test-db: could not drop {}: {e}", self.name);
        }
    }
}

fn admin_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "DATABASE_URL is not set: database tests need a PostgreSQL server \
             (`cargo xtask test` starts a private one and sets it)"
        )
    })
}

fn admin_options() -> PgConnectOptions {
    PgConnectOptions::from_str(&admin_url()).expect("DATABASE_URL is a PostgreSQL URL")
}

/// Per kind, the template's name once it is built.
type Templates = Mutex<HashMap<&'static str, Arc<tokio::sync::OnceCell<String>>>>;

/// One cell per kind, so that concurrent tests wait for the one build.
fn templates() -> &'static Templates {
    static TEMPLATES: OnceLock<Templates> = OnceLock::new();
    TEMPLATES.get_or_init(Default::default)
}

/// A fresh database copied from the `kind` template, built with `build` the first time.
/// `kind`: lowercase letters, digits and '_'.
pub async fn fresh(kind: &'static str, build: Build) -> TestDb {
    assert!(
        kind.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "a template kind is lowercase letters, digits and '_': {kind}"
    );
    let cell = templates()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(kind)
        .or_default()
        .clone();
    let template = cell
        .get_or_init(|| build_template(kind, build))
        .await
        .clone();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let admin = admin_options();
    let mut conn = PgConnection::connect_with(&admin)
        .await
        .expect("connecting to DATABASE_URL");
    conn.execute(format!(r#"CREATE DATABASE "{name}" TEMPLATE "{template}""#).as_str())
        .await
        .unwrap_or_else(|e| panic!("creating {name} from {template}: {e}"));
    conn.close().await.ok();
    let pool = PgPoolOptions::new()
        .max_connections(40)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(admin.clone().database(&name))
        .await
        .unwrap_or_else(|e| panic!("connecting to {name}: {e}"));
    watchdog::watch(&name, &admin);
    TestDb { pool, name, admin }
}

/// Says what a test database's sessions are doing when its test runs unusually long (once, to
/// the process's real stderr, which the test harness does not capture): a test that hangs in
/// CI then leaves its lock waits and queries in the log.
mod watchdog {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    /// 180 s, or `TEST_DB_WATCHDOG_SECS`.
    fn after() -> Duration {
        let secs = std::env::var("TEST_DB_WATCHDOG_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(180);
        Duration::from_secs(secs)
    }

    type Alive = Mutex<HashMap<String, (Instant, PgConnectOptions)>>;

    fn alive() -> &'static Alive {
        static ALIVE: OnceLock<Alive> = OnceLock::new();
        ALIVE.get_or_init(|| {
            std::thread::spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_secs(10));
                    let due: Vec<(String, PgConnectOptions)> = {
                        let mut map = alive().lock().unwrap_or_else(|p| p.into_inner());
                        let due = map
                            .iter()
                            .filter(|(_, (since, _))| since.elapsed() > after())
                            .map(|(n, (_, o))| (n.clone(), o.clone()))
                            .collect::<Vec<_>>();
                        for (n, _) in &due {
                            map.remove(n);
                        }
                        due
                    };
                    for (name, admin) in due {
                        report(&name, &admin);
                    }
                }
            });
            Mutex::default()
        })
    }

    pub(super) fn watch(name: &str, admin: &PgConnectOptions) {
        alive()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), (Instant::now(), admin.clone()));
    }

    pub(super) fn forget(name: &str) {
        alive()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    fn report(name: &str, admin: &PgConnectOptions) {
        let rows = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| {
                rt.block_on(async {
                    let mut conn = PgConnection::connect_with(admin).await?;
                    sqlx::query_as::<_, (i32, String, String, String, String)>(
                        "SELECT pid, coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, ''),
                                coalesce(array_to_string(pg_blocking_pids(pid), ','), ''),
                                left(coalesce(query, ''), 300)
                         FROM pg_stat_activity WHERE datname = $1",
                    )
                    .bind(name)
                    .fetch_all(&mut conn)
                    .await
                })
                .map_err(|e| e.to_string())
            });
        let mut out = format!(
            "\ntest-db: {name} has been in use for over {} s; its sessions:\n",
            after().as_secs()
        );
        match rows {
            Ok(rows) => {
                for (pid, state, wait, blocked_by, query) in rows {
                    out += &format!(
                        "  pid {pid} {state} wait={wait} blocked_by=[{blocked_by}] {query}\n"
                    );
                }
            }
            Err(e) => out += &format!("  (could not look: {e})\n"),
        }
        let _ = std::io::stderr().write_all(out.as_bytes());
    }
}

async fn build_template(kind: &'static str, build: Build) -> String {
    let admin = admin_options();
    let mut conn = PgConnection::connect_with(&admin)
        .await
        .expect("connecting to DATABASE_URL");
    drop_leftovers(&mut conn).await;
    let name = format!("tmpl_{kind}_{}", std::process::id());
    conn.execute(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#).as_str())
        .await
        .expect("dropping an old template");
    conn.execute(format!(r#"CREATE DATABASE "{name}""#).as_str())
        .await
        .unwrap_or_else(|e| panic!("creating template {name}: {e}"));
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(admin.clone().database(&name))
        .await
        .unwrap_or_else(|e| panic!("connecting to template {name}: {e}"));
    build(pool.clone()).await;
    // A template must have no connections when it is copied.
    pool.close().await;
    conn.close().await.ok();
    name
}

/// Drops the templates and test databases of processes that are gone from this machine.
async fn drop_leftovers(conn: &mut PgConnection) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'tmpl\\_%' OR datname LIKE 'test\\_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    for name in names {
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = conn
            .execute(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#).as_str())
            .await;
    }
}

/// `tmpl_demo_1234` → 1234; `test_1234_7` → 1234.
fn owner_pid(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix("test_") {
        return rest.split('_').next()?.parse().ok();
    }
    name.strip_prefix("tmpl_")?.rsplit('_').next()?.parse().ok()
}

/// A fresh database with every migration applied.
pub async fn migrated() -> TestDb {
    fresh("migrated", |pool| {
        Box::pin(async move {
            control_plane::MIGRATOR.run(&pool).await.unwrap();
        })
    })
    .await
}

/// A fresh database with every migration applied and the demo seeded (tenants, people,
/// projects, SKUs, listings and publishers; no nodes).
pub async fn demo() -> TestDb {
    fresh("demo", |pool| {
        Box::pin(async move {
            control_plane::MIGRATOR.run(&pool).await.unwrap();
            use control_plane::demo::DemoApi;
            control_plane::ControlPlane::new(pool, control_plane::Naming::default())
                .seed_demo()
                .await
                .unwrap();
        })
    })
    .await
}

/// A fresh database with nothing applied.
pub async fn blank() -> TestDb {
    fresh("blank", |_| Box::pin(async {})).await
}

#[cfg(test)]
mod tests {
    use super::owner_pid;

    #[test]
    fn leftovers_are_recognised_by_their_process_id() {
        assert_eq!(owner_pid("tmpl_demo_1234"), Some(1234));
        assert_eq!(owner_pid("tmpl_migrated_only_77"), Some(77));
        assert_eq!(owner_pid("test_1234_7"), Some(1234));
        assert_eq!(owner_pid("portal"), None);
        assert_eq!(owner_pid("test_db"), None);
        assert_eq!(owner_pid("tmpl_x"), None);
    }
}
