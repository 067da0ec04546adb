//! API tokens: bearer secrets scripts, CI and tools use on the public API, each acting for the
//! person who made it.
//!
//! - Organization admins make tokens for the organization or any of its projects; project
//!   admins for their project. The secret (`gpk_…`) is returned once; only its SHA-256 is kept.
//! - A token never does more than its maker could: each use re-checks that the maker still
//!   belongs to the token's organization (and project), and its scopes narrow further. Revoked,
//!   expired, unknown and orphaned tokens are all the same `Unauthenticated`.
//! - Making and revoking are audited with the token's id; the table's trigger keeps a token's
//!   identity fixed and a revocation final.

use serde_json::json;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::account::short_name;
use crate::auth::{AuthApi, Principal};
use crate::tenancy::{
    ProjectAdmins, ProjectViewers, TenancyApi, TenantAdmins, TenantMembers, TenantRequirement,
};
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{ApiTokenId, ProjectId, TenantId, UserId};
use cp_base::secrets::{new_secret, secret_hash};

pub use portal_types::tokens::{ApiToken, CreatedToken, MAX_TOKEN_DAYS, TokenScope, TokenState};

/// What a person asks for when making a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewToken {
    pub name: String,
    /// `None`: the whole organization.
    pub project: Option<ProjectId>,
    pub scopes: Vec<TokenScope>,
    /// 1 to [`MAX_TOKEN_DAYS`].
    pub days: u32,
}

/// The caller behind a valid token: its maker (whose roles every call checks as usual), where
/// the token reaches, and what it may do there.
#[derive(Clone, Debug)]
pub struct TokenCaller {
    pub token: ApiTokenId,
    pub principal: Principal,
    pub tenant: TenantId,
    /// `None`: any project of the organization the maker may reach.
    pub project: Option<ProjectId>,
    pub scopes: Vec<TokenScope>,
}

impl TokenCaller {
    /// Refuses unless the token carries `scope`.
    pub fn require(&self, scope: TokenScope) -> Result<()> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(Error::Forbidden {
                needed: match scope {
                    TokenScope::Read => "tokens with the read scope",
                    TokenScope::Launch => "tokens with the launch scope",
                    TokenScope::Billing => "tokens with the billing scope",
                    TokenScope::Admin => "tokens with the admin scope",
                    TokenScope::Keys => "tokens with the keys scope",
                },
            })
        }
    }
}

impl TokenCaller {
    /// Refuses unless the token may add and delete its maker's saved SSH keys: the `keys`
    /// scope on an organization-wide token. Those keys reach every later launch of the maker,
    /// in every project, so a token for one project (or without the scope) must not plant them.
    pub fn require_keys(&self) -> Result<()> {
        self.require(TokenScope::Keys)?;
        if self.project.is_some() {
            return Err(Error::Forbidden {
                needed: "organization-wide tokens with the keys scope",
            });
        }
        Ok(())
    }
}

/// A use is written back at most this often per token, so reads do not become writes.
const LAST_USE_GRANULARITY_S: i64 = 60;

/// The longest bearer value read; a `gpk_` secret is 47 characters.
const MAX_SECRET_LEN: usize = 128;

fn check_new(new: &NewToken) -> Result<(String, Vec<TokenScope>)> {
    let name = short_name(&new.name, "token", "ci-deploy")?;
    if new.days == 0 || new.days > MAX_TOKEN_DAYS {
        return Err(Error::Invalid {
            field: "days",
            reason: format!("a token lives 1 to {MAX_TOKEN_DAYS} days"),
        });
    }
    let mut scopes = new.scopes.clone();
    scopes.sort();
    scopes.dedup();
    if scopes.is_empty() {
        return Err(Error::Invalid {
            field: "scopes",
            reason: "choose at least one scope: read, launch, billing, admin or keys".into(),
        });
    }
    Ok((name.to_owned(), scopes))
}

/// What the control plane offers for API tokens.
#[allow(async_fn_in_trait)]
pub trait ApiTokensApi {
    /// Makes a token in `tenant` (for one of its projects when `new.project` is set): its
    /// organization's admins may, and a project's admins for their project. Audited.
    async fn create_api_token(
        &self,
        who: &Principal,
        tenant: TenantId,
        new: &NewToken,
        request_id: Option<&str>,
    ) -> Result<CreatedToken>;

    /// The tokens of `tenant` the caller may manage, newest first: every one for its admins,
    /// otherwise those they made.
    async fn api_tokens(&self, who: &Principal, tenant: TenantId) -> Result<Vec<ApiToken>>;

