//! Snapshots: a point-in-time copy of a volume on the storage backend, kept apart from it,
//! from which new volumes are made. Taken of a volume that is available or attached (the
//! backend copies it atomically while it is written), billed by size like a volume, counted
//! in the `max_volume_gib` quota, and erased when deleted. A volume with snapshots is not
//! deleted (migration 0051 says why), and a snapshot a new volume is being made from is not
//! deleted until that volume is made.

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;
use time::OffsetDateTime;

use cp_base::ControlPlane;
use cp_base::db::OnConstraint;
use cp_base::error::{Error, Result};
use cp_base::ids::{ProjectId, SnapshotId, TenantId, UserId, VolumeId};
use cp_billing::internal::storage_price_in;
use cp_identity::auth::Principal;
use cp_identity::tenancy::{
    Project, ProjectOperators, ProjectRequirement, ProjectViewers, TenancyApi,
};

use super::{VolumeRequest, VolumeState, lock_volume, refuse, within_volume_quotas};
use crate::allocations::decide::invalid;

pub use portal_types::volumes::{Snapshot, SnapshotState, StoragePrice};

/// What a project member asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRequest {
    pub name: String,
    /// The same key twice takes one snapshot.
    pub idempotency_key: String,
}

/// Whether a new snapshot was taken, or a retry answered with the one taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadeSnapshot {
    pub id: SnapshotId,
    pub created: bool,
}

#[allow(async_fn_in_trait)]
pub trait SnapshotsApi {
    /// Takes a snapshot of a volume that is available or attached (in `creating`; the
    /// backend copies it), within the `max_volume_gib` quota.
    async fn create_snapshot(
        &self,
        who: &Project<ProjectOperators>,
        volume: VolumeId,
        req: &SnapshotRequest,
        request_id: Option<&str>,
    ) -> Result<MadeSnapshot>;

    /// The caller's proof of role `R` in the project of snapshot `id`; "not found" for one
    /// they may not see, as for one that doesn't exist.
    async fn snapshot_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        id: SnapshotId,
    ) -> Result<Project<R>>;

    /// The project's snapshots that are not deleted, newest first.
    async fn snapshots(&self, who: &Project<ProjectViewers>) -> Result<Vec<Snapshot>>;

    async fn snapshot(&self, who: &Project<ProjectViewers>, id: SnapshotId) -> Result<Snapshot>;

    /// Erases a snapshot. Deleting one that is deleted (or being deleted) already is done.
    async fn delete_snapshot(
        &self,
        who: &Project<ProjectOperators>,
        id: SnapshotId,
        request_id: Option<&str>,
    ) -> Result<()>;
}

/// A volume request naming a snapshot, with its region and size filled from the snapshot
/// where left out. Another project's snapshot is not found.
pub(crate) async fn filled_from_snapshot(
    pool: &cp_base::pool::Db,
    project: ProjectId,
    req: &VolumeRequest,
) -> Result<VolumeRequest> {
    let mut req = req.clone();
    let Some(id) = req.snapshot else {
        return Ok(req);
    };
    let s = sqlx::query!(
        "SELECT region, size_gib FROM volume_snapshots
         WHERE id = $1 AND project_id = $2 AND state <> 'deleted'",
        id as SnapshotId,
        project as ProjectId
    )
    .fetch_optional(pool)
    .await?
    .ok_or(Error::NotFound { what: "snapshot" })?;
    if req.region.trim().is_empty() {
        req.region = s.region;
    }
    if req.size_gib == 0 {
        req.size_gib = s.size_gib.unsigned_abs();
    }
    Ok(req)
}

/// Holds the snapshot a new volume is made from (until the caller commits) and checks it can
/// be: available, in the volume's region, and no bigger than the volume.
pub(crate) async fn holds_for(
    conn: &mut PgConnection,
    project: ProjectId,
    id: SnapshotId,
    region: &str,
    size_gib: i32,
) -> Result<()> {
    let s = sqlx::query!(
        "SELECT name, region, size_gib, state FROM volume_snapshots
         WHERE id = $1 AND project_id = $2 FOR SHARE",
        id as SnapshotId,
        project as ProjectId
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound { what: "snapshot" })?;
    if s.state != "available" {
        return Err(Error::Conflict(format!(
            "snapshot {} is {}; volumes are made from available snapshots",
            s.name, s.state
        )));
    }
    if s.region != region {
        return Err(invalid(
            "region",
            format!(
                "snapshot {} is in {}; a volume made from it lives there too",
                s.name, s.region
            ),
        ));
    }
    if size_gib < s.size_gib {
        return Err(invalid(
            "size_gib",
            format!(
                "{size_gib} GiB: snapshot {} holds {} GiB, and the volume must hold it",
                s.name, s.size_gib
            ),
        ));
    }
    Ok(())
}

