//! Readiness: the database answers and every migration this build knows is applied.

use sqlx::PgPool;

use crate::MIGRATOR;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready {
        migrations: usize,
    },
    /// The database could not be reached or queried.
    DatabaseUnavailable(String),
    /// Reachable, but the schema is behind (or a migration failed half-way).
    MigrationsPending {
        applied: usize,
        expected: usize,
    },
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready { .. })
    }
}

/// Never fails: an error is itself the answer.
#[tracing::instrument(skip_all)]
pub async fn readiness(pool: &PgPool) -> Readiness {
    let expected: Vec<i64> = MIGRATOR
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| m.version)
        .collect();
    // A fresh database has no _sqlx_migrations table yet: that is "pending", not "down".
    let table = match sqlx::query_scalar!("SELECT to_regclass('public._sqlx_migrations')::text")
        .fetch_one(pool)
        .await
    {
        Ok(t) => t,
        Err(e) => return unavailable(e),
    };
    if table.is_none() {
        return Readiness::MigrationsPending {
            applied: 0,
            expected: expected.len(),
        };
    }
    let applied: Vec<i64> =
        match sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await
        {
            Ok(v) => v,
            Err(e) => return unavailable(e),
        };
    let missing = expected.iter().filter(|v| !applied.contains(v)).count();
    if missing == 0 {
        Readiness::Ready {
            migrations: expected.len(),
        }
    } else {
        Readiness::MigrationsPending {
            applied: expected.len() - missing,
            expected: expected.len(),
        }
    }
}

fn unavailable(e: sqlx::Error) -> Readiness {
    if crate::pool::is_outage(&e) {
        crate::pool::outage_seen();
    }
    Readiness::DatabaseUnavailable(e.to_string())
}
