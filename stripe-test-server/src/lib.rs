//! A local Stripe test server.
//!
//! It speaks the part of Stripe's API the portal calls (customers, invoices, invoice items,
//! finalize, pay, void, mark uncollectible), keeps state in memory, honours idempotency keys
//! the way Stripe does (same key and same request: the stored answer; same key, other
//! request: a 400 `idempotency_error`), and sends signed webhooks (`Stripe-Signature:
//! t=…,v1=HMAC-SHA256(secret, "t.body")`), retrying deliveries that fail.
//!
//! Every object it returns starts as Stripe's own published fixture of that type
//! (`fixtures3.json`), with ids, amounts, statuses and links filled in, so a client that
//! parses these with async-stripe's types parses real shapes.
//!
//! Fault knobs (`POST /_test/faults`): fail the next N API requests with 503, or all of them
//! for a while; process the next N requests but lose the answer (500 after the object is
//! made: the client retries with its key); decline the next N payments; send every event
//! twice; hold events and then deliver them in reverse order (`POST /_test/flush`); carry out
//! the next N requests but answer them only after a delay (a client's timeout, then its retry).
//! `GET /_test/events` lists every event made, for looking at what a run sent.
//! `POST /_test/invoices/{id}` merges a JSON object into an invoice (a JSON merge patch),
//! sending no event: someone changing it in Stripe's dashboard.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Sha256;

/// What the server is started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// Stripe's `fixtures3.json`.
    pub fixtures: Value,
    /// Where webhooks go, e.g. `http://127.0.0.1:3000/stripe/webhook`; `None`: no webhooks.
    pub webhook_url: Option<String>,
    pub webhook_secret: String,
    /// Attempt payment this long after finalisation, like Stripe's automatic collection
    /// (`None`: only when asked, through `/v1/invoices/{id}/pay` or the hosted page).
    pub autopay_after: Option<Duration>,
    /// Payments of customers whose `metadata[tenant]` is listed here are always declined
    /// (the demo's "card that fails").
    pub decline_tenants: Vec<String>,
}

/// Stripe's published fixtures (`fixtures/fixtures3.json`, MIT, see `fixtures/README.md`),
/// compiled in so the server needs no file beside it.
pub const FIXTURES_JSON: &str = include_str!("../fixtures/fixtures3.json");

impl Config {
    /// The compiled-in fixtures.
    pub fn bundled_fixtures() -> Value {
        serde_json::from_str(FIXTURES_JSON).expect("the vendored fixtures3.json is valid JSON")
    }

    pub fn from_fixture_file(path: &std::path::Path) -> std::io::Result<Value> {
        let text = std::fs::read_to_string(path)?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }
}

#[derive(Debug, Default, Clone, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// The next N API requests answer 503.
    pub fail_requests: u32,
    /// Every API request answers 503 for this long (from when the knob is set).
    pub fail_for_ms: u64,
    /// The next N API requests are carried out, but answer 500 (the answer is "lost").
    pub lose_responses: u32,
    /// The next N payment attempts are declined.
    pub decline_payments: u32,
    /// Deliver every event twice.
    pub duplicate_events: bool,
    /// Keep events until `POST /_test/flush`, which delivers them newest first.
    pub hold_events: bool,
    /// The next N API requests are carried out at once but answered only after `delay_ms`:
    /// a client with a shorter timeout gives up and retries with the same key.
    pub delay_requests: u32,
    pub delay_ms: u64,
}

#[derive(Default)]
struct Store {
    customers: HashMap<String, Value>,
    invoices: HashMap<String, Value>,
    credit_notes: HashMap<String, Value>,
    items: HashMap<String, Value>,
    /// key → (request fingerprint, status, body).
    idempotency: HashMap<String, (String, u16, Value)>,
    faults: Faults,
    failing_until: Option<Instant>,
    held: Vec<Value>,
    /// Every event made, in order.
    events: Vec<Value>,
    /// Objects created per kind (what a test checks for duplicates).
    created: HashMap<&'static str, u32>,
    seq: u64,
    /// Requests answered from the idempotency store (a retry of one already carried out).
    replays: u64,
    last_event_created: i64,
}

