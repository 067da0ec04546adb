//! The colour theme preference: a cookie, so it works for signed-out visitors and before
//! (or without) the wasm bundle.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

pub const COOKIE: &str = "theme";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Theme {
    /// Follow the operating system (`prefers-color-scheme`).
    #[default]
    System,
    Light,
    Dark,
}

impl Theme {
    pub const ALL: [Theme; 3] = [Theme::System, Theme::Light, Theme::Dark];

    pub fn as_str(self) -> &'static str {
        match self {
            Theme::System => "system",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Theme::System => "System",
            Theme::Light => "Light",
            Theme::Dark => "Dark",
        }
    }

    pub fn parse(s: &str) -> Result<Self, AppError> {
        Theme::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                AppError::BadRequest(format!(
                    "Unknown theme {s:?}: choose one of system, light or dark."
                ))
            })
    }

    /// The theme named by a `Cookie:` header value, if any.
    pub fn from_cookie_header(header: &str) -> Option<Self> {
        header
            .split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .and_then(|(_, v)| Theme::parse(v).ok())
    }
}

/// The theme of the current request (server) or page (browser).
#[derive(Clone, Copy)]
pub struct ThemeSignal(pub RwSignal<Theme>);

/// What the page starts with: the cookie on the server; on the client, what the server put
/// on `<html data-theme>`, so hydration agrees with the server's HTML.
pub fn initial_theme() -> Theme {
    #[cfg(feature = "ssr")]
    {
        use_context::<http::request::Parts>()
            .and_then(|p| {
                p.headers
                    .get(http::header::COOKIE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(Theme::from_cookie_header)
            })
            .unwrap_or_default()
    }
    #[cfg(not(feature = "ssr"))]
    {
        document()
            .document_element()
            .and_then(|e| e.get_attribute("data-theme"))
            .and_then(|v| Theme::parse(&v).ok())
            .unwrap_or_default()
    }
}

/// Remembers the theme for a year. Works as a plain HTML form post.
#[server]
pub async fn set_theme(theme: String) -> Result<Theme, AppError> {
    let theme = Theme::parse(&theme)?;
    let cookie = format!(
        "{COOKIE}={}; Path=/; Max-Age=31536000; SameSite=Lax; HttpOnly",
        theme.as_str()
    );
    let response = expect_context::<leptos_axum::ResponseOptions>();
    response.append_header(
        http::header::SET_COOKIE,
        http::HeaderValue::from_str(&cookie).map_err(AppError::internal)?,
    );
    Ok(theme)
}

#[component]
pub fn ThemePicker() -> impl IntoView {
    let ThemeSignal(theme) = expect_context::<ThemeSignal>();
    // Without JS, a refused post comes back as `?__err=…` on the page's URL. `Routes` exposes
    // that to actions created under it, but this form lives in the footer, outside `Routes`,
    // so expose it here before the action is created.
    leptos_router::hooks::use_url()
        .read_untracked()
        .provide_server_action_error();
    let action = ServerAction::<SetTheme>::new();
    // After hydration the form posts in the background; apply the answer at once.
    Effect::new(move |_| {
        if let Some(Ok(t)) = action.value().get() {
            theme.set(t);
        }
    });
    let error = crate::components::action_outcome(action.value(), |_| None);
    view! {
        <ActionForm action=action attr:class="theme-picker" attr:aria-label="Colour theme">
            <fieldset>
                <legend>"Theme"</legend>
                {Theme::ALL
                    .into_iter()
                    .map(|t| {
                        view! {
                            <label>
                                <input
                                    type="radio"
                                    name="theme"
                                    value=t.as_str()
                                    prop:checked=move || theme.get() == t
                                    checked=theme.get_untracked() == t
                                />
                                {t.label()}
                            </label>
                        }
                    })
                    .collect_view()}
                <button type="submit">"Apply"</button>
            </fieldset>
            {error}
        </ActionForm>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_themes_and_names_the_bad_one() {
        for t in Theme::ALL {
            assert_eq!(Theme::parse(t.as_str()), Ok(t));
        }
        assert_eq!(
            Theme::parse("purple"),
            Err(AppError::BadRequest(
                "Unknown theme \"purple\": choose one of system, light or dark.".into()
            ))
        );
    }

    #[test]
    fn reads_the_cookie_among_others() {
        assert_eq!(
            Theme::from_cookie_header("a=1; theme=dark; b=2"),
            Some(Theme::Dark)
        );
        assert_eq!(Theme::from_cookie_header("theme=neon"), None);
        assert_eq!(Theme::from_cookie_header("xtheme=dark"), None);
        assert_eq!(Theme::from_cookie_header(""), None);
    }
}
