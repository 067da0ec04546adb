//! Allocations: launch (policy chain, placement and reservation in one transaction, with an
//! idempotency key), release, and what the allocation pages read. The lifecycle after launch
//! (outbox dispatch, agent results, cleanup proofs, lost nodes) is in [`lifecycle`].

pub mod lifecycle;
mod ssh;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use time::OffsetDateTime;

pub use ssh::{fingerprint as ssh_fingerprint, validate_ssh_key, validate_ssh_keys};

use crate::ControlPlane;
use crate::audit::{self, Actor, AuditEntry};
use crate::catalog::{Shape, Sku, sku_by_name};
use crate::error::{Error, Result};
use crate::ids::{AllocationId, ListingVersionId, NodeId, ProjectId, SkuId, TenantId, UserId};
use crate::placement::{self, Placement, Reserve};
use crate::policy::{Level, Money, PolicyKey, PolicyValue, Resolved, resolve_policies_on};
use crate::tenancy::{Project, ProjectOperators, ProjectRequirement, ProjectViewers};

/// What a tenant asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub sku: String,
    /// Empty: any of the SKU's regions.
    pub region: String,
    /// The marketplace listing's slug (an OS image is a listing too).
    pub listing: String,
    /// Empty: the listing's newest published version.
    pub version: String,
    pub ssh_public_key: String,
    pub name: String,
    /// The same key twice creates one allocation.
    pub idempotency_key: String,
    /// Release it automatically after this many hours (1 to 8760); `None`: when released.
    /// A lifetime policy caps it.
    pub lifetime_hours: Option<u32>,
}

/// The longest lifetime a launch may ask for: a year.
pub const MAX_LIFETIME_HOURS: u32 = 8760;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launched {
    pub id: AllocationId,
    /// False when the idempotency key named an allocation that already existed.
    pub created: bool,
}

/// The states, in lifecycle order.
pub const STATES: &[&str] = &[
    "requested",
    "placed",
    "provisioning",
    "running",
    "releasing",
    "cleaning",
    "released",
];

fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

fn check_name(name: &str) -> Result<String> {
    let name = name.trim().to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(name)
    } else {
        Err(invalid(
            "name",
            format!(
                "{name:?}: use 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
            ),
        ))
    }
}

fn check_idempotency_key(key: &str) -> Result<&str> {
    let key = key.trim();
    if (8..=200).contains(&key.len()) && key.chars().all(|c| c.is_ascii_graphic()) {
        Ok(key)
    } else {
        Err(invalid(
            "idempotency_key",
            "use 8 to 200 printable characters (a UUID per launch form, for example)",
        ))
    }
}

/// Writes the allocation and its claims for one placement attempt (inside a savepoint).
struct Reservation<'a> {
    id: AllocationId,
    tenant: TenantId,
    project: ProjectId,
    user: UserId,
    name: &'a str,
    sku: &'a Sku,
    listing_version: ListingVersionId,
    ssh_public_key: &'a str,
    idempotency_key: &'a str,
    fingerprint: &'a str,
    requested_at: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
}

