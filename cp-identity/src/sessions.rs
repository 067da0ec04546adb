//! Browser sessions, stored with the user each is signed in as.
//!
//! The web layer decides what a session holds (it keeps a JSON object here, opaque to this
//! module) and when it ends; this module keeps the user in a column beside it, so reading a
//! session reads its user in the same statement: every signed-in page starts with one
//! statement instead of two (#22). A user's sessions are deleted with the user.
//!
//! A process that runs [`SessionsApi::watch_principal_changes`] also keeps what it read of a
//! signed-in session for up to [`PRINCIPAL_TTL`] ([`PrincipalCache`]), so a signed-in page
//! starts with no statement at all. The database announces every change to what that read
//! returns as the change commits (migration 0042's triggers, on [`PRINCIPAL_CHANNEL`]), and
//! the watcher drops what is kept for that user; while the watcher is not listening, nothing
//! is kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::auth::Principal;
use cp_base::ControlPlane;
use cp_base::error::Result;
use cp_base::ids::{TenantId, UserId};

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

/// The channel migration 0042's triggers announce changes on: a user id whose sessions,
/// user row or memberships changed, or `*` for everything (a tenant renamed or deleted).
pub const PRINCIPAL_CHANNEL: &str = "gpuaas_principals";

/// How long a process keeps a signed-in session's read at most. A change reaches a process
/// sooner, as its announcement arrives (milliseconds); this bounds only what a lost
/// announcement could cost, and the watcher drops everything when it stops listening.
pub const PRINCIPAL_TTL: Duration = Duration::from_secs(5);

/// Sessions kept at most per process (each a few hundred bytes); past it, reads are not kept
/// until the expired ones are swept.
const MAX_KEPT: usize = 10_000;

/// Signed-in sessions as this process last read them, while it hears the database's
/// announcements of changes ([`SessionsApi::watch_principal_changes`]). Per handle: clones
/// share it, a second handle (another replica in a test) has its own.
#[derive(Debug, Default)]
pub struct PrincipalCache {
    state: Mutex<Kept>,
}

#[derive(Debug)]
struct Kept {
    /// Whether this process listens on [`PRINCIPAL_CHANNEL`] now. Nothing is kept, nor handed
    /// out, while it doesn't: a change could go unheard.
    live: bool,
    /// Counts every change heard or made here, and every start and end of listening. A read
    /// is kept only if no change came between its start and its end: a change announced while
    /// a statement ran may have committed after the statement's snapshot.
    epoch: u64,
    /// How long a read is kept ([`PRINCIPAL_TTL`] unless set).
    ttl: Duration,
    sessions: HashMap<String, KeptSession>,
}

impl Default for Kept {
    fn default() -> Self {
        Self {
            live: false,
            epoch: 0,
            ttl: PRINCIPAL_TTL,
            sessions: HashMap::new(),
        }
    }
}

#[derive(Debug)]
struct KeptSession {
    user: UserId,
    until: Instant,
    session: Arc<StoredSession>,
}

impl PrincipalCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps reads for `ttl` instead of [`PRINCIPAL_TTL`] (tests: a long one shows that the
    /// announcements, not the clock, drop what changed).
    pub fn set_ttl(&self, ttl: Duration) {
        self.lock().ttl = ttl;
    }

    /// Whether the watcher listens now, so that reads are kept.
    pub fn is_live(&self) -> bool {
        self.lock().live
    }

    /// How many sessions are kept now.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The session `id` as kept, if it is, still fresh and not expired.
    fn get(&self, id: &str) -> Option<Arc<StoredSession>> {
        let kept = self.lock();
        if !kept.live {
            return None;
        }
        let k = kept.sessions.get(id)?;
        (k.until > Instant::now() && k.session.expires_at > OffsetDateTime::now_utc())
            .then(|| k.session.clone())
    }

    /// Where a read starts: the epoch to give [`Self::keep`], or `None` when nothing is kept.
    fn begin(&self) -> Option<u64> {
        let kept = self.lock();
        kept.live.then_some(kept.epoch)
    }

    /// Keeps a signed-in session read since `epoch`, unless a change came since.
    fn keep(&self, id: &str, epoch: u64, session: &StoredSession) {
        let Some(user) = session.user.as_ref().map(|p| p.user_id) else {
            return;
        };
        let mut kept = self.lock();
        if !kept.live || kept.epoch != epoch {
            return;
        }
        let now = Instant::now();
        if kept.sessions.len() >= MAX_KEPT {
            kept.sessions.retain(|_, k| k.until > now);
            if kept.sessions.len() >= MAX_KEPT {
                return;
            }
        }
        let until = now + kept.ttl;
        kept.sessions.insert(
            id.to_owned(),
            KeptSession {
                user,
                until,
                session: Arc::new(session.clone()),
            },
        );
    }

    /// Drops the session `id` (written or deleted by this process).
    fn forget_session(&self, id: &str) {
        let mut kept = self.lock();
        kept.epoch += 1;
        kept.sessions.remove(id);
    }

    /// Acts on an announcement from [`PRINCIPAL_CHANNEL`]: a user id drops that user's
    /// sessions; anything else (`*`) drops every one.
    fn heard(&self, payload: &str) {
        // Another process proving that it hears the channel (`hears_itself`): no change.
        if payload.starts_with("probe ") {
            return;
        }
        let user = payload.parse::<UserId>().ok();
        let mut kept = self.lock();
        kept.epoch += 1;
        match user {
            Some(user) => kept.sessions.retain(|_, k| k.user != user),
            None => kept.sessions.clear(),
        }
    }

    /// The watcher started (`true`) or stopped listening: either way, nothing kept before
    /// counts.
    fn set_live(&self, live: bool) {
        let mut kept = self.lock();
        kept.epoch += 1;
        kept.live = live;
        kept.sessions.clear();
    }
}

