//! Projects and their members: list, create, rename, invite, change roles, remove, and the
//! project's audit trail.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use portal_types::projects::{AuditLine, Member, ProjectDetail, ProjectSummary};
use portal_types::{IdArg, ProjectId, UserId};
use serde::{Deserialize, Serialize};

use crate::components::{DangerButton, ErrorNotice, action_outcome as outcome};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectsView {
    pub tenant_name: String,
    pub can_create: bool,
    pub projects: Vec<ProjectSummary>,
    pub policies: crate::policies::PolicyView,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectView {
    pub detail: ProjectDetail,
    /// Its instances not released yet, newest first (a page of them).
    pub running: Vec<crate::allocations::AllocationRow>,
    /// What its usage has cost this month, per currency, as rated so far ("1,234.50 USD").
    pub spend: Vec<String>,
    pub can_manage: bool,
    pub audit: Vec<AuditLine>,
    pub policies: crate::policies::PolicyView,
}

pub const PROJECT_ROLES: [&str; 3] = ["admin", "operator", "viewer"];

#[server]
pub async fn list_projects() -> Result<ProjectsView, AppError> {
    use control_plane::tenancy::{TenantAdmins, TenantMembers, TenantRequirement};
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, tenant_name) = crate::server::home_tenant::<TenantMembers>(&cp, &principal).await?;
    let tenant = who.id();
    let projects = cp.list_projects(&who).await?;
    let policies = crate::policies::load(
        &cp,
        &principal,
        control_plane::policy::Target::Tenant(tenant),
    )
    .await?;
    Ok(ProjectsView {
        policies,
        tenant_name,
        can_create: TenantAdmins::ROLES.contains(&who.role()),
        projects,
    })
}

#[server]
pub async fn create_project(slug: String, name: String) -> Result<(), AppError> {
    use control_plane::tenancy::TenantAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let (who, _) = crate::server::home_tenant::<TenantAdmins>(&cp, &principal).await?;
    let id = cp
        .create_project(&who, &slug, &name, Some(&crate::error::request_id()))
        .await?;
    leptos_axum::redirect(&format!("/projects/{id}"));
    Ok(())
}

#[server]
pub async fn get_project(id: IdArg<ProjectId>) -> Result<ProjectView, AppError> {
    use control_plane::tenancy::{ProjectRole, ProjectViewers};
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectViewers>(&principal, crate::server::id(id)?)
        .await?;
    let detail = cp.project_detail(&who).await?;
    let audit = cp.project_audit(&who).await?;
    let running = cp
        .allocation_page(
            std::slice::from_ref(&who),
            &control_plane::allocations::AllocationFilter {
                state: Some("active".into()),
                tag: None,
                after: None,
                limit: crate::pages::home::RUNNING_SHOWN,
            },
        )
        .await?
        .items
        .into_iter()
        .map(crate::allocations::AllocationRow::from)
        .collect();
    let spend = cp
        .project_month_spend(&who)
        .await?
        .iter()
        .map(|m| m.grouped())
        .collect();
    let policies = crate::policies::load(
        &cp,
        &principal,
        control_plane::policy::Target::Project(who.id()),
    )
    .await?;
    Ok(ProjectView {
        policies,
        spend,
        can_manage: who.role() == ProjectRole::Admin,
        detail,
        running,
        audit,
    })
}

#[server]
pub async fn rename_project(id: IdArg<ProjectId>, name: String) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectAdmins>(&principal, crate::server::id(id)?)
        .await?;
    Ok(cp
        .rename_project(&who, &name, Some(&crate::error::request_id()))
        .await?)
}

/// Lets the project's guests on one host reach each other (`on` = "yes") or not.
#[server]
pub async fn set_east_west(id: IdArg<ProjectId>, on: String) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectAdmins>(&principal, crate::server::id(id)?)
        .await?;
    let on = match on.as_str() {
        "yes" => true,
        "no" => false,
        other => {
            return Err(AppError::Invalid {
                field: "on".into(),
                reason: format!("{other:?}: say yes or no."),
            });
        }
    };
    Ok(cp
        .set_east_west(&who, on, Some(&crate::error::request_id()))
        .await?)
}

