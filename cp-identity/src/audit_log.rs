//! Reading the audit log: a project's records, and searches whose reach is built only from
//! proofs (a tenant's admins, or platform admins).

use serde_json::Value;

use crate::auth::{Platform, PlatformAdmin};
use crate::tenancy::{Project, ProjectViewers, Tenant, TenantAdmins};
use cp_base::ControlPlane;
use cp_base::audit::AuditLine;
use cp_base::error::{Error, Result};
use cp_base::ids::TenantId;
use portal_types::projects::FieldChange;

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
        // Every resource of the project (the project itself, its instances) is named
        // `…:{tenant}:{project}:{type}:{id}`, whatever its region; no other resource's name
        // holds that pair.
        let filter = AuditFilter {
            resource_contains: Some(format!(":{}:{}:", who.tenant(), who.id())),
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
        let since = day("since", present(&filter.since))?;
        // Inclusive: up to the end of that day.
        let until = day("until", present(&filter.until))?.map(|d| d + time::Duration::days(1));
        let rows = sqlx::query!(
            r#"SELECT a.id, a.occurred_at AS at,
                      coalesce(u.email, a.actor_kind) AS "actor!", a.action, a.resource,
                      a.before, a.after, a.request_id
               FROM audit_log a LEFT JOIN users u ON u.id = a.actor_user_id
               WHERE ($1::uuid IS NULL OR a.tenant_id = $1)
                 AND ($2::text IS NULL OR starts_with(a.action, $2))
                 AND ($3::text IS NULL OR lower(u.email) = lower($3))
                 AND ($4::text IS NULL OR strpos(a.resource, $4) > 0)
                 AND ($5::text IS NULL OR a.tenant_id = (SELECT id FROM tenants WHERE slug = $5))
                 AND a.occurred_at >= coalesce($7::timestamptz, '-infinity')
                 AND a.occurred_at < coalesce($8::timestamptz, 'infinity')
                 AND a.id < coalesce($9::bigint, 9223372036854775807)
               ORDER BY a.id DESC LIMIT $6"#,
            tenant as Option<TenantId>,
            present(&filter.action_prefix),
            present(&filter.actor_email),
            present(&filter.resource_contains),
            tenant_slug,
            SEARCH_LIMIT,
            since,
            until,
            filter.before,
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| AuditLine {
                id: r.id,
                changes: field_changes(r.before.as_ref(), r.after.as_ref()),
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
    /// From this day on (`2026-12-01`, UTC), inclusive.
    pub since: Option<String>,
    /// Up to this day (`2026-12-31`, UTC), inclusive.
    pub until: Option<String>,
    /// Only records older than this one (an [`AuditLine::id`]): the next page.
    pub before: Option<i64>,
}

/// `2026-12-01` as the first instant of that day (UTC); `field` names it when it isn't one.
fn day(field: &'static str, s: Option<&str>) -> Result<Option<time::OffsetDateTime>> {
    let Some(s) = s else { return Ok(None) };
    time::Date::parse(s, &time::format_description::well_known::Iso8601::DATE)
        .map(|d| Some(d.midnight().assume_utc()))
        .map_err(|_| Error::Invalid {
            field,
            reason: format!(
                "{:?} is not a day; write it as 2026-12-01",
                s.chars().take(20).collect::<String>()
            ),
        })
}

fn present(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// At most this many records per search, newest first.
pub const SEARCH_LIMIT: i64 = 200;

/// The fields that differ between `before` and `after`, each written out plainly (a string
/// without its quotes, `null` as absent, anything nested as compact JSON). Two records that
/// are not objects are one field, `value`.
fn field_changes(before: Option<&Value>, after: Option<&Value>) -> Vec<FieldChange> {
    let plain = |v: &Value| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    fn object(v: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
        v.and_then(Value::as_object)
    }
    if object(before).is_none() && object(after).is_none() {
        return if before == after {
            vec![]
        } else {
            vec![FieldChange {
                field: "value".into(),
                before: before.and_then(plain),
                after: after.and_then(plain),
            }]
        };
    }
    let none = serde_json::Map::new();
    let (b, a) = (
        object(before).unwrap_or(&none),
        object(after).unwrap_or(&none),
    );
    let fields: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    fields
        .into_iter()
        .filter(|f| b.get(*f) != a.get(*f))
        .map(|f| FieldChange {
            field: f.clone(),
            before: b.get(f).and_then(plain),
            after: a.get(f).and_then(plain),
        })
        .collect()
}

/// A search's records as CSV, the columns a person filters on first.
pub fn audit_csv(lines: &[AuditLine]) -> String {
    let mut out = String::from("id,at,actor,action,resource,field,before,after,request_id\n");
    for l in lines {
        let at =
            l.at.format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
        let id = l.id.to_string();
        let fields: Vec<Option<&FieldChange>> = if l.changes.is_empty() {
            vec![None]
        } else {
            l.changes.iter().map(Some).collect()
        };
        for f in fields {
            out.push_str(&cp_base::csv::row(&[
                &id,
                &at,
                &l.actor,
                &l.action,
                &l.resource,
                f.map_or("", |f| f.field.as_str()),
                f.and_then(|f| f.before.as_deref()).unwrap_or(""),
                f.and_then(|f| f.after.as_deref()).unwrap_or(""),
                l.request_id.as_deref().unwrap_or(""),
            ]));
        }
    }
    out
}

fn describe_change(before: Option<&Value>, after: Option<&Value>) -> String {
    let show = |v: Option<&Value>| v.map(|v| v.to_string()).unwrap_or_else(|| "—".into());
    format!("{} → {}", show(before), show(after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown(c: &[FieldChange]) -> Vec<(String, Option<String>, Option<String>)> {
        c.iter()
            .map(|f| (f.field.clone(), f.before.clone(), f.after.clone()))
            .collect()
    }

    #[test]
    fn a_change_reads_field_by_field_with_only_what_changed() {
        let before = json!({"display_name": "Research", "east_west": false, "limit": 8});
        let after = json!({"display_name": "Research lab", "east_west": false, "limit": null, "tags": {"a": 1}});
        assert_eq!(
            shown(&field_changes(Some(&before), Some(&after))),
            [
                (
                    "display_name".into(),
                    Some("Research".into()),
                    Some("Research lab".into())
                ),
                ("limit".into(), Some("8".into()), None),
                ("tags".into(), None, Some(r#"{"a":1}"#.into())),
            ]
        );
        // Created: every field, from nothing.
        assert_eq!(
            shown(&field_changes(None, Some(&json!({"slug": "lab"})))),
            [("slug".into(), None, Some("lab".into()))]
        );
        // Not objects: one field.
        assert_eq!(
            shown(&field_changes(
                Some(&json!("draft")),
                Some(&json!("active"))
            )),
            [("value".into(), Some("draft".into()), Some("active".into()))]
        );
        assert!(field_changes(None, None).is_empty());
    }

    #[test]
    fn a_day_is_a_date_or_a_refusal_naming_the_field() {
        assert_eq!(
            day("since", Some("2026-12-01")).unwrap(),
            Some(time::macros::datetime!(2026-12-01 0:00 UTC))
        );
        let e = day("until", Some("yesterday")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid until: \"yesterday\" is not a day; write it as 2026-12-01"
        );
    }
}
