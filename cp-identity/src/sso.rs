//! Single sign-on: each tenant's own OpenID provider, authorization code flow with PKCE (S256),
//! state and nonce; ID tokens verified for signature, issuer, audience, expiry and nonce.
//!
//! The flow has two halves with the browser's trip to the provider in between. [`begin`]
//! returns the provider URL and a [`PendingSso`] that the caller keeps in the (pre-sign-in)
//! session; [`complete`] takes it back with what the provider returned. No network call
//! happens inside a database transaction.
//!
//! [`begin`]: ControlPlane::sso_begin
//! [`complete`]: ControlPlane::sso_complete

use crate::auth::AuthApi;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use openidconnect::core::{
    CoreAuthDisplay, CoreClaimName, CoreClaimType, CoreClient, CoreClientAuthMethod, CoreGrantType,
    CoreIdToken, CoreIdTokenVerifier, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm, CoreResponseMode, CoreResponseType, CoreSubjectIdentifierType,
};
use openidconnect::{
    AdditionalProviderMetadata, AuthenticationFlow, AuthorizationCode, ClaimsVerificationError,
    ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl,
    Nonce, PkceCodeChallenge, PkceCodeVerifier, ProviderMetadata, RedirectUrl, Scope,
    TokenResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;

use crate::auth::{Principal, email_domain, normalize_email};
use crate::tenancy::TenantRole;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::db::OnConstraint;
use cp_base::error::{Error, Result};
pub use cp_base::error::{SsoError, TokenProblem};
use cp_base::ids::{TenantId, UserId};

/// How long a started sign-in may take before its callback is refused.
pub const PENDING_TTL: Duration = Duration::from_secs(600);

/// A sign-in in progress: kept server-side in the session between the two halves.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingSso {
    pub tenant: TenantId,
    state: String,
    nonce: String,
    pkce_verifier: String,
    /// Seconds since the Unix epoch.
    started_at: u64,
}

pub struct SsoStart {
    /// Send the browser here.
    pub authorize_url: String,
    /// Keep this in the session until the callback.
    pub pending: PendingSso,
}

/// A completed sign-in.
pub struct SsoSignIn {
    pub principal: Principal,
    pub tenant: TenantId,
}

/// The provider metadata we read: the core set plus `end_session_endpoint`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct LogoutMetadata {
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
}
impl AdditionalProviderMetadata for LogoutMetadata {}

type Metadata = ProviderMetadata<
    LogoutMetadata,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// A client built from discovery: authorization endpoint set; token and userinfo maybe.
type DiscoveredClient = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// A tenant's provider as stored.
pub(crate) struct Provider {
    tenant: TenantId,
    issuer_url: String,
    client_id: String,
    client_secret: String,
    role_claim: String,
    default_role: TenantRole,
}

/// What a verified ID token says about the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedIdentity {
    pub issuer: String,
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: bool,
    pub name: Option<String>,
    /// The values of the provider's role claim (a string or an array of strings).
    pub role_claim_values: Vec<String>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Checks an ID token (signature, issuer, audience, expiry, nonce) and reads the identity.
/// The role claim is read from the payload only after the signature has been verified.
pub fn verify_id_token(
    verifier: &CoreIdTokenVerifier<'_>,
    id_token: &CoreIdToken,
    nonce: &Nonce,
    role_claim: &str,
) -> Result<VerifiedIdentity, SsoError> {
    let claims = id_token.claims(verifier, nonce).map_err(|e| {
        SsoError::TokenRejected(match e {
            ClaimsVerificationError::Expired(_) => TokenProblem::Expired,
            ClaimsVerificationError::InvalidAudience(_) => TokenProblem::WrongAudience,
            ClaimsVerificationError::InvalidIssuer(_) => TokenProblem::WrongIssuer,
            ClaimsVerificationError::InvalidNonce(_) => TokenProblem::WrongNonce,
            ClaimsVerificationError::SignatureVerification(_) => TokenProblem::BadSignature,
            other => TokenProblem::Other(other.to_string()),
        })
    })?;
    let raw = id_token.to_string();
    let payload = raw
        .split('.')
        .nth(1)
        .and_then(|p| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        })
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or_default();
    let role_claim_values = match payload.get(role_claim) {
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    Ok(VerifiedIdentity {
        issuer: claims.issuer().to_string(),
        subject: claims.subject().to_string(),
        email: claims.email().map(|e| e.to_string()),
        email_verified: claims.email_verified().unwrap_or(false),
        name: claims
            .name()
            .and_then(|n| n.get(None))
            .map(|n| n.to_string()),
        role_claim_values,
    })
}

