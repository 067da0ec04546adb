//! Allocations: launch (policy chain, placement and reservation in one transaction, with an
//! idempotency key), release, and what the allocation pages read. The lifecycle after launch
//! (outbox dispatch, agent results, cleanup proofs, lost nodes) is in [`lifecycle`].

use cp_identity::tenancy::TenancyApi;

pub mod clusters;
pub(crate) mod decide;
mod group;
pub mod lifecycle;
mod order;
pub(crate) mod stop_start;

pub use order::{LaunchOrder, OrderKeys};
pub use stop_start::instance_state;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgConnection;
use time::OffsetDateTime;

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, ListingVersionId, NodeId, ProjectId, SkuId, TenantId, UserId};
use cp_identity::policy::{Money, PolicyKey, PolicyValue, resolve_policies_on};
use cp_identity::tenancy::{Project, ProjectOperators, ProjectRequirement, ProjectViewers};
use cp_inventory::placement::{self, Placement, Reserve};
use cp_inventory::skus::{Shape, Sku, sku_by_name};
use decide::{counts_in_project, decided, invalid, policy};

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
    /// Guest TCP ports to publish besides SSH, each on its own public port of the host (at
    /// most 7, within the `max_published_ports` policy).
    #[serde(default)]
    pub published_ports: Vec<u16>,
    /// Labels to find it by (`team=vision`); see [`decide::check_tags`].
    #[serde(default)]
    pub tags: Tags,
    /// Cloud-init user data for the VM (a `#cloud-config` document or a `#!` script, at most
    /// 16 KiB), where the image accepts it; see [`decide::check_user_data`].
    #[serde(default)]
    pub user_data: Option<String>,
    /// Available volumes of the project to attach (at most 8): they decide the region, and
    /// are attached in the launch's transaction or not at all.
    #[serde(default)]
    pub volumes: Vec<cp_base::ids::VolumeId>,
}

/// Which allocations to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocationFilter {
    /// A lifecycle state, `active` (not released), or none for all.
    pub state: Option<String>,
    /// `key` (carries the tag) or `key=value`.
    pub tag: Option<String>,
    /// The `next` of the previous page.
    pub after: Option<String>,
    /// 1 to [`MAX_PAGE`].
    pub limit: u32,
}

/// The most allocations one page holds.
pub const MAX_PAGE: u32 = 500;

/// A page of allocations, and where the next one starts (none after the last).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationPage {
    pub items: Vec<AllocationSummary>,
    pub next: Option<String>,
}

/// Where a page stopped: the last allocation's creation time and id. Written as
/// `{unix microseconds}_{id}`; callers pass it back unchanged.
struct PageCursor {
    created_at: OffsetDateTime,
    id: AllocationId,
}

impl std::fmt::Display for PageCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let micros = self.created_at.unix_timestamp_nanos() / 1000;
        write!(f, "{micros}_{}", self.id)
    }
}

impl PageCursor {
    fn parse(s: &str) -> Result<Self> {
        let bad = || {
            invalid(
                "cursor",
                "pass back the next cursor of the previous page as it was",
            )
        };
        let (micros, id) = s.split_once('_').ok_or_else(bad)?;
        let micros: i128 = micros.parse().map_err(|_| bad())?;
        let created_at =
            OffsetDateTime::from_unix_timestamp_nanos(micros * 1000).map_err(|_| bad())?;
        let id = AllocationId(id.parse().map_err(|_| bad())?);
        Ok(Self { created_at, id })
    }
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
    tags: &'a Tags,
    /// The tenant's user data, sealed ([`lifecycle::seal_user_data`]).
    user_data_sealed: Option<String>,
    idempotency_key: &'a str,
    fingerprint: &'a str,
    requested_at: OffsetDateTime,
    expires_at: Option<OffsetDateTime>,
    /// The cluster it is a member of, and its index there.
    cluster: Option<(cp_base::ids::ClusterId, i32)>,
}

