//! Publishers: an organization applies, operators decide, and what each is owed.

use serde_json::json;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{PublisherId, TenantId, UserId};
use cp_identity::auth::{Platform, PlatformOperators, PlatformRequirement};
use cp_identity::tenancy::{Tenant, TenantAdmins};

use crate::invalid;
use crate::versions::bounded;
use portal_types::marketplace::{Payable, Publisher};

/// The platform's own publisher (created by the migration).
pub const PLATFORM_PUBLISHER: PublisherId =
    PublisherId(uuid::uuid!("00000000-0000-4000-8000-0000000000f1"));

/// Who may draft and submit a publisher's listings: the admins of its organization, or
/// platform operators for the platform's own.
pub struct PublisherActor {
    pub(crate) user: UserId,
    pub(crate) publisher: PublisherId,
}

impl PublisherActor {
    pub fn platform(who: &Platform<PlatformOperators>) -> Self {
        PublisherActor {
            user: who.principal().user_id,
            publisher: PLATFORM_PUBLISHER,
        }
    }

    pub fn publisher(&self) -> PublisherId {
        self.publisher
    }
}

/// "70", "12.5" or "33.33" (percent) → basis points; `None` unless 0–100 with at most two
/// decimals. Decimal arithmetic: no float rounding.
pub(crate) fn percent_to_bps(s: &str) -> Option<i32> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() || whole.len() > 3 || !digits(whole) || frac.len() > 2 || !digits(frac) {
        return None;
    }
    let bps = whole.parse::<i32>().ok()? * 100 + format!("{frac:0<2}").parse::<i32>().ok()?;
    (bps <= 10_000).then_some(bps)
}

/// What the control plane offers for publishers: applying, deciding, and what is owed to them.
#[allow(async_fn_in_trait)]
pub trait PublishersApi {
    /// The publisher an organization's admins act for, if it has one.
    async fn publisher_of_tenant(&self, tenant: TenantId) -> Result<Option<Publisher>>;

    /// Acting for an organization's publisher: its admins, once it applied.
    async fn tenant_publisher(&self, who: &Tenant<TenantAdmins>) -> Result<PublisherActor>;