/// Where a tenant's client secret is kept: what its sealing is bound to.
pub fn secret_place(tenant: TenantId) -> String {
    format!("identity_providers.client_secret:{tenant}")
}

/// The most privileged tenant role among `mapped` (`TenantRole::ALL` runs from most to
/// least privileged), else `default`.
fn strongest_role(mapped: impl Iterator<Item = TenantRole>, default: TenantRole) -> TenantRole {
    mapped
        .min_by_key(|r| TenantRole::ALL.iter().position(|o| o == r))
        .unwrap_or(default)
}

/// What the control plane offers for each organization's single sign-on.
#[allow(async_fn_in_trait)]
pub trait SsoApi {
    /// Seals again every client secret not sealed with the current key: the plain-text ones
    /// stored before sealing existed, and those an older key sealed (key rotation). Run at
    /// start by every replica; idempotent. Returns how many were re-sealed.
    async fn reseal_secrets(&self) -> Result<u64>;

    /// Fetches the provider's discovery document. An unreachable or malformed issuer is
    /// [`SsoError::IssuerUnreachable`]; the cause is logged.
    async fn discover(&self, issuer: &str) -> Result<Metadata>;

    /// First half: finds the tenant that owns the email's domain and builds the provider
    /// URL to send the browser to. Limited per client address ([`Error::RateLimited`]),
    /// before anything is read, fetched or written.
    async fn sso_begin(
        &self,
        email: &str,
        redirect_url: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<SsoStart>;

    /// Second half: checks the returned state against the pending sign-in, exchanges the code
    /// (with the PKCE verifier), verifies the ID token, and signs the person in, creating
    /// their user and membership on first sign-in.
    async fn sso_complete(
        &self,
        pending: PendingSso,
        returned_state: &str,
        code: &str,
        redirect_url: &str,
    ) -> Result<SsoSignIn>;

    /// The provider's end-session URL for a user signed in through `tenant`, if it has one.
    /// It names the client, not the ID token: the portal keeps no raw ID token (RP-Initiated
    /// Logout allows `client_id` in place of `id_token_hint`; the provider then confirms).
    async fn sso_logout_url(
        &self,
        tenant: TenantId,
        post_logout_redirect: &str,
    ) -> Result<Option<String>>;

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

impl SsoApi for ControlPlane {
    #[tracing::instrument(skip(self))]
    async fn reseal_secrets(&self) -> Result<u64> {
        let current = self.secrets().current().to_string();
        let rows = sqlx::query!(
            r#"SELECT tenant_id AS "tenant: TenantId", client_secret FROM identity_providers"#
        )
        .fetch_all(self.pool())
        .await?;
        let mut resealed = 0;
        for r in rows {
            if cp_base::secrets::Keyring::sealed_with(&r.client_secret) == Some(current.as_str()) {
                continue;
            }
            let plain = self.open_secret(r.tenant, &r.client_secret)?;
            let sealed = self.secrets().seal(&plain, &secret_place(r.tenant));
            // Only if nobody changed it meanwhile (another replica re-sealing, an admin saving).
            resealed += sqlx::query!(
                "UPDATE identity_providers SET client_secret = $2 WHERE tenant_id = $1 AND client_secret = $3",
                r.tenant as TenantId,
                sealed,
                r.client_secret
            )
            .execute(self.pool())
            .await?
            .rows_affected();
        }
        if resealed > 0 {
            tracing::info!(secrets.resealed = resealed, secrets.key = %current, "client secrets re-sealed");
        }
        Ok(resealed)
    }

    #[tracing::instrument(skip(self))]
    async fn discover(&self, issuer: &str) -> Result<Metadata> {
        let url = IssuerUrl::new(issuer.to_string()).map_err(|e| Error::Invalid {
            field: "issuer_url",
            reason: e.to_string(),
        })?;
        Metadata::discover_async(url, self.http())
            .await
            .map_err(|e| {
                tracing::warn!(sso.issuer = issuer, error.cause = %e, "OIDC discovery failed");
                Error::Sso(SsoError::IssuerUnreachable {
                    issuer: issuer.to_string(),
                })
            })
    }

    #[tracing::instrument(skip(self))]
    async fn sso_begin(
        &self,
        email: &str,
        redirect_url: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<SsoStart> {
        let address = cp_base::ratelimit::address_key(client);
        self.sign_in_limits()
            .sso_starts
            .take(&address)
            .map_err(|wait| cp_base::ratelimit::refused("single sign-on start", &address, wait))?;
        let email = normalize_email(email)?;
        let domain = email_domain(&email).to_string();
        let provider = self
            .provider_for_domain(&domain)
            .await?
            .ok_or(Error::Sso(SsoError::UnknownDomain { domain }))?;
        let metadata = self.discover(&provider.issuer_url).await?;
        let client = Self::client(metadata, &provider, redirect_url)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .add_scope(Scope::new(provider.role_claim.clone()))
            .add_extra_param("login_hint", email.clone())
            .set_pkce_challenge(challenge)
            .url();
        Ok(SsoStart {
            authorize_url: url.to_string(),
            pending: PendingSso {
                tenant: provider.tenant,
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                pkce_verifier: verifier.secret().clone(),
                started_at: now_secs(),
            },
        })
    }

    #[tracing::instrument(skip_all, fields(tenant.id = %pending.tenant))]
    async fn sso_complete(
        &self,
        pending: PendingSso,
        returned_state: &str,
        code: &str,
        redirect_url: &str,
    ) -> Result<SsoSignIn> {
        if !constant_time_eq(pending.state.as_bytes(), returned_state.as_bytes()) {
            return Err(SsoError::StateMismatch.into());
        }
        if now_secs().saturating_sub(pending.started_at) > PENDING_TTL.as_secs() {
            return Err(SsoError::PendingExpired.into());
        }
        let provider = self.provider_for_tenant(pending.tenant).await?;
        let metadata = self.discover(&provider.issuer_url).await?;
        let client = Self::client(metadata, &provider, redirect_url)?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| Error::Sso(SsoError::ProviderRefused(e.to_string())))?
            .set_pkce_verifier(PkceCodeVerifier::new(pending.pkce_verifier.clone()))
            .request_async(self.http())
            .await
            .map_err(|e| {
                tracing::warn!(error.cause = %e, "OIDC code exchange failed");
                Error::Sso(SsoError::ProviderRefused(token_error_summary(&e)))
            })?;
        let id_token = response
            .id_token()
            .ok_or(Error::Sso(SsoError::TokenRejected(TokenProblem::Missing)))?;
        let identity = verify_id_token(
            &client.id_token_verifier(),
            id_token,
            &Nonce::new(pending.nonce.clone()),
            &provider.role_claim,
        )?;
        let principal = self.sign_in_identity(&provider, &identity).await?;
        Ok(SsoSignIn {
            principal,
            tenant: provider.tenant,
        })
    }

    async fn sso_logout_url(
        &self,
        tenant: TenantId,
        post_logout_redirect: &str,
    ) -> Result<Option<String>> {
        let provider = self.provider_for_tenant(tenant).await?;
        let metadata = self.discover(&provider.issuer_url).await?;
        let Some(endpoint) = metadata.additional_metadata().end_session_endpoint.clone() else {
            return Ok(None);
        };
        let mut url = reqwest::Url::parse(&endpoint).map_err(|e| {
            Error::Corrupt(format!("provider end_session_endpoint {endpoint:?}: {e}"))
        })?;
        url.query_pairs_mut()
            .append_pair("post_logout_redirect_uri", post_logout_redirect)
            .append_pair("client_id", &provider.client_id);
        Ok(Some(url.to_string()))
    }

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

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait SsoInternal {
    async fn provider_for_domain(&self, domain: &str) -> Result<Option<Provider>>;

    async fn provider_for_tenant(&self, tenant: TenantId) -> Result<Provider>;

    async fn provider(&self, tenant: TenantId) -> Result<Option<Provider>>;

    /// A stored client secret, opened. One stored before secrets were sealed (and not yet
    /// re-sealed by [`ControlPlane::reseal_secrets`]) is read as it is.
    fn open_secret(&self, tenant: TenantId, stored: &str) -> Result<String>;

    fn client(
        metadata: Metadata,
        provider: &Provider,
        redirect_url: &str,
    ) -> Result<DiscoveredClient>;

    /// Links the identity to a user (creating one on first sign-in) and sets the tenant role
    /// the provider's claims map to. One transaction; audited when something changes.
    async fn sign_in_identity(
        &self,
        provider: &Provider,
        identity: &VerifiedIdentity,
    ) -> Result<Principal>;

    async fn account_ties(
        &self,
        tx: &mut sqlx::PgConnection,
        user: UserId,
        tenant: TenantId,
    ) -> Result<AccountTies>;

    async fn domain_claims(&self, tenant: TenantId) -> Result<Vec<DomainClaim>>;
}

impl SsoInternal for ControlPlane {
    async fn provider_for_domain(&self, domain: &str) -> Result<Option<Provider>> {
        let tenant = sqlx::query_scalar!(
            r#"SELECT tenant_id AS "tenant: TenantId" FROM tenant_email_domains
               WHERE domain = $1 AND verified_at IS NOT NULL"#,
            domain
        )
        .fetch_optional(self.pool())
        .await?;
        match tenant {
            Some(t) => self.provider(t).await,
            None => Ok(None),
        }
    }

    async fn provider_for_tenant(&self, tenant: TenantId) -> Result<Provider> {
        self.provider(tenant).await?.ok_or(Error::NotFound {
            what: "identity provider",
        })
    }

    async fn provider(&self, tenant: TenantId) -> Result<Option<Provider>> {
        let row = sqlx::query!(
            r#"SELECT tenant_id AS "tenant: TenantId", issuer_url, client_id, client_secret,
                      role_claim, default_role
               FROM identity_providers WHERE tenant_id = $1"#,
            tenant as TenantId
        )
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(Provider {
                tenant: r.tenant,
                issuer_url: r.issuer_url,
                client_id: r.client_id,
                client_secret: self.open_secret(r.tenant, &r.client_secret)?,
                role_claim: r.role_claim,
                default_role: TenantRole::parse(&r.default_role)?,
            })
        })
        .transpose()
    }

    fn open_secret(&self, tenant: TenantId, stored: &str) -> Result<String> {
        match self.secrets().open(stored, &secret_place(tenant)) {
            Ok(plain) => Ok(plain),
            Err(cp_base::secrets::SecretsError::NotSealed) => Ok(stored.to_string()),
            Err(e) => Err(Error::Corrupt(format!(
                "identity provider client secret of tenant {tenant}: {e}"
            ))),
        }
    }

    fn client(
        metadata: Metadata,
        provider: &Provider,
        redirect_url: &str,
    ) -> Result<DiscoveredClient> {
        let redirect = RedirectUrl::new(redirect_url.to_string()).map_err(|e| Error::Invalid {
            field: "redirect_url",
            reason: e.to_string(),
        })?;
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(provider.client_id.clone()),
            Some(ClientSecret::new(provider.client_secret.clone())),
        )
        .set_redirect_uri(redirect))
    }

    async fn sign_in_identity(
        &self,
        provider: &Provider,
        identity: &VerifiedIdentity,
    ) -> Result<Principal> {
        let email = match (&identity.email, identity.email_verified) {
            (Some(e), true) => normalize_email(e).map_err(|_| SsoError::MissingEmail)?,
            _ => return Err(SsoError::MissingEmail.into()),
        };
        if !crate::tenancy::tenant_owns_domain(self.pool(), provider.tenant, email_domain(&email))
            .await?
        {
            return Err(SsoError::EmailNotAllowed { email }.into());
        }
        let role = role_from_claims(self, provider, identity).await?;
        let name = identity
            .name
            .clone()
            .map(|n| n.trim().chars().take(200).collect::<String>())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| email.clone());

        let mut tx = self.pool().begin().await?;
        let user = user_of_identity(self, &mut tx, provider, identity, &email, &name).await?;
        sync_membership(self, &mut tx, provider.tenant, user, &role).await?;
        crate::tenancy::accept_invitations(&mut tx, self, provider.tenant, user, &email).await?;
        tx.commit().await?;
        self.principal(user)
            .await?
            .ok_or(Error::Corrupt("user vanished right after sign-in".into()))
    }

    async fn account_ties(
        &self,
        tx: &mut sqlx::PgConnection,
        user: UserId,
        tenant: TenantId,
    ) -> Result<AccountTies> {
        let r = sqlx::query!(
            r#"SELECT u.platform_role IS NOT NULL
                      OR EXISTS (SELECT 1 FROM break_glass_credentials c WHERE c.user_id = u.id)
                      AS "staff!",
                      EXISTS (SELECT 1 FROM tenant_memberships m WHERE m.user_id = u.id AND m.tenant_id <> $2)
                      OR EXISTS (SELECT 1 FROM user_identities i WHERE i.user_id = u.id AND i.tenant_id <> $2)
                      AS "elsewhere!",
                      EXISTS (SELECT 1 FROM tenant_memberships m WHERE m.user_id = u.id AND m.tenant_id = $2)
                      OR EXISTS (SELECT 1 FROM user_identities i WHERE i.user_id = u.id AND i.tenant_id = $2)
                      AS "here!"
               FROM users u WHERE u.id = $1"#,
            user as UserId,
            tenant as TenantId,
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(AccountTies {
            staff: r.staff,
            elsewhere: r.elsewhere,
            here: r.here,
        })
    }

    async fn domain_claims(&self, tenant: TenantId) -> Result<Vec<DomainClaim>> {
        Ok(sqlx::query!(
            "SELECT domain, verification_token, verified_at, verified_via
             FROM tenant_email_domains WHERE tenant_id = $1 ORDER BY domain",
            tenant as TenantId
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|r| DomainClaim {
            record_name: cp_base::dns::challenge_name(&r.domain),
            record_value: cp_base::dns::challenge_value(&r.verification_token),
            domain: r.domain,
            verified: r.verified_at.zip(r.verified_via),
        })
        .collect())
    }
}

