use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::components::ErrorNotice;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminView {
    pub display_name: String,
    pub role: String,
    pub policies: crate::policies::PolicyView,
}

/// Platform staff only.
#[server]
pub async fn admin_overview() -> Result<AdminView, AppError> {
    use control_plane::auth::PlatformStaff;
    let principal = crate::server::require_principal().await?;
    let staff = principal.platform::<PlatformStaff>()?;
    let cp = crate::server::control_plane()?;
    Ok(AdminView {
        policies: crate::policies::load(&cp, &principal, control_plane::policy::Target::Global)
            .await?,
        display_name: staff.principal().display_name.clone(),
        role: format!("platform {}", staff.role().as_str()),
    })
}

#[component]
pub fn AdminPage() -> impl IntoView {
    let set_policy = ServerAction::<crate::policies::SetPolicy>::new();
    let overview = Resource::new(move || set_policy.version().get(), |_| admin_overview());
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
                        <p><a href="/audit">"Audit log (all organizations)"</a>
                           " · " <a href="/admin/billing">"Billing (all organizations)"</a>
                           " · " <a href="/admin/marketplace">"Marketplace review"</a>
                           " · " <a href="/catalog/manage">"SKUs"</a></p>
                        <crate::policies::Policies scope="global" view=v.policies set=set_policy />
                    }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}
