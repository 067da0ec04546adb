//! Who is calling: `Authorization: Bearer gpk_…`, an API token, checked on every request (its
//! maker's access included) and limited per token.

use app::error::AppError;
use axum::extract::FromRequestParts;
use control_plane::ControlPlane;
use control_plane::api_tokens::{TokenCaller, TokenScope};
use control_plane::prelude::*;
use control_plane::tenancy::{Project, ProjectRequirement, ProjectViewers, TenantMembers};
use http::header::AUTHORIZATION;
use http::request::Parts;
use portal_types::{AllocationId, ProjectId};

use super::problem::ApiError;
use super::{ClientAddr, RequestId};

/// The caller behind a valid token.
pub struct Caller(pub TokenCaller);

impl Caller {
    /// Refuses (403, `forbidden`) unless the token carries `scope`.
    pub fn require(&self, scope: TokenScope, id: &RequestId) -> Result<(), ApiError> {
        self.0.require(scope).map_err(|e| id.refused(e))
    }

    /// Does `work` as this token: the audit records it writes name the token.
    pub async fn acting<F: Future>(&self, work: F) -> F::Output {
        control_plane::audit::via_token(self.0.token, work).await
    }

    /// The maker's proof, if the token reaches its project: its own organization, and its one
    /// project when it was made for one. Outside it, "not found", as for anyone outside.
    fn within_reach<R: ProjectRequirement>(&self, who: Project<R>) -> Result<Project<R>, ApiError> {
        let reaches = who.tenant() == self.0.tenant && self.0.project.is_none_or(|p| p == who.id());
        if reaches {
            Ok(who)
        } else {
            Err(ApiError(AppError::NotFound))
        }
    }

    /// The maker's proof of role `R` in `project` (or in the token's one project when none is
    /// named), within the token's reach. Outside it, "not found", as for the maker.
    pub async fn project<R: ProjectRequirement>(
        &self,
        cp: &ControlPlane,
        project: Option<ProjectId>,
        id: &RequestId,
    ) -> Result<Project<R>, ApiError> {
        let project = project.or(self.0.project).ok_or_else(|| {
            ApiError::invalid(
                "project",
                "name the project: this token reaches every project of its organization",
            )
        })?;
        let who = cp
            .project_access::<R>(&self.0.principal, project)
            .await
            .map_err(|e| id.refused(e))?;
        self.within_reach(who)
    }

    /// The maker's proofs of role `R` in the project that owns `allocation`, within reach.
    pub async fn allocation<R: ProjectRequirement>(
        &self,
        cp: &ControlPlane,
        allocation: AllocationId,
        id: &RequestId,
    ) -> Result<Project<R>, ApiError> {
        let who = cp
            .allocation_access::<R>(&self.0.principal, allocation)
            .await
            .map_err(|e| id.refused(e))?;
        self.within_reach(who)
    }

    /// The maker's proof of role `R` in the project that owns `volume`, within reach.
    pub async fn volume<R: ProjectRequirement>(
        &self,
        cp: &ControlPlane,
        volume: portal_types::VolumeId,
        id: &RequestId,
    ) -> Result<Project<R>, ApiError> {
        use control_plane::volumes::VolumesApi;
        let who = cp
            .volume_access::<R>(&self.0.principal, volume)
            .await
            .map_err(|e| id.refused(e))?;
        self.within_reach(who)
    }

    /// The caller's proof of role `R` in the project of cluster `cluster`, within the token's
    /// reach; "not found" otherwise.
    pub async fn cluster<R: ProjectRequirement>(
        &self,
        cp: &ControlPlane,
        cluster: portal_types::ClusterId,
        id: &RequestId,
    ) -> Result<Project<R>, ApiError> {
        use control_plane::allocations::clusters::ClustersApi;
        let who = cp
            .cluster_access::<R>(&self.0.principal, cluster)
            .await
            .map_err(|e| id.refused(e))?;
        self.within_reach(who)
    }

    /// The caller's proof of role `R` in the project of snapshot `snapshot`, within the token's
    /// reach; "not found" otherwise.
    pub async fn snapshot<R: ProjectRequirement>(
        &self,
        cp: &ControlPlane,
        snapshot: portal_types::SnapshotId,
        id: &RequestId,
    ) -> Result<Project<R>, ApiError> {
        use control_plane::volumes::snapshots::SnapshotsApi;
        let who = cp
            .snapshot_access::<R>(&self.0.principal, snapshot)
            .await
            .map_err(|e| id.refused(e))?;
        self.within_reach(who)
    }

    /// What a list covers: the project asked for (one the token reaches), or every project
    /// it reaches.
    pub async fn listed(
        &self,
        cp: &ControlPlane,
        project: Option<portal_types::ProjectId>,
        id: &RequestId,
    ) -> Result<Vec<Project<ProjectViewers>>, ApiError> {
        match project {
            Some(p) => Ok(vec![self.project::<ProjectViewers>(cp, Some(p), id).await?]),
            None => self.projects(cp, id).await,
        }
    }

    /// Every project the token reaches and its maker may view.
    pub async fn projects(
        &self,
        cp: &ControlPlane,
        id: &RequestId,
    ) -> Result<Vec<Project<ProjectViewers>>, ApiError> {
        if let Some(p) = self.0.project {
            return Ok(vec![self.project(cp, Some(p), id).await?]);
        }
        let member = cp
            .tenant_access::<TenantMembers>(&self.0.principal, self.0.tenant)
            .await
            .map_err(|e| id.refused(e))?;
        let mut out = Vec::new();
        for p in cp.list_projects(&member).await.map_err(|e| id.refused(e))? {
            match cp
                .project_access::<ProjectViewers>(&self.0.principal, p.id)
                .await
            {
                Ok(who) => out.push(who),
                // Listed but not viewable (a member of the organization, not the project).
                Err(
                    control_plane::Error::NotFound { .. } | control_plane::Error::Forbidden { .. },
                ) => {}
                Err(e) => return Err(id.refused(e)),
            }
        }
        Ok(out)
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
