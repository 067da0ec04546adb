//! The account page: the signed-in user's saved SSH keys (add with validation, list with
//! fingerprints, delete). The launch form picks from them.

#[cfg(feature = "ssr")]
use control_plane::prelude::*;

use leptos::prelude::*;
use leptos_meta::Title;
use portal_types::account::SshKey;
use portal_types::utc;
use portal_types::{IdArg, SshKeyId};

use crate::components::{ErrorNotice, action_outcome as outcome, field_error, field_invalid};
use crate::error::AppError;

#[server]
pub async fn list_ssh_keys() -> Result<Vec<SshKey>, AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    Ok(cp.ssh_keys(&principal).await?)
}

/// Saves a public key under a name; answers with the name and fingerprint saved.
#[server]
pub async fn add_ssh_key(name: String, public_key: String) -> Result<String, AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    let key = cp
        .add_ssh_key(
            &principal,
            &name,
            &public_key,
            Some(&crate::error::request_id()),
        )
        .await?;
    Ok(format!("Saved \"{}\" ({}).", key.name, key.fingerprint))
}

#[server]
pub async fn delete_ssh_key(id: IdArg<SshKeyId>) -> Result<(), AppError> {
    let (cp, principal) = crate::server::signed_in().await?;
    let id = crate::server::id(id)?;
    cp.delete_ssh_key(&principal, id, Some(&crate::error::request_id()))
        .await?;
    Ok(())
}

#[component]
pub fn AccountPage() -> impl IntoView {
    let add = ServerAction::<AddSshKey>::new();
    let delete = ServerAction::<DeleteSshKey>::new();
    let keys = Resource::new(
        move || (add.version().get(), delete.version().get()),
        |_| list_ssh_keys(),
    );
    view! {
        <Title text="Account" />
        <h1>"Account"</h1>
        <p class="lede">"Your SSH keys, which launches put on machines. Scripts and tools use " <a href="/account/tokens">"API tokens"</a> "."</p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match keys.await {
                    Ok(rows) => view! { <KeysBody rows add delete /> }.into_any(),
                    Err(e) => view! { <ErrorNotice error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn KeysBody(
    rows: Vec<SshKey>,
    add: ServerAction<AddSshKey>,
    delete: ServerAction<DeleteSshKey>,
) -> impl IntoView {
    let empty = rows.is_empty();
    view! {
        <section class="card" aria-labelledby="keys-h">
            <h2 id="keys-h">"SSH keys"</h2>
            <p class="hint">"Keys you save here are offered on the launch form; each allocation gets the keys chosen when it launched. A key added through an API token says which: if you don't recognise one, delete it and revoke the token."</p>
            {if empty {
                view! { <p id="no-keys">"No saved keys yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                        <table class="data" id="ssh-keys">
                            <thead><tr><th scope="col">"Name"</th><th scope="col">"Type"</th><th scope="col">"Fingerprint"</th><th scope="col">"Comment"</th><th scope="col">"Added"</th><th scope="col">"Last used"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th></tr></thead>
                            <tbody>
                                {rows.into_iter().map(|k| {
                                    let label = format!("Delete {}", k.name);
                                    let key = k.name.clone();
                                    view! {
                                        <tr data-key=key>
                                            <td>{k.name}</td>
                                            <td>{k.kind}</td>
                                            <td class="mono">{k.fingerprint}</td>
                                            <td>{k.comment.unwrap_or_default()}</td>
                                            <td class="key-added">
                                                {utc(k.created_at)}
                                                <span class="hint">{match &k.added_via_token {
                                                    Some(t) => format!("through API token {} ({}…)", t.name, t.display_prefix),
                                                    None => "in the portal".to_string(),
                                                }}</span>
                                            </td>
                                            <td>{k.last_used_at.map_or_else(|| "never".to_string(), utc)}</td>
                                            <td>
                                                <ActionForm action=delete attr:class="inline">
                                                    <input type="hidden" name="id" value=k.id.to_string() />
                                                    <button type="submit" class="danger" aria-label=label>"Delete"</button>
                                                </ActionForm>
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }.into_any()
            }}
            {outcome(delete.value(), |_: ()| Some("Deleted.".to_string()))}
        </section>
        <section class="card" aria-labelledby="add-key-h">
            <h2 id="add-key-h">"Add a key"</h2>
            <ActionForm action=add attr:id="add-key">
                <div class="form-grid">
                    <label>"Name"
                        <input name="name" required maxlength="64" placeholder="laptop" autocomplete="off" aria-describedby="key-name-error" aria-invalid=field_invalid(add.value(), "name") />
                        {field_error(add.value(), "name", "key-name-error")}
                    </label>
                    <label class="wide">"Public key"
                        <textarea name="public_key" rows="3" required placeholder="ssh-ed25519 AAAA… you@laptop" aria-describedby="key-error" aria-invalid=field_invalid(add.value(), "ssh_public_key")></textarea>
                        <span class="hint">"The contents of a .pub file, e.g. ~/.ssh/id_ed25519.pub. Never paste a private key."</span>
                        {field_error(add.value(), "ssh_public_key", "key-error")}
                    </label>
                </div>
                <div class="form-actions"><button type="submit">"Save key"</button></div>
            </ActionForm>
            {outcome(add.value(), Some)}
        </section>
    }
}
