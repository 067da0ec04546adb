//! Projects, their members and invitations, and the audit trail, as the pages and the API
//! show them.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{ProjectId, ProjectRole, UserId};

/// A project as a list shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectSummary {
    pub id: ProjectId,
    pub slug: String,
    pub display_name: String,
    /// The viewer's effective role in it.
    pub my_role: ProjectRole,
    pub members: i64,
    pub canonical_name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    pub user_id: UserId,
    pub email: String,
    pub display_name: String,
    pub role: ProjectRole,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invitation {
    pub email: String,
    pub role: ProjectRole,
    pub invited_by: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectDetail {
    pub summary: ProjectSummary,
    pub tenant_name: String,
    pub members: Vec<Member>,
    pub invitations: Vec<Invitation>,
    /// Whether the project's guests on one host may reach each other (off by default).
    pub east_west: bool,
}

/// One audit record as people read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditLine {
    /// Its place in the log: a search for older records starts before it.
    #[serde(default)]
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The actor's email, or `system`.
    pub actor: String,
    pub action: String,
    /// The canonical name of the resource.
    pub resource: String,
    /// `before → after`, as compact JSON.
    pub change: String,
    /// The same, field by field: only the fields that changed.
    #[serde(default)]
    pub changes: Vec<FieldChange>,
    pub request_id: Option<String>,
}

/// One field of an audited change, written out for people: `None` where it was or became
/// absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldChange {
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}
