//! API tokens as their owners see them, and the scopes that narrow what one may do. The secret
//! itself is never part of a read model: it is shown once, when the token is made.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{ApiTokenId, Invalid};

/// What a token may do, on top of what the person who made it may do (never more).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum TokenScope {
    /// Read instances, images, SSH keys, projects and their members, and audit logs.
    Read,
    /// Launch and release instances, and create, attach, detach and delete volumes.
    Launch,
    /// Read usage and invoices.
    Billing,
    /// Manage members and tokens.
    Admin,
    /// Add and delete the maker's saved SSH keys, which every later launch of theirs may use
    /// (organization-wide tokens only).
    Keys,
}

impl TokenScope {
    pub const ALL: [TokenScope; 5] = [
        TokenScope::Read,
        TokenScope::Launch,
        TokenScope::Billing,
        TokenScope::Admin,
        TokenScope::Keys,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Launch => "launch",
            TokenScope::Billing => "billing",
            TokenScope::Admin => "admin",
            TokenScope::Keys => "keys",
        }
    }

    pub fn parse(s: &str) -> Result<Self, Invalid> {
        TokenScope::ALL
            .into_iter()
            .find(|x| x.as_str() == s.trim())
            .ok_or_else(|| {
                Invalid::new(
                    "scopes",
                    format!("{s:?} is not a scope: use read, launch, billing, admin or keys"),
                )
            })
    }
}

/// The most days a token may live.
pub const MAX_TOKEN_DAYS: u32 = 366;

/// One token, as the people who may see it read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiToken {
    pub id: ApiTokenId,
    pub name: String,
    /// The project's short name; `None`: the whole organization.
    pub project: Option<String>,
    pub scopes: Vec<TokenScope>,
    /// `gpk_` and the next 8 characters of the secret, to tell tokens apart.
    pub display_prefix: String,
    /// The email of the person it acts for.
    pub created_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_used_at: Option<OffsetDateTime>,
    /// The client address of the last use.
    pub last_used_from: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub revoked_at: Option<OffsetDateTime>,
    /// When it stops unless its maker signs in again first (organizations that sign in with
    /// their own identity provider); `None`: it does not lapse.
    #[serde(with = "time::serde::rfc3339::option")]
    pub lapses_at: Option<OffsetDateTime>,
    /// As of when it was read.
    pub state: TokenState,
}

/// Whether a token works (its maker may still have lost access, which stops it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenState {
    Active,
    Expired,
    Revoked,
    /// Its maker has not signed in for the organization's idle period.
    Lapsed,
}

impl TokenState {
    /// A token's state at `now`: revoked wins over expired, expired over lapsed.
    pub fn at(
        revoked_at: Option<OffsetDateTime>,
        expires_at: OffsetDateTime,
        lapses_at: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> Self {
        match revoked_at {
            Some(_) => TokenState::Revoked,
            None if expires_at <= now => TokenState::Expired,
            None if lapses_at.is_some_and(|l| l <= now) => TokenState::Lapsed,
            None => TokenState::Active,
        }
    }
}

/// A token just made: the only time its secret is seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    pub token: ApiToken,
    pub secret: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoked_wins_over_expired_and_expiry_is_exclusive() {
        let now = OffsetDateTime::from_unix_timestamp(1_764_000_000).unwrap();
        let hour = time::Duration::hours(1);
        assert_eq!(
            TokenState::at(None, now + hour, None, now),
            TokenState::Active
        );
        assert_eq!(TokenState::at(None, now, None, now), TokenState::Expired);
        assert_eq!(
            TokenState::at(Some(now - hour), now - hour, None, now),
            TokenState::Revoked
        );
        assert_eq!(
            TokenState::at(Some(now), now + hour, None, now),
            TokenState::Revoked
        );
        assert_eq!(
            TokenState::at(None, now + hour, Some(now + hour), now),
            TokenState::Active
        );
        assert_eq!(
            TokenState::at(None, now + hour, Some(now), now),
            TokenState::Lapsed
        );
        assert_eq!(
            TokenState::at(None, now, Some(now - hour), now),
            TokenState::Expired
        );
    }

    #[test]
    fn scopes_read_and_write_the_same_words() {
        for s in TokenScope::ALL {
            assert_eq!(TokenScope::parse(s.as_str()), Ok(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        let e = TokenScope::parse("root").unwrap_err();
        assert_eq!(e.field, "scopes");
        assert!(
            e.reason.contains("read, launch, billing, admin or keys"),
            "{e}"
        );
    }
}