impl Reserve for Reservation<'_> {
    async fn reserve(&mut self, conn: &mut PgConnection, p: &Placement) -> Result<()> {
        let inserted = sqlx::query!(
            r#"INSERT INTO allocations
                   (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                    listing_version_id, ssh_public_key, price_per_hour_minor, currency, idempotency_key,
                    request_fingerprint, requested_by, placement, state, requested_at, expires_at,
                    tags, user_data_sealed, cluster_id, cluster_index)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                       $17, 'placed', $18, $19, $20, $21, $22, $23)"#,
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
            self.sku.price.currency.as_str(),
            self.idempotency_key,
            self.fingerprint,
            self.user as UserId,
            json!({ "why": p.why, "hostname": p.hostname, "slot_indexes": p.slot_indexes }),
            self.requested_at,
            self.expires_at,
            serde_json::to_value(self.tags).unwrap_or_default(),
            self.user_data_sealed,
            self.cluster.map(|(c, _)| c.0),
            self.cluster.map(|(_, i)| i),
        )
        .execute(&mut *conn)
        .await;
        match inserted.as_ref().err().and_then(cp_base::db::violated) {
            Some("allocations_live_name") => {
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
            Some("allocations_project_id_idempotency_key_key") => {
                return Err(Error::Conflict(
                    "another request with this idempotency key is being placed; retry".into(),
                ));
            }
            _ => inserted?,
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

/// What the control plane offers for launching, releasing and reading allocations.
#[allow(async_fn_in_trait)]
pub trait AllocationsApi {
    /// The project's remaining monthly budget, counted as a launch counts it (the scope of
    /// the level that set it); `None` when no budget applies.
    async fn budget_left<R: ProjectRequirement>(
        &self,
        who: &Project<R>,
    ) -> Result<Option<BudgetLeft>>;

    /// The longest an allocation launched in this project may live, under the
    /// `max_allocation_lifetime_hours` policy, with where it was set: for the launch form.
    async fn lifetime_limit<R: ProjectRequirement>(
        &self,
        who: &Project<R>,
    ) -> Result<Option<(u32, String)>>;

    /// Launches `req` in the caller's project: checks the policy chain, places, reserves the
    /// slots, writes the allocation, its outbox row and the audit record, all in one
    /// transaction. A repeated idempotency key returns the first allocation.
    async fn launch(
        &self,
        who: &Project<ProjectOperators>,
        req: &LaunchRequest,
        request_id: Option<&str>,
    ) -> Result<Launched>;

    /// Launches what a person ordered (from the form, the API or the CLI) in the project
    /// `who` proves they may launch in: resolves their saved keys, saves a typed one when
    /// asked, then [`launch`](Self::launch). Refusals name the order's fields.
    async fn launch_order(
        &self,
        orderer: &cp_identity::auth::Principal,
        who: &Project<ProjectOperators>,
        order: LaunchOrder,
        request_id: Option<&str>,
    ) -> Result<Launched>;

    /// Asks for an allocation to be released. Idempotent: releasing one that is already on
    /// its way out changes nothing. A provision still queued for the agent is cancelled.
    async fn release_allocation(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Stops a running instance: its boot disk is saved as its root volume (billed as
    /// storage), then its GPUs are released and wiped. Idempotent; audited.
    async fn stop_instance(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Starts a stopped instance again anywhere in its region with its SKU free, on its saved
    /// disk, with the same id, name, keys, tags and ports. Refused with placement's (or the
    /// policies') explanation when it can't be placed; it then stays stopped. Idempotent;
    /// audited.
    async fn start_instance(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<Launched>;

    /// Changes the guest ports a running allocation publishes (checked as at launch, within
    /// `max_published_ports`); the node's agent re-renders its forwarding. Audited.
    async fn publish_ports(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        ports: &[u16],
        request_id: Option<&str>,
    ) -> Result<()>;

    /// One page of the allocations in `projects`, newest first, filtered; the cursor in the
    /// answer continues where it stopped.
    async fn allocation_page(
        &self,
        projects: &[Project<ProjectViewers>],
        filter: &AllocationFilter,
    ) -> Result<AllocationPage>;

    /// The caller's proof of role `R` in the project that owns allocation `id`. Outside it,
    /// "not found" (like an unknown id); a weaker role there, "forbidden".
    async fn allocation_access<R: ProjectRequirement>(
        &self,
        principal: &cp_identity::auth::Principal,
        id: AllocationId,
    ) -> Result<Project<R>>;

    /// One allocation, for the detail page. Viewers of its project only.
    async fn allocation(
        &self,
        principal: &cp_identity::auth::Principal,
        id: AllocationId,
    ) -> Result<AllocationDetail>;

    /// [`Self::allocation`] for a caller already proved a viewer of its project (by
    /// [`Self::allocation_access`]: a page that reads an allocation twice checks once). An
    /// allocation of another project is not found.
    async fn allocation_in(
        &self,
        who: &Project<ProjectViewers>,
        id: AllocationId,
    ) -> Result<AllocationDetail>;

    /// The guest's GPU utilisation over the last 24 hours, as 5-minute means, oldest first,
    /// for a viewer of its project (proved by [`Self::allocation_access`]). An allocation of
    /// another project has none.
    async fn gpu_utilisation_history(
        &self,
        who: &Project<ProjectViewers>,
        id: AllocationId,
    ) -> Result<Vec<GpuUtilisation>>;
}

impl AllocationsApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(project.id = %who.id()))]
    async fn budget_left<R: ProjectRequirement>(
        &self,
        who: &Project<R>,
    ) -> Result<Option<BudgetLeft>> {
        let mut conn = self.pool().acquire().await?;
        let policies = resolve_policies_on(&mut conn, Some(who.tenant()), Some(who.id())).await?;
        let budget = policy(&policies, PolicyKey::MonthlyBudget);
        let Some(PolicyValue::MonthlyBudget(limit)) = &budget.value else {
            return Ok(None);
        };
        let spent = cp_billing::reports::spent_this_month(
            &mut conn,
            who.tenant(),
            counts_in_project(budget).then_some(who.id()),
            &limit.currency,
            OffsetDateTime::now_utc(),
        )
        .await?
        .ceil_to_minor();
        let money = |amount_minor| Money::new(amount_minor, limit.currency.clone());
        Ok(Some(BudgetLeft {
            limit: limit.clone(),
            spent: money(spent),
            left: money((limit.amount_minor - spent).max(0)),
            decided: decided(budget),
        }))
    }

    #[tracing::instrument(skip_all, fields(project.id = %who.id()))]
    async fn lifetime_limit<R: ProjectRequirement>(
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

    #[tracing::instrument(skip_all, fields(project.id = %who.id(), sku.name = %req.sku))]
    async fn launch(
        &self,
        who: &Project<ProjectOperators>,
        req: &LaunchRequest,
        request_id: Option<&str>,
    ) -> Result<Launched> {
        let started = std::time::Instant::now();
        // Most launches are placed together with the others waiting now (see [`group`]);
        // a launch the group can't decide, and one with published ports or volumes, is
        // decided alone.
        let launched = match decide::ValidLaunch::check(req) {
            Err(e) => Err(e),
            Ok(valid) if valid.published_ports.is_empty() && valid.volumes.is_empty() => {
                match group::join(
                    self,
                    who.user(),
                    who.tenant(),
                    who.id(),
                    req,
                    valid,
                    request_id,
                )
                .await
                {
                    group::Answer::Placed(id) => Ok(Launched { id, created: true }),
                    group::Answer::Unavailable(why) => Err(Error::SkuUnavailable(why)),
                    group::Answer::Alone => launch_once(self, who, req, None, request_id).await,
                }
            }
            Ok(_) => launch_once(self, who, req, None, request_id).await,
        };
        self.metrics()
            .launch_decided(&launched.as_ref().map(|l| l.created), started.elapsed());
        launched
    }

    async fn launch_order(
        &self,
        orderer: &cp_identity::auth::Principal,
        who: &Project<ProjectOperators>,
        order: LaunchOrder,
        request_id: Option<&str>,
    ) -> Result<Launched> {
        order::launch(self, orderer, who, order, request_id).await
    }

    #[tracing::instrument(skip_all, fields(allocation.id = %id))]
    async fn release_allocation(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()> {
        // One read on the pool for the ordinary release; a transaction only for a stopped
        // instance, whose saved disk goes with it.
        let (id, stopped) = {
            let mut conn = self.pool().acquire().await?;
            stop_start::current_run_and_stopped(&mut conn, who.id(), id).await?
        };
        if stopped {
            let mut tx = self.pool().begin().await?;
            if stop_start::release_stopped(self, &mut tx, who, id, request_id).await? {
                tx.commit().await?;
                return Ok(());
            }
        }
        let id = if stopped {
            // Started meanwhile: the ordinary release of its new run follows.
            let mut conn = self.pool().acquire().await?;
            stop_start::current_run(&mut conn, who.id(), id).await?
        } else {
            id
        };
        // With the other releases waiting now (see [`group`]); alone if that group failed.
        if let Some(done) =
            group::release(self, who.user(), who.tenant(), who.id(), id, request_id).await
        {
            return done;
        }
        let user = who.user();
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            r#"SELECT a.state, a.region, a.cluster_index, c.name AS "cluster?"
               FROM allocations a LEFT JOIN clusters c ON c.id = a.cluster_id
               WHERE a.id = $1 AND a.project_id = $2 FOR NO KEY UPDATE OF a"#,
            id as AllocationId,
            who.id() as ProjectId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "allocation" })?;
        if matches!(row.state.as_str(), "releasing" | "cleaning" | "released") {
            return Ok(());
        }
        if let Some(cluster) = &row.cluster {
            return Err(clusters::member_refusal(cluster, row.cluster_index));
        }
        let unstarted = lifecycle::begin_release(&mut tx, id, None).await?;
        let node = lifecycle::queue_now(&mut tx, "allocation.release", id).await?;
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
        if unstarted {
            lifecycle::end_unstarted_or_log(self.pool(), &[id]).await;
        }
        if let Some(node) = node {
            self.wakeups().task_queued(node);
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(allocation.id = %id))]
    async fn stop_instance(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<()> {
        stop_start::stop(self, who, id, request_id).await
    }

    #[tracing::instrument(skip_all, fields(allocation.id = %id))]
    async fn start_instance(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        request_id: Option<&str>,
    ) -> Result<Launched> {
        stop_start::start(self, who, id, request_id).await
    }

    #[tracing::instrument(skip_all, fields(allocation.id = %id))]
    async fn publish_ports(
        &self,
        who: &Project<ProjectOperators>,
        id: AllocationId,
        ports: &[u16],
        request_id: Option<&str>,
    ) -> Result<()> {
        let ports = decide::check_published_ports(ports)?;
        let mut tx = self.pool().begin().await?;
        let id = stop_start::current_run(&mut tx, who.id(), id).await?;
        let row = sqlx::query!(
            r#"SELECT state, region, published_ports AS "published_ports: Vec<Option<i32>>"
               FROM allocations WHERE id = $1 AND project_id = $2 FOR NO KEY UPDATE"#,
            id as AllocationId,
            who.id() as ProjectId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "allocation" })?;
        if row.state != "running" {
            return Err(Error::Conflict(format!(
                "ports can be published while the allocation runs; it is {}",
                row.state
            )));
        }
        let stored = decide::port_layout(&row.published_ports, &ports);
        if row.published_ports == stored {
            return Ok(());
        }
        let policies = resolve_policies_on(&mut tx, Some(who.tenant()), Some(who.id())).await?;
        decide::within_published_ports(&policies, &ports)?;
        sqlx::query!(
            "UPDATE allocations SET published_ports = $2 WHERE id = $1",
            id as AllocationId,
            &stored as &[Option<i32>]
        )
        .execute(&mut *tx)
        .await?;
        let node = lifecycle::queue_now(&mut tx, "allocation.network_update", id).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user()),
                action: "allocation.publish_ports",
                resource: &self
                    .naming()
                    .allocation(&row.region, who.tenant(), who.id(), id)?,
                before: Some(json!({ "published_ports": row.published_ports })),
                after: Some(json!({ "published_ports": stored })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        if let Some(node) = node {
            self.wakeups().task_queued(node);
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(projects = projects.len()))]
    async fn allocation_page(
        &self,
        projects: &[Project<ProjectViewers>],
        filter: &AllocationFilter,
    ) -> Result<AllocationPage> {
        let state = filter
            .state
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "all");
        if let Some(s) = state
            && s != "active"
            && s != "stopped"
            && !STATES.contains(&s)
        {
            return Err(invalid(
                "state",
                format!("{s:?} is not one of active, stopped, {}", STATES.join(", ")),
            ));
        }
        if !(1..=MAX_PAGE).contains(&filter.limit) {
            return Err(invalid(
                "limit",
                format!("{}: ask for 1 to {MAX_PAGE} at a time", filter.limit),
            ));
        }
        let (tag_key, tag_value) = match filter.tag.as_deref().map(str::trim) {
            None | Some("") => (None, None),
            Some(t) => {
                let (k, v) = match t.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (t, None),
                };
                let one = Tags::from([(k.to_owned(), v.unwrap_or_default().to_owned())]);
                let checked = decide::check_tags(&one).map_err(|_| {
                    invalid(
                        "tag",
                        format!(
                            "{:?}: give key or key=value, as tags are set",
                            t.chars().take(40).collect::<String>()
                        ),
                    )
                })?;
                let (k, value) = checked.into_iter().next().expect("one tag in, one out");
                (Some(k), v.map(|_| value))
            }
        };
        let after = filter.after.as_deref().map(PageCursor::parse).transpose()?;
        let ids: Vec<uuid::Uuid> = projects.iter().map(|p| p.id().0).collect();
        // Each project's newest rows walk its `allocations_project_page` index from the cursor
        // (an index condition, so a deep page is a seek) and stop at the limit; only the page's
        // rows are then joined. The optional filters are `CASE`s rather than `$n IS NULL OR …`:
        // the statement runs on a generic plan, which prices `$n IS NULL` at 0.5% and so
        // expects almost no rows and sorts the whole project instead (docs/PERFORMANCE.md).
        let rows = sqlx::query_file!(
            "queries/allocation_page.sql",
            &ids,
            state,
            tag_key,
            tag_value,
            after.as_ref().map(|c| c.created_at),
            after.as_ref().map(|c| c.id.0),
            i64::from(filter.limit) + 1,
        )
        .fetch_all(self.pool())
        .await?;
        let mut runs: Vec<(AllocationId, OffsetDateTime)> = Vec::with_capacity(rows.len());
        let mut items: Vec<AllocationSummary> = rows
            .into_iter()
            .map(|r| {
                runs.push((r.run, r.created_at));
                let shown = stop_start::instance_state(&r.state, r.stops);
                let ssh = lifecycle::ssh_endpoint(
                    &r.state,
                    r.ssh_host.as_deref(),
                    r.ssh_port,
                    r.ssh_user.as_deref(),
                );
                AllocationSummary {
                    ssh: ssh.as_ref().map(lifecycle::SshEndpoint::command),
                    ssh_endpoint: ssh,
                    published: match (&r.ssh_host, r.public_port_base, r.first_slot) {
                        (Some(host), Some(base), Some(first)) if r.state == "running" => {
                            lifecycle::published_at(host, base, first, &r.published_ports)
                        }
                        _ => Vec::new(),
                    },
                    id: r.id,
                    project_id: r.project_id,
                    name: r.name,
                    sku: r.sku,
                    gpu_count: r.gpu_count,
                    region: r.region,
                    projected: shown.map_or_else(
                        || projected(&r.state, &r.desired_state, r.failure.as_deref()),
                        str::to_owned,
                    ),
                    state: shown.map_or(r.state, str::to_owned),
                    cost_so_far: r.cost_minor.map(|c| Money::new(c, r.currency.as_str())),
                    price_per_hour: Money {
                        amount_minor: r.price_per_hour_minor,
                        currency: r.currency.into(),
                    },
                    tags: serde_json::from_value(r.tags).unwrap_or_default(),
                    created_at: r.created_at,
                    expires_at: r.expires_at,
                }
            })
            .collect();
        // The cursor names the run, which the page walks, not the instance it shows.
        let next = if items.len() > filter.limit as usize {
            items.truncate(filter.limit as usize);
            runs.get(items.len() - 1)
                .map(|&(id, created_at)| PageCursor { created_at, id }.to_string())
        } else {
            None
        };
        Ok(AllocationPage { items, next })
    }

    async fn allocation_access<R: ProjectRequirement>(
        &self,
        principal: &cp_identity::auth::Principal,
        id: AllocationId,
    ) -> Result<Project<R>> {
        self.allocation_project_access::<R>(principal, id).await
    }

    async fn allocation(
        &self,
        principal: &cp_identity::auth::Principal,
        id: AllocationId,
    ) -> Result<AllocationDetail> {
        let who = self
            .allocation_access::<ProjectViewers>(principal, id)
            .await?;
        self.allocation_in(&who, id).await
    }

    async fn allocation_in(
        &self,
        who: &Project<ProjectViewers>,
        id: AllocationId,
    ) -> Result<AllocationDetail> {
        let can_change = ProjectOperators::ROLES.contains(&who.role());
        let run = {
            let mut conn = self.pool().acquire().await?;
            stop_start::current_run(&mut conn, who.id(), id).await?
        };
        lifecycle::detail(self, who, id, run, can_change).await
    }

    #[tracing::instrument(skip_all, fields(allocation.id = %id, project.id = %who.id()))]
    async fn gpu_utilisation_history(
        &self,
        who: &Project<ProjectViewers>,
        id: AllocationId,
    ) -> Result<Vec<GpuUtilisation>> {
        // Another project's allocation has no history here, as it has no allocation.
        let id = {
            let mut conn = self.pool().acquire().await?;
            match stop_start::current_run(&mut conn, who.id(), id).await {
                Ok(run) => run,
                Err(Error::NotFound { .. }) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            }
        };
        Ok(sqlx::query!(
            r#"SELECT date_bin('5 minutes', u.at, '2000-01-01') AS "at!",
                      round(avg(u.gpu_util_pct))::int2 AS "percent!"
               FROM allocation_gpu_utilisation u
               WHERE u.allocation_id = $1 AND u.at > now() - interval '24 hours'
                 AND EXISTS (SELECT FROM allocations a WHERE a.id = $1 AND a.project_id = $2)
               GROUP BY 1 ORDER BY 1"#,
            id as AllocationId,
            who.id() as ProjectId
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|r| GpuUtilisation {
            percent: r.percent,
            at: r.at,
        })
        .collect())
    }
}

/// One launch: its transaction, from the idempotency key to the commit (see `AllocationsApi::launch`).
async fn launch_once(
    cp: &ControlPlane,
    who: &Project<ProjectOperators>,
    req: &LaunchRequest,
    resume: Option<&stop_start::Resume>,
    request_id: Option<&str>,
) -> Result<Launched> {
    let requested_at = OffsetDateTime::now_utc();
    let valid = decide::ValidLaunch::check(req)?;
    let mut tx = cp.pool().begin().await?;
    // Requests with the same key wait for each other here, so the second sees the first.
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 7)) AS locked",
        format!("{}:{}", who.id(), valid.idempotency_key)
    )
    .fetch_one(&mut *tx)
    .await?;
    if let Some(found) = existing(
        &mut tx,
        who.id(),
        &valid.idempotency_key,
        &valid.fingerprint,
    )
    .await?
    {
        return Ok(found);
    }
    let (sku, software) = sku_and_software(&mut tx, req, &valid).await?;
    let (regions, hours) = within_policies(&mut tx, who, &sku, &software, &valid, 1).await?;
    let regions =
        lifecycle::volumes::region_of_volumes(&mut tx, who.id(), &valid.volumes, regions).await?;
    name_is_free(&mut tx, who, &valid.name).await?;

    let id = AllocationId::new_random();
    let mut reservation = Reservation {
        id,
        tenant: who.tenant(),
        project: who.id(),
        user: who.user(),
        name: &valid.name,
        sku: &sku,
        listing_version: software.id,
        ssh_public_key: &valid.ssh_public_key,
        tags: &valid.tags,
        user_data_sealed: valid
            .user_data
            .as_deref()
            .map(|u| lifecycle::seal_user_data(cp.secrets(), id, u)),
        idempotency_key: &valid.idempotency_key,
        fingerprint: &valid.fingerprint,
        requested_at,
        expires_at: hours.map(|h| requested_at + time::Duration::hours(i64::from(h))),
        cluster: None,
    };
    let placed = placement::place(
        &mut tx,
        &sku,
        &regions,
        &mut reservation,
        cp.contention_deadline(),
        cp.refusal_reasons(),
    )
    .await?;
    publish_ports_at_launch(&mut tx, id, &valid.published_ports).await?;
    lifecycle::volumes::attach_at_launch(&mut tx, id, &valid.volumes).await?;
    if let Some(resume) = resume {
        resume.continue_with(&mut tx, id).await?;
        stop_start::record_start(cp, &mut tx, who, &placed.region, resume, id, request_id).await?;
    }
    let node = lifecycle::queue_now(&mut tx, "allocation.provision", id).await?;
    let resource = cp
        .naming()
        .allocation(&placed.region, who.tenant(), who.id(), id)?;
    record_launch(
        &mut tx, who, &resource, &valid, &sku, &software, &placed, request_id,
    )
    .await?;
    tx.commit().await?;
    if let Some(node) = node {
        cp.wakeups().task_queued(node);
    }
    Ok(Launched { id, created: true })
}