#[server]
pub async fn invite_member(
    id: IdArg<ProjectId>,
    email: String,
    role: String,
) -> Result<String, AppError> {
    use control_plane::tenancy::{InviteOutcome, ProjectAdmins, ProjectRole};
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectAdmins>(&principal, crate::server::id(id)?)
        .await?;
    let role = ProjectRole::parse(&role)?;
    let outcome = cp
        .invite_member(&who, &email, role, Some(&crate::error::request_id()))
        .await?;
    Ok(match outcome {
        InviteOutcome::Added => format!("{} is now a member.", email.trim()),
        InviteOutcome::Pending => format!(
            "Invitation sent: {} becomes a member at their first sign-in.",
            email.trim()
        ),
    })
}

#[server]
pub async fn change_member_role(
    id: IdArg<ProjectId>,
    user: IdArg<UserId>,
    role: String,
) -> Result<(), AppError> {
    use control_plane::tenancy::{ProjectAdmins, ProjectRole};
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectAdmins>(&principal, crate::server::id(id)?)
        .await?;
    let role = ProjectRole::parse(&role)?;
    Ok(cp
        .change_member_role(
            &who,
            crate::server::id(user)?,
            role,
            Some(&crate::error::request_id()),
        )
        .await?)
}

#[server]
pub async fn remove_member(id: IdArg<ProjectId>, user: IdArg<UserId>) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectAdmins>(&principal, crate::server::id(id)?)
        .await?;
    Ok(cp
        .remove_member(
            &who,
            crate::server::id(user)?,
            Some(&crate::error::request_id()),
        )
        .await?)
}

