//! `/api/v1/clusters`: N instances of one SKU placed together within one leaf switch, spine
//! group or fabric, launched and released as one. The same control-plane calls as the
//! portal's cluster pages; each member is also an instance (`/instances/{id}`).

use app::error::AppError;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use control_plane::ControlPlane;
use control_plane::allocations::clusters::ClusterOrder;
use control_plane::allocations::{LaunchOrder, OrderKeys, Tags};
use control_plane::api_tokens::TokenScope;
use control_plane::prelude::*;
use control_plane::tenancy::{ProjectOperators, ProjectViewers};
use http::{StatusCode, header};
use portal_types::clusters::Cluster;
use portal_types::{ClusterId, ProjectId, SshKeyId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_body, bad_query, renamed};

/// A cluster to launch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "project": "0a0e0000-0000-4000-8001-000000000001", "sku": "h100.8x", "members": 4,
    "locality": "leaf", "locality_required": true, "image": "ubuntu-24.04-cuda", "name": "llama",
    "ssh_public_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop"]
}))]
pub struct NewCluster {
    /// The project to launch in. May be left out when the token is for one project.
    pub project: Option<ProjectId>,
    /// The SKU every member is, as the offers list it.
    pub sku: String,
    /// How many members: 2 to 128.
    #[schema(minimum = 2, maximum = 128)]
    pub members: u32,
    /// How close: `leaf` (one leaf switch), `spine` (one spine group) or `fabric`.
    #[schema(pattern = "^(leaf|spine|fabric)$")]
    pub locality: String,
    /// True: within `locality` or not at all. False (the default): within `locality` if it
    /// can be had now, else the next wider one.
    #[serde(default)]
    pub locality_required: bool,
    /// One of the SKU's regions; left out, any of them.
    #[serde(default)]
    pub region: Option<String>,
    /// The marketplace listing's slug every member runs.
    pub image: String,
    /// The listing's version; left out, its newest published one.
    #[serde(default)]
    pub version: Option<String>,
    /// 1 to 56 lowercase letters, digits and `-`; members are named `<name>-1`, `<name>-2`, ….
    pub name: String,
    /// Saved keys of the token's maker (`/ssh-keys`).
    #[serde(default)]
    pub ssh_key_ids: Vec<SshKeyId>,
    /// Public key lines to install on every member besides the saved ones.
    #[serde(default)]
    pub ssh_public_keys: Vec<String>,
    /// Labels every member carries.
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub tags: Tags,
    /// Release every member automatically after this many hours (1 to 8760).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 8760)]
    pub lifetime_hours: Option<u32>,
    /// Cloud-init user data every member runs at first boot.
    #[serde(default)]
    #[schema(max_length = 16384, pattern = r"^(#cloud-config|#!)")]
    pub user_data: Option<String>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ClusterQuery {
    /// Only this project's (one the token reaches).
    pub project: Option<ProjectId>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterList {
    pub clusters: Vec<Cluster>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TopologyQuery {
    /// `slurm` (the default): a `topology.conf` for the tree plugin. `hosts`: `/etc/hosts`
    /// lines naming each member at its private address.
    #[param(pattern = "^(slurm|hosts)$")]
    pub format: Option<String>,
}

/// Launches a cluster: every member placed within the locality in one transaction, or none.
///
/// Placement uses as few leaf switches as can hold the members. A refusal for room
/// (`sku_unavailable`) says how many would fit within each locality now and what holds nodes
/// back. The policy chain counts every member's GPUs and first hour. With an
/// `Idempotency-Key`, a retry of the same request answers the same cluster.
#[utoipa::path(
    post,
    path = "/clusters",
    tag = "clusters",
    operation_id = "launch_cluster",
    security(("token" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = "8 to 200 printable characters, one per intended cluster.")),
    request_body = NewCluster,
    responses(
        (status = 201, description = "Every member placed; their nodes are being told. Watch `GET /clusters/{id}`.", body = Cluster,
         headers(("Location" = String, description = "The cluster.")),
         links(("GetCluster" = (operation_id = "get_cluster", parameters(("id" = "$response.body#/id")),
                 description = "Its members and their states.")))),
        (status = 400, description = "A field breaks a rule; `field` says which.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "The project (or a saved key) is not one this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The members don't fit within the locality now (`sku_unavailable`, saying what would), the name is taken, or the idempotency key was used for a different request. A policy's refusal is a 403.", body = Problem, content_type = "application/problem+json",
         example = json!({"type": "urn:gpuaas:problem:sku_unavailable", "title": "No capacity", "status": 409,
             "detail": "16 members don't fit on one spine now: one leaf holds at most 4 (leaf l3 (spine s2, fabric ib0)); one spine holds at most 12 (spine s2 (fabric ib0)); one fabric holds at most 14 (fabric ib0) in eu-west-1; in spine s2 (fabric ib0), 3 node(s) are draining, unhealthy, silent or not selling gpu_slice", "code": "sku_unavailable"})),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn launch(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    headers: http::HeaderMap,
    body: Result<Json<NewCluster>, JsonRejection>,
) -> Result<Response, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Json(new) = body.map_err(bad_body)?;
    let key = super::idempotency_key(&headers, "cluster")?;
    let who = caller
        .project::<ProjectOperators>(&cp, new.project, &id)
        .await?;
    let order = ClusterOrder {
        launch: LaunchOrder {
            sku: new.sku,
            region: new.region,
            image: new.image,
            version: new.version,
            name: new.name,
            keys: OrderKeys {
                saved: new.ssh_key_ids,
                typed: new.ssh_public_keys,
                save_as: None,
            },
            idempotency_key: key,
            lifetime_hours: new.lifetime_hours,
            published_ports: Vec::new(),
            tags: new.tags,
            user_data: new.user_data,
            volumes: Vec::new(),
        },
        members: new.members,
        locality: new.locality,
        locality_required: new.locality_required,
    };
    let launched = caller
        .acting(cp.launch_cluster(&caller.0.principal, &who, order, Some(&id.0)))
        .await
        .map_err(|e| id.refused(renamed(e, "idempotency_key", "Idempotency-Key")))?;
    let cluster = one(&cp, &caller, &id, launched.id).await?;
    let location = format!("/api/v1/clusters/{}", cluster.id);
    Ok(super::created(&cluster, &location, launched.created))
}

/// The clusters the token reaches: those not released, and those released in the last day.
#[utoipa::path(
    get,
    path = "/clusters",
    tag = "clusters",
    operation_id = "list_clusters",
    security(("token" = [])),
    params(ClusterQuery),
    responses(
        (status = 200, description = "Every cluster, newest first.", body = ClusterList),
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
    query: Result<Query<ClusterQuery>, QueryRejection>,
) -> Result<Json<ClusterList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Query(q) = query.map_err(bad_query)?;
    let projects = caller.listed(&cp, q.project, &id).await?;
    let mut clusters = Vec::new();
    for p in &projects {
        clusters.extend(cp.clusters(p).await.map_err(|e| id.refused(e))?);
    }
    clusters.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.0.cmp(&b.id.0)));
    Ok(Json(ClusterList { clusters }))
}

