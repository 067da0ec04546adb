//! Small pieces shared by pages.

use leptos::prelude::*;

use crate::error::AppError;

/// Shows an error from a server function the way a user should read it: sign-in prompts
/// link to the sign-in page; everything else is its message. Rendered on the server as a
/// page's main content, it also sets the page's HTTP status from [`AppError::status`] (404
/// for what the user may not see, 403 for a refusal, …) and sends a browser that is not
/// signed in to the sign-in page, to come back here afterwards.
#[component]
pub fn ErrorNotice(error: AppError) -> impl IntoView {
    #[cfg(feature = "ssr")]
    page_status(&error);
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

/// The reason an action's last run refused `field` (the control plane's name for it), if
/// that is what it refused.
fn field_reason<T>(value: &Option<Result<T, AppError>>, field: &str) -> Option<String> {
    match value {
        Some(Err(AppError::Invalid { field: f, reason })) if f == field => {
            Some(crate::error::capitalised(reason))
        }
        _ => None,
    }
}

/// The message under a field, for the action's last error when it is about `field`. Always
/// rendered (empty otherwise) so that the field's `aria-describedby=id` has a target.
pub fn field_error<T, S>(value: S, field: &'static str, id: impl Into<String>) -> impl IntoView
where
    T: Clone + Send + Sync + 'static,
    S: Get<Value = Option<Result<T, AppError>>> + Send + Sync + 'static,
{
    let id: String = id.into();
    view! {
        <span class="field-error" id=id aria-live="polite">
            {move || field_reason(&value.get(), field)}
        </span>
    }
}

/// `aria-invalid` for a field: "true" while the action's last error is about `field`.
pub fn field_invalid<T, S>(value: S, field: &'static str) -> impl Fn() -> Option<&'static str>
where
    T: Clone + Send + Sync + 'static,
    S: Get<Value = Option<Result<T, AppError>>> + Send + Sync + 'static,
{
    move || field_reason(&value.get(), field).map(|_| "true")
}

/// The page's status for `error`; for a browser that is not signed in, a redirect to sign-in.
#[cfg(feature = "ssr")]
fn page_status(error: &AppError) {
    let Some(response) = use_context::<leptos_axum::ResponseOptions>() else {
        return;
    };
    let request = use_context::<http::request::Parts>();
    if *error == AppError::Unauthenticated
        && let Some(parts) = &request
    {
        let wants_html = parts
            .headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
        if wants_html {
            let here = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
            leptos_axum::redirect(&format!("/login?next={}", query_escape(here)));
            return;
        }
    }
    if let Ok(status) = http::StatusCode::from_u16(error.status()) {
        response.set_status(status);
    }
}

/// Bytes a query value may not carry as they are: all but RFC 3986's unreserved ones and `/`.
#[cfg(feature = "ssr")]
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but unreserved characters and `/`, for a query value.
#[cfg(feature = "ssr")]
fn query_escape(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string()
}

/// An ECharts option as the page carries it (`data-option`, drawn by `public/charts.js`):
/// compact JSON. charming's `Display` indents it, which doubled its bytes in the page and
/// again in the hydration data that repeats it.
#[cfg(feature = "ssr")]
pub fn chart_option(chart: &charming::Chart) -> String {
    serde_json::to_string(chart).unwrap_or_else(|e| {
        tracing::error!(error.cause = %e, "an ECharts option did not serialise");
        String::from("{}")
    })
}

/// A duration as people say it: "40 s", "3 min", "2 h 5 min", "4 d 1 h".
pub fn duration_words(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// "1 GPU", "8 GPUs".
pub fn plural(n: impl Into<i64>, one: &str, many: &str) -> String {
    match n.into() {
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

/// A button that copies `text` (an SSH command, a token) to the clipboard, and says so. It
/// needs the page's script, so it shows only once the page runs it; the text stays
/// selectable beside it either way.
#[component]
pub fn CopyButton(text: String, #[prop(into)] label: String) -> impl IntoView {
    let copied = RwSignal::new(false);
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let _promise = window().navigator().clipboard().write_text(&text);
            copied.set(true);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &text;
    };
    view! {
        <button type="button" class="copy secondary" aria-label=label on:click=copy>
            {move || if copied.get() { "Copied" } else { "Copy" }}
        </button>
    }
}

/// A submit button for what is hard to undo (retire, drain, cordon, revoke, turning a
/// protection off): styled as dangerous, and, once the page runs its script, it asks
/// `question` first and submits nothing unless the person agrees. (Without the script the
/// form posts as it is; the server's rules are the same either way.)
#[component]
pub fn DangerButton(
    #[prop(into)] question: String,
    children: Children,
    #[prop(optional, into)] label: Option<String>,
) -> impl IntoView {
    let ask = move |ev: leptos::ev::MouseEvent| {
        #[cfg(feature = "hydrate")]
        if !window().confirm_with_message(&question).unwrap_or(false) {
            ev.prevent_default();
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&ev, &question);
    };
    view! {
        <button type="submit" class="danger" aria-label=label on:click=ask>{children()}</button>
    }
}

/// The links between pages of a list, newest first: back to the newest page (from a later
/// one) and on to older records (while there are more). Nothing when there is one page.
#[component]
pub fn Pager(
    /// What the links page through, for screen readers: "Pages of instances".
    label: &'static str,
    /// What this page holds: "The 50 newest instances".
    #[prop(optional)]
    shown: Option<String>,
    newest: Option<String>,
    older: Option<String>,
) -> impl IntoView {
    (newest.is_some() || older.is_some()).then(|| {
        view! {
            <nav class="pager" aria-label=label>
                {shown.map(|s| view! { <span class="hint" data-testid="page-shown">{s}</span> })}
                {newest.map(|h| view! { <a class="button secondary" href=h rel="first">"← Newest"</a> })}
                {older.map(|h| view! { <a class="button secondary" href=h rel="next">"Older →"</a> })}
            </nav>
        }
    })
}
