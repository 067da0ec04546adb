//! Who an identity the provider vouched for signs in as: its user (linked, matched by email
//! or created), and its organization role from the claims.

use serde_json::json;
use sqlx::PgConnection;

use super::{Provider, SsoInternal, VerifiedIdentity};
use crate::tenancy::TenantRole;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::SsoError;
use cp_base::error::{Error, Result};
use cp_base::ids::{TenantId, UserId};

/// The most privileged tenant role among `mapped` (`TenantRole::ALL` runs from most to
/// least privileged), else `default`.
fn strongest_role(mapped: impl Iterator<Item = TenantRole>, default: TenantRole) -> TenantRole {
    mapped
        .min_by_key(|r| TenantRole::ALL.iter().position(|o| o == r))
        .unwrap_or(default)
}

/// The organization role the identity's claims map to (the strongest), or the provider's
/// default.
pub(super) async fn role_from_claims(
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
pub(super) async fn user_of_identity(
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
pub(super) async fn sync_membership(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
