//! `/api/v1/instances`: allocations, as a program launches, lists, watches and releases them.
//! The same control-plane calls as the portal's launch form and allocation pages; the token
//! narrows what its maker may do to its scopes and its reach (one project, or the whole
//! organization).

use std::time::Duration;

use app::error::AppError;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use control_plane::ControlPlane;
use control_plane::allocations::{AllocationFilter, LaunchOrder, MAX_PAGE, OrderKeys, Tags};
use control_plane::api_tokens::TokenScope;
use control_plane::prelude::*;
use control_plane::tenancy::{ProjectOperators, ProjectViewers};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use portal_types::allocations::{AllocationDetail, AllocationSummary};
use portal_types::{AllocationId, Money, ProjectId, SshKeyId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use utoipa::{IntoParams, ToSchema};

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_body, bad_query, renamed};

/// What to launch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "project": "0a0e0000-0000-4000-8001-000000000001", "sku": "h100.1x", "region": "eu-west-1",
    "image": "ubuntu-24.04-cuda", "name": "train-7",
    "ssh_public_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop"],
    "tags": {"team": "vision"}, "lifetime_hours": 24, "published_ports": [8888]
}))]
pub struct NewInstance {
    /// The project to launch in. May be left out when the token is for one project.
    pub project: Option<ProjectId>,
    /// The SKU's name, as the offers list it.
    pub sku: String,
    /// One of the SKU's regions; left out, any of them.
    #[serde(default)]
    pub region: Option<String>,
    /// The marketplace listing's slug (an OS image is a listing too), e.g. `ubuntu-22-04`.
    pub image: String,
    /// The listing's version; left out, its newest published one.
    #[serde(default)]
    pub version: Option<String>,
    /// 1 to 63 lowercase letters, digits and `-`; unique among the project's live instances.
    pub name: String,
    /// Saved keys of the token's maker (`/ssh-keys`).
    #[serde(default)]
    pub ssh_key_ids: Vec<SshKeyId>,
    /// Public key lines to install besides the saved ones.
    #[serde(default)]
    pub ssh_public_keys: Vec<String>,
    /// At most 16 labels to find it by: keys of lowercase letters, digits, `.`, `_`, `-`.
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub tags: Tags,
    /// Release it automatically after this many hours (1 to 8760); left out, when released.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 8760)]
    pub lifetime_hours: Option<u32>,
    /// Guest TCP ports to publish besides SSH (at most 7; not 22).
    #[serde(default)]
    #[schema(schema_with = port_list)]
    pub published_ports: Vec<u16>,
    /// Cloud-init user data for the VM: a `#cloud-config` document or a `#!` script, at most
    /// 16 KiB, for images that accept it (`accepts_user_data` in `/images`). It runs inside
    /// the VM after the platform's own set-up (user, SSH keys, network), which it can add to
    /// but not replace.
    #[serde(default)]
    #[schema(max_length = 16384, pattern = r"^(#cloud-config|#!)")]
    pub user_data: Option<String>,
    /// Available volumes of the project to attach (at most 8, all in one region): the
    /// instance goes to their region, and they are attached with the launch or not at all.
    #[serde(default)]
    #[schema(max_items = 8)]
    pub volumes: Vec<portal_types::VolumeId>,
}

/// At most 7 TCP ports.
fn port_list() -> utoipa::openapi::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(65535)),
        )
        .max_items(Some(7))
        .build()
}