struct Inner {
    config: Config,
    store: Mutex<Store>,
    http: reqwest::Client,
    public_base: String,
}

#[derive(Clone)]
pub struct Handle {
    inner: Arc<Inner>,
    pub addr: SocketAddr,
}

impl Handle {
    pub fn base_url(&self) -> String {
        format!("http://{}/", self.addr)
    }
    pub fn created(&self, kind: &str) -> u32 {
        let s = self.inner.store.lock().unwrap_or_else(|p| p.into_inner());
        s.created.get(kind).copied().unwrap_or(0)
    }
    /// How many requests were answered as replays of an earlier one with the same key.
    pub fn replays(&self) -> u64 {
        self.inner
            .store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replays
    }
    pub fn customer(&self, id: &str) -> Option<Value> {
        let s = self.inner.store.lock().unwrap_or_else(|p| p.into_inner());
        s.customers.get(id).cloned()
    }
    pub fn invoice(&self, id: &str) -> Option<Value> {
        let s = self.inner.store.lock().unwrap_or_else(|p| p.into_inner());
        s.invoices.get(id).cloned()
    }
    pub fn set_faults(&self, f: Faults) {
        set_faults(&self.inner, f);
    }
    /// Changes an invoice behind the platform's back, sending no event (someone editing it in
    /// Stripe's dashboard): what reconciliation must notice. False when there is no such invoice.
    pub fn edit_invoice(&self, id: &str, edit: impl FnOnce(&mut Value)) -> bool {
        edit_invoice(&self.inner, id, edit)
    }
    pub async fn flush(&self) {
        flush(&self.inner).await;
    }
    /// Attempts payment of an invoice, as the customer's card would be charged.
    pub async fn pay(&self, id: &str) -> Result<Value, Value> {
        let (status, body) = pay(&self.inner, id);
        if status == StatusCode::OK {
            Ok(body)
        } else {
            Err(body)
        }
    }
}

fn set_faults(inner: &Inner, f: Faults) {
    let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    s.failing_until =
        (f.fail_for_ms > 0).then(|| Instant::now() + Duration::from_millis(f.fail_for_ms));
    let was_holding = s.faults.hold_events;
    s.faults = f;
    if was_holding && !s.faults.hold_events {
        // Turning holding off doesn't drop what is held; flush delivers it.
        s.faults.hold_events = false;
    }
}

/// Starts the server on `listen` (port 0 for any).
pub async fn start(config: Config, listen: SocketAddr) -> std::io::Result<Handle> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let inner = Arc::new(Inner {
        config,
        store: Mutex::new(Store::default()),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(std::io::Error::other)?,
        public_base: format!("http://{addr}"),
    });
    let app = Router::new()
        .route("/v1/customers", post(create_customer))
        .route("/v1/customers/{id}", get(get_customer))
        .route("/v1/invoices", post(create_invoice))
        .route("/v1/invoices/{id}", get(get_invoice))
        .route("/v1/invoices/{id}/{action}", post(invoice_action))
        .route("/v1/invoiceitems", post(create_item))
        .route("/v1/credit_notes", post(create_credit_note))
        .route_layer(axum::middleware::from_fn_with_state(inner.clone(), slow))
        .route("/hosted/{id}", get(hosted_page).post(hosted_pay))
        .route("/_test/faults", post(faults))
        .route("/_test/invoices/{id}", post(edit_invoice_route))
        .route("/_test/flush", post(flush_route))
        .route("/_test/events", get(events_route))
        .with_state(inner.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "stripe test server stopped");
        }
    });
    Ok(Handle { inner, addr })
}

type Shared = State<Arc<Inner>>;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> (StatusCode, Value) {
    (
        status,
        json!({ "error": { "type": kind, "code": code, "message": message } }),
    )
}

fn fixture(inner: &Inner, kind: &str) -> Value {
    inner.config.fixtures["resources"][kind].clone()
}

fn new_id(s: &mut Store, prefix: &str) -> String {
    s.seq += 1;
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}{:04}", &u[..14], s.seq)
}

