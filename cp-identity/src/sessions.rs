//! Browser sessions, stored with the user each is signed in as.
//!
//! The web layer decides what a session holds (it keeps a JSON object here, opaque to this
//! module) and when it ends; this module keeps the user in a column beside it, so reading a
//! session reads its user in the same statement: every signed-in page starts with one
//! statement instead of two (#22). A user's sessions are deleted with the user.

use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::ControlPlane;
use crate::auth::Principal;
use crate::error::Result;
use crate::ids::{TenantId, UserId};

/// A session as read back: what the web layer stored, and the user it is signed in as.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredSession {
    pub data: Map<String, Value>,
    pub expires_at: OffsetDateTime,
    /// The session's user as they are now (their email, name and platform role read in the
    /// same statement as the session); `None` for a session nobody signed in to.
    pub user: Option<Principal>,
}

/// What a session is written with.
#[derive(Clone, Copy, Debug)]
pub struct SessionWrite<'a> {
    /// The session id the browser's cookie carries.
    pub id: &'a str,
    /// Who is signed in, if anyone.
    pub user: Option<UserId>,
    pub data: &'a Map<String, Value>,
    pub expires_at: OffsetDateTime,
}

/// Reading and writing browser sessions. Only the web layer's session store calls these.
#[allow(async_fn_in_trait)]
pub trait SessionsApi {
    /// The unexpired session `id`, with its user.
    async fn session(&self, id: &str) -> Result<Option<StoredSession>>;
    /// Writes a new session; `false`, and nothing written, when the id is already taken.
    async fn create_session(&self, session: SessionWrite<'_>) -> Result<bool>;
    /// Writes a session, new or not.
    async fn save_session(&self, session: SessionWrite<'_>) -> Result<()>;
    async fn delete_session(&self, id: &str) -> Result<()>;
    /// Deletes every expired session; how many.
    async fn delete_expired_sessions(&self) -> Result<u64>;
}

impl SessionsApi for ControlPlane {
    #[tracing::instrument(skip_all)]
    async fn session(&self, id: &str) -> Result<Option<StoredSession>> {
        let Some(row) = sqlx::query!(
            r#"SELECT s.data, s.expires_at, u.id AS "user_id?: UserId", u.email AS "email?",
                      u.display_name AS "display_name?", u.platform_role,
                      h.tenant_id AS "home_id?: TenantId", h.display_name AS "home_name?",
                      h.role AS "home_role?"
               FROM sessions s LEFT JOIN users u ON u.id = s.user_id
                    LEFT JOIN LATERAL home_tenant(u.id) h ON true
               WHERE s.id = $1 AND s.expires_at > now()"#,
            id
        )
        .fetch_optional(self.pool())
        .await?
        else {
            return Ok(None);
        };
        let user = match (row.user_id, row.email, row.display_name) {
            (Some(id), Some(email), Some(name)) => Some(Principal::from_row(
                id,
                email,
                name,
                row.platform_role,
                (row.home_id, row.home_name, row.home_role),
            )?),
            _ => None,
        };
        let data = match row.data {
            Value::Object(map) => map,
            // The table's check allows objects only.
            other => {
                return Err(crate::error::Error::Corrupt(format!(
                    "session data is not a JSON object: {other}"
                )));
            }
        };
        Ok(Some(StoredSession {
            data,
            expires_at: row.expires_at,
            user,
        }))
    }

    #[tracing::instrument(skip_all, fields(user.id = ?session.user))]
    async fn create_session(&self, session: SessionWrite<'_>) -> Result<bool> {
        let written = sqlx::query!(
            "INSERT INTO sessions (id, user_id, data, expires_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO NOTHING",
            session.id,
            session.user as Option<UserId>,
            Value::Object(session.data.clone()),
            session.expires_at
        )
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(written == 1)
    }

    #[tracing::instrument(skip_all, fields(user.id = ?session.user))]
    async fn save_session(&self, session: SessionWrite<'_>) -> Result<()> {
        sqlx::query!(
            "INSERT INTO sessions (id, user_id, data, expires_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE
             SET user_id = excluded.user_id, data = excluded.data, expires_at = excluded.expires_at",
            session.id,
            session.user as Option<UserId>,
            Value::Object(session.data.clone()),
            session.expires_at
        )
        .execute(self.pool())
        .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn delete_session(&self, id: &str) -> Result<()> {
        sqlx::query!("DELETE FROM sessions WHERE id = $1", id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn delete_expired_sessions(&self) -> Result<u64> {
        Ok(
            sqlx::query!("DELETE FROM sessions WHERE expires_at <= now()")
                .execute(self.pool())
                .await?
                .rows_affected(),
        )
    }
}
