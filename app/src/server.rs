//! Server-side glue for server functions: how they reach the control plane and the session.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use control_plane::ControlPlane;
use control_plane::auth::Principal;
use control_plane::ids::UserId;
use leptos::prelude::use_context;
use serde::{Deserialize, Serialize};
use tower_sessions::Session;

use crate::AppError;

mod store;
pub use store::PortalSessionStore;

/// An id a caller sent. A malformed one names nothing the caller may see: 404, as for another
/// tenant's id.
pub fn id<T>(sent: impl Into<portal_types::IdArg<T>>) -> Result<T, AppError> {
    sent.into().known().ok_or(AppError::NotFound)
}

/// The control plane provided by the server for this request.
pub fn control_plane() -> Result<ControlPlane, AppError> {
    use_context::<ControlPlane>()
        .ok_or_else(|| AppError::internal("ControlPlane missing from the request context"))
}

/// The portal's public origin (`scheme://host[:port]`), provided to every request; OIDC
/// redirect URIs are built from it.
#[derive(Clone, Debug)]
pub struct PublicOrigin(pub std::sync::Arc<str>);

impl PublicOrigin {
    /// Where identity providers send the browser back to.
    pub fn callback_url(&self) -> String {
        format!("{}/auth/callback", self.0)
    }
}

/// Session rules the server configures and provides to every request.
#[derive(Clone, Copy, Debug)]
pub struct SessionPolicy {
    /// A session ends this long after sign-in, however active it is.
    pub absolute_timeout: Duration,
    /// A session ends this long after its last request (the session layer's expiry; it slides
    /// because [`principal_of`] rewrites an active session, see [`SEEN`]).
    pub idle_timeout: Duration,
}

const SIGNED_IN: &str = "signed_in";

/// When a signed-in session last had its expiry pushed back (seconds since the epoch). The
/// store keeps a session until its last *write* plus the idle timeout, and a session nothing
/// changed is never written, so without this the idle timeout would count from sign-in. An
/// active session is rewritten once a tenth of the idle timeout has passed since the last
/// write: at most one write per session every 6 minutes with the default hour.
const SEEN: &str = "seen";

const SSO_PENDING: &str = "sso_pending";

/// What the session remembers about its user.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SignedIn {
    user: UserId,
    /// Seconds since the Unix epoch.
    at: u64,
    /// `break_glass` or `oidc`.
    method: String,
    /// For `oidc`: the tenant whose provider signed the user in, for the provider's
    /// end-session endpoint at sign-out. No token or claims are kept.
    #[serde(default)]
    sso: Option<SsoSession>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SsoSession {
    tenant: control_plane::TenantId,
}

/// Keeps a started single sign-on in the (not yet signed-in) session.
pub async fn store_pending_sso(
    session: &Session,
    pending: &control_plane::sso::PendingSso,
) -> Result<(), AppError> {
    session
        .insert(SSO_PENDING, pending)
        .await
        .map_err(AppError::internal)
}

const RETURN_TO: &str = "return_to";

/// Remembers where to go once the sign-in that is starting completes (a local path only).
pub async fn store_return_to(session: &Session, next: Option<&str>) -> Result<(), AppError> {
    match next.and_then(crate::auth::local_path) {
        Some(path) => session
            .insert(RETURN_TO, path)
            .await
            .map_err(AppError::internal),
        None => session
            .remove::<String>(RETURN_TO)
            .await
            .map(drop)
            .map_err(AppError::internal),
    }
}

/// Where to go after a completed sign-in: the remembered local path, once.
pub async fn take_return_to(session: &Session) -> Option<String> {
    let path: Option<String> = session.remove(RETURN_TO).await.ok().flatten();
    path.filter(|p| crate::auth::local_path(p).is_some())
}

/// Takes the started sign-in out of the session: each can be completed at most once.
pub async fn take_pending_sso(
    session: &Session,
) -> Result<Option<control_plane::sso::PendingSso>, AppError> {
    session
        .remove(SSO_PENDING)
        .await
        .map_err(AppError::internal)
}

