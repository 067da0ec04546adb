//! Organization admins register their identity provider: issuer (checked by OpenID
//! discovery when saved), client, the email domains that sign in through it, and how the
//! provider's group (or other claim) values map to organization roles. A domain signs in here
//! only once proved: the page shows the DNS TXT record to publish and checks it.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::components::ErrorNotice;
use crate::error::AppError;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SsoSettingsView {
    pub organization: String,
    pub registered: bool,
    pub issuer_url: String,
    pub client_id: String,
    pub domains: String,
    pub role_claim: String,
    pub default_role: String,
    /// One `value = role` per line.
    pub mappings: String,
    pub token_idle_days: u32,
    pub callback_url: String,
    /// Every claimed domain with its proof, verified or pending.
    pub claims: Vec<DomainClaimView>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainClaimView {
    pub domain: String,
    /// "Verified by DNS on 2026-11-24", or `None` while pending.
    pub verified: Option<String>,
    pub record_name: String,
    pub record_value: String,
}

#[server]
pub async fn get_sso_settings() -> Result<SsoSettingsView, AppError> {
    use control_plane::tenancy::TenantAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, organization) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
    let callback_url = crate::server::public_origin()?.callback_url();
    Ok(match cp.provider_settings(&who).await? {
        Some(s) => SsoSettingsView {
            organization,
            registered: true,
            issuer_url: s.issuer_url,
            client_id: s.client_id,
            domains: s
                .domains
                .iter()
                .map(|c| c.domain.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            claims: s
                .domains
                .into_iter()
                .map(|c| DomainClaimView {
                    verified: c.verified.map(|(at, via)| {
                        let how = match via.as_str() {
                            "dns" => "by DNS",
                            "operator" => "by a platform operator",
                            _ => "before verification existed",
                        };
                        format!("Verified {how} on {}", portal_types::day(at))
                    }),
                    domain: c.domain,
                    record_name: c.record_name,
                    record_value: c.record_value,
                })
                .collect(),
            role_claim: s.role_claim,
            default_role: s.default_role,
            mappings: s
                .mappings
                .iter()
                .map(|(v, r)| format!("{v} = {r}"))
                .collect::<Vec<_>>()
                .join("\n"),
            token_idle_days: s.token_idle_days,
            callback_url,
        },
        None => SsoSettingsView {
            organization,
            role_claim: "groups".into(),
            default_role: "member".into(),
            token_idle_days: control_plane::sso::TOKEN_IDLE_DAYS,
            callback_url,
            ..Default::default()
        },
    })
}

#[server]
pub async fn save_sso_settings(
    #[server(flatten)] settings: portal_types::SsoSettingsInput,
) -> Result<(), AppError> {
    let portal_types::SsoSettingsInput {
        issuer_url,
        client_id,
        client_secret,
        domains,
        role_claim,
        default_role,
        mappings,
        token_idle_days,
    } = settings;
    use control_plane::sso::ProviderUpdate;
    use control_plane::tenancy::{TenantAdmins, TenantRole};
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, _) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
    let mut parsed = Vec::new();
    for (n, line) in mappings
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let Some((value, role)) = line.split_once('=') else {
            return Err(AppError::BadRequest(format!(
                "Role mappings, line {}: write \"group = role\", e.g. \"acme-admins = admin\".",
                n + 1
            )));
        };
        parsed.push((value.trim().to_string(), TenantRole::parse(role.trim())?));
    }
    let update = ProviderUpdate {
        issuer_url,
        client_id,
        client_secret: Some(client_secret),
        domains: domains.split(',').map(str::to_owned).collect(),
        role_claim,
        default_role: TenantRole::parse(default_role.trim())?,
        mappings: parsed,
        token_idle_days: match token_idle_days.trim() {
            "" => control_plane::sso::TOKEN_IDLE_DAYS,
            d => d.parse().map_err(|_| AppError::Invalid {
                field: "token_idle_days".into(),
                reason: format!("{d:?} is not a whole number of days."),
            })?,
        },
    };
    Ok(cp
        .save_provider(&who, update, Some(&crate::error::request_id()))
        .await?)
}

/// Checks the DNS proof of one of the organization's pending email domains.
#[server]
pub async fn verify_sso_domain(domain: String) -> Result<(), AppError> {
    use control_plane::tenancy::TenantAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, _) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
    Ok(cp
        .verify_domain(&who, &domain, Some(&crate::error::request_id()))
        .await?)
}