/// Refuses to delete a volume that still has snapshots.
pub(crate) async fn none_left_of(
    conn: &mut PgConnection,
    volume: VolumeId,
    name: &str,
) -> Result<()> {
    let left = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM volume_snapshots WHERE volume_id = $1 AND state <> 'deleted'"#,
        volume as VolumeId
    )
    .fetch_one(&mut *conn)
    .await?;
    if left > 0 {
        return Err(Error::Conflict(format!(
            "volume {name} has {left} snapshot{}; delete {} first",
            if left == 1 { "" } else { "s" },
            if left == 1 { "it" } else { "them" }
        )));
    }
    Ok(())
}

async fn queue_snapshot_job(
    conn: &mut PgConnection,
    volume: VolumeId,
    snapshot: SnapshotId,
    kind: &str,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO volume_jobs (volume_id, snapshot_id, kind) VALUES ($1, $2, $3)",
        volume as VolumeId,
        snapshot as SnapshotId,
        kind
    )
    .execute(conn)
    .await?;
    Ok(())
}

async fn record(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    user: UserId,
    (tenant, project, region, id): (TenantId, ProjectId, &str, SnapshotId),
    action: &'static str,
    (before, after): (serde_json::Value, serde_json::Value),
    request_id: Option<&str>,
) -> Result<()> {
    cp_base::audit::record(
        conn,
        cp_base::audit::AuditEntry {
            actor: cp_base::audit::Actor::User(user),
            action,
            resource: &cp.naming().snapshot(region, tenant, project, id)?,
            before: Some(before),
            after: Some(after),
            request_id,
        },
    )
    .await?;
    Ok(())
}

struct SnapshotRow {
    id: SnapshotId,
    project_id: ProjectId,
    volume_id: VolumeId,
    volume_name: String,
    name: String,
    region: String,
    size_gib: i32,
    state: String,
    error_reason: Option<String>,
    created_at: OffsetDateTime,
    price_per_gib_month_micro: i64,
    currency: String,
}

impl TryFrom<SnapshotRow> for Snapshot {
    type Error = Error;
    fn try_from(r: SnapshotRow) -> Result<Snapshot> {
        let price = StoragePrice {
            region: r.region.clone(),
            currency: r.currency.into(),
            per_gib_month_micro: r.price_per_gib_month_micro,
        };
        Ok(Snapshot {
            id: r.id,
            project_id: r.project_id,
            volume_id: r.volume_id,
            volume_name: r.volume_name,
            name: r.name,
            region: r.region,
            size_gib: r.size_gib.unsigned_abs(),
            state: SnapshotState::parse(&r.state).map_err(Error::Corrupt)?,
            error: r.error_reason,
            created_at: r.created_at,
            monthly_cost: price.monthly(r.size_gib.unsigned_abs()),
        })
    }
}

async fn read_snapshots(
    conn: &mut PgConnection,
    project: ProjectId,
    id: Option<SnapshotId>,
) -> Result<Vec<Snapshot>> {
    sqlx::query_as!(
        SnapshotRow,
        r#"SELECT s.id AS "id: SnapshotId", s.project_id AS "project_id: ProjectId",
                  s.volume_id AS "volume_id: VolumeId", v.name AS volume_name, s.name, s.region,
                  s.size_gib, s.state, s.error_reason, s.created_at,
                  s.price_per_gib_month_micro, s.currency
           FROM volume_snapshots s JOIN volumes v ON v.id = s.volume_id
           WHERE s.project_id = $1 AND s.state <> 'deleted'
             AND ($2::uuid IS NULL OR s.id = $2)
           ORDER BY s.created_at DESC, s.id"#,
        project as ProjectId,
        id.map(|i| i.0)
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Snapshot::try_from)
    .collect()
}

/// A snapshot request with every field checked.
fn checked(volume: VolumeId, req: &SnapshotRequest) -> Result<(String, String, String)> {
    let name = portal_types::allocations::check_instance_name(&req.name)
        .map_err(|reason| invalid("name", reason))?;
    let key = req.idempotency_key.trim();
    if !(8..=200).contains(&key.len()) || !key.chars().all(|c| c.is_ascii_graphic()) {
        return Err(invalid(
            "idempotency_key",
            "use 8 to 200 printable characters (a UUID per request, for example)",
        ));
    }
    let fingerprint = format!("{volume}\n{name}");
    Ok((name, key.to_owned(), fingerprint))
}