/// Like [`sign_in`], for a completed single sign-on.
pub async fn sign_in_sso(
    session: &Session,
    done: &control_plane::sso::SsoSignIn,
) -> Result<(), AppError> {
    begin_session(
        session,
        SignedIn {
            user: done.principal.user_id,
            at: now_secs(),
            method: "oidc".into(),
            sso: Some(SsoSession {
                tenant: done.tenant,
            }),
        },
    )
    .await?;
    tracing::info!(user.id = %done.principal.user_id, tenant.id = %done.tenant, auth.method = "oidc", "signed in");
    Ok(())
}

/// Ends the session. Returns where to send the browser: the provider's end-session endpoint
/// for single sign-on users whose provider has one, else `/`.
pub async fn sign_out(
    session: &Session,
    cp: &ControlPlane,
    origin: &PublicOrigin,
) -> Result<String, AppError> {
    let signed_in = session
        .get::<SignedIn>(SIGNED_IN)
        .await
        .map_err(AppError::internal)?;
    session.flush().await.map_err(AppError::internal)?;
    RequestPrincipal::forget().await;
    let Some(sso) = signed_in.and_then(|s| s.sso) else {
        return Ok("/".into());
    };
    let home = format!("{}/", origin.0);
    match cp.sso_logout_url(sso.tenant, &home).await {
        Ok(Some(url)) => Ok(url),
        Ok(None) => Ok("/".into()),
        // Signed out here regardless; the provider's session may outlive ours.
        Err(e) => {
            tracing::warn!(error.cause = %e, "provider end-session URL unavailable");
            Ok("/".into())
        }
    }
}

/// The address of the client that sent this request (the TCP peer: behind a proxy, the
/// proxy), when the server was started with connection info.
pub fn client_address() -> Option<std::net::IpAddr> {
    use_context::<http::request::Parts>().and_then(|parts| {
        parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|info| info.0.ip())
    })
}

