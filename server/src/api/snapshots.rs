//! `/api/v1/volumes/{id}/snapshots` and `/api/v1/snapshots`: point-in-time copies of a
//! project's volumes, from which new volumes are made (`snapshot` in `POST /volumes`). The
//! same control-plane calls as the portal's Volumes page.

use app::error::AppError;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use control_plane::ControlPlane;
use control_plane::api_tokens::TokenScope;
use control_plane::prelude::*;
use control_plane::tenancy::{ProjectOperators, ProjectViewers};
use control_plane::volumes::snapshots::SnapshotRequest;
use http::{HeaderMap, StatusCode};
use portal_types::volumes::Snapshot;
use portal_types::{ProjectId, SnapshotId, VolumeId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_body, bad_query, renamed};

/// A snapshot to take.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "before-upgrade"}))]
pub struct NewSnapshot {
    /// 1 to 63 lowercase letters, digits and `-`; unique among the project's snapshots.
    pub name: String,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SnapshotQuery {
    /// Only this project's (one the token reaches).
    pub project: Option<ProjectId>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
}

/// Takes a snapshot of a volume that is available or attached.
///
/// It starts `creating` and becomes `available` once the storage backend has copied the
/// volume (atomically, even while it is written). It counts for the `max_volume_gib` quota
/// and is billed by size at the region's storage price. With an `Idempotency-Key`, a retry
/// of the same request answers the same snapshot.
#[utoipa::path(
    post,
    path = "/volumes/{id}/snapshots",
    tag = "volumes",
    operation_id = "create_snapshot",
    security(("token" = [])),
    params(
        ("id" = String, Path, description = "The volume's id.", format = Uuid),
        ("Idempotency-Key" = Option<String>, Header, description = "8 to 200 printable characters, one per intended snapshot."),
    ),
    request_body = NewSnapshot,
    responses(
        (status = 201, description = "Being taken; watch `GET /snapshots/{id}` for `available`.", body = Snapshot,
         headers(("Location" = String, description = "The snapshot.")),
         links(("GetSnapshot" = (operation_id = "get_snapshot", parameters(("id" = "$response.body#/id")),
                 description = "Its state.")))),
        (status = 400, description = "A field breaks a rule; `field` says which.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "No such volume this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The volume is being made or deleted, the name is taken, or the idempotency key was used for another request.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn create(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    headers: HeaderMap,
    volume: Result<Path<VolumeId>, PathRejection>,
    body: Result<Json<NewSnapshot>, JsonRejection>,
) -> Result<Response, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(volume) = volume.map_err(|_| ApiError(AppError::NotFound))?;
    let Json(new) = body.map_err(bad_body)?;
    let key = super::idempotency_key(&headers, "snapshot")?;
    let who = caller.volume::<ProjectOperators>(&cp, volume, &id).await?;
    let req = SnapshotRequest {
        name: new.name,
        idempotency_key: key,
    };
    let made = caller
        .acting(cp.create_snapshot(&who, volume, &req, Some(&id.0)))
        .await
        .map_err(|e| id.refused(renamed(e, "idempotency_key", "Idempotency-Key")))?;
    let snapshot = one(&cp, &caller, &id, made.id).await?;
    let location = format!("/api/v1/snapshots/{}", snapshot.id);
    Ok(super::created(&snapshot, &location, made.created))
}

/// The snapshots the token reaches that are not deleted, newest first.
#[utoipa::path(
    get,
    path = "/snapshots",
    tag = "volumes",
    operation_id = "list_snapshots",
    security(("token" = [])),
    params(SnapshotQuery),
    responses(
        (status = 200, description = "Every snapshot.", body = SnapshotList),
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
    query: Result<Query<SnapshotQuery>, QueryRejection>,
) -> Result<Json<SnapshotList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Query(q) = query.map_err(bad_query)?;
    let projects = caller.listed(&cp, q.project, &id).await?;
    let mut snapshots = Vec::new();
    for p in &projects {
        snapshots.extend(cp.snapshots(p).await.map_err(|e| id.refused(e))?);
    }
    snapshots.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.0.cmp(&b.id.0)));
    Ok(Json(SnapshotList { snapshots }))
}

async fn one(
    cp: &ControlPlane,
    caller: &Caller,
    id: &RequestId,
    snapshot: SnapshotId,
) -> Result<Snapshot, ApiError> {
    let who = caller.snapshot::<ProjectViewers>(cp, snapshot, id).await?;
    cp.snapshot(&who, snapshot).await.map_err(|e| id.refused(e))
}

/// One snapshot: its state, size, volume and cost.
#[utoipa::path(
    get,
    path = "/snapshots/{id}",
    tag = "volumes",
    operation_id = "get_snapshot",
    security(("token" = [])),
    params(("id" = String, Path, description = "The snapshot's id.", format = Uuid)),
    responses(
        (status = 200, description = "The snapshot.", body = Snapshot),
        TokenRefusals,
        (status = 404, description = "No such snapshot this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn get(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    snapshot: Result<Path<SnapshotId>, PathRejection>,
) -> Result<Json<Snapshot>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(snapshot) = snapshot.map_err(|_| ApiError(AppError::NotFound))?;
    Ok(Json(one(&cp, &caller, &id, snapshot).await?))
}

/// Deletes a snapshot: it is erased on the backend, then gone.
#[utoipa::path(
    delete,
    path = "/snapshots/{id}",
    tag = "volumes",
    operation_id = "delete_snapshot",
    security(("token" = [])),
    params(("id" = String, Path, description = "The snapshot's id.", format = Uuid)),
    responses(
        (status = 202, description = "Being erased (or gone already)."),
        TokenRefusals,
        (status = 404, description = "No such snapshot this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is still being taken, or a new volume is being made from it.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn delete(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    snapshot: Result<Path<SnapshotId>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(snapshot) = snapshot.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller
        .snapshot::<ProjectOperators>(&cp, snapshot, &id)
        .await?;
    caller
        .acting(cp.delete_snapshot(&who, snapshot, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok(StatusCode::ACCEPTED)
}
