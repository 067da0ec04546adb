//! `/api/v1/volumes`: a project's block storage, as a program creates, grows, attaches,
//! detaches and deletes it. The same control-plane calls as the portal's Volumes page.

use app::error::AppError;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use control_plane::ControlPlane;
use control_plane::api_tokens::TokenScope;
use control_plane::prelude::*;
use control_plane::tenancy::{ProjectOperators, ProjectViewers};
use control_plane::volumes::VolumeRequest;
use http::{HeaderMap, StatusCode};
use portal_types::volumes::Volume;
use portal_types::{AllocationId, ProjectId, SnapshotId, VolumeId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_body, bad_query, renamed};

/// A volume to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"project": "0a0e0000-0000-4000-8001-000000000001", "name": "datasets",
    "region": "eu-west-1", "size_gib": 500}))]
pub struct NewVolume {
    /// The project it belongs to. May be left out when the token is for one project.
    pub project: Option<ProjectId>,
    /// 1 to 63 lowercase letters, digits and `-`; unique among the project's volumes.
    pub name: String,
    /// Where it lives: instances of this region can attach it. May be left out with
    /// `snapshot` (the snapshot's region).
    #[serde(default)]
    pub region: String,
    /// 1 to 16384. May be left out with `snapshot` (the snapshot's size).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 16384)]
    pub size_gib: Option<u32>,
    /// Made holding what this snapshot of the project holds.
    #[serde(default)]
    pub snapshot: Option<SnapshotId>,
}

/// A new size.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resize {
    /// Larger than now (volumes only grow), at most 16384.
    #[schema(minimum = 1, maximum = 16384)]
    pub size_gib: u32,
}

/// Which instance to attach to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Attach {
    /// A running instance of the volume's project, in its region.
    pub instance: AllocationId,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VolumeQuery {
    /// Only this project's (one the token reaches).
    pub project: Option<ProjectId>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct VolumeList {
    pub volumes: Vec<Volume>,
}

/// Creates a volume.
///
/// It starts `creating` and becomes `available` once the region's storage backend has made
/// it. Within the project's region policy and the `max_volumes` and `max_volume_gib` quotas.
/// With an `Idempotency-Key`, a retry of the same request answers the same volume.
#[utoipa::path(
    post,
    path = "/volumes",
    tag = "volumes",
    operation_id = "create_volume",
    security(("token" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = "8 to 200 printable characters, one per intended volume.")),
    request_body = NewVolume,
    responses(
        (status = 201, description = "Being made; watch `GET /volumes/{id}` for `available`.", body = Volume,
         headers(("Location" = String, description = "The volume.")),
         links(("GetVolume" = (operation_id = "get_volume", parameters(("id" = "$response.body#/id")),
                 description = "Its state.")))),
        (status = 400, description = "A field breaks a rule; `field` says which.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "The project (or the snapshot) is not one this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The name is taken, the snapshot is not available, or the idempotency key was used for another request.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn create(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Json<NewVolume>, JsonRejection>,
) -> Result<Response, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Json(new) = body.map_err(bad_body)?;
    let key = super::idempotency_key(&headers, "volume")?;
    let who = caller
        .project::<ProjectOperators>(&cp, new.project, &id)
        .await?;
    let req = VolumeRequest {
        name: new.name,
        region: new.region,
        size_gib: new.size_gib.unwrap_or(0),
        idempotency_key: key,
        snapshot: new.snapshot,
    };
    let made = caller
        .acting(cp.create_volume(&who, &req, Some(&id.0)))
        .await
        .map_err(|e| id.refused(renamed(e, "idempotency_key", "Idempotency-Key")))?;
    let volume = one(&cp, &caller, &id, made.id).await?;
    let location = format!("/api/v1/volumes/{}", volume.id);
    Ok(super::created(&volume, &location, made.created))
}

/// The volumes the token reaches that are not deleted, newest first.
#[utoipa::path(
    get,
    path = "/volumes",
    tag = "volumes",
    operation_id = "list_volumes",
    security(("token" = [])),
    params(VolumeQuery),
    responses(
        (status = 200, description = "Every volume.", body = VolumeList),
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
    query: Result<Query<VolumeQuery>, QueryRejection>,
) -> Result<Json<VolumeList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Query(q) = query.map_err(bad_query)?;
    let projects = caller.listed(&cp, q.project, &id).await?;
    let mut volumes = Vec::new();
    for p in &projects {
        volumes.extend(cp.volumes(p).await.map_err(|e| id.refused(e))?);
    }
    volumes.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.0.cmp(&b.id.0)));
    Ok(Json(VolumeList { volumes }))
}

