//! The audit log: organization admins read their organization's records; platform admins
//! read everything and can narrow by organization. Filters are a GET form, so searches are
//! links and work without JavaScript.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use portal_types::projects::AuditLine;
use serde::{Deserialize, Serialize};

use crate::components::ErrorNotice;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditView {
    /// "Acme Corp" or "All organizations".
    pub scope: String,
    pub platform_wide: bool,
    pub entries: Vec<AuditLine>,
    pub limit: i64,
}

#[server]
pub async fn search_audit(
    action: String,
    actor: String,
    resource: String,
    tenant: String,
) -> Result<AuditView, AppError> {
    use control_plane::audit_log::{AuditFilter, AuditScope, SEARCH_LIMIT};
    use control_plane::auth::PlatformAdmin;
    use control_plane::tenancy::TenantAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let (scope, label) = match principal.platform::<PlatformAdmin>() {
        Ok(admin) => (AuditScope::all(&admin), "All organizations".to_string()),
        Err(_) => {
            let (who, name) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
            (AuditScope::tenant(&who), name)
        }
    };
    let filter = AuditFilter {
        action_prefix: Some(action),
        actor_email: Some(actor),
        resource_contains: Some(resource),
        tenant_slug: Some(tenant),
    };
    let entries = cp.audit_search(&scope, &filter).await?;
    Ok(AuditView {
        platform_wide: scope.is_platform_wide(),
        scope: label,
        limit: SEARCH_LIMIT,
        entries,
    })
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let param = move |k: &str| query.read().get(k).unwrap_or_default();
    let log = Resource::new(
        move || {
            (
                param("action"),
                param("actor"),
                param("resource"),
                param("tenant"),
            )
        },
        |(action, actor, resource, tenant)| search_audit(action, actor, resource, tenant),
    );
    view! {
        <Title text="Audit log" />
        <h1>"Audit log"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match log.await {
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                    Ok(v) => view! {
                        <p class="lede">{v.scope.clone()}</p>
                        <form method="get" action="/audit" class="inline-form filters" id="audit-filters">
                            <label>"Action starts with " <input type="text" name="action" value=param("action") placeholder="project." /></label>
                            <label>"Actor email " <input type="text" name="actor" value=param("actor") /></label>
                            <label>"Resource contains " <input type="text" name="resource" value=param("resource") /></label>
                            {v.platform_wide.then(|| view! {
                                <label>"Organization " <input type="text" name="tenant" value=param("tenant") placeholder="acme" /></label>
                            })}
                            <button type="submit">"Filter"</button>
                            <a href="/audit">"Clear"</a>
                        </form>
                        <p class="hint">{format!("Newest first; at most {} records.", v.limit)}</p>
                        <table class="data" id="audit-log">
                            <thead><tr>
                                <th scope="col">"When"</th><th scope="col">"Who"</th>
                                <th scope="col">"What"</th><th scope="col">"Resource"</th>
                                <th scope="col">"Change"</th><th scope="col">"Request"</th>
                            </tr></thead>
                            <tbody>
                                {v.entries.into_iter().map(|e| view! {
                                    <tr>
                                        <td>{portal_types::utc(e.at)}</td><td>{e.actor}</td>
                                        <td class="mono action">{e.action}</td>
                                        <td class="mono small resource">{e.resource}</td>
                                        <td class="mono">{e.change}</td>
                                        <td class="mono small">{e.request_id}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
