//! The portal's axum server: configuration, the router (pages, server functions, health),
//! request ids and graceful shutdown. The binary in `main.rs` only parses flags and calls in.

pub mod agent_api;
pub mod api;
pub mod billing;
pub mod config;
pub mod downloads;
pub mod error;
pub mod error_status;
pub mod headers;
pub mod health;
pub mod marketplace;
pub mod metrics;
pub mod origin;
pub mod sso;
pub mod telemetry;
pub mod workers;

use axum::Router;
use axum::body::Body;
use axum::extract::FromRef;
use axum::routing::get;
use std::sync::Arc;

use app::server::SessionPolicy;
use control_plane::{ControlPlane, Naming};
use http::Request;
use leptos::config::{Env, LeptosOptions};
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, generate_route_list};
use sqlx::postgres::PgConnectOptions;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};
use tracing::Level;

use crate::config::{Config, SiteEnv};
use crate::error::ServerError;

/// What every handler can reach.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub leptos: LeptosOptions,
    pub cp: ControlPlane,
    pub web: WebSettings,
    pub metrics: metrics::ServerMetrics,
    pub draining: health::Draining,
}

/// Browser-facing settings, checked once at start-up.
#[derive(Clone, Debug)]
pub struct WebSettings {
    /// `scheme://host[:port]` that state-changing requests must come from.
    pub public_origin: Arc<str>,
    pub cookie_secure: bool,
    pub session_idle: std::time::Duration,
    pub session: SessionPolicy,
}

impl WebSettings {
    pub fn from_config(config: &Config) -> Result<Self, ServerError> {
        Ok(Self {
            public_origin: config.public_origin().map_err(ServerError::Config)?.into(),
            cookie_secure: config.cookie_secure,
            session_idle: config.session_idle(),
            session: SessionPolicy {
                absolute_timeout: config.session_absolute(),
                idle_timeout: config.session_idle(),
            },
        })
    }
}

/// Everything [`router`] needs, from the configuration.
pub fn app_state(config: &Config) -> Result<AppState, ServerError> {
    let cp = control_plane(config)?;
    Ok(AppState {
        leptos: leptos_options(config),
        metrics: metrics::ServerMetrics::new(
            cp.clone(),
            config.scrape_token().map_err(ServerError::Config)?,
        ),
        cp,
        web: WebSettings::from_config(config)?,
        draining: health::Draining::default(),
    })
}

pub fn leptos_options(config: &Config) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name(config.output_name.as_str())
        .site_root(config.site_root.as_str())
        .site_pkg_dir(config.site_pkg_dir.as_str())
        .site_addr(config.site_addr)
        .reload_port(config.reload_port)
        .env(match config.site_env {
            SiteEnv::Dev => Env::DEV,
            SiteEnv::Prod => Env::PROD,
        })
        .build()
}

/// A pool that connects lazily: the server starts (and `/readyz` answers 503) while the
/// database is down, and recovers by itself when it comes back. How it checks its connections
/// is the control plane's one policy (`control_plane::pool`).
pub fn pool(config: &Config) -> Result<sqlx::PgPool, ServerError> {
    let options: PgConnectOptions = config.database_url.expose().parse()?;
    Ok(control_plane::pool::sized(config.db_max_connections)
        .acquire_timeout(config.db_acquire_timeout())
        .connect_lazy_with(options))
}

pub fn control_plane(config: &Config) -> Result<ControlPlane, ServerError> {
    let naming = Naming::new(&config.partition, &config.service)
        .map_err(|e| ServerError::Config(format!("PORTAL_PARTITION/PORTAL_SERVICE: {e}")))?;
    let cp = ControlPlane::new(pool(config)?, naming)
        .with_dns_resolver(config.dns_resolver.map_or(
            control_plane::dns::Resolver::System,
            control_plane::dns::Resolver::At,
        ))
        .with_token_cap(config.max_tokens_per_org);
    let cp = match &config.secret_keys {
        Some(keys) => cp.with_secret_keys(
            control_plane::secrets::Keyring::parse(keys.expose())
                .map_err(|e| ServerError::Config(format!("PORTAL_SECRET_KEYS: {e}")))?,
        ),
        // `serve` refuses to start without keys (main.rs); other commands don't read secrets.
        None => cp,
    };
    let cp = if config.dev_loopback_idp {
        tracing::warn!(
            "PORTAL_DEV_LOOPBACK_IDP is on: identity providers may be plain http on loopback (development only)"
        );
        cp.with_egress(control_plane::egress::Egress::allowing_loopback_http())
    } else {
        cp
    };
    match config.stripe_settings() {
        Some(settings) => Ok(cp.with_stripe(&settings)?),
        None => {
            tracing::warn!(
                "STRIPE_SECRET_KEY/STRIPE_WEBHOOK_SECRET not set: invoices are not synced to Stripe and /stripe/webhook answers 500"
            );
            Ok(cp)
        }
    }
}

