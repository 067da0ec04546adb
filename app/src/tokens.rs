//! `/account/tokens`: API tokens for scripts, CI and tools. Organization admins make them for
//! the organization or any project, project admins for their projects; everyone sees and may
//! revoke the tokens they made (admins: all of the organization's). The secret is shown once,
//! with a command that uses it.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use portal_types::tokens::{ApiToken, CreatedToken, TokenScope, TokenState};
use portal_types::{ApiTokenId, IdArg, ProjectId, utc};
use serde::{Deserialize, Serialize};

use crate::components::{
    CopyButton, DangerButton, ErrorNotice, action_outcome as outcome, field_error, field_invalid,
};
use crate::error::AppError;

/// The tokens page: the caller's tokens, and where they may make new ones.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensView {
    pub organization: String,
    /// May make organization-wide tokens (its owners and admins).
    pub org_admin: bool,
    /// The projects the caller administers, for project tokens.
    pub projects: Vec<(ProjectId, String)>,
    pub tokens: Vec<ApiToken>,
    /// Where the API answers, for the example command.
    pub api_base: String,
}

#[server]
pub async fn list_api_tokens() -> Result<TokensView, AppError> {
    use control_plane::tenancy::{
        ProjectAdmins, ProjectRequirement, TenantAdmins, TenantMembers, TenantRequirement,
    };
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, organization) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    Ok(TokensView {
        organization,
        org_admin: TenantAdmins::ROLES.contains(&who.role()),
        projects: cp
            .list_projects(&who)
            .await?
            .into_iter()
            .filter(|p| ProjectAdmins::ROLES.contains(&p.my_role))
            .map(|p| (p.id, p.slug))
            .collect(),
        tokens: cp.api_tokens(&principal, who.id()).await?,
        api_base: format!("{}/api/v1", crate::server::public_origin()?.0),
    })
}

#[server]
pub async fn create_api_token(
    #[server(flatten)] input: portal_types::TokenInput,
) -> Result<CreatedToken, AppError> {
    use control_plane::api_tokens::NewToken;
    let (cp, principal) = crate::server::signed_in().await?;
    let (member, _) =
        crate::server::home_tenant::<control_plane::tenancy::TenantMembers>(&cp, &principal)
            .await?;
    let tenant = member.id();
    let project = match input.project.trim() {
        "" => None,
        id => Some(crate::server::id(id)?),
    };
    let new = NewToken {
        name: input.name.clone(),
        project,
        scopes: input.scopes(),
        days: input.days()?,
    };
    Ok(cp
        .create_api_token(&principal, tenant, &new, Some(&crate::error::request_id()))
        .await?)
}