/// What a launch answers, and what a retry with the same `Idempotency-Key` answers again:
/// the facts fixed at launch. Its progress is `GET /instances/{id}`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "id": "0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21", "project_id": "6a1d3c9e-2b44-4f0e-9d0b-4c8f6e1a2b3c",
    "name": "train-7", "sku": "h100.1x", "region": "eu-west-1", "image": "Ubuntu 22.04 2026.11",
    "price_per_hour": {"amount_minor": 299, "currency": "USD"}, "fee_per_hour": {"amount_minor": 0, "currency": "USD"},
    "tags": {"team": "vision"}, "created_at": "2026-11-25T10:00:00Z", "expires_at": "2026-11-26T10:00:00Z",
    "href": "/api/v1/instances/0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21"
}))]
pub struct Launched {
    pub id: AllocationId,
    pub project_id: ProjectId,
    pub name: String,
    pub sku: String,
    pub region: String,
    /// The listing and version it runs.
    pub image: String,
    pub price_per_hour: Money,
    pub fee_per_hour: Money,
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub tags: Tags,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<OffsetDateTime>,
    /// Where to watch it.
    pub href: String,
}

impl Launched {
    fn of(a: AllocationDetail) -> Self {
        Self {
            href: format!("/api/v1/instances/{}", a.id),
            id: a.id,
            project_id: a.project_id,
            name: a.name,
            sku: a.sku,
            region: a.region,
            image: a.image,
            price_per_hour: a.price_per_hour,
            fee_per_hour: a.fee_per_hour,
            tags: a.tags,
            created_at: a.created_at,
            expires_at: a.expires_at,
        }
    }
}

/// Launches an instance.
///
/// The policy chain, placement and the reservation in one transaction, as the portal's launch
/// form does. Audited with the token's id.
///
/// With an `Idempotency-Key`, a retry of the same request (same body) answers what the first
/// answered (`201`, the same body, and `Idempotent-Replayed: true`) for as long as the
/// instance is on record (at least 24 hours); the same key with a different body is refused
/// (`409`). A refused launch changes nothing, so its retry is judged afresh.
#[utoipa::path(
    post,
    path = "/instances",
    tag = "instances",
    operation_id = "launch_instance",
    security(("token" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = "8 to 200 printable characters, one per intended launch (a UUID, say).")),
    request_body = NewInstance,
    responses(
        (status = 201, description = "Placed; the node is being told. Watch it at `href`.", body = Launched,
         headers(("Location" = String, description = "The instance.")),
         links(
             ("GetInstance" = (operation_id = "get_instance", parameters(("id" = "$response.body#/id")),
                 description = "Its state, phases and how to connect.")),
             ("ReleaseInstance" = (operation_id = "release_instance", parameters(("id" = "$response.body#/id")),
                 description = "Release it."))
         )),
        (status = 400, description = "A field breaks a rule; `field` says which.", body = Problem, content_type = "application/problem+json",
         example = json!({"type": "urn:gpuaas:problem:invalid", "title": "Invalid input", "status": 400,
             "detail": "Invalid name: \"Train_7\": use 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit", "code": "invalid", "field": "name"})),
        TokenRefusals,
        (status = 404, description = "The project (or a saved key) is not one this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Nothing fits now (`sku_unavailable`, with placement's explanation), or the idempotency key was used for a different request, or the name is taken (`conflict`). A policy's refusal (`policy_denied`, `quota_exceeded`, `budget_exceeded`) is a 403 naming the policy, the level that set it and the numbers.", body = Problem, content_type = "application/problem+json",
         example = json!({"type": "urn:gpuaas:problem:sku_unavailable", "title": "No capacity", "status": 409,
             "detail": "No capacity for h100.8x in eu-west-1: 3 nodes checked; 2 have fewer than 8 free slots, 1 is draining.", "code": "sku_unavailable"})),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn launch(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Json<NewInstance>, JsonRejection>,
) -> Result<Response, ApiError> {
    caller.require(TokenScope::Launch, &id)?;
    let Json(new) = body.map_err(bad_body)?;
    let key = super::idempotency_key(&headers, "launch")?;
    let who = caller
        .project::<ProjectOperators>(&cp, new.project, &id)
        .await?;
    let principal = &caller.0.principal;
    let order = LaunchOrder {
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
        published_ports: new.published_ports,
        tags: new.tags,
        user_data: new.user_data,
        volumes: new.volumes,
    };
    let launched = caller
        .acting(cp.launch_order(principal, &who, order, Some(&id.0)))
        .await
        .map_err(|e| id.refused(renamed(e, "idempotency_key", "Idempotency-Key")))?;
    let detail = cp
        .allocation(principal, launched.id)
        .await
        .map_err(|e| id.refused(e))?;
    let body = Launched::of(detail);
    Ok(super::created(&body, &body.href, launched.created))
}

/// Filters and paging.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InstanceQuery {
    /// Only this project's (one the token reaches).
    pub project: Option<ProjectId>,
    /// A lifecycle state (`requested`, `placed`, `provisioning`, `running`, `stopped`,
    /// `releasing`, `cleaning`, `released`), `active` for every one not released (stopped ones
    /// included), or `all`.
    #[param(
        pattern = r"^(active|all|requested|placed|provisioning|running|stopped|releasing|cleaning|released)?$"
    )]
    pub state: Option<String>,
    /// `key` (has the tag) or `key=value`.
    #[param(pattern = r"^([a-z0-9][a-z0-9._-]{0,62}(=[^\u0000-\u001f\u007f-\u009f]{0,128})?)?$")]
    pub tag: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(
        pattern = r"^([0-9]{1,16}_[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})?$"
    )]
    pub cursor: Option<String>,
    /// 1 to 500; 50 when left out.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    pub instances: Vec<AllocationSummary>,
    /// Pass as `cursor` for the next page; absent after the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The instances the token reaches, newest first.