impl SnapshotsApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(volume.id = %volume))]
    async fn create_snapshot(
        &self,
        who: &Project<ProjectOperators>,
        volume: VolumeId,
        req: &SnapshotRequest,
        request_id: Option<&str>,
    ) -> Result<MadeSnapshot> {
        let (name, key, fingerprint) = checked(volume, req)?;
        let mut tx = self.pool().begin().await?;
        let existing = sqlx::query!(
            r#"SELECT id AS "id: SnapshotId", request_fingerprint FROM volume_snapshots
               WHERE project_id = $1 AND idempotency_key = $2"#,
            who.id() as ProjectId,
            key
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(e) = existing {
            return if e.request_fingerprint == fingerprint {
                Ok(MadeSnapshot {
                    id: e.id,
                    created: false,
                })
            } else {
                Err(Error::Conflict(
                    "this idempotency key was used for a different snapshot request".into(),
                ))
            };
        }
        let v = lock_volume(&mut tx, who.id(), volume).await?;
        if !matches!(
            v.state,
            VolumeState::Available
                | VolumeState::Attaching
                | VolumeState::InUse
                | VolumeState::Detaching
        ) {
            return Err(refuse(
                &v.name,
                v.state,
                "snapshots are taken of a volume that is available or attached",
            ));
        }
        within_volume_quotas(&mut tx, who.tenant(), who.id(), i64::from(v.size_gib), 0).await?;
        let price = storage_price_in(&mut tx, &v.region).await?.ok_or_else(|| {
            invalid(
                "volume",
                format!(
                    "storage in {} has no price; snapshots are not sold there",
                    v.region
                ),
            )
        })?;
        let id = SnapshotId::new_random();
        sqlx::query!(
            "INSERT INTO volume_snapshots (id, volume_id, tenant_id, project_id, region, name,
                                           size_gib, price_per_gib_month_micro, currency,
                                           idempotency_key, request_fingerprint, created_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            id as SnapshotId,
            volume as VolumeId,
            who.tenant() as TenantId,
            who.id() as ProjectId,
            v.region,
            name,
            v.size_gib,
            price.per_gib_month_micro,
            price.currency.as_str(),
            key,
            fingerprint,
            who.user() as UserId
        )
        .execute(&mut *tx)
        .await
        .on_constraint("volume_snapshots_name_in_project", || {
            Error::Conflict(format!(
                "the project has a snapshot named {name} already; snapshot names are unique in a project"
            ))
        })?;
        queue_snapshot_job(&mut tx, volume, id, "snapshot").await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &v.region, id),
            "snapshot.create",
            (
                json!(null),
                json!({"name": name, "volume": volume, "size_gib": v.size_gib, "state": "creating"}),
            ),
            request_id,
        )
        .await?;
        tx.commit().await?;
        Ok(MadeSnapshot { id, created: true })
    }

    async fn snapshot_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        id: SnapshotId,
    ) -> Result<Project<R>> {
        let project = sqlx::query_scalar!(
            r#"SELECT project_id AS "project: ProjectId" FROM volume_snapshots
               WHERE id = $1 AND state <> 'deleted'"#,
            id as SnapshotId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "snapshot" })?;
        self.project_access::<R>(principal, project)
            .await
            .map_err(|e| match e {
                Error::NotFound { .. } => Error::NotFound { what: "snapshot" },
                other => other,
            })
    }

    async fn snapshots(&self, who: &Project<ProjectViewers>) -> Result<Vec<Snapshot>> {
        let mut conn = self.pool().acquire().await?;
        read_snapshots(&mut conn, who.id(), None).await
    }

    async fn snapshot(&self, who: &Project<ProjectViewers>, id: SnapshotId) -> Result<Snapshot> {
        let mut conn = self.pool().acquire().await?;
        read_snapshots(&mut conn, who.id(), Some(id))
            .await?
            .pop()
            .ok_or(Error::NotFound { what: "snapshot" })
    }

    #[tracing::instrument(skip_all, fields(snapshot.id = %id))]
    async fn delete_snapshot(
        &self,
        who: &Project<ProjectOperators>,
        id: SnapshotId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let s = sqlx::query!(
            r#"SELECT name, region, state, volume_id AS "volume: VolumeId" FROM volume_snapshots
               WHERE id = $1 AND project_id = $2 FOR NO KEY UPDATE"#,
            id as SnapshotId,
            who.id() as ProjectId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "snapshot" })?;
        match SnapshotState::parse(&s.state).map_err(Error::Corrupt)? {
            SnapshotState::Deleting | SnapshotState::Deleted => return Ok(()),
            SnapshotState::Available | SnapshotState::Error => {}
            SnapshotState::Creating => {
                return Err(Error::Conflict(format!(
                    "snapshot {} is being taken; delete it once it is available",
                    s.name
                )));
            }
        }
        sqlx::query!(
            "UPDATE volume_snapshots SET state = 'deleting', error_reason = NULL WHERE id = $1",
            id as SnapshotId
        )
        .execute(&mut *tx)
        .await
        .map_err(cp_base::db::trigger_refusal)?;
        queue_snapshot_job(&mut tx, s.volume, id, "erase_snapshot").await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &s.region, id),
            "snapshot.delete",
            (json!({"state": s.state}), json!({"state": "deleting"})),
            request_id,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
