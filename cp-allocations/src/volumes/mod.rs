//! Volumes: a project's block storage on its region's storage backend. Each change is one
//! transaction that moves the volume along its state machine (held by the database too) and
//! queues what the backend must do as a `volume_jobs` row; the server's storage worker does
//! those jobs outside any transaction and reports each outcome here ([`jobs`]).

pub mod jobs;
pub mod snapshots;
pub mod worker;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;
use time::OffsetDateTime;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::db::OnConstraint;
use cp_base::error::{Denied, Error, Result};
use cp_base::ids::{AllocationId, ProjectId, SnapshotId, TenantId, UserId, VolumeId};
use cp_billing::internal::storage_price_in;
use cp_identity::auth::Principal;
use cp_identity::policy::{PolicyKey, PolicyValue, Resolved, resolve_policies_on};
use cp_identity::tenancy::{
    Project, ProjectOperators, ProjectRequirement, ProjectViewers, TenancyApi,
};

use crate::allocations::decide::{counts_in_project, denied, invalid, policy};
use crate::allocations::lifecycle::volumes::{queue_job, unplug};

pub use portal_types::volumes::{MAX_VOLUME_GIB, StoragePrice, Volume, VolumeState};

/// What a project member asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRequest {
    pub name: String,
    pub region: String,
    pub size_gib: u32,
    /// The same key twice creates one volume.
    pub idempotency_key: String,
    /// Made holding what this snapshot (of the project) holds. The region may then be left
    /// empty (the snapshot's), and the size 0 (the snapshot's).
    #[serde(default)]
    pub snapshot: Option<SnapshotId>,
}

/// A volume request with every field checked; nothing read yet.
struct ValidVolume {
    name: String,
    region: String,
    size_gib: i32,
    idempotency_key: String,
    snapshot: Option<SnapshotId>,
    fingerprint: String,
}

pub(crate) fn check_size(field: &'static str, size: u32) -> Result<i32> {
    if (1..=MAX_VOLUME_GIB).contains(&size) {
        Ok(size as i32)
    } else {
        Err(invalid(
            field,
            format!("{size} GiB: a volume holds 1 to {MAX_VOLUME_GIB} GiB"),
        ))
    }
}

impl ValidVolume {
    fn check(r: &VolumeRequest) -> Result<Self> {
        let name = portal_types::allocations::check_instance_name(&r.name)
            .map_err(|reason| invalid("name", reason))?;
        let region = r.region.trim().to_ascii_lowercase();
        if region.is_empty() || region.len() > 63 {
            return Err(invalid("region", "name the region the volume lives in"));
        }
        let size_gib = check_size("size_gib", r.size_gib)?;
        let key = r.idempotency_key.trim();
        if !(8..=200).contains(&key.len()) || !key.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid(
                "idempotency_key",
                "use 8 to 200 printable characters (a UUID per request, for example)",
            ));
        }
        let from = r.snapshot.map(|s| format!("\n{s}")).unwrap_or_default();
        Ok(ValidVolume {
            fingerprint: format!("{name}\n{region}\n{size_gib}{from}"),
            snapshot: r.snapshot,
            name,
            region,
            size_gib,
            idempotency_key: key.to_string(),
        })
    }
}

/// Whether the API made a new volume or answered a retry with the one it made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Made {
    pub id: VolumeId,
    pub created: bool,
}

#[allow(async_fn_in_trait)]
pub trait VolumesApi {
    /// Makes a volume in the project (in `creating`; the backend makes it), within the
    /// region policy and the volume quotas.
    async fn create_volume(
        &self,
        who: &Project<ProjectOperators>,
        req: &VolumeRequest,
        request_id: Option<&str>,
    ) -> Result<Made>;

    /// The caller's proof of role `R` in the project that owns volume `id`; "not found" for a
    /// volume they may not see, as for one that doesn't exist.
    async fn volume_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        id: VolumeId,
    ) -> Result<Project<R>>;

    /// The project's volumes that are not deleted, newest first.
    async fn volumes(&self, who: &Project<ProjectViewers>) -> Result<Vec<Volume>>;

    async fn volume(&self, who: &Project<ProjectViewers>, id: VolumeId) -> Result<Volume>;

    /// Grows a volume (never shrinks), attached or not.
    async fn grow_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        size_gib: u32,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Attaches an available volume to a running instance of the same project and region.
    async fn attach_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        to: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Detaches a volume from its instance. Detaching one that is available already is done.
    async fn detach_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Deletes a volume that is attached to nothing: it is erased, then gone. Deleting one
    /// that is deleted (or being deleted) already is done.
    async fn delete_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        request_id: Option<&str>,
    ) -> Result<()>;
}

