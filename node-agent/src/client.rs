//! The agent's side of `/agent/v3`: every request carries the protocol header, and all but
//! enrolment the node credential.

use std::time::Duration;

use agent_protocol::{
    API_PREFIX, AgentHello, ApiError, ClaimRequest, ClaimResponse, EnrollRequest, EnrollResponse,
    Heartbeat, HeartbeatAck, PROTOCOL_HEADER, PROTOCOL_VERSION, PhaseReport, ReconcileResponse,
    TRACEPARENT, TaskResult, TraceParent,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The control plane answered with an error it named.
    #[error("{}: {}", .0.code, .0.message)]
    Api(ApiError),
    #[error("HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("cannot reach the control plane: {0}")]
    Transport(#[from] reqwest::Error),
}

pub fn hello() -> AgentHello {
    AgentHello {
        protocol_version: PROTOCOL_VERSION,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    credential: Option<String>,
}

impl Client {
    pub fn new(server: &str, credential: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Longer than the longest claim wait.
            .timeout(Duration::from_secs(
                u64::from(agent_protocol::MAX_CLAIM_WAIT_S) + 15,
            ))
            .build()
            .expect("the HTTP client's TLS backend initialises");
        Self {
            http,
            base: format!("{}{API_PREFIX}", server.trim_end_matches('/')),
            credential,
        }
    }

    async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<Option<R>, ClientError> {
        self.post_traced(path, body, None).await
    }

    /// A POST that belongs to the trace `trace` (a task's report).
    async fn post_traced<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        trace: Option<&TraceParent>,
    ) -> Result<Option<R>, ClientError> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(PROTOCOL_HEADER, PROTOCOL_VERSION.to_string())
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body).expect("protocol types serialize"));
        if let Some(c) = &self.credential {
            req = req.bearer_auth(c);
        }
        if let Some(t) = trace {
            req = req.header(TRACEPARENT, t.as_str());
        }
        let resp = req.send().await?;
        let status = resp.status();
        let bytes = resp.bytes().await?;
        if status.is_success() {
            if status == reqwest::StatusCode::NO_CONTENT || bytes.is_empty() {
                return Ok(None);
            }
            return serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| ClientError::Http {
                    status: status.as_u16(),
                    body: format!("unreadable answer: {e}"),
                });
        }
        Err(match serde_json::from_slice::<ApiError>(&bytes) {
            Ok(api) => ClientError::Api(api),
            Err(_) => ClientError::Http {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&bytes).chars().take(300).collect(),
            },
        })
    }

    fn expect<R>(r: Option<R>) -> Result<R, ClientError> {
        r.ok_or(ClientError::Http {
            status: 204,
            body: "expected a body".into(),
        })
    }

    pub async fn enroll(&self, token: &str, hostname: &str) -> Result<EnrollResponse, ClientError> {
        let body = EnrollRequest {
            hello: hello(),
            bootstrap_token: token.to_string(),
            hostname: hostname.to_string(),
        };
        Self::expect(self.post("/enroll", &body).await?)
    }

    pub async fn heartbeat(&self, beat: &Heartbeat) -> Result<HeartbeatAck, ClientError> {
        Self::expect(self.post("/heartbeat", beat).await?)
    }

    pub async fn claim(&self, wait_s: u32) -> Result<ClaimResponse, ClientError> {
        // The agent claims only between tasks: it is idle whenever it asks.
        Self::expect(
            self.post("/tasks/claim", &ClaimRequest { wait_s, idle: true })
                .await?,
        )
    }

    pub async fn phase(
        &self,
        task_id: &str,
        report: &PhaseReport,
        trace: Option<&TraceParent>,
    ) -> Result<(), ClientError> {
        self.post_traced::<_, serde_json::Value>(&format!("/tasks/{task_id}/phases"), report, trace)
            .await
            .map(|_| ())
    }

    pub async fn result(
        &self,
        task_id: &str,
        result: &TaskResult,
        trace: Option<&TraceParent>,
    ) -> Result<(), ClientError> {
        self.post_traced::<_, serde_json::Value>(&format!("/tasks/{task_id}/result"), result, trace)
            .await
            .map(|_| ())
    }

    pub async fn reconcile(&self) -> Result<ReconcileResponse, ClientError> {
        Self::expect(self.post("/reconcile", &serde_json::json!({})).await?)
    }
}
