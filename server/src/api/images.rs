//! `GET /api/v1/images`: what a launch may name as its `image`. OS images and marketplace
//! stacks are both listings; each appears with its current version, whether it takes user
//! data, and the SKUs it runs on, under the policies of the project (or organization) asked
//! about, so a script can choose before it launches instead of learning from a refusal.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use control_plane::ControlPlane;
use control_plane::api_tokens::TokenScope;
use control_plane::prelude::*;
use control_plane::tenancy::ProjectViewers;
use portal_types::ProjectId;
use portal_types::marketplace::Image;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_query};

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ImageQuery {
    /// The project whose policies apply (one the token reaches). Left out: the token's
    /// project, or for an organization-wide token the organization's policies.
    pub project: Option<ProjectId>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ImageList {
    pub images: Vec<Image>,
}

/// The images and marketplace listings a project may launch.
///
/// Each published listing's current version that the `allowed_listings` policy allows, with
/// the SKUs it fits that `allowed_skus` allows. OS images first.
#[utoipa::path(
    get,
    path = "/images",
    tag = "catalog",
    operation_id = "list_images",
    security(("token" = [])),
    params(ImageQuery),
    responses(
        (status = 200, description = "What may be launched.", body = ImageList,
         example = json!({"images": [{"slug": "ubuntu-24.04-cuda", "name": "Ubuntu 24.04 + CUDA 12.6",
             "category": "os_image", "publisher": "GPU Cloud", "version": "1",
             "summary": "Ubuntu 24.04 LTS with the NVIDIA 560 driver and CUDA 12.6.", "ssh_user": "ubuntu",
             "fee_per_hour": null, "accepts_user_data": true, "published_ports": [], "skus": ["h100.1x", "h100.8x"]}]})),
        (status = 400, description = "The project is not an id.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "The project is not one this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn list(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    query: Result<Query<ImageQuery>, QueryRejection>,
) -> Result<Json<ImageList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Query(q) = query.map_err(bad_query)?;
    let project = match q.project.or(caller.0.project) {
        Some(p) => Some(
            caller
                .project::<ProjectViewers>(&cp, Some(p), &id)
                .await?
                .id(),
        ),
        None => {
            // The organization's policies, for one of its members.
            cp.tenant_access::<control_plane::tenancy::TenantMembers>(
                &caller.0.principal,
                caller.0.tenant,
            )
            .await
            .map_err(|e| id.refused(e))?;
            None
        }
    };
    let images = cp
        .launchable_images(caller.0.tenant, project)
        .await
        .map_err(|e| id.refused(e))?;
    Ok(Json(ImageList { images }))
}
