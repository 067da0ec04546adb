//! Clusters: N launches of one SKU, image and region placed together within one leaf switch,
//! spine group or fabric, in one transaction, or not at all.
//!
//! A cluster launch is an ordinary launch decided once for all its members: the same checks
//! of the order ([`decide::ValidLaunch`]), the same policy chain counting every member's GPUs
//! and first hour, then [`placement::place_cluster`], then one allocation per member written
//! as [`super::launch_once`] writes one, each naming its cluster. The database refuses a
//! cluster that commits with a member missing or outside its fabric (`clusters_whole`), so
//! all or nothing holds whatever this code does. Members are then provisioned, billed and
//! released as any allocation; [`lifecycle::cluster`] releases the rest when one fails.

use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use time::OffsetDateTime;

use super::decide::{self, invalid};
use super::order::{self, LaunchOrder};
use super::{LaunchRequest, Reservation, lifecycle, projected};
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, ClusterId, NodeId, ProjectId, SkuId};
use cp_identity::auth::Principal;
use cp_identity::tenancy::{
    Project, ProjectOperators, ProjectRequirement, ProjectViewers, TenancyApi,
};
use cp_inventory::placement::cluster::{Locality, MAX_MEMBERS, Want};
use cp_inventory::placement::{self, Reserve};
use portal_types::allocations::SshEndpoint;
pub use portal_types::clusters::{Cluster, ClusterMember};

/// What a tenant orders: the launch every member shares, how many, and how close.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterOrder {
    /// Its name is the cluster's (members are `<name>-1` …); its idempotency key is the
    /// cluster's.
    pub launch: LaunchOrder,
    pub members: u32,
    /// `leaf`, `spine` or `fabric`.
    pub locality: String,
    /// False: the locality if it can be had, else the next wider one.
    pub locality_required: bool,
}

/// The fewest members a cluster has.
pub const MIN_MEMBERS: u32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterLaunched {
    pub id: ClusterId,
    /// False when the idempotency key named a cluster that already existed.
    pub created: bool,
}

/// Launching, reading and releasing clusters.
#[allow(async_fn_in_trait)]
pub trait ClustersApi {
    /// Launches every member of `order` in the caller's project, or none: one transaction
    /// from the idempotency key to the commit. A refusal for room says what would fit.
    async fn launch_cluster(
        &self,
        orderer: &Principal,
        who: &Project<ProjectOperators>,
        order: ClusterOrder,
        request_id: Option<&str>,
    ) -> Result<ClusterLaunched>;

    /// The caller's proof of role `R` in the project that owns cluster `id`; outside it,
    /// "not found".
    async fn cluster_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        id: ClusterId,
    ) -> Result<Project<R>>;

    /// The project's clusters, newest first: those not yet released, and those released in
    /// the last day.
    async fn clusters(&self, who: &Project<ProjectViewers>) -> Result<Vec<Cluster>>;

    async fn cluster(&self, who: &Project<ProjectViewers>, id: ClusterId) -> Result<Cluster>;

    /// Releases every member. Idempotent.
    async fn release_cluster(
        &self,
        who: &Project<ProjectOperators>,
        id: ClusterId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// The cluster's members as a Slurm `topology.conf` (tree plugin): a switch per leaf
    /// listing its members, a switch per spine group over its leaves, and the fabric over
    /// them, for the tenant's own Slurm.
    async fn cluster_topology_slurm(
        &self,
        who: &Project<ProjectViewers>,
        id: ClusterId,
    ) -> Result<String>;

    /// `/etc/hosts` lines naming each member at its private address (see [`hosts_file`]).
    async fn cluster_hosts(&self, who: &Project<ProjectViewers>, id: ClusterId) -> Result<String>;
}

