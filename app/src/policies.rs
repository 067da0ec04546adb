//! Policy screens: the same table at three levels. Platform admins set global policies,
//! organization admins set their organization's and their projects'.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRow {
    pub key: String,
    pub label: String,
    pub hint: String,
    /// The value in force, as text; None: no limit.
    pub effective: Option<String>,
    /// "global", "organization" or "project".
    pub decided_by: Option<String>,
    /// What this level itself sets (prefills the form).
    pub here: Option<String>,
    /// Every level, general to specific: (level, value or "—").
    pub trace: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyView {
    pub can_edit: bool,
    pub rows: Vec<PolicyRow>,
}

#[cfg(feature = "ssr")]
mod ssr {
    use control_plane::ControlPlane;
    use control_plane::auth::Principal;
    use control_plane::policy::{Level, Resolved, Target};
    use control_plane::prelude::*;

    use super::{PolicyRow, PolicyView};
    use crate::AppError;

    /// The form's `scope` and `project` fields, as a target.
    pub async fn target(
        cp: &ControlPlane,
        p: &Principal,
        scope: &str,
        project: &str,
    ) -> Result<Target, AppError> {
        match scope {
            "global" => Ok(Target::Global),
            "organization" => Ok(Target::Tenant(
                crate::server::home_tenant::<control_plane::tenancy::TenantMembers>(cp, p)
                    .await?
                    .0
                    .id(),
            )),
            "project" => Ok(Target::Project(crate::server::id(project)?)),
            other => Err(AppError::BadRequest(format!(
                "Unknown policy level {other:?}: use global, organization or project."
            ))),
        }
    }

    pub fn rows(resolved: Vec<Resolved>, target: Target) -> Vec<PolicyRow> {
        let level = match target {
            Target::Global => Level::Global,
            Target::Tenant(_) => Level::Tenant,
            Target::Project(_) => Level::Project,
        };
        let text =
            |v: &Option<control_plane::policy::PolicyValue>| v.as_ref().map(|v| v.to_string());
        resolved
            .into_iter()
            .map(|r| PolicyRow {
                key: r.key.as_str().into(),
                label: r.key.label().into(),
                hint: r.key.hint().into(),
                effective: text(&r.value),
                decided_by: r.decided_by.map(|l| l.as_str().into()),
                here: r
                    .trace
                    .iter()
                    .find(|(l, _)| *l == level)
                    .and_then(|(_, v)| text(v)),
                trace: r
                    .trace
                    .iter()
                    .map(|(l, v)| (l.as_str().into(), text(v).unwrap_or_else(|| "—".into())))
                    .collect(),
            })
            .collect()
    }

    pub async fn view(
        cp: &ControlPlane,
        p: &Principal,
        target: Target,
    ) -> Result<PolicyView, AppError> {
        let (resolved, can_edit) = cp.policies_at(p, target).await?;
        Ok(PolicyView {
            can_edit,
            rows: rows(resolved, target),
        })
    }
}

/// The policy view at `target`, for the server function of the page that shows it.
#[cfg(feature = "ssr")]
pub async fn load(
    cp: &control_plane::ControlPlane,
    principal: &control_plane::auth::Principal,
    target: control_plane::policy::Target,
) -> Result<PolicyView, AppError> {
    ssr::view(cp, principal, target).await
}

/// Sets one policy at one level; an empty value clears it.
#[server]
pub async fn set_policy(
    scope: String,
    project: String,
    key: String,
    value: String,
) -> Result<(), AppError> {
    use control_plane::policy::PolicyValue;
    let (cp, principal) = crate::server::signed_in().await?;
    let target = ssr::target(&cp, &principal, &scope, &project).await?;
    let scope = cp.policy_scope(&principal, target).await?;
    let key = control_plane::policy::PolicyKey::parse(&key)?;
    let value = if value.trim().is_empty() {
        None
    } else {
        Some(PolicyValue::parse(key, &value)?)
    };
    Ok(cp
        .set_policy(&scope, key, value, Some(&crate::error::request_id()))
        .await?)
}

/// The policy tables' save, and which row's Save was pressed last (its refusal shows on that
/// row). The page makes it and refetches when it completes, which draws the table again; the
/// row survives that because the page, not the table, holds it.
#[derive(Clone, Copy)]
pub struct PolicyAction {
    pub set: ServerAction<SetPolicy>,
    pressed: RwSignal<Option<String>>,
}

