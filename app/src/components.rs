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