/// The file under the site root that `req` names, if there is one (precompressed variants for
/// the encodings the caller accepts).
///
/// Served here rather than by `leptos_axum::file_and_error_handler`, which answers a found file
/// inside `Owner::new()`: a child of whatever reactive owner the worker thread has current, often
/// a page being rendered at that moment. It then took that page's response options (their
/// headers, among them the page's script policy until the header layer set it, and a
/// redirect's `Location`) and put them on the file. One page in ~300 rendered while the browser
/// fetched its scripts lost its headers that way.
async fn static_file(
    site_root: &str,
    uri: http::Uri,
    accept_encoding: Option<http::HeaderValue>,
) -> Option<axum::response::Response> {
    use tower::ServiceExt;
    let mut file = Request::get(uri);
    if let Some(accept) = accept_encoding {
        file = file.header(http::header::ACCEPT_ENCODING, accept);
    }
    let res = tower_http::services::ServeDir::new(site_root)
        .precompressed_gzip()
        .precompressed_br()
        .oneshot(file.body(Body::empty()).ok()?)
        .await
        .ok()?;
    (res.status() == http::StatusCode::OK).then(|| res.map(Body::new))
}

/// The pages' routes, generated once per process. Generating them runs the app with resource
/// loading switched off process-wide (leptos_server's `SuppressResourceLoad`, one global flag):
/// a page rendering on another thread at that moment would wait for ever on a resource that
/// never starts (leptos#4773). Once, before the first router exists, nothing renders beside it.
fn route_list() -> &'static Vec<leptos_axum::AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<leptos_axum::AxumRouteListing>> =
        std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(app::App))
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let routes = route_list().clone();
    let cp = state.cp.clone();
    let policy = state.web.session;
    let origin = app::server::PublicOrigin(state.web.public_origin.clone());
    let context = move || {
        // The scripts carry the nonce the header layer put in the page's policy.
        if let Some(nonce) = leptos::prelude::use_context::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<headers::PageNonce>().cloned())
        {
            provide_context(leptos::nonce::Nonce::from_value(nonce.0));
        }
        provide_context(cp.clone());
        provide_context(policy);
        provide_context(origin.clone());
        provide_context(app::server::RequestPrincipal::default());
        provide_context(app::server::RequestAllocationViews::default());
    };
    // The 404 page (leptos_axum's handler looks for a file first, and finds none).
    let not_found = leptos_axum::file_and_error_handler_with_context::<AppState, _>(
        context.clone(),
        app::shell,
    );
    let leptos = state.leptos.clone();
    let web = state.web.clone();
    let metrics = state.metrics.clone();
    let sessions = SessionManagerLayer::new(app::server::PortalSessionStore::new(state.cp.clone()))
        .with_name("portal_session")
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(web.cookie_secure)
        .with_expiry(Expiry::OnInactivity(
            time::Duration::try_from(web.session_idle).unwrap_or(time::Duration::HOUR),
        ));

    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route(
            "/metrics",
            get(metrics::public).with_state(state.metrics.clone()),
        )
        .route("/auth/callback", get(sso::callback))
        .merge(agent_api::routes().with_state(state.cp.clone()))
        .nest("/api/v1", api::routes().with_state(state.cp.clone()))
        .merge(billing::routes())
        .merge(downloads::routes())
        .merge(marketplace::routes())
        .leptos_routes_with_context(&state, routes, context.clone(), move || {
            app::shell(leptos.clone())
        })
        .fallback(
            move |uri: http::Uri, state: axum::extract::State<AppState>, req: Request<Body>| {
                let not_found = not_found.clone();
                let accept = req.headers().get(http::header::ACCEPT_ENCODING).cloned();
                async move {
                    match static_file(&state.leptos.site_root, uri.clone(), accept).await {
                        Some(file) => file,
                        None => not_found(uri, state, req).await,
                    }
                }
            },
        )
        .with_state(state)
        .layer(axum::middleware::from_fn(
            error_status::status_from_app_error,
        ))
        .layer(sessions)
        .layer(axum::middleware::from_fn_with_state(
            web.public_origin.clone(),
            origin::same_origin_only,
        ))
        .layer(axum::middleware::from_fn_with_state(
            headers::Https(web.public_origin.starts_with("https://")),
            headers::security_headers,
        ))
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            metrics::record,
        ))
        .layer(
            ServiceBuilder::new()
                .layer(axum::middleware::from_fn(headers::well_formed_request_id))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(request_span)
                        .on_response(DefaultOnResponse::new().level(Level::INFO)),
                )
                .layer(PropagateRequestIdLayer::x_request_id()),
        )
}

