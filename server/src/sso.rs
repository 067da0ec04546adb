//! `/auth/callback`: where an organization's identity provider sends the browser back.
//! It is a plain axum route, not a server function, because the provider decides its shape.
//! Every failure ends on the sign-in page with a reason and no session.

use control_plane::prelude::*;

use axum::extract::{Query, State};
use axum::response::Redirect;
use control_plane::sso::SsoError;
use serde::Deserialize;
use tower_sessions::Session;

use crate::AppState;

#[derive(Debug, Deserialize)]
pub struct Callback {
    code: Option<String>,
    state: Option<String>,
    /// Set instead of `code` when the provider refuses (e.g. `access_denied`).
    error: Option<String>,
}

#[tracing::instrument(skip_all)]
pub async fn callback(
    State(app): State<AppState>,
    session: Session,
    Query(query): Query<Callback>,
) -> Redirect {
    match complete(&app, &session, query).await {
        Ok(()) => match app::server::take_return_to(&session).await {
            Some(path) => Redirect::to(&path),
            None => Redirect::to("/"),
        },
        Err(code) => Redirect::to(&format!("/login?sso_error={code}")),
    }
}

async fn complete(app: &AppState, session: &Session, query: Callback) -> Result<(), &'static str> {
    // The pending sign-in is removed whatever happens next: a callback URL works once.
    let pending = app::server::take_pending_sso(session)
        .await
        .map_err(|_| "internal")?;
    let fail = |e: SsoError| {
        tracing::warn!(sso.error = e.code(), error.cause = %e, "single sign-on refused");
        e.code()
    };
    let Some(pending) = pending else {
        return Err(fail(SsoError::StateMismatch));
    };
    if let Some(error) = query.error {
        return Err(fail(SsoError::ProviderRefused(error)));
    }
    let (Some(code), Some(state)) = (query.code, query.state) else {
        return Err(fail(SsoError::StateMismatch));
    };
    let redirect_url = app::server::PublicOrigin(app.web.public_origin.clone()).callback_url();
    match app
        .cp
        .sso_complete(pending, &state, &code, &redirect_url)
        .await
    {
        Ok(done) => app::server::sign_in_sso(session, &done)
            .await
            .map_err(|_| "internal"),
        Err(control_plane::Error::Sso(e)) => Err(fail(e)),
        Err(e) => {
            tracing::error!(error.cause = %e, "single sign-on failed internally");
            Err("internal")
        }
    }
}
