//! Clusters as their project's members, the API and the CLI read them: the cluster, and each
//! member with its place in the fabric.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{AllocationId, ClusterId, ProjectId};

/// A cluster, from its members' states: `provisioning` until every member runs, then
/// `running`; `releasing` once its release was asked for (or a member failed), `released`
/// when every member is, `failed` when that release began with a member's failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cluster {
    pub id: ClusterId,
    pub project_id: ProjectId,
    pub name: String,
    pub sku: String,
    pub region: String,
    /// How many members.
    pub size: u32,
    /// `leaf`, `spine` or `fabric`: what was asked.
    pub locality: String,
    pub locality_required: bool,
    /// The narrowest of those that holds every member.
    pub placed_within: String,
    pub fabric: String,
    /// How many leaf switches and spine groups the members span.
    pub leaves: u32,
    pub spines: u32,
    pub state: String,
    /// Why it failed, when a member did.
    pub failure: Option<String>,
    /// Placement's sentence.
    pub why: String,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: OffsetDateTime,
    pub members: Vec<ClusterMember>,
}

/// One member: an ordinary allocation (`/api/v1/instances/{id}`), with its place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterMember {
    pub id: AllocationId,
    /// 1 to the cluster's size.
    pub index: u32,
    pub name: String,
    pub state: String,
    pub spine: String,
    pub leaf: String,
    /// `ssh -p PORT ubuntu@HOST`, once it runs.
    pub ssh: Option<String>,
    /// Its address on the project's private network (its second NIC), while the project
    /// allows east-west traffic.
    pub private_address: Option<String>,
}