/// The span every line logged while serving a request sits in, and the root of the request's
/// trace. A node agent's report continues its task's trace (the `traceparent` header, taken
/// on the agent API only: a browser or API client can't file spans into someone's trace).
fn request_span(req: &Request<Body>) -> tracing::Span {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let (method, route) = metrics::method_and_route(req);
    let span = tracing::info_span!(
        "request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        request.id = %id,
        http.method = %req.method(),
        http.path = %req.uri().path(),
        trace_id = tracing::field::Empty,
    );
    let parent = req
        .uri()
        .path()
        .starts_with(agent_protocol::API_PREFIX)
        .then(|| req.headers().get(agent_protocol::TRACEPARENT))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| agent_protocol::TraceParent::parse(v).ok());
    let span = control_plane::trace_context::follow(span, parent.as_ref());
    if let Some(t) = control_plane::trace_context::of(&span) {
        span.record("trace_id", t.trace_id());
    }
    span
}

/// Serves until Ctrl-C or SIGTERM, then lets in-flight requests finish (up to the grace).
pub async fn serve(config: &Config, state: AppState) -> Result<(), ServerError> {
    let addr = config.site_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })?;
    tracing::info!(http.addr = %addr, "portal listening on http://{addr}");
    let grace = config.shutdown_grace();
    let drain = config.shutdown_drain();
    let draining = state.draining.clone();
    // Expired sessions are deleted hourly; any replica may do it, the DELETE is idempotent.
    let sweeper = tokio::spawn(
        app::server::PortalSessionStore::new(state.cp.clone())
            .delete_expired_every(std::time::Duration::from_secs(3600)),
    );
    // Who each signed-in session is, kept while the database's announcements are heard.
    let principals = config.session_keep().map(|keep| {
        use control_plane::sessions::SessionsApi as _;
        let cp = state.cp.clone();
        cp.principal_cache().set_ttl(keep);
        tokio::spawn(async move { cp.watch_principal_changes().await })
    });
    let workers = tokio::spawn(workers::run_with(
        state.cp.clone(),
        config.reconcile_every(),
    ));
    let storage_worker = config
        .storage_backend()
        .map_err(ServerError::Config)?
        .map(|backend| tokio::spawn(workers::storage(state.cp.clone(), backend)));
    // Prometheus, on its own (loopback by default) listener.
    let scrapes = match config.metrics_listen().map_err(ServerError::Config)? {
        None => None,
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { addr, source })?;
            tracing::info!(metrics.addr = %addr, "metrics on http://{addr}/metrics");
            let app = metrics::listener_router(state.metrics.clone())
                .into_make_service_with_connect_info::<std::net::SocketAddr>();
            Some(tokio::spawn(async move {
                let _ = axum::serve(l, app).await;
            }))
        }
    };
    // Connection info: sign-in limits are per client address.
    let app = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    // On the signal: not ready (load balancers stop sending) but serving, for `drain`; then
    // no new connections, and in-flight requests get `grace` to finish.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let guard = tokio::spawn(async move {
        shutdown_signal().await;
        draining.start();
        tracing::info!(
            shutdown.drain_secs = drain.as_secs(),
            "readiness off; draining"
        );
        tokio::time::sleep(drain).await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(stopped(stop_rx.clone()));
    tokio::select! {
        result = server => result.map_err(ServerError::Serve)?,
        _ = async { stopped(stop_rx).await; tokio::time::sleep(grace).await } => {
            tracing::warn!(shutdown.grace_secs = grace.as_secs(), "grace period over; closing remaining connections");
        }
    }
    guard.abort();
    sweeper.abort();
    if let Some(p) = principals {
        p.abort();
    }
    workers.abort();
    if let Some(w) = storage_worker {
        w.abort();
    }
    if let Some(s) = scrapes {
        s.abort();
    }
    tracing::info!("portal stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown signal received; draining");
}