impl PolicyAction {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self {
            set: ServerAction::new(),
            pressed: RwSignal::new(None),
        }
    }

    /// Moves whenever a save completes.
    pub fn version(&self) -> usize {
        self.set.version().get()
    }
}

/// The policy table for one level, from data the page's own server function loaded (so no
/// resource is created while the page hydrates). `set` is the page's action: pages refetch
/// when it completes.
#[component]
pub fn Policies(
    scope: &'static str,
    #[prop(optional, into)] project: String,
    view: PolicyView,
    set: PolicyAction,
) -> impl IntoView {
    // The row whose Save was pressed last shows its refusal, in words. Without the page's
    // script nobody knows which, and the refusal shows under the table.
    let PolicyAction {
        set,
        pressed: saved_row,
    } = set;
    let error = move || {
        saved_row
            .get()
            .is_none()
            .then(|| crate::components::action_outcome(set.value(), |_| None))
    };
    let can_edit = view.can_edit;
    view! {
        <section class="card policies" aria-labelledby=format!("pol-{scope}") data-scope=scope>
            <h2 id=format!("pol-{scope}")>
                {match scope {
                    "global" => "Global policies",
                    "organization" => "Organization policies",
                    _ => "Policies",
                }}
            </h2>
            <table class="data cards">
                <thead><tr>
                    <th scope="col">"Policy"</th>
                    <th scope="col">"In force"</th>
                    <th scope="col">"Decided by"</th>
                    {can_edit.then(|| view! { <th scope="col">"Set here"</th> })}
                </tr></thead>
                <tbody>
                    {view
                        .rows
                        .into_iter()
                        .map(|r| policy_row(r, scope, project.clone(), can_edit, set, saved_row))
                        .collect_view()}
                </tbody>
            </table>
            {can_edit.then(|| view! {
                <p class="hint">"Leave a field empty and save to clear it; the next level up then decides."</p>
            })}
            {error}
        </section>
    }
}

fn policy_row(
    r: PolicyRow,
    scope: &'static str,
    project: String,
    can_edit: bool,
    set: ServerAction<SetPolicy>,
    saved_row: RwSignal<Option<String>>,
) -> impl IntoView {
    let trace = r
        .trace
        .iter()
        .map(|(l, v)| format!("{l}: {v}"))
        .collect::<Vec<_>>()
        .join(" → ");
    // Only a decided value has a chain worth showing.
    let decided = r.decided_by.is_some();
    let input_id = format!("{scope}-{}", r.key);
    let key_attr = r.key.clone();
    let label = r.label.clone();
    let error_id = format!("{input_id}-error");
    // This row's refusal, if its Save was the last pressed: the reason alone, the row's label
    // already says which policy.
    let refusal = {
        let key = r.key.clone();
        move || {
            if saved_row.get().as_deref() != Some(key.as_str()) {
                return None;
            }
            match set.value().get() {
                Some(Err(AppError::Invalid { reason, .. })) => {
                    Some(crate::error::capitalised(&reason))
                }
                Some(Err(e)) => Some(e.to_string()),
                _ => None,
            }
        }
    };
    let refused = refusal.clone();
    let pressed = r.key.clone();
    let described_by = error_id.clone();
    view! {
        <tr data-key=key_attr>
            <th scope="row">{r.label}</th>
            <td class="effective" data-label="In force">{r.effective.unwrap_or_else(|| "no limit".into())}</td>
            <td class="decided-by" data-label="Decided by" title=decided.then_some(trace)>{r.decided_by.unwrap_or_else(|| "—".into())}</td>
            {can_edit.then(move || view! {
                <td data-label="Set here">
                    <ActionForm action=set attr:class="inline-form">
                        <input type="hidden" name="scope" value=scope />
                        <input type="hidden" name="project" value=project />
                        <input type="hidden" name="key" value=r.key />
                        <label class="visually-hidden" for=input_id.clone()>{label}</label>
                        <input type="text" name="value" id=input_id
                            value=r.here.unwrap_or_default() placeholder=r.hint
                            aria-describedby=described_by
                            aria-invalid=move || refused().map(|_| "true") />
                        <button type="submit" class="secondary" on:click=move |_| saved_row.set(Some(pressed.clone()))>"Save"</button>
                    </ActionForm>
                    {move || refusal().map(|reason| view! { <p class="form-error" id=error_id.clone() role="alert">{reason}</p> })}
                </td>
            })}
        </tr>
    }
}