impl ClustersApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(project.id = %who.id(), members = order.members))]
    async fn launch_cluster(
        &self,
        orderer: &Principal,
        who: &Project<ProjectOperators>,
        order: ClusterOrder,
        request_id: Option<&str>,
    ) -> Result<ClusterLaunched> {
        let ssh_public_key =
            order::keys(self, orderer, order.launch.keys.clone(), request_id).await?;
        launch(self, who, &order, ssh_public_key, request_id)
            .await
            .map_err(|e| match e {
                Error::Invalid { field, reason } => Error::Invalid {
                    field: order::order_field(field),
                    reason,
                },
                e => e,
            })
    }

    async fn cluster_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        id: ClusterId,
    ) -> Result<Project<R>> {
        let project = sqlx::query_scalar!(
            r#"SELECT project_id AS "project: ProjectId" FROM clusters WHERE id = $1"#,
            id as ClusterId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "cluster" })?;
        self.project_access::<R>(principal, project)
            .await
            .map_err(|e| match e {
                Error::NotFound { .. } => Error::NotFound { what: "cluster" },
                other => other,
            })
    }

    async fn clusters(&self, who: &Project<ProjectViewers>) -> Result<Vec<Cluster>> {
        let ids = sqlx::query_scalar!(
            r#"SELECT c.id AS "id: ClusterId" FROM clusters c
               WHERE c.project_id = $1
                 AND (c.release_requested_at IS NULL
                      OR c.release_requested_at > now() - interval '1 day'
                      OR EXISTS (SELECT 1 FROM allocations a
                                 WHERE a.cluster_id = c.id AND a.state <> 'released'))
               ORDER BY c.created_at DESC, c.id
               LIMIT 200"#,
            who.id() as ProjectId
        )
        .fetch_all(self.pool())
        .await?;
        read(self.pool(), who.id(), &ids).await
    }

    async fn cluster(&self, who: &Project<ProjectViewers>, id: ClusterId) -> Result<Cluster> {
        read(self.pool(), who.id(), &[id])
            .await?
            .pop()
            .ok_or(Error::NotFound { what: "cluster" })
    }

    #[tracing::instrument(skip_all, fields(cluster.id = %id))]
    async fn release_cluster(
        &self,
        who: &Project<ProjectOperators>,
        id: ClusterId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let row = sqlx::query!(
            "SELECT region FROM clusters WHERE id = $1 AND project_id = $2 FOR NO KEY UPDATE",
            id as ClusterId,
            who.id() as ProjectId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "cluster" })?;
        let Some(released) = lifecycle::cluster::release_members(&mut tx, id, None).await? else {
            return Ok(());
        };
        let mut wake = Vec::new();
        for member in &released.releasing {
            if let Some(node) = lifecycle::queue_now(&mut tx, "allocation.release", *member).await?
            {
                wake.push(node);
            }
        }
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user()),
                action: "cluster.release",
                resource: &self
                    .naming()
                    .cluster(&row.region, who.tenant(), who.id(), id)?,
                before: None,
                after: Some(json!({ "members_released": released.releasing })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        lifecycle::end_unstarted_or_log(self.pool(), &released.unstarted).await;
        for node in wake {
            self.wakeups().task_queued(node);
        }
        Ok(())
    }

    async fn cluster_topology_slurm(
        &self,
        who: &Project<ProjectViewers>,
        id: ClusterId,
    ) -> Result<String> {
        let cluster = self.cluster(who, id).await?;
        Ok(slurm_topology(&cluster))
    }

    async fn cluster_hosts(&self, who: &Project<ProjectViewers>, id: ClusterId) -> Result<String> {
        let cluster = self.cluster(who, id).await?;
        Ok(hosts_file(&cluster))
    }
}