/// The form async-stripe sends, as flat `key → value` pairs (`metadata[tenant]` stays as is).
fn form(body: &Bytes) -> Result<HashMap<String, String>, (StatusCode, Value)> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
        .map(|v| v.into_iter().collect())
        .map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                None,
                &format!("could not parse the form: {e}"),
            )
        })
}

fn metadata(f: &HashMap<String, String>) -> Value {
    let mut m = serde_json::Map::new();
    for (k, v) in f {
        if let Some(key) = k
            .strip_prefix("metadata[")
            .and_then(|k| k.strip_suffix(']'))
        {
            m.insert(key.to_string(), Value::String(v.clone()));
        }
    }
    Value::Object(m)
}

/// Fault injection and idempotency around one API request. `work` runs at most once per
/// idempotency key.
fn api(
    inner: &Inner,
    headers: &HeaderMap,
    fingerprint: String,
    work: impl FnOnce(&Inner) -> (StatusCode, Value),
) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    {
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        if s.faults.fail_requests > 0 {
            s.faults.fail_requests -= 1;
            let (st, b) = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                None,
                "the Stripe test server is failing on purpose",
            );
            return (st, axum::Json(b)).into_response();
        }
        if s.failing_until.is_some_and(|t| Instant::now() < t) {
            let (st, b) = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                None,
                "the Stripe test server is down for a while, on purpose",
            );
            return (st, axum::Json(b)).into_response();
        }
        if let Some(k) = &key
            && let Some((fp, status, body)) = s.idempotency.get(k)
        {
            if *fp != fingerprint {
                let (st, b) = error(
                    StatusCode::BAD_REQUEST,
                    "idempotency_error",
                    None,
                    &format!(
                        "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{k}' if you meant to execute a different request."
                    ),
                );
                return (st, axum::Json(b)).into_response();
            }
            let (status, body) = (*status, body.clone());
            s.replays += 1;
            let mut r = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
                axum::Json(body),
            )
                .into_response();
            r.headers_mut()
                .insert("idempotent-replayed", "true".parse().expect("header"));
            return r;
        }
    }
    let (status, body) = work(inner);
    let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = key
        && status.as_u16() < 500
    {
        s.idempotency
            .insert(k, (fingerprint, status.as_u16(), body.clone()));
    }
    if s.faults.lose_responses > 0 {
        s.faults.lose_responses -= 1;
        let (st, b) = error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            None,
            "the answer was lost on purpose (the request was carried out)",
        );
        return (st, axum::Json(b)).into_response();
    }
    (status, axum::Json(body)).into_response()
}

fn fingerprint(path: &str, body: &Bytes) -> String {
    format!("{path}?{}", String::from_utf8_lossy(body))
}

async fn create_customer(State(inner): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let fp = fingerprint("/v1/customers", &body);
    api(&inner, &headers, fp, |inner| {
        let f = match form(&body) {
            Ok(f) => f,
            Err(e) => return e,
        };
        let mut c = fixture(inner, "customer");
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        let id = new_id(&mut s, "cus");
        c["id"] = json!(id);
        c["created"] = json!(now());
        c["name"] = json!(f.get("name"));
        c["email"] = json!(f.get("email"));
        c["description"] = json!(f.get("description"));
        c["metadata"] = metadata(&f);
        c["discount"] = Value::Null;
        c["balance"] = json!(0);
        s.customers.insert(id, c.clone());
        *s.created.entry("customer").or_default() += 1;
        (StatusCode::OK, c)
    })
}

async fn get_customer(State(inner): Shared, Path(id): Path<String>) -> Response {
    let s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    found(s.customers.get(&id), "customer", &id)
}

/// A stored object as Stripe answers a retrieve: the object, or 404 `resource_missing`.
fn found(object: Option<&Value>, kind: &str, id: &str) -> Response {
    match object {
        Some(o) => axum::Json(o.clone()).into_response(),
        None => not_found(kind, id),
    }
}

/// Stripe's answer for an id it doesn't know.
fn no_such(kind: &str, id: &str) -> (StatusCode, Value) {
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        Some("resource_missing"),
        &format!("No such {kind}: '{id}'"),
    )
}

