//! `/docs/api`: the API reference. The OpenAPI document the server generates from its handlers
//! (`/api/v1/openapi.json`) rendered in the browser by RapiDoc (npm `rapidoc`, served from
//! `/vendor/`, never a CDN; `public/api-docs.js` loads it and keeps it in the portal's theme).
//! Without JavaScript the page still says where the document is and how to get a token: where
//! to make one for those who may, whom to ask for everyone else.

use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn ApiReferencePage() -> impl IntoView {
    view! {
        <Title text="API reference" />
        <h1>"API reference"</h1>
        <p class="lede">
            "What you do here, a program can do over the REST API at " <code>"/api/v1"</code>
            ": launch and release instances, wait for them, list offers and keys. "
            <TokenAdvice />
            " Send the token as " <code>"Authorization: Bearer gpk_…"</code> ", or use the "
            <code>"gpuctl"</code> " command line. The machine-readable document is "
            <a href="/api/v1/openapi.json">"openapi.json"</a> " (OpenAPI 3.1)."
        </p>
        <script src="/api-docs.js" defer nonce=leptos::nonce::use_nonce()></script>
        <section class="card api-reference" aria-label="Operations">
            <rapi-doc
                spec-url="/api/v1/openapi.json"
                render-style="view"
                load-fonts="false"
                layout="column"
                show-header="false"
                show-info="false"
                allow-server-selection="false"
                allow-authentication="true"
                allow-spec-url-load="false"
                allow-spec-file-load="false"
                schema-style="table"
                default-schema-tab="schema"
                regular-font="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
                mono-font="ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
            >
                <noscript>"The interactive reference needs JavaScript; "<a href="/api/v1/openapi.json">"openapi.json"</a>" is the same document."</noscript>
            </rapi-doc>
        </section>
    }
}

/// Where the reader's token comes from: organization admins and project admins make them
/// (`tokens::list_api_tokens` says whether this reader is one); everyone else asks one.
#[component]
fn TokenAdvice() -> impl IntoView {
    let tokens = Resource::new(|| (), |_| crate::tokens::list_api_tokens());
    let ask = "Tokens are made by an organization's admins and its project admins: ask one of them for a token.";
    view! {
        <Suspense fallback=move || ask>
            {move || Suspend::new(async move {
                match tokens.await {
                    Ok(t) if t.org_admin || !t.projects.is_empty() => view! {
                        <span id="token-advice">
                            "Make a token on " <a href="/account/tokens">"Account → API tokens"</a> "."
                        </span>
                    }
                    .into_any(),
                    _ => view! { <span id="token-advice">{ask}</span> }.into_any(),
                }
            })}
        </Suspense>
    }
}
