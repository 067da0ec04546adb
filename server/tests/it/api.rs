//! The public REST API under `/api/v1` through the whole router, on a copy of the demo
//! database: offers with the numbers placement honours, problem documents for every refusal,
//! and the OpenAPI document generated from the handlers.

use control_plane::prelude::*;

use axum::body::Body;
use control_plane::api_tokens::TokenScope;
use control_plane::demo::{ACME, ACME_INFERENCE, ACME_RESEARCH};
use http::{Request, StatusCode};
use serde_json::{Value, json};
use server::router;
use test_db::fixtures::principal;

use crate::support;

use support::get;

/// A copy of the demo database with one approved 8-GPU HGX node in eu-west-1, and the portal.
async fn portal() -> (test_db::TestDb, control_plane::ControlPlane, axum::Router) {
    let (db, state, _) = support::demo_with_node("gpu-api-1").await;
    let cp = state.cp.clone();
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

/// A token of Alice's (Acme's admin) for the whole organization with `scopes`, and its
/// secret.
async fn token(
    cp: &control_plane::ControlPlane,
    scopes: &[TokenScope],
) -> (String, control_plane::ApiTokenId) {
    token_of(cp, "alice@acme.example", ACME, None, scopes).await
}

/// A token made by `maker` in `tenant`, for `project` or the whole organization.
async fn token_of(
    cp: &control_plane::ControlPlane,
    maker: &str,
    tenant: control_plane::TenantId,
    project: Option<control_plane::ProjectId>,
    scopes: &[TokenScope],
) -> (String, control_plane::ApiTokenId) {
    support::api_token(cp, maker, tenant, project, scopes).await
}

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop";

#[tokio::test]
async fn ssh_keys_through_a_token_within_its_scopes() {
    let (_db, cp, app) = portal().await;
    let (secret, id) = token(&cp, &[TokenScope::Read, TokenScope::Keys]).await;
    let (read_only, _) = token(&cp, &[TokenScope::Read]).await;
    let t = Some(secret.as_str());

    // Keys reach every later launch of their owner, in every project: neither a launch token
    // nor a project's token, even with the keys scope, may plant one.
    let (launcher, _) = token(&cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let (project_keys, _) = token_of(
        &cp,
        "alice@acme.example",
        ACME,
        Some(ACME_RESEARCH),
        &[TokenScope::Read, TokenScope::Keys],
    )
    .await;
    for (refused, needed) in [
        (&launcher, "tokens with the keys scope"),
        (
            &project_keys,
            "organization-wide tokens with the keys scope",
        ),
    ] {
        let (status, _, problem) = send(
            &app,
            "POST",
            "/api/v1/ssh-keys",
            Some(refused),
            Some(json!({"name": "planted", "public_key": KEY})),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
        assert_eq!(
            problem["detail"],
            format!("Only {needed} may do this."),
            "{problem}"
        );
    }

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
    // Its owner can tell it came through this token.
    assert_eq!(key["added_via_token"]["id"], id.to_string());
    assert!(
        key["added_via_token"]["display_prefix"]
            .as_str()
            .unwrap()
            .starts_with("gpk_")
    );
    let audited: Option<uuid::Uuid> = sqlx::query_scalar(
        "SELECT api_token_id FROM audit_log WHERE action = 'user.ssh_key_add' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(audited, Some(id.0));
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
        "Only tokens with the keys scope may do this."
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
    // The budget is the organization's: another token of Acme's is refused too (making
    // tokens buys no more calls), while another organization's is not slowed.
    // (Making it took a moment, in which the budget refilled a little: a budget of its own
    // would answer another 100 calls.)
    let (other, _) = token(&cp, &[TokenScope::Read]).await;
    let mut other_answered = 0;
    let status = loop {
        let (status, _, _) = send(&app, "GET", "/api/v1/ssh-keys", Some(&other), None).await;
        if status != StatusCode::OK || other_answered == 50 {
            break status;
        }
        other_answered += 1;
    };
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "{other_answered} answered"
    );
    let (globex, _) = token_of(
        &cp,
        "carol@globex.example",
        control_plane::demo::GLOBEX,
        None,
        &[TokenScope::Read],
    )
    .await;
    let (status, _, _) = send(&app, "GET", "/api/v1/ssh-keys", Some(&globex), None).await;
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
    // What a launch answers links to watching and releasing it, spelled as OpenAPI spells
    // links, so that clients and schemathesis' stateful phase can follow them.
    let links = &doc["paths"]["/instances"]["post"]["responses"]["201"]["links"];
    for (name, operation) in [
        ("GetInstance", "get_instance"),
        ("ReleaseInstance", "release_instance"),
    ] {
        assert_eq!(links[name]["operationId"], operation, "{links}");
        assert_eq!(links[name]["parameters"]["id"], "$response.body#/id");
        assert!(links[name].get("operation_id").is_none(), "{links}");
    }
    let operations: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .map(|op| op["operationId"].as_str().unwrap())
        .collect();
    for target in links.as_object().unwrap().values() {
        assert!(operations.contains(&target["operationId"].as_str().unwrap()));
    }
}

/// A launch body for Acme Research, with `name`.
fn launch_body(name: &str) -> Value {
    json!({
        "project": ACME_RESEARCH.to_string(), "sku": "h100.1x", "region": "eu-west-1",
        "image": "ubuntu-24.04-cuda", "name": name, "ssh_public_keys": [KEY],
        "tags": {"team": "vision", "run": name}
    })
}

/// One POST /instances with an Idempotency-Key (when given).
async fn launch(
    app: &axum::Router,
    token: &str,
    key: Option<&str>,
    body: Value,
) -> (StatusCode, http::HeaderMap, Value) {
    let mut req = Request::post("/api/v1/instances")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json");
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let (status, headers, text) =
        support::send(app, req.body(Body::from(body.to_string())).unwrap()).await;
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, headers, value)
}

#[tokio::test]
async fn instances_launch_once_per_key_list_by_page_watch_and_release() {
    let (db, cp, app) = portal().await;
    let (secret, token_id) = token(&cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let t = Some(secret.as_str());

    // A tenant-wide token must say which project.
    let mut body = launch_body("api-1");
    body.as_object_mut().unwrap().remove("project");
    let (status, _, problem) = launch(&app, &secret, None, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "project");

    // Launched once; the retry answers the same, marked as a replay.
    let (status, headers, first) =
        launch(&app, &secret, Some("run-0001-abc"), launch_body("api-1")).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(headers["location"], format!("/api/v1/instances/{id}"));
    assert_eq!(first["href"], format!("/api/v1/instances/{id}"));
    assert_eq!(first["sku"], "h100.1x");
    assert_eq!(first["tags"], json!({"team": "vision", "run": "api-1"}));
    assert!(!headers.contains_key("idempotent-replayed"));
    let (status, headers, again) =
        launch(&app, &secret, Some("run-0001-abc"), launch_body("api-1")).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(again, first, "the same body");
    assert_eq!(headers["idempotent-replayed"], "true");
    // The same key for something else is refused; a new key makes a second.
    let (status, _, problem) = launch(
        &app,
        &secret,
        Some("run-0001-abc"),
        launch_body("api-other"),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "conflict");
    // So is a retry asking for another lifetime: it is another launch, not the same one.
    let mut longer = launch_body("api-1");
    longer["lifetime_hours"] = json!(8);
    let (status, _, problem) = launch(&app, &secret, Some("run-0001-abc"), longer).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["code"], "conflict");
    // Retries racing each other: one allocation, every answer the first one's.
    let racing: Vec<_> = (0..8)
        .map(|_| {
            let (app, secret) = (app.clone(), secret.clone());
            let mut body = launch_body("api-race");
            body["tags"] = json!({"team": "race"});
            tokio::spawn(async move { launch(&app, &secret, Some("run-0002-race"), body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for r in racing {
        let (status, _, body) = r.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        answers.push(body);
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    let (status, _, _) = send(
        &app,
        "DELETE",
        &format!("/api/v1/instances/{}", answers[0]["id"].as_str().unwrap()),
        t,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let launched: i64 =
        sqlx::query_scalar("SELECT count(*) FROM allocations WHERE name LIKE 'api-%'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(launched, 2, "api-1 and api-race, once each");

    // Refusals name the field as this API calls it.
    for (change, status, code, field) in [
        (json!({"name": "Bad_Name"}), 400, "invalid", Some("name")),
        (
            json!({"image": "no-such-image"}),
            400,
            "invalid",
            Some("image"),
        ),
        (
            json!({"ssh_public_keys": ["not a key"]}),
            400,
            "invalid",
            Some("ssh_public_keys"),
        ),
        (
            json!({"tags": {"Team!": "x"}}),
            400,
            "invalid",
            Some("tags"),
        ),
        (
            json!({"sku": "h100.8x", "region": "mars-north-1"}),
            400,
            "invalid",
            Some("region"),
        ),
        (json!({"color": "blue"}), 400, "bad_request", None),
    ] {
        let mut body = launch_body("api-bad");
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (got, _, problem) = launch(&app, &secret, None, body).await;
        assert_eq!(got.as_u16(), status, "{change}: {problem}");
        assert_eq!(problem["code"], code, "{change}: {problem}");
        assert_eq!(problem["field"].as_str(), field, "{change}: {problem}");
    }
    let (status, _, problem) = launch(&app, &secret, Some("short"), launch_body("api-k")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "Idempotency-Key");

    // Two more, then pages of two, newest first, by cursor.
    for name in ["api-2", "api-3"] {
        let (status, _, body) = launch(&app, &secret, None, launch_body(name)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, _, page) = send(
        &app,
        "GET",
        "/api/v1/instances?tag=team=vision&limit=2",
        t,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let names = |p: &Value| -> Vec<String> {
        p["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&page), ["api-3", "api-2"]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, _, rest) = send(
        &app,
        "GET",
        &format!("/api/v1/instances?tag=team=vision&limit=2&cursor={cursor}"),
        t,
        None,
    )
    .await;
    assert_eq!(names(&rest), ["api-1"]);
    assert!(rest.get("next_cursor").is_none(), "{rest}");
    let (_, _, one) = send(&app, "GET", "/api/v1/instances?tag=run=api-2", t, None).await;
    assert_eq!(names(&one), ["api-2"]);
    let (_, _, none) = send(&app, "GET", "/api/v1/instances?tag=team=audio", t, None).await;
    assert_eq!(names(&none), Vec::<String>::new());
    for (query, field) in [
        ("state=sleeping", "state"),
        ("cursor=garbage", "cursor"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("tag=Bad!", "tag"),
    ] {
        let (status, _, problem) =
            send(&app, "GET", &format!("/api/v1/instances?{query}"), t, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {problem}");
        assert_eq!(problem["field"], field, "{query}: {problem}");
    }

    // One instance, with an ETag; unchanged, a watch ends in 304 after its wait.
    let path = format!("/api/v1/instances/{id}");
    let (status, headers, detail) = send(&app, "GET", &path, t, None).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["name"], "api-1");
    assert_eq!(detail["can_release"], true);
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let watch = |wait: u64| {
        Request::get(format!("{path}?wait={wait}"))
            .header("authorization", format!("Bearer {secret}"))
            .header("if-none-match", etag.clone())
            .body(Body::empty())
            .unwrap()
    };
    let started = std::time::Instant::now();
    let (status, headers, _) = support::send(&app, watch(1)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(headers["etag"].to_str().unwrap(), etag);
    assert!(started.elapsed() >= std::time::Duration::from_millis(500));
    // A change ends a watch at once: released while it waits.
    let releaser = {
        let (app, path, secret) = (app.clone(), path.clone(), secret.clone());
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            send(&app, "DELETE", &path, Some(&secret), None).await
        })
    };
    let (status, headers, body) = support::send(&app, watch(30)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_ne!(headers["etag"].to_str().unwrap(), etag);
    let changed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(changed["desired_state"], "released", "{changed}");
    let (status, _, released) = releaser.await.unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{released}");
    // Releasing again answers the same; an unknown or malformed id is not found.
    let (status, _, _) = send(&app, "DELETE", &path, t, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    for gone in [
        "/api/v1/instances/0a0e0000-0000-4000-8fff-000000000001",
        "/api/v1/instances/nope",
    ] {
        let (status, _, problem) = send(&app, "DELETE", gone, t, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{gone}: {problem}");
    }
    let (status, _, problem) = send(&app, "GET", &format!("{path}?wait=61"), t, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "wait");

    // What the token changed, the audit log says it changed, naming the token.
    let audited: Vec<(String, Option<uuid::Uuid>)> = sqlx::query_as(
        "SELECT action, api_token_id FROM audit_log
         WHERE resource LIKE '%' || $1 ORDER BY id",
    )
    .bind(&id)
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(
        audited,
        [
            ("allocation.launch".to_owned(), Some(token_id.0)),
            ("allocation.release".to_owned(), Some(token_id.0)),
        ]
    );

    // A watch held when its token is revoked ends then, refused, rather than waiting out.
    let (status, headers, _) = send(&app, "GET", &path, t, None).await;
    assert_eq!(status, StatusCode::OK);
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let revoker = {
        let cp = cp.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let alice = principal(&cp, "alice@acme.example").await;
            cp.revoke_api_token(&alice, token_id, None).await.unwrap();
        })
    };
    let held = Request::get(format!("{path}?wait=30"))
        .header("authorization", format!("Bearer {secret}"))
        .header("if-none-match", etag)
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = support::send(&app, held).await;
    revoker.await.unwrap();
    // (Unnoticed, it would have waited out its 30 s and answered 304.)
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

#[tokio::test]
async fn a_token_reaches_its_own_organization_and_project_and_scopes_only() {
    let (_db, cp, app) = portal().await;
    let (acme, _) = token(&cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let (_, _, launched) = launch(&app, &acme, None, launch_body("reach-1")).await;
    let id = launched["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/instances/{id}");

    // Another organization's admin sees nothing of Acme's, and can't launch there.
    let (globex, _) = token_of(
        &cp,
        "carol@globex.example",
        control_plane::demo::GLOBEX,
        None,
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    for method in ["GET", "DELETE"] {
        let (status, _, problem) = send(&app, method, &path, Some(&globex), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {problem}");
    }
    let (status, _, problem) = launch(&app, &globex, None, launch_body("reach-2")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    let (_, _, listed) = send(&app, "GET", "/api/v1/instances", Some(&globex), None).await;
    assert!(
        listed["instances"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["id"] != id.as_str()),
        "{listed}"
    );

    // A token for Acme Inference doesn't reach Research, though its maker does.
    let (inference, _) = token_of(
        &cp,
        "alice@acme.example",
        ACME,
        Some(ACME_INFERENCE),
        &[TokenScope::Read, TokenScope::Launch],
    )
    .await;
    let (status, _, _) = send(&app, "GET", &path, Some(&inference), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = launch(&app, &inference, None, launch_body("reach-3")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, listed) = send(&app, "GET", "/api/v1/instances", Some(&inference), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        listed["instances"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["project_id"] == ACME_INFERENCE.to_string()),
        "{listed}"
    );
    let (status, _, problem) = send(
        &app,
        "GET",
        &format!("/api/v1/instances?project={ACME_RESEARCH}"),
        Some(&inference),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");

    // A read-only token reads, and may neither launch nor release.
    let (read_only, _) = token(&cp, &[TokenScope::Read]).await;
    let (status, _, detail) = send(&app, "GET", &path, Some(&read_only), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["can_release"], false, "not with this token");
    let (status, _, problem) = launch(&app, &read_only, None, launch_body("reach-4")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    let (status, _, _) = send(&app, "DELETE", &path, Some(&read_only), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn projects_usage_and_invoices_with_the_pages_access_rules() {
    let (_db, cp, app) = portal().await;
    let (read, _) = token(&cp, &[TokenScope::Read]).await;
    let (_, _, body) = send(&app, "GET", "/api/v1/projects", Some(&read), None).await;
    let slugs: Vec<&str> = body["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["inference", "research"], "{body}");
    // A project's token sees that project only.
    let (research, _) = token_of(
        &cp,
        "alice@acme.example",
        ACME,
        Some(ACME_RESEARCH),
        &[TokenScope::Read, TokenScope::Billing],
    )
    .await;
    let (_, _, body) = send(&app, "GET", "/api/v1/projects", Some(&research), None).await;
    assert_eq!(body["projects"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["projects"][0]["slug"], "research");

    // Billing: the billing scope, a token for the whole organization, and a maker who sees it.
    let (billing, _) = token(&cp, &[TokenScope::Billing]).await;
    let (status, _, usage) = send(&app, "GET", "/api/v1/usage", Some(&billing), None).await;
    assert_eq!(status, StatusCode::OK, "{usage}");
    assert_eq!(usage["currency"], "USD");
    assert!(usage["month_to_date"]["amount_minor"].is_i64());
    let (status, _, invoices) = send(&app, "GET", "/api/v1/invoices", Some(&billing), None).await;
    assert_eq!(status, StatusCode::OK, "{invoices}");
    let alice = principal(&cp, "alice@acme.example").await;
    let finance = test_db::fixtures::in_tenant::<control_plane::billing::reports::TenantFinance>(
        &cp, &alice, ACME,
    )
    .await;
    assert_eq!(
        invoices["invoices"].as_array().unwrap().len(),
        cp.tenant_invoices(&finance).await.unwrap().len()
    );
    for (token, path, status) in [
        (&read, "/api/v1/usage", StatusCode::FORBIDDEN),
        (&read, "/api/v1/invoices", StatusCode::FORBIDDEN),
        (&research, "/api/v1/invoices", StatusCode::FORBIDDEN),
        (&billing, "/api/v1/projects", StatusCode::FORBIDDEN),
    ] {
        let (got, _, problem) = send(&app, "GET", path, Some(token), None).await;
        assert_eq!(got, status, "{path}: {problem}");
        assert_eq!(problem["code"], "forbidden", "{path}: {problem}");
    }
}

/// Alice (Acme's admin) sets `allowed_listings` on the research project.
async fn research_allows(cp: &control_plane::ControlPlane, listings: &str) {
    use control_plane::policy::{PolicyKey, PolicyValue, Target};
    let alice = principal(cp, "alice@acme.example").await;
    let scope = cp
        .policy_scope(&alice, Target::Project(ACME_RESEARCH))
        .await
        .unwrap();
    let value = PolicyValue::parse(PolicyKey::AllowedListings, listings).unwrap();
    cp.set_policy(&scope, PolicyKey::AllowedListings, Some(value), None)
        .await
        .unwrap();
}

#[tokio::test]
async fn images_are_what_the_project_may_launch_under_its_policies() {
    let (_db, cp, app) = portal().await;
    let (read, _) = token(&cp, &[TokenScope::Read]).await;
    let slugs = |body: &Value| -> Vec<String> {
        body["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["slug"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, _, all) = send(&app, "GET", "/api/v1/images", Some(&read), None).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let images = all["images"].as_array().unwrap();
    // OS images first; each with what a launch needs to know.
    assert_eq!(images[0]["category"], "os_image", "{all}");
    let ubuntu = images
        .iter()
        .find(|i| i["slug"] == "ubuntu-24.04-cuda")
        .unwrap();
    assert_eq!(ubuntu["accepts_user_data"], true);
    assert_eq!(ubuntu["ssh_user"], "ubuntu");
    assert!(ubuntu["fee_per_hour"].is_null());
    assert!(
        ubuntu["skus"]
            .as_array()
            .unwrap()
            .contains(&json!("h100.1x")),
        "{ubuntu}"
    );
    let vllm = images.iter().find(|i| i["slug"] == "vllm").unwrap();
    assert_eq!(vllm["accepts_user_data"], false);
    assert!(vllm["fee_per_hour"]["amount_minor"].as_i64().unwrap() > 0);
    assert!(slugs(&all).len() >= 5, "{all}");

    // Research may launch only Ubuntu: that is all it is shown; Inference sees everything.
    research_allows(&cp, "ubuntu-24.04-cuda").await;
    let research = format!("/api/v1/images?project={ACME_RESEARCH}");
    let (_, _, body) = send(&app, "GET", &research, Some(&read), None).await;
    assert_eq!(slugs(&body), ["ubuntu-24.04-cuda"]);
    let (_, _, body) = send(
        &app,
        "GET",
        &format!("/api/v1/images?project={ACME_INFERENCE}"),
        Some(&read),
        None,
    )
    .await;
    assert_eq!(slugs(&body), slugs(&all));
    // A token for the research project gets its project's list without naming it.
    let (research_token, _) = token_of(
        &cp,
        "alice@acme.example",
        ACME,
        Some(ACME_RESEARCH),
        &[TokenScope::Read],
    )
    .await;
    let (_, _, body) = send(&app, "GET", "/api/v1/images", Some(&research_token), None).await;
    assert_eq!(slugs(&body), ["ubuntu-24.04-cuda"]);

    // Another organization's project is not there to ask about; a malformed one is a 400; a
    // token without `read` is refused.
    let (globex, _) = token_of(
        &cp,
        "carol@globex.example",
        control_plane::demo::GLOBEX,
        None,
        &[TokenScope::Read],
    )
    .await;
    let (status, _, problem) = send(&app, "GET", &research, Some(&globex), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    let (status, _, problem) =
        send(&app, "GET", "/api/v1/images?project=x", Some(&read), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    let (billing, _) = token(&cp, &[TokenScope::Billing]).await;
    let (status, _, _) = send(&app, "GET", "/api/v1/images", Some(&billing), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = send(&app, "GET", "/api/v1/images", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn members_and_audit_trails_with_the_pages_access_rules() {
    let (_db, cp, app) = portal().await;
    let (alice, _) = token(&cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let (status, _, launched) = launch(&app, &alice, None, launch_body("audited-1")).await;
    assert_eq!(status, StatusCode::CREATED, "{launched}");
    let instance = launched["id"].as_str().unwrap();

    let members = format!("/api/v1/projects/{ACME_RESEARCH}/members");
    let (status, _, body) = send(&app, "GET", &members, Some(&alice), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let roles: Vec<(&str, &str)> = body["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["email"].as_str().unwrap(), m["role"].as_str().unwrap()))
        .collect();
    assert!(roles.contains(&("alice@acme.example", "admin")), "{body}");
    assert!(roles.contains(&("bob@acme.example", "operator")), "{body}");

    // The project's trail, as its page shows: what was done to the project and to its
    // instances (the launch above), and nothing of another project's.
    let trail = format!("/api/v1/projects/{ACME_RESEARCH}/audit");
    let (status, _, body) = send(&app, "GET", &trail, Some(&alice), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let entries = body["entries"].as_array().unwrap();
    assert!(
        entries.iter().any(|e| e["action"] == "project.create"),
        "{body}"
    );
    assert!(
        entries.iter().any(|e| e["action"] == "allocation.launch"
            && e["resource"]
                .as_str()
                .unwrap()
                .ends_with(&format!(":allocation:{instance}"))),
        "{body}"
    );
    assert!(
        entries.iter().all(|e| e["resource"]
            .as_str()
            .unwrap()
            .contains(&format!(":{ACME}:{ACME_RESEARCH}:"))),
        "{body}"
    );

    // The organization's log: for its admins, filtered as the audit page filters.
    let (status, _, body) = send(
        &app,
        "GET",
        &format!("/api/v1/audit?action=allocation.&resource={instance}"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let entries = body["entries"].as_array().unwrap();
    // The launch, made with the token, by its maker.
    assert_eq!(entries.len(), 1, "{body}");
    assert_eq!(entries[0]["action"], "allocation.launch");
    assert_eq!(entries[0]["actor"], "alice@acme.example");
    assert!(
        entries
            .iter()
            .all(|e| e["action"].as_str().unwrap().starts_with("allocation.")
                && e["resource"].as_str().unwrap().contains(instance)),
        "{body}"
    );
    let (status, _, problem) = send(
        &app,
        "GET",
        "/api/v1/audit?action=Allocation",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "action");

    // Who else may read the log (admins only, not members or finance) is the isolation
    // matrix's (tests/it/isolation.rs, `api_matrix`).
    // A project's token has its trail, not the organization's log.
    let (research, _) = token_of(
        &cp,
        "alice@acme.example",
        ACME,
        Some(ACME_RESEARCH),
        &[TokenScope::Read],
    )
    .await;
    let (status, _, problem) = send(&app, "GET", "/api/v1/audit", Some(&research), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    let inference_trail = format!("/api/v1/projects/{ACME_INFERENCE}/audit");
    let (status, _, _) = send(&app, "GET", &inference_trail, Some(&research), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Another organization sees neither; a project that is not an id is not found.
    let (globex, _) = token_of(
        &cp,
        "carol@globex.example",
        control_plane::demo::GLOBEX,
        None,
        &[TokenScope::Read],
    )
    .await;
    for path in [&members, &trail] {
        let (status, _, problem) = send(&app, "GET", path, Some(&globex), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {problem}");
    }
    let (_, _, body) = send(&app, "GET", "/api/v1/audit", Some(&globex), None).await;
    assert!(
        body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| !e["resource"].as_str().unwrap().contains(":acme:")),
        "{body}"
    );
    let (status, _, _) = send(
        &app,
        "GET",
        "/api/v1/projects/nope/members",
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn user_data_reaches_the_node_only_for_images_that_accept_it() {
    let (_db, cp, app) = portal().await;
    let (alice, _) = token(&cp, &[TokenScope::Read, TokenScope::Launch]).await;
    let user_data = "#cloud-config\npackages: [htop]\n";
    let mut body = launch_body("with-user-data");
    body["user_data"] = json!(user_data);
    let (status, _, launched) = launch(&app, &alice, None, body).await;
    assert_eq!(status, StatusCode::CREATED, "{launched}");
    let id: uuid::Uuid = launched["id"].as_str().unwrap().parse().unwrap();
    // Stored sealed, and in the provisioning task its node's agent claims, open.
    let stored: (Option<String>, Option<String>) =
        sqlx::query_as("SELECT user_data, user_data_sealed FROM allocations WHERE id = $1")
            .bind(id)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(stored.0, None);
    assert!(!stored.1.unwrap().contains("htop"));
    let spec: Value = sqlx::query_scalar(
        "SELECT spec FROM agent_tasks WHERE allocation_id = $1 AND kind LIKE '%provision'",
    )
    .bind(id)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(spec["kind"], "slice.vm_provision");
    assert_eq!(spec.get("user_data"), None, "{spec}");
    assert!(spec["user_data_sealed"].is_string(), "{spec}");

    // An image that doesn't take user data, user data in no form cloud-init runs, too much:
    // each refused, naming the field, and nothing launched.
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM allocations")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    let mut vllm = launch_body("stack-with-user-data");
    vllm["image"] = json!("vllm");
    vllm["user_data"] = json!(user_data);
    let too_big = format!("#!/bin/sh\n{}", "#".repeat(16 * 1024));
    for (body, says) in [
        (vllm, "doesn't accept user data"),
        (
            {
                let mut b = launch_body("bad-user-data");
                b["user_data"] = json!("packages: [htop]");
                b
            },
            "#cloud-config",
        ),
        (
            {
                let mut b = launch_body("big-user-data");
                b["user_data"] = json!(too_big);
                b
            },
            "at most 16384 bytes",
        ),
        (
            {
                // Its own merge rules would let it replace the platform's part.
                let mut b = launch_body("merging-user-data");
                b["user_data"] = json!("#cloud-config\nmerge_how: dict(replace)+list(replace)\n");
                b
            },
            "remove merge_how",
        ),
    ] {
        let (status, _, problem) = launch(&app, &alice, None, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(problem["field"], "user_data", "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(says),
            "{problem}"
        );
    }
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM allocations")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(before, after);
    // The schema refuses it too, whatever writes it.
    test_db::fixtures::assert_db_refuses(
        &cp,
        &format!("UPDATE allocations SET user_data = 'echo hi' WHERE id = '{id}'"),
        "allocations_user_data",
    )
    .await;
}