struct VolumeRow {
    id: VolumeId,
    project_id: ProjectId,
    name: String,
    region: String,
    size_gib: i32,
    kind: String,
    state: String,
    error_reason: Option<String>,
    attached_to: Option<AllocationId>,
    attached_name: Option<String>,
    source_snapshot: Option<SnapshotId>,
    source_snapshot_name: Option<String>,
    created_at: OffsetDateTime,
    state_changed_at: OffsetDateTime,
    price_per_gib_month_micro: Option<i64>,
    currency: Option<String>,
}

impl TryFrom<VolumeRow> for Volume {
    type Error = Error;
    fn try_from(r: VolumeRow) -> Result<Volume> {
        let price = r
            .price_per_gib_month_micro
            .zip(r.currency)
            .map(|(micro, currency)| StoragePrice {
                region: r.region.clone(),
                currency: currency.into(),
                per_gib_month_micro: micro,
            });
        Ok(Volume {
            id: r.id,
            project_id: r.project_id,
            name: r.name,
            region: r.region,
            size_gib: u32::try_from(r.size_gib)
                .map_err(|_| Error::Corrupt("volume size".into()))?,
            kind: r.kind,
            state: VolumeState::parse(&r.state).map_err(Error::Corrupt)?,
            error: r.error_reason,
            attached_to: r.attached_to,
            attached_name: r.attached_name,
            source_snapshot: r.source_snapshot,
            source_snapshot_name: r.source_snapshot_name,
            created_at: r.created_at,
            state_changed_at: r.state_changed_at,
            monthly_cost: price.map(|p| p.monthly(r.size_gib.unsigned_abs())),
        })
    }
}

async fn read_volumes(
    conn: &mut PgConnection,
    project: ProjectId,
    id: Option<VolumeId>,
) -> Result<Vec<Volume>> {
    let rows = sqlx::query_as!(
        VolumeRow,
        r#"SELECT v.id AS "id: VolumeId", v.project_id AS "project_id: ProjectId", v.name,
                  v.region, v.size_gib, v.kind, v.state, v.error_reason,
                  coalesce(a.instance_id, v.attached_to) AS "attached_to: AllocationId",
                  a.name AS "attached_name?",
                  v.source_snapshot AS "source_snapshot: SnapshotId",
                  s.name AS "source_snapshot_name?",
                  v.created_at, v.state_changed_at, v.price_per_gib_month_micro, v.currency
           FROM volumes v LEFT JOIN allocations a ON a.id = v.attached_to
                LEFT JOIN volume_snapshots s ON s.id = v.source_snapshot
           WHERE v.project_id = $1 AND v.state <> 'deleted' AND v.root_of IS NULL
             AND ($2::uuid IS NULL OR v.id = $2)
           ORDER BY v.created_at DESC, v.id"#,
        project as ProjectId,
        id.map(|i| i.0)
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(Volume::try_from).collect()
}

/// The volume's row, locked for a change: its state, region, size and attachment.
pub(crate) struct Locked {
    name: String,
    region: String,
    size_gib: i32,
    state: VolumeState,
    attached_to: Option<AllocationId>,
}

pub(crate) async fn lock_volume(
    conn: &mut PgConnection,
    project: ProjectId,
    id: VolumeId,
) -> Result<Locked> {
    let r = sqlx::query!(
        r#"SELECT name, region, size_gib, state, attached_to AS "attached_to: AllocationId"
           FROM volumes WHERE id = $1 AND project_id = $2 AND root_of IS NULL
           FOR NO KEY UPDATE"#,
        id as VolumeId,
        project as ProjectId
    )
    .fetch_optional(conn)
    .await?
    .ok_or(Error::NotFound { what: "volume" })?;
    Ok(Locked {
        name: r.name,
        region: r.region,
        size_gib: r.size_gib,
        state: VolumeState::parse(&r.state).map_err(Error::Corrupt)?,
        attached_to: r.attached_to,
    })
}

/// Refuses a volume in the wrong state for `action`, in words.
pub(crate) fn refuse(name: &str, state: VolumeState, action: &str) -> Error {
    Error::Conflict(format!("volume {name} is {state}; {action}"))
}

/// `max_volume_gib` and `max_volumes` against what the scope holds (snapshots count for the
/// GiB they keep), with `more_gib` GiB and `more_volumes` volumes added. Locks the scope first, so two requests can't both fit in the
/// last space.
pub(crate) async fn within_volume_quotas(
    conn: &mut PgConnection,
    tenant: TenantId,
    project: ProjectId,
    more_gib: i64,
    more_volumes: i64,
) -> Result<()> {
    let policies = resolve_policies_on(&mut *conn, Some(tenant), Some(project)).await?;
    let limits: Vec<(&Resolved, u32, &'static str, i64)> = [
        (PolicyKey::MaxVolumeGib, "GiB of volumes", more_gib),
        (PolicyKey::MaxVolumes, "volumes", more_volumes),
    ]
    .into_iter()
    .filter(|(_, _, more)| *more > 0)
    .filter_map(|(key, unit, more)| {
        let p = policy(&policies, key);
        match p.value {
            Some(PolicyValue::MaxVolumeGib(max) | PolicyValue::MaxVolumes(max)) => {
                Some((p, max, unit, more))
            }
            _ => None,
        }
    })
    .collect();
    if limits.is_empty() {
        return Ok(());
    }
    if limits.iter().all(|(p, ..)| counts_in_project(p)) {
        sqlx::query!(
            "SELECT 1 AS one FROM projects WHERE id = $1 FOR NO KEY UPDATE",
            project as ProjectId
        )
        .fetch_one(&mut *conn)
        .await?;
    } else {
        sqlx::query!(
            "SELECT 1 AS one FROM tenants WHERE id = $1 FOR NO KEY UPDATE",
            tenant as TenantId
        )
        .fetch_one(&mut *conn)
        .await?;
    }
    for (p, max, unit, more) in limits {
        let in_project = counts_in_project(p);
        let held = sqlx::query!(
            r#"SELECT (coalesce(sum(size_gib), 0)
                       + (SELECT coalesce(sum(s.size_gib), 0) FROM volume_snapshots s
                          WHERE s.tenant_id = $1 AND ($2::uuid IS NULL OR s.project_id = $2)
                            AND s.state <> 'deleted'))::bigint AS "gib!",
                      count(*) AS "volumes!"
               FROM volumes
               WHERE tenant_id = $1 AND ($2::uuid IS NULL OR project_id = $2)
                 AND state <> 'deleted' AND root_of IS NULL"#,
            tenant as TenantId,
            in_project.then_some(project.0)
        )
        .fetch_one(&mut *conn)
        .await?;
        let in_use = if unit == "volumes" {
            held.volumes
        } else {
            held.gib
        };
        if in_use + more > i64::from(max) {
            return Err(denied(
                p,
                Denied::VolumeQuota {
                    unit,
                    max,
                    scope: if in_project {
                        "project"
                    } else {
                        "organization"
                    },
                    in_use,
                    asked: more,
                },
            ));
        }
    }
    Ok(())
}