#[server]
pub async fn revoke_api_token(id: IdArg<ApiTokenId>) -> Result<(), AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    cp.revoke_api_token(&principal, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[component]
pub fn TokensPage() -> impl IntoView {
    let create = ServerAction::<CreateApiToken>::new();
    let revoke = ServerAction::<RevokeApiToken>::new();
    let page = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| list_api_tokens(),
    );
    view! {
        <Title text="API tokens" />
        <p class="breadcrumb"><a href="/account">"Account"</a> " / API tokens"</p>
        <h1>"API tokens"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(v) => view! { <TokensBody v create revoke /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

fn scopes_text(scopes: &[TokenScope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[component]
fn TokensBody(
    v: TokensView,
    create: ServerAction<CreateApiToken>,
    revoke: ServerAction<RevokeApiToken>,
) -> impl IntoView {
    let may_make = v.org_admin || !v.projects.is_empty();
    let api_base = v.api_base.clone();
    view! {
        <p class="lede">
            "Tokens let scripts, CI and tools use the "
            <a href="/docs/api">"API"</a>
            " as you, in " {v.organization.clone()} ", never with more than your own access, and only within their scopes. A token stops working when it is revoked, when it expires, or when you lose access: leaving the organization or the project revokes it for good. Where the organization signs in with its own identity provider, it also lapses when you have not signed in for a while."
        </p>
        // The new secret first, where the eye lands after the form posts.
        {move || create.value().get().and_then(Result::ok).map(|made| {
            let example = format!("curl -H 'Authorization: Bearer {}' {}/ssh-keys", made.secret, api_base);
            view! {
                <section class="card token-once" role="status" aria-labelledby="new-token-h">
                    <h2 id="new-token-h">{format!("Your new token, {}", made.token.name)}</h2>
                    <p>"Copy its secret now: it is shown only this once."</p>
                    <pre data-testid="token-secret">{made.secret.clone()}</pre>
                    <CopyButton text=made.secret.clone() label="Copy the token's secret" />
                    <p>"Try it:"</p>
                    <pre>{example}</pre>
                </section>
            }
        })}
        <section class="card" aria-labelledby="tokens-h">
            <h2 id="tokens-h">"Tokens"</h2>
            {if v.tokens.is_empty() {
                view! { <p id="no-tokens">"No tokens yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                        <table class="data" id="tokens">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Reaches"</th><th scope="col">"Scopes"</th>
                                <th scope="col">"Made"</th><th scope="col">"Expires"</th><th scope="col">"Last used"</th>
                                <th scope="col">"State"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th>
                            </tr></thead>
                            <tbody>
                                {v.tokens.into_iter().map(|t| {
                                    let live = t.state == TokenState::Active;
                                    let label = format!("Revoke {}", t.name);
                                    let question = format!("Revoke {}? Whatever uses it stops working at once.", t.name);
                                    let id = t.id.to_string();
                                    view! {
                                        <tr data-token=t.name.clone()>
                                            <td>{t.name.clone()}<br/><code>{t.display_prefix.clone()} "…"</code></td>
                                            <td>{t.project.clone().map_or_else(|| "the whole organization".to_string(), |p| format!("project {p}"))}</td>
                                            <td data-testid="scopes">{scopes_text(&t.scopes)}</td>
                                            <td>{utc(t.created_at)}<br/><small>"by " {t.created_by.clone()}</small></td>
                                            <td data-testid="expires">{utc(t.expires_at)}{t.lapses_at.filter(|_| live).map(|at| view! {
                                                <br/><small data-testid="lapses">"or " {utc(at)} " if " {t.created_by.clone()} " has not signed in again by then"</small>
                                            })}</td>
                                            <td data-testid="last-used">{match (t.last_used_at, t.last_used_from.clone()) {
                                                (Some(at), Some(from)) => format!("{} from {from}", utc(at)),
                                                (Some(at), None) => utc(at),
                                                (None, _) => "never".to_string(),
                                            }}</td>
                                            <td data-testid="state">{match (t.state, t.revoked_at) {
                                                (TokenState::Revoked, Some(at)) => format!("revoked {}", utc(at)),
                                                (TokenState::Revoked, None) => "revoked".to_string(),
                                                (TokenState::Expired, _) => "expired".to_string(),
                                                (TokenState::Lapsed, _) => "lapsed: its maker has not signed in".to_string(),
                                                (TokenState::Active, _) => "active".to_string(),
                                            }}</td>
                                            <td>{live.then(|| view! {
                                                <ActionForm action=revoke attr:class="inline">
                                                    <input type="hidden" name="id" value=id />
                                                    <DangerButton label=label question=question>"Revoke"</DangerButton>
                                                </ActionForm>
                                            })}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }.into_any()
            }}
            {outcome(revoke.value(), |_: ()| Some("Revoked: it stopped working at once.".to_string()))}
        </section>
        {if may_make {
            view! {
                <section class="card" aria-labelledby="make-h">
                    <h2 id="make-h">"Make a token"</h2>
                    <ActionForm action=create attr:id="make-token">
                        <div class="form-grid">
                            <label>"Name"
                                <input name="name" required maxlength="64" placeholder="ci-deploy" autocomplete="off" aria-describedby="token-name-error" aria-invalid=field_invalid(create.value(), "name") />
                                {field_error(create.value(), "name", "token-name-error")}
                            </label>
                            <label>"Reaches"
                                <select name="project">
                                    {v.org_admin.then(|| view! { <option value="">"The whole organization"</option> })}
                                    {v.projects.iter().map(|(id, slug)| view! { <option value=id.to_string()>{format!("Project {slug}")}</option> }).collect_view()}
                                </select>
                            </label>
                            <label>"Expires after"
                                <select name="days" aria-describedby="token-days-error">
                                    <option value="7">"7 days"</option>
                                    <option value="30" selected>"30 days"</option>
                                    <option value="90">"90 days"</option>
                                    <option value="365">"1 year"</option>
                                </select>
                                {field_error(create.value(), "days", "token-days-error")}
                            </label>
                        </div>
                        <fieldset class="stacked" aria-describedby="token-scopes-error">
                            <legend>"Scopes"</legend>
                            <label><input type="checkbox" name="scope_read" value="on" checked /> <span><strong>"read"</strong> ": instances, images, SSH keys, projects and members, audit logs"</span></label>
                            <label><input type="checkbox" name="scope_launch" value="on" /> <span><strong>"launch"</strong> ": launch and release"</span></label>
                            <label><input type="checkbox" name="scope_billing" value="on" /> <span><strong>"billing"</strong> ": usage and invoices"</span></label>
                            <label><input type="checkbox" name="scope_admin" value="on" /> <span><strong>"admin"</strong> ": members and tokens"</span></label>
                            <label><input type="checkbox" name="scope_keys" value="on" /> <span><strong>"keys"</strong> ": add and delete your saved SSH keys, which your later launches use in every project (whole-organization tokens only)"</span></label>
                            {field_error(create.value(), "scopes", "token-scopes-error")}
                        </fieldset>
                        <div class="form-actions"><button type="submit">"Make token"</button></div>
                    </ActionForm>
                    {outcome(create.value(), |_: CreatedToken| None)}
                </section>
            }.into_any()
        } else {
            view! { <p class="hint">"Organization admins make tokens for the organization, project admins for their projects. Ask one of them for a token, or for the role."</p> }.into_any()
        }}
    }
}