pub fn public_origin() -> Result<PublicOrigin, AppError> {
    use_context::<PublicOrigin>()
        .ok_or_else(|| AppError::internal("PublicOrigin missing from the request context"))
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Marks `session` as signed in as `principal`.
pub async fn sign_in(
    session: &Session,
    principal: &Principal,
    method: &str,
) -> Result<(), AppError> {
    begin_session(
        session,
        SignedIn {
            user: principal.user_id,
            at: now_secs(),
            method: method.to_string(),
            sso: None,
        },
    )
    .await?;
    tracing::info!(user.id = %principal.user_id, auth.method = method, "signed in");
    Ok(())
}

/// Every sign-in goes through here. The session id is replaced first, so an id planted
/// before sign-in (session fixation) is worthless afterwards.
async fn begin_session(session: &Session, signed_in: SignedIn) -> Result<(), AppError> {
    RequestPrincipal::forget().await;
    session.cycle_id().await.map_err(AppError::internal)?;
    session
        .insert(SIGNED_IN, signed_in)
        .await
        .map_err(AppError::internal)
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
    // The store reads the session's user with the session (`store::USER`); a session signed in
    // during this request was not read from the store, so its user is looked up.
    let user = match session
        .get::<Principal>(store::USER)
        .await
        .map_err(AppError::internal)?
    {
        Some(p) if p.user_id == signed_in.user => Some(p),
        Some(_) => None,
        None => cp.principal(signed_in.user).await?,
    };
    match user {
        Some(p) => {
            slide(session, policy, signed_in.at).await?;
            Ok(Some(p))
        }
        None => {
            session.flush().await.map_err(AppError::internal)?;
            Ok(None)
        }
    }
}

/// Pushes the idle expiry of an active session back, at most once a tenth of the idle timeout.
async fn slide(
    session: &Session,
    policy: &SessionPolicy,
    signed_in_at: u64,
) -> Result<(), AppError> {
    let now = now_secs();
    let last = session
        .get::<u64>(SEEN)
        .await
        .map_err(AppError::internal)?
        .unwrap_or(signed_in_at);
    let every = (policy.idle_timeout.as_secs() / 10).max(1);
    if now.saturating_sub(last) >= every {
        session
            .insert(SEEN, now)
            .await
            .map_err(AppError::internal)?;
    }
    Ok(())
}

/// The current request's session.
pub async fn session() -> Result<Session, AppError> {
    leptos_axum::extract::<Session>()
        .await
        .map_err(AppError::internal)
}

/// Who the current request is signed in as, once looked up. A page's server functions all run
/// in the request that renders it on the server, and each asks who is signed in (the header's
/// user menu too); this keeps the first answer, so the session's user is read from the
/// database once per request instead of once per server function. The server provides a new
/// one to every request; signing in or out forgets it.
#[derive(Clone, Default)]
pub struct RequestPrincipal(std::sync::Arc<tokio::sync::Mutex<Option<Option<Principal>>>>);

impl RequestPrincipal {
    async fn forget() {
        if let Some(known) = use_context::<RequestPrincipal>() {
            *known.0.lock().await = None;
        }
    }
}

/// Allocations the caller was found to view in this request. An allocation's page asks twice
/// (its detail, and its GPU history: server functions of their own, which the browser also
/// calls one at a time); this keeps the first check's proof, so the page checks once. The
/// server provides a new one to every request.
#[derive(Clone, Default)]
pub struct RequestAllocationViews(std::sync::Arc<tokio::sync::Mutex<Vec<AllocationView>>>);

/// An allocation, and the caller's proof that they view its project.
type AllocationView = (
    control_plane::ids::AllocationId,
    control_plane::tenancy::Project<control_plane::tenancy::ProjectViewers>,
);

/// The caller's proof that they may view allocation `id` (its project's viewers), checked once
/// per request.
pub async fn allocation_viewer(
    cp: &ControlPlane,
    principal: &Principal,
    id: control_plane::ids::AllocationId,
) -> Result<control_plane::tenancy::Project<control_plane::tenancy::ProjectViewers>, AppError> {
    use control_plane::tenancy::ProjectViewers;
    let Some(views) = use_context::<RequestAllocationViews>() else {
        return Ok(cp
            .allocation_access::<ProjectViewers>(principal, id)
            .await?);
    };
    // Held while checking, so server functions that ask at once wait for one answer.
    let mut known = views.0.lock().await;
    if let Some((_, who)) = known
        .iter()
        .find(|(a, who)| *a == id && who.user() == principal.user_id)
    {
        return Ok(who.clone());
    }
    let who = cp
        .allocation_access::<ProjectViewers>(principal, id)
        .await?;
    known.push((id, who.clone()));
    Ok(who)
}

/// The signed-in principal of the current request, if any.
pub async fn current_principal() -> Result<Option<Principal>, AppError> {
    let cp = control_plane()?;
    let policy = use_context::<SessionPolicy>()
        .ok_or_else(|| AppError::internal("SessionPolicy missing from the request context"))?;
    let Some(known) = use_context::<RequestPrincipal>() else {
        return principal_of(&session().await?, &cp, &policy).await;
    };
    // Held while looking up, so server functions that ask at once wait for one answer.
    let mut known = known.0.lock().await;
    if let Some(principal) = &*known {
        return Ok(principal.clone());
    }
    let principal = principal_of(&session().await?, &cp, &policy).await?;
    *known = Some(principal.clone());
    Ok(principal)
}

/// The signed-in principal, or [`AppError::Unauthenticated`].
pub async fn require_principal() -> Result<Principal, AppError> {
    current_principal().await?.ok_or(AppError::Unauthenticated)
}

/// The signed-in principal and the control plane, for server functions that need both.
pub async fn signed_in() -> Result<(ControlPlane, Principal), AppError> {
    let principal = require_principal().await?;
    Ok((control_plane()?, principal))
}

/// The organization the user works in (their first, usually only, tenant membership) and
/// their access to it as `R`, in one statement. Platform staff without one get a clear
/// refusal; a member without the role `R` needs, the domain's `Forbidden`.
pub async fn home_tenant<R: control_plane::tenancy::TenantRequirement>(
    cp: &ControlPlane,
    principal: &Principal,
) -> Result<(control_plane::tenancy::Tenant<R>, String), AppError> {
    cp.home_tenant_access::<R>(principal).await?.ok_or_else(|| {
        AppError::Forbidden(
            "You don't belong to an organization; sign in with your organization's account.".into(),
        )
    })
}