/// The organization role the identity's claims map to (the strongest), or the provider's
/// default.
async fn role_from_claims(
    cp: &ControlPlane,
    provider: &Provider,
    identity: &VerifiedIdentity,
) -> Result<String> {
    let mappings = sqlx::query!(
        "SELECT claim_value, role FROM identity_provider_role_mappings WHERE tenant_id = $1",
        provider.tenant as TenantId
    )
    .fetch_all(cp.pool())
    .await?;
    let mapped = mappings
        .iter()
        .filter(|m| identity.role_claim_values.contains(&m.claim_value))
        .map(|m| TenantRole::parse(&m.role).map_err(Error::from))
        .collect::<Result<Vec<_>>>()?;
    Ok(strongest_role(mapped.into_iter(), provider.default_role)
        .as_str()
        .to_string())
}

/// The user an identity signs in as: the one it is linked to (unless that account has since
/// become platform staff); on its first sign-in, an existing account with the same verified,
/// organization-owned email if it is already this organization's (see `may_link`), or a new
/// one; then the link.
async fn user_of_identity(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    provider: &Provider,
    identity: &VerifiedIdentity,
    email: &str,
    name: &str,
) -> Result<UserId> {
    let linked = sqlx::query_scalar!(
        r#"UPDATE user_identities SET last_login = now()
           WHERE issuer = $1 AND subject = $2 RETURNING user_id AS "user: UserId""#,
        identity.issuer,
        identity.subject,
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match linked {
        Some(u) => {
            // Linked before; refused if the account has since become platform staff.
            let ties = cp.account_ties(&mut *conn, u, provider.tenant).await?;
            if !may_link(ties) {
                return Err(SsoError::AccountElsewhere {
                    email: email.to_owned(),
                }
                .into());
            }
            u
        }
        None => {
            // First sign-in with this identity: an existing account with the same
            // (verified, tenant-owned) email is linked only if it is already this
            // organization's (see `may_link`); otherwise one is created.
            let existing = sqlx::query_scalar!(
                r#"SELECT id AS "id: UserId" FROM users WHERE lower(email) = $1"#,
                email
            )
            .fetch_optional(&mut *conn)
            .await?;
            let user = match existing {
                Some(u) => {
                    let ties = cp.account_ties(&mut *conn, u, provider.tenant).await?;
                    if !may_link(ties) {
                        return Err(SsoError::AccountElsewhere {
                            email: email.to_owned(),
                        }
                        .into());
                    }
                    u
                }
                None => {
                    let u = UserId::new_random();
                    sqlx::query!(
                        "INSERT INTO users (id, email, display_name) VALUES ($1, $2, $3)",
                        u as UserId,
                        email,
                        name,
                    )
                    .execute(&mut *conn)
                    .await?;
                    let resource = cp.naming().platform_user(u);
                    audit::record(
                        &mut *conn,
                        AuditEntry {
                            actor: Actor::User(u),
                            action: "user.create",
                            resource: &resource,
                            before: None,
                            after: Some(json!({ "email": email, "via": "sso" })),
                            request_id: None,
                        },
                    )
                    .await?;
                    u
                }
            };
            sqlx::query!(
                "INSERT INTO user_identities (issuer, subject, user_id, tenant_id)
                 VALUES ($1, $2, $3, $4)",
                identity.issuer,
                identity.subject,
                user as UserId,
                provider.tenant as TenantId,
            )
            .execute(&mut *conn)
            .await
            .map_err(|e| match cp_base::db::violated(&e) {
                Some("user_identities_not_staff" | "user_identities_one_tenant") => {
                    Error::Sso(SsoError::AccountElsewhere {
                        email: email.to_owned(),
                    })
                }
                _ => e.into(),
            })?;
            user
        }
    })
}

