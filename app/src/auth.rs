//! Signing in and out, and who is signed in.

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// Bumped whenever someone signs in or out in this tab, so that views of "who am I" refetch.
#[derive(Clone, Copy)]
pub struct AuthEpoch(pub RwSignal<u64>);

/// What the header shows about the signed-in user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    pub display_name: String,
    pub email: String,
    /// e.g. "platform admin"; None for tenant users.
    pub platform_role: Option<String>,
}

#[server]
pub async fn current_user() -> Result<Option<UserView>, AppError> {
    Ok(crate::server::current_principal().await?.map(|p| UserView {
        display_name: p.display_name,
        email: p.email,
        platform_role: p.platform_role.map(|r| format!("platform {}", r.as_str())),
    }))
}

/// The platform admins' break-glass sign-in. Works as a plain form post.
#[server]
pub async fn break_glass_sign_in(email: String, password: String) -> Result<(), AppError> {
    let cp = crate::server::control_plane()?;
    let principal = cp.verify_break_glass(&email, &password).await?;
    crate::server::sign_in(&crate::server::session().await?, &principal, "break_glass").await?;
    leptos_axum::redirect("/admin");
    Ok(())
}

#[server]
pub async fn sign_out() -> Result<(), AppError> {
    let session = crate::server::session().await?;
    session.flush().await.map_err(AppError::internal)?;
    leptos_axum::redirect("/");
    Ok(())
}

/// Runs `f` once each time `action` succeeds.
fn on_success<I, O>(action: ServerAction<I>, f: impl Fn() + 'static)
where
    I: leptos::server_fn::ServerFn<Output = O> + Clone + Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
    I::Error: Clone + Send + Sync + 'static,
{
    Effect::new(move |_| {
        if let Some(Ok(_)) = action.value().get() {
            f();
        }
    });
}

#[component]
pub fn UserMenu() -> impl IntoView {
    let AuthEpoch(epoch) = expect_context::<AuthEpoch>();
    let user = Resource::new(move || epoch.get(), |_| current_user());
    let sign_out = ServerAction::<SignOut>::new();
    on_success(sign_out, move || epoch.update(|e| *e += 1));
    view! {
        <div class="user-menu">
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    match user.await {
                        Ok(Some(u)) => view! {
                            <span class="who" title=u.email.clone()>
                                {u.display_name.clone()}
                                {u.platform_role.map(|r| view! { <span class="role">{r}</span> })}
                            </span>
                            <ActionForm action=sign_out attr:class="inline">
                                <button type="submit" class="secondary">"Sign out"</button>
                            </ActionForm>
                        }.into_any(),
                        _ => view! { <a href="/login" class="sign-in">"Sign in"</a> }.into_any(),
                    }
                })}
            </Suspense>
        </div>
    }
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let AuthEpoch(epoch) = expect_context::<AuthEpoch>();
    let action = ServerAction::<BreakGlassSignIn>::new();
    on_success(action, move || epoch.update(|e| *e += 1));
    let error = move || match action.value().get() {
        Some(Err(e)) => Some(view! { <p class="form-error" role="alert">{e.to_string()}</p> }),
        _ => None,
    };
    view! {
        <Title text="Sign in" />
        <h1>"Sign in"</h1>
        <section class="card" aria-labelledby="sso-h">
            <h2 id="sso-h">"With your organization"</h2>
            <p>
                "Single sign-on through your organization's identity provider is not built yet. "
                "Until it is, only platform admins can sign in, below."
            </p>
        </section>
        <section class="card" aria-labelledby="bg-h">
            <h2 id="bg-h">"Platform admins: break-glass sign-in"</h2>
            <p class="hint">"For platform administrators only, when single sign-on is unavailable."</p>
            <ActionForm action=action attr:class="stacked">
                <label>
                    "Email"
                    <input type="email" name="email" autocomplete="username" required />
                </label>
                <label>
                    "Password"
                    <input type="password" name="password" autocomplete="current-password" required />
                </label>
                <button type="submit">"Sign in"</button>
                {error}
            </ActionForm>
        </section>
    }
}