fn not_found(kind: &str, id: &str) -> Response {
    let (st, b) = no_such(kind, id);
    (st, axum::Json(b)).into_response()
}

async fn create_invoice(State(inner): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let fp = fingerprint("/v1/invoices", &body);
    api(&inner, &headers, fp, |inner| {
        let f = match form(&body) {
            Ok(f) => f,
            Err(e) => return e,
        };
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        let Some(customer) = f
            .get("customer")
            .filter(|c| s.customers.contains_key(*c))
            .cloned()
        else {
            return no_such("customer", f.get("customer").map_or("", String::as_str));
        };
        let Some(currency) = f.get("currency").cloned() else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("parameter_missing"),
                "Missing required param: currency.",
            );
        };
        let id = new_id(&mut s, "in");
        let mut i = fixture(inner, "invoice");
        let t = now();
        i["id"] = json!(id);
        i["customer"] = json!(customer);
        i["customer_name"] = s.customers[&customer]["name"].clone();
        i["currency"] = json!(currency);
        i["created"] = json!(t);
        i["effective_at"] = Value::Null;
        i["due_date"] = Value::Null;
        i["status"] = json!("draft");
        i["number"] = Value::Null;
        i["auto_advance"] = json!(f.get("auto_advance").is_some_and(|v| v == "true"));
        i["description"] = json!(f.get("description"));
        i["metadata"] = metadata(&f);
        i["hosted_invoice_url"] = Value::Null;
        i["invoice_pdf"] = Value::Null;
        i["last_finalization_error"] = Value::Null;
        i["from_invoice"] = Value::Null;
        i["attempt_count"] = json!(0);
        i["attempted"] = json!(false);
        for k in [
            "amount_due",
            "amount_paid",
            "amount_remaining",
            "subtotal",
            "total",
            "subtotal_excluding_tax",
            "total_excluding_tax",
        ] {
            i[k] = json!(0);
        }
        i["lines"]["data"] = json!([]);
        i["lines"]["total_count"] = json!(0);
        i["lines"]["url"] = json!(format!("/v1/invoices/{id}/lines"));
        s.invoices.insert(id, i.clone());
        *s.created.entry("invoice").or_default() += 1;
        (StatusCode::OK, i)
    })
}

async fn get_invoice(State(inner): Shared, Path(id): Path<String>) -> Response {
    let s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    found(s.invoices.get(&id), "invoice", &id)
}

async fn create_item(State(inner): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let fp = fingerprint("/v1/invoiceitems", &body);
    api(&inner, &headers, fp, |inner| {
        let f = match form(&body) {
            Ok(f) => f,
            Err(e) => return e,
        };
        let Some(amount) = f.get("amount").and_then(|a| a.parse::<i64>().ok()) else {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("parameter_missing"),
                "Missing required param: amount (an integer).",
            );
        };
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        let invoice = f.get("invoice").cloned().unwrap_or_default();
        match s.invoices.get(&invoice) {
            None => {
                return no_such("invoice", &invoice);
            }
            Some(i) if i["status"] != "draft" => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    Some("invoice_not_editable"),
                    &format!("Invoice {invoice} is no longer a draft."),
                );
            }
            Some(i)
                if Some(i["customer"].as_str().unwrap_or_default())
                    != f.get("customer").map(String::as_str) =>
            {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    None,
                    "The invoice belongs to another customer.",
                );
            }
            Some(_) => {}
        }
        let id = new_id(&mut s, "ii");
        let mut item = fixture(inner, "invoiceitem");
        item["id"] = json!(id);
        item["amount"] = json!(amount);
        item["currency"] = json!(f.get("currency"));
        item["customer"] = json!(f.get("customer"));
        item["description"] = json!(f.get("description"));
        item["invoice"] = json!(invoice);
        item["metadata"] = metadata(&f);
        item["date"] = json!(now());
        item["parent"] = Value::Null;
        item["net_amount"] = json!(amount);
        item["quantity"] = json!(1);
        item["quantity_decimal"] = json!("1");
        let inv = s.invoices.get_mut(&invoice).expect("checked above");
        for k in [
            "amount_due",
            "amount_remaining",
            "subtotal",
            "total",
            "subtotal_excluding_tax",
            "total_excluding_tax",
        ] {
            inv[k] = json!(inv[k].as_i64().unwrap_or(0) + amount);
        }
        s.items.insert(id, item.clone());
        *s.created.entry("invoiceitem").or_default() += 1;
        (StatusCode::OK, item)
    })
}