/// Reading and writing browser sessions. Only the web layer's session store calls these.
#[allow(async_fn_in_trait)]
pub trait SessionsApi {
    /// The unexpired session `id`, with its user: as this process keeps it when it does
    /// ([`PrincipalCache`]), else from the database.
    async fn session(&self, id: &str) -> Result<Option<StoredSession>>;
    /// Listens for the database's announcements of changes to sessions, users, memberships
    /// and tenants, keeping signed-in sessions' reads meanwhile ([`PrincipalCache`]); never
    /// returns. When the connection is lost it drops everything kept, keeps nothing, and
    /// listens again. One per process (the server starts it); a handle without one reads
    /// every session from the database.
    async fn watch_principal_changes(&self);
    /// This handle's kept sessions.
    fn principal_cache(&self) -> Arc<PrincipalCache>;
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
        let cache = self.principal_cache();
        if let Some(kept) = cache.get(id) {
            self.metrics().session_read(true);
            return Ok(Some((*kept).clone()));
        }
        let epoch = cache.begin();
        let read = read_session(self, id).await?;
        self.metrics().session_read(false);
        if let (Some(epoch), Some(session)) = (epoch, &read) {
            cache.keep(id, epoch, session);
        }
        Ok(read)
    }

    #[tracing::instrument(skip_all)]
    async fn watch_principal_changes(&self) {
        let cache = self.principal_cache();
        let mut pause = Duration::from_millis(100);
        loop {
            match listen(self).await {
                Ok(mut listener) => {
                    cache.set_live(true);
                    tracing::info!(channel = PRINCIPAL_CHANNEL, "keeping signed-in sessions");
                    pause = Duration::from_millis(100);
                    let ended = loop {
                        match listener.try_recv().await {
                            Ok(Some(n)) => cache.heard(n.payload()),
                            Ok(None) => break None,
                            Err(e) => break Some(e),
                        }
                    };
                    cache.set_live(false);
                    tracing::warn!(
                        error.cause = ended.map(|e| e.to_string()),
                        "lost the database's announcements of session changes; \
                         reading every session from the database until they are back"
                    );
                }
                Err(e) => {
                    tracing::warn!(error.cause = %e, "can't listen for session changes");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    fn principal_cache(&self) -> Arc<PrincipalCache> {
        self.shared::<PrincipalCache>()
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
        let saved = sqlx::query!(
            "INSERT INTO sessions (id, user_id, data, expires_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE
             SET user_id = excluded.user_id, data = excluded.data, expires_at = excluded.expires_at",
            session.id,
            session.user as Option<UserId>,
            Value::Object(session.data.clone()),
            session.expires_at
        )
        .execute(self.pool())
        .await;
        self.principal_cache().forget_session(session.id);
        saved?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn delete_session(&self, id: &str) -> Result<()> {
        let deleted = sqlx::query!("DELETE FROM sessions WHERE id = $1", id)
            .execute(self.pool())
            .await;
        // Whatever the outcome: the announcement reaches other processes; this one forgets at
        // once, so a sign-out here counts from this process's next request.
        self.principal_cache().forget_session(id);
        deleted?;
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

/// A connection of its own that listens on [`PRINCIPAL_CHANNEL`] (outside the pool's budget:
/// it is held for as long as the process runs).
async fn listen(cp: &ControlPlane) -> std::result::Result<sqlx::postgres::PgListener, String> {
    let options = cp.pool().sqlx().connect_options().as_ref().clone();
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options);
    let mut listener = sqlx::postgres::PgListener::connect_with(&own)
        .await
        .map_err(|e| e.to_string())?;
    listener
        .listen(PRINCIPAL_CHANNEL)
        .await
        .map_err(|e| e.to_string())?;
    hears_itself(cp, &mut listener).await?;
    Ok(listener)
}

/// How long a new listener waits for its own announcement.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// Proves that `listener` hears what the pool's connections announce: a NOTIFY sent through
/// the pool must come back to it. Listening alone proves nothing (behind a pooler in
/// transaction mode, or on another database than the pool's, nothing ever arrives), and
/// sessions are kept only while every change is heard.
async fn hears_itself(
    cp: &ControlPlane,
    listener: &mut sqlx::postgres::PgListener,
) -> std::result::Result<(), String> {
    let probe = format!("probe {}", uuid::Uuid::new_v4());
    sqlx::query!("SELECT pg_notify($1, $2)", PRINCIPAL_CHANNEL, probe)
        .execute(cp.pool())
        .await
        .map_err(|e| e.to_string())?;
    let heard = tokio::time::timeout(PROBE_DEADLINE, async {
        loop {
            if listener.recv().await?.payload() == probe {
                return Ok::<(), sqlx::Error>(());
            }
        }
    })
    .await;
    match heard {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "a NOTIFY on {PRINCIPAL_CHANNEL} did not come back within {PROBE_DEADLINE:?}"
        )),
    }
}

/// The unexpired session `id` with its user, from the database.
async fn read_session(cp: &ControlPlane, id: &str) -> Result<Option<StoredSession>> {
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
    .fetch_optional(cp.pool())
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
            return Err(cp_base::error::Error::Corrupt(format!(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn signed_in(user: UserId) -> StoredSession {
        StoredSession {
            data: Map::new(),
            expires_at: OffsetDateTime::now_utc() + time::Duration::HOUR,
            user: Some(Principal {
                user_id: user,
                email: "ada@example.com".into(),
                display_name: "Ada".into(),
                platform_role: None,
                home: None,
            }),
        }
    }

    #[test]
    fn a_read_is_kept_only_if_nothing_changed_while_it_ran() {
        let cache = PrincipalCache::default();
        let (ada, bob) = (UserId::new_random(), UserId::new_random());
        assert_eq!(
            cache.begin(),
            None,
            "nothing is kept before the watcher listens"
        );
        cache.set_live(true);

        let epoch = cache.begin().unwrap();
        cache.heard(&bob.to_string());
        cache.keep("s-ada", epoch, &signed_in(ada));
        assert!(
            cache.get("s-ada").is_none(),
            "a change heard while the read ran (even another user's) may have come after it"
        );
        let epoch = cache.begin().unwrap();
        cache.keep("s-ada", epoch, &signed_in(ada));
        cache.keep("s-bob", cache.begin().unwrap(), &signed_in(bob));
        assert!(cache.get("s-ada").is_some());

        cache.heard(&bob.to_string());
        assert!(
            cache.get("s-bob").is_none(),
            "Bob's change drops Bob's sessions"
        );
        assert!(cache.get("s-ada").is_some(), "and no one else's");
        cache.forget_session("s-ada");
        assert!(cache.get("s-ada").is_none());

        cache.keep("s-ada", cache.begin().unwrap(), &signed_in(ada));
        cache.heard("*");
        assert!(cache.is_empty(), "a tenant's change drops everything");

        cache.keep("s-ada", cache.begin().unwrap(), &signed_in(ada));
        let epoch = cache.begin().unwrap();
        cache.set_live(false);
        assert!(cache.is_empty());
        cache.set_live(true);
        cache.keep("s-bob", epoch, &signed_in(bob));
        assert!(cache.is_empty(), "a read from before the channel was lost");

        let mut expired = signed_in(ada);
        expired.expires_at = OffsetDateTime::now_utc() - time::Duration::SECOND;
        cache.keep("s-old", cache.begin().unwrap(), &expired);
        assert!(
            cache.get("s-old").is_none(),
            "an expired session is never handed out"
        );
        cache.set_ttl(Duration::ZERO);
        cache.keep("s-ada", cache.begin().unwrap(), &signed_in(ada));
        assert!(cache.get("s-ada").is_none(), "nor one kept past its time");
    }
}
