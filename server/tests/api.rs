//! The public REST API under `/api/v1` through the whole router, on a copy of the demo
//! database: offers with the numbers placement honours, problem documents for every refusal,
//! and the OpenAPI document generated from the handlers.

use control_plane::prelude::*;

use axum::body::Body;
use control_plane::api_tokens::{NewToken, TokenScope};
use control_plane::demo::ACME;
use http::{Request, StatusCode};
use serde_json::{Value, json};
use server::{app_state, router};
use test_db::fixtures::principal;
use test_db::fixtures::{approved, node, operator};

mod support;

use support::get;

/// A copy of the demo database with one approved 8-GPU HGX node in eu-west-1, and the portal.
async fn portal() -> (test_db::TestDb, control_plane::ControlPlane, axum::Router) {
    let db = test_db::demo().await;
    let state = app_state(&support::config(&db.url(), &[])).unwrap();
    let cp = state.cp.clone();
    let ops = operator(&cp, "ops@platform.example").await;
    approved(
        &cp,
        &ops,
        node(
            "gpu-api-1",
            "eu-west-1",
            "hgx-h100-8x",
            &["gpu_slice", "baremetal"],
        ),
        "hgx-h100-8x",
        "nvme-format-crypto",
    )
    .await;
    (db, cp, router(state))
}

async fn json(app: &axum::Router, path: &str) -> (StatusCode, http::HeaderMap, Value) {
    let (status, headers, body) = get(app, path).await;
    let value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (status, headers, value)
}

/// One call with a bearer token (when given) and a JSON body (when given).
async fn send(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let (status, headers, text) = support::send(app, req).await;
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
    };
    (status, headers, value)
}

/// A token of Alice's (Acme's admin) with `scopes`, and its secret.
async fn token(
    cp: &control_plane::ControlPlane,
    scopes: &[TokenScope],
) -> (String, control_plane::ApiTokenId) {
    let alice = principal(cp, "alice@acme.example").await;
    let made = cp
        .create_api_token(
            &alice,
            ACME,
            &NewToken {
                name: format!("test {scopes:?}"),
                project: None,
                scopes: scopes.to_vec(),
                days: 1,
            },
            None,
        )
        .await
        .unwrap();
    (made.secret, made.token.id)
}

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop";

