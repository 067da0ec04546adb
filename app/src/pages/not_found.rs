use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <leptos_meta::Title text="Page not found" />
        <h1>"Page not found"</h1>
        <p>"There is nothing at this address. " <a href="/">"Go to the home page"</a> "."</p>
    }
}
