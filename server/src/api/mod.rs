//! The public REST API, under `/api/v1`: JSON in and out, errors as
//! `application/problem+json` ([`problem`]), and an OpenAPI 3.1 document generated from the
//! handlers themselves at `/api/v1/openapi.json`. Handlers are as thin as server functions:
//! read and bound the request, call the control plane, return its read model.

pub mod auth;
pub mod clusters;
pub mod images;
pub mod instances;
pub mod offers;
pub mod organization;
pub mod problem;
pub mod snapshots;
pub mod ssh_keys;
pub mod volumes;
pub mod watches;

use app::error::AppError;
use axum::Json;
use axum::Router;
use axum::extract::FromRequestParts;
use axum::routing::get;
use control_plane::ControlPlane;
use http::request::Parts;
use utoipa::OpenApi;

use problem::{ApiError, Problem};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "GPU cloud API",
        version = "1",
        description = "Launch and manage GPU slices and bare-metal nodes. Errors are RFC 9457 problem documents with a stable `code`."
    ),
    servers((url = "/api/v1")),
    paths(
        offers::list,
        offers::storage_prices,
        images::list,
        instances::launch,
        instances::list,
        instances::get,
        instances::release,
        instances::stop,
        instances::start,
        clusters::launch,
        clusters::list,
        clusters::get,
        clusters::topology,
        clusters::release,
        volumes::create,
        volumes::list,
        volumes::get,
        volumes::resize,
        volumes::attach,
        volumes::detach,
        volumes::delete,
        snapshots::create,
        snapshots::list,
        snapshots::get,
        snapshots::delete,
        ssh_keys::list,
        ssh_keys::add,
        ssh_keys::delete,
        organization::projects,
        organization::members,
        organization::project_audit,
        organization::audit,
        organization::usage,
        organization::invoices
    ),
    components(schemas(Problem)),
    modifiers(&BearerAuth),
    tags(
        (name = "catalog", description = "What is for sale, where, and what could launch now; the images a project may launch."),
        (name = "instances", description = "GPU slices and bare-metal nodes: launch, list, watch, stop, start, release."),
        (name = "clusters", description = "Instances of one SKU placed together within one leaf switch, spine group or fabric, launched and released as one."),
        (name = "volumes", description = "Block storage of a project, off the GPU hosts: it outlives an instance, and any instance of its region can attach it (one at a time)."),
        (name = "organization", description = "The token's organization: its projects, their members and audit trails, the audit log for admins, and for billing tokens this month's spend and the invoices."),
        (name = "ssh-keys", description = "The SSH public keys of the token's maker, the same the account page shows.")
    )
)]
pub struct ApiDoc;

/// Declares the bearer scheme the operations that need a token name (`security(("token" = [])))`).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("gpk_…")
                    .description(Some(
                        "An API token made in the portal (organization or project settings). It acts for its maker, never more, narrowed by its scopes.",
                    ))
                    .build(),
            ),
        );
    }
}

/// `/api/v1/…`, to be nested under that prefix.
pub fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/offers", get(offers::list))
        .route("/storage-prices", get(offers::storage_prices))
        .route("/images", get(images::list))
        .route("/instances", get(instances::list).post(instances::launch))
        .route(
            "/instances/{id}",
            get(instances::get).delete(instances::release),
        )
        .route("/instances/{id}/stop", axum::routing::post(instances::stop))
        .route(
            "/instances/{id}/start",
            axum::routing::post(instances::start),
        )
        .route("/clusters", get(clusters::list).post(clusters::launch))
        .route(
            "/clusters/{id}",
            get(clusters::get).delete(clusters::release),
        )
        .route("/clusters/{id}/topology", get(clusters::topology))
        .route("/volumes", get(volumes::list).post(volumes::create))
        .route(
            "/volumes/{id}",
            get(volumes::get)
                .patch(volumes::resize)
                .delete(volumes::delete),
        )
        .route("/volumes/{id}/attach", axum::routing::post(volumes::attach))
        .route("/volumes/{id}/detach", axum::routing::post(volumes::detach))
        .route(
            "/volumes/{id}/snapshots",
            axum::routing::post(snapshots::create),
        )
        .route("/snapshots", get(snapshots::list))
        .route(
            "/snapshots/{id}",
            get(snapshots::get).delete(snapshots::delete),
        )
        .route("/ssh-keys", get(ssh_keys::list).post(ssh_keys::add))
        .route("/ssh-keys/{id}", axum::routing::delete(ssh_keys::delete))
        .route("/projects", get(organization::projects))
        .route("/projects/{id}/members", get(organization::members))
        .route("/projects/{id}/audit", get(organization::project_audit))
        .route("/audit", get(organization::audit))
        .route("/usage", get(organization::usage))
        .route("/invoices", get(organization::invoices))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
}

