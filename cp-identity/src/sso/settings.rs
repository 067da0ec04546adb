//! An organization's identity provider as its admins set it: the issuer and client, the
//! email domains and their DNS proofs, the role mappings, how long API tokens may sit idle.

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;

use super::{SsoApi, SsoInternal, secret_place};
use crate::tenancy::TenantRole;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::db::OnConstraint;
use cp_base::error::SsoError;
use cp_base::error::{Error, Result};
use cp_base::ids::TenantId;

/// What the control plane offers for an organization's identity-provider settings.
#[allow(async_fn_in_trait)]
pub trait SsoSettingsApi {
    async fn provider_settings(
        &self,
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
    ) -> Result<Option<ProviderSettings>>;

    /// Checks the DNS proof of one of the tenant's pending domains and, if the TXT record is
    /// there, marks the domain verified (audited). Idempotent for a verified domain. Limited
    /// per tenant ([`Error::RateLimited`]), as each check is a DNS lookup.
    async fn verify_domain(
        &self,
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
        domain: &str,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Registers or updates the tenant's provider. The issuer must answer OpenID discovery
    /// (checked before anything is written). A new domain is claimed pending until proved
    /// ([`ControlPlane::verify_domain`]); one another organization has verified is refused, and
    /// so are the platform's own (the schema's `tenant_email_domains_guard`).
    async fn save_provider(
        &self,
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
        update: ProviderUpdate,
        request_id: Option<&str>,
    ) -> Result<()>;
}

impl SsoSettingsApi for ControlPlane {
    async fn provider_settings(
        &self,
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
    ) -> Result<Option<ProviderSettings>> {
        let Some(p) = sqlx::query!(
            "SELECT issuer_url, client_id, role_claim, default_role, token_idle_days
             FROM identity_providers WHERE tenant_id = $1",
            who.id() as TenantId
        )
        .fetch_optional(self.pool())
        .await?
        else {
            return Ok(None);
        };
        let domains = self.domain_claims(who.id()).await?;
        let mappings = sqlx::query!(
            "SELECT claim_value, role FROM identity_provider_role_mappings WHERE tenant_id = $1 ORDER BY claim_value",
            who.id() as TenantId
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|m| (m.claim_value, m.role))
        .collect();
        Ok(Some(ProviderSettings {
            issuer_url: p.issuer_url,
            client_id: p.client_id,
            domains,
            role_claim: p.role_claim,
            default_role: p.default_role,
            mappings,
            token_idle_days: u32::try_from(p.token_idle_days)
                .map_err(|_| Error::Corrupt(format!("token_idle_days {}", p.token_idle_days)))?,
        }))
    }

