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

use crate::auth::{Principal, email_domain, normalize_email};
use crate::tenancy::TenantRole;
use cp_base::ControlPlane;
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

mod settings;
mod sign_in;

pub use settings::{
    DomainClaim, MAX_TOKEN_IDLE_DAYS, ProviderSettings, ProviderUpdate, SsoSettingsApi,
    TOKEN_IDLE_DAYS,
};
pub use sign_in::{AccountTies, may_link};
use sign_in::{role_from_claims, sync_membership, user_of_identity};

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

    #[test]
    fn state_comparison_needs_every_byte() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
