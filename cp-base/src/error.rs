//! The control plane's one error enum. Callers (server functions, HTTP handlers) map it to
//! what a user may see; [`Error::is_internal`] says which variants must only be logged.

use portal_types::{Currency, Level, Money, PolicyKey};

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
    /// A policy of the chain refuses the request: which policy, the level that set it, and
    /// why, with the numbers. `Display` writes the sentence.
    #[error("{0}")]
    PolicyDenied(Box<Denial>),
    /// The request is valid but clashes with the current state.
    #[error("{0}")]
    Conflict(String),
    /// A volume can't be deleted while an instance has it attached; the message names it.
    #[error("{0}")]
    VolumeInUse(String),
    #[error(transparent)]
    ResourceName(#[from] ResourceNameError),
    /// Single sign-on failed; the variant says how.
    #[error("sign-in failed: {0}")]
    Sso(#[from] SsoError),
    /// The database can't be reached or is restarting (the connection dropped, none could be
    /// had in time, it is shutting down or refusing connections): ours, and passing; the
    /// caller may retry (a launch with its `Idempotency-Key` finds what a first try did).
    #[error("database unavailable: {0}")]
    Outage(sqlx::Error),
    /// Anything else the database says that is not one of the above: a bug.
    #[error("database error: {0}")]
    Database(sqlx::Error),
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
            Error::Outage(_) | Error::Database(_) | Error::Migrate(_) | Error::Corrupt(_)
        )
    }
}

pub use crate::pool::is_outage;

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<sqlx::Error> for Error {
    /// A database error is ours, except text the database cannot store at all (a NUL
    /// character, in `text` or in `jsonb`): that came from the caller, whatever the path, and
    /// is refused as such rather than answered with a 500.
    fn from(e: sqlx::Error) -> Self {
        match e.as_database_error().and_then(|d| d.code()).as_deref() {
            Some("22021" | "22P05") => Error::Invalid {
                field: "text",
                reason: "contains a NUL character (U+0000), which can't be stored".into(),
            },
            _ if is_outage(&e) => {
                crate::pool::outage_seen();
                Error::Outage(e)
            }
            _ => Error::Database(e),
        }
    }
}

impl From<portal_types::Invalid> for Error {
    fn from(e: portal_types::Invalid) -> Self {
        Error::Invalid {
            field: e.field,
            reason: e.reason,
        }
    }
}

/// A refusal by the policy chain: the key, the level whose setting decided (`None` when no
/// level set it: the platform's default), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub key: PolicyKey,
    pub level: Option<Level>,
    pub why: Denied,
}

impl Denial {
    pub fn error(key: PolicyKey, level: Option<Level>, why: Denied) -> Error {
        Error::PolicyDenied(Box::new(Denial { key, level, why }))
    }
}

/// Why a policy refused, with what the sentence needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// An allow-list (SKUs, listings) that doesn't name what was asked.
    NotAllowed { allowed: Vec<String>, asked: String },
    /// `allowed_regions` leaves none of the regions the SKU is sold in (or the one asked).
    NoRegion {
        allowed: Vec<String>,
        sku: String,
        sold_in: String,
    },
    /// `max_gpus_in_use` in this scope would be exceeded.
    GpuQuota {
        max: u32,
        /// "project" or "organization".
        scope: &'static str,
        in_use: i64,
        sku: String,
        gpus: i32,
    },
    /// A budget can only count what is priced in its currency.
    BudgetCurrency {
        budget: Currency,
        sku: String,
        priced_in: Currency,
    },
    /// The month's spend plus the launch's first hour would pass the budget.
    OverBudget {
        limit: Money,
        spent: Money,
        first_hour: Money,
        sku: String,
        /// The listing whose fee is part of the first hour, when it has one.
        with: Option<String>,
    },
    /// A longer lifetime than `max_allocation_lifetime_hours`.
    Lifetime { max: u32, asked: u32 },
    /// More ports than `max_published_ports`.
    PublishedPorts { max: u32, asked: usize },
    /// `max_volume_gib` or `max_volumes` in this scope would be exceeded.
    VolumeQuota {
        /// "GiB of volumes" or "volumes".
        unit: &'static str,
        max: u32,
        /// "project" or "organization".
        scope: &'static str,
        in_use: i64,
        asked: i64,
    },
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "policy {} (set at {} level) ",
            self.key.as_str(),
            self.level.map(Level::as_str).unwrap_or("no")
        )?;
        match &self.why {
            Denied::NotAllowed { allowed, asked } => {
                write!(f, "allows {}, not {asked}", allowed.join(", "))
            }
            Denied::NoRegion {
                allowed,
                sku,
                sold_in,
            } => write!(
                f,
                "allows {}; {sku} is sold only in {sold_in}",
                allowed.join(", ")
            ),
            Denied::GpuQuota {
                max,
                scope,
                in_use,
                sku,
                gpus,
            } => write!(
                f,
                "allows {max} GPUs in use in this {scope}; {in_use} are in use and {sku} would need {gpus}"
            ),
            Denied::BudgetCurrency {
                budget,
                sku,
                priced_in,
            } => write!(
                f,
                "is in {budget}, but {sku} is priced in {priced_in}; ask an admin to set the budget in {priced_in}"
            ),
            Denied::OverBudget {
                limit,
                spent,
                first_hour,
                sku,
                with,
            } => {
                let total = Money::new(
                    spent.amount_minor + first_hour.amount_minor,
                    limit.currency.clone(),
                );
                let over = Money::new(
                    total.amount_minor - limit.amount_minor,
                    limit.currency.clone(),
                );
                write!(
                    f,
                    "is {limit}; {spent} is spent this month, and {first_hour} for the first hour of {sku}{} would make {total}, {over} over",
                    match with {
                        Some(listing) => format!(" with {listing}"),
                        None => String::new(),
                    }
                )
            }
            Denied::Lifetime { max, asked } => write!(
                f,
                "allows allocations to live {max} hours; this launch asked for {asked}"
            ),
            Denied::PublishedPorts { max, asked } => write!(
                f,
                "allows {max} published ports per allocation; this launch asked for {asked}"
            ),
            Denied::VolumeQuota {
                unit,
                max,
                scope,
                in_use,
                asked,
            } => write!(
                f,
                "allows {max} {unit} in this {scope}; {in_use} are taken and this asks for {asked} more"
            ),
        }
    }
}