/// A credit note against a finalised invoice. Before payment it lowers what is due; after,
/// Stripe wants it to say where the money goes (`credit_amount`, `refund_amount`,
/// `out_of_band_amount` summing to `amount`), and a credit lands on the customer's balance.
async fn create_credit_note(State(inner): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let fp = fingerprint("/v1/credit_notes", &body);
    api(&inner, &headers, fp, |inner| {
        let f = match form(&body) {
            Ok(f) => f,
            Err(e) => return e,
        };
        let num = |k: &str| f.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let amount = num("amount");
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        let invoice = f.get("invoice").cloned().unwrap_or_default();
        let Some(inv) = s.invoices.get(&invoice).cloned() else {
            return no_such("invoice", &invoice);
        };
        let status = inv["status"].as_str().unwrap_or("").to_string();
        let credited = inv["pre_payment_credit_notes_amount"].as_i64().unwrap_or(0)
            + inv["post_payment_credit_notes_amount"]
                .as_i64()
                .unwrap_or(0);
        if !matches!(status.as_str(), "open" | "paid") {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                None,
                &format!(
                    "Invoice {invoice} is {status}; credit notes need an open or paid invoice."
                ),
            );
        }
        if amount <= 0 || credited + amount > inv["total"].as_i64().unwrap_or(0) {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("credit_note_amount_too_large"),
                "The credit note amount must be positive and at most the invoice's total less earlier credit notes.",
            );
        }
        let post_payment = status == "paid";
        if post_payment
            && num("credit_amount") + num("refund_amount") + num("out_of_band_amount") != amount
        {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                None,
                "For a paid invoice, credit_amount, refund_amount and out_of_band_amount must add up to amount.",
            );
        }
        let id = new_id(&mut s, "cn");
        let mut cn = fixture(inner, "credit_note");
        let customer = inv["customer"].as_str().unwrap_or_default().to_string();
        cn["id"] = json!(id);
        cn["amount"] = json!(amount);
        cn["subtotal"] = json!(amount);
        cn["subtotal_excluding_tax"] = json!(amount);
        cn["total"] = json!(amount);
        cn["total_excluding_tax"] = json!(amount);
        cn["currency"] = inv["currency"].clone();
        cn["customer"] = json!(customer);
        cn["invoice"] = json!(invoice);
        cn["memo"] = json!(f.get("memo"));
        cn["metadata"] = metadata(&f);
        cn["created"] = json!(now());
        cn["effective_at"] = json!(now());
        cn["status"] = json!("issued");
        cn["type"] = json!(if post_payment {
            "post_payment"
        } else {
            "pre_payment"
        });
        cn["number"] = json!(format!(
            "{}-CN-{:02}",
            inv["number"].as_str().unwrap_or("TEST"),
            s.credit_notes.len() + 1
        ));
        cn["lines"]["data"] = json!([]);
        cn["customer_balance_transaction"] = Value::Null;
        cn["refunds"] = json!([]);
        let inv = s.invoices.get_mut(&invoice).expect("read above");
        if post_payment {
            inv["post_payment_credit_notes_amount"] = json!(
                inv["post_payment_credit_notes_amount"]
                    .as_i64()
                    .unwrap_or(0)
                    + amount
            );
        } else {
            inv["pre_payment_credit_notes_amount"] =
                json!(inv["pre_payment_credit_notes_amount"].as_i64().unwrap_or(0) + amount);
            for k in ["amount_due", "amount_remaining"] {
                inv[k] = json!(inv[k].as_i64().unwrap_or(0) - amount);
            }
        }
        if post_payment && num("credit_amount") > 0 {
            let c = s
                .customers
                .get_mut(&customer)
                .expect("the invoice's customer");
            c["balance"] = json!(c["balance"].as_i64().unwrap_or(0) - num("credit_amount"));
        }
        s.credit_notes.insert(id, cn.clone());
        *s.created.entry("credit_note").or_default() += 1;
        (StatusCode::OK, cn)
    })
}

