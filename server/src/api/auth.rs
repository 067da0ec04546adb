//! Who is calling: `Authorization: Bearer gpk_…`, an API token, checked on every request (its
//! maker's access included) and limited per token.

use app::error::AppError;
use axum::extract::FromRequestParts;
use control_plane::ControlPlane;
use control_plane::api_tokens::{TokenCaller, TokenScope};
use control_plane::prelude::*;
use http::header::AUTHORIZATION;
use http::request::Parts;

use super::problem::ApiError;
use super::{ClientAddr, RequestId};

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
        let ClientAddr(from) = ClientAddr::from_parts(parts);
        cp.authenticate_token(secret, from.as_deref())
            .await
            .map(Caller)
            .map_err(|e| id.refused(e))
    }
}

/// What every operation that needs a token may answer besides its own results, for the
/// OpenAPI document (`responses(…, TokenRefusals)`).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // Only its derive is used: the document, not a value.
pub enum TokenRefusals {
    /// No token, or not a valid one (unknown, revoked, expired, or its maker lost access).
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthenticated(super::problem::Problem),
    /// The token lacks the scope the operation needs.
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(super::problem::Problem),
    /// Too many calls with this token; see Retry-After.
    #[response(status = 429, content_type = "application/problem+json")]
    RateLimited(super::problem::Problem),
}