/// Why a single sign-on failed. Each has a stable [`SsoError::code`] for URLs and logs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SsoError {
    #[error("no organization signs in with {domain} addresses")]
    UnknownDomain { domain: String },
    #[error("the identity provider at {issuer} could not be reached")]
    IssuerUnreachable { issuer: String },
    #[error("the sign-in response did not match a sign-in started in this browser")]
    StateMismatch,
    #[error("the sign-in took too long; please start again")]
    PendingExpired,
    #[error("the identity provider refused the sign-in: {0}")]
    ProviderRefused(String),
    #[error("the identity provider's token was not accepted: {0}")]
    TokenRejected(TokenProblem),
    #[error("the identity provider did not give a verified email address")]
    MissingEmail,
    #[error("{email} is not an address this organization signs in with")]
    EmailNotAllowed { email: String },
    /// An account with this email exists but isn't this organization's to sign in: platform
    /// staff, a break-glass account, or someone of another organization. Never linked.
    #[error("the account for {email} does not belong to this organization")]
    AccountElsewhere { email: String },
}

/// What was wrong with an ID token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenProblem {
    #[error("it has expired")]
    Expired,
    #[error("it was issued for another application (audience)")]
    WrongAudience,
    #[error("it was issued by another provider (issuer)")]
    WrongIssuer,
    #[error("it belongs to another sign-in (nonce)")]
    WrongNonce,
    #[error("its signature is invalid")]
    BadSignature,
    #[error("the provider sent none")]
    Missing,
    #[error("{0}")]
    Other(String),
}

impl SsoError {
    /// A short, stable name, e.g. for `/login?sso_error=state`.
    pub fn code(&self) -> &'static str {
        match self {
            SsoError::UnknownDomain { .. } => "unknown_domain",
            SsoError::IssuerUnreachable { .. } => "issuer_unreachable",
            SsoError::StateMismatch => "state",
            SsoError::PendingExpired => "expired_attempt",
            SsoError::ProviderRefused(_) => "provider_refused",
            SsoError::TokenRejected(TokenProblem::Expired) => "token_expired",
            SsoError::TokenRejected(TokenProblem::WrongAudience) => "token_audience",
            SsoError::TokenRejected(TokenProblem::WrongIssuer) => "token_issuer",
            SsoError::TokenRejected(TokenProblem::WrongNonce) => "token_nonce",
            SsoError::TokenRejected(TokenProblem::BadSignature) => "token_signature",
            SsoError::TokenRejected(_) => "token_invalid",
            SsoError::MissingEmail => "missing_email",
            SsoError::EmailNotAllowed { .. } => "email_not_allowed",
            SsoError::AccountElsewhere { .. } => "account_elsewhere",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_database_is_an_outage_and_a_bad_statement_is_not() {
        let io = sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "expected to read 5 bytes, got 0 bytes at EOF",
        ));
        assert!(matches!(Error::from(io), Error::Outage(_)));
        assert!(matches!(
            Error::from(sqlx::Error::PoolTimedOut),
            Error::Outage(_)
        ));
        assert!(matches!(
            Error::from(sqlx::Error::RowNotFound),
            Error::Database(_)
        ));
        assert!(matches!(
            Error::from(sqlx::Error::Protocol("unexpected message".into())),
            Error::Database(_)
        ));
        // HAProxy with no primary behind it, as sqlx saw it during a failover.
        assert!(matches!(
            Error::from(sqlx::Error::Protocol(
                "unexpected response from SSLRequest: 0x00".into()
            )),
            Error::Outage(_)
        ));
    }
}