/// Refuses a region the project may not use or where nothing is sold.
async fn region_allowed(
    conn: &mut PgConnection,
    tenant: TenantId,
    project: ProjectId,
    region: &str,
) -> Result<()> {
    let known = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM skus WHERE $1 = ANY (regions) AND state = 'active')
           AS "known!""#,
        region
    )
    .fetch_one(&mut *conn)
    .await?;
    if !known {
        return Err(invalid(
            "region",
            format!("{region:?} is not a region this cloud sells in"),
        ));
    }
    let policies = resolve_policies_on(&mut *conn, Some(tenant), Some(project)).await?;
    let p = policy(&policies, PolicyKey::AllowedRegions);
    if let Some(PolicyValue::AllowedRegions(list)) = &p.value
        && !list.iter().any(|r| r == region)
    {
        return Err(denied(
            p,
            Denied::NotAllowed {
                allowed: list.clone(),
                asked: region.to_string(),
            },
        ));
    }
    Ok(())
}

pub(crate) async fn record(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    user: UserId,
    (tenant, project, region, id): (TenantId, ProjectId, &str, VolumeId),
    action: &'static str,
    (before, after): (serde_json::Value, serde_json::Value),
    request_id: Option<&str>,
) -> Result<()> {
    audit::record(
        conn,
        AuditEntry {
            actor: Actor::User(user),
            action,
            resource: &cp.naming().volume(region, tenant, project, id)?,
            before: Some(before),
            after: Some(after),
            request_id,
        },
    )
    .await?;
    Ok(())
}

