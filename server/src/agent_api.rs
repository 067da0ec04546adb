//! `/agent/v3/*`: the node API. Machine callers only: no cookies, no sessions. Enrolment is
//! authenticated by the one-time bootstrap token in its body; everything else by the node
//! credential (`Authorization: Bearer …`, hashed at rest). Every request must carry
//! `x-agent-protocol: 1`; another version, on the header or in the path, gets a clear refusal.

use control_plane::prelude::*;

use std::time::Duration;

use agent_protocol::{
    API_PREFIX, ApiError, ClaimRequest, ClaimResponse, EnrollRequest, EnrollResponse, Heartbeat,
    HeartbeatAck, MAX_CLAIM_WAIT_S, Overlay, PROTOCOL_HEADER, PROTOCOL_VERSION, PhaseReport,
    TaskResult, codes,
};
use app::AppError;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use control_plane::agent_api::NodeAgent;
use control_plane::fleet::HEARTBEAT_INTERVAL_S;
use control_plane::{AgentTaskId, ControlPlane};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What a handler answers when it can't do what was asked.
pub struct Refusal(StatusCode, ApiError);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, axum::Json(self.1)).into_response()
    }
}

fn refuse(status: StatusCode, code: &str, message: impl Into<String>) -> Refusal {
    Refusal(
        status,
        ApiError {
            code: code.into(),
            message: message.into(),
        },
    )
}

/// The one mapping ([`AppError::from_domain`], [`AppError::status`]) decides the status and
/// the words; the agent protocol has its own, smaller set of codes, and the agent retries
/// only on `unavailable` and `internal`.
impl From<control_plane::Error> for Refusal {
    fn from(e: control_plane::Error) -> Self {
        // No page context here: a fault is logged under an id the agent logs too.
        let e = AppError::from_domain(e, || uuid::Uuid::new_v4().to_string());
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        refuse(status, agent_code(status), e.to_string())
    }
}

/// The agent protocol's code for a status of the one mapping.
fn agent_code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => codes::UNAUTHENTICATED,
        StatusCode::NOT_FOUND => codes::NOT_FOUND,
        StatusCode::CONFLICT => codes::CONFLICT,
        StatusCode::SERVICE_UNAVAILABLE => codes::UNAVAILABLE,
        s if s.is_client_error() => codes::INVALID,
        _ => codes::INTERNAL,
    }
}

fn unsupported(got: &str) -> Refusal {
    refuse(
        StatusCode::BAD_REQUEST,
        codes::UNSUPPORTED_PROTOCOL,
        format!(
            "this control plane speaks agent protocol {PROTOCOL_VERSION} ({API_PREFIX}); \
             the agent speaks {got}. Install an agent release for protocol {PROTOCOL_VERSION}."
        ),
    )
}

fn check_version(headers: &HeaderMap) -> Result<(), Refusal> {
    match headers
        .get(PROTOCOL_HEADER)
        .map(|v| v.to_str().unwrap_or("?"))
    {
        Some(v) if v.trim() == PROTOCOL_VERSION.to_string() => Ok(()),
        Some(v) => Err(unsupported(&format!("version {v}"))),
        None => Err(unsupported(&format!(
            "no version (missing {PROTOCOL_HEADER} header)"
        ))),
    }
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            codes::INVALID,
            format!("the request body is not valid: {e}"),
        )
    })
}

async fn node(cp: &ControlPlane, headers: &HeaderMap) -> Result<NodeAgent, Refusal> {
    check_version(headers)?;
    let credential = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            refuse(
                StatusCode::UNAUTHORIZED,
                codes::UNAUTHENTICATED,
                "send the node credential as `Authorization: Bearer …`",
            )
        })?;
    Ok(cp.authenticate_node(credential.trim()).await?)
}

fn task_id(raw: &str) -> Result<AgentTaskId, Refusal> {
    raw.parse()
        .map_err(|_| refuse(StatusCode::NOT_FOUND, codes::NOT_FOUND, "task not found"))
}

fn json<T: Serialize>(value: T) -> Response {
    axum::Json(value).into_response()
}

pub fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/agent/v3/enroll", post(enroll))
        .route("/agent/v3/heartbeat", post(heartbeat))
        .route("/agent/v3/tasks/claim", post(claim))
        .route("/agent/v3/tasks/{task_id}/phases", post(phase))
        .route("/agent/v3/tasks/{task_id}/result", post(result))
        .route("/agent/v3/reconcile", post(reconcile))
        .route("/agent/{version}/{*rest}", any(other_version))
}

