//! `GET /api/v1/offers`: what is for sale where, at what hourly price, and how many could
//! launch now; `GET /api/v1/storage-prices`: what storage costs per region. Public, like the
//! catalog page they share their numbers with.

use app::error::AppError;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use control_plane::ControlPlane;
use control_plane::prelude::*;
use portal_types::catalog::{Offer, offers};
use portal_types::volumes::StoragePrice;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::problem::{ApiError, Problem, bad_query};
use super::{ClientAddr, RequestId};

/// Filters; each is optional.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OfferQuery {
    /// Only this region, e.g. `eu-west-1`.
    #[param(pattern = r"^[A-Za-z0-9 ._-]{0,64}$", max_length = 64)]
    pub region: Option<String>,
    /// Only this GPU model, as the offers name it, e.g. `NVIDIA H100 80GB HBM3`.
    #[param(pattern = r"^[A-Za-z0-9 ._-]{0,64}$", max_length = 64)]
    pub gpu_model: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OfferList {
    pub offers: Vec<Offer>,
}

/// The longest filter value read; longer is refused rather than searched.
const MAX_FILTER: usize = 64;

/// Letters, digits and `-`, `_`, `.`, ` `: what region and model names are made of.
fn check_filter(field: &'static str, value: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(v) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' ');
    if v.chars().count() > MAX_FILTER || !v.chars().all(allowed) {
        return Err(ApiError::invalid(
            field,
            format!(
                "use letters, digits, '-', '_', '.' and spaces, at most {MAX_FILTER} characters"
            ),
        ));
    }
    Ok(Some(v))
}

/// Offers: each SKU in each of its regions.
#[utoipa::path(
    get,
    path = "/offers",
    tag = "catalog",
    operation_id = "list_offers",
    params(OfferQuery),
    responses(
        (status = 200, description = "Every offer matching the filters, cheapest SKUs first as in the catalog.", body = OfferList,
         example = json!({"offers": [{
             "sku": "h100.1x", "display_name": "1 × H100 80GB", "shape": "gpu_slice",
             "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "vcpus": 26, "memory_gib": 220, "disk_gib": 3500,
             "region": "eu-west-1", "price_per_hour": {"amount_minor": 299, "currency": "USD"},
             "launchable": 12
         }]})),
        (status = 400, description = "A filter is malformed.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many calls from this address; see Retry-After.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list(
    State(cp): State<ControlPlane>,
    id: RequestId,
    ClientAddr(client): ClientAddr,
    query: Result<Query<OfferQuery>, QueryRejection>,
) -> Result<Json<OfferList>, ApiError> {
    // Public, and each call asks placement about every SKU: limited per client address.
    if let Some(addr) = client
        && let Err(wait) = cp.public_api_calls().take(&addr)
    {
        return Err(ApiError(AppError::RateLimited {
            retry_after_secs: wait.as_secs().max(1),
        }));
    }
    let Query(q) = query.map_err(bad_query)?;
    let region = check_filter("region", q.region)?;
    let gpu_model = check_filter("gpu_model", q.gpu_model)?;
    let catalog = cp.catalog().await.map_err(|e| id.refused(e))?;
    Ok(Json(OfferList {
        offers: offers(&catalog, region.as_deref(), gpu_model.as_deref()),
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StoragePriceList {
    /// By region; a region not listed sells no volumes.
    pub storage_prices: Vec<StoragePrice>,
}

/// What block storage costs in each region, per GiB-month of 730 hours. Public, like the
/// catalog.
#[utoipa::path(
    get,
    path = "/storage-prices",
    tag = "catalog",
    operation_id = "list_storage_prices",
    responses(
        (status = 200, description = "Every region's storage price. Volumes are billed per second by provisioned size, at the price in force when they were made.", body = StoragePriceList,
         example = json!({"storage_prices": [{"region": "eu-west-1", "currency": "USD", "per_gib_month_micro": 100000}]})),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn storage_prices(
    State(cp): State<ControlPlane>,
    id: RequestId,
) -> Result<Json<StoragePriceList>, ApiError> {
    Ok(Json(StoragePriceList {
        storage_prices: cp.storage_prices().await.map_err(|e| id.refused(e))?,
    }))
}