#[component]
fn DomainClaims(
    claims: Vec<DomainClaimView>,
    verify: ServerAction<VerifySsoDomain>,
) -> impl IntoView {
    let outcome = move || match verify.value().get() {
        Some(Err(e)) => Some(view! { <p class="form-error" role="alert">{e.to_string()}</p> }),
        _ => None,
    };
    view! {
        <section class="card" id="sso-domains" aria-labelledby="sso-domains-title">
            <h2 id="sso-domains-title">"Email domains"</h2>
            <p class="hint">
                "People sign in here only with an address at a verified domain. To verify one, publish the TXT record shown in its DNS, then check it. Until then its people can't sign in through your provider."
            </p>
            <div class="table-scroll">
                <table class="data">
                    <thead><tr><th scope="col">"Domain"</th><th scope="col">"Status"</th><th scope="col">"Proof (a TXT record)"</th><th scope="col"><span class="visually-hidden">"Action"</span></th></tr></thead>
                    <tbody>
                        {claims.into_iter().map(|c| {
                            let domain = c.domain.clone();
                            view! {
                                <tr data-domain=c.domain.clone()>
                                    <td>{c.domain.clone()}</td>
                                    {match c.verified {
                                        Some(v) => view! {
                                            <td class="status ok">{v}</td><td></td><td></td>
                                        }.into_any(),
                                        None => view! {
                                            <td class="status warn">"Pending"</td>
                                            <td>
                                                <dl class="facts dns-record">
                                                    <dt>"Name"</dt><dd><code>{c.record_name}</code></dd>
                                                    <dt>"Value"</dt><dd><code>{c.record_value}</code></dd>
                                                </dl>
                                            </td>
                                            <td>
                                                <ActionForm action=verify>
                                                    <input type="hidden" name="domain" value=domain.clone() />
                                                    <button type="submit" aria-label=format!("Check the DNS record of {domain}")>"Check DNS"</button>
                                                </ActionForm>
                                            </td>
                                        }.into_any(),
                                    }}
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            {outcome}
        </section>
    }
}

#[component]
pub fn SsoSettingsPage() -> impl IntoView {
    let save = ServerAction::<SaveSsoSettings>::new();
    let verify = ServerAction::<VerifySsoDomain>::new();
    let settings = Resource::new(
        move || (save.version().get(), verify.version().get()),
        |_| get_sso_settings(),
    );
    let outcome = move || {
        match save.value().get() {
        Some(Err(e)) => Some(view! { <p class="form-error" role="alert">{e.to_string()}</p> }.into_any()),
        Some(Ok(())) => Some(view! { <p class="form-ok" role="status">"Saved. The issuer answered OpenID discovery."</p> }.into_any()),
        None => None,
    }
    };
    view! {
        <Title text="Single sign-on" />
        <h1>"Single sign-on"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match settings.await {
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                    Ok(s) => view! {
                        <p class="lede">{s.organization.clone()}</p>
                        <p class="hint">
                            "Register this portal at your identity provider as a confidential client with the redirect URI "
                            <code>{s.callback_url.clone()}</code> ", PKCE (S256) and the scopes openid, email, profile and your role claim."
                        </p>
                        <ActionForm action=save attr:class="stacked wide" attr:id="sso-settings">
                            <label>"Issuer URL" <input type="text" name="issuer_url" aria-describedby="sso-issuer-url-error" aria-invalid=crate::components::field_invalid(save.value(), "issuer_url") required value=s.issuer_url.clone() placeholder="https://login.example.com" />{crate::components::field_error(save.value(), "issuer_url", "sso-issuer-url-error")}</label>
                            <label>"Client ID" <input type="text" name="client_id" aria-describedby="sso-client-id-error" aria-invalid=crate::components::field_invalid(save.value(), "client_id") required value=s.client_id.clone() />{crate::components::field_error(save.value(), "client_id", "sso-client-id-error")}</label>
                            <label>
                                {if s.registered { "Client secret (leave empty to keep the current one)" } else { "Client secret" }}
                                <input type="password" name="client_secret" aria-describedby="sso-client-secret-error" aria-invalid=crate::components::field_invalid(save.value(), "client_secret") autocomplete="off" required=!s.registered />{crate::components::field_error(save.value(), "client_secret", "sso-client-secret-error")}
                            </label>
                            <label>"Email domains (comma-separated)" <input type="text" name="domains" aria-describedby="sso-domains-error" aria-invalid=crate::components::field_invalid(save.value(), "domains") required value=s.domains.clone() placeholder="example.com" />{crate::components::field_error(save.value(), "domains", "sso-domains-error")}</label>
                            <label>"Role claim" <input type="text" name="role_claim" aria-describedby="sso-role-claim-error" aria-invalid=crate::components::field_invalid(save.value(), "role_claim") required value=s.role_claim.clone() />{crate::components::field_error(save.value(), "role_claim", "sso-role-claim-error")}</label>
                            <label>
                                "Role of people whose claim values match no mapping"
                                <select name="default_role" aria-describedby="sso-default-role-error" aria-invalid=crate::components::field_invalid(save.value(), "default_role")>
                                    {["member", "finance", "admin"].into_iter().map(|r| view! {
                                        <option value=r selected=r == s.default_role>{r}</option>
                                    }).collect_view()}
                                </select>{crate::components::field_error(save.value(), "default_role", "sso-default-role-error")}
                            </label>
                            <label>
                                "Role mappings (one \"claim value = role\" per line; roles: owner, admin, finance, member)"
                                <textarea name="mappings" aria-describedby="sso-mappings-error" aria-invalid=crate::components::field_invalid(save.value(), "mappings") rows="5">{s.mappings.clone()}</textarea>{crate::components::field_error(save.value(), "mappings", "sso-mappings-error")}
                            </label>
                            <label>
                                "API tokens lapse after this many days without their maker signing in (1 to 365)"
                                <input type="number" name="token_idle_days" min="1" max="365" required value=s.token_idle_days.to_string() aria-describedby="sso-token-idle-days-error" aria-invalid=crate::components::field_invalid(save.value(), "token_idle_days") />
                                {crate::components::field_error(save.value(), "token_idle_days", "sso-token-idle-days-error")}
                            </label>
                            <button type="submit">"Save"</button>
                            {outcome}
                        </ActionForm>
                        {(!s.claims.is_empty()).then(|| view! { <DomainClaims claims=s.claims.clone() verify=verify /> })}
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}