/// The identity's organization membership, with the role its claims map to now (created, or
/// its role synced), audited when it changes.
async fn sync_membership(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    tenant: TenantId,
    user: UserId,
    role: &str,
) -> Result<()> {
    let before = sqlx::query_scalar!(
        "SELECT role FROM tenant_memberships WHERE tenant_id = $1 AND user_id = $2 FOR UPDATE",
        tenant as TenantId,
        user as UserId,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if before.as_deref() != Some(role) {
        sqlx::query!(
            "INSERT INTO tenant_memberships (tenant_id, user_id, role) VALUES ($1, $2, $3)
             ON CONFLICT (tenant_id, user_id) DO UPDATE SET role = EXCLUDED.role",
            tenant as TenantId,
            user as UserId,
            role,
        )
        .execute(&mut *conn)
        .await?;
        let resource = cp.naming().tenant_member(tenant, user);
        audit::record(
            &mut *conn,
            AuditEntry {
                actor: Actor::User(user),
                action: if before.is_some() {
                    "tenant_membership.role_synced"
                } else {
                    "tenant_membership.create"
                },
                resource: &resource,
                before: before.map(|r| json!({ "role": r })),
                after: Some(json!({ "role": role, "via": "sso" })),
                request_id: None,
            },
        )
        .await?;
    }
    Ok(())
}

/// What ties an existing account to organizations, for deciding whether a tenant's provider
/// may sign it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccountTies {
    /// Platform staff (any platform role) or a break-glass account.
    pub staff: bool,
    /// A member of, or signed in through, another organization.
    pub elsewhere: bool,
    /// A member of, or signed in before through, this organization.
    pub here: bool,
}

