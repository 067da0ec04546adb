//! Who is asking, and proof of what they may do.
//!
//! A [`Principal`] is a signed-in user. Calls that need a role take a proof value, such as
//! [`Platform<PlatformAdmin>`], which only this module can construct, and only after checking
//! the role. So a call that needs a role cannot be written without the check.

use std::marker::PhantomData;

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use serde_json::json;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{TenantId, UserId};
use portal_types::TenantRole;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PlatformRole {
    Admin,
    Operator,
    Finance,
}

impl PlatformRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PlatformRole::Admin => "admin",
            PlatformRole::Operator => "operator",
            PlatformRole::Finance => "finance",
        }
    }

    fn from_db(s: &str) -> Result<Self> {
        match s {
            "admin" => Ok(PlatformRole::Admin),
            "operator" => Ok(PlatformRole::Operator),
            "finance" => Ok(PlatformRole::Finance),
            other => Err(Error::Corrupt(format!("unknown platform role {other:?}"))),
        }
    }
}

/// A signed-in user, as loaded fresh for each request.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Principal {
    pub user_id: UserId,
    pub email: String,
    pub display_name: String,
    pub platform_role: Option<PlatformRole>,
    /// Their home organization, read in the same statement as the user (SQL's `home_tenant`):
    /// what [`TenancyApi::home_tenant_access`](crate::tenancy::TenancyApi::home_tenant_access)
    /// checks, so a page that works in it asks nothing more. `None` for someone in no
    /// organization.
    pub home: Option<HomeTenant>,
}

/// A user's home organization (their oldest membership) and their role in it, as loaded with
/// the [`Principal`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HomeTenant {
    pub id: TenantId,
    pub name: String,
    pub role: TenantRole,
}

/// Which platform roles a proof stands for.
pub trait PlatformRequirement {
    const ROLES: &'static [PlatformRole];
    /// For error messages: "platform admins", …
    const WHO: &'static str;
}

/// Any platform staff: admin, operator or finance.
pub struct PlatformStaff;
impl PlatformRequirement for PlatformStaff {
    const ROLES: &'static [PlatformRole] = &[
        PlatformRole::Admin,
        PlatformRole::Operator,
        PlatformRole::Finance,
    ];
    const WHO: &'static str = "platform staff";
}

/// Operators run the fleet; admins may do everything operators do.
pub struct PlatformOperators;
impl PlatformRequirement for PlatformOperators {
    const ROLES: &'static [PlatformRole] = &[PlatformRole::Admin, PlatformRole::Operator];
    const WHO: &'static str = "platform operators";
}

pub struct PlatformAdmin;
impl PlatformRequirement for PlatformAdmin {
    const ROLES: &'static [PlatformRole] = &[PlatformRole::Admin];
    const WHO: &'static str = "platform admins";
}

/// Proof that `principal` holds one of `R::ROLES`. Fields are private: only
/// [`Principal::platform`] makes one.
pub struct Platform<R: PlatformRequirement> {
    principal: Principal,
    role: PlatformRole,
    _requirement: PhantomData<R>,
}

impl<R: PlatformRequirement> Platform<R> {
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
    pub fn role(&self) -> PlatformRole {
        self.role
    }
}

impl Principal {
    /// The principal of a `users` row (its id, email, display name and platform role) and of
    /// its `home_tenant` row, if any (the organization's id, name and the user's role).
    pub(crate) fn from_row(
        user_id: UserId,
        email: String,
        display_name: String,
        platform_role: Option<String>,
        home: (Option<TenantId>, Option<String>, Option<String>),
    ) -> Result<Self> {
        let home = match home {
            (Some(id), Some(name), Some(role)) => Some(HomeTenant {
                id,
                name,
                role: TenantRole::parse(&role)?,
            }),
            _ => None,
        };
        Ok(Principal {
            user_id,
            email,
            display_name,
            platform_role: platform_role
                .as_deref()
                .map(PlatformRole::from_db)
                .transpose()?,
            home,
        })
    }

    /// Checks the platform role `R` needs.
    pub fn platform<R: PlatformRequirement>(&self) -> Result<Platform<R>> {
        match self.platform_role {
            Some(role) if R::ROLES.contains(&role) => Ok(Platform {
                principal: self.clone(),
                role,
                _requirement: PhantomData,
            }),
            _ => Err(Error::Forbidden { needed: R::WHO }),
        }
    }
}

/// Rules for break-glass passwords. Long, because it guards the whole platform.
pub const MIN_PASSWORD_CHARS: usize = 12;
const MAX_PASSWORD_BYTES: usize = 1024;

