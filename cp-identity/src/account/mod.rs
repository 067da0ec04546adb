//! What a signed-in user keeps for themselves: saved SSH public keys, picked at launch.
//!
//! Keys belong to the user, not to a tenant: the same person launching in two projects uses
//! the same keys. Another user's key is "not found", never "forbidden".

mod ssh;

pub use ssh::{fingerprint as ssh_fingerprint, validate_ssh_key, validate_ssh_keys};

use serde_json::json;

use crate::auth::Principal;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{ApiTokenId, SshKeyId};

/// One saved key, as the account page, the launch form and the API show it.
pub use portal_types::account::{KeyToken, SshKey};

/// The name a person gives something of theirs (a key, a token): trimmed, 1 to 64 characters,
/// no control characters. `what` and `example` make the sentence: "give the key a name …".
pub(crate) fn short_name<'a>(name: &'a str, what: &str, example: &str) -> Result<&'a str> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(Error::Invalid {
            field: "name",
            reason: format!("give the {what} a name of 1 to 64 characters, e.g. \"{example}\""),
        });
    }
    Ok(name)
}

/// What the control plane offers for a user's own account.
#[allow(async_fn_in_trait)]
pub trait AccountApi {
    /// The user's saved keys, oldest first.
    async fn ssh_keys(&self, who: &Principal) -> Result<Vec<SshKey>>;

    /// Saves `public_key` under `name`. The key is validated as a launch validates it (a
    /// private key, a malformed one or a short RSA key is refused with the reason); the same
    /// key or name twice is refused naming the one already saved. Audited.
    async fn add_ssh_key(
        &self,
        who: &Principal,
        name: &str,
        public_key: &str,
        request_id: Option<&str>,
    ) -> Result<SshKey>;

    /// Deletes one of the user's keys; someone else's is "not found". Audited.
    async fn delete_ssh_key(
        &self,
        who: &Principal,
        id: SshKeyId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// The public key lines of the user's keys `ids`, for a launch; marks them used. A key
    /// that is not the user's is "not found".
    async fn ssh_key_lines(&self, who: &Principal, ids: &[SshKeyId]) -> Result<Vec<String>>;
}

impl AccountApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(user.id = %who.user_id))]
    async fn ssh_keys(&self, who: &Principal) -> Result<Vec<SshKey>> {
        let rows = sqlx::query!(
            r#"SELECT k.id, k.name, k.public_key, k.fingerprint, k.created_at, k.last_used_at,
                      t.id AS "token_id?", t.name AS "token_name?",
                      t.display_prefix AS "token_prefix?"
               FROM user_ssh_keys k LEFT JOIN api_tokens t ON t.id = k.added_via_token
               WHERE k.user_id = $1 ORDER BY k.created_at, k.name"#,
            who.user_id.0
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut parts = r.public_key.splitn(3, ' ');
                let kind = parts.next().unwrap_or_default().to_string();
                let comment = parts.nth(1).map(str::to_string);
                SshKey {
                    id: SshKeyId(r.id),
                    name: r.name,
                    kind,
                    fingerprint: r.fingerprint,
                    comment,
                    created_at: r.created_at,
                    last_used_at: r.last_used_at,
                    added_via_token: match (r.token_id, r.token_name, r.token_prefix) {
                        (Some(id), Some(name), Some(display_prefix)) => Some(KeyToken {
                            id: ApiTokenId(id),
                            name,
                            display_prefix,
                        }),
                        _ => None,
                    },
                }
            })
            .collect())
    }

    #[tracing::instrument(skip_all, fields(user.id = %who.user_id))]
    async fn add_ssh_key(
        &self,
        who: &Principal,
        name: &str,
        public_key: &str,
        request_id: Option<&str>,
    ) -> Result<SshKey> {
        let name = short_name(name, "key", "laptop")?;
        let key = validate_ssh_key(public_key)?;
        let fingerprint = ssh_fingerprint(&key);
        let id = SshKeyId::new_random();
        let mut tx = self.pool().begin().await?;
        let inserted = sqlx::query!(
            "INSERT INTO user_ssh_keys (id, user_id, name, public_key, fingerprint,
                                        added_via_token)
             VALUES ($1, $2, $3, $4, $5, $6)",
            id.0,
            who.user_id.0,
            name,
            key,
            fingerprint,
            audit::current_token() as Option<ApiTokenId>
        )
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            return Err(match cp_base::db::violated(&e) {
                Some("user_ssh_keys_one_per_user") => {
                    let existing = sqlx::query_scalar!(
                        "SELECT name FROM user_ssh_keys WHERE user_id = $1 AND fingerprint = $2",
                        who.user_id.0,
                        fingerprint
                    )
                    .fetch_optional(self.pool())
                    .await?
                    .unwrap_or_default();
                    Error::Conflict(format!("this key is already saved, as \"{existing}\""))
                }
                Some("user_ssh_keys_name_per_user") => Error::Invalid {
                    field: "name",
                    reason: format!("you already have a key named \"{name}\""),
                },
                Some("user_ssh_keys_at_most_50") => {
                    Error::Conflict("you keep at most 50 SSH keys; delete one first".into())
                }
                _ => e.into(),
            });
        }
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user_id),
                action: "user.ssh_key_add",
                resource: &self.naming().platform_user(who.user_id),
                before: None,
                after: Some(json!({ "key": id, "name": name, "fingerprint": fingerprint })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        self.ssh_keys(who)
            .await?
            .into_iter()
            .find(|k| k.id == id)
            .ok_or_else(|| Error::Corrupt("a saved SSH key vanished".into()))
    }

    #[tracing::instrument(skip_all, fields(user.id = %who.user_id, key.id = %id))]
    async fn delete_ssh_key(
        &self,
        who: &Principal,
        id: SshKeyId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let gone = sqlx::query!(
            "DELETE FROM user_ssh_keys WHERE id = $1 AND user_id = $2 RETURNING name, fingerprint",
            id.0,
            who.user_id.0
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "SSH key" })?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user_id),
                action: "user.ssh_key_delete",
                resource: &self.naming().platform_user(who.user_id),
                before: Some(
                    json!({ "key": id, "name": gone.name, "fingerprint": gone.fingerprint }),
                ),
                after: None,
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(user.id = %who.user_id))]
    async fn ssh_key_lines(&self, who: &Principal, ids: &[SshKeyId]) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<uuid::Uuid> = ids.iter().map(|i| i.0).collect();
        let lines = sqlx::query_scalar!(
            "UPDATE user_ssh_keys SET last_used_at = now()
             WHERE user_id = $1 AND id = ANY($2) RETURNING public_key",
            who.user_id.0,
            &ids
        )
        .fetch_all(self.pool())
        .await?;
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        if lines.len() != distinct.len() {
            return Err(Error::NotFound { what: "SSH key" });
        }
        Ok(lines)
    }
}