impl VolumesApi for ControlPlane {
    async fn volume_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        id: VolumeId,
    ) -> Result<Project<R>> {
        let project = sqlx::query_scalar!(
            r#"SELECT project_id AS "project: ProjectId" FROM volumes
               WHERE id = $1 AND state <> 'deleted' AND root_of IS NULL"#,
            id as VolumeId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "volume" })?;
        self.project_access::<R>(principal, project)
            .await
            .map_err(|e| match e {
                Error::NotFound { .. } => Error::NotFound { what: "volume" },
                other => other,
            })
    }

    #[tracing::instrument(skip_all, fields(project.id = %who.id()))]
    async fn create_volume(
        &self,
        who: &Project<ProjectOperators>,
        req: &VolumeRequest,
        request_id: Option<&str>,
    ) -> Result<Made> {
        let req = snapshots::filled_from_snapshot(self.pool(), who.id(), req).await?;
        let v = ValidVolume::check(&req)?;
        let mut tx = self.pool().begin().await?;
        let existing = sqlx::query!(
            r#"SELECT id AS "id: VolumeId", request_fingerprint FROM volumes
               WHERE project_id = $1 AND idempotency_key = $2"#,
            who.id() as ProjectId,
            v.idempotency_key
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(e) = existing {
            return if e.request_fingerprint == v.fingerprint {
                Ok(Made {
                    id: e.id,
                    created: false,
                })
            } else {
                Err(Error::Conflict(
                    "this idempotency key was used for a different volume request".into(),
                ))
            };
        }
        region_allowed(&mut tx, who.tenant(), who.id(), &v.region).await?;
        if let Some(snapshot) = v.snapshot {
            snapshots::holds_for(&mut tx, who.id(), snapshot, &v.region, v.size_gib).await?;
        }
        within_volume_quotas(&mut tx, who.tenant(), who.id(), i64::from(v.size_gib), 1).await?;
        let price = storage_price_in(&mut tx, &v.region)
            .await?
            .ok_or_else(|| Error::Invalid {
                field: "region",
                reason: format!(
                    "volumes are not sold in {} yet: storage there has no price",
                    v.region
                ),
            })?;
        let id = VolumeId::new_random();
        sqlx::query!(
            "INSERT INTO volumes (id, tenant_id, project_id, region, name, size_gib,
                                  idempotency_key, request_fingerprint, created_by,
                                  price_per_gib_month_micro, currency, source_snapshot)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            id as VolumeId,
            who.tenant() as TenantId,
            who.id() as ProjectId,
            v.region,
            v.name,
            v.size_gib,
            v.idempotency_key,
            v.fingerprint,
            who.user() as UserId,
            price.per_gib_month_micro,
            price.currency.as_str(),
            v.snapshot.map(|s| s.0)
        )
        .execute(&mut *tx)
        .await
        .on_constraint("volumes_name_in_project", || {
            Error::Conflict(format!(
                "the project has a volume named {} already; volume names are unique in a project",
                v.name
            ))
        })?;
        queue_job(&mut tx, id, "create").await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &v.region, id),
            "volume.create",
            (
                json!(null),
                json!({"name": v.name, "size_gib": v.size_gib, "state": "creating",
                       "snapshot": v.snapshot}),
            ),
            request_id,
        )
        .await?;
        tx.commit().await?;
        Ok(Made { id, created: true })
    }

    async fn volumes(&self, who: &Project<ProjectViewers>) -> Result<Vec<Volume>> {
        let mut conn = self.pool().acquire().await?;
        read_volumes(&mut conn, who.id(), None).await
    }

    async fn volume(&self, who: &Project<ProjectViewers>, id: VolumeId) -> Result<Volume> {
        let mut conn = self.pool().acquire().await?;
        read_volumes(&mut conn, who.id(), Some(id))
            .await?
            .pop()
            .ok_or(Error::NotFound { what: "volume" })
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id))]
    async fn grow_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        size_gib: u32,
        request_id: Option<&str>,
    ) -> Result<()> {
        let size = check_size("size_gib", size_gib)?;
        let mut tx = self.pool().begin().await?;
        let v = lock_volume(&mut tx, who.id(), id).await?;
        if size == v.size_gib {
            return Ok(());
        }
        if size < v.size_gib {
            return Err(invalid(
                "size_gib",
                format!(
                    "{size} GiB: {} holds {} GiB, and volumes only grow",
                    v.name, v.size_gib
                ),
            ));
        }
        if !matches!(
            v.state,
            VolumeState::Available | VolumeState::Attaching | VolumeState::InUse
        ) {
            return Err(refuse(
                &v.name,
                v.state,
                "volumes grow when available or attached",
            ));
        }
        within_volume_quotas(
            &mut tx,
            who.tenant(),
            who.id(),
            i64::from(size - v.size_gib),
            0,
        )
        .await?;
        sqlx::query!(
            "UPDATE volumes SET size_gib = $2 WHERE id = $1",
            id as VolumeId,
            size
        )
        .execute(&mut *tx)
        .await?;
        queue_job(&mut tx, id, "grow").await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &v.region, id),
            "volume.grow",
            (json!({"size_gib": v.size_gib}), json!({"size_gib": size})),
            request_id,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id, allocation.id = %to))]
    async fn attach_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        to: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let v = lock_volume(&mut tx, who.id(), id).await?;
        let not_ours = || {
            invalid(
                "instance",
                format!("{to} is not an instance of this project"),
            )
        };
        // The instance's current run (a started instance's id is its first run's).
        let to = crate::allocations::stop_start::current_run(&mut tx, who.id(), to)
            .await
            .map_err(|_| not_ours())?;
        let instance = sqlx::query!(
            "SELECT name, region, state, desired_state FROM allocations
             WHERE id = $1 AND project_id = $2 FOR SHARE",
            to as AllocationId,
            who.id() as ProjectId
        )
        .fetch_optional(&mut *tx)
        .await?
        // The volume was found; what the body names is not an instance of its project (one
        // of another project reads the same as one that doesn't exist).
        .ok_or_else(not_ours)?;
        if v.attached_to == Some(to) {
            return Ok(());
        }
        if v.state != VolumeState::Available {
            return Err(match v.attached_to {
                Some(_) => Error::Conflict(format!(
                    "volume {} is attached to another instance; detach it first",
                    v.name
                )),
                None => refuse(&v.name, v.state, "volumes attach when available"),
            });
        }
        if instance.region != v.region {
            return Err(Error::Conflict(format!(
                "volume {} is in {} and instance {} in {}; a volume attaches only in its region",
                v.name, v.region, instance.name, instance.region
            )));
        }
        if instance.desired_state != "running"
            || !matches!(
                instance.state.as_str(),
                "requested" | "placed" | "provisioning" | "running"
            )
        {
            return Err(Error::Conflict(format!(
                "instance {} is {}; volumes attach to instances that run",
                instance.name, instance.state
            )));
        }
        sqlx::query!(
            "UPDATE volumes SET state = 'attaching', attached_to = $2 WHERE id = $1",
            id as VolumeId,
            to as AllocationId
        )
        .execute(&mut *tx)
        .await
        .map_err(cp_base::db::trigger_refusal)?;
        queue_job(&mut tx, id, "export").await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &v.region, id),
            "volume.attach",
            (
                json!({"state": v.state.as_str()}),
                json!({"state": "attaching", "attached_to": to}),
            ),
            request_id,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id))]
    async fn detach_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let v = lock_volume(&mut tx, who.id(), id).await?;
        match v.state {
            VolumeState::Available | VolumeState::Detaching => return Ok(()),
            VolumeState::Attaching | VolumeState::InUse => {}
            other => return Err(refuse(&v.name, other, "only an attached volume detaches")),
        }
        sqlx::query!(
            "UPDATE volumes SET state = 'detaching' WHERE id = $1",
            id as VolumeId
        )
        .execute(&mut *tx)
        .await
        .map_err(cp_base::db::trigger_refusal)?;
        let node = unplug(&mut tx, id, v.attached_to).await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &v.region, id),
            "volume.detach",
            (
                json!({"state": v.state.as_str(), "attached_to": v.attached_to}),
                json!({"state": "detaching"}),
            ),
            request_id,
        )
        .await?;
        tx.commit().await?;
        if let Some(node) = node {
            self.wakeups().task_queued(node);
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(volume.id = %id))]
    async fn delete_volume(
        &self,
        who: &Project<ProjectOperators>,
        id: VolumeId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let v = lock_volume(&mut tx, who.id(), id).await?;
        match v.state {
            VolumeState::Deleting | VolumeState::Deleted => return Ok(()),
            VolumeState::Available | VolumeState::Error => {}
            VolumeState::Attaching | VolumeState::InUse | VolumeState::Detaching => {
                return Err(Error::VolumeInUse(format!(
                    "volume {} is attached to an instance; detach it first",
                    v.name
                )));
            }
            VolumeState::Creating => {
                return Err(refuse(&v.name, v.state, "delete it once it is available"));
            }
        }
        snapshots::none_left_of(&mut tx, id, &v.name).await?;
        sqlx::query!(
            "UPDATE volumes SET state = 'deleting', error_reason = NULL WHERE id = $1",
            id as VolumeId
        )
        .execute(&mut *tx)
        .await
        .map_err(cp_base::db::trigger_refusal)?;
        queue_job(&mut tx, id, "erase").await?;
        record(
            self,
            &mut tx,
            who.user(),
            (who.tenant(), who.id(), &v.region, id),
            "volume.delete",
            (
                json!({"state": v.state.as_str()}),
                json!({"state": "deleting"}),
            ),
            request_id,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