/// The cluster's launch: its transaction, from the idempotency key to the commit.
async fn launch(
    cp: &ControlPlane,
    who: &Project<ProjectOperators>,
    order: &ClusterOrder,
    ssh_public_key: String,
    request_id: Option<&str>,
) -> Result<ClusterLaunched> {
    let requested_at = OffsetDateTime::now_utc();
    let want = check_want(order)?;
    let name = check_cluster_name(&order.launch.name)?;
    if !order.launch.volumes.is_empty() {
        return Err(invalid(
            "volumes",
            "a volume attaches to one instance: attach volumes to members once they run",
        ));
    }
    let req = LaunchRequest {
        sku: order.launch.sku.clone(),
        region: order.launch.region.clone().unwrap_or_default(),
        listing: order.launch.image.clone(),
        version: order.launch.version.clone().unwrap_or_default(),
        ssh_public_key,
        // The first member's name, checked as any allocation's.
        name: member_name(&name, 1),
        idempotency_key: order.launch.idempotency_key.clone(),
        lifetime_hours: order.launch.lifetime_hours,
        published_ports: order.launch.published_ports.clone(),
        tags: order.launch.tags.clone(),
        user_data: order.launch.user_data.clone(),
        volumes: Vec::new(),
    };
    let valid = decide::ValidLaunch::check(&req)?;
    let fingerprint = cluster_fingerprint(&valid.fingerprint, want);

    let mut tx = cp.pool().begin().await?;
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 74)) AS locked",
        format!("{}:{}", who.id(), valid.idempotency_key)
    )
    .fetch_one(&mut *tx)
    .await?;
    if let Some(found) = existing(&mut tx, who.id(), &valid.idempotency_key, &fingerprint).await? {
        return Ok(found);
    }
    let (sku, software) = super::sku_and_software(&mut tx, &req, &valid).await?;
    let (regions, hours) =
        super::within_policies(&mut tx, who, &sku, &software, &valid, want.members).await?;
    names_are_free(&mut tx, who, &name, want.members).await?;
    let placed = placement::place_cluster(&mut tx, &sku, &regions, want).await?;
    let region = placed.members[0].0.region.clone();

    let id = ClusterId::new_random();
    // The members' own key pair: each member trusts it and holds it (`ClusterBoot`).
    let keys = cp_base::ssh_key::ed25519(&format!("{name}@cluster")).map_err(Error::Corrupt)?;
    sqlx::query!(
        "INSERT INTO clusters (id, tenant_id, project_id, name, sku_id, region, size, locality,
                               locality_required, fabric, placed_within, placement_why,
                               idempotency_key, request_fingerprint, requested_by, created_at,
                               ssh_public_key, ssh_private_key_sealed)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        id as ClusterId,
        who.tenant() as cp_base::ids::TenantId,
        who.id() as ProjectId,
        name,
        sku.id as SkuId,
        region,
        i32::try_from(want.members).unwrap_or(i32::MAX),
        want.locality.as_str(),
        want.required,
        placed.fabric,
        placed.within.as_str(),
        placed.why,
        valid.idempotency_key,
        fingerprint,
        who.user() as cp_base::ids::UserId,
        requested_at,
        keys.public,
        cp.secrets().seal(&keys.private, &key_place(id)),
    )
    .execute(&mut *tx)
    .await?;

    let mut wake: Vec<NodeId> = Vec::new();
    let mut member_ids = Vec::new();
    for (index, (placement, _)) in (1..).zip(&placed.members) {
        let member = AllocationId::new_random();
        let member_name = member_name(&name, index);
        let member_key = format!("cluster:{id}:{index}");
        let mut reservation = Reservation {
            id: member,
            tenant: who.tenant(),
            project: who.id(),
            user: who.user(),
            name: &member_name,
            sku: &sku,
            listing_version: software.id,
            ssh_public_key: &valid.ssh_public_key,
            tags: &valid.tags,
            user_data_sealed: valid
                .user_data
                .as_deref()
                .map(|u| lifecycle::seal_user_data(cp.secrets(), member, u)),
            idempotency_key: &member_key,
            fingerprint: &fingerprint,
            requested_at,
            expires_at: hours.map(|h| requested_at + time::Duration::hours(i64::from(h))),
            cluster: Some((id, i32::try_from(index).unwrap_or(i32::MAX))),
        };
        reservation.reserve(&mut tx, placement).await?;
        super::publish_ports_at_launch(&mut tx, member, &valid.published_ports).await?;
        if let Some(node) = lifecycle::queue_now(&mut tx, "allocation.provision", member).await? {
            wake.push(node);
        }
        let resource = cp
            .naming()
            .allocation(&region, who.tenant(), who.id(), member)?;
        super::record_launch(
            &mut tx, who, &resource, &valid, &sku, &software, placement, request_id,
        )
        .await?;
        member_ids.push(member);
    }
    audit::record(
        &mut tx,
        AuditEntry {
            actor: Actor::User(who.user()),
            action: "cluster.launch",
            resource: &cp.naming().cluster(&region, who.tenant(), who.id(), id)?,
            before: None,
            after: Some(json!({
                "name": name, "sku": sku.name, "members": want.members,
                "locality": want.locality.as_str(), "locality_required": want.required,
                "fabric": placed.fabric, "placed_within": placed.within.as_str(),
                "why": placed.why, "allocations": member_ids,
            })),
            request_id,
        },
    )
    .await?;
    tx.commit().await?;
    for node in wake {
        cp.wakeups().task_queued(node);
    }
    Ok(ClusterLaunched { id, created: true })
}

