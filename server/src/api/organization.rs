//! Read-only views of the token's organization: its projects (`read`), and, for tokens that
//! reach the whole organization, this month's spend and the invoices (`billing`). The same
//! control-plane calls and access rules as the projects and billing pages.

use app::error::AppError;
use axum::Json;
use axum::extract::State;
use control_plane::ControlPlane;
use control_plane::api_tokens::TokenScope;
use control_plane::billing::reports::TenantFinance;
use control_plane::prelude::*;
use portal_types::billing::{InvoiceSummary, Overview};
use portal_types::projects::ProjectSummary;
use serde::Serialize;
use utoipa::ToSchema;

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::ApiError;

#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectList {
    pub projects: Vec<ProjectSummary>,
}

/// The projects the token reaches and its maker may see, with the maker's role in each.
#[utoipa::path(
    get,
    path = "/projects",
    tag = "organization",
    operation_id = "list_projects",
    security(("token" = [])),
    responses(
        (status = 200, description = "The projects, by name.", body = ProjectList,
         example = json!({"projects": [{"id": "0a0e0000-0000-4000-8001-000000000001", "slug": "research",
             "display_name": "Research", "my_role": "Admin", "members": 2,
             "canonical_name": "gpuaas:compute::acme:research:project:0a0e0000-0000-4000-8001-000000000001"}]})),
        TokenRefusals,
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn projects(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
) -> Result<Json<ProjectList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let reach: Vec<_> = caller
        .projects(&cp, &id)
        .await?
        .iter()
        .map(|p| p.id())
        .collect();
    let member = cp
        .tenant_access::<control_plane::tenancy::TenantMembers>(
            &caller.0.principal,
            caller.0.tenant,
        )
        .await
        .map_err(|e| id.refused(e))?;
    let projects = cp
        .list_projects(&member)
        .await
        .map_err(|e| id.refused(e))?
        .into_iter()
        .filter(|p| reach.contains(&p.id))
        .collect();
    Ok(Json(ProjectList { projects }))
}

/// The maker's proof that they see the organization's billing, through a token that reaches
/// the whole organization and carries `billing`.
async fn finance(
    cp: &ControlPlane,
    caller: &Caller,
    id: &RequestId,
) -> Result<control_plane::tenancy::Tenant<TenantFinance>, ApiError> {
    caller.require(TokenScope::Billing, id)?;
    if caller.0.project.is_some() {
        return Err(ApiError(AppError::Forbidden(
            "Only tokens for the whole organization read its billing; this one is for a project."
                .into(),
        )));
    }
    cp.tenant_access::<TenantFinance>(&caller.0.principal, caller.0.tenant)
        .await
        .map_err(|e| id.refused(e))
}

/// The organization's month so far.
///
/// Spend to date, the forecast, what runs per hour, credit, budgets, and spend per day,
/// project and SKU.
#[utoipa::path(
    get,
    path = "/usage",
    tag = "organization",
    operation_id = "get_usage",
    security(("token" = [])),
    responses(
        (status = 200, description = "This month.", body = Overview,
         example = json!({"month": "2026-11", "currency": "USD",
             "month_to_date": {"amount_minor": 412350, "currency": "USD"},
             "forecast": {"amount_minor": 690000, "currency": "USD"},
             "running_per_hour": {"amount_minor": 598, "currency": "USD"},
             "credit_balance": {"amount_minor": 0, "currency": "USD"},
             "budgets": [{"scope": "organization", "limit": {"amount_minor": 1000000, "currency": "USD"},
                 "spent": {"amount_minor": 412350, "currency": "USD"}, "percent": 41, "alert": "ok"}],
             "daily": [{"day": "2026-11-03", "project": "research", "sku": "h100.1x", "amount_minor": 7176}]})),
        TokenRefusals,
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn usage(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
) -> Result<Json<Overview>, ApiError> {
    let who = finance(&cp, &caller, &id).await?;
    Ok(Json(
        cp.billing_overview(&who).await.map_err(|e| id.refused(e))?,
    ))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceList {
    pub invoices: Vec<InvoiceSummary>,
}

/// The organization's invoices, newest month first.
#[utoipa::path(
    get,
    path = "/invoices",
    tag = "organization",
    operation_id = "list_invoices",
    security(("token" = [])),
    responses(
        (status = 200, description = "The invoices.", body = InvoiceList,
         example = json!({"invoices": [{"id": "6d0c9d8e-5d1a-4a51-9c55-2f7b1d1c0e42", "tenant": "acme",
             "number": "GPU-202610-0001", "month": "2026-10", "status": "paid", "stripe_status": "paid",
             "total": {"amount_minor": 327306, "currency": "USD"}, "hosted_invoice_url": null,
             "payment_failed": false, "payment_error": null}]})),
        TokenRefusals,
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn invoices(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
) -> Result<Json<InvoiceList>, ApiError> {
    let who = finance(&cp, &caller, &id).await?;
    let invoices = cp.tenant_invoices(&who).await.map_err(|e| id.refused(e))?;
    Ok(Json(InvoiceList { invoices }))
}