/// Makes an event of `kind` about `object` from the fixture, records it, and queues delivery.
fn emit(inner: &Arc<Inner>, s: &mut Store, kind: &str, object: &Value) {
    let mut e = fixture(inner, "event");
    let id = new_id(s, "evt");
    // Strictly increasing `created`, so "out of order" is well defined even within a second.
    let created = now().max(s.last_event_created + 1);
    s.last_event_created = created;
    e["id"] = json!(id);
    e["type"] = json!(kind);
    e["created"] = json!(created);
    e["data"] = json!({ "object": object });
    e["livemode"] = json!(false);
    e["pending_webhooks"] = json!(1);
    s.events.push(e.clone());
    if s.faults.hold_events {
        s.held.push(e);
        return;
    }
    let copies = if s.faults.duplicate_events { 2 } else { 1 };
    for _ in 0..copies {
        deliver(inner.clone(), e.clone());
    }
}

/// One signed delivery of `body` to the webhook endpoint.
async fn post_signed(inner: &Inner, url: &str, body: &str) -> reqwest::Result<reqwest::Response> {
    inner
        .http
        .post(url)
        .header("content-type", "application/json")
        .header(
            "stripe-signature",
            sign(&inner.config.webhook_secret, now(), body),
        )
        .body(body.to_string())
        .send()
        .await
}

