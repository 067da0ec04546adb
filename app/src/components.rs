//! Small pieces shared by pages.

use leptos::prelude::*;

use crate::error::AppError;

/// Shows an error from a server function the way a user should read it: sign-in prompts
/// link to the sign-in page; everything else is its message.
#[component]
pub fn ErrorNotice(error: AppError) -> impl IntoView {
    match error {
        AppError::Unauthenticated => view! {
            <section class="card notice" role="alert">
                <p>"Please sign in to see this page."</p>
                <p><a href="/login">"Sign in"</a></p>
            </section>
        }
        .into_any(),
        other => view! {
            <section class="card notice" role="alert">
                <p>{other.to_string()}</p>
            </section>
        }
        .into_any(),
    }
}

/// What an action's last run came to: its error as an alert, or, on success, the message
/// `ok` makes of the result (if any). Nothing before the first run.
pub fn action_outcome<T, S>(
    value: S,
    ok: impl Fn(T) -> Option<String> + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
    S: Get<Value = Option<Result<T, AppError>>> + Send + Sync + 'static,
{
    move || match value.get() {
        Some(Err(e)) => {
            Some(view! { <p class="form-error" role="alert">{e.to_string()}</p> }.into_any())
        }
        Some(Ok(v)) => ok(v).map(|m| view! { <p class="form-ok" role="status">{m}</p> }.into_any()),
        None => None,
    }
}
