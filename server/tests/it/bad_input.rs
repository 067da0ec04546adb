//! Bad input at scale on the node API and on Stripe's webhook: seeded mutations of every agent
//! payload and of a Stripe event (values of the wrong type, huge or negative numbers, long and
//! odd strings, deep nesting, missing and unknown fields, truncated and non-JSON bodies), sent
//! with a valid node credential or a valid signature. Every answer must be a 4xx with a body
//! that says why, or a success; never a 5xx; and the API must still work afterwards. (The
//! public API is fuzzed by schemathesis in `cargo xtask test`.)

use crate::support;

use axum::body::Body;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

/// splitmix64: a seeded generator, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A value of some other shape than the one expected.
fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(u64::MAX),
        4 => json!(i64::MIN),
        5 => json!(1.5e308),
        6 => json!(""),
        7 => json!("x".repeat(100_000)),
        8 => json!("\u{0}\u{202e}é漢字\n\t"),
        9 => json!("00000000-0000-0000-0000-000000000000"),
        10 => json!([]),
        11 => json!({}),
        12 => {
            let mut v = json!(1);
            for _ in 0..300 {
                v = json!([v]);
            }
            v
        }
        _ => json!({"unexpected": [1, "two", {"three": null}]}),
    }
}

/// `v` with one node replaced, removed, or given an unknown sibling.
fn mutate(v: &mut Value, rng: &mut Rng) {
    match v {
        Value::Object(map) if !map.is_empty() && rng.below(4) != 0 => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = keys[rng.below(keys.len())].clone();
            match rng.below(4) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    map.insert(format!("unknown_{}", rng.below(100)), odd_value(rng));
                }
                _ => mutate(map.get_mut(&key).expect("present"), rng),
            }
        }
        Value::Array(items) if !items.is_empty() && rng.below(4) != 0 => {
            let i = rng.below(items.len());
            // Many copies: bounds on list lengths (of small items, so that copies of copies
            // can't multiply past the test machine's memory).
            if rng.below(5) == 0 && items[i].to_string().len() <= 1024 {
                let one = items[i].clone();
                items.extend(std::iter::repeat_n(one, 2_000));
            } else {
                mutate(&mut items[i], rng);
            }
        }
        _ => *v = odd_value(rng),
    }
}

/// A body: the mutated JSON, or (now and then) bytes that aren't a JSON document at all.
fn body(valid: &Value, rng: &mut Rng) -> Vec<u8> {
    let mut v = valid.clone();
    for _ in 0..=rng.below(3) {
        mutate(&mut v, rng);
    }
    let text = v.to_string().into_bytes();
    match rng.below(12) {
        0 => text[..text.len() / 2].to_vec(),
        1 => Vec::new(),
        2 => vec![0xff, 0xfe, b'{', 0x80],
        _ => text,
    }
}