    #[tracing::instrument(skip(self, who), fields(tenant.id = %who.id()))]
    async fn verify_domain(
        &self,
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
        domain: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let domain = check_domain(domain)?;
        let claim = self
            .domain_claims(who.id())
            .await?
            .into_iter()
            .find(|c| c.domain == domain)
            .ok_or(Error::NotFound {
                what: "email domain",
            })?;
        if claim.verified.is_some() {
            return Ok(());
        }
        let key = who.id().to_string();
        self.domain_checks()
            .take(&key)
            .map_err(|wait| cp_base::ratelimit::refused("domain check", &key, wait))?;
        // Network first, outside any transaction.
        let token = claim
            .record_value
            .strip_prefix(cp_base::dns::CHALLENGE_PREFIX)
            .unwrap_or_default();
        match self.dns().txt(&claim.record_name).await {
            cp_base::dns::TxtAnswer::Found(found) if cp_base::dns::proves(&found, token) => {}
            cp_base::dns::TxtAnswer::Found(_) | cp_base::dns::TxtAnswer::None => {
                return Err(Error::Conflict(format!(
                    "no TXT record {:?} at {} yet; DNS changes can take a few minutes to show, so check again later",
                    claim.record_value, claim.record_name
                )));
            }
            cp_base::dns::TxtAnswer::Failed(why) => {
                return Err(Error::Conflict(format!(
                    "the DNS lookup of {} failed ({why}); try again in a minute",
                    claim.record_name
                )));
            }
        }
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query!(
            "UPDATE tenant_email_domains SET verified_at = now(), verified_via = 'dns'
             WHERE tenant_id = $1 AND domain = $2 AND verified_at IS NULL",
            who.id() as TenantId,
            domain,
        )
        .execute(&mut *tx)
        .await
        .on_constraint("tenant_email_domains_verified_key", || {
            Error::Conflict(format!(
                "the domain {domain} is already used by another organization"
            ))
        })?
        .rows_affected();
        if updated == 1 {
            audit::record(
                &mut tx,
                AuditEntry {
                    actor: Actor::User(who.user()),
                    action: "email_domain.verify",
                    resource: &self.naming().tenant(who.id()),
                    before: None,
                    after: Some(json!({ "domain": domain, "via": "dns" })),
                    request_id,
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn save_provider(
        &self,
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
        update: ProviderUpdate,
        request_id: Option<&str>,
    ) -> Result<()> {
        let valid = ValidProvider::check(&update)?;
        let secret = secret_to_keep(self, who, &update).await?;
        // Network first, outside any transaction; never into the platform's own network.
        issuer_answers(self, &valid.issuer).await?;
        let before = self.provider_settings(who).await?;
        let mut tx = self.pool().begin().await?;
        upsert_provider(self, &mut tx, who, &valid, &update, &secret).await?;
        claim_domains(&mut tx, who.id(), &valid.domains).await?;
        replace_role_mappings(&mut tx, who.id(), &update.mappings).await?;
        record_provider_saved(self, &mut tx, who, &valid, &update, before, request_id).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The client secret to store: the one given, else the one stored (a provider is registered
/// with one).
async fn secret_to_keep(
    cp: &ControlPlane,
    who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
    update: &ProviderUpdate,
) -> Result<String> {
    let existing_secret = sqlx::query_scalar!(
        "SELECT client_secret FROM identity_providers WHERE tenant_id = $1",
        who.id() as TenantId
    )
    .fetch_optional(cp.pool())
    .await?;
    match (
        update.client_secret.clone().filter(|s| !s.is_empty()),
        existing_secret,
    ) {
        (Some(s), _) => Ok(s),
        (None, Some(stored)) => cp.open_secret(who.id(), &stored),
        (None, None) => Err(Error::Invalid {
            field: "client_secret",
            reason: "required when registering a provider".into(),
        }),
    }
}

/// The issuer is somewhere the portal may call, and answers OpenID discovery.
async fn issuer_answers(cp: &ControlPlane, issuer: &str) -> Result<()> {
    cp.http().check(issuer).await.map_err(|e| Error::Invalid {
        field: "issuer_url",
        reason: e.to_string(),
    })?;
    cp.discover(issuer).await.map_err(|e| match e {
        Error::Sso(SsoError::IssuerUnreachable { issuer }) => Error::Invalid {
            field: "issuer_url",
            reason: format!(
                "{issuer} does not answer OpenID discovery (/.well-known/openid-configuration)"
            ),
        },
        other => other,
    })?;
    Ok(())
}

/// The provider's row, its secret sealed to this organization.
async fn upsert_provider(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
    valid: &ValidProvider,
    update: &ProviderUpdate,
    secret: &str,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO identity_providers (tenant_id, issuer_url, client_id, client_secret, role_claim,
                                         default_role, token_idle_days)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tenant_id) DO UPDATE SET issuer_url = EXCLUDED.issuer_url,
             client_id = EXCLUDED.client_id, client_secret = EXCLUDED.client_secret,
             role_claim = EXCLUDED.role_claim, default_role = EXCLUDED.default_role,
             token_idle_days = EXCLUDED.token_idle_days, updated_at = now()",
        who.id() as TenantId,
        valid.issuer,
        valid.client_id,
        cp.secrets().seal(secret, &secret_place(who.id())),
        valid.role_claim,
        update.default_role.as_str(),
        update.token_idle_days as i32,
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The organization's email domains: claims kept keep their proof, dropped ones go, new ones
/// start pending; a domain another organization proved is refused.
async fn claim_domains(
    conn: &mut PgConnection,
    tenant: TenantId,
    domains: &[String],
) -> Result<()> {
    sqlx::query!(
        "DELETE FROM tenant_email_domains WHERE tenant_id = $1 AND NOT (domain = ANY($2))",
        tenant as TenantId,
        domains,
    )
    .execute(&mut *conn)
    .await?;
    for d in domains {
        let taken = sqlx::query_scalar!(
            r#"SELECT EXISTS (SELECT 1 FROM tenant_email_domains
                              WHERE domain = $1 AND tenant_id <> $2 AND verified_at IS NOT NULL)
               AS "taken!""#,
            d,
            tenant as TenantId
        )
        .fetch_one(&mut *conn)
        .await?;
        if taken {
            return Err(Error::Conflict(format!(
                "the domain {d} is already used by another organization"
            )));
        }
        sqlx::query!(
            "INSERT INTO tenant_email_domains (domain, tenant_id, verification_token)
             VALUES ($1, $2, $3) ON CONFLICT (tenant_id, domain) DO NOTHING",
            d,
            tenant as TenantId,
            cp_base::dns::new_token(),
        )
        .execute(&mut *conn)
        .await
        .on_constraint("tenant_email_domains_platform", || Error::Invalid {
            field: "domains",
            reason: format!("{d} is the platform's own domain and can't be claimed"),
        })?;
    }
    Ok(())
}

/// The group-to-role mappings, replaced whole.
async fn replace_role_mappings(
    conn: &mut PgConnection,
    tenant: TenantId,
    mappings: &[(String, TenantRole)],
) -> Result<()> {
    sqlx::query!(
        "DELETE FROM identity_provider_role_mappings WHERE tenant_id = $1",
        tenant as TenantId
    )
    .execute(&mut *conn)
    .await?;
    for (value, role) in mappings {
        sqlx::query!(
            "INSERT INTO identity_provider_role_mappings (tenant_id, claim_value, role)
             VALUES ($1, $2, $3) ON CONFLICT (tenant_id, claim_value) DO UPDATE SET role = EXCLUDED.role",
            tenant as TenantId,
            value.trim(),
            role.as_str()
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The audit record: the settings before and after, and whether a new secret was given
/// (never what it is).
async fn record_provider_saved(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
    valid: &ValidProvider,
    update: &ProviderUpdate,
    before: Option<ProviderSettings>,
    request_id: Option<&str>,
) -> Result<()> {
    let secret_submitted = update.client_secret.as_ref().is_some_and(|s| !s.is_empty());
    let resource = cp.naming().tenant(who.id());
    let after = json!({
        "issuer_url": valid.issuer, "client_id": valid.client_id, "domains": valid.domains,
        "role_claim": valid.role_claim, "default_role": update.default_role.as_str(),
        "token_idle_days": update.token_idle_days,
        "mappings": update.mappings.iter().map(|(v, r)| (v.clone(), r.as_str())).collect::<Vec<_>>(),
        "new_secret": secret_submitted,
    });
    audit::record(
        &mut *conn,
        AuditEntry {
            actor: Actor::User(who.user()),
            action: "identity_provider.save",
            resource: &resource,
            before: before.map(|b| {
                json!({
                    "issuer_url": b.issuer_url, "client_id": b.client_id,
                    "domains": b.domains.iter().map(|c| &c.domain).collect::<Vec<_>>(),
                    "role_claim": b.role_claim, "default_role": b.default_role,
                    "token_idle_days": b.token_idle_days,
                    "mappings": b.mappings,
                })
            }),
            after: Some(after),
            request_id,
        },
    )
    .await?;
    Ok(())
}

/// A tenant's provider settings as its admins see them (never the secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSettings {
    pub issuer_url: String,
    pub client_id: String,
    /// Every domain claimed, verified or not, by name.
    pub domains: Vec<DomainClaim>,
    pub role_claim: String,
    pub default_role: String,
    /// (claim value, tenant role)
    pub mappings: Vec<(String, String)>,
    /// Days after its maker's last sign-in here at which an API token lapses.
    pub token_idle_days: u32,
}

/// An email domain a tenant claims. Only once verified does single sign-on route it here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainClaim {
    pub domain: String,
    /// When and how it was proved (`dns`, `operator`, `before_verification`); `None`: pending.
    pub verified: Option<(time::OffsetDateTime, String)>,
    /// The TXT record that proves it: its name and its value.
    pub record_name: String,
    pub record_value: String,
}

/// What an admin submits. `client_secret: None` keeps the stored one.
#[derive(Clone, Debug)]
pub struct ProviderUpdate {
    pub issuer_url: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub domains: Vec<String>,
    pub role_claim: String,
    pub default_role: TenantRole,
    pub mappings: Vec<(String, TenantRole)>,
    /// 1 to [`MAX_TOKEN_IDLE_DAYS`].
    pub token_idle_days: u32,
}

/// How long an organization may let its people's API tokens work without them signing in.
pub const MAX_TOKEN_IDLE_DAYS: u32 = 365;

/// An API token's idle period where the organization sets none.
pub const TOKEN_IDLE_DAYS: u32 = 30;

/// A provider update checked field by field, before anything is read, fetched or written.
#[derive(Debug, PartialEq, Eq)]
struct ValidProvider {
    /// Without a trailing slash.
    issuer: String,
    client_id: String,
    /// Lowercase, without `@`, sorted, each once.
    domains: Vec<String>,
    role_claim: String,
}

impl ValidProvider {
    fn check(update: &ProviderUpdate) -> Result<Self> {
        let issuer = update.issuer_url.trim().trim_end_matches('/').to_string();
        if issuer.is_empty() || issuer.len() > 500 {
            return Err(Error::Invalid {
                field: "issuer_url",
                reason: "use the provider's https:// issuer URL (at most 500 characters)".into(),
            });
        }
        let client_id = update.client_id.trim().to_string();
        if client_id.is_empty() || client_id.len() > 255 {
            return Err(Error::Invalid {
                field: "client_id",
                reason: "use 1 to 255 characters".into(),
            });
        }
        if update
            .client_secret
            .as_ref()
            .is_some_and(|s| s.len() > 1024)
        {
            return Err(Error::Invalid {
                field: "client_secret",
                reason: "use at most 1024 characters".into(),
            });
        }
        if let Some((value, _)) = update
            .mappings
            .iter()
            .find(|(v, _)| v.trim().is_empty() || v.trim().len() > 255)
        {
            return Err(Error::Invalid {
                field: "mappings",
                reason: format!("{:?}: a claim value has 1 to 255 characters", value.trim()),
            });
        }
        let mut domains = update
            .domains
            .iter()
            .filter(|d| !d.trim().is_empty())
            .map(|d| check_domain(d))
            .collect::<Result<Vec<_>>>()?;
        domains.sort();
        domains.dedup();
        if domains.is_empty() {
            return Err(Error::Invalid {
                field: "domains",
                reason: "name at least one email domain whose people sign in here".into(),
            });
        }
        let role_claim = update.role_claim.trim().to_string();
        if role_claim.is_empty()
            || role_claim.len() > 64
            || !role_claim
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
        {
            return Err(Error::Invalid {
                field: "role_claim",
                reason: format!("{role_claim:?}: use a claim name such as groups"),
            });
        }
        if !(1..=MAX_TOKEN_IDLE_DAYS).contains(&update.token_idle_days) {
            return Err(Error::Invalid {
                field: "token_idle_days",
                reason: format!(
                    "{}: an API token lapses 1 to {MAX_TOKEN_IDLE_DAYS} days after its maker's last sign-in",
                    update.token_idle_days
                ),
            });
        }
        if update.default_role == TenantRole::Owner {
            return Err(Error::Invalid {
                field: "default_role",
                reason: "owner can't be the default; map a group to owner instead".into(),
            });
        }
        Ok(ValidProvider {
            issuer,
            client_id,
            domains,
            role_claim,
        })
    }
}

fn check_domain(d: &str) -> Result<String> {
    let d = d.trim().trim_start_matches('@').to_lowercase();
    let tld_ok = d
        .rsplit('.')
        .next()
        .is_some_and(|t| (2..=63).contains(&t.len()) && t.chars().all(|c| c.is_ascii_lowercase()));
    let labels_ok = tld_ok
        && d.split('.').count() >= 2
        && d.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if labels_ok {
        Ok(d)
    } else {
        Err(Error::Invalid {
            field: "domains",
            reason: format!("{d:?} is not an email domain"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update() -> ProviderUpdate {
        ProviderUpdate {
            issuer_url: " https://id.acme.example/ ".into(),
            client_id: "portal".into(),
            client_secret: None,
            domains: vec![
                "@Acme.example".into(),
                "".into(),
                "acme.example".into(),
                "lab.acme.example".into(),
            ],
            role_claim: "groups".into(),
            default_role: TenantRole::Member,
            mappings: vec![("gpu-admins".into(), TenantRole::Admin)],
            token_idle_days: TOKEN_IDLE_DAYS,
        }
    }

    #[test]
    fn a_provider_update_is_checked_and_normalised_before_anything_is_fetched() {
        assert_eq!(
            ValidProvider::check(&update()).unwrap(),
            ValidProvider {
                issuer: "https://id.acme.example".into(),
                client_id: "portal".into(),
                domains: vec!["acme.example".into(), "lab.acme.example".into()],
                role_claim: "groups".into(),
            }
        );
        let field = |u: ProviderUpdate| match ValidProvider::check(&u) {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let with = |f: &dyn Fn(&mut ProviderUpdate)| {
            let mut u = update();
            f(&mut u);
            u
        };
        assert_eq!(field(with(&|u| u.issuer_url = " / ".into())), "issuer_url");
        assert_eq!(field(with(&|u| u.client_id = "x".repeat(256))), "client_id");
        assert_eq!(
            field(with(&|u| u.client_secret = Some("s".repeat(1025)))),
            "client_secret"
        );
        assert_eq!(
            field(with(&|u| u.mappings = vec![(" ".into(), TenantRole::Admin)])),
            "mappings"
        );
        assert_eq!(field(with(&|u| u.domains = vec![" ".into()])), "domains");
        assert_eq!(
            field(with(&|u| u.domains = vec!["localhost".into()])),
            "domains"
        );
        assert_eq!(field(with(&|u| u.role_claim = "a b".into())), "role_claim");
        assert_eq!(
            field(with(&|u| u.default_role = TenantRole::Owner)),
            "default_role"
        );
        assert_eq!(field(with(&|u| u.token_idle_days = 0)), "token_idle_days");
        assert_eq!(
            field(with(&|u| u.token_idle_days = MAX_TOKEN_IDLE_DAYS + 1)),
            "token_idle_days"
        );
        // At the limits, accepted.
        assert!(ValidProvider::check(&with(&|u| u.client_secret = Some("s".repeat(1024)))).is_ok());
        assert!(ValidProvider::check(&with(&|u| u.client_id = "x".repeat(255))).is_ok());
    }
}
