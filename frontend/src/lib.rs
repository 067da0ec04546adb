#![recursion_limit = "256"] // the fleet node page's view type is deep in release builds
//! The browser half: hydrates the server-rendered page. cargo-leptos builds this to wasm.

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