async fn one(
    cp: &ControlPlane,
    caller: &Caller,
    id: &RequestId,
    cluster: ClusterId,
) -> Result<Cluster, ApiError> {
    let who = caller.cluster::<ProjectViewers>(cp, cluster, id).await?;
    cp.cluster(&who, cluster).await.map_err(|e| id.refused(e))
}

/// One cluster: its placement and each member's state, leaf and SSH command.
#[utoipa::path(
    get,
    path = "/clusters/{id}",
    tag = "clusters",
    operation_id = "get_cluster",
    security(("token" = [])),
    params(("id" = String, Path, description = "The cluster's id.", format = Uuid)),
    responses(
        (status = 200, description = "The cluster.", body = Cluster),
        TokenRefusals,
        (status = 404, description = "No such cluster this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn get(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    cluster: Result<Path<ClusterId>, PathRejection>,
) -> Result<Json<Cluster>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(cluster) = cluster.map_err(|_| ApiError(AppError::NotFound))?;
    Ok(Json(one(&cp, &caller, &id, cluster).await?))
}

/// The members' place in the fabric, for the tenant's own scheduler.
#[utoipa::path(
    get,
    path = "/clusters/{id}/topology",
    tag = "clusters",
    operation_id = "get_cluster_topology",
    security(("token" = [])),
    params(("id" = String, Path, description = "The cluster's id.", format = Uuid), TopologyQuery),
    responses(
        (status = 200, description = "A Slurm `topology.conf` (tree plugin): a switch per leaf naming its members, one per spine group over its leaves, and the fabric over those.", body = String, content_type = "text/plain"),
        (status = 400, description = "A format other than `slurm` or `hosts`.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "No such cluster this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn topology(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    cluster: Result<Path<ClusterId>, PathRejection>,
    query: Result<Query<TopologyQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(cluster) = cluster.map_err(|_| ApiError(AppError::NotFound))?;
    let Query(q) = query.map_err(bad_query)?;
    let hosts = match q.format.as_deref() {
        None | Some("slurm") => false,
        Some("hosts") => true,
        Some(_) => {
            return Err(ApiError(AppError::Invalid {
                field: "format".into(),
                reason: "the formats are slurm (a topology.conf) and hosts (/etc/hosts lines)"
                    .into(),
            }));
        }
    };
    let who = caller.cluster::<ProjectViewers>(&cp, cluster, &id).await?;
    let text = if hosts {
        cp.cluster_hosts(&who, cluster).await
    } else {
        cp.cluster_topology_slurm(&who, cluster).await
    }
    .map_err(|e| id.refused(e))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// Releases every member of a cluster. Idempotent.
#[utoipa::path(
    delete,
    path = "/clusters/{id}",
    tag = "clusters",
    operation_id = "release_cluster",
    security(("token" = [])),
    params(("id" = String, Path, description = "The cluster's id.", format = Uuid)),
    responses(
        (status = 202, description = "Every member released or being released.", body = Cluster),
        TokenRefusals,
        (status = 404, description = "No such cluster this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn release(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    cluster: Result<Path<ClusterId>, PathRejection>,
) -> Result<(StatusCode, Json<Cluster>), ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Path(cluster) = cluster.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller
        .cluster::<ProjectOperators>(&cp, cluster, &id)
        .await?;
    caller
        .acting(cp.release_cluster(&who, cluster, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(one(&cp, &caller, &id, cluster).await?),
    ))
}