impl Reserve for Reservation<'_> {
    async fn reserve(&mut self, conn: &mut PgConnection, p: &Placement) -> Result<()> {
        let inserted = sqlx::query!(
            r#"INSERT INTO allocations
                   (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                    listing_version_id, ssh_public_key, price_per_hour_minor, currency, idempotency_key,
                    request_fingerprint, requested_by, placement, state, requested_at, expires_at)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                       $17, 'placed', $18, $19)"#,
            self.id as AllocationId,
            self.tenant as TenantId,
            self.project as ProjectId,
            self.name,
            self.sku.id as SkuId,
            self.sku.shape.as_str(),
            self.sku.gpu_count,
            p.region,
            p.node_id as NodeId,
            self.listing_version as ListingVersionId,
            self.ssh_public_key,
            self.sku.price.amount_minor,
            self.sku.price.currency,
            self.idempotency_key,
            self.fingerprint,
            self.user as UserId,
            json!({ "why": p.why, "hostname": p.hostname, "slot_indexes": p.slot_indexes }),
            self.requested_at,
            self.expires_at,
        )
        .execute(&mut *conn)
        .await;
        match inserted {
            Err(sqlx::Error::Database(e)) if e.constraint() == Some("allocations_live_name") => {
                return Err(invalid(
                    "name",
                    format!(
                        "{} is the name of a live allocation in this project",
                        self.name
                    ),
                ));
            }
            // Unreachable while `launch` holds the key's advisory lock; the index is the
            // backstop, and its refusal must not read as "try the next node".
            Err(sqlx::Error::Database(e))
                if e.constraint() == Some("allocations_project_id_idempotency_key_key") =>
            {
                return Err(Error::Conflict(
                    "another request with this idempotency key is being placed; retry".into(),
                ));
            }
            other => other?,
        };
        match self.sku.shape {
            Shape::GpuSlice => sqlx::query!(
                "INSERT INTO resource_claims (id, node_id, slot_id, kind, allocation_id)
                 SELECT gen_random_uuid(), $1, s, 'gpu_slice', $2 FROM unnest($3::uuid[]) AS s",
                p.node_id as NodeId,
                self.id as AllocationId,
                &p.slots.iter().map(|s| s.0).collect::<Vec<_>>(),
            ),
            Shape::Baremetal => sqlx::query!(
                "INSERT INTO resource_claims (id, node_id, slot_id, kind, allocation_id)
                 VALUES (gen_random_uuid(), $1, NULL, 'baremetal', $2)",
                p.node_id as NodeId,
                self.id as AllocationId,
            ),
        }
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

/// The scope a quota or budget counts in: the project when the project level set it, the
/// whole tenant when the tenant (or global) level did.
fn counts_in_project(r: &Resolved) -> bool {
    r.decided_by == Some(Level::Project)
}

fn policy(all: &[Resolved], key: PolicyKey) -> &Resolved {
    all.iter()
        .find(|r| r.key == key)
        .expect("resolve_policies returns every key")
}

fn decided(r: &Resolved) -> String {
    format!(
        "policy {} (set at {} level)",
        r.key.as_str(),
        r.decided_by.map(Level::as_str).unwrap_or("no")
    )
}

/// What a project may still spend this month under its `monthly_budget` policy, for the
/// launch form's estimate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetLeft {
    pub limit: Money,
    /// Rated this month plus what runs unrated, rounded up to the cent.
    pub spent: Money,
    /// Never below zero.
    pub left: Money,
    /// "policy monthly_budget (set at project level)".
    pub decided: String,
}

impl ControlPlane {
    /// The project's remaining monthly budget, counted as a launch counts it (the scope of
    /// the level that set it); `None` when no budget applies.
    #[tracing::instrument(skip_all, fields(project.id = %who.id()))]
    pub async fn budget_left<R: ProjectRequirement>(
        &self,
        who: &Project<R>,
    ) -> Result<Option<BudgetLeft>> {
        let mut conn = self.pool().acquire().await?;
        let policies = resolve_policies_on(&mut conn, Some(who.tenant()), Some(who.id())).await?;
        let budget = policy(&policies, PolicyKey::MonthlyBudget);
        let Some(PolicyValue::MonthlyBudget(limit)) = &budget.value else {
            return Ok(None);
        };
        let spent = crate::billing::reports::spent_this_month(
            &mut conn,
            who.tenant(),
            counts_in_project(budget).then_some(who.id()),
            &limit.currency,
            OffsetDateTime::now_utc(),
        )
        .await?
        .ceil_to_minor();
        let money = |amount_minor| Money {
            amount_minor,
            currency: limit.currency.clone(),
        };
        Ok(Some(BudgetLeft {
            limit: limit.clone(),
            spent: money(spent),
            left: money((limit.amount_minor - spent).max(0)),
            decided: decided(budget),
        }))
    }

