//! Listing logos: stored bytes served from the portal's own origin, never fetched from
//! elsewhere. Only published listings' logos are served; SVG goes out under a policy that
//! runs nothing in it even when opened directly.

use control_plane::prelude::*;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/marketplace/logos/{slug}", get(logo))
}

#[tracing::instrument(skip_all, fields(listing.slug = %slug))]
async fn logo(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(slug): Path<String>,
) -> Response {
    match app.cp.listing_logo(&slug).await {
        Ok((bytes, content_type)) => (
            [
                (header::CONTENT_TYPE, content_type),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'none'; style-src 'unsafe-inline'; sandbox".to_string(),
                ),
                (header::CACHE_CONTROL, "public, max-age=300".to_string()),
            ],
            bytes,
        )
            .into_response(),
        Err(e) => crate::error_status::domain_response(e, &headers),
    }
}
