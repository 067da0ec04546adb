//! Signing in and out, and who is signed in.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::pages::nav::{Roles, sections_for};
use leptos_router::components::A;

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
    /// What the menu offers them.
    pub roles: Roles,
}

#[server]
pub async fn current_user() -> Result<Option<UserView>, AppError> {
    Ok(crate::server::current_principal().await?.map(|p| UserView {
        display_name: p.display_name,
        email: p.email,
        platform_role: p.platform_role.map(|r| format!("platform {}", r.as_str())),
        roles: Roles {
            platform: p.platform_role.map(|r| r.as_str().to_owned()),
            tenant: p.home.map(|h| h.role),
        },
    }))
}

/// Who is signed in, fetched once for the header (menu and user menu) and again whenever
/// [`AuthEpoch`] moves.
#[derive(Clone, Copy)]
pub struct SignedInUser(pub Resource<Result<Option<UserView>, AppError>>);

impl SignedInUser {
    /// Provides it to the views below; called once, by the app.
    pub fn provide() {
        let AuthEpoch(epoch) = expect_context::<AuthEpoch>();
        provide_context(SignedInUser(Resource::new(
            move || epoch.get(),
            |_| current_user(),
        )));
    }
}

/// `children`, only to someone not signed in (a "sign in to …" hint).
#[component]
pub fn WhenSignedOut(children: ChildrenFn) -> impl IntoView {
    let SignedInUser(user) = expect_context::<SignedInUser>();
    let children = StoredValue::new(children);
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let signed_in = matches!(user.await, Ok(Some(_)));
                (!signed_in).then(|| children.with_value(|c| c()))
            })}
        </Suspense>
    }
}

/// The main menu: the sections the signed-in person (or a visitor) can open. On a phone,
/// once the page runs its script, it folds behind a Menu button; without the script it stays
/// open, so every section is one tap away either way.
#[component]
pub fn MainNav() -> impl IntoView {
    let SignedInUser(user) = expect_context::<SignedInUser>();
    let open = RwSignal::new(false);
    let links = move || {
        Suspend::new(async move {
            let roles = match user.await {
                Ok(Some(u)) => u.roles,
                _ => Roles::default(),
            };
            sections_for(&roles)
                .into_iter()
                .map(|s| view! { <li><A href=s.path>{s.title}</A></li> })
                .collect_view()
        })
    };
    view! {
        <button
            type="button"
            class="menu-button secondary"
            aria-controls="main-menu"
            aria-expanded=move || if open.get() { "true" } else { "false" }
            on:click=move |_| open.update(|o| *o = !*o)
        >
            "Menu"
        </button>
        // Following one of its links folds it again.
        <nav aria-label="Main" id="main-menu" class:open=open on:click=move |_| open.set(false)>
            <ul>
                <Suspense fallback=|| ()>{links}</Suspense>
            </ul>
        </nav>
    }
}

/// `next` if it is a path on this site (`/billing?month=…`), never another origin
/// (`//evil.example`, `/\\evil.example`, `https://…`) or anything unprintable or long.
pub fn local_path(next: &str) -> Option<&str> {
    let ok = next.len() <= 1024
        && next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && next.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    ok.then_some(next)
}

/// The platform admins' break-glass sign-in. Works as a plain form post. `next`: the local
/// page to return to (the admin page otherwise).
#[server]
pub async fn break_glass_sign_in(
    email: String,
    password: String,
    #[server(default)] next: Option<String>,
) -> Result<(), AppError> {
    let cp = crate::server::control_plane()?;
    let principal = cp
        .verify_break_glass(&email, &password, crate::server::client_address())
        .await?;
    crate::server::sign_in(&crate::server::session().await?, &principal, "break_glass").await?;
    leptos_axum::redirect(next.as_deref().and_then(local_path).unwrap_or("/admin"));
    Ok(())
}

#[server]
pub async fn sign_out() -> Result<(), AppError> {
    let session = crate::server::session().await?;
    let cp = crate::server::control_plane()?;
    let next = crate::server::sign_out(&session, &cp, &crate::server::public_origin()?).await?;
    leptos_axum::redirect(&next);
    Ok(())
}

