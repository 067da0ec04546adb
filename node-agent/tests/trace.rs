//! One launch is one trace, from the API request to the agent's phases on the host.
//!
//! The whole server router (with its request spans) and its workers run in this process,
//! exporting over OTLP/HTTP to a receiver here that decodes the protobuf with the
//! OpenTelemetry protocol crate; a real `node-agent` process on a simulated host exports to the
//! same receiver. A launch through the public API must produce one trace holding: the API
//! request, the launch, the hand-over to the agent, the agent's task and all its phases (as
//! children of the task), and the server's handling of the agent's reports; the release is a
//! trace of its own; a trace context a client sends to the public API is not adopted.
//!
//! A binary of its own: it installs the process's tracing subscriber, and another test's spans
//! would land in its receiver.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use clap::Parser;
use control_plane::api_tokens::TokenScope;
use control_plane::demo::{ACME, ACME_RESEARCH};
use control_plane::{AllocationId, ControlPlane};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use otel::export::Traces;
use prost::Message;
use serde_json::{Value, json};
use sqlx::PgPool;
use support::PROVISION;
use support::cluster::{Host, control_plane, stop, until, write_state};
use test_db::fixtures;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop";

/// A span as the collector received it.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, String>,
    start_ns: u64,
    end_ns: u64,
}

type Received = Arc<Mutex<Vec<Got>>>;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

/// An OTLP/HTTP trace receiver on loopback: `POST /v1/traces`, protobuf.
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                let mut spans = sink.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .as_ref()
                        .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                        .map(|a| text(a.value.as_ref()))
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            spans.push(Got {
                                service: service.clone(),
                                name: s.name,
                                trace: hex(&s.trace_id),
                                id: hex(&s.span_id),
                                parent: hex(&s.parent_span_id),
                                attributes: s
                                    .attributes
                                    .iter()
                                    .map(|a| (a.key.clone(), text(a.value.as_ref())))
                                    .collect(),
                                start_ns: s.start_time_unix_nano,
                                end_ns: s.end_time_unix_nano,
                            });
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, got)
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    config: server::config::Config,
}

