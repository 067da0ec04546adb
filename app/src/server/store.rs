//! Where tower-sessions keeps sessions: the `sessions` table, through the control plane.
//!
//! A session is read with its user in one statement ([`SessionsApi::session`]). The user comes
//! back in the record under [`USER`], which [`super::principal_of`] reads instead of looking
//! the user up again; the key is never written back (the user is a column, kept from the
//! session's sign-in).

use control_plane::ControlPlane;
use control_plane::ids::UserId;
use control_plane::sessions::{SessionWrite, SessionsApi};
use serde_json::{Map, Value};
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

use super::{SIGNED_IN, SignedIn};

/// The record's key for the session's user as read with it (a [`Principal`] as JSON). Absent
/// when the session was not read from the store in this request (signing in writes a new one).
///
/// [`Principal`]: control_plane::auth::Principal
pub(super) const USER: &str = "_user";

#[derive(Clone)]
pub struct PortalSessionStore {
    cp: ControlPlane,
}

impl PortalSessionStore {
    pub fn new(cp: ControlPlane) -> Self {
        Self { cp }
    }

    /// Deletes expired sessions every `period`, forever. Any replica may run it: the delete is
    /// idempotent.
    pub async fn delete_expired_every(self, period: std::time::Duration) {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            match self.cp.delete_expired_sessions().await {
                Ok(n) => tracing::debug!(sessions = n, "expired sessions deleted"),
                Err(e) => tracing::warn!(error.cause = %e, "deleting expired sessions failed"),
            }
        }
    }
}

impl std::fmt::Debug for PortalSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PortalSessionStore")
    }
}

fn backend(e: control_plane::Error) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

/// What is written for a record: its data without [`USER`], and the user it is signed in as.
struct Written {
    id: String,
    user: Option<UserId>,
    data: Map<String, Value>,
    expires_at: time::OffsetDateTime,
}

impl Written {
    fn of(record: &Record) -> Result<Self, session_store::Error> {
        let user = match record.data.get(SIGNED_IN) {
            Some(v) => Some(
                serde_json::from_value::<SignedIn>(v.clone())
                    .map_err(|e| session_store::Error::Encode(e.to_string()))?
                    .user,
            ),
            None => None,
        };
        let data = record
            .data
            .iter()
            .filter(|(k, _)| k.as_str() != USER)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Self {
            id: record.id.to_string(),
            user,
            data,
            expires_at: record.expiry_date,
        })
    }

    fn write(&self) -> SessionWrite<'_> {
        SessionWrite {
            id: &self.id,
            user: self.user,
            data: &self.data,
            expires_at: self.expires_at,
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for PortalSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        loop {
            if self
                .cp
                .create_session(Written::of(record)?.write())
                .await
                .map_err(backend)?
            {
                return Ok(());
            }
            // 128 random bits taken: try others.
            record.id = Id::default();
        }
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        self.cp
            .save_session(Written::of(record)?.write())
            .await
            .map_err(backend)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let Some(stored) = self.cp.session(&id.to_string()).await.map_err(backend)? else {
            return Ok(None);
        };
        let mut data: std::collections::HashMap<String, Value> = stored.data.into_iter().collect();
        data.remove(USER);
        if let Some(user) = stored.user {
            data.insert(
                USER.into(),
                serde_json::to_value(user)
                    .map_err(|e| session_store::Error::Encode(e.to_string()))?,
            );
        }
        Ok(Some(Record {
            id: *id,
            data,
            expiry_date: stored.expires_at,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        self.cp
            .delete_session(&id.to_string())
            .await
            .map_err(backend)
    }
}