    /// An organization asks to publish; operators approve it. Idempotent.
    async fn apply_to_publish(
        &self,
        who: &Tenant<TenantAdmins>,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<PublisherId>;

    /// Operators approve or suspend a publisher and set its revenue share.
    async fn decide_publisher(
        &self,
        who: &Platform<PlatformOperators>,
        publisher: PublisherId,
        approve: bool,
        revenue_share_percent: &str,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Every publisher (operators' list).
    async fn publishers<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Publisher>>;

    /// What the platform owes each publisher: its payable balance per currency, beside the
    /// fees rated for its listings.
    async fn publisher_payables<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Payable>>;
}

impl PublishersApi for ControlPlane {
    async fn publisher_of_tenant(&self, tenant: TenantId) -> Result<Option<Publisher>> {
        Ok(sqlx::query_as!(
            Publisher,
            r#"SELECT id AS "id: PublisherId", tenant_id AS "tenant_id: TenantId", display_name,
                      status, revenue_share_bps
               FROM publishers WHERE tenant_id = $1"#,
            tenant as TenantId
        )
        .fetch_optional(self.pool())
        .await?)
    }

    async fn tenant_publisher(&self, who: &Tenant<TenantAdmins>) -> Result<PublisherActor> {
        let p = self
            .publisher_of_tenant(who.id())
            .await?
            .ok_or(Error::NotFound { what: "publisher" })?;
        Ok(PublisherActor {
            user: who.user(),
            publisher: p.id,
        })
    }

    #[tracing::instrument(skip_all, fields(tenant.id = %who.id()))]
    async fn apply_to_publish(
        &self,
        who: &Tenant<TenantAdmins>,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<PublisherId> {
        let display_name = bounded("display_name", display_name, 1, 100)?;
        let mut tx = self.pool().begin().await?;
        let id = sqlx::query_scalar!(
            r#"INSERT INTO publishers (id, tenant_id, display_name) VALUES (gen_random_uuid(), $1, $2)
               ON CONFLICT (tenant_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
               RETURNING id AS "id: PublisherId""#,
            who.id() as TenantId,
            display_name
        )
        .fetch_one(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user()),
                action: "publisher.apply",
                resource: &self.naming().tenant(who.id()),
                before: None,
                after: Some(json!({ "publisher": display_name })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    #[tracing::instrument(skip_all, fields(publisher.id = %publisher))]
    async fn decide_publisher(
        &self,
        who: &Platform<PlatformOperators>,
        publisher: PublisherId,
        approve: bool,
        revenue_share_percent: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        if publisher == PLATFORM_PUBLISHER {
            return Err(invalid("publisher", "the platform publishes as itself"));
        }
        let share = revenue_share_percent.trim().trim_end_matches('%').trim();
        let bps = percent_to_bps(share).ok_or_else(|| {
            invalid(
                "revenue_share",
                format!("{share:?}: a percentage from 0 to 100, at most two decimals"),
            )
        })?;
        let status = if approve { "approved" } else { "suspended" };
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query!(
            "SELECT status, revenue_share_bps, display_name FROM publishers WHERE id = $1 FOR UPDATE",
            publisher as PublisherId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "publisher" })?;
        sqlx::query!(
            "UPDATE publishers SET status = $2, revenue_share_bps = $3, decided_by = $4, decided_at = now()
             WHERE id = $1",
            publisher as PublisherId,
            status,
            bps,
            who.principal().user_id as UserId
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: if approve {
                    "publisher.approve"
                } else {
                    "publisher.suspend"
                },
                resource: &self.naming().publisher(publisher),
                before: Some(json!({ "status": before.status, "revenue_share_bps": before.revenue_share_bps })),
                after: Some(json!({ "publisher": before.display_name, "status": status, "revenue_share_bps": bps })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn publishers<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Publisher>> {
        Ok(sqlx::query_as!(
            Publisher,
            r#"SELECT id AS "id: PublisherId", tenant_id AS "tenant_id: TenantId", display_name,
                      status, revenue_share_bps
               FROM publishers ORDER BY tenant_id IS NOT NULL, display_name"#
        )
        .fetch_all(self.pool())
        .await?)
    }

    async fn publisher_payables<R: PlatformRequirement>(
        &self,
        _who: &Platform<R>,
    ) -> Result<Vec<Payable>> {
        Ok(sqlx::query_as!(
            Payable,
            r#"SELECT p.id AS "publisher_id: PublisherId", p.display_name AS publisher, p.status,
                      p.revenue_share_bps, f.currency AS "currency!",
                      f.fees AS "fees_micro!",
                      coalesce((SELECT -sum(po.amount_micro) FROM postings po
                                JOIN ledger_accounts a ON a.id = po.account_id
                                WHERE a.kind = 'publisher_payable' AND a.publisher_id = p.id
                                  AND a.currency = f.currency), 0)::bigint AS "owed_micro!"
               FROM publishers p
               JOIN (SELECT publisher_id, currency, sum(amount_micro)::bigint AS fees
                     FROM fee_charges GROUP BY publisher_id, currency) f ON f.publisher_id = p.id
               ORDER BY p.display_name, f.currency"#
        )
        .fetch_all(self.pool())
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revenue_shares_are_exact_percentages() {
        assert_eq!(percent_to_bps("70"), Some(7000));
        assert_eq!(percent_to_bps("12.34"), Some(1234));
        assert_eq!(percent_to_bps("12.5"), Some(1250));
        assert_eq!(percent_to_bps("100"), Some(10_000));
        for bad in ["100.01", "-5", "1.234", "", ".5", "7o", "1000"] {
            assert_eq!(percent_to_bps(bad), None, "{bad}");
        }
    }
}
