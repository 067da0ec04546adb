//! Read-only views of the token's organization: its projects, their members and audit trails
//! (`read`), and, for tokens that reach the whole organization, its audit log (`read`, for
//! admins) and this month's spend and the invoices (`billing`). The same
//! control-plane calls and access rules as the projects and billing pages.

use app::error::AppError;
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use control_plane::ControlPlane;
use control_plane::api_tokens::TokenScope;
use control_plane::billing::reports::TenantFinance;
use control_plane::prelude::*;
use control_plane::tenancy::ProjectViewers;
use portal_types::ProjectId;
use portal_types::billing::{InvoiceSummary, Overview};
use portal_types::projects::{AuditLine, Member, ProjectSummary};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_query};

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
             "display_name": "Research", "my_role": "admin", "members": 2,
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

#[derive(Debug, Serialize, ToSchema)]
pub struct MemberList {
    pub members: Vec<Member>,
}

/// A project's members and their roles.
///
/// The same list as the project page, for anyone who may view the project.
#[utoipa::path(
    get,
    path = "/projects/{id}/members",
    tag = "organization",
    operation_id = "list_members",
    security(("token" = [])),
    params(("id" = String, Path, description = "The project's id.", format = Uuid)),
    responses(
        (status = 200, description = "The members, by email.", body = MemberList,
         example = json!({"members": [{"user_id": "0a0e0000-0000-4000-8000-0000000000a1",
             "email": "alice@acme.example", "display_name": "Alice Admin", "role": "admin"}]})),
        TokenRefusals,
        (status = 404, description = "No such project, or not one this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn members(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    project: Result<Path<ProjectId>, PathRejection>,
) -> Result<Json<MemberList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(project) = project.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller
        .project::<ProjectViewers>(&cp, Some(project), &id)
        .await?;
    let detail = cp.project_detail(&who).await.map_err(|e| id.refused(e))?;
    Ok(Json(MemberList {
        members: detail.members,
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditList {
    /// Newest first, at most 200.
    pub entries: Vec<AuditLine>,
}

fn audit_example() -> serde_json::Value {
    json!({"entries": [{"at": "2026-11-25T10:00:00Z", "actor": "alice@acme.example",
        "action": "allocation.launch",
        "resource": "gpuaas:compute:eu-west-1:acme:research:allocation:0b9e8f57-7c3e-4a55-8f1e-2d8c1c9a6e21",
        "change": "— → {\"name\":\"train-7\",\"sku\":\"h100.1x\"}", "request_id": "5f0c2a4e-1b7d-4c39-9e4a-2d1f3b6c8a90"}]})
}

/// A project's audit trail.
///
/// What was done to the project (its name, members, invitations and policies) and to its
/// instances (launches, releases, published ports), by whom (a change made with a token names
/// the token's maker), newest first: the same records as the project page, for anyone who may
/// view the project. One instance's records alone: the organization's log
/// (`/audit?resource=<instance id>`).
#[utoipa::path(
    get,
    path = "/projects/{id}/audit",
    tag = "organization",
    operation_id = "list_project_audit",
    security(("token" = [])),
    params(("id" = String, Path, description = "The project's id.", format = Uuid)),
    responses(
        (status = 200, description = "The newest records.", body = AuditList, example = audit_example),
        TokenRefusals,
        (status = 404, description = "No such project, or not one this token reaches.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn project_audit(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    project: Result<Path<ProjectId>, PathRejection>,
) -> Result<Json<AuditList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let Path(project) = project.map_err(|_| ApiError(AppError::NotFound))?;
    let who = caller
        .project::<ProjectViewers>(&cp, Some(project), &id)
        .await?;
    let entries = cp.project_audit(&who).await.map_err(|e| id.refused(e))?;
    Ok(Json(AuditList { entries }))
}

/// Filters for the organization's audit log; each is optional and matched as the audit page
/// matches it.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Actions starting with this, e.g. `allocation.` or `policy.set`.
    #[param(pattern = r"^[a-z0-9._-]{0,64}$", max_length = 64)]
    pub action: Option<String>,
    /// The actor's email.
    #[param(pattern = r"^[^\u0000-\u001f\u007f-\u009f]{0,254}$", max_length = 254)]
    pub actor: Option<String>,
    /// A part of the resource's canonical name (a project's or an allocation's id, say).
    #[param(pattern = r"^[^\u0000-\u001f\u007f-\u009f]{0,200}$", max_length = 200)]
    pub resource: Option<String>,
}

/// Refuses a filter longer than `max` characters or with control characters.
fn audit_filter(field: &str, value: Option<String>, max: usize) -> Result<String, ApiError> {
    let v = value.unwrap_or_default();
    if v.chars().count() > max || v.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("at most {max} characters, none of them control characters"),
        ));
    }
    Ok(v)
}

/// The organization's audit log.
///
/// Every change in the organization, newest first (at most 200 per search; narrow it with the
/// filters). As on the audit page, only for the organization's admins, through a token for
/// the whole organization.
#[utoipa::path(
    get,
    path = "/audit",
    tag = "organization",
    operation_id = "search_audit",
    security(("token" = [])),
    params(AuditQuery),
    responses(
        (status = 200, description = "The newest matching records.", body = AuditList, example = audit_example),
        (status = 400, description = "A filter is malformed.", body = Problem, content_type = "application/problem+json"),
        TokenRefusals,
    )
)]
#[tracing::instrument(skip_all, fields(api_token.id = %caller.0.token))]
pub async fn audit(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<AuditList>, ApiError> {
    use control_plane::audit_log::{AuditFilter, AuditScope};
    caller.require(TokenScope::Read, &id)?;
    let Query(q) = query.map_err(bad_query)?;
    let action = audit_filter("action", q.action, 64)?;
    if !action
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
    {
        return Err(ApiError::invalid(
            "action",
            "lowercase letters, digits, '.', '_' and '-', e.g. allocation.",
        ));
    }
    let filter = AuditFilter {
        action_prefix: Some(action),
        actor_email: Some(audit_filter("actor", q.actor, 254)?),
        resource_contains: Some(audit_filter("resource", q.resource, 200)?),
        ..AuditFilter::default()
    };
    if caller.0.project.is_some() {
        return Err(ApiError(AppError::Forbidden(
            "Only tokens for the whole organization read its audit log; this one is for a project (its project's trail is /projects/{id}/audit)."
                .into(),
        )));
    }
    let who = cp
        .tenant_access::<control_plane::tenancy::TenantAdmins>(&caller.0.principal, caller.0.tenant)
        .await
        .map_err(|e| id.refused(e))?;
    let entries = cp
        .audit_search(&AuditScope::tenant(&who), &filter)
        .await
        .map_err(|e| id.refused(e))?;
    Ok(Json(AuditList { entries }))
}
