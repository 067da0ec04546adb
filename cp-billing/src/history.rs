//! Usage that ran before this portal metered it: a migration from a previous billing system,
//! and the demo's history. Each imported run becomes a released allocation on the
//! `imported-usage` node (ledger-only: cordoned, with no slots, left out of the fleet) and a
//! usage interval with the times given; rating and invoicing then treat it like any other.

use sqlx::PgConnection;
use uuid::Uuid;

use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, ProjectId, TenantId, UserId};

#[derive(Clone, Debug)]
pub struct ImportedRun<'a> {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub sku: &'a str,
    /// The marketplace listing it ran (its newest published version; fee included).
    pub listing: &'a str,
    pub name: &'a str,
    pub started_at: time::OffsetDateTime,
    pub ended_at: time::OffsetDateTime,
    /// Per hour, in the SKU's currency; `None`: the SKU's price today.
    pub price_per_hour_minor: Option<i64>,
    /// Attributed to this user (who launched it in the old system).
    pub by: UserId,
    /// Makes the import idempotent: a run with a key already imported is skipped.
    pub key: &'a str,
}

/// Imports one finished run; returns its allocation id (the existing one for a known key).
pub async fn import_run(conn: &mut PgConnection, run: &ImportedRun<'_>) -> Result<AllocationId> {
    if run.ended_at <= run.started_at {
        return Err(Error::Invalid {
            field: "ended_at",
            reason: "a run ends after it starts".into(),
        });
    }
    let key = format!("import-{}", run.key);
    if let Some(id) = sqlx::query_scalar!(
        r#"SELECT id AS "id: AllocationId" FROM allocations WHERE project_id = $1 AND idempotency_key = $2"#,
        run.project as ProjectId,
        key
    )
    .fetch_optional(&mut *conn)
    .await?
    {
        return Ok(id);
    }
    let sku = sqlx::query!(
        "SELECT id, shape, gpu_count, regions[1] AS \"region!\", families[1] AS \"family!\", price_per_hour_minor, currency
         FROM skus WHERE name = $1",
        run.sku
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| Error::Invalid {
        field: "sku",
        reason: format!("no SKU is named {}", run.sku),
    })?;
    let node = match sqlx::query_scalar!("SELECT id FROM nodes WHERE ledger_only")
        .fetch_optional(&mut *conn)
        .await?
    {
        Some(n) => n,
        None => {
            let id = Uuid::new_v4();
            sqlx::query!(
                // Named for what it carries; a host enrolled under that name keeps it.
                "INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, admin_state,
                                    enrolled_by, ledger_only)
                 SELECT $1::uuid, CASE WHEN EXISTS (SELECT 1 FROM nodes WHERE hostname = 'imported-usage')
                                 THEN 'imported-usage-' || left($1::uuid::text, 8)
                                 ELSE 'imported-usage' END,
                        $2, 'none', $3, ARRAY['gpu_slice', 'baremetal'], 'cordoned', $4, true",
                id,
                sku.region,
                sku.family,
                run.by as UserId
            )
            .execute(&mut *conn)
            .await?;
            id
        }
    };
    let software = cp_marketplace::launch_version(&mut *conn, run.listing, "").await?;
    let id = AllocationId::new_random();
    sqlx::query!(
        "INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                                  listing_version_id, ssh_public_key, price_per_hour_minor, currency, idempotency_key,
                                  request_fingerprint, requested_by, placement, state, requested_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'imported', $11, $12, $13, 'imported', $14,
                 '{\"why\": \"imported: usage that ran before this portal metered it\"}', 'placed', $15)",
        id as AllocationId,
        run.tenant as TenantId,
        run.project as ProjectId,
        run.name,
        sku.id,
        sku.shape,
        sku.gpu_count,
        sku.region,
        node,
        software.id as cp_base::ListingVersionId,
        run.price_per_hour_minor.unwrap_or(sku.price_per_hour_minor),
        sku.currency,
        key,
        run.by as UserId,
        run.started_at
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "INSERT INTO usage_intervals (allocation_id, tenant_id, project_id, sku_id, gpu_count,
                                      price_per_hour_minor, currency, started_at, ended_at,
                                      listing_version_id, fee_per_hour_minor, publisher_id,
                                      publisher_share_bps)
         SELECT a.id, a.tenant_id, a.project_id, a.sku_id, a.gpu_count, a.price_per_hour_minor,
                a.currency, $2, $3, a.listing_version_id, a.fee_per_hour_minor, p.id,
                p.revenue_share_bps
         FROM allocations a JOIN listing_versions v ON v.id = a.listing_version_id
              JOIN listings l ON l.id = v.listing_id JOIN publishers p ON p.id = l.publisher_id
         WHERE a.id = $1",
        id as AllocationId,
        run.started_at,
        run.ended_at
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET desired_state = 'released', state = 'releasing' WHERE id = $1",
        id as AllocationId
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET state = 'released', released_at = $2, observed_state = 'absent' WHERE id = $1",
        id as AllocationId,
        run.ended_at
    )
    .execute(&mut *conn)
    .await?;
    Ok(id)
}