async fn one(
    cp: &ControlPlane,
    caller: &Caller,
    id: &RequestId,
    volume: VolumeId,
) -> Result<Volume, ApiError> {
    let who = caller.volume::<ProjectViewers>(cp, volume, id).await?;
    cp.volume(&who, volume).await.map_err(|e| id.refused(e))
}

/// One volume: its state, size and what it is attached to.
#[utoipa::path(
    get,
    path = "/volumes/{id}",
    tag = "volumes",
    operation_id = "get_volume",
    security(("token" = [])),
    params(("id" = String, Path, description = "The volume's id.", format = Uuid)),
    responses(
        (status = 200, description = "The volume.", body = Volume),
        TokenRefusals,
        (status = 404, description = "No such volume this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn get(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    volume: Result<Path<VolumeId>, PathRejection>,
) -> Result<Json<Volume>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(volume) = volume.map_err(|_| ApiError(AppError::NotFound))?;
    Ok(Json(one(&cp, &caller, &id, volume).await?))
}

/// Grows a volume, attached or not; volumes never shrink.
#[utoipa::path(
    patch,
    path = "/volumes/{id}",
    tag = "volumes",
    operation_id = "resize_volume",
    security(("token" = [])),
    params(("id" = String, Path, description = "The volume's id.", format = Uuid)),
    request_body = Resize,
    responses(
        (status = 200, description = "Growing to the new size.", body = Volume),
        (status = 400, description = "Smaller than now, or out of range.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "No such volume this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is being made, detached or deleted.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn resize(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    volume: Result<Path<VolumeId>, PathRejection>,
    body: Result<Json<Resize>, JsonRejection>,
) -> Result<Json<Volume>, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(volume) = volume.map_err(|_| ApiError(AppError::NotFound))?;
    let Json(resize) = body.map_err(bad_body)?;
    let who = caller.volume::<ProjectOperators>(&cp, volume, &id).await?;
    caller
        .acting(cp.grow_volume(&who, volume, resize.size_gib, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok(Json(one(&cp, &caller, &id, volume).await?))
}

/// Attaches a volume to a running instance of its project and region.
///
/// The region's storage backend serves it and the instance's host plugs it in: it is
/// `attaching`, then `in_use`. A volume is attached to one instance at a time.
#[utoipa::path(
    post,
    path = "/volumes/{id}/attach",
    tag = "volumes",
    operation_id = "attach_volume",
    security(("token" = [])),
    params(("id" = String, Path, description = "The volume's id.", format = Uuid)),
    request_body = Attach,
    responses(
        (status = 202, description = "Attaching.", body = Volume),
        (status = 400, description = "The body names no instance of the volume's project (`field` is `instance`).", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "No such volume this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is attached elsewhere, not available, in another region than the instance, or the instance does not run.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn attach(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    volume: Result<Path<VolumeId>, PathRejection>,
    body: Result<Json<Attach>, JsonRejection>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(volume) = volume.map_err(|_| ApiError(AppError::NotFound))?;
    let Json(attach) = body.map_err(bad_body)?;
    let who = caller.volume::<ProjectOperators>(&cp, volume, &id).await?;
    caller
        .acting(cp.attach_volume(&who, volume, attach.instance, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(one(&cp, &caller, &id, volume).await?),
    ))
}

/// Detaches a volume from its instance: the host unplugs it, then it is `available`.
#[utoipa::path(
    post,
    path = "/volumes/{id}/detach",
    tag = "volumes",
    operation_id = "detach_volume",
    security(("token" = [])),
    params(("id" = String, Path, description = "The volume's id.", format = Uuid)),
    responses(
        (status = 202, description = "Detaching (or detached already).", body = Volume),
        TokenRefusals,
        (status = 404, description = "No such volume this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is being made or deleted.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn detach(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    volume: Result<Path<VolumeId>, PathRejection>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(volume) = volume.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller.volume::<ProjectOperators>(&cp, volume, &id).await?;
    caller
        .acting(cp.detach_volume(&who, volume, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(one(&cp, &caller, &id, volume).await?),
    ))
}

/// Deletes a volume attached to nothing. It is erased on the backend, then gone.
#[utoipa::path(
    delete,
    path = "/volumes/{id}",
    tag = "volumes",
    operation_id = "delete_volume",
    security(("token" = [])),
    params(("id" = String, Path, description = "The volume's id.", format = Uuid)),
    responses(
        (status = 202, description = "Being erased (or gone already)."),
        TokenRefusals,
        (status = 404, description = "No such volume this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`volume_in_use`: it is attached; detach it first. Or it has snapshots: delete them first.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn delete(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    volume: Result<Path<VolumeId>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(volume) = volume.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller.volume::<ProjectOperators>(&cp, volume, &id).await?;
    caller
        .acting(cp.delete_volume(&who, volume, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok(StatusCode::ACCEPTED)
}