/// Signs and posts an event, retrying (like Stripe) until the endpoint answers 2xx.
fn deliver(inner: Arc<Inner>, event: Value) {
    let Some(url) = inner.config.webhook_url.clone() else {
        return;
    };
    tokio::spawn(async move {
        let body = event.to_string();
        let mut delay = Duration::from_millis(200);
        for _ in 0..8 {
            match post_signed(&inner, &url, &body).await {
                Ok(r) if r.status().is_success() => return,
                Ok(r) => tracing::warn!(status = %r.status(), "webhook refused; retrying"),
                Err(e) => tracing::warn!(error = %e, "webhook not delivered; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    });
}

/// `t=…,v1=…` as Stripe signs: HMAC-SHA256 keyed by the secret over `"{t}.{body}"`.
pub fn sign(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{t}.{body}").as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={t},v1={hex}")
}

/// `POST /v1/invoices/{id}/{action}`: finalize, pay, void, mark_uncollectible.
async fn invoice_action(
    State(inner): Shared,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fp = fingerprint(&format!("/v1/invoices/{id}/{action}"), &body);
    let shared = inner.clone();
    match action.as_str() {
        "finalize" => finalize(&inner, id, &headers, fp),
        "pay" => api(&inner, &headers, fp, |_| pay(&shared, &id)),
        "void" => api(&inner, &headers, fp, |_| {
            transition(
                &shared,
                &id,
                &["open", "uncollectible"],
                "void",
                "invoice.voided",
            )
        }),
        "mark_uncollectible" => api(&inner, &headers, fp, |_| {
            transition(
                &shared,
                &id,
                &["open"],
                "uncollectible",
                "invoice.marked_uncollectible",
            )
        }),
        _ => (
            StatusCode::NOT_FOUND,
            format!("the test server doesn't do /v1/invoices/{{id}}/{action}"),
        )
            .into_response(),
    }
}

/// Finalises a draft: number, hosted page, `open` (or `paid` when nothing is due), and a
/// payment attempt later when autopay is on.
fn finalize(inner: &Arc<Inner>, id: String, headers: &HeaderMap, fp: String) -> Response {
    let shared = inner.clone();
    let autopay = inner.config.autopay_after;
    let resp = api(inner, headers, fp, |inner| {
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        let count = s
            .invoices
            .values()
            .filter(|i| i["status"] != "draft")
            .count();
        let Some(inv) = s.invoices.get_mut(&id) else {
            return no_such("invoice", &id);
        };
        if inv["status"] != "draft" {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("invoice_not_editable"),
                &format!(
                    "This invoice is already finalized ({}).",
                    inv["status"].as_str().unwrap_or("")
                ),
            );
        }
        let t = now();
        inv["number"] = json!(format!("TEST-{:04}", count + 1));
        inv["hosted_invoice_url"] = json!(format!("{}/hosted/{id}", inner.public_base));
        inv["invoice_pdf"] = json!(format!("{}/hosted/{id}?pdf=1", inner.public_base));
        inv["effective_at"] = json!(t);
        inv["status_transitions"]["finalized_at"] = json!(t);
        let zero = inv["amount_due"].as_i64().unwrap_or(0) <= 0;
        inv["status"] = json!(if zero { "paid" } else { "open" });
        if zero {
            inv["paid"] = json!(true);
            inv["status_transitions"]["paid_at"] = json!(t);
        }
        let snapshot = inv.clone();
        emit(&shared, &mut s, "invoice.finalized", &snapshot);
        if zero {
            emit(&shared, &mut s, "invoice.paid", &snapshot);
        }
        (StatusCode::OK, snapshot)
    });
    if resp.status().is_success()
        && let Some(after) = autopay
    {
        let inner = inner.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = pay(&inner, &id);
        });
    }
    resp
}

/// One payment attempt: paid, or declined (the `decline_payments` knob).
fn pay(inner: &Arc<Inner>, id: &str) -> (StatusCode, Value) {
    let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    let tenant = s
        .invoices
        .get(id)
        .and_then(|i| s.customers.get(i["customer"].as_str().unwrap_or_default()))
        .and_then(|c| c["metadata"]["tenant"].as_str().map(str::to_string));
    let mut decline = tenant.is_some_and(|t| inner.config.decline_tenants.contains(&t));
    if !decline && s.faults.decline_payments > 0 {
        s.faults.decline_payments -= 1;
        decline = true;
    }
    let Some(inv) = s.invoices.get_mut(id) else {
        return no_such("invoice", id);
    };
    if !matches!(inv["status"].as_str(), Some("open" | "uncollectible")) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("invoice_not_open"),
            &format!(
                "Invoice is {}; only open invoices can be paid.",
                inv["status"].as_str().unwrap_or("")
            ),
        );
    }
    let attempts = inv["attempt_count"].as_i64().unwrap_or(0) + 1;
    inv["attempt_count"] = json!(attempts);
    inv["attempted"] = json!(true);
    if decline {
        inv["next_payment_attempt"] = json!(now() + 3 * 86_400);
        let snapshot = inv.clone();
        emit(inner, &mut s, "invoice.payment_failed", &snapshot);
        return error(
            StatusCode::PAYMENT_REQUIRED,
            "card_error",
            Some("card_declined"),
            "Your card was declined.",
        );
    }
    let t = now();
    let due = inv["amount_due"].as_i64().unwrap_or(0);
    inv["amount_paid"] = json!(due);
    inv["amount_remaining"] = json!(0);
    inv["status"] = json!("paid");
    inv["status_transitions"]["paid_at"] = json!(t);
    inv["next_payment_attempt"] = Value::Null;
    let snapshot = inv.clone();
    emit(inner, &mut s, "invoice.paid", &snapshot);
    (StatusCode::OK, snapshot)
}

fn transition(
    inner: &Arc<Inner>,
    id: &str,
    from: &[&str],
    to: &str,
    event: &str,
) -> (StatusCode, Value) {
    let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    let Some(inv) = s.invoices.get_mut(id) else {
        return no_such("invoice", id);
    };
    let status = inv["status"].as_str().unwrap_or("").to_string();
    if !from.contains(&status.as_str()) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            &format!("Invoice is {status}; can't become {to}."),
        );
    }
    inv["status"] = json!(to);
    if to == "void" {
        inv["status_transitions"]["voided_at"] = json!(now());
    } else {
        inv["status_transitions"]["marked_uncollectible_at"] = json!(now());
    }
    let snapshot = inv.clone();
    emit(inner, &mut s, event, &snapshot);
    (StatusCode::OK, snapshot)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What Stripe's hosted invoice page is to a customer: the invoice, and a way to pay it.