fn check_want(order: &ClusterOrder) -> Result<Want> {
    if !(MIN_MEMBERS..=MAX_MEMBERS).contains(&order.members) {
        return Err(invalid(
            "members",
            format!(
                "{}: a cluster has {MIN_MEMBERS} to {MAX_MEMBERS} members",
                order.members
            ),
        ));
    }
    let locality = Locality::parse(&order.locality).ok_or_else(|| {
        invalid(
            "locality",
            format!(
                "{:?}: choose leaf (one leaf switch), spine (one spine group) or fabric",
                decide::truncated(&order.locality)
            ),
        )
    })?;
    Ok(Want {
        members: order.members,
        locality,
        required: order.locality_required,
    })
}

/// A cluster's name: an allocation name short enough that `<name>-128` still is one.
fn check_cluster_name(name: &str) -> Result<String> {
    let name = decide::check_name(name)?;
    if name.len() > 56 {
        return Err(invalid(
            "name",
            format!(
                "{} characters: a cluster's name is at most 56, so that its members' \
                 (<name>-1 … <name>-128) are names too",
                name.len()
            ),
        ));
    }
    Ok(name)
}

fn member_name(cluster: &str, index: u32) -> String {
    format!("{cluster}-{index}")
}

fn cluster_fingerprint(launch: &str, want: Want) -> String {
    let mut h = Sha256::new();
    h.update(launch.as_bytes());
    h.update(
        format!(
            "\0cluster\0{}\0{}\0{}",
            want.members,
            want.locality.as_str(),
            want.required
        )
        .as_bytes(),
    );
    format!("{:x}", h.finalize())
}

/// The cluster an idempotency key already made, if any; a different order with the same key
/// is refused.
async fn existing(
    conn: &mut PgConnection,
    project: ProjectId,
    key: &str,
    fingerprint: &str,
) -> Result<Option<ClusterLaunched>> {
    let row = sqlx::query!(
        r#"SELECT id AS "id: ClusterId", request_fingerprint FROM clusters
           WHERE project_id = $1 AND idempotency_key = $2"#,
        project as ProjectId,
        key
    )
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        None => Ok(None),
        Some(r) if r.request_fingerprint == fingerprint => Ok(Some(ClusterLaunched {
            id: r.id,
            created: false,
        })),
        Some(_) => Err(Error::Conflict(
            "this idempotency key was used for a different cluster; use a new key".into(),
        )),
    }
}

/// Refuses a name a live cluster of the project has, or one a member would take from a live
/// allocation.
async fn names_are_free(
    conn: &mut PgConnection,
    who: &Project<ProjectOperators>,
    name: &str,
    members: u32,
) -> Result<()> {
    let names: Vec<String> = (1..=members).map(|i| member_name(name, i)).collect();
    let taken = sqlx::query_scalar!(
        r#"SELECT name AS "name!" FROM clusters
           WHERE project_id = $1 AND name = $2 AND release_requested_at IS NULL
           UNION ALL
           (SELECT name FROM allocations
            WHERE project_id = $1 AND name = ANY($3) AND state <> 'released'
            ORDER BY name LIMIT 1)"#,
        who.id() as ProjectId,
        name,
        &names
    )
    .fetch_all(&mut *conn)
    .await?;
    match taken.first() {
        None => Ok(()),
        Some(t) if t == name => Err(invalid(
            "name",
            format!("{name} is the name of a live cluster in this project"),
        )),
        Some(t) => Err(invalid(
            "name",
            format!("a member would be named {t}, the name of a live allocation in this project"),
        )),
    }
}

