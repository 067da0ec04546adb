//! The public REST API under `/api/v1` through the whole router, on a copy of the demo
//! database: offers with the numbers placement honours, problem documents for every refusal,
//! and the OpenAPI document generated from the handlers.

use control_plane::prelude::*;

use http::StatusCode;
use serde_json::Value;
use server::{app_state, router};
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
    for name in ["Offer", "OfferList", "Money", "Shape", "Problem"] {
        assert!(schemas[name].is_object(), "{name} missing: {schemas}");
    }
    assert_eq!(
        schemas["Shape"]["enum"],
        serde_json::json!(["baremetal", "gpu_slice"])
    );
    assert_eq!(schemas["Problem"]["example"]["code"], "invalid");
}