    /// Revokes a token at once: its organization's admins may, and whoever made it. Revoking a
    /// revoked token is a no-op. Another organization's token is "not found". Audited.
    async fn revoke_api_token(
        &self,
        who: &Principal,
        id: ApiTokenId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// The caller behind `secret`, or `Unauthenticated` (unknown, revoked, expired, or its
    /// maker no longer in its organization or project: the caller is not told which). Notes
    /// when and from where it was last used.
    async fn authenticate_token(&self, secret: &str, from: Option<&str>) -> Result<TokenCaller>;

    /// `Unauthenticated` once `caller`'s token no longer works (revoked, expired or lapsed
    /// since it was presented, or its maker gone from its reach): for work that outlives the
    /// request's first check, such as a long-poll.
    async fn token_still_live(&self, caller: &TokenCaller) -> Result<()>;
}

struct TokenRow {
    id: uuid::Uuid,
    name: String,
    project: Option<String>,
    scopes: Vec<String>,
    display_prefix: String,
    created_by: String,
    created_at: OffsetDateTime,
    expires_at: OffsetDateTime,
    last_used_at: Option<OffsetDateTime>,
    last_used_from: Option<String>,
    revoked_at: Option<OffsetDateTime>,
    lapses_at: Option<OffsetDateTime>,
}

impl TryFrom<TokenRow> for ApiToken {
    type Error = Error;