/// Whether a tenant's identity provider may sign in an existing account. Only an account that
/// is already this organization's (and nobody else's, and not the platform's) may be: a tenant
/// admin controls their provider, so linking any other account by email would hand it to them.
/// An account with no tie here at all is refused too: joining it needs its own sign-in first,
/// which an account without one can't give.
pub fn may_link(ties: AccountTies) -> bool {
    !ties.staff && !ties.elsewhere && ties.here
}

/// Compares secrets without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The provider's own error code (e.g. `invalid_grant`), without transport details.
fn token_error_summary<RE: std::error::Error + 'static, T: openidconnect::ErrorResponse>(
    e: &openidconnect::RequestTokenError<RE, T>,
) -> String {
    match e {
        openidconnect::RequestTokenError::ServerResponse(r) => r.to_string(),
        openidconnect::RequestTokenError::Request(_) => "the provider could not be reached".into(),
        openidconnect::RequestTokenError::Parse(_, _) => "unreadable token response".into(),
        openidconnect::RequestTokenError::Other(m) => m.clone(),
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

    #[test]
    fn the_strongest_mapped_role_wins() {
        use TenantRole::*;
        assert_eq!(
            strongest_role([Member, Admin, Finance].into_iter(), Member),
            Admin
        );
        assert_eq!(strongest_role([Finance].into_iter(), Member), Finance);
        assert_eq!(strongest_role(std::iter::empty(), Member), Member);
    }

    #[test]
    fn only_an_account_of_this_organization_alone_is_linked() {
        let ties = |staff, elsewhere, here| AccountTies {
            staff,
            elsewhere,
            here,
        };
        assert!(may_link(ties(false, false, true)));
        // Platform staff and break-glass accounts, even if also members here.
        assert!(!may_link(ties(true, false, true)));
        assert!(!may_link(ties(true, false, false)));
        // Someone of another organization, even if also a member here.
        assert!(!may_link(ties(false, true, true)));
        assert!(!may_link(ties(false, true, false)));
        // An account with no tie here.
        assert!(!may_link(ties(false, false, false)));
    }

    #[test]
    fn state_comparison_needs_every_byte() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
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