/// Clusters `ids` of `project` with their members, in the order of `ids`.
async fn read(
    pool: &cp_base::pool::Db,
    project: ProjectId,
    ids: &[ClusterId],
) -> Result<Vec<Cluster>> {
    let wanted: Vec<uuid::Uuid> = ids.iter().map(|c| c.0).collect();
    let clusters = sqlx::query!(
        r#"SELECT c.id AS "id: ClusterId", c.name, s.name AS sku, c.region, c.size, c.locality,
                  c.locality_required, c.placed_within, c.fabric, c.placement_why, c.failure,
                  c.created_at, c.release_requested_at
           FROM clusters c JOIN skus s ON s.id = c.sku_id
           WHERE c.id = ANY($1) AND c.project_id = $2
           ORDER BY array_position($1, c.id)"#,
        &wanted,
        project as ProjectId
    )
    .fetch_all(pool)
    .await?;
    let members = sqlx::query!(
        r#"SELECT a.cluster_id AS "cluster: ClusterId", a.id AS "id: AllocationId",
                  a.cluster_index AS "index!", a.name, a.state, a.desired_state, a.failure,
                  a.ssh_host, a.ssh_port, a.ssh_user,
                  coalesce(p.spine_group, '') AS "spine!", coalesce(p.leaf, '') AS "leaf!",
                  CASE WHEN pr.east_west AND a.state <> 'released' THEN a.private_host END
                      AS private_host
           FROM allocations a LEFT JOIN node_fabric_places p ON p.node_id = a.node_id
                JOIN projects pr ON pr.id = a.project_id
           WHERE a.cluster_id = ANY($1) AND a.project_id = $2
           ORDER BY a.cluster_index"#,
        &wanted,
        project as ProjectId
    )
    .fetch_all(pool)
    .await?;
    Ok(clusters
        .into_iter()
        .map(|c| {
            let mine: Vec<ClusterMember> = members
                .iter()
                .filter(|m| m.cluster == Some(c.id))
                .map(|m| ClusterMember {
                    id: m.id,
                    index: u32::try_from(m.index).unwrap_or(0),
                    name: m.name.clone(),
                    state: projected(&m.state, &m.desired_state, m.failure.as_deref()),
                    spine: m.spine.clone(),
                    leaf: m.leaf.clone(),
                    ssh: lifecycle::ssh_endpoint(
                        &m.state,
                        m.ssh_host.as_deref(),
                        m.ssh_port,
                        m.ssh_user.as_deref(),
                    )
                    .as_ref()
                    .map(SshEndpoint::command),
                    private_address: m
                        .private_host
                        .and_then(|h| u16::try_from(h).ok())
                        .map(agent_protocol::identity::private_address),
                })
                .collect();
            let count = |f: fn(&ClusterMember) -> &str| {
                let mut v: Vec<&str> = mine.iter().map(f).collect();
                v.sort_unstable();
                v.dedup();
                u32::try_from(v.len()).unwrap_or(0)
            };
            Cluster {
                id: c.id,
                project_id: project,
                state: cluster_state(c.release_requested_at.is_some(), c.failure.is_some(), &mine),
                leaves: count(|m| m.leaf.as_str()),
                spines: count(|m| m.spine.as_str()),
                name: c.name,
                sku: c.sku,
                region: c.region,
                size: u32::try_from(c.size).unwrap_or(0),
                locality: c.locality,
                locality_required: c.locality_required,
                placed_within: c.placed_within,
                fabric: c.fabric,
                failure: c.failure,
                why: c.placement_why,
                created_at: c.created_at,
                members: mine,
            }
        })
        .collect())
}

/// See [`Cluster`].
fn cluster_state(release_asked: bool, failed: bool, members: &[ClusterMember]) -> String {
    let all = |state: &str| members.iter().all(|m| m.state == state);
    if release_asked {
        if members
            .iter()
            .all(|m| m.state == "released" || m.state == "failed")
        {
            if failed { "failed" } else { "released" }
        } else {
            "releasing"
        }
    } else if all("running") {
        "running"
    } else {
        "provisioning"
    }
    .to_string()
}

/// The members by name at their private addresses, as `/etc/hosts` lines (and an MPI or
/// DeepSpeed hostfile's first column). A member without one (its project does not allow
/// east-west traffic, or it was released) is a comment saying so.
pub fn hosts_file(cluster: &Cluster) -> String {
    let mut out = format!(
        "# {}: each member at its address on the project's private network\n",
        cluster.name
    );
    for m in &cluster.members {
        match &m.private_address {
            Some(a) => out.push_str(&format!("{a}\t{}\n", m.name)),
            None => out.push_str(&format!("# {}: no private address\n", m.name)),
        }
    }
    out
}