async fn hosted_page(State(inner): Shared, Path(id): Path<String>) -> Response {
    let s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    let Some(inv) = s.invoices.get(&id) else {
        return not_found("invoice", &id);
    };
    let items: String = s
        .items
        .values()
        .filter(|i| i["invoice"] == id.as_str())
        .map(|i| {
            format!(
                "<tr><td>{}</td><td>{:.2}</td></tr>",
                escape(i["description"].as_str().unwrap_or("")),
                i["amount"].as_i64().unwrap_or(0) as f64 / 100.0
            )
        })
        .collect();
    let status = inv["status"].as_str().unwrap_or("");
    let pay = if matches!(status, "open" | "uncollectible") {
        "<form method=post><button>Pay now</button></form>"
    } else {
        ""
    };
    Html(format!(
        "<!doctype html><title>Invoice {n}</title><h1>Invoice {n}</h1><p>Status: <b id=status>{status}</b></p>\
         <p>Amount due: {due:.2} {cur}</p><table>{items}</table>{pay}<p><small>Stripe test server</small></p>",
        n = escape(inv["number"].as_str().unwrap_or("(draft)")),
        due = inv["amount_due"].as_i64().unwrap_or(0) as f64 / 100.0,
        cur = escape(&inv["currency"].as_str().unwrap_or("").to_uppercase()),
    ))
    .into_response()
}

async fn hosted_pay(State(inner): Shared, Path(id): Path<String>) -> Response {
    let _ = pay(&inner, &id);
    axum::response::Redirect::to(&format!("/hosted/{id}")).into_response()
}

/// The `delay_requests` fault, in front of every API route.
async fn slow(
    State(inner): Shared,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let delay = {
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        (s.faults.delay_requests > 0).then(|| {
            s.faults.delay_requests -= 1;
            Duration::from_millis(s.faults.delay_ms)
        })
    };
    // Carried out at once, answered late: the client that gives up must not make it twice.
    let answer = next.run(req).await;
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    answer
}

fn edit_invoice(inner: &Inner, id: &str, edit: impl FnOnce(&mut Value)) -> bool {
    let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    s.invoices.get_mut(id).map(edit).is_some()
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

async fn edit_invoice_route(State(inner): Shared, Path(id): Path<String>, body: Bytes) -> Response {
    let patch = match serde_json::from_slice::<Value>(&body) {
        Ok(p @ Value::Object(_)) => p,
        Ok(_) => {
            return (StatusCode::BAD_REQUEST, "a merge patch is a JSON object").into_response();
        }
        Err(e) => return (StatusCode::BAD_REQUEST, format!("patch: {e}")).into_response(),
    };
    if edit_invoice(&inner, &id, |i| merge_patch(i, &patch)) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (StatusCode::NOT_FOUND, format!("no invoice {id}")).into_response()
    }
}

async fn faults(State(inner): Shared, body: Bytes) -> Response {
    match serde_json::from_slice::<Faults>(&body) {
        Ok(f) => {
            set_faults(&inner, f);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("faults: {e}")).into_response(),
    }
}

async fn flush(inner: &Arc<Inner>) {
    let (held, copies) = {
        let mut s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
        s.faults.hold_events = false;
        (
            std::mem::take(&mut s.held),
            if s.faults.duplicate_events { 2 } else { 1 },
        )
    };
    // Newest first: out of order on purpose. Sequential, so the order is what arrives.
    let Some(url) = inner.config.webhook_url.clone() else {
        return;
    };
    for e in held.into_iter().rev() {
        let body = e.to_string();
        for _ in 0..copies {
            if let Err(e) = post_signed(inner, &url, &body).await {
                tracing::warn!(error = %e, "held webhook not delivered");
            }
        }
    }
}

async fn flush_route(State(inner): Shared) -> Response {
    flush(&inner).await;
    StatusCode::NO_CONTENT.into_response()
}

async fn events_route(State(inner): Shared) -> Response {
    let s = inner.store.lock().unwrap_or_else(|p| p.into_inner());
    axum::Json(json!({ "data": s.events, "created": s.created })).into_response()
}
