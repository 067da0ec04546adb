//! The portal's pages, components and server functions.
//!
//! Server functions are thin: authenticate, authorise, call one control-plane function, map
//! its error to [`AppError`]. No SQL and no business rule lives here. With the `ssr` feature
//! this crate links the control plane; with `hydrate` it compiles to wasm without it.

// The publisher and review pages are deep view trees; their wasm layout needs more than the
// default query depth (rustc suggests exactly this).
#![recursion_limit = "256"]

pub mod account;
pub mod allocations;
pub mod api_docs;
pub mod audit;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod clusters;
pub mod components;
#[cfg(feature = "ssr")]
pub mod csp;
pub mod error;
pub mod fabric;
pub mod fleet;
pub mod marketplace;
pub mod ops;
pub mod organization;
pub mod pages;
pub mod policies;
pub mod projects;
pub mod theme;
pub mod tokens;
pub mod volumes;

#[cfg(feature = "ssr")]
pub mod server;
pub mod sso_settings;

pub use error::AppError;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{ParamSegment, SsrMode, StaticSegment};

use theme::{ThemePicker, ThemeSignal};

/// The HTML document around [`App`]; rendered on the server only.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    let theme = theme::initial_theme();
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme.as_str()>
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <AutoReload options=options.clone() />
                <HydrationScripts options />
                // Draws finance charts; loads ECharts (served from /vendor/) only where one is.
                <script src="/charts.js" defer nonce=leptos::nonce::use_nonce()></script>
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let theme = RwSignal::new(theme::initial_theme());
    provide_context(ThemeSignal(theme));
    provide_context(auth::AuthEpoch(RwSignal::new(0)));
    auth::SignedInUser::provide();

    // Effects run only in the browser, after hydration.
    Effect::new(move |_| {
        let t = theme.get();
        if let Some(html) = document().document_element() {
            let _ = html.set_attribute("data-theme", t.as_str());
        }
    });
    Effect::new(move |_| {
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });

    view! {
        <Stylesheet id="leptos" href="/pkg/portal.css" />
        <Title formatter=|title: String| {
            if title.is_empty() { "GPU cloud".to_string() } else { format!("{title} · GPU cloud") }
        } />
        <Router>
            // rel=external: the browser, not the router, follows it, so focus moves too.
            <a class="skip-link" href="#main" rel="external">
                "Skip to content"
            </a>
            <header class="topbar">
                <a class="brand" href="/">
                    <span class="brand-mark" aria-hidden="true">"▣"</span>
                    " GPU cloud"
                </a>
                <auth::MainNav />
                <auth::UserMenu />
            </header>
            <main id="main" tabindex="-1">
                <Routes fallback=pages::not_found::NotFound>
                    // Async: the whole page (with its data) is sent at once, so it reads the
                    // same without JavaScript.
                    <Route path=StaticSegment("") view=pages::home::HomePage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("settings"), StaticSegment("sso")) view=sso_settings::SsoSettingsPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("organization") view=organization::OrganizationPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("audit") view=audit::AuditPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("login") view=auth::LoginPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("account") view=account::AccountPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("account"), StaticSegment("tokens")) view=tokens::TokensPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("docs"), StaticSegment("api")) view=api_docs::ApiReferencePage ssr=SsrMode::Async />
                    <Route path=StaticSegment("admin") view=pages::admin::AdminPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("fleet") view=fleet::FleetPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("fleet"), ParamSegment("id")) view=fleet::NodePage ssr=SsrMode::Async />
                    <Route path=StaticSegment("catalog") view=catalog::CatalogPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("catalog"), StaticSegment("manage")) view=catalog::SkuAdminPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("launch") view=allocations::LaunchPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("marketplace") view=marketplace::MarketplacePage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("marketplace"), StaticSegment("publish")) view=marketplace::PublishPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("marketplace"), ParamSegment("slug")) view=marketplace::ListingPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("marketplace")) view=marketplace::MarketplaceAdminPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("marketplace"), StaticSegment("versions"), ParamSegment("id")) view=marketplace::VersionReviewPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("allocations") view=allocations::AllocationsPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("volumes") view=volumes::VolumesPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("allocations"), ParamSegment("id")) view=allocations::AllocationPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("clusters"), ParamSegment("id")) view=clusters::ClusterPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("projects") view=projects::ProjectsPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("projects"), ParamSegment("id")) view=projects::ProjectPage ssr=SsrMode::Async />
                    <Route path=StaticSegment("billing") view=billing::BillingPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("billing"), StaticSegment("invoices"), ParamSegment("id")) view=billing::InvoicePage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("billing")) view=billing::PlatformBillingPage ssr=SsrMode::Async />
                    <Route path=(StaticSegment("admin"), StaticSegment("ops")) view=ops::OpsPanel ssr=SsrMode::Async />
                </Routes>
            </main>
            <footer class="footer">
                <ThemePicker />
                <p class="version">"Portal " {env!("CARGO_PKG_VERSION")}</p>
            </footer>
        </Router>
    }
}
