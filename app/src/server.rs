//! Server-side glue for server functions: how they reach the control plane and the session.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use control_plane::ControlPlane;
use control_plane::auth::Principal;
use control_plane::ids::UserId;
use leptos::prelude::use_context;
use serde::{Deserialize, Serialize};
use tower_sessions::Session;

use crate::AppError;

/// The control plane provided by the server for this request.
pub fn control_plane() -> Result<ControlPlane, AppError> {
    use_context::<ControlPlane>()
        .ok_or_else(|| AppError::internal("ControlPlane missing from the request context"))
}

/// Session rules the server configures and provides to every request.
#[derive(Clone, Copy, Debug)]
pub struct SessionPolicy {
    /// A session ends this long after sign-in, however active it is. (The idle timeout is
    /// the session cookie's own expiry, set on the session layer.)
    pub absolute_timeout: Duration,
}

const SIGNED_IN: &str = "signed_in";

/// What the session remembers about its user.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SignedIn {
    user: UserId,
    /// Seconds since the Unix epoch.
    at: u64,
    /// `break_glass` or `oidc`.
    method: String,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Marks `session` as signed in as `principal`. The session id is replaced first, so an id
/// planted before sign-in (session fixation) is worthless afterwards.
pub async fn sign_in(
    session: &Session,
    principal: &Principal,
    method: &str,
) -> Result<(), AppError> {
    session.cycle_id().await.map_err(AppError::internal)?;
    session
        .insert(
            SIGNED_IN,
            SignedIn {
                user: principal.user_id,
                at: now_secs(),
                method: method.to_string(),
            },
        )
        .await
        .map_err(AppError::internal)?;
    tracing::info!(user.id = %principal.user_id, auth.method = method, "signed in");
    Ok(())
}

/// The signed-in principal of `session`, if any and still valid. Ends sessions that are past
/// the absolute timeout or whose user is gone.
pub async fn principal_of(
    session: &Session,
    cp: &ControlPlane,
    policy: &SessionPolicy,
) -> Result<Option<Principal>, AppError> {
    let Some(signed_in) = session
        .get::<SignedIn>(SIGNED_IN)
        .await
        .map_err(AppError::internal)?
    else {
        return Ok(None);
    };
    if now_secs().saturating_sub(signed_in.at) > policy.absolute_timeout.as_secs() {
        tracing::info!(user.id = %signed_in.user, "session reached its absolute timeout");
        session.flush().await.map_err(AppError::internal)?;
        return Ok(None);
    }
    match cp.principal(signed_in.user).await? {
        Some(p) => Ok(Some(p)),
        None => {
            session.flush().await.map_err(AppError::internal)?;
            Ok(None)
        }
    }
}

/// The current request's session.
pub async fn session() -> Result<Session, AppError> {
    leptos_axum::extract::<Session>()
        .await
        .map_err(AppError::internal)
}

/// The signed-in principal of the current request, if any.
pub async fn current_principal() -> Result<Option<Principal>, AppError> {
    let cp = control_plane()?;
    let policy = use_context::<SessionPolicy>()
        .ok_or_else(|| AppError::internal("SessionPolicy missing from the request context"))?;
    principal_of(&session().await?, &cp, &policy).await
}

/// The signed-in principal, or [`AppError::Unauthenticated`].
pub async fn require_principal() -> Result<Principal, AppError> {
    current_principal().await?.ok_or(AppError::Unauthenticated)
}