fn check_password(password: &str) -> Result<()> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(Error::Invalid {
            field: "password",
            reason: format!("use at least {MIN_PASSWORD_CHARS} characters"),
        });
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(Error::Invalid {
            field: "password",
            reason: format!("use at most {MAX_PASSWORD_BYTES} bytes"),
        });
    }
    Ok(())
}

/// The part after the `@` (empty if there is none).
pub(crate) fn email_domain(email: &str) -> &str {
    email.rsplit_once('@').map(|(_, d)| d).unwrap_or("")
}

pub(crate) fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let valid = email.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty()
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && !email.chars().any(char::is_whitespace)
            && email.matches('@').count() == 1
    });
    if valid {
        Ok(email)
    } else {
        Err(Error::Invalid {
            field: "email",
            reason: format!("{email:?} is not an email address"),
        })
    }
}

/// Argon2id with the crate's defaults (19 MiB, 2 passes), off the async runtime.
async fn hash_password(password: String) -> Result<String> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| Error::Corrupt(format!("argon2 hashing failed: {e}")))
    })
    .await
    .map_err(|e| Error::Corrupt(format!("hashing task failed: {e}")))?
}

async fn verify_password(
    hashing: &tokio::sync::Semaphore,
    password: String,
    hash: String,
) -> Result<bool> {
    let _turn = hashing
        .acquire()
        .await
        .map_err(|e| Error::Corrupt(format!("password hashing closed: {e}")))?;
    tokio::task::spawn_blocking(move || {
        let parsed = PasswordHash::new(&hash)
            .map_err(|e| Error::Corrupt(format!("stored password hash unreadable: {e}")))?;
        Ok(Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok())
    })
    .await
    .map_err(|e| Error::Corrupt(format!("verification task failed: {e}")))?
}

/// A hash of a random password, verified against when the email is unknown, so that a wrong
/// email and a wrong password take the same time. Made once per handle, on first use.
async fn dummy_hash(cell: &tokio::sync::OnceCell<String>) -> Result<String> {
    cell.get_or_try_init(|| {
        let mut random = [0u8; 24];
        argon2::password_hash::rand_core::RngCore::fill_bytes(&mut OsRng, &mut random);
        hash_password(format!("{random:?}"))
    })
    .await
    .cloned()
}

/// What the control plane offers for sign-in, users and platform roles.
#[allow(async_fn_in_trait)]
pub trait AuthApi {
    /// The principal behind a session, or None if the user no longer exists.
    async fn principal(&self, user: UserId) -> Result<Option<Principal>>;

    /// Creates a platform admin with a break-glass password, or sets a new password for an
    /// existing one. For the `server set-admin-password` command; there is no default password.
    async fn set_break_glass_password(
        &self,
        email: &str,
        display_name: &str,
        password: &str,
    ) -> Result<UserId>;

