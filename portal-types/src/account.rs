//! What a signed-in user keeps for themselves, as the account page and the API show it.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{ApiTokenId, SshKeyId, UserId};

/// One saved SSH public key (the key itself is not repeated: its fingerprint names it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SshKey {
    pub id: SshKeyId,
    pub name: String,
    /// `ssh-ed25519`, `ssh-rsa`, …
    pub kind: String,
    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The key's own comment (often `user@host`), if it has one.
    pub comment: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: OffsetDateTime,
    /// When a launch last put it on a machine.
    #[serde(with = "time::serde::rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub last_used_at: Option<OffsetDateTime>,
    /// The API token it was added through; `None`: in the portal.
    #[serde(default)]
    pub added_via_token: Option<KeyToken>,
}

/// The API token a saved key was added through, as its owner tells tokens apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyToken {
    pub id: ApiTokenId,
    pub name: String,
    /// `gpk_` and the next 8 characters of its secret.
    pub display_prefix: String,
}

/// A break-glass account with failed sign-ins, as platform admins see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lockout {
    pub user: UserId,
    pub email: String,
    /// Failed sign-ins in a row.
    pub failed_attempts: i32,
    /// Until when it is locked; `None` when it is not (any more).
    #[serde(with = "time::serde::rfc3339::option")]
    pub locked_until: Option<OffsetDateTime>,
}