///
/// A page at a time: pass `next_cursor` back as `cursor` for the next.
#[utoipa::path(
    get,
    path = "/instances",
    tag = "instances",
    operation_id = "list_instances",
    security(("token" = [])),
    params(InstanceQuery),
    responses(
        (status = 200, description = "One page.", body = InstanceList,
         example = json!({"instances": [{"id": "0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21", "project_id": "6a1d3c9e-2b44-4f0e-9d0b-4c8f6e1a2b3c",
             "name": "train-7", "sku": "h100.1x", "gpu_count": 1, "region": "eu-west-1", "state": "running", "projected": "running",
             "price_per_hour": {"amount_minor": 299, "currency": "USD"}, "tags": {"team": "vision"},
             "created_at": "2026-11-25T10:00:00Z", "ssh": "ssh -p 22008 ubuntu@gpu-eu-1.example.net",
             "published": [{"guest_port": 8888, "address": "gpu-eu-1.example.net:22009"}]}],
             "next_cursor": "1764064800000000_0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21"})),
        (status = 400, description = "A filter, the cursor or the limit is malformed.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "The project is not one this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn list(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    query: Result<Query<InstanceQuery>, QueryRejection>,
) -> Result<Json<InstanceList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Query(q) = query.map_err(bad_query)?;
    let projects = caller.listed(&cp, q.project, &id).await?;
    let filter = AllocationFilter {
        state: q.state,
        tag: q.tag,
        after: q.cursor.filter(|c| !c.is_empty()),
        limit: q.limit.unwrap_or(50).min(MAX_PAGE + 1),
    };
    let page = cp
        .allocation_page(&projects, &filter)
        .await
        .map_err(|e| id.refused(e))?;
    Ok(Json(InstanceList {
        instances: page.items,
        next_cursor: page.next,
    }))
}

/// How long a watch may be held.
const MAX_WAIT_S: u64 = 60;
/// How often a held watch looks again.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Long-polling.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WatchQuery {
    /// With `If-None-Match`: hold the answer up to this many seconds (1 to 60) until the
    /// instance differs from that ETag, then answer `200`; unchanged by then, `304`.
    #[param(minimum = 0, maximum = 60)]
    pub wait: Option<u64>,
}