    /// The longest an allocation launched in this project may live, under the
    /// `max_allocation_lifetime_hours` policy, with where it was set: for the launch form.
    #[tracing::instrument(skip_all, fields(project.id = %who.id()))]
    pub async fn lifetime_limit<R: ProjectRequirement>(
        &self,
        who: &Project<R>,
    ) -> Result<Option<(u32, String)>> {
        let mut conn = self.pool().acquire().await?;
        let policies = resolve_policies_on(&mut conn, Some(who.tenant()), Some(who.id())).await?;
        let lifetime = policy(&policies, PolicyKey::MaxAllocationLifetimeHours);
        Ok(match &lifetime.value {
            Some(PolicyValue::MaxAllocationLifetimeHours(h)) => Some((*h, decided(lifetime))),
            _ => None,
        })
    }

    /// Launches `req` in the caller's project: checks the policy chain, places, reserves the
    /// slots, writes the allocation, its outbox row and the audit record, all in one
    /// transaction. A repeated idempotency key returns the first allocation.
    #[tracing::instrument(skip_all, fields(project.id = %who.id(), sku.name = %req.sku))]
    pub async fn launch(
        &self,
        who: &Project<ProjectOperators>,
        req: &LaunchRequest,
        request_id: Option<&str>,
    ) -> Result<Launched> {
        let requested_at = OffsetDateTime::now_utc();
        let user = who.user();
        let name = check_name(&req.name)?;
        if let Some(h) = req.lifetime_hours
            && !(1..=MAX_LIFETIME_HOURS).contains(&h)
        {
            return Err(invalid(
                "lifetime_hours",
                format!(
                    "{h}: choose 1 to {MAX_LIFETIME_HOURS} hours, or none to keep it until released"
                ),
            ));
        }
        let name = name.as_str();
        let key = check_idempotency_key(&req.idempotency_key)?;
        let ssh_public_key = validate_ssh_keys(&req.ssh_public_key)?;
        let ssh_public_key = ssh_public_key.as_str();
        let region = req.region.trim().to_ascii_lowercase();
        let region = region.as_str();
        let fingerprint = {
            let mut h = Sha256::new();
            for part in [
                req.sku.trim(),
                region,
                req.listing.trim(),
                req.version.trim(),
                ssh_public_key,
                name,
            ] {
                h.update(part.as_bytes());
                h.update([0]);
            }
            format!("{:x}", h.finalize())
        };
        let fingerprint = fingerprint.as_str();
        let mut tx = self.pool().begin().await?;
        // Requests with the same key wait for each other here, so the second sees the first.
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 7)) AS locked",
            format!("{}:{key}", who.id())
        )
        .fetch_one(&mut *tx)
        .await?;
        if let Some(found) = existing(&mut tx, who.id(), key, fingerprint).await? {
            return Ok(found);
        }
        let sku = match sku_by_name(&mut tx, &req.sku).await {
            Err(Error::NotFound { .. }) => {
                return Err(invalid(
                    "sku",
                    format!("there is no SKU {:?}", req.sku.trim()),
                ));
            }
            other => other?,
        };
        if sku.state != "active" {
            return Err(invalid(
                "sku",
                format!("{} is not for sale ({})", sku.name, sku.state),
            ));
        }
        let software =
            crate::marketplace::launch_version(&mut tx, &req.listing, &req.version).await?;
        if let Some(why) = software.compatibility.why_not(&sku) {
            return Err(invalid(
                "sku",
                format!("{} doesn't fit {}: {why}", software.label, sku.name),
            ));
        }
        let fee = software
            .compatibility
            .fee
            .as_ref()
            .map_or(0, |f| f.amount_minor);
        let mut regions = if region.is_empty() {
            sku.regions.clone()
        } else if sku.regions.iter().any(|r| r == region) {
            vec![region.to_string()]
        } else {
            return Err(invalid(
                "region",
                format!(
                    "{} is sold in {}, not {region}",
                    sku.name,
                    sku.regions.join(", ")
                ),
            ));
        };

        // The policy chain, in this transaction.
        let policies = resolve_policies_on(&mut tx, Some(who.tenant()), Some(who.id())).await?;
        let allowed = policy(&policies, PolicyKey::AllowedSkus);
        if let Some(PolicyValue::AllowedSkus(list)) = &allowed.value
            && !list.contains(&sku.name)
        {
            return Err(Error::PolicyDenied(format!(
                "{} allows {}, not {}",
                decided(allowed),
                list.join(", "),
                sku.name
            )));
        }
        let allowed = policy(&policies, PolicyKey::AllowedListings);
        if let Some(PolicyValue::AllowedListings(list)) = &allowed.value
            && !list.contains(&software.slug)
        {
            return Err(Error::PolicyDenied(format!(
                "{} allows {}, not {}",
                decided(allowed),
                list.join(", "),
                software.slug
            )));
        }
        let allowed = policy(&policies, PolicyKey::AllowedRegions);
        if let Some(PolicyValue::AllowedRegions(list)) = &allowed.value {
            regions.retain(|r| list.contains(r));
            if regions.is_empty() {
                return Err(Error::PolicyDenied(format!(
                    "{} allows {}; {} is sold only in {}",
                    decided(allowed),
                    list.join(", "),
                    sku.name,
                    if region.is_empty() {
                        sku.regions.join(", ")
                    } else {
                        region.to_string()
                    }
                )));
            }
        }
        let max_gpus = policy(&policies, PolicyKey::MaxGpusInUse);
        let budget = policy(&policies, PolicyKey::MonthlyBudget);
        if max_gpus.value.is_some() || budget.value.is_some() {
            // Serialise this scope's launches, so two can't both fit under the limit.
            let project_scoped = [max_gpus, budget]
                .iter()
                .filter(|r| r.value.is_some())
                .all(|r| counts_in_project(r));
            if project_scoped {
                sqlx::query!(
                    "SELECT 1 AS one FROM projects WHERE id = $1 FOR UPDATE",
                    who.id() as ProjectId
                )
                .fetch_one(&mut *tx)
                .await?;
            } else {
                sqlx::query!(
                    "SELECT 1 AS one FROM tenants WHERE id = $1 FOR UPDATE",
                    who.tenant() as TenantId
                )
                .fetch_one(&mut *tx)
                .await?;
            }
        }
        if let Some(PolicyValue::MaxGpusInUse(max)) = &max_gpus.value {
            let in_use = sqlx::query_scalar!(
                r#"SELECT coalesce(sum(gpu_count), 0)::bigint AS "n!" FROM allocations
                   WHERE tenant_id = $1 AND ($2::uuid IS NULL OR project_id = $2)
                     AND state <> 'released'"#,
                who.tenant() as TenantId,
                counts_in_project(max_gpus).then_some(who.id().0),
            )
            .fetch_one(&mut *tx)
            .await?;
            if in_use + sku.gpu_count as i64 > *max as i64 {
                return Err(Error::PolicyDenied(format!(
                    "{} allows {max} GPUs in use in this {}; {in_use} are in use and {} would need {}",
                    decided(max_gpus),
                    if counts_in_project(max_gpus) {
                        "project"
                    } else {
                        "organization"
                    },
                    sku.name,
                    sku.gpu_count
                )));
            }
        }
        if let Some(PolicyValue::MonthlyBudget(limit)) = &budget.value {
            if limit.currency != sku.price.currency {
                return Err(Error::PolicyDenied(format!(
                    "{} is in {}, but {} is priced in {}; ask an admin to set the budget in {}",
                    decided(budget),
                    limit.currency,
                    sku.name,
                    sku.price.currency,
                    sku.price.currency
                )));
            }
            // The ledger's month-to-date (rated charges plus what runs unrated), in this
            // transaction, plus the launch's first hour.
            let spent = crate::billing::reports::spent_this_month(
                &mut tx,
                who.tenant(),
                counts_in_project(budget).then_some(who.id()),
                &limit.currency,
                time::OffsetDateTime::now_utc(),
            )
            .await?
            .ceil_to_minor();
            let first_hour = sku.price.amount_minor + fee;
            if spent + first_hour > limit.amount_minor {
                let money = |amount_minor| Money {
                    amount_minor,
                    currency: limit.currency.clone(),
                };
                return Err(Error::PolicyDenied(format!(
                    "{} is {limit}; {} is spent this month, and {} for the first hour of {}{} would make {}, {} over",
                    decided(budget),
                    money(spent),
                    money(first_hour),
                    sku.name,
                    if fee > 0 {
                        format!(" with {}", software.label)
                    } else {
                        String::new()
                    },
                    money(spent + first_hour),
                    money(spent + first_hour - limit.amount_minor),
                )));
            }
        }
        let lifetime = policy(&policies, PolicyKey::MaxAllocationLifetimeHours);
        let policy_hours = match &lifetime.value {
            Some(PolicyValue::MaxAllocationLifetimeHours(h)) => Some(*h),
            _ => None,
        };
        let hours = match (req.lifetime_hours, policy_hours) {
            (Some(asked), Some(max)) if asked > max => {
                return Err(Error::PolicyDenied(format!(
                    "{} allows allocations to live {max} hours; this launch asked for {asked}",
                    decided(lifetime)
                )));
            }
            (Some(asked), _) => Some(asked),
            (None, max) => max,
        };
        let expires_at = hours.map(|h| requested_at + time::Duration::hours(i64::from(h)));

        let taken = sqlx::query_scalar!(
            "SELECT 1 AS one FROM allocations WHERE project_id = $1 AND name = $2 AND state <> 'released'",
            who.id() as ProjectId,
            name
        )
        .fetch_optional(&mut *tx)
        .await?;
        if taken.is_some() {
            return Err(invalid(
                "name",
                format!("{name} is the name of a live allocation in this project"),
            ));
        }

        let id = AllocationId::new_random();
        let mut reservation = Reservation {
            id,
            tenant: who.tenant(),
            project: who.id(),
            user,
            name,
            sku: &sku,
            listing_version: software.id,
            ssh_public_key,
            idempotency_key: key,
            fingerprint,
            requested_at,
            expires_at,
        };
        let placed = placement::place(&mut tx, &sku, &regions, &mut reservation).await?;
        sqlx::query!(
            "INSERT INTO outbox (kind, allocation_id) VALUES ('allocation.provision', $1)",
            id as AllocationId
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(user),
                action: "allocation.launch",
                resource: &self
                    .naming()
                    .allocation(&placed.region, who.tenant(), who.id(), id)?,
                before: None,
                after: Some(json!({
                    "name": name, "sku": sku.name, "node": placed.hostname,
                    "software": software.label,
                    "slots": placed.slot_indexes, "price_per_hour": sku.price.to_string(), "fee_per_hour": fee,
                    "why": placed.why,
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        self.dispatch_now(id).await;
        Ok(Launched { id, created: true })
    }

    /// Asks for an allocation to be released. Idempotent: releasing one that is already on
    /// its way out changes nothing. A provision still queued for the agent is cancelled.
    #[tracing::instrument(skip_all, fields(allocation.id = %id))]
    pub async fn release_allocation(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let user = who.user();
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            "SELECT state, region FROM allocations WHERE id = $1 AND project_id = $2 FOR UPDATE",
            id as AllocationId,
            who.id() as ProjectId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "allocation" })?;
        if matches!(row.state.as_str(), "releasing" | "cleaning" | "released") {
            return Ok(());
        }
        lifecycle::begin_release(&mut tx, id, None).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(user),
                action: "allocation.release",
                resource: &self
                    .naming()
                    .allocation(&row.region, who.tenant(), who.id(), id)?,
                before: Some(json!({ "state": row.state })),
                after: Some(json!({ "state": "releasing" })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        self.dispatch_now(id).await;
        Ok(())
    }

    /// A project's allocations, newest first; `state` filters (`active` = not released).
    pub async fn allocations(
        &self,
        who: &Project<ProjectViewers>,
        state: Option<&str>,
    ) -> Result<Vec<AllocationSummary>> {
        let state = state
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "all");
        if let Some(s) = state
            && s != "active"
            && !STATES.contains(&s)
        {
            return Err(invalid(
                "state",
                format!("{s:?} is not one of active, {}", STATES.join(", ")),
            ));
        }
        let rows = sqlx::query!(
            r#"SELECT a.id AS "id: AllocationId", a.name, s.name AS sku, a.gpu_count, a.region,
                      a.state, a.desired_state, a.observed_state, a.failure,
                      a.price_per_hour_minor, a.currency, a.created_at
               FROM allocations a JOIN skus s ON s.id = a.sku_id
               WHERE a.project_id = $1
                 AND ($2::text IS NULL OR a.state = $2 OR ($2 = 'active' AND a.state <> 'released'))
               ORDER BY a.created_at DESC
               LIMIT 500"#,
            who.id() as ProjectId,
            state
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| AllocationSummary {
                id: r.id,
                name: r.name,
                sku: r.sku,
                gpu_count: r.gpu_count,
                region: r.region,
                projected: projected(&r.state, &r.desired_state, r.failure.as_deref()),
                state: r.state,
                price: Money {
                    amount_minor: r.price_per_hour_minor,
                    currency: r.currency,
                }
                .to_string(),
                created_at: crate::fleet::utc(r.created_at),
            })
            .collect())
    }

    /// The caller's proof of role `R` in the project that owns allocation `id`. Outside it,
    /// "not found" (like an unknown id); a weaker role there, "forbidden".
    pub async fn allocation_access<R: ProjectRequirement>(
        &self,
        principal: &crate::auth::Principal,
        id: AllocationId,
    ) -> Result<Project<R>> {
        let project = sqlx::query_scalar!(
            r#"SELECT project_id AS "p: ProjectId" FROM allocations WHERE id = $1"#,
            id as AllocationId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "allocation" })?;
        self.project_access::<R>(principal, project).await
    }

    /// One allocation, for the detail page. Viewers of its project only.
    pub async fn allocation(
        &self,
        principal: &crate::auth::Principal,
        id: AllocationId,
    ) -> Result<AllocationDetail> {
        let who = self
            .allocation_access::<ProjectViewers>(principal, id)
            .await?;
        let can_release = self
            .project_access::<ProjectOperators>(principal, who.id())
            .await
            .is_ok();
        lifecycle::detail(self, &who, id, can_release).await
    }
}

