//! The app layer's one error enum: what a server function may tell a user.
//!
//! Control-plane errors are mapped here. Internal ones (database, bugs) are logged with their
//! cause and the request id, and the user sees only a generic message with that request id.

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    /// The input is wrong; the message names the field and the rule.
    #[error("{0}")]
    BadRequest(#[serde(serialize_with = "ser_bounded")] String),
    /// One field of a form is wrong: `field` is the control plane's name for it (a form shows
    /// `reason`, capitalised, under that field, and the whole sentence in its summary).
    #[error("Invalid {field}: {reason}")]
    Invalid {
        field: String,
        #[serde(serialize_with = "ser_bounded")]
        reason: String,
    },
    /// Absent, or not visible to this user (the two are deliberately indistinguishable).
    #[error("Not found.")]
    NotFound,
    #[error("{0}")]
    Conflict(#[serde(serialize_with = "ser_bounded")] String),
    /// A volume is attached to an instance, so it can't be deleted.
    #[error("{0}")]
    VolumeInUse(#[serde(serialize_with = "ser_bounded")] String),
    /// Nothing could be placed: the message is placement's explanation.
    #[error("{0}")]
    Unavailable(#[serde(serialize_with = "ser_bounded")] String),
    /// A policy refused it: `key` is the policy (`max_gpus_in_use`, …), `message` the sentence.
    #[error("{message}")]
    PolicyDenied {
        key: String,
        #[serde(serialize_with = "ser_bounded")]
        message: String,
    },
    /// Not signed in, or the session has ended.
    #[error("Please sign in to continue.")]
    Unauthenticated,
    /// Signed in, but not allowed; the message says who may.
    #[error("{0}")]
    Forbidden(#[serde(serialize_with = "ser_bounded")] String),
    /// A sign-in attempt that was refused (wrong password, say); the message is deliberately
    /// vague about which part was wrong.
    #[error("{0}")]
    SignInRefused(#[serde(serialize_with = "ser_bounded")] String),
    /// Too many attempts; the caller may try again after this many seconds.
    #[error("Too many attempts. Try again in {retry_after_secs} seconds.")]
    RateLimited { retry_after_secs: u64 },
    #[error(
        "Something went wrong on our side. If it keeps happening, quote request id {request_id}."
    )]
    Internal { request_id: String },
    /// Ours, and passing (the database is restarting or out of connections): try again soon.
    #[error(
        "The service is briefly unavailable. Try again in a few seconds (request id {request_id})."
    )]
    Outage { request_id: String },
    /// Transport and encoding failures raised by the server-function machinery itself.
    #[error("{0}")]
    ServerFn(ServerFnErrorErr),
}

/// What `Retry-After` says during a database outage: PostgreSQL restarts in seconds.
pub const OUTAGE_RETRY_AFTER_SECS: u64 = 2;

/// "use lowercase …" → "Use lowercase …": a reason shown on its own, under its field.
pub fn capitalised(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

impl AppError {
    /// The one mapping from what went wrong to the HTTP status, for server functions (see
    /// `server::error_status`) and pages (see `components::ErrorNotice`) alike. Only our own
    /// faults are 5xx; every refusal is the caller's 4xx.
    pub fn status(&self) -> u16 {
        match self {
            AppError::BadRequest(_) | AppError::Invalid { .. } => 400,
            AppError::Unauthenticated | AppError::SignInRefused(_) => 401,
            AppError::Forbidden(_) => 403,
            AppError::NotFound => 404,
            AppError::Conflict(_) | AppError::Unavailable(_) | AppError::VolumeInUse(_) => 409,
            AppError::PolicyDenied { .. } => 403,
            AppError::RateLimited { .. } => 429,
            AppError::Internal { .. } => 500,
            AppError::Outage { .. } => 503,
            AppError::ServerFn(e) => match e {
                // The caller sent arguments we could not read, or called no such function.
                ServerFnErrorErr::Args(_)
                | ServerFnErrorErr::MissingArg(_)
                | ServerFnErrorErr::Deserialization(_) => 400,
                ServerFnErrorErr::Registration(_) => 404,
                ServerFnErrorErr::UnsupportedRequestMethod(_) => 405,
                ServerFnErrorErr::Request(_)
                | ServerFnErrorErr::ServerError(_)
                | ServerFnErrorErr::MiddlewareError(_)
                | ServerFnErrorErr::Serialization(_)
                | ServerFnErrorErr::Response(_) => 500,
            },
        }
    }

    /// A stable name for what went wrong, for programs: the `code` of an API's
    /// `application/problem+json` answer. Never changes once published; new kinds get new codes.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest(_) => "bad_request",
            AppError::Invalid { .. } => "invalid",
            AppError::NotFound => "not_found",
            AppError::Conflict(_) => "conflict",
            AppError::Unavailable(_) => "sku_unavailable",
            AppError::VolumeInUse(_) => "volume_in_use",
            AppError::PolicyDenied { key, .. } => match key.as_str() {
                "max_gpus_in_use" | "max_volume_gib" | "max_volumes" => "quota_exceeded",
                "monthly_budget" => "budget_exceeded",
                _ => "policy_denied",
            },
            AppError::Unauthenticated => "unauthenticated",
            AppError::Forbidden(_) => "forbidden",
            AppError::SignInRefused(_) => "sign_in_refused",
            AppError::RateLimited { .. } => "rate_limited",
            AppError::Internal { .. } => "internal",
            AppError::Outage { .. } => "unavailable",
            AppError::ServerFn(_) if self.status() < 500 => "bad_request",
            AppError::ServerFn(_) => "internal",
        }
    }

    /// How long the caller should wait before trying again (`Retry-After`), where it should.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            AppError::RateLimited { retry_after_secs } => Some(*retry_after_secs),
            AppError::Outage { .. } => Some(OUTAGE_RETRY_AFTER_SECS),
            _ => None,
        }
    }

    /// A refusal (the caller's mistake, or not allowed) rather than a fault of ours.
    pub fn is_refusal(&self) -> bool {
        self.status() < 500
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        // The machinery's messages may quote what was sent (an argument of 100 KB, say).
        use ServerFnErrorErr as S;
        AppError::ServerFn(match value {
            S::Args(m) => S::Args(bounded(&m)),
            S::MissingArg(m) => S::MissingArg(bounded(&m)),
            S::Deserialization(m) => S::Deserialization(bounded(&m)),
            S::Registration(m) => S::Registration(bounded(&m)),
            other => other,
        })
    }
}

