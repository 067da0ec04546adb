//! What the API answers when it refuses or fails: `application/problem+json` (RFC 9457), built
//! from the app's one error enum, so a refusal has the same status and sentence whichever door
//! it came through, plus a `code` programs can match.

use app::error::AppError;
use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
pub use portal_types::Problem;

/// A refusal or a failure on its way out of an API handler.
#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        ApiError(e)
    }
}

impl ApiError {
    pub fn invalid(field: &str, reason: impl Into<String>) -> Self {
        ApiError(AppError::Invalid {
            field: field.to_owned(),
            reason: reason.into(),
        })
    }

    pub fn problem(&self) -> Problem {
        let e = &self.0;
        let code = e.code();
        Problem {
            kind: format!("urn:gpuaas:problem:{code}"),
            title: title(code).to_owned(),
            status: e.status(),
            detail: match e {
                // The portal's sentence says to sign in; a program needs to hear what to send.
                AppError::Unauthenticated => "An API token is needed: send Authorization: Bearer gpk_… (make one on Account → API tokens in the portal).".into(),
                _ => e.to_string(),
            },
            code: code.to_owned(),
            field: match e {
                AppError::Invalid { field, .. } => Some(field.clone()),
                _ => None,
            },
            request_id: match e {
                AppError::Internal { request_id } | AppError::Outage { request_id } => {
                    Some(request_id.clone())
                }
                _ => None,
            },
        }
    }
}

/// A JSON body that could not be read: its sentence says where and why.
pub fn bad_body(e: axum::extract::rejection::JsonRejection) -> ApiError {
    ApiError(AppError::BadRequest(e.body_text()))
}

/// A query string that could not be read, likewise.
pub fn bad_query(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError(AppError::BadRequest(e.body_text()))
}

/// A control-plane refusal of field `from` (its name on the portal's form), as this API's
/// body calls that input.
pub fn renamed(e: control_plane::Error, from: &str, to: &'static str) -> control_plane::Error {
    match e {
        control_plane::Error::Invalid { field, reason } if field == from => {
            control_plane::Error::Invalid { field: to, reason }
        }
        e => e,
    }
}

/// The short, fixed summary of each code.
fn title(code: &str) -> &'static str {
    match code {
        "invalid" | "bad_request" => "Invalid input",
        "not_found" => "Not found",
        "conflict" => "Conflict",
        "sku_unavailable" => "Nothing can be placed",
        "volume_in_use" => "Volume in use",
        "policy_denied" => "Refused by a policy",
        "quota_exceeded" => "Quota exceeded",
        "budget_exceeded" => "Budget exceeded",
        "unauthenticated" | "sign_in_refused" => "Not authenticated",
        "forbidden" => "Forbidden",
        "rate_limited" => "Too many requests",
        "unavailable" => "Briefly unavailable",
        _ => "Internal error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        let status =
            StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut res = (status, Json(problem)).into_response();
        let headers = res.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.0.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if matches!(self.0, AppError::Unauthenticated) {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"api\""),
            );
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_becomes_a_problem_with_its_status_and_code() {
        let p = ApiError::invalid("region", "use lowercase letters").problem();
        assert_eq!((p.status, p.code.as_str()), (400, "invalid"));
        assert_eq!(p.field.as_deref(), Some("region"));
        assert_eq!(p.kind, "urn:gpuaas:problem:invalid");
        let p = ApiError(AppError::PolicyDenied {
            key: "max_gpus_in_use".into(),
            message: "Policy max_gpus_in_use allows 8 GPUs.".into(),
        })
        .problem();
        assert_eq!((p.status, p.code.as_str()), (403, "quota_exceeded"));
        assert_eq!(p.detail, "Policy max_gpus_in_use allows 8 GPUs.");
        let p = ApiError(AppError::Internal {
            request_id: "r-1".into(),
        })
        .problem();
        assert_eq!((p.status, p.code.as_str()), (500, "internal"));
        assert_eq!(p.request_id.as_deref(), Some("r-1"));
        assert!(!p.detail.contains("database"), "{}", p.detail);
        let p = ApiError(AppError::Unauthenticated).problem();
        assert_eq!((p.status, p.code.as_str()), (401, "unauthenticated"));
        assert!(p.detail.contains("Authorization: Bearer"), "{}", p.detail);
        let res = ApiError(AppError::RateLimited {
            retry_after_secs: 7,
        })
        .into_response();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(res.headers()[header::RETRY_AFTER], "7");
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
    }
}