/// The allocation an idempotency key already made, if any; a different request with the
/// same key is refused.
async fn existing(
    conn: &mut PgConnection,
    project: ProjectId,
    key: &str,
    fingerprint: &str,
) -> Result<Option<Launched>> {
    let row = sqlx::query!(
        r#"SELECT id AS "id: AllocationId", request_fingerprint FROM allocations
           WHERE project_id = $1 AND idempotency_key = $2"#,
        project as ProjectId,
        key
    )
    .fetch_optional(conn)
    .await?;
    match row {
        None => Ok(None),
        Some(r) if r.request_fingerprint == fingerprint => Ok(Some(Launched {
            id: r.id,
            created: false,
        })),
        Some(_) => Err(Error::Conflict(
            "this idempotency key was used for a different launch request; reload the form".into(),
        )),
    }
}

/// What a scope spent this month, estimated from the allocations' prices at launch (per
/// second, rounded up), in `currency`.
/// What the UI shows: the state, unless desired and actual disagree.
pub fn projected(state: &str, desired: &str, failure: Option<&str>) -> String {
    match (state, desired, failure) {
        ("released", _, Some(_)) => "failed".into(),
        ("released", _, None) => "released".into(),
        (s, "released", Some(_)) if s != "released" => "failing".into(),
        ("placed" | "provisioning" | "running", "released", None) => "releasing".into(),
        (s, _, _) => s.into(),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationSummary {
    pub id: AllocationId,
    pub name: String,
    pub sku: String,
    pub gpu_count: i32,
    pub region: String,
    pub state: String,
    pub projected: String,
    /// Per hour, at launch.
    pub price: String,
    pub created_at: String,
}

pub use lifecycle::{AllocationDetail, Certificate, Phase, Transition};
