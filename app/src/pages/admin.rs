#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use portal_types::account::Lockout;
use portal_types::{IdArg, UserId};
use serde::{Deserialize, Serialize};

use crate::components::ErrorNotice;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminView {
    pub display_name: String,
    pub role: String,
    pub policies: crate::policies::PolicyView,
    /// Break-glass accounts with failed sign-ins (platform admins only; `None` for others).
    pub lockouts: Option<Vec<Lockout>>,
}

/// Platform staff only.
#[server]
pub async fn admin_overview() -> Result<AdminView, AppError> {
    use control_plane::auth::PlatformStaff;
    let principal = crate::server::require_principal().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    let cp = crate::server::control_plane()?;
    let lockouts = match principal.platform::<control_plane::auth::PlatformAdmin>() {
        Ok(admin) => Some(cp.break_glass_lockouts(&admin).await?),
        Err(_) => None,
    };
    Ok(AdminView {
        lockouts,
        policies: crate::policies::load(&cp, &principal, control_plane::policy::Target::Global)
            .await?,
        display_name: staff.principal().display_name.clone(),
        role: format!("platform {}", staff.role().as_str()),
    })
}

/// Clears a break-glass account's failed sign-ins and lock. Platform admins only; audited.
#[server]
pub async fn unlock_break_glass(user: IdArg<UserId>) -> Result<(), AppError> {
    let principal = crate::server::require_principal().await?;
    let admin = principal.platform::<control_plane::auth::PlatformAdmin>()?;
    let cp = crate::server::control_plane()?;
    let user = crate::server::id(user)?;
    cp.unlock_break_glass(&admin, user, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[component]
pub fn AdminPage() -> impl IntoView {
    let set_policy = crate::policies::PolicyAction::new();
    let unlock = ServerAction::<UnlockBreakGlass>::new();
    let overview = Resource::new(
        move || (set_policy.version(), unlock.version().get()),
        |_| admin_overview(),
    );
    view! {
        <Title text="Admin" />
        <h1>"Admin"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match overview.await {
                    Ok(v) => view! {
                        <p class="signed-in-as">
                            "Signed in as " <strong>{v.display_name}</strong> " (" {v.role} ")."
                        </p>
                        <p><a href="/admin/ops">"Operations"</a>
                           " · " <a href="/audit">"Audit log (all organizations)"</a>
                           " · " <a href="/admin/billing">"Billing (all organizations)"</a>
                           " · " <a href="/admin/marketplace">"Marketplace review"</a>
                           " · " <a href="/catalog/manage">"SKUs"</a></p>
                        {v.lockouts.map(|rows| view! { <Lockouts rows unlock /> })}
                        <crate::policies::Policies scope="global" view=v.policies set=set_policy />
                    }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Break-glass accounts with failed sign-ins, and the button that clears a lock.
#[component]
fn Lockouts(rows: Vec<Lockout>, unlock: ServerAction<UnlockBreakGlass>) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="lockouts-h">
            <h2 id="lockouts-h">"Break-glass sign-in"</h2>
            <p class="hint">"An account locks for 15 minutes after 5 failed sign-ins in a row. Unlock it once you know who was trying."</p>
            {if rows.is_empty() {
                view! { <p id="no-lockouts">"No failed sign-ins."</p> }.into_any()
            } else {
                view! {
                    <div>
                        <table class="data cards" id="lockouts">
                            <thead><tr><th scope="col">"Account"</th><th scope="col">"Failed in a row"</th><th scope="col">"Locked until"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th></tr></thead>
                            <tbody>
                                {rows.into_iter().map(|l| {
                                    let label = format!("Unlock {}", l.email);
                                    let email = l.email.clone();
                                    view! {
                                        <tr data-account=email>
                                            <td data-label="Account">{l.email}</td>
                                            <td data-label="Failed in a row">{l.failed_attempts}</td>
                                            <td data-label="Locked until">{l.locked_until.map_or_else(|| "not locked".into(), portal_types::utc)}</td>
                                            <td>
                                                <ActionForm action=unlock attr:class="inline">
                                                    <input type="hidden" name="user" value=l.user.to_string() />
                                                    <button type="submit" aria-label=label>"Unlock"</button>
                                                </ActionForm>
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }.into_any()
            }}
            {move || unlock.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorNotice error=e /> })}
        </section>
    }
}