    fn try_from(r: TokenRow) -> Result<Self> {
        Ok(ApiToken {
            id: ApiTokenId(r.id),
            name: r.name,
            project: r.project,
            scopes: scopes(&r.scopes)?,
            display_prefix: r.display_prefix,
            created_by: r.created_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
            last_used_at: r.last_used_at,
            last_used_from: r.last_used_from,
            state: TokenState::at(
                r.revoked_at,
                r.expires_at,
                r.lapses_at,
                time::OffsetDateTime::now_utc(),
            ),
            revoked_at: r.revoked_at,
            lapses_at: r.lapses_at,
        })
    }
}

fn scopes(stored: &[String]) -> Result<Vec<TokenScope>> {
    stored
        .iter()
        .map(|s| TokenScope::parse(s).map_err(|e| Error::Corrupt(e.to_string())))
        .collect()
}

async fn token_rows(
    conn: &mut PgConnection,
    tenant: TenantId,
    only_by: Option<UserId>,
    only: Option<ApiTokenId>,
) -> Result<Vec<ApiToken>> {
    let rows = sqlx::query_as!(
        TokenRow,
        r#"SELECT t.id, t.name, p.slug AS "project?", t.scopes, t.display_prefix,
                  u.email AS created_by, t.created_at, t.expires_at, t.last_used_at,
                  t.last_used_from, t.revoked_at, api_token_lapses_at(t) AS lapses_at
           FROM api_tokens t JOIN users u ON u.id = t.created_by
           LEFT JOIN projects p ON p.id = t.project_id
           WHERE t.tenant_id = $1 AND ($2::uuid IS NULL OR t.created_by = $2)
             AND ($3::uuid IS NULL OR t.id = $3)
           ORDER BY t.created_at DESC, t.id
           LIMIT 500"#,
        tenant as TenantId,
        only_by as Option<UserId>,
        only as Option<ApiTokenId>,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(ApiToken::try_from).collect()
}

impl ApiTokensApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(tenant.id = %tenant, user.id = %who.user_id))]
    async fn create_api_token(
        &self,
        who: &Principal,
        tenant: TenantId,
        new: &NewToken,
        request_id: Option<&str>,
    ) -> Result<CreatedToken> {
        let (name, scopes) = check_new(new)?;
        // The proof first: organization admins for any scope, a project's admins for theirs.
        match new.project {
            None => {
                self.tenant_access::<TenantAdmins>(who, tenant).await?;
            }
            Some(project) => {
                let admins = self.project_access::<ProjectAdmins>(who, project).await?;
                if admins.tenant() != tenant {
                    return Err(Error::NotFound { what: "project" });
                }
            }
        }
        if let Err(wait) = self.token_creations().take(&who.user_id.to_string()) {
            return Err(Error::RateLimited {
                retry_after_secs: wait.as_secs().max(1),
            });
        }
        let id = ApiTokenId::new_random();
        let secret = new_secret("gpk_");
        let display_prefix: String = secret.chars().take(12).collect();
        let scope_words: Vec<String> = scopes.iter().map(|s| s.as_str().to_owned()).collect();
        let days = i32::try_from(new.days).unwrap_or(i32::MAX);
        let mut tx = self.pool().begin().await?;
        within_the_cap(&mut tx, tenant, self.token_cap()).await?;
        sqlx::query!(
            r#"INSERT INTO api_tokens (id, tenant_id, project_id, created_by, name, display_prefix,
                                      secret_sha256, scopes, expires_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(days => $9))"#,
            id as ApiTokenId,
            tenant as TenantId,
            new.project as Option<ProjectId>,
            who.user_id as UserId,
            name,
            display_prefix,
            secret_hash(&secret),
            &scope_words[..],
            days,
        )
        .execute(&mut *tx)
        .await?;
        let resource = self.naming().api_token(tenant, new.project, id);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user_id),
                action: "api_token.create",
                resource: &resource,
                before: None,
                after: Some(json!({
                    "token": id,
                    "name": name,
                    "scopes": scope_words,
                    "days": new.days,
                    "prefix": display_prefix,
                })),
                request_id,
            },
        )
        .await?;
        let token = token_rows(&mut tx, tenant, None, Some(id))
            .await?
            .pop()
            .ok_or_else(|| Error::Corrupt(format!("api token {id} vanished")))?;
        tx.commit().await?;
        Ok(CreatedToken { token, secret })
    }

    #[tracing::instrument(skip_all, fields(tenant.id = %tenant, user.id = %who.user_id))]
    async fn api_tokens(&self, who: &Principal, tenant: TenantId) -> Result<Vec<ApiToken>> {
        let member = self.tenant_access::<TenantMembers>(who, tenant).await?;
        let admin = TenantAdmins::ROLES.contains(&member.role());
        token_rows(
            &mut *self.pool().acquire().await?,
            tenant,
            (!admin).then_some(who.user_id),
            None,
        )
        .await
    }

    #[tracing::instrument(skip_all, fields(token.id = %id, user.id = %who.user_id))]
    async fn revoke_api_token(
        &self,
        who: &Principal,
        id: ApiTokenId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"SELECT tenant_id AS "tenant: TenantId", project_id AS "project: ProjectId",
                      created_by AS "created_by: UserId", revoked_at IS NOT NULL AS "revoked!"
               FROM api_tokens WHERE id = $1 FOR UPDATE"#,
            id as ApiTokenId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "token" })?;
        // Its maker may revoke it; otherwise the organization's admins. Anyone else outside
        // the organization learns nothing of it.
        if row.created_by != who.user_id {
            match self.tenant_access::<TenantAdmins>(who, row.tenant).await {
                Ok(_) => {}
                Err(Error::Forbidden { .. }) | Err(Error::NotFound { .. }) => {
                    return Err(Error::NotFound { what: "token" });
                }
                Err(e) => return Err(e),
            }
        }
        if row.revoked {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE api_tokens SET revoked_at = now(), revoked_by = $2, revoked_because = 'revoked'
             WHERE id = $1",
            id as ApiTokenId,
            who.user_id as UserId
        )
        .execute(&mut *tx)
        .await?;
        let resource = self.naming().api_token(row.tenant, row.project, id);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user_id),
                action: "api_token.revoke",
                resource: &resource,
                before: None,
                after: Some(json!({ "token": id })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all)]
    async fn authenticate_token(&self, secret: &str, from: Option<&str>) -> Result<TokenCaller> {
        let caller = match token_caller(self, secret, from).await {
            Err(Error::Unauthenticated) => {
                // Refusals are limited per client address: guessing is hopeless, but each
                // guess is a query.
                if let Some(addr) = from
                    && let Err(wait) = self.api_refusals().take(addr)
                {
                    return Err(Error::RateLimited {
                        retry_after_secs: wait.as_secs().max(1),
                    });
                }
                return Err(Error::Unauthenticated);
            }
            other => other?,
        };
        // One budget per organization, however many tokens it makes.
        if let Err(wait) = self.api_calls().take(&caller.tenant.to_string()) {
            return Err(Error::RateLimited {
                retry_after_secs: wait.as_secs().max(1),
            });
        }
        Ok(caller)
    }

    #[tracing::instrument(skip_all, fields(api_token.id = %caller.token))]
    async fn token_still_live(&self, caller: &TokenCaller) -> Result<()> {
        let live = sqlx::query_scalar!(
            r#"SELECT (revoked_at IS NULL AND expires_at > now()
                       AND coalesce(api_token_lapses_at(t) > now(), true)) AS "live!"
               FROM api_tokens t WHERE id = $1"#,
            caller.token as ApiTokenId
        )
        .fetch_optional(self.pool())
        .await?;
        if live != Some(true) {
            return Err(Error::Unauthenticated);
        }
        maker_still_there(self, &caller.principal, caller.tenant, caller.project).await
    }
}