#[component]
pub fn ProjectsPage() -> impl IntoView {
    let create = ServerAction::<CreateProject>::new();
    let set_policy = crate::policies::PolicyAction::new();
    let projects = Resource::new(
        move || (create.version().get(), set_policy.version()),
        |_| list_projects(),
    );
    view! {
        <Title text="Projects" />
        <h1>"Projects"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match projects.await {
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                    Ok(v) => view! {
                        <p class="lede">{v.tenant_name.clone()}</p>
                        {if v.projects.is_empty() {
                            view! { <p>"You are not a member of any project yet."</p> }.into_any()
                        } else {
                            view! {
                                <table class="data cards" id="projects">
                                    <thead><tr>
                                        <th scope="col">"Project"</th>
                                        <th scope="col">"Short name"</th>
                                        <th scope="col">"Your role"</th>
                                        <th scope="col">"Members"</th>
                                        <th scope="col">"Canonical name"</th>
                                    </tr></thead>
                                    <tbody>
                                        {v.projects.iter().map(|p| view! {
                                            <tr>
                                                <td data-label="Project"><a href=format!("/projects/{}", p.id)>{p.display_name.clone()}</a></td>
                                                <td data-label="Short name">{p.slug.clone()}</td>
                                                <td data-label="Your role">{p.my_role.as_str()}</td>
                                                <td data-label="Members">{p.members}</td>
                                                <td class="mono" data-label="Canonical name">{p.canonical_name.clone()}</td>
                                            </tr>
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            }.into_any()
                        }}
                        {v.can_create.then(|| view! {
                            <p>
                                <a href="/audit" id="org-audit">"Organization audit log"</a>
                                " · "
                                <a href="/settings/sso" id="org-sso">"Single sign-on settings"</a>
                            </p>
                        })}
                        <crate::policies::Policies scope="organization" view=v.policies.clone() set=set_policy />
                        {v.can_create.then(|| view! {
                            <section class="card" aria-labelledby="new-h">
                                <h2 id="new-h">"New project"</h2>
                                <ActionForm action=create attr:class="stacked" attr:id="create-project">
                                    <label>"Name" <input type="text" name="name" aria-describedby="new-project-name-error" aria-invalid=crate::components::field_invalid(create.value(), "name") required />{crate::components::field_error(create.value(), "name", "new-project-name-error")}</label>
                                    <label>
                                        "Short name"
                                        <input type="text" name="slug" aria-describedby="new-project-slug-error" aria-invalid=crate::components::field_invalid(create.value(), "slug") required pattern="[a-z0-9][a-z0-9-]*" />{crate::components::field_error(create.value(), "slug", "new-project-slug-error")}
                                    </label>
                                    <button type="submit">"Create project"</button>
                                    {outcome(create.value(), |_| None)}
                                </ActionForm>
                            </section>
                        })}
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[server]
pub async fn cancel_invitation(id: IdArg<ProjectId>, email: String) -> Result<(), AppError> {
    use control_plane::tenancy::ProjectAdmins;
    let (cp, principal) = crate::server::signed_in().await?;
    let who = cp
        .project_access::<ProjectAdmins>(&principal, crate::server::id(id)?)
        .await?;
    Ok(cp
        .cancel_invitation(&who, &email, Some(&crate::error::request_id()))
        .await?)
}

/// What a project's page can do; the page refetches after each.
#[derive(Clone, Copy)]
struct ProjectActions {
    rename: ServerAction<RenameProject>,
    invite: ServerAction<InviteMember>,
    cancel: ServerAction<CancelInvitation>,
    change: ServerAction<ChangeMemberRole>,
    remove: ServerAction<RemoveMember>,
    set_policy: crate::policies::PolicyAction,
    east_west: ServerAction<SetEastWest>,
}

impl ProjectActions {
    fn new() -> Self {
        Self {
            rename: ServerAction::new(),
            invite: ServerAction::new(),
            cancel: ServerAction::new(),
            change: ServerAction::new(),
            remove: ServerAction::new(),
            set_policy: crate::policies::PolicyAction::new(),
            east_west: ServerAction::new(),
        }
    }

    /// Moves whenever one of them completes.
    fn versions(&self) -> [usize; 7] {
        [
            self.rename.version().get(),
            self.invite.version().get(),
            self.cancel.version().get(),
            self.change.version().get(),
            self.remove.version().get(),
            self.set_policy.version(),
            self.east_west.version().get(),
        ]
    }
}

#[component]
pub fn ProjectPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let actions = ProjectActions::new();
    let project = Resource::new(
        move || (id(), actions.versions()),
        |(id, _)| get_project(id.into()),
    );
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match project.await {
                    Err(e) => view! { <Title text="Project" /><h1>"Project"</h1><ErrorNotice error=e /> }.into_any(),
                    Ok(v) => project_view(v, actions).into_any(),
                }
            })}
        </Suspense>
    }
}

fn role_options(selected: &str) -> impl IntoView + use<> {
    let selected = selected.to_string();
    PROJECT_ROLES
        .iter()
        .map(|r| view! { <option value=*r selected=*r == selected>{*r}</option> })
        .collect_view()
}

/// The month's spend so far, as billing rates it (each finished hour).
#[component]
fn ProjectSpend(spend: Vec<String>) -> impl IntoView {
    let said = if spend.is_empty() {
        "Nothing spent this month yet.".to_string()
    } else {
        format!(
            "Spent this month: {} (rated each full hour).",
            spend.join(" and ")
        )
    };
    view! { <p data-testid="project-spend">{said}</p> }
}

fn project_view(v: ProjectView, actions: ProjectActions) -> impl IntoView {
    let ProjectActions {
        rename,
        invite,
        cancel,
        change,
        remove,
        set_policy,
        east_west,
    } = actions;
    let pid = v.detail.summary.id.to_string();
    let pid_network = pid.clone();
    let pid_list = pid.clone();
    let pid_cancel = pid.clone();
    let invitations = v.detail.invitations.clone();
    let running = v.running;
    let allowed = v.detail.east_west;
    let manage = v.can_manage;
    let (pid_rename, pid_invite) = (pid.clone(), pid.clone());
    let current_name = v.detail.summary.display_name.clone();
    let member_rows = v
        .detail
        .members
        .into_iter()
        .map(|m| member_row(m, pid.clone(), manage, change, remove))
        .collect_view();
    view! {
        <Title text=v.detail.summary.display_name.clone() />
        <p class="crumbs"><a href="/projects">"Projects"</a> " / " {v.detail.tenant_name.clone()}</p>
        <h1>{v.detail.summary.display_name.clone()}</h1>
        <p class="mono canonical">{v.detail.summary.canonical_name.clone()}</p>
        <p>"Your role: " <strong class="my-role">{v.detail.summary.my_role.as_str()}</strong></p>

        <section class="card" aria-labelledby="project-running-h">
            <h2 id="project-running-h">"Running instances"</h2>
            {if running.is_empty() {
                view! { <p data-testid="project-none-running">"Nothing is running in this project."</p> }.into_any()
            } else {
                view! { <crate::pages::home::InstanceTable rows=running id="project-running" /> }.into_any()
            }}
            <ProjectSpend spend=v.spend />
            <p><a href=format!("/allocations?project={pid_list}&state=all")>"Every instance of this project →"</a></p>
        </section>

        {manage.then(move || view! {
            <section class="card" aria-labelledby="rename-h">
                <h2 id="rename-h">"Rename"</h2>
                <ActionForm action=rename attr:class="inline-form" attr:id="rename-project">
                    <input type="hidden" name="id" value=pid_rename />
                    <label>"Name " <input type="text" name="name" aria-describedby="rename-name-error" aria-invalid=crate::components::field_invalid(rename.value(), "name") required value=current_name />{crate::components::field_error(rename.value(), "name", "rename-name-error")}</label>
                    <button type="submit">"Rename"</button>
                    {outcome(rename.value(), |_| None)}
                </ActionForm>
            </section>
        })}

        <section class="card" aria-labelledby="members-h">
            <h2 id="members-h">"Members"</h2>
            <table class="data" id="members">
                <thead><tr>
                    <th scope="col">"Name"</th><th scope="col">"Email"</th><th scope="col">"Role"</th>
                    {manage.then(|| view! { <th scope="col">"Actions"</th> })}
                </tr></thead>
                <tbody>
                    {member_rows}
                </tbody>
            </table>
            {outcome(change.value(), |_| None)}
            {outcome(remove.value(), |_| None)}
        </section>

        {manage.then(move || view! {
            <section class="card" aria-labelledby="invite-h">
                <h2 id="invite-h">"Invite"</h2>
                <ActionForm action=invite attr:class="inline-form" attr:id="invite-member">
                    <input type="hidden" name="id" value=pid_invite />
                    <label>"Email " <input type="email" name="email" aria-describedby="invite-email-error" aria-invalid=crate::components::field_invalid(invite.value(), "email") required />{crate::components::field_error(invite.value(), "email", "invite-email-error")}</label>
                    <label>"Role " <select name="role" aria-describedby="invite-role-error" aria-invalid=crate::components::field_invalid(invite.value(), "role")>{role_options("viewer")}</select>{crate::components::field_error(invite.value(), "role", "invite-role-error")}</label>
                    <button type="submit">"Invite"</button>
                </ActionForm>
                {outcome(invite.value(), Some)}
            </section>
        })}

        {(!invitations.is_empty()).then(|| view! {
            <section class="card" aria-labelledby="inv-h">
                <h2 id="inv-h">"Waiting for first sign-in"</h2>
                <ul id="invitations">
                    {invitations.iter().map(|i| {
                        let label = format!("Cancel the invitation of {}", i.email);
                        let (pid, email) = (pid_cancel.clone(), i.email.clone());
                        view! {
                            <li data-email=i.email.clone()>{i.email.clone()} " as " {i.role.as_str()} " (invited by " {i.invited_by.clone()} ")"
                                {manage.then(move || view! {
                                    <ActionForm action=cancel attr:class="inline">
                                        <input type="hidden" name="id" value=pid />
                                        <input type="hidden" name="email" value=email />
                                        <button type="submit" class="secondary" aria-label=label>"Cancel invitation"</button>
                                    </ActionForm>
                                })}
                            </li>
                        }
                    }).collect_view()}
                </ul>
                {outcome(cancel.value(), |_| Some("Invitation cancelled.".to_string()))}
            </section>
        })}

        <section class="card" aria-labelledby="network-h">
            <h2 id="network-h">"Network"</h2>
            <p data-testid="east-west">{if allowed {
                "East-west traffic is allowed: this project's VMs reach each other, on one host and across hosts on the project's private network (their second NIC, 10.128.0.0/16)."
            } else {
                "East-west traffic is denied: this project's VMs reach only the internet, not each other."
            }}</p>
            <p class="hint">"VMs of other projects and organizations never reach yours. A change applies at once, to running instances too; a VM launched while traffic was denied gets its private network address only if it is launched again."</p>
            {manage.then(move || view! {
                <ActionForm action=east_west attr:class="inline-form" attr:id="east-west-form">
                    <input type="hidden" name="id" value=pid_network />
                    <input type="hidden" name="on" value=if allowed { "no" } else { "yes" } />
                    {if allowed {
                        view! { <DangerButton question="Deny east-west traffic? This project's VMs stop reaching each other at once, on one host and across hosts, running ones included.">"Deny east-west traffic"</DangerButton> }.into_any()
                    } else {
                        view! { <button type="submit">"Allow east-west traffic"</button> }.into_any()
                    }}
                </ActionForm>
                {outcome(east_west.value(), |_| None)}
            })}
        </section>

        <crate::policies::Policies scope="project" project=pid.clone() view=v.policies set=set_policy />

        <section class="card" aria-labelledby="audit-h">
            <h2 id="audit-h">"Audit trail"</h2>
            <table class="data" id="audit">
                <thead><tr>
                    <th scope="col">"When"</th><th scope="col">"Who"</th>
                    <th scope="col">"What"</th><th scope="col">"Change"</th><th scope="col">"Request"</th>
                </tr></thead>
                <tbody>
                    {v.audit.iter().map(|a| view! {
                        <tr>
                            <td>{portal_types::utc(a.at)}</td><td>{a.actor.clone()}</td>
                            <td class="mono action">{a.action.clone()}</td><td><crate::audit::Changes changes=a.changes.clone() /></td>
                            <td class="mono small">{a.request_id.clone().unwrap_or_default()}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

fn member_row(
    m: Member,
    pid: String,
    manage: bool,
    change: ServerAction<ChangeMemberRole>,
    remove: ServerAction<RemoveMember>,
) -> impl IntoView {
    let select_id = format!("role-{}", m.user_id);
    let label = format!("Role of {}", m.email);
    let (user_change, user_remove) = (m.user_id.to_string(), m.user_id.to_string());
    let role = m.role.as_str();
    let pid_remove = pid.clone();
    let email_attr = m.email.clone();
    view! {
        <tr data-email=email_attr>
            <td>{m.display_name}</td>
            <td>{m.email}</td>
            <td class="role-cell">{m.role.as_str()}</td>
            {manage.then(move || view! {
                <td class="actions">
                    <ActionForm action=change attr:class="inline-form">
                        <input type="hidden" name="id" value=pid />
                        <input type="hidden" name="user" value=user_change />
                        <label class="visually-hidden" for=select_id.clone()>{label}</label>
                        <select name="role" id=select_id>{role_options(role)}</select>
                        <button type="submit" class="secondary">"Change role"</button>
                    </ActionForm>
                    <ActionForm action=remove attr:class="inline-form">
                        <input type="hidden" name="id" value=pid_remove />
                        <input type="hidden" name="user" value=user_remove />
                        <button type="submit" class="danger">"Remove"</button>
                    </ActionForm>
                </td>
            })}
        </tr>
    }
}