/// The SKU and the listing version a launch asks for, checked: for sale, fitting each other,
/// and taking user data if it carries some.
async fn sku_and_software(
    conn: &mut PgConnection,
    req: &LaunchRequest,
    valid: &decide::ValidLaunch,
) -> Result<(Sku, cp_marketplace::LaunchVersion)> {
    let sku = match sku_by_name(&mut *conn, &req.sku).await {
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
    let software = cp_marketplace::launch_version(&mut *conn, &req.listing, &req.version).await?;
    if let Some(why) = software.compatibility.why_not(&sku) {
        return Err(invalid(
            "sku",
            format!("{} doesn't fit {}: {why}", software.label, sku.name),
        ));
    }
    if valid.user_data.is_some() && !software.accepts_user_data {
        return Err(invalid(
            "user_data",
            format!(
                "{} doesn't accept user data; launch it without, or choose an image that \
                 accepts it (the images list says which)",
                software.label
            ),
        ));
    }
    Ok((sku, software))
}

/// The policy chain, in this transaction, for `members` launches like `valid` (more than one
/// for a cluster); limits are counted under the scope's lock. Returns the regions the launch
/// may go to and its lifetime in hours, if it has one.
async fn within_policies(
    conn: &mut PgConnection,
    who: &Project<ProjectOperators>,
    sku: &Sku,
    software: &cp_marketplace::LaunchVersion,
    valid: &decide::ValidLaunch,
    members: u32,
) -> Result<(Vec<String>, Option<u32>)> {
    let fee = software
        .compatibility
        .fee
        .as_ref()
        .map_or(0, |f| f.amount_minor);
    let regions = decide::regions(sku, &valid.region)?;
    let policies = resolve_policies_on(&mut *conn, Some(who.tenant()), Some(who.id())).await?;
    let allowed = decide::allowed(&policies, sku, &software.slug, &valid.region, regions)?;
    match allowed.lock() {
        Some(decide::LockScope::Project) => {
            sqlx::query!(
                "SELECT 1 AS one FROM projects WHERE id = $1 FOR NO KEY UPDATE",
                who.id() as ProjectId
            )
            .fetch_one(&mut *conn)
            .await?;
        }
        Some(decide::LockScope::Tenant) => {
            sqlx::query!(
                "SELECT 1 AS one FROM tenants WHERE id = $1 FOR NO KEY UPDATE",
                who.tenant() as TenantId
            )
            .fetch_one(&mut *conn)
            .await?;
        }
        None => {}
    }
    if let Some(quota) = allowed.max_gpus {
        let in_use = sqlx::query_scalar!(
            r#"SELECT coalesce(sum(gpu_count), 0)::bigint AS "n!" FROM allocations
               WHERE tenant_id = $1 AND ($2::uuid IS NULL OR project_id = $2)
                 AND state <> 'released'"#,
            who.tenant() as TenantId,
            counts_in_project(quota.1).then_some(who.id().0),
        )
        .fetch_one(&mut *conn)
        .await?;
        decide::within_gpu_quota(quota, in_use, sku, members)?;
    }
    if let Some(budget) = allowed.budget {
        decide::budget_currency(budget, sku)?;
        // The ledger's month-to-date (rated charges plus what runs unrated), in this
        // transaction.
        let spent = cp_billing::reports::spent_this_month(
            &mut *conn,
            who.tenant(),
            counts_in_project(budget.1).then_some(who.id()),
            &budget.0.currency,
            time::OffsetDateTime::now_utc(),
        )
        .await?
        .ceil_to_minor();
        decide::within_budget(budget, spent, sku, fee, &software.label, members)?;
    }
    let hours = decide::lifetime(&policies, valid.lifetime_hours)?;
    decide::within_published_ports(&policies, &valid.published_ports)?;
    Ok((allowed.regions, hours))
}

/// Refuses a name a live allocation of the project has.
async fn name_is_free(
    conn: &mut PgConnection,
    who: &Project<ProjectOperators>,
    name: &str,
) -> Result<()> {
    let taken = sqlx::query_scalar!(
        "SELECT 1 AS one FROM allocations WHERE project_id = $1 AND name = $2 AND state <> 'released'",
        who.id() as ProjectId,
        name
    )
    .fetch_optional(&mut *conn)
    .await?;
    if taken.is_some() {
        return Err(invalid(
            "name",
            format!("{name} is the name of a live allocation in this project"),
        ));
    }
    Ok(())
}

/// The guest ports a launch publishes, on its allocation row.
async fn publish_ports_at_launch(
    conn: &mut PgConnection,
    id: AllocationId,
    ports: &[u16],
) -> Result<()> {
    if !ports.is_empty() {
        sqlx::query!(
            "UPDATE allocations SET published_ports = $2 WHERE id = $1",
            id as AllocationId,
            &ports.iter().map(|&p| i32::from(p)).collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The launch's audit record.
#[allow(clippy::too_many_arguments)]
async fn record_launch(
    conn: &mut PgConnection,
    who: &Project<ProjectOperators>,
    resource: &cp_base::ResourceName,
    valid: &decide::ValidLaunch,
    sku: &Sku,
    software: &cp_marketplace::LaunchVersion,
    placed: &Placement,
    request_id: Option<&str>,
) -> Result<()> {
    let fee = software
        .compatibility
        .fee
        .as_ref()
        .map_or(0, |f| f.amount_minor);
    audit::record(
        &mut *conn,
        AuditEntry {
            actor: Actor::User(who.user()),
            action: "allocation.launch",
            resource,
            before: None,
            after: Some(json!({
                "name": valid.name, "sku": sku.name, "node": placed.hostname,
                "software": software.label, "published_ports": valid.published_ports, "tags": valid.tags,
                "user_data_bytes": valid.user_data.as_ref().map(String::len),
                "volumes": valid.volumes,
                "slots": placed.slot_indexes, "price_per_hour": sku.price.to_string(), "fee_per_hour": fee,
                "why": placed.why,
            })),
            request_id,
        },
    )
    .await?;
    Ok(())
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

pub use portal_types::allocations::{AllocationSummary, PortAddress, Tags};

pub use lifecycle::{
    AllocationDetail, Certificate, GpuUtilisation, Phase, SshEndpoint, Transition,
};
