//! The control plane's one error enum. Callers (server functions, HTTP handlers) map it to
//! what a user may see; [`Error::is_internal`] says which variants must only be logged.

use crate::resource_name::ResourceNameError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resource does not exist, or the caller may not know that it exists.
    #[error("{what} not found")]
    NotFound { what: &'static str },
    /// The request itself is wrong; the message names the field and the rule.
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// No signed-in user, or the session is over.
    #[error("sign-in required")]
    Unauthenticated,
    /// Signed in, but without the role this needs. Never used across tenants: there the
    /// answer is `NotFound`, so that nothing leaks about another tenant.
    #[error("only {needed} may do this")]
    Forbidden { needed: &'static str },
    /// A failed sign-in. Deliberately vague: it doesn't say which part was wrong.
    #[error("email or password is wrong")]
    InvalidCredentials,
    /// Too many attempts of something limited; the caller may try again after this long.
    #[error("too many attempts; try again in {retry_after_secs} seconds")]
    RateLimited { retry_after_secs: u64 },
    /// A node agent's bootstrap token or credential was refused; the message says why.
    #[error("{0}")]
    AgentRefused(String),
    /// Placement found no fit. The message says which constraint ruled out how many nodes
    /// and what would fit instead. Shown as `sku_unavailable: …`.
    #[error("sku_unavailable: {0}")]
    SkuUnavailable(String),
    /// A policy of the chain refuses the request; the message names the policy, the level
    /// that set it, and the numbers.
    #[error("{0}")]
    PolicyDenied(String),
    /// The request is valid but clashes with the current state.
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    ResourceName(#[from] ResourceNameError),
    /// Single sign-on failed; the variant says how.
    #[error("sign-in failed: {0}")]
    Sso(#[from] crate::sso::SsoError),
    /// Anything the database says that is not one of the above: a bug or an outage.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Data that breaks an assumption the schema should guarantee, or a failed internal task.
    #[error("internal inconsistency: {0}")]
    Corrupt(String),
}

impl Error {
    /// Internal errors are logged with their cause and never shown to a user.
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            Error::Database(_) | Error::Migrate(_) | Error::Corrupt(_)
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