    /// Checks a break-glass sign-in. Every failure is the same [`Error::InvalidCredentials`],
    /// and takes the same time, whether the email is unknown or the password wrong. Failed
    /// attempts are limited per client address and per email (known or not, so the limit says
    /// nothing about which accounts exist): [`Error::RateLimited`] once either is spent.
    async fn verify_break_glass(
        &self,
        email: &str,
        password: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<Principal>;

    /// Break-glass accounts that failed to sign in lately: locked ones first. Platform admins
    /// only.
    async fn break_glass_lockouts(&self, _who: &Platform<PlatformAdmin>) -> Result<Vec<Lockout>>;

    /// Clears `user`'s failed attempts and lock, audited. This replica's in-process limit for
    /// the email is cleared too (another replica's refills within a minute).
    async fn unlock_break_glass(
        &self,
        who: &Platform<PlatformAdmin>,
        user: UserId,
        request_id: Option<&str>,
    ) -> Result<()>;
}

impl AuthApi for ControlPlane {
    #[tracing::instrument(skip(self), fields(user.id = %user))]
    async fn principal(&self, user: UserId) -> Result<Option<Principal>> {
        let row = sqlx::query!(
            r#"SELECT u.id AS "id: UserId", u.email, u.display_name, u.platform_role,
                      h.tenant_id AS "home_id?: TenantId", h.display_name AS "home_name?",
                      h.role AS "home_role?"
               FROM users u LEFT JOIN LATERAL home_tenant(u.id) h ON true
               WHERE u.id = $1"#,
            user as UserId
        )
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Principal::from_row(
                r.id,
                r.email,
                r.display_name,
                r.platform_role,
                (r.home_id, r.home_name, r.home_role),
            )
        })
        .transpose()
    }

    #[tracing::instrument(skip(self, password))]
    async fn set_break_glass_password(
        &self,
        email: &str,
        display_name: &str,
        password: &str,
    ) -> Result<UserId> {
        let email = normalize_email(email)?;
        check_password(password)?;
        let display_name = check_display_name(display_name)?;
        let hash = hash_password(password.to_owned()).await?;

        let mut tx = self.pool().begin().await?;
        let existing = sqlx::query!(
            r#"SELECT id AS "id: UserId", platform_role FROM users WHERE lower(email) = $1 FOR UPDATE"#,
            email
        )
        .fetch_optional(&mut *tx)
        .await?;
        let user = match existing {
            Some(u) if u.platform_role.as_deref() == Some("admin") => u.id,
            Some(_) => {
                return Err(Error::Conflict(format!(
                    "{email} exists and is not a platform admin; break-glass passwords are for platform admins only"
                )));
            }
            None => {
                let id = UserId::new_random();
                sqlx::query!(
                    "INSERT INTO users (id, email, display_name, platform_role) VALUES ($1, $2, $3, 'admin')",
                    id as UserId,
                    email,
                    display_name,
                )
                .execute(&mut *tx)
                .await?;
                id
            }
        };
        let replaced = sqlx::query_scalar!(
            r#"INSERT INTO break_glass_credentials (user_id, password_hash) VALUES ($1, $2)
               ON CONFLICT (user_id) DO UPDATE SET password_hash = EXCLUDED.password_hash, updated_at = now(),
                   failed_attempts = 0, locked_until = NULL
               RETURNING (xmax <> 0) AS "replaced!""#,
            user as UserId,
            hash,
        )
        .fetch_one(&mut *tx)
        .await?;
        let resource = self.naming().platform_user(user);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::System,
                action: if replaced {
                    "platform_admin.password_reset"
                } else {
                    "platform_admin.password_set"
                },
                resource: &resource,
                before: None,
                after: Some(json!({ "email": email })),
                request_id: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(user)
    }

    #[tracing::instrument(skip(self, password))]
    async fn verify_break_glass(
        &self,
        email: &str,
        password: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<Principal> {
        let email = email.trim().to_lowercase();
        let limits = self.sign_in_limits();
        let address = cp_base::ratelimit::address_key(client);
        limits
            .per_address
            .take(&address)
            .and_then(|()| limits.per_email.take(&email))
            .map_err(|wait| cp_base::ratelimit::refused("break-glass sign-in", &address, wait))?;
        if password.len() > MAX_PASSWORD_BYTES {
            return Err(Error::InvalidCredentials);
        }
        let row = sqlx::query!(
            r#"SELECT u.id AS "id: UserId", c.password_hash,
                      extract(epoch FROM c.locked_until - now())::float8 AS locked_for
               FROM users u JOIN break_glass_credentials c ON c.user_id = u.id
               WHERE lower(u.email) = $1 AND u.platform_role = 'admin'"#,
            email
        )
        .fetch_optional(self.pool())
        .await?;
        if let Some(secs) = row.as_ref().and_then(|r| r.locked_for).filter(|s| *s > 0.0) {
            // Locked: no hash is computed, and the answer is the rate limit's.
            tracing::info!(auth.email = %email, "break-glass sign-in refused: account locked");
            return Err(Error::RateLimited {
                retry_after_secs: cp_base::ratelimit::retry_after_secs(
                    std::time::Duration::from_secs_f64(secs),
                ),
            });
        }
        let (user, hash) = match row {
            Some(r) => (Some(r.id), r.password_hash),
            None => (None, dummy_hash(self.dummy_hash_cell()).await?),
        };
        let ok = verify_password(self.hashing(), password.to_owned(), hash).await?;
        match (user, ok) {
            (Some(user), true) => {
                limits.per_address.give_back(&address);
                limits.per_email.give_back(&email);
                sqlx::query!(
                    "UPDATE break_glass_credentials SET failed_attempts = 0, locked_until = NULL
                     WHERE user_id = $1 AND failed_attempts > 0",
                    user as UserId
                )
                .execute(self.pool())
                .await?;
                self.principal(user).await?.ok_or(Error::InvalidCredentials)
            }
            (Some(user), false) => {
                self.count_failure(user).await?;
                Err(Error::InvalidCredentials)
            }
            (None, _) => Err(Error::InvalidCredentials),
        }
    }

    async fn break_glass_lockouts(&self, _who: &Platform<PlatformAdmin>) -> Result<Vec<Lockout>> {
        let rows = sqlx::query!(
            r#"SELECT u.id AS "user: UserId", u.email, c.failed_attempts,
                      c.locked_until > now() AS "locked!",
                      c.locked_until AS until
               FROM break_glass_credentials c JOIN users u ON u.id = c.user_id
               WHERE c.failed_attempts > 0
               ORDER BY c.locked_until > now() DESC, c.failed_attempts DESC, u.email"#
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Lockout {
                user: r.user,
                email: r.email,
                failed_attempts: r.failed_attempts,
                locked_until: r.until.filter(|_| r.locked),
            })
            .collect())
    }

    async fn unlock_break_glass(
        &self,
        who: &Platform<PlatformAdmin>,
        user: UserId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"UPDATE break_glass_credentials c SET failed_attempts = 0, locked_until = NULL
               FROM users u, break_glass_credentials old
               WHERE c.user_id = $1 AND u.id = c.user_id AND old.user_id = c.user_id
               RETURNING lower(u.email) AS "email!", old.failed_attempts,
                         old.locked_until > now() AS "was_locked!""#,
            user as UserId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound {
            what: "break-glass account",
        })?;
        let resource = self.naming().platform_user(user);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: "platform_admin.unlock",
                resource: &resource,
                before: Some(json!({
                    "failed_attempts": row.failed_attempts,
                    "locked": row.was_locked,
                })),
                after: Some(json!({ "failed_attempts": 0, "locked": false })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        self.sign_in_limits().per_email.forget(&row.email);
        Ok(())
    }
}