/// Waits until `check` finds what it wants among the spans received so far.
async fn spans_until<T>(
    got: &Received,
    telemetry: &server::telemetry::Telemetry,
    what: &str,
    check: impl Fn(&[Got]) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        tokio::task::block_in_place(|| telemetry.flush());
        if let Some(t) = check(&got.lock().unwrap()) {
            return t;
        }
        if Instant::now() > deadline {
            let names: Vec<String> = got
                .lock()
                .unwrap()
                .iter()
                .map(|g| format!("{} {} {}", g.service, g.trace, g.name))
                .collect();
            panic!("{what}: not received; spans so far:\n{}", names.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn task_traceparent(pool: &PgPool, id: AllocationId, kind: &str) -> Option<String> {
    sqlx::query_scalar("SELECT traceparent FROM agent_tasks WHERE allocation_id = $1 AND kind = $2")
        .bind(id.0)
        .bind(kind)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_launch_is_one_trace_from_the_api_to_the_agents_phases() {
    let (endpoint, got) = receiver().await;
    let telemetry = server::telemetry::init_with(
        "info,sqlx=warn",
        server::config::LogFormat::Pretty,
        &Traces::Otlp {
            endpoint: Some(endpoint.clone()),
        },
    )
    .unwrap();
    assert!(telemetry.traces_on());

    let db = test_db::demo().await;
    let pool = db.pool().clone();
    let config = Flags::parse_from([
        "server",
        "--database-url",
        &db.url(),
        "--public-url",
        "http://127.0.0.1:3000",
    ])
    .config;
    let state = server::app_state(&config).unwrap();
    let cp: ControlPlane = state.cp.clone();
    let ops = fixtures::operator(&cp, "ops@platform.example").await;
    let (node, _agent, credential) = fixtures::approved(
        &cp,
        &ops,
        fixtures::node("gpu-trace-01", "us-east-1", "pcie-l40s-4x", &["gpu_slice"]),
        "pcie-l40s-4x",
        "overwrite-verify",
    )
    .await;
    let url = control_plane(server::router(state), &cp).await;

    let dir = std::env::temp_dir().join(format!("agent-trace-{}", uuid::Uuid::new_v4()));
    let host = Host {
        state: dir.join("state"),
        fixture: std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pcie-l40s-4x"),
    };
    write_state(&host.state, node, &url, &credential);
    let agent = host.agent_with(
        None,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );

    // Launch through the public API, as a script would, sending a trace context of its own.
    let (token, _) = fixtures::api_token(
        &cp,
        "alice@acme.example",
        ACME,
        None,
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    let foreign = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let http = reqwest::Client::new();
    let res = http
        .post(format!("{url}/api/v1/instances"))
        .bearer_auth(&token)
        .header("traceparent", foreign)
        .header("content-type", "application/json")
        .body(
            json!({
                "project": ACME_RESEARCH.to_string(), "sku": "l40s.1x", "region": "us-east-1",
                "image": "ubuntu-24.04-cuda", "name": "traced", "ssh_public_keys": [KEY],
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let launched: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    let id = AllocationId(launched["id"].as_str().unwrap().parse().unwrap());
    until(&pool, id, "running", "the traced launch").await;

    // The task row carries the launch's trace.
    let stored = task_traceparent(&pool, id, "slice.vm_provision")
        .await
        .expect("the provision task stores its trace context");
    let trace = stored[3..35].to_string();
    assert_ne!(
        trace, "0af7651916cd43dd8448eb211c80319c",
        "the public API does not adopt a caller's trace context"
    );

    // Everything arrives: the agent's spans (its exporter batches every 100 ms) and the
    // server's report handling.
    let spans = spans_until(&got, &telemetry, "the whole launch trace", |all| {
        let ours: Vec<Got> = all.iter().filter(|s| s.trace == trace).cloned().collect();
        let agent_phases = ours
            .iter()
            .filter(|s| s.service == "gpuaas-node-agent" && PROVISION.contains(&s.name.as_str()))
            .count();
        let result = ours
            .iter()
            .any(|s| s.name == "POST /agent/v3/tasks/{task_id}/result");
        let task = ours
            .iter()
            .any(|s| s.name == "agent_task slice.vm_provision");
        (agent_phases == PROVISION.len() && result && task).then_some(ours)
    })
    .await;
    let one = |name: &str| -> Got {
        let found: Vec<&Got> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(
            found.len(),
            1,
            "one {name:?} span in the launch trace: {found:#?}"
        );
        found[0].clone()
    };

    // The root: the API request, a server span, named by its route.
    let root = one("POST /api/v1/instances");
    assert_eq!(root.service, "gpuaas-portal");
    assert_eq!(root.parent, "", "the request is the trace's root");
    assert!(
        spans
            .iter()
            .filter(|s| s.service == "gpuaas-portal")
            .any(|s| s.name == "launch" && !s.parent.is_empty()),
        "the launch (placement transaction) is in the trace"
    );
    // The hand-over, under which the agent's task runs, under which its phases run.
    let dispatch = one("agent_task.dispatch");
    assert_eq!(dispatch.attributes["task.kind"], "slice.vm_provision");
    assert_eq!(dispatch.attributes["node.id"], node.to_string());
    assert_eq!(
        stored[36..52],
        dispatch.parent,
        "the row's context is the dispatch's parent"
    );
    let task = one("agent_task slice.vm_provision");
    assert_eq!(task.service, "gpuaas-node-agent");
    assert_eq!(
        task.parent, dispatch.id,
        "the agent's task is a child of the hand-over"
    );
    assert_eq!(task.attributes["node.id"], node.to_string());
    let mut phases: Vec<Got> = spans
        .iter()
        .filter(|s| s.service == "gpuaas-node-agent" && s.parent == task.id)
        .cloned()
        .collect();
    phases.sort_by_key(|p| p.start_ns);
    assert_eq!(
        phases.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        PROVISION,
        "every phase, in order, as children of the task"
    );
    for p in &phases {
        assert!(
            p.start_ns >= task.start_ns && p.end_ns <= task.end_ns && p.end_ns >= p.start_ns,
            "{} lies within its task",
            p.name
        );
    }
    // The agent's reports are filed under its task span.
    let result = one("POST /agent/v3/tasks/{task_id}/result");
    assert_eq!(result.parent, task.id);
    assert!(
        spans
            .iter()
            .filter(|s| s.name == "POST /agent/v3/tasks/{task_id}/phases")
            .all(|s| s.parent == task.id),
        "phase reports too"
    );
    // Nothing else of the launch is a root: one trace, connected.
    let ids: Vec<&str> = spans.iter().map(|s| s.id.as_str()).collect();
    for s in &spans {
        assert!(
            s.parent.is_empty() || ids.contains(&s.parent.as_str()),
            "{} has a parent outside the trace",
            s.name
        );
    }
    assert_eq!(spans.iter().filter(|s| s.parent.is_empty()).count(), 1);

    // The release is a trace of its own, with the agent's release under it.
    let res = http
        .delete(format!("{url}/api/v1/instances/{id}"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    until(&pool, id, "released", "the traced release").await;
    let release = task_traceparent(&pool, id, "slice.vm_release")
        .await
        .expect("the release task stores its trace context");
    let release_trace = release[3..35].to_string();
    assert_ne!(release_trace, trace, "a release is its own trace");
    let released = spans_until(&got, &telemetry, "the release trace", |all| {
        let ours: Vec<&Got> = all.iter().filter(|s| s.trace == release_trace).collect();
        let task = ours
            .iter()
            .find(|s| s.name == "agent_task slice.vm_release")?;
        let phases = ours.iter().filter(|s| s.parent == task.id).count();
        let root = ours
            .iter()
            .find(|s| s.parent.is_empty())
            .map(|s| s.name.clone())?;
        (phases >= 10).then_some(root)
    })
    .await;
    assert_eq!(released, "DELETE /api/v1/instances/{id}");

    stop(agent).await;
    let _ = std::fs::remove_dir_all(dir);
}
