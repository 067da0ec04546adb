//! The audit log: organization admins read their organization's records; platform admins
//! read everything and can narrow by organization. Filters are a GET form, so searches are
//! links and work without JavaScript.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use portal_types::projects::{AuditLine, FieldChange};
use serde::{Deserialize, Serialize};

use crate::components::{ErrorNotice, Pager};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditView {
    /// "Acme Corp" or "All organizations".
    pub scope: String,
    pub platform_wide: bool,
    pub entries: Vec<AuditLine>,
    pub limit: i64,
    /// Where the next (older) page starts, when there may be one.
    pub next: Option<i64>,
}

/// The search form's fields, as the address carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub actor: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub tenant: String,
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    /// An id: only older records.
    #[serde(default)]
    pub before: String,
}

impl AuditQuery {
    /// The address's query for these fields (and `before`, for a page), for links.
    pub fn to_query(&self, before: Option<i64>) -> String {
        let mut q = vec![];
        for (k, v) in [
            ("action", &self.action),
            ("actor", &self.actor),
            ("resource", &self.resource),
            ("tenant", &self.tenant),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.is_empty() {
                q.push(format!("{k}={}", urlencode(v)));
            }
        }
        if let Some(b) = before {
            q.push(format!("before={b}"));
        }
        q.join("&")
    }
}

/// What a query string may carry unescaped: letters, digits and `-._~`.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whose records the caller may read: a platform admin everything, an organization admin
/// their organization's. Also the scope's name for the page.
#[cfg(feature = "ssr")]
pub async fn scope_of(
    cp: &control_plane::ControlPlane,
    principal: &control_plane::auth::Principal,
) -> Result<(control_plane::audit_log::AuditScope, String), AppError> {
    use control_plane::audit_log::AuditScope;
    use control_plane::auth::PlatformAdmin;
    use control_plane::tenancy::TenantAdmins;
    Ok(match principal.platform::<PlatformAdmin>() {
        Ok(admin) => (AuditScope::all(&admin), "All organizations".to_string()),
        Err(_) => {
            let (who, name) = crate::server::home_tenant::<TenantAdmins>(cp, principal).await?;
            (AuditScope::tenant(&who), name)
        }
    })
}

/// The search's filter from the form's fields; a cursor that isn't one is refused by name.
#[cfg(feature = "ssr")]
pub fn filter_of(q: AuditQuery) -> Result<control_plane::audit_log::AuditFilter, AppError> {
    let before = match q.before.trim() {
        "" => None,
        b => Some(b.parse::<i64>().map_err(|_| AppError::Invalid {
            field: "before".into(),
            reason: "pass back the address of the Older link".into(),
        })?),
    };
    Ok(control_plane::audit_log::AuditFilter {
        action_prefix: Some(q.action),
        actor_email: Some(q.actor),
        resource_contains: Some(q.resource),
        tenant_slug: Some(q.tenant),
        since: Some(q.since),
        until: Some(q.until),
        before,
    })
}

#[server]
pub async fn search_audit(#[server(flatten)] query: AuditQuery) -> Result<AuditView, AppError> {
    use control_plane::audit_log::SEARCH_LIMIT;
    let (cp, principal) = crate::server::signed_in().await?;
    let (scope, label) = scope_of(&cp, &principal).await?;
    let entries = cp.audit_search(&scope, &filter_of(query)?).await?;
    Ok(AuditView {
        platform_wide: scope.is_platform_wide(),
        scope: label,
        limit: SEARCH_LIMIT,
        next: (entries.len() as i64 >= SEARCH_LIMIT)
            .then(|| entries.last().map(|l| l.id))
            .flatten(),
        entries,
    })
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let asked = move || {
        query.with(|q| {
            let get = |k: &str| q.get(k).unwrap_or_default();
            AuditQuery {
                action: get("action"),
                actor: get("actor"),
                resource: get("resource"),
                tenant: get("tenant"),
                since: get("since"),
                until: get("until"),
                before: get("before"),
            }
        })
    };
    let log = Resource::new(asked, search_audit);
    view! {
        <Title text="Audit log" />
        <h1>"Audit log"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match log.await {
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                    Ok(v) => view! { <AuditBody v q=asked() /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn AuditBody(v: AuditView, q: AuditQuery) -> impl IntoView {
    let export = format!("/audit/export.csv?{}", q.to_query(None));
    let newest = (!q.before.is_empty()).then(|| format!("/audit?{}", q.to_query(None)));
    let older = v.next.map(|n| format!("/audit?{}", q.to_query(Some(n))));
    view! {
        <p class="lede">{v.scope.clone()}</p>
        <form method="get" action="/audit" class="inline-form filters" id="audit-filters">
            <label>"Action starts with " <input type="text" name="action" value=q.action.clone() placeholder="project." /></label>
            <label>"Actor email " <input type="text" name="actor" value=q.actor.clone() /></label>
            <label>"Resource contains " <input type="text" name="resource" value=q.resource.clone() /></label>
            <label>"From " <input type="date" name="since" value=q.since.clone() /></label>
            <label>"To " <input type="date" name="until" value=q.until.clone() /></label>
            {v.platform_wide.then(|| view! {
                <label>"Organization " <input type="text" name="tenant" value=q.tenant.clone() placeholder="acme" /></label>
            })}
            <button type="submit">"Filter"</button>
            <a href="/audit">"Clear"</a>
        </form>
        <p class="hint">{format!("Newest first, {} at a time. ", v.limit)}
            <a href=export download data-testid="export-audit">"Export these records (CSV)"</a></p>
        {if v.entries.is_empty() {
            view! { <p data-testid="no-records">"No records match."</p> }.into_any()
        } else {
            view! {
                <div class="table-scroll">
                <table class="data cards" id="audit-log">
                    <thead><tr>
                        <th scope="col">"When"</th><th scope="col">"Who"</th>
                        <th scope="col">"What"</th><th scope="col">"Resource"</th>
                        <th scope="col">"Change"</th><th scope="col">"Request"</th>
                    </tr></thead>
                    <tbody>
                        {v.entries.into_iter().map(|e| view! {
                            <tr data-action=e.action.clone()>
                                <td data-label="When">{portal_types::utc(e.at)}</td>
                                <td data-label="Who">{e.actor}</td>
                                <td data-label="What" class="mono action">{e.action.clone()}</td>
                                <td data-label="Resource" class="mono small resource">{e.resource}</td>
                                <td data-label="Change"><Changes changes=e.changes /></td>
                                <td data-label="Request" class="mono small">{e.request_id}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
                </div>
            }.into_any()
        }}
        <Pager label="Pages of the audit log" newest older />
    }
}

/// A change, a line per field: `name: before → after`; a field that was set from nothing
/// reads `name: value`, one removed `name: value → (removed)`.
#[component]
pub fn Changes(changes: Vec<FieldChange>) -> impl IntoView {
    view! {
        <ul class="plain changes">
            {changes.into_iter().map(|c| {
                let text = match (c.before, c.after) {
                    (None, Some(a)) => a,
                    (Some(b), Some(a)) => format!("{b} → {a}"),
                    (Some(b), None) => format!("{b} → (removed)"),
                    (None, None) => String::new(),
                };
                view! { <li><span class="field">{c.field.replace('_', " ")}</span>": " {text}</li> }
            }).collect_view()}
        </ul>
    }
}