/// What the other areas of this crate use of it, behind no proof: never for the pages or the API.
#[allow(async_fn_in_trait)]
pub(crate) trait AuthInternal {
    /// One more failed sign-in for `user`; the [`LOCK_AFTER`]th in a row locks the account for
    /// [`LOCK_FOR`] (audited, as the system).
    async fn count_failure(&self, user: UserId) -> Result<()>;
}

impl AuthInternal for ControlPlane {
    async fn count_failure(&self, user: UserId) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"UPDATE break_glass_credentials
               SET failed_attempts = failed_attempts + 1,
                   locked_until = CASE WHEN failed_attempts + 1 >= $2
                                       THEN now() + make_interval(secs => $3) END
               WHERE user_id = $1
               RETURNING failed_attempts, locked_until IS NOT NULL AS "locked!""#,
            user as UserId,
            LOCK_AFTER,
            LOCK_FOR.as_secs_f64()
        )
        .fetch_one(&mut *tx)
        .await?;
        if row.locked {
            tracing::warn!(user.id = %user, auth.failed_attempts = row.failed_attempts, "break-glass account locked");
            let resource = self.naming().platform_user(user);
            audit::record(
                &mut tx,
                AuditEntry {
                    actor: Actor::System,
                    action: "platform_admin.locked",
                    resource: &resource,
                    before: None,
                    after: Some(json!({
                        "failed_attempts": row.failed_attempts,
                        "locked_minutes": LOCK_FOR.as_secs() / 60,
                    })),
                    request_id: None,
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Failed sign-ins in a row that lock a break-glass account.
pub const LOCK_AFTER: i32 = 5;
/// How long a lock lasts (unless an admin clears it first).
pub const LOCK_FOR: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// A break-glass account with failed sign-ins (shared with the pages).
pub use portal_types::account::Lockout;

/// A person's or a project's display name: 1 to 200 characters once trimmed.
pub(crate) fn check_display_name(name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(Error::Invalid {
            field: "name",
            reason: "use 1 to 200 characters".into(),
        });
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_normalised_or_refused_by_name() {
        assert_eq!(
            normalize_email("  Ada@Platform.Example ").unwrap(),
            "ada@platform.example"
        );
        for bad in [
            "",
            "ada",
            "@x.example",
            "ada@",
            "ada@localhost",
            "a b@x.example",
            "a@b@c.example",
        ] {
            let err = normalize_email(bad).unwrap_err();
            assert!(
                matches!(err, Error::Invalid { field: "email", .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn short_passwords_are_refused_with_the_rule() {
        let err = check_password("short").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid password: use at least 12 characters"
        );
        assert!(check_password("correct horse battery").is_ok());
    }

    #[tokio::test]
    async fn hashes_are_argon2id_and_verify_only_the_right_password() {
        let turns = tokio::sync::Semaphore::new(1);
        let hash = hash_password("correct horse battery".into()).await.unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(
            verify_password(&turns, "correct horse battery".into(), hash.clone())
                .await
                .unwrap()
        );
        assert!(
            !verify_password(&turns, "correct horse battery!".into(), hash)
                .await
                .unwrap()
        );
        let cell = tokio::sync::OnceCell::new();
        let dummy = dummy_hash(&cell).await.unwrap();
        assert_eq!(dummy_hash(&cell).await.unwrap(), dummy, "made once");
        assert!(!verify_password(&turns, "".into(), dummy).await.unwrap());
        assert_eq!(turns.available_permits(), 1, "every turn is given back");
    }
}