/// Refuses a new token when `tenant` holds `cap` live ones already. The tenant's row is locked
/// first, so two makers at once can't both take the last place.
async fn within_the_cap(conn: &mut PgConnection, tenant: TenantId, cap: u32) -> Result<()> {
    let live = sqlx::query_scalar!(
        r#"SELECT (SELECT count(*) FROM api_tokens t
                   WHERE t.tenant_id = $1 AND t.revoked_at IS NULL AND t.expires_at > now()
                     AND coalesce(api_token_lapses_at(t) > now(), true)) AS "live!"
           FROM tenants WHERE id = $1 FOR NO KEY UPDATE"#,
        tenant as TenantId
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound {
        what: "organization",
    })?;
    if live >= i64::from(cap) {
        return Err(Error::Conflict(format!(
            "the organization has {live} live API tokens, the most it may hold ({cap}): \
             revoke one it no longer uses first"
        )));
    }
    Ok(())
}

/// Whether the maker of a token in `tenant` (for `project`, or the whole organization) still
/// reaches it: gone from the organization or project, the token is dead.
async fn maker_still_there(
    cp: &ControlPlane,
    principal: &Principal,
    tenant: TenantId,
    project: Option<ProjectId>,
) -> Result<()> {
    let still_there = match project {
        None => cp
            .tenant_access::<TenantMembers>(principal, tenant)
            .await
            .map(|_| ()),
        Some(p) => cp
            .project_access::<ProjectViewers>(principal, p)
            .await
            .map(|_| ()),
    };
    match still_there {
        Ok(()) => Ok(()),
        Err(Error::Forbidden { .. }) | Err(Error::NotFound { .. }) => Err(Error::Unauthenticated),
        Err(e) => Err(e),
    }
}

/// The caller behind `secret`, before rate limits.
async fn token_caller(cp: &ControlPlane, secret: &str, from: Option<&str>) -> Result<TokenCaller> {
    let secret = secret.trim();
    if !secret.starts_with("gpk_") || secret.len() > MAX_SECRET_LEN {
        return Err(Error::Unauthenticated);
    }
    let row = sqlx::query!(
        r#"SELECT id AS "id: ApiTokenId", tenant_id AS "tenant: TenantId",
                      project_id AS "project: ProjectId", created_by AS "created_by: UserId",
                      scopes,
                      (revoked_at IS NULL AND expires_at > now()
                       AND coalesce(api_token_lapses_at(t) > now(), true)) AS "live!",
                      (last_used_at IS NULL
                       OR last_used_at < now() - make_interval(secs => $2)) AS "stale!"
               FROM api_tokens t WHERE secret_sha256 = $1"#,
        secret_hash(secret),
        LAST_USE_GRANULARITY_S as f64,
    )
    .fetch_optional(cp.pool())
    .await?
    .filter(|r| r.live)
    .ok_or(Error::Unauthenticated)?;
    let principal = cp
        .principal(row.created_by)
        .await?
        .ok_or(Error::Unauthenticated)?;
    // Never more than its maker.
    maker_still_there(cp, &principal, row.tenant, row.project).await?;
    if row.stale {
        let from: Option<String> = from.map(|f| f.chars().take(64).collect());
        sqlx::query!(
            "UPDATE api_tokens SET last_used_at = now(), last_used_from = $2
                 WHERE id = $1 AND revoked_at IS NULL",
            row.id as ApiTokenId,
            from
        )
        .execute(cp.pool())
        .await?;
    }
    Ok(TokenCaller {
        token: row.id,
        principal,
        tenant: row.tenant,
        project: row.project,
        scopes: scopes(&row.scopes)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(name: &str, scopes: &[TokenScope], days: u32) -> NewToken {
        NewToken {
            name: name.into(),
            project: None,
            scopes: scopes.to_vec(),
            days,
        }
    }

    #[test]
    fn a_new_token_is_checked_field_by_field() {
        let ok = check_new(&new(
            " ci ",
            &[TokenScope::Launch, TokenScope::Read, TokenScope::Read],
            30,
        ))
        .unwrap();
        assert_eq!(
            ok,
            ("ci".into(), vec![TokenScope::Read, TokenScope::Launch])
        );
        for (bad, field) in [
            (new("", &[TokenScope::Read], 30), "name"),
            (new(&"x".repeat(65), &[TokenScope::Read], 30), "name"),
            (new("a\u{7}b", &[TokenScope::Read], 30), "name"),
            (new("ci", &[], 30), "scopes"),
            (new("ci", &[TokenScope::Read], 0), "days"),
            (new("ci", &[TokenScope::Read], MAX_TOKEN_DAYS + 1), "days"),
        ] {
            match check_new(&bad) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