#[tracing::instrument(skip_all)]
async fn enroll(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    check_version(&headers)?;
    let req: EnrollRequest = parse(&body)?;
    if !req.hello.is_supported() {
        return Err(unsupported(&format!(
            "version {}",
            req.hello.protocol_version
        )));
    }
    let cred = cp
        .exchange_bootstrap_token(
            &req.bootstrap_token,
            &req.hostname,
            &req.hello.agent_version,
        )
        .await?;
    tracing::info!(node.id = %cred.node_id, "node agent enrolled");
    Ok(json(EnrollResponse {
        node_id: cred.node_id.to_string(),
        node_credential: cred.credential,
        heartbeat_interval_s: HEARTBEAT_INTERVAL_S,
    }))
}

/// The host's tunnel endpoint recorded, and the members of its guests' segments. An endpoint
/// the control plane refuses (not an address, another node's) costs the host its segments'
/// other members, not its heartbeat.
async fn overlay(
    cp: &ControlPlane,
    agent: &NodeAgent,
    vtep: &str,
) -> Result<Option<Overlay>, Refusal> {
    match cp.record_vtep(agent, vtep).await {
        Ok(()) => Ok(Some(cp.overlay(agent).await?)),
        Err(e @ (control_plane::Error::Invalid { .. } | control_plane::Error::Conflict(_))) => {
            tracing::warn!(node.id = %agent.node_id(), error.cause = %e, "tunnel endpoint refused");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

async fn heartbeat(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let agent = node(&cp, &headers).await?;
    let beat: Heartbeat = parse(&body)?;
    cp.heartbeat(
        &agent,
        &beat.hello.agent_version,
        beat.health.status,
        beat.health.detail.as_deref(),
        &beat.utilisation,
    )
    .await?;
    cp.gpu_events(&agent, &beat.gpu_events).await?;
    // A report reconciliation can't read costs the node its reconciliation, not its
    // heartbeat (which the line above recorded).
    if let Some(holding) = &beat.holding {
        match cp.record_holding(&agent, holding).await {
            Err(control_plane::Error::Invalid { reason, .. }) => {
                tracing::warn!(node.id = %agent.node_id(), error.cause = %reason, "holding report refused");
            }
            other => other?,
        }
    }
    let overlay = match beat.vtep.as_deref() {
        Some(vtep) => overlay(&cp, &agent, vtep).await?,
        None => None,
    };
    Ok(json(HeartbeatAck {
        heartbeat_interval_s: HEARTBEAT_INTERVAL_S,
        overlay,
    }))
}

async fn reconcile(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let agent = node(&cp, &headers).await?;
    Ok(json(cp.reconcile_view(&agent).await?))
}

async fn claim(
    State(cp): State<ControlPlane>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let agent = node(&cp, &headers).await?;
    let req: ClaimRequest = parse(&body)?;
    let wait = Duration::from_secs(u64::from(req.wait_s.min(MAX_CLAIM_WAIT_S)));
    if req.idle
        && let Some(lost) = cp.resend_running_task(&agent).await?
    {
        return Ok(json(ClaimResponse {
            task: Some(lost.into()),
        }));
    }
    let task = cp.claim_task(&agent, wait).await?.map(Into::into);
    Ok(json(ClaimResponse { task }))
}

async fn phase(
    State(cp): State<ControlPlane>,
    Path(task): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let agent = node(&cp, &headers).await?;
    let report: PhaseReport = parse(&body)?;
    cp.report_phase(&agent, task_id(&task)?, &report).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn result(
    State(cp): State<ControlPlane>,
    Path(task): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let agent = node(&cp, &headers).await?;
    let result: TaskResult = parse(&body)?;
    cp.finish_task(&agent, task_id(&task)?, &result.outcome)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn other_version(Path((version, _rest)): Path<(String, String)>) -> Refusal {
    if version == format!("v{PROTOCOL_VERSION}") {
        refuse(
            StatusCode::NOT_FOUND,
            codes::NOT_FOUND,
            "no such agent API endpoint",
        )
    } else {
        unsupported(&format!("{version} (path /agent/{version}/)"))
    }
}
