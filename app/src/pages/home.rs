use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// What the home page says about the platform's own health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlatformHealth {
    Ready { migrations: usize },
    DatabaseUnavailable,
    MigrationsPending { applied: usize, expected: usize },
}

#[server]
pub async fn get_platform_health() -> Result<PlatformHealth, AppError> {
    use control_plane::health::Readiness;
    let cp = crate::server::control_plane()?;
    Ok(match cp.readiness().await {
        Readiness::Ready { migrations } => PlatformHealth::Ready { migrations },
        Readiness::DatabaseUnavailable(cause) => {
            tracing::warn!(error.cause = %cause, "database unavailable");
            PlatformHealth::DatabaseUnavailable
        }
        Readiness::MigrationsPending { applied, expected } => {
            PlatformHealth::MigrationsPending { applied, expected }
        }
    })
}

#[component]
pub fn HomePage() -> impl IntoView {
    let status = Resource::new(|| (), |_| get_platform_health());
    view! {
        <leptos_meta::Title text="Home" />
        <h1>"GPU cloud"</h1>
        <p class="lede">
            "Launch GPU slices and whole bare-metal nodes, watch them provision, and see what they cost."
        </p>
        <section class="card" aria-labelledby="status-h">
            <h2 id="status-h">"Platform status"</h2>
            <Suspense fallback=|| view! { <p>"Checking…"</p> }>
                {move || Suspend::new(async move {
                    match status.await {
                        Ok(PlatformHealth::Ready { migrations }) => view! {
                            <p class="status ok" data-status="ready">
                                "Control plane ready · schema at migration " {migrations}
                            </p>
                        }.into_any(),
                        Ok(PlatformHealth::DatabaseUnavailable) => view! {
                            <p class="status bad" data-status="database-unavailable">
                                "The control plane cannot reach its database."
                            </p>
                        }.into_any(),
                        Ok(PlatformHealth::MigrationsPending { applied, expected }) => view! {
                            <p class="status warn" data-status="migrations-pending">
                                "The database schema is behind: " {applied} " of " {expected}
                                " migrations applied."
                            </p>
                        }.into_any(),
                        Err(e) => view! { <p class="status bad" role="alert">{e.to_string()}</p> }
                            .into_any(),
                    }
                })}
            </Suspense>
        </section>
        <section class="card" aria-labelledby="now-h">
            <h2 id="now-h">"What works today"</h2>
            <p>
                "This is the portal's foundation: the sections in the navigation exist so you can find your way, "
                "and each says plainly what it will hold. Sign-in, the fleet, the catalog, launches "
                "and billing arrive in that order."
            </p>
            <p>"Choose a colour theme below; it works with or without JavaScript."</p>
        </section>
    }
}
