//! Who is calling: `Authorization: Bearer gpk_…`, an API token, checked on every request (its
//! maker's access included) and limited per token.

use app::error::AppError;
use axum::extract::{ConnectInfo, FromRequestParts};
use control_plane::ControlPlane;
use control_plane::api_tokens::{TokenCaller, TokenScope};
use control_plane::prelude::*;
use http::header::AUTHORIZATION;
use http::request::Parts;

use super::RequestId;
use super::problem::ApiError;

/// The caller behind a valid token.
pub struct Caller(pub TokenCaller);

impl Caller {
    /// Refuses (403, `forbidden`) unless the token carries `scope`.
    pub fn require(&self, scope: TokenScope, id: &RequestId) -> Result<(), ApiError> {
        self.0.require(scope).map_err(|e| id.refused(e))
    }
}

impl FromRequestParts<ControlPlane> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, cp: &ControlPlane) -> Result<Self, ApiError> {
        let id = RequestId::from_parts(parts);
        let secret = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or(ApiError(AppError::Unauthenticated))?;
        let from = parts
            .extensions
            .get::<ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip().to_string());
        cp.authenticate_token(secret, from.as_deref())
            .await
            .map(Caller)
            .map_err(|e| id.refused(e))
    }
}