/// The longest message an error carries: long enough for every problem of an 8-slot map
/// (about 1,100 characters), short enough that an answer stays small (and within what the
/// status layer reads) whatever input a refusal quotes.
pub const MAX_MESSAGE_CHARS: usize = 8_000;

/// Every message is written out bounded, however it was made (a refusal that quotes a 100 KB
/// argument, say): in the JSON a fetch gets and in the URL a plain form post is sent back to.
fn ser_bounded<S: serde::Serializer>(m: &str, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&bounded(m))
}

/// `m`, cut to [`MAX_MESSAGE_CHARS`] with an ellipsis.
pub fn bounded(m: &str) -> String {
    match m.char_indices().nth(MAX_MESSAGE_CHARS) {
        None => m.to_owned(),
        Some((at, _)) => format!("{}…", &m[..at]),
    }
}

#[cfg(feature = "ssr")]
mod ssr {
    use super::AppError;

    /// The `x-request-id` of the request being served, if any.
    pub fn request_id() -> String {
        leptos::prelude::use_context::<http::request::Parts>()
            .and_then(|parts| {
                parts
                    .headers
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "unknown".to_owned())
    }

    /// "invalid slug: …" → "Invalid slug: …." : control-plane messages read as sentences.
    fn sentence(m: &str) -> String {
        full_stop(&super::capitalised(m))
    }

    /// Ends it with a full stop, unless it ends a sentence already (and is never longer than
    /// [`super::MAX_MESSAGE_CHARS`]).
    fn full_stop(m: &str) -> String {
        let mut out = super::bounded(m);
        if !out.is_empty() && !out.ends_with(['.', '!', '?']) {
            out.push('.');
        }
        out
    }

    impl AppError {
        /// Logs `cause` and returns the generic message a user may see.
        pub fn internal(cause: impl std::fmt::Display) -> Self {
            Self::internal_as(cause, request_id())
        }

        /// Logs `cause` under `request_id` and returns the generic message naming it.
        fn internal_as(cause: impl std::fmt::Display, request_id: String) -> Self {
            tracing::error!(error.cause = %cause, request.id = %request_id, "internal error");
            AppError::Internal { request_id }
        }
    }

    impl From<portal_types::Invalid> for AppError {
        fn from(e: portal_types::Invalid) -> Self {
            control_plane::Error::from(e).into()
        }
    }

    impl From<control_plane::Error> for AppError {
        fn from(e: control_plane::Error) -> Self {
            AppError::from_domain(e, request_id)
        }
    }

    impl AppError {
        /// The one mapping from a control-plane error to what a caller is told, for server
        /// functions and the REST API alike. Our own faults are logged with the request id
        /// (`request_id` is asked only then) and reach the caller as that id alone.
        pub fn from_domain(e: control_plane::Error, request_id: impl FnOnce() -> String) -> Self {
            use control_plane::Error as E;
            match e {
                E::NotFound { .. } => AppError::NotFound,
                E::Invalid { field, reason } => AppError::Invalid {
                    field: field.to_owned(),
                    reason: full_stop(&reason),
                },
                E::ResourceName(_) => AppError::BadRequest(sentence(&e.to_string())),
                E::Sso(sso) => AppError::BadRequest(full_stop(&format!("Sign-in failed: {sso}"))),
                E::Conflict(m) => AppError::Conflict(sentence(&m)),
                E::VolumeInUse(m) => AppError::VolumeInUse(sentence(&m)),
                e @ E::SkuUnavailable(_) => AppError::Unavailable(format!("{e}.")),
                E::PolicyDenied(d) => AppError::PolicyDenied {
                    key: d.key.as_str().to_owned(),
                    message: sentence(&d.to_string()),
                },
                E::Unauthenticated => AppError::Unauthenticated,
                E::RateLimited { retry_after_secs } => AppError::RateLimited { retry_after_secs },
                // A node's bootstrap token or credential refused: like a person's password,
                // 401 (only the agent API produces it).
                E::AgentRefused(m) => AppError::SignInRefused(sentence(&m)),
                E::Forbidden { needed } => {
                    AppError::Forbidden(format!("Only {needed} may do this."))
                }
                E::InvalidCredentials => {
                    AppError::SignInRefused("Email or password is wrong.".into())
                }
                e @ E::Outage(_) => {
                    let request_id = request_id();
                    tracing::warn!(error.cause = %e, request.id = %request_id, "database unavailable");
                    AppError::Outage { request_id }
                }
                e @ (E::Database(_) | E::Migrate(_) | E::Corrupt(_)) => {
                    AppError::internal_as(e, request_id())
                }
            }
        }
    }
}

#[cfg(feature = "ssr")]
pub use ssr::request_id;

#[cfg(all(test, feature = "ssr"))]
mod tests {
    #[test]
    fn every_refusal_is_a_4xx_and_only_our_faults_are_5xx() {
        use leptos::server_fn::error::ServerFnErrorErr as S;
        let cases = [
            (AppError::BadRequest("Invalid slug.".into()), 400),
            (
                AppError::Invalid {
                    field: "name".into(),
                    reason: "Give the key a name.".into(),
                },
                400,
            ),
            (AppError::Unauthenticated, 401),
            (
                AppError::SignInRefused("Email or password is wrong.".into()),
                401,
            ),
            (
                AppError::Forbidden("Only tenant admins may do this.".into()),
                403,
            ),
            (
                AppError::Outage {
                    request_id: "r".into(),
                },
                503,
            ),
            (AppError::NotFound, 404),
            (
                AppError::Conflict("sku_unavailable: no node fits.".into()),
                409,
            ),
            (
                AppError::RateLimited {
                    retry_after_secs: 30,
                },
                429,
            ),
            (
                AppError::ServerFn(S::Args("missing field `email`".into())),
                400,
            ),
            (
                AppError::ServerFn(S::Registration("no such function".into())),
                404,
            ),
            (
                AppError::Internal {
                    request_id: "r".into(),
                },
                500,
            ),
        ];
        for (e, status) in cases {
            assert_eq!(e.status(), status, "{e:?}");
            assert_eq!(e.is_refusal(), status < 500, "{e:?}");
        }
    }