/// One instance, and how to connect to it.
///
/// Its lifecycle state, the phases its node reported, how to reach it (the SSH command and the
/// published ports, once running), and its history.
///
/// Every answer carries an `ETag`. To wait for a change without polling, send it back as
/// `If-None-Match` with `?wait=30`: the answer comes as soon as something changes (a state, a
/// phase), or as `304` after 30 seconds.
#[utoipa::path(
    get,
    path = "/instances/{id}",
    tag = "instances",
    operation_id = "get_instance",
    security(("token" = [])),
    params(("id" = String, Path, description = "The instance's id.", format = Uuid), WatchQuery,
           ("If-None-Match" = Option<String>, Header, description = "The ETag of the representation you hold.")),
    responses(
        (status = 200, description = "The instance.", body = AllocationDetail,
         headers(("ETag" = String, description = "Changes whenever the instance does."))),
        (status = 304, description = "Unchanged from `If-None-Match` (after `wait`, when given)."),
        (status = 400, description = "`wait` is out of range.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
        (status = 404, description = "No such instance this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn get(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    headers: HeaderMap,
    instance: Result<Path<AllocationId>, PathRejection>,
    query: Result<Query<WatchQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(instance) = instance.map_err(|_| ApiError(AppError::NotFound))?;
    let Query(q) = query.map_err(bad_query)?;
    let wait = match q.wait {
        None | Some(0) => None,
        Some(s) if s <= MAX_WAIT_S => Some(Duration::from_secs(s)),
        Some(s) => {
            return Err(ApiError::invalid(
                "wait",
                format!("{s}: wait 1 to {MAX_WAIT_S} seconds"),
            ));
        }
    };
    let held = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    caller
        .allocation::<ProjectViewers>(&cp, instance, &id)
        .await?;
    let _watch = match (&held, wait) {
        (Some(_), Some(_)) => Some(super::watches::hold(caller.0.tenant).ok_or(ApiError(
            AppError::RateLimited {
                retry_after_secs: 1,
            },
        ))?),
        _ => None,
    };
    let started = tokio::time::Instant::now();
    loop {
        let mut detail = cp
            .allocation(&caller.0.principal, instance)
            .await
            .map_err(|e| id.refused(e))?;
        detail.can_release &= caller.0.require(TokenScope::Launch).is_ok();
        let etag = etag(&detail);
        let unchanged = held.as_deref() == Some(etag.as_str());
        let waited_out = wait.is_none_or(|w| started.elapsed() + WATCH_EVERY > w);
        if unchanged && !waited_out {
            tokio::time::sleep(WATCH_EVERY).await;
            // The token may have been revoked, or have expired or lapsed, while it waited.
            cp.token_still_live(&caller.0)
                .await
                .map_err(|e| id.refused(e))?;
            continue;
        }
        let mut response = if unchanged {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            Json(detail).into_response()
        };
        if let Ok(v) = HeaderValue::from_str(&etag) {
            response.headers_mut().insert(header::ETAG, v);
        }
        return Ok(response);
    }
}

/// A strong ETag of what `GET /instances/{id}` would answer.
fn etag(detail: &AllocationDetail) -> String {
    let json = serde_json::to_vec(detail).unwrap_or_default();
    let digest = Sha256::digest(&json);
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Releases an instance.
///
/// Its VM is stopped and destroyed, its slots wiped and verified before anyone else gets them.
/// Idempotent: releasing one already on its way out, or gone, changes nothing and answers the
/// same. Audited with the token's id.
#[utoipa::path(
    delete,
    path = "/instances/{id}",
    tag = "instances",
    operation_id = "release_instance",
    security(("token" = [])),
    params(("id" = String, Path, description = "The instance's id.", format = Uuid)),
    responses(
        (status = 202, description = "Released or being released; watch `GET /instances/{id}` for `released`.", body = AllocationDetail),
        TokenRefusals,
        (status = 404, description = "No such instance this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn release(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    instance: Result<Path<AllocationId>, PathRejection>,
) -> Result<(StatusCode, Json<AllocationDetail>), ApiError> {
    let c = cp.clone();
    changed(
        &cp,
        &id,
        &caller,
        instance,
        |who, instance, rid| async move { c.release_allocation(&who, instance, Some(&rid)).await },
    )
    .await
}

/// What release, stop and start share: the launch scope, the caller's operator proof in the
/// instance's project, the change (audited with the token), then the instance as it is now.
async fn changed<F, Fut>(
    cp: &ControlPlane,
    id: &RequestId,
    caller: &Caller,
    instance: Result<Path<AllocationId>, PathRejection>,
    change: F,
) -> Result<(StatusCode, Json<AllocationDetail>), ApiError>
where
    F: FnOnce(control_plane::tenancy::Project<ProjectOperators>, AllocationId, String) -> Fut,
    Fut: std::future::Future<Output = control_plane::error::Result<()>>,
{
    caller.require(TokenScope::Launch, id)?;
    let Path(instance) = instance.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller
        .allocation::<ProjectOperators>(cp, instance, id)
        .await?;
    caller
        .acting(change(who, instance, id.0.clone()))
        .await
        .map_err(|e| id.refused(e))?;
    let detail = cp
        .allocation(&caller.0.principal, instance)
        .await
        .map_err(|e| id.refused(e))?;
    Ok((StatusCode::ACCEPTED, Json(detail)))
}

/// Stops an instance.
///
/// The guest shuts down and its boot disk is saved on the region's storage; then its GPUs are
/// released and wiped, and it costs only its disk (at the region's storage price) until it is
/// started again. Its id, name, keys, tags, ports and attached volumes stay. Idempotent: a
/// stopping or stopped instance answers the same. Audited with the token's id.
#[utoipa::path(
    post,
    path = "/instances/{id}/stop",
    tag = "instances",
    operation_id = "stop_instance",
    security(("token" = [])),
    params(("id" = String, Path, description = "The instance's id.", format = Uuid)),
    responses(
        (status = 202, description = "Stopping or stopped; watch `GET /instances/{id}` for `stopped`.", body = AllocationDetail),
        TokenRefusals,
        (status = 404, description = "No such instance this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is not running (or is a cluster's member), or its region has no storage price.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn stop(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    instance: Result<Path<AllocationId>, PathRejection>,
) -> Result<(StatusCode, Json<AllocationDetail>), ApiError> {
    let c = cp.clone();
    changed(
        &cp,
        &id,
        &caller,
        instance,
        |who, instance, rid| async move { c.stop_instance(&who, instance, Some(&rid)).await },
    )
    .await
}

/// Starts a stopped instance.
///
/// It is placed again anywhere in its region where its SKU is free, and boots its saved disk
/// with the same id, name, keys, tags and ports; the SSH port may change (the answer and
/// `GET /instances/{id}` show the new one). When nothing fits, or a policy (GPU quota, budget)
/// refuses, the answer says why and it stays stopped. Idempotent: a starting or running
/// instance answers the same. Audited with the token's id.
#[utoipa::path(
    post,
    path = "/instances/{id}/start",
    tag = "instances",
    operation_id = "start_instance",
    security(("token" = [])),
    params(("id" = String, Path, description = "The instance's id.", format = Uuid)),
    responses(
        (status = 202, description = "Starting or running; watch `GET /instances/{id}` for `running`.", body = AllocationDetail),
        TokenRefusals,
        (status = 404, description = "No such instance this token reaches.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "It is not stopped, a policy refuses it, or no host in its region has its SKU free (`sku_unavailable`); it stays stopped.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn start(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    instance: Result<Path<AllocationId>, PathRejection>,
) -> Result<(StatusCode, Json<AllocationDetail>), ApiError> {
    let c = cp.clone();
    changed(&cp, &id, &caller, instance, |who, instance, rid| async move {
        c.start_instance(&who, instance, Some(&rid)).await.map(drop)
    })
    .await
}