async fn post(
    app: &axum::Router,
    path: &str,
    credential: &str,
    body: Vec<u8>,
) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .header("x-agent-protocol", "3")
        .header("authorization", format!("Bearer {credential}"))
        .body(Body::from(body))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn mutated_agent_payloads_get_a_clear_4xx_and_never_a_5xx() {
    use test_db::fixtures::{approved, node, operator};
    let db = test_db::demo().await;
    let state = server::app_state(&support::config(&db.url(), &[])).unwrap();
    let ops = operator(&state.cp, "ops@platform.example").await;
    let (node_id, _, credential) = approved(
        &state.cp,
        &ops,
        node("gpu-fuzz-01", "eu-west-1", "hgx-h100-8x", &["gpu_slice"]),
        "hgx-h100-8x",
        "nvme-format-crypto",
    )
    .await;
    let cp = state.cp.clone();
    let app = server::router(state);

    let hello = json!({"protocol_version": 3, "agent_version": "0.1.0"});
    let id = "6f1c2d3e-0000-4000-8000-00000000abcd";
    let cases: [(&str, Value); 5] = [
        (
            "/agent/v3/heartbeat",
            json!({
                "hello": hello,
                "health": {"status": "degraded", "detail": "fan"},
                "utilisation": [{"allocation_id": id, "gpu_util_pct": 50, "samples": 3}],
                "gpu_events": [{"id": "e1", "gpu_pci_address": "0000:3b:00.0", "kind": "xid",
                                "xid": 79, "detail": "fell off the bus", "observed_at": 1_700_000_000}],
                "holding": {"leases": [{"slot_id": id, "allocation_id": id}], "vms": [id]},
            }),
        ),
        ("/agent/v3/tasks/claim", json!({"wait_s": 0, "idle": true})),
        (
            "/agent/v3/tasks/6f1c2d3e-0000-4000-8000-00000000abcd/phases",
            json!({"phase": "write_image", "status": "failed", "elapsed_ms": 12, "detail": "disk"}),
        ),
        (
            "/agent/v3/tasks/6f1c2d3e-0000-4000-8000-00000000abcd/result",
            json!({"outcome": {"status": "failed", "error": "no"}}),
        ),
        ("/agent/v3/reconcile", json!({})),
    ];
    let mut rng = Rng(20261126);
    let mut answered = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..400 {
        for (path, valid) in &cases {
            let sent = body(valid, &mut rng);
            let (status, text) = post(&app, path, &credential, sent.clone()).await;
            *answered.entry(status.as_u16()).or_default() += 1;
            let shown = String::from_utf8_lossy(&sent[..sent.len().min(300)]).into_owned();
            assert!(
                !status.is_server_error(),
                "round {round}, {path}: {status} for {shown:?}: {text}"
            );
            if status.is_client_error() {
                let e: Value = serde_json::from_str(&text).unwrap_or_else(|_| {
                    panic!("round {round}, {path}: {status} with no error body: {text}")
                });
                assert!(
                    e["code"].as_str().is_some_and(|c| !c.is_empty())
                        && e["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "round {round}, {path}: {text}"
                );
            }
        }
    }
    // Mostly refusals, and the node still works.
    assert!(
        answered.keys().any(|s| (400..500).contains(s)),
        "{answered:?}"
    );
    let (status, text) = post(
        &app,
        "/agent/v3/heartbeat",
        &credential,
        json!({"hello": hello, "health": {"status": "healthy"}})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    eprintln!("answers by status: {answered:?}");

    // Text the database can't store (a NUL character) is the caller's mistake wherever it
    // lands: a task's result refused with the reason, and the task still there to finish.
    use control_plane::prelude::*;
    cp.request_discovery(&ops, node_id, None).await.unwrap();
    let (status, claim) = post(
        &app,
        "/agent/v3/tasks/claim",
        &credential,
        json!({"wait_s": 0}).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{claim}");
    let task = serde_json::from_str::<Value>(&claim).unwrap()["task"]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let result = |error: &str| {
        json!({"outcome": {"status": "failed", "error": error}})
            .to_string()
            .into_bytes()
    };
    let path = format!("/agent/v3/tasks/{task}/result");
    let (status, text) = post(&app, &path, &credential, result("bad\u{0}byte")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["code"], "invalid");
    assert!(e["message"].as_str().unwrap().contains("NUL"), "{text}");
    let (status, text) = post(&app, &path, &credential, result("sysfs unreadable")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{text}");
}

/// Stripe's webhook with mutated events, each correctly signed (so that they get past the
/// signature and reach the parsing and the storing): never a 5xx, and a duplicate or an
/// unknown event stays harmless. Unsigned and badly signed bodies are refused first.
#[tokio::test]
async fn mutated_signed_stripe_webhooks_get_a_clear_answer_and_never_a_5xx() {
    const SECRET: &str = "whsec_fuzz";
    let db = test_db::demo().await;
    let cfg = support::config(
        &db.url(),
        &[
            // Nothing is called: events are stored and applied to linked invoices only.
            "--stripe-api-base",
            "http://127.0.0.1:9/",
            "--stripe-secret-key",
            "sk_test_fuzz",
            "--stripe-webhook-secret",
            SECRET,
        ],
    );
    let state = server::app_state(&cfg).unwrap();
    let app = server::router(state);
    let fixtures = stripe_test_server::Config::bundled_fixtures();
    let mut invoice = fixtures["resources"]["invoice"].clone();
    invoice["id"] = json!("in_fuzz0001");
    let mut event = fixtures["resources"]["event"].clone();
    event["id"] = json!("evt_fuzz0001");
    event["type"] = json!("invoice.paid");
    event["data"] = json!({ "object": invoice });
    event["livemode"] = json!(false);
    let webhook = |body: Vec<u8>, signature: Option<String>| {
        let app = app.clone();
        async move {
            let mut req =
                Request::post("/stripe/webhook").header("content-type", "application/json");
            if let Some(s) = signature {
                req = req.header("stripe-signature", s);
            }
            let res = app
                .oneshot(req.body(Body::from(body)).unwrap())
                .await
                .unwrap();
            let status = res.status();
            let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
                .await
                .unwrap();
            (status, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };

    // The untouched event is taken, and taken once.
    event["created"] = json!(now());
    let valid = event.to_string();
    let sign = |body: &str| Some(stripe_test_server::sign(SECRET, now(), body));
    let (status, text) = webhook(valid.clone().into_bytes(), sign(&valid)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, text) = webhook(valid.clone().into_bytes(), sign(&valid)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains(r#""duplicate":true"#), "{text}");
    // Refused before it is read: no signature, someone else's, an old one.
    assert_eq!(
        webhook(valid.clone().into_bytes(), None).await.0,
        StatusCode::BAD_REQUEST
    );
    let forged = stripe_test_server::sign("whsec_other", now(), &valid);
    assert_eq!(
        webhook(valid.clone().into_bytes(), Some(forged)).await.0,
        StatusCode::BAD_REQUEST
    );
    let stale = stripe_test_server::sign(SECRET, now() - 3600, &valid);
    assert_eq!(
        webhook(valid.clone().into_bytes(), Some(stale)).await.0,
        StatusCode::BAD_REQUEST
    );

    let mut rng = Rng(20261127);
    let mut answered = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..600 {
        let mut e = event.clone();
        // A fresh id now and then, so that mutations reach the storing and not only the
        // duplicate check.
        if rng.below(2) == 0 {
            e["id"] = json!(format!("evt_fuzz{round:06}"));
        }
        let sent = body(&e, &mut rng);
        let text_sent = String::from_utf8_lossy(&sent).into_owned();
        let (status, text) = webhook(sent, sign(&text_sent)).await;
        *answered.entry(status.as_u16()).or_default() += 1;
        assert!(
            !status.is_server_error(),
            "round {round}: {status} for {:?}: {text}",
            &text_sent[..text_sent.len().min(300)]
        );
        if status.is_client_error() {
            assert!(!text.trim().is_empty(), "round {round}: a refusal says why");
        }
    }
    assert!(
        answered.contains_key(&400) && answered.contains_key(&200),
        "{answered:?}"
    );
    eprintln!("webhook answers over 600 signed mutations: {answered:?}");
}