    use super::AppError;
    use leptos::prelude::{Owner, provide_context};

    fn with_request(id: &str, f: impl FnOnce()) {
        let owner = Owner::new();
        owner.with(|| {
            let (parts, ()) = http::Request::builder()
                .header("x-request-id", id)
                .body(())
                .unwrap()
                .into_parts();
            provide_context(parts);
            f();
        });
    }

    #[test]
    fn internal_errors_show_only_a_generic_message_with_the_request_id() {
        with_request("req-42", || {
            let cause = control_plane::Error::Database(sqlx::Error::Protocol(
                "password authentication failed for user portal at db.internal".into(),
            ));
            let shown = AppError::from(cause);
            assert_eq!(
                shown,
                AppError::Internal {
                    request_id: "req-42".into()
                }
            );
            let text = shown.to_string();
            assert_eq!(
                text,
                "Something went wrong on our side. If it keeps happening, quote request id req-42."
            );
            assert!(!text.contains("db.internal"));
        });
    }

    #[test]
    fn user_errors_pass_through_with_their_message() {
        with_request("req-43", || {
            let e = AppError::from(control_plane::Error::Invalid {
                field: "slug",
                reason: "use lowercase letters, digits and '-'".into(),
            });
            assert_eq!(
                e,
                AppError::Invalid {
                    field: "slug".into(),
                    reason: "use lowercase letters, digits and '-'.".into()
                }
            );
            assert_eq!(
                e.to_string(),
                "Invalid slug: use lowercase letters, digits and '-'."
            );
            assert_eq!(
                AppError::from(control_plane::Error::NotFound { what: "project" }),
                AppError::NotFound
            );
        });
    }
}
