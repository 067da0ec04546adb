//! Reading the audit log: a project's records, and searches whose reach is built only from
//! proofs (a tenant's admins, or platform admins).

use serde_json::Value;

use crate::auth::{Platform, PlatformAdmin};
use crate::tenancy::{Project, ProjectViewers, Tenant, TenantAdmins};
use cp_base::ControlPlane;
use cp_base::audit::AuditLine;
use cp_base::error::Result;
use cp_base::ids::TenantId;

/// What the control plane offers for reading the audit log.
#[allow(async_fn_in_trait)]
pub trait AuditLogApi {
    /// The newest audit records about one project, for anyone who can see it.
    async fn project_audit(&self, who: &Project<ProjectViewers>) -> Result<Vec<AuditLine>>;

    async fn audit_search(
        &self,
        scope: &AuditScope,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditLine>>;
}

impl AuditLogApi for ControlPlane {
    async fn project_audit(&self, who: &Project<ProjectViewers>) -> Result<Vec<AuditLine>> {
        // The project's canonical name ends in `:project:{id}`, which no other resource's
        // name contains.
        let name = self.naming().project(who.tenant(), who.id()).to_string();
        let filter = AuditFilter {
            resource_contains: Some(name),
            ..AuditFilter::default()
        };
        self.audit_search(&AuditScope(Reach::Tenant(who.tenant())), &filter)
            .await
    }

    async fn audit_search(
        &self,
        scope: &AuditScope,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditLine>> {
        let (tenant, tenant_slug) = match scope.0 {
            Reach::Tenant(t) => (Some(t), None),
            Reach::All => (None, present(&filter.tenant_slug)),
        };
        let rows = sqlx::query!(
            r#"SELECT a.occurred_at AS at,
                      coalesce(u.email, a.actor_kind) AS "actor!", a.action, a.resource,
                      a.before, a.after, a.request_id
               FROM audit_log a LEFT JOIN users u ON u.id = a.actor_user_id
               WHERE ($1::uuid IS NULL OR a.tenant_id = $1)
                 AND ($2::text IS NULL OR starts_with(a.action, $2))
                 AND ($3::text IS NULL OR lower(u.email) = lower($3))
                 AND ($4::text IS NULL OR strpos(a.resource, $4) > 0)
                 AND ($5::text IS NULL OR a.tenant_id = (SELECT id FROM tenants WHERE slug = $5))
               ORDER BY a.id DESC LIMIT $6"#,
            tenant as Option<TenantId>,
            present(&filter.action_prefix),
            present(&filter.actor_email),
            present(&filter.resource_contains),
            tenant_slug,
            SEARCH_LIMIT,
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| AuditLine {
                at: r.at,
                actor: r.actor,
                action: r.action,
                resource: r.resource,
                change: describe_change(r.before.as_ref(), r.after.as_ref()),
                request_id: r.request_id,
            })
            .collect())
    }
}

/// The trait is public for the area crates above (through `internal`), which the facade
/// does not re-export.
pub(crate) mod hidden {
    use super::*;

    /// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
    #[allow(async_fn_in_trait)]
    pub trait AuditLogInternal {
        /// The newest records whose resource name contains `needle`, across tenants. Only for
        /// callers that already hold a platform proof (e.g. a node's trail for fleet staff).
        async fn platform_trail(&self, needle: String) -> Result<Vec<AuditLine>>;
    }
}
pub(crate) use hidden::AuditLogInternal;

impl AuditLogInternal for ControlPlane {
    async fn platform_trail(&self, needle: String) -> Result<Vec<AuditLine>> {
        let filter = AuditFilter {
            resource_contains: Some(needle),
            ..AuditFilter::default()
        };
        self.audit_search(&AuditScope(Reach::All), &filter).await
    }
}

/// Whose audit records a search may read. Built only from proofs: the field is private.
pub struct AuditScope(Reach);

enum Reach {
    /// One tenant's records.
    Tenant(TenantId),
    /// Everything.
    All,
}

impl AuditScope {
    /// A tenant's admins read that tenant's records.
    pub fn tenant(who: &Tenant<TenantAdmins>) -> Self {
        AuditScope(Reach::Tenant(who.id()))
    }

    /// Platform admins read everything.
    pub fn all(_who: &Platform<PlatformAdmin>) -> Self {
        AuditScope(Reach::All)
    }

    pub fn is_platform_wide(&self) -> bool {
        matches!(self.0, Reach::All)
    }
}

/// Optional narrowing; empty strings count as unset.
#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    /// e.g. `project.` or `policy.set`
    pub action_prefix: Option<String>,
    pub actor_email: Option<String>,
    /// A substring of the canonical resource name (e.g. a project id).
    pub resource_contains: Option<String>,
    /// A tenant's short name; only honoured for a platform-wide scope.
    pub tenant_slug: Option<String>,
}

fn present(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// At most this many records per search, newest first.
pub const SEARCH_LIMIT: i64 = 200;

fn describe_change(before: Option<&Value>, after: Option<&Value>) -> String {
    let show = |v: Option<&Value>| v.map(|v| v.to_string()).unwrap_or_else(|| "—".into());
    format!("{} → {}", show(before), show(after))
}