/// The longest `Idempotency-Key` read.
const MAX_KEY: usize = 200;

/// A request's `Idempotency-Key`, or a fresh one when it sent none (then a retry is a new
/// request). The domain checks the key (8 to 200 printable characters) as it checks a
/// form's; here only its length is bounded before it is copied.
/// `201 Created` with what was made and its `Location`; `Idempotent-Replayed: true` when a
/// retry found what its first try made.
pub(crate) fn created<T: serde::Serialize>(
    body: &T,
    location: &str,
    made_now: bool,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut response = (http::StatusCode::CREATED, axum::Json(body)).into_response();
    let h = response.headers_mut();
    if let Ok(v) = http::HeaderValue::from_str(location) {
        h.insert(http::header::LOCATION, v);
    }
    if !made_now {
        h.insert(
            "idempotent-replayed",
            http::HeaderValue::from_static("true"),
        );
    }
    response
}

pub(crate) fn idempotency_key(headers: &http::HeaderMap, per: &str) -> Result<String, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(format!("api-{}", uuid::Uuid::new_v4())),
        Some(v) => v
            .to_str()
            .ok()
            .filter(|v| v.len() <= MAX_KEY)
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::invalid(
                    "Idempotency-Key",
                    format!("use 8 to 200 printable characters (a UUID per {per}, for example)"),
                )
            }),
    }
}

/// Request bodies larger than this are refused (413) before they are read.
pub const MAX_BODY: usize = 32 * 1024;

async fn openapi() -> Json<serde_json::Value> {
    Json(document())
}

/// The OpenAPI document as served. utoipa 5.5 writes a response link's fields in snake case
/// (`operation_id`); OpenAPI spells them in camel case (`operationId`), and tools that follow
/// links (schemathesis' stateful phase, generators) read only that.
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let operations = doc
        .get_mut("paths")
        .and_then(|p| p.as_object_mut())
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut());
    for operation in operations {
        let responses = operation
            .get_mut("responses")
            .and_then(|r| r.as_object_mut())
            .into_iter();
        for response in responses.flat_map(|r| r.values_mut()) {
            let Some(links) = response.get_mut("links").and_then(|l| l.as_object_mut()) else {
                continue;
            };
            for link in links.values_mut().filter_map(|l| l.as_object_mut()) {
                for (snake, camel) in [
                    ("operation_id", "operationId"),
                    ("operation_ref", "operationRef"),
                    ("request_body", "requestBody"),
                ] {
                    if let Some(v) = link.remove(snake) {
                        link.insert(camel.to_owned(), v);
                    }
                }
            }
        }
    }
    doc
}

/// The request's id (the server's request-id layer sets it on every request), so that a fault
/// of ours is logged under the id the caller is given.
pub struct RequestId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(RequestId::from_parts(parts))
    }
}

impl RequestId {
    pub fn from_parts(parts: &Parts) -> Self {
        RequestId(
            parts
                .headers
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("unknown")
                .to_owned(),
        )
    }

    /// A control-plane error as the API answers it (the one mapping, `AppError::from_domain`).
    pub fn refused(&self, e: control_plane::Error) -> ApiError {
        ApiError(AppError::from_domain(e, || self.0.clone()))
    }
}

/// The client's address, when the server knows it (it serves with connection info; a test
/// router called directly has none).
pub struct ClientAddr(pub Option<String>);

impl ClientAddr {
    pub fn from_parts(parts: &Parts) -> Self {
        ClientAddr(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip().to_string()),
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr::from_parts(parts))
    }
}

/// Anything else under `/api/v1`: a problem, not the portal's HTML 404 page.
async fn not_found() -> ApiError {
    ApiError(AppError::NotFound)
}