/// Starts single sign-on for the tenant that owns the email's domain: the browser goes to
/// that tenant's identity provider and comes back to `/auth/callback`.
#[server]
pub async fn sso_start(
    email: String,
    #[server(default)] next: Option<String>,
) -> Result<(), AppError> {
    let cp = crate::server::control_plane()?;
    let origin = crate::server::public_origin()?;
    let start = cp
        .sso_begin(
            &email,
            &origin.callback_url(),
            crate::server::client_address(),
        )
        .await?;
    let session = crate::server::session().await?;
    crate::server::store_pending_sso(&session, &start.pending).await?;
    crate::server::store_return_to(&session, next.as_deref()).await?;
    leptos_axum::redirect(&start.authorize_url);
    Ok(())
}

/// What the login page says when the provider's answer was refused (`/login?sso_error=…`).
/// The codes come from `control_plane::sso::SsoError::code`.
pub fn sso_error_message(code: &str) -> &'static str {
    match code {
        "state" => {
            "This sign-in response did not match a sign-in started in this browser (its state was wrong or missing, or it was already used), so it was refused. Please start again."
        }
        "expired_attempt" => "The sign-in took too long. Please start again.",
        "provider_refused" => {
            "Your organization's identity provider did not complete the sign-in. Please start again."
        }
        "issuer_unreachable" => {
            "Your organization's identity provider could not be reached. Try again in a minute; if it persists, tell your administrator."
        }
        "token_expired" => {
            "Your identity provider's token had expired, so you were not signed in. Please start again."
        }
        "token_audience" => {
            "Your identity provider's token was issued for another application, so you were not signed in."
        }
        "token_issuer" => {
            "Your identity provider's token came from another provider, so you were not signed in."
        }
        "token_nonce" => {
            "Your identity provider's token belonged to another sign-in, so you were not signed in."
        }
        "token_signature" | "token_invalid" => {
            "Your identity provider's token could not be verified, so you were not signed in."
        }
        "missing_email" => {
            "Your identity provider did not tell us a verified email address, so you were not signed in."
        }
        "email_not_allowed" => {
            "You signed in at your identity provider with an address your organization does not use for this portal."
        }
        "account_elsewhere" => {
            "There is already an account for that address that isn't your organization's (it belongs to the platform's staff or to another organization), so your organization's provider can't sign it in. Ask your administrator."
        }
        "unknown_domain" => "No organization signs in with that email domain.",
        _ => "Sign-in failed. Please start again; if it keeps happening, tell your administrator.",
    }
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
    let SignedInUser(user) = expect_context::<SignedInUser>();
    let sign_out = ServerAction::<SignOut>::new();
    on_success(sign_out, move || epoch.update(|e| *e += 1));
    view! {
        <div class="user-menu">
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    match user.await {
                        Ok(Some(u)) => view! {
                            <a class="who" href="/account" title=format!("{} — your account and SSH keys", u.email)>
                                {u.display_name.clone()}
                                {u.platform_role.map(|r| view! { <span class="role">{r}</span> })}
                            </a>
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
    let error = crate::components::action_outcome(action.value(), |_| None);
    let sso = ServerAction::<SsoStart>::new();
    let sso_error = crate::components::action_outcome(sso.value(), |_| None);
    let query = leptos_router::hooks::use_query_map();
    // The page that sent the user here, to return to once signed in.
    let next_input = move || {
        query
            .read()
            .get("next")
            .filter(|n| local_path(n).is_some())
            .map(|n| view! { <input type="hidden" name="next" value=n /> })
    };
    let callback_error = move || {
        query.read().get("sso_error").map(|code| {
            view! {
                <p class="form-error" role="alert" data-sso-error=code.clone()>
                    {sso_error_message(&code)}
                </p>
            }
        })
    };
    view! {
        <Title text="Sign in" />
        <h1>"Sign in"</h1>
        <section class="card" aria-labelledby="sso-h">
            <h2 id="sso-h">"With your organization"</h2>
            {callback_error}
            <ActionForm action=sso attr:class="stacked" attr:id="sso-form">
                {next_input}
                <label>
                    "Work email"
                    <input type="email" name="email" autocomplete="email" required />
                </label>
                <button type="submit">"Continue"</button>
                {sso_error}
            </ActionForm>
            <p class="hint">"You will sign in at your organization's own identity provider."</p>
        </section>
        <section class="card" aria-labelledby="bg-h">
            <h2 id="bg-h">"Platform admins: break-glass sign-in"</h2>
            <p class="hint">"For platform administrators only, when single sign-on is unavailable."</p>
            <ActionForm action=action attr:class="stacked" attr:id="break-glass-form">
                {next_input}
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
