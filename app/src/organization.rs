//! `/organization`: where an organization's admins run it. How its members sign in (SSO and
//! its domains), its projects and their members, its policies, the audit trail and API
//! tokens, each with what stands out now and a link to the page that changes it.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::components::ErrorNotice;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrganizationView {
    pub name: String,
    /// The identity provider's issuer, once one is registered.
    pub issuer: Option<String>,
    pub verified_domains: Vec<String>,
    /// Claimed, not proven yet: their members cannot sign in until they are.
    pub pending_domains: Vec<String>,
    pub projects: usize,
}

/// Organization admins only (others get 403, as on the pages it links to).
#[server]
pub async fn get_organization() -> Result<OrganizationView, AppError> {
    use control_plane::tenancy::{TenantAdmins, TenantMembers};
    let (cp, principal) = crate::server::signed_in().await?;
    let (admins, name) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
    let (members, _) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    let settings = cp.provider_settings(&admins).await?;
    let (verified, pending): (Vec<_>, Vec<_>) = settings
        .as_ref()
        .map(|s| s.domains.iter().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .partition(|c| c.verified.is_some());
    Ok(OrganizationView {
        name,
        issuer: settings.as_ref().map(|s| s.issuer_url.clone()),
        verified_domains: verified.into_iter().map(|c| c.domain.clone()).collect(),
        pending_domains: pending.into_iter().map(|c| c.domain.clone()).collect(),
        projects: cp.list_projects(&members).await?.len(),
    })
}

#[component]
pub fn OrganizationPage() -> impl IntoView {
    let org = Resource::new(|| (), |_| get_organization());
    view! {
        <Title text="Organization" />
        <Suspense fallback=|| view! { <h1>"Organization"</h1><p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match org.await {
                    Ok(o) => view! { <OrganizationBody o /> }.into_any(),
                    Err(e) => view! { <h1>"Organization"</h1><ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn OrganizationBody(o: OrganizationView) -> impl IntoView {
    let sign_in = match (&o.issuer, o.pending_domains.is_empty()) {
        (None, _) => view! {
            <p class="status warn" data-testid="sso-state">"No identity provider yet: members cannot sign in with single sign-on."</p>
        }.into_any(),
        (Some(issuer), true) => view! {
            <p class="status ok" data-testid="sso-state">"Members sign in through " <code>{issuer.clone()}</code>
                {format!(" with {}.", o.verified_domains.join(", "))}</p>
        }.into_any(),
        (Some(_), false) => view! {
            <p class="status warn" data-testid="sso-state">
                {format!("Waiting for proof of {}: members with those addresses cannot sign in yet.", o.pending_domains.join(", "))}
            </p>
        }.into_any(),
    };
    let projects = match o.projects {
        1 => "1 project".to_owned(),
        n => format!("{n} projects"),
    };
    view! {
        <h1>{o.name}</h1>
        <p class="lede">"How your people sign in, what they may do, and what they did."</p>
        <div class="grid-2">
            <section class="card" aria-labelledby="org-sso-h">
                <h2 id="org-sso-h">"Single sign-on"</h2>
                {sign_in}
                <p><a href="/settings/sso">"Identity provider, domains and role mapping"</a></p>
            </section>
            <section class="card" aria-labelledby="org-projects-h">
                <h2 id="org-projects-h">"Projects and members"</h2>
                <p>{projects} ", each with its own members and roles."</p>
                <p><a href="/projects">"Projects, members and invitations"</a></p>
            </section>
            <section class="card" aria-labelledby="org-policy-h">
                <h2 id="org-policy-h">"Limits and budgets"</h2>
                <p>"GPU limits and allowed SKUs for the whole organization, and monthly budgets."</p>
                <p><a href="/projects#pol-organization">"Organization policies"</a> " · " <a href="/billing">"Budgets and spend"</a></p>
            </section>
            <section class="card" aria-labelledby="org-audit-h">
                <h2 id="org-audit-h">"Audit log"</h2>
                <p>"Who changed what, when, and from where."</p>
                <p><a href="/audit">"Search the audit log"</a></p>
            </section>
            <section class="card" aria-labelledby="org-tokens-h">
                <h2 id="org-tokens-h">"API tokens"</h2>
                <p>"Tokens for scripts, CI and the command-line tool, for the organization or one project."</p>
                <p><a href="/account/tokens">"API tokens"</a></p>
            </section>
        </div>
    }
}