/// Why a member is not released alone: a cluster is released whole, so that none survives
/// with a member missing.
pub(crate) fn member_refusal(cluster: &str, index: Option<i32>) -> Error {
    Error::Conflict(format!(
        "this instance is member {} of cluster {cluster}, whose members leave together: release the cluster",
        index.unwrap_or_default()
    ))
}

/// Where a cluster's private key is sealed to: this cluster's row, and nothing else's.
fn key_place(id: ClusterId) -> String {
    format!("clusters.ssh_private_key:{id}")
}

/// A cluster member's provision as its agent is handed it: the cluster's members by name and
/// private address, as they stand now, and its key pair opened. Other specs pass unchanged.
pub(crate) async fn with_cluster(
    cp: &ControlPlane,
    mut spec: serde_json::Value,
) -> Result<serde_json::Value> {
    let Some(boot) = spec.get("cluster") else {
        return Ok(spec);
    };
    let id: ClusterId = boot
        .get("cluster_id")
        .and_then(|i| i.as_str())
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| Error::Corrupt("a provision's cluster".into()))?;
    let cluster = sqlx::query!(
        "SELECT ssh_public_key, ssh_private_key_sealed FROM clusters WHERE id = $1",
        id as ClusterId
    )
    .fetch_one(cp.pool())
    .await?;
    let members = sqlx::query!(
        r#"SELECT a.cluster_index AS "index!", a.name,
                  CASE WHEN p.east_west AND a.state <> 'released' THEN a.private_host END
                      AS private_host
           FROM allocations a JOIN projects p ON p.id = a.project_id
           WHERE a.cluster_id = $1 ORDER BY a.cluster_index"#,
        id as ClusterId
    )
    .fetch_all(cp.pool())
    .await?;
    let peers: Vec<agent_protocol::ClusterPeer> = members
        .into_iter()
        .map(|m| agent_protocol::ClusterPeer {
            index: u32::try_from(m.index).unwrap_or(0),
            name: m.name,
            address: m
                .private_host
                .and_then(|h| u16::try_from(h).ok())
                .map(agent_protocol::identity::private_address),
        })
        .collect();
    let private = match &cluster.ssh_private_key_sealed {
        Some(sealed) => cp
            .secrets()
            .open(sealed, &key_place(id))
            .map_err(|e| Error::Corrupt(format!("cluster {id}'s key: {e}")))?,
        None => String::new(),
    };
    let boot = &mut spec["cluster"];
    boot["members"] = serde_json::to_value(peers).map_err(|e| Error::Corrupt(e.to_string()))?;
    boot["ssh_public_key"] = cluster.ssh_public_key.unwrap_or_default().into();
    boot["ssh_private_key"] = private.into();
    Ok(spec)
}

/// See [`ClustersApi::cluster_topology_slurm`]. Names are the members' (the tenant's own
/// hostnames inside the cluster); the switches are named by their place, as the fabric names
/// them, which the database keeps to letters, digits, `.`, `_` and `-`.
pub fn slurm_topology(cluster: &Cluster) -> String {
    use std::collections::BTreeMap;
    let mut spines: BTreeMap<&str, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for m in &cluster.members {
        spines
            .entry(&m.spine)
            .or_default()
            .entry(&m.leaf)
            .or_default()
            .push(&m.name);
    }
    let mut out = format!(
        "# topology.conf for cluster {} ({} members of {}, fabric {})\n",
        cluster.name, cluster.size, cluster.sku, cluster.fabric
    );
    for leaves in spines.values() {
        for (leaf, nodes) in leaves {
            out.push_str(&format!("SwitchName={leaf} Nodes={}\n", nodes.join(",")));
        }
    }
    for (spine, leaves) in &spines {
        let names: Vec<&str> = leaves.keys().copied().collect();
        out.push_str(&format!(
            "SwitchName={spine} Switches={}\n",
            names.join(",")
        ));
    }
    if spines.len() > 1 {
        let names: Vec<&str> = spines.keys().copied().collect();
        out.push_str(&format!(
            "SwitchName={} Switches={}\n",
            cluster.fabric,
            names.join(",")
        ));
    }
    out
}