#[tokio::test]
async fn ssh_keys_through_a_token_within_its_scopes() {
    let (_db, cp, app) = portal().await;
    let (secret, id) = token(&cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let (read_only, _) = token(&cp, &[TokenScope::Read]).await;
    let t = Some(secret.as_str());

    let (status, _, before) = send(&app, "GET", "/api/v1/ssh-keys", t, None).await;
    assert_eq!(status, StatusCode::OK, "{before}");
    let before = before["ssh_keys"].as_array().unwrap().len();

    // Added without an Origin header: the API's callers are not browsers.
    let (status, _, key) = send(
        &app,
        "POST",
        "/api/v1/ssh-keys",
        t,
        Some(json!({"name": "laptop", "public_key": KEY})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{key}");
    assert_eq!(key["name"], "laptop");
    assert_eq!(key["kind"], "ssh-ed25519");
    assert!(key["fingerprint"].as_str().unwrap().starts_with("SHA256:"));
    let (_, _, listed) = send(&app, "GET", "/api/v1/ssh-keys", t, None).await;
    assert_eq!(listed["ssh_keys"].as_array().unwrap().len(), before + 1);
    // The portal's own account view sees the same key.
    let alice = principal(&cp, "alice@acme.example").await;
    assert!(
        cp.ssh_keys(&alice)
            .await
            .unwrap()
            .iter()
            .any(|k| k.name == "laptop")
    );

    for (body, status, code, field) in [
        (
            json!({"name": "again", "public_key": KEY}),
            409,
            "conflict",
            None,
        ),
        (
            json!({"name": "bad", "public_key": "-----BEGIN OPENSSH PRIVATE KEY-----"}),
            400,
            "invalid",
            Some("public_key"),
        ),
        (
            json!({"name": "", "public_key": KEY}),
            400,
            "invalid",
            Some("name"),
        ),
        (json!({"name": 7}), 400, "bad_request", None),
    ] {
        let (got, headers, problem) =
            send(&app, "POST", "/api/v1/ssh-keys", t, Some(body.clone())).await;
        assert_eq!(got.as_u16(), status, "{body}: {problem}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(problem["code"], code, "{body}: {problem}");
        assert_eq!(problem["field"].as_str(), field, "{body}: {problem}");
    }

    // A read-only token reads but may not change anything.
    let (status, _, _) = send(&app, "GET", "/api/v1/ssh-keys", Some(&read_only), None).await;
    assert_eq!(status, StatusCode::OK);
    let path = format!("/api/v1/ssh-keys/{}", key["id"].as_str().unwrap());
    let (status, _, problem) = send(&app, "DELETE", &path, Some(&read_only), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    assert_eq!(problem["code"], "forbidden");
    assert_eq!(
        problem["detail"],
        "Only tokens with the launch scope may do this."
    );

    let (status, _, body) = send(&app, "DELETE", &path, t, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    for gone in [path.as_str(), "/api/v1/ssh-keys/not-a-uuid"] {
        let (status, _, problem) = send(&app, "DELETE", gone, t, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{gone}");
        assert_eq!(problem["code"], "not_found");
    }

    // Without a valid token: 401 with the scheme to use. Revoked is the same as unknown.
    cp.revoke_api_token(&alice, id, None).await.unwrap();
    for auth in [None, Some("gpk_unknown"), Some(secret.as_str())] {
        let (status, headers, problem) = send(&app, "GET", "/api/v1/ssh-keys", auth, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(headers["www-authenticate"], "Bearer realm=\"api\"");
        assert_eq!(problem["code"], "unauthenticated");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("Authorization: Bearer gpk_"),
            "{problem}"
        );
    }
}

#[tokio::test]
async fn each_token_is_rate_limited_with_retry_after() {
    let (_db, cp, app) = portal().await;
    let (secret, _) = token(&cp, &[TokenScope::Read]).await;
    // 100 at once, then one every 100 ms: calling as fast as we can, a 429 comes after at
    // least 100 answers.
    let mut answered = 0;
    let mut refused = None;
    for _ in 0..400 {
        let (status, headers, problem) =
            send(&app, "GET", "/api/v1/ssh-keys", Some(&secret), None).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some((headers, problem));
            break;
        }
        assert_eq!(status, StatusCode::OK);
        answered += 1;
    }
    let (headers, problem) = refused.expect("no 429 in 400 calls");
    assert!(answered >= 100, "{answered}");
    assert_eq!(problem["code"], "rate_limited");
    let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=10).contains(&wait), "{wait}");
    // Another token is not slowed by this one.
    let (other, _) = token(&cp, &[TokenScope::Read]).await;
    let (status, _, _) = send(&app, "GET", "/api/v1/ssh-keys", Some(&other), None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn public_offers_are_rate_limited_per_client_address() {
    let (_db, _cp, app) = portal().await;
    let from = |ip: [u8; 4]| {
        let mut req = Request::get("/api/v1/offers").body(Body::empty()).unwrap();
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
                ip, 40000,
            ))));
        req
    };
    // 60 at once, then one a second: as fast as we can, a 429 comes after at least 60.
    let mut answered = 0;
    let mut refused = None;
    for _ in 0..200 {
        let (status, headers, body) = support::send(&app, from([192, 0, 2, 1])).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some((headers, body));
            break;
        }
        assert_eq!(status, StatusCode::OK, "{body}");
        answered += 1;
    }
    let (headers, body) = refused.expect("no 429 in 200 calls");
    assert!(answered >= 60, "{answered}");
    assert!(headers.contains_key("retry-after"));
    assert!(body.contains("\"code\":\"rate_limited\""), "{body}");
    // Another address is not slowed by this one.
    let (status, _, _) = support::send(&app, from([192, 0, 2, 2])).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn offers_are_each_sku_in_each_region_with_what_placement_would_honour() {
    let (_db, cp, app) = portal().await;
    let (status, headers, body) = json(&app, "/api/v1/offers").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["content-type"], "application/json");
    let offers = body["offers"].as_array().unwrap();
    // One offer per (SKU, region) of the catalog, each with the catalog's number.
    let catalog = cp.catalog().await.unwrap();
    let expected: Vec<(String, String, i64)> = catalog
        .iter()
        .flat_map(|e| {
            e.availability
                .iter()
                .map(|a| (e.sku.name.clone(), a.region.clone(), a.launchable))
        })
        .collect();
    let got: Vec<(String, String, i64)> = offers
        .iter()
        .map(|o| {
            (
                o["sku"].as_str().unwrap().to_owned(),
                o["region"].as_str().unwrap().to_owned(),
                o["launchable"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    // The node's 8 GPUs: eight 1-GPU slices, one bare-metal node.
    let h100 = offers
        .iter()
        .find(|o| o["sku"] == "h100.1x" && o["region"] == "eu-west-1")
        .unwrap();
    assert_eq!(h100["launchable"], 8);
    assert_eq!(h100["shape"], "gpu_slice");
    assert_eq!(h100["gpu_model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(h100["gpu_count"], 1);
    assert!(h100["price_per_hour"]["amount_minor"].as_i64().unwrap() > 0);
    assert_eq!(h100["price_per_hour"]["currency"], "USD");

    // Filters narrow; an unknown value finds nothing rather than failing.
    let (_, _, body) = json(
        &app,
        "/api/v1/offers?region=eu-west-1&gpu_model=NVIDIA%20H100%2080GB%20HBM3",
    )
    .await;
    let narrowed = body["offers"].as_array().unwrap();
    assert!(!narrowed.is_empty());
    assert!(
        narrowed
            .iter()
            .all(|o| o["region"] == "eu-west-1" && o["gpu_model"] == "NVIDIA H100 80GB HBM3")
    );
    assert!(narrowed.len() < offers.len());
    let (status, _, body) = json(&app, "/api/v1/offers?region=mars-north-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["offers"], Value::Array(Vec::new()));
}

#[tokio::test]
async fn refusals_are_problem_documents_with_a_stable_code() {
    let (_db, _cp, app) = portal().await;
    for (path, status, code, field) in [
        (
            "/api/v1/offers?region=eu-west-1%27%3B%20DROP",
            400,
            "invalid",
            Some("region"),
        ),
        (
            &format!("/api/v1/offers?gpu_model={}", "H".repeat(65)),
            400,
            "invalid",
            Some("gpu_model"),
        ),
        ("/api/v1/nothing-here", 404, "not_found", None),
        ("/api/v1/offers/h100.1x", 404, "not_found", None),
    ] {
        let (got, headers, body) = json(&app, path).await;
        assert_eq!(got.as_u16(), status, "{path}: {body}");
        assert_eq!(
            headers["content-type"], "application/problem+json",
            "{path}"
        );
        assert_eq!(body["code"], code, "{path}: {body}");
        assert_eq!(body["status"], status, "{path}");
        assert_eq!(body["type"], format!("urn:gpuaas:problem:{code}"), "{path}");
        assert!(!body["title"].as_str().unwrap().is_empty(), "{path}");
        assert!(!body["detail"].as_str().unwrap().is_empty(), "{path}");
        assert_eq!(body["field"].as_str(), field, "{path}: {body}");
        // A request id travels with every answer, refusals too.
        assert!(headers.contains_key("x-request-id"), "{path}");
    }
}

#[tokio::test]
async fn the_openapi_document_is_generated_from_the_handlers() {
    let (_db, _cp, app) = portal().await;
    let (status, _, doc) = json(&app, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], "/api/v1");
    let list = &doc["paths"]["/offers"]["get"];
    assert_eq!(list["operationId"], "list_offers");
    let params: Vec<&str> = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, ["region", "gpu_model"]);
    // Every documented response has an example or a schema with one.
    let ok = &list["responses"]["200"]["content"]["application/json"];
    assert_eq!(ok["example"]["offers"][0]["sku"], "h100.1x");
    let problem = &list["responses"]["400"]["content"]["application/problem+json"];
    assert_eq!(problem["schema"]["$ref"], "#/components/schemas/Problem");
    let schemas = &doc["components"]["schemas"];
    for name in [
        "Offer",
        "OfferList",
        "Money",
        "Shape",
        "Problem",
        "SshKey",
        "NewSshKey",
    ] {
        assert!(schemas[name].is_object(), "{name} missing: {schemas}");
    }
    assert_eq!(
        schemas["Shape"]["enum"],
        serde_json::json!(["baremetal", "gpu_slice"])
    );
    assert_eq!(schemas["Problem"]["example"]["code"], "invalid");
    // Token-guarded operations say so; the public one does not.
    assert_eq!(
        doc["components"]["securitySchemes"]["token"]["scheme"],
        "bearer"
    );
    assert_eq!(
        doc["paths"]["/ssh-keys"]["post"]["security"][0]["token"],
        json!([])
    );
    assert!(list.get("security").is_none());
    // Every token-guarded operation documents the refusals a token may meet.
    for (path, method) in [
        ("/ssh-keys", "get"),
        ("/ssh-keys", "post"),
        ("/ssh-keys/{id}", "delete"),
    ] {
        for status in ["401", "403", "429"] {
            let r = &doc["paths"][path][method]["responses"][status];
            assert!(
                !r["description"].as_str().unwrap_or_default().is_empty(),
                "{method} {path} {status}"
            );
            assert_eq!(
                r["content"]["application/problem+json"]["schema"]["$ref"],
                "#/components/schemas/Problem",
                "{method} {path} {status}"
            );
        }
    }
    // Every operation has an id and a summary, and every answer it documents has a body
    // schema or none at all (204).
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["operationId"].is_string(), "{method} {path}");
            assert!(op["summary"].is_string(), "{method} {path}: no doc comment");
            assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()));
        }
    }
}
