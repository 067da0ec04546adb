//! What a task tells its agent: the slots, network and fabric plans, and the provision and
//! release tasks written from them.

use agent_protocol::{
    FabricPlan, ImageRef, NetworkPlan, PlannedSlot, PrivateNic, ProvisionPlan, PublishedPort,
    ReleasePlan, TaskSpec, identity,
};
use sqlx::PgConnection;

use super::user_data::SEALED_USER_DATA;
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, AllocationId, ClusterId, NodeId, ProjectId, SlotId, TenantId};

/// A slot as a plan names it, as [`planned_slots`] and [`planned_slots_of`] read it.
struct SlotRow {
    allocation_id: Option<AllocationId>,
    id: SlotId,
    node_id: NodeId,
    slot_index: i32,
    gpu_pci_address: String,
    nvme_pci_address: String,
    nvme_serial: String,
    nvme_namespace: String,
    nvme_size_bytes: i64,
    ib_vf_pci_address: String,
    cpu_set: String,
    numa_node: i32,
    memory_mib: i64,
    wipe: String,
}

impl SlotRow {
    fn planned(self) -> PlannedSlot {
        let node = self.node_id.to_string();
        PlannedSlot {
            slot_id: self.id.to_string(),
            slot_index: self.slot_index as u32,
            gpu_pci_address: self.gpu_pci_address,
            nvme_pci_address: self.nvme_pci_address,
            nvme_serial: self.nvme_serial,
            nvme_namespace: self.nvme_namespace,
            ib_vf_pci_address: self.ib_vf_pci_address,
            cpu_set: self.cpu_set,
            numa_node: self.numa_node as u32,
            memory_mib: self.memory_mib as u64,
            nvme_size_bytes: self.nvme_size_bytes as u64,
            wipe_policy: self.wipe,
            mac_address: identity::mac_address(&node, self.slot_index as u32),
            ip_address: identity::ip_address(self.slot_index as u32),
        }
    }
}

/// Every live approved slot of the node, as a plan names it (what the agent checks plans
/// against).
pub(crate) async fn planned_slots(
    conn: &mut PgConnection,
    node: NodeId,
) -> Result<Vec<PlannedSlot>> {
    let rows = sqlx::query_as!(
        SlotRow,
        r#"SELECT NULL::uuid AS "allocation_id: AllocationId", s.id AS "id: SlotId",
                  s.node_id AS "node_id: NodeId", s.slot_index, s.gpu_pci_address,
                  s.nvme_pci_address, s.nvme_serial, s.nvme_namespace, s.nvme_size_bytes,
                  s.ib_vf_pci_address, s.cpu_set, s.numa_node, s.memory_mib,
                  s.capacity_metadata ->> 'destructive_wipe_policy' AS "wipe!"
           FROM node_resource_slots s
           WHERE s.node_id = $1 AND s.retired_at IS NULL
           ORDER BY s.slot_index"#,
        node as NodeId
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(SlotRow::planned).collect())
}

/// Where the allocation is reached: the node's public address, its first slot's block of
/// public ports (SSH, then each published port in order), and its project as the east-west
/// group when the project allows east-west traffic.
pub(crate) fn network_plan(
    slots: &[PlannedSlot],
    public_host: String,
    port_base: i32,
    published: &[Option<i32>],
    east_west: Option<ProjectId>,
    private: Option<Private>,
) -> Result<NetworkPlan> {
    let first = slots
        .first()
        .ok_or_else(|| Error::Corrupt("an allocation with no slots".into()))?;
    let base = u16::try_from(port_base)
        .map_err(|_| Error::Corrupt(format!("public_port_base {port_base}")))?;
    let port = |k: usize| {
        identity::public_port(base, first.slot_index, k).ok_or_else(|| {
            Error::Corrupt(format!(
                "slot {} has no public port {k} from base {base}",
                first.slot_index
            ))
        })
    };
    Ok(NetworkPlan {
        public_host: Some(public_host),
        ssh_port: Some(port(0)?),
        published: published
            .iter()
            .enumerate()
            .filter_map(|(k, guest)| guest.map(|g| (k, g)))
            .map(|(k, guest)| {
                Ok(PublishedPort {
                    public_port: port(k + 1)?,
                    guest_port: u16::try_from(guest)
                        .map_err(|_| Error::Corrupt(format!("published port {guest}")))?,
                })
            })
            .collect::<Result<_>>()?,
        east_west_group: east_west.map(|p| p.to_string()),
        private: private.map(Private::nic).transpose()?,
    })
}

/// A member's place on its project's segment, as stored: the project's VNI and the member's
/// host number (migration 0056).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Private {
    pub vni: i32,
    pub host: i32,
}

impl Private {
    /// Both columns, or none: a member has a place only while its project allows east-west
    /// traffic.
    pub fn of(vni: Option<i32>, host: Option<i32>) -> Option<Self> {
        Some(Self {
            vni: vni?,
            host: host?,
        })
    }

    pub fn nic(self) -> Result<PrivateNic> {
        let vni = u32::try_from(self.vni)
            .ok()
            .filter(|v| identity::VNIS.contains(v))
            .ok_or_else(|| Error::Corrupt(format!("segment {}", self.vni)))?;
        let host = u16::try_from(self.host)
            .ok()
            .filter(|h| identity::PRIVATE_HOSTS.contains(h))
            .ok_or_else(|| Error::Corrupt(format!("private host number {}", self.host)))?;
        Ok(PrivateNic {
            vni,
            address: identity::private_address(host),
            mac: identity::private_mac(host),
        })
    }
}

/// Gives each row whose project allows east-west traffic and that has no place on its
/// project's segment yet the lowest free host numbers, per project. Concurrent launches into
/// one project take turns (a transaction-scoped lock per project), so two never pick one
/// number; the unique index (migration 0056) would refuse it anyway. Rows that need nothing
/// cost no statement: this runs on every provision queued.
async fn give_private_hosts(conn: &mut PgConnection, rows: &mut [ProvisionRow]) -> Result<()> {
    let mut projects: Vec<ProjectId> = rows
        .iter()
        .filter(|r| r.private_host.is_none())
        .filter_map(|r| r.east_west_group)
        .collect();
    projects.sort_unstable_by_key(|p| p.0);
    projects.dedup();
    for project in projects {
        let wanting: Vec<usize> = (0..rows.len())
            .filter(|&i| rows[i].east_west_group == Some(project) && rows[i].private_host.is_none())
            .collect();
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtextextended('private-network ' || $1::text, 0))",
            project as ProjectId
        )
        .execute(&mut *conn)
        .await?;
        let free: Vec<i32> = sqlx::query_scalar!(
            r#"SELECT n AS "n!" FROM generate_series($2::int, $3::int) AS n
               WHERE NOT EXISTS (SELECT 1 FROM allocations a
                                 WHERE a.project_id = $1 AND a.private_host = n
                                   AND a.state <> 'released')
               ORDER BY n LIMIT $4"#,
            project as ProjectId,
            i32::from(*identity::PRIVATE_HOSTS.start()),
            i32::from(*identity::PRIVATE_HOSTS.end()),
            wanting.len() as i64
        )
        .fetch_all(&mut *conn)
        .await?;
        if free.len() < wanting.len() {
            return Err(Error::Conflict(format!(
                "the project's private network has no free address for {} more member(s)",
                wanting.len() - free.len()
            )));
        }
        let ids: Vec<uuid::Uuid> = wanting.iter().map(|&i| rows[i].id.0).collect();
        sqlx::query!(
            "UPDATE allocations a SET private_host = x.host
             FROM unnest($1::uuid[], $2::int[]) AS x(id, host) WHERE a.id = x.id",
            &ids,
            &free
        )
        .execute(&mut *conn)
        .await?;
        for (&i, host) in wanting.iter().zip(free) {
            rows[i].private_host = Some(host);
        }
    }
    Ok(())
}

/// How the allocations handed to [`queue_provisions`] stand.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// `placed`: queuing their provisions moves them to `provisioning`.
    Placed,
    /// Written as `provisioning` by the transaction that queues their provisions now (group
    /// placement, migration 0035): no update follows.
    AsProvisioning,
}

/// Queues the provision task of each allocation in `ids` (with the trace context its
/// launch ran in) and, for [`Written::Placed`] ones, moves it to `provisioning`, with a
/// statement per step for all of them: the allocations (locked), their slots, their tenants'
/// InfiniBand partition keys (assigned on first use and kept), the nodes' NVLink partitions
/// (the one holding exactly an allocation's slots, for a 2-, 4- or 8-GPU slice on an NVSwitch
/// host or the whole node), the tasks, the state. An allocation no longer in the state
/// `written` says, or no longer wanted, is skipped. Returns the nodes to wake, one per task
/// queued.
pub(crate) async fn queue_provisions(
    conn: &mut PgConnection,
    ids: &[(AllocationId, Option<String>)],
    written: Written,
) -> Result<Vec<NodeId>> {
    let wanted: Vec<uuid::Uuid> = ids.iter().map(|(id, _)| id.0).collect();
    let expected = match written {
        Written::Placed => "placed",
        Written::AsProvisioning => "provisioning",
    };
    let mut rows = sqlx::query_as!(
        ProvisionRow,
        r#"SELECT a.id AS "id: AllocationId", a.shape, a.node_id AS "node_id: NodeId", a.name,
                  a.ssh_public_key, l.slug || ' ' || v.version AS "image!", v.image_source,
                  v.image_sha256, v.ssh_user, v.cloud_init, a.user_data, a.user_data_sealed,
                  a.published_ports AS "published_ports: Vec<Option<i32>>",
                  coalesce(n.public_host, lower(n.hostname)) AS "public_host!",
                  n.public_port_base, a.tenant_id AS "tenant_id: TenantId",
                  CASE WHEN p.east_west THEN a.project_id END AS "east_west_group: ProjectId",
                  CASE WHEN p.east_west THEN p.vni END AS private_vni,
                  CASE WHEN p.east_west THEN a.private_host END AS private_host,
                  a.cluster_id AS "cluster_id: ClusterId", a.cluster_index, c.name AS "cluster_name?",
                  (SELECT r.target FROM volumes r WHERE r.id = a.restore_from) AS restore_from
           FROM allocations a JOIN listing_versions v ON v.id = a.listing_version_id
                LEFT JOIN clusters c ON c.id = a.cluster_id
                JOIN listings l ON l.id = v.listing_id
                JOIN nodes n ON n.id = a.node_id
                JOIN projects p ON p.id = a.project_id
           WHERE a.id = ANY($1) AND a.state = $2 AND a.desired_state = 'running'
           ORDER BY a.id
           FOR NO KEY UPDATE OF a"#,
        &wanted,
        expected
    )
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    give_private_hosts(&mut *conn, &mut rows).await?;
    let ids_found: Vec<AllocationId> = rows.iter().map(|r| r.id).collect();
    let slots = planned_slots_of(&mut *conn, &ids_found).await?;
    let pkeys = tenant_pkeys(&mut *conn, &rows).await?;
    let partitions = nvlink_partitions(&mut *conn, &rows).await?;

    let mut tasks = NewTasks::with_capacity(rows.len());
    for a in rows {
        let planned: Vec<PlannedSlot> = slots
            .iter()
            .filter(|(id, _)| *id == a.id)
            .map(|(_, s)| s.clone())
            .collect();
        let network = network_plan(
            &planned,
            a.public_host.clone(),
            a.public_port_base,
            &a.published_ports,
            a.east_west_group,
            Private::of(a.private_vni, a.private_host),
        )?;
        let fabric = fabric_plan(&a, &planned, &pkeys, &partitions)?;
        let trace = ids
            .iter()
            .find(|(id, _)| *id == a.id)
            .and_then(|(_, t)| t.clone());
        let (id, node) = (a.id, a.node_id);
        let spec = provision_spec(a, planned, network, fabric)?;
        tasks.push(id, node, spec, trace);
    }
    insert_tasks(
        &mut *conn,
        &tasks.ids,
        &tasks.nodes,
        &tasks.kinds,
        &tasks.specs,
        &tasks.allocations,
        &tasks.traces,
    )
    .await?;
    if written == Written::Placed {
        sqlx::query!(
            "UPDATE allocations SET state = 'provisioning', observed_state = 'provisioning'
             WHERE id = ANY($1)",
            &tasks.allocations
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(tasks.nodes.into_iter().map(NodeId).collect())
}

/// An allocation to provision, with what its plan needs.
struct ProvisionRow {
    id: AllocationId,
    shape: String,
    node_id: NodeId,
    name: String,
    ssh_public_key: String,
    image: String,
    image_source: String,
    image_sha256: Option<String>,
    ssh_user: String,
    cloud_init: serde_json::Value,
    user_data: Option<String>,
    user_data_sealed: Option<String>,
    published_ports: Vec<Option<i32>>,
    public_host: String,
    public_port_base: i32,
    tenant_id: TenantId,
    east_west_group: Option<ProjectId>,
    private_vni: Option<i32>,
    private_host: Option<i32>,
    cluster_id: Option<ClusterId>,
    cluster_index: Option<i32>,
    cluster_name: Option<String>,
    /// A started run's saved root disk, as the storage backend serves it.
    restore_from: Option<serde_json::Value>,
}

/// The provision tasks to write, as the columns [`insert_tasks`] takes.
struct NewTasks {
    ids: Vec<uuid::Uuid>,
    nodes: Vec<uuid::Uuid>,
    kinds: Vec<String>,
    specs: Vec<serde_json::Value>,
    allocations: Vec<uuid::Uuid>,
    traces: Vec<Option<String>>,
}

impl NewTasks {
    fn with_capacity(n: usize) -> Self {
        Self {
            ids: Vec::with_capacity(n),
            nodes: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            specs: Vec::with_capacity(n),
            allocations: Vec::with_capacity(n),
            traces: Vec::with_capacity(n),
        }
    }

    fn push(
        &mut self,
        allocation: AllocationId,
        node: NodeId,
        spec: (TaskSpec, Option<String>),
        trace: Option<String>,
    ) {
        let (spec, sealed) = spec;
        self.ids.push(AgentTaskId::new_random().0);
        self.nodes.push(node.0);
        self.kinds.push(spec.kind().to_string());
        let mut spec = serde_json::to_value(&spec).expect("a task spec serializes");
        // Sealed at rest here too: the claim opens it for the agent (`open_user_data`).
        if let (Some(sealed), Some(spec)) = (sealed, spec.as_object_mut()) {
            spec.insert(SEALED_USER_DATA.into(), sealed.into());
        }
        self.specs.push(spec);
        self.traces.push(trace);
        self.allocations.push(allocation.0);
    }
}

/// Each tenant's InfiniBand partition key, assigned on first use and kept.
async fn tenant_pkeys(
    conn: &mut PgConnection,
    rows: &[ProvisionRow],
) -> Result<Vec<(TenantId, i32)>> {
    let mut tenants: Vec<uuid::Uuid> = rows.iter().map(|r| r.tenant_id.0).collect();
    tenants.sort_unstable();
    tenants.dedup();
    sqlx::query!(
        "INSERT INTO tenant_ib_partitions (tenant_id) SELECT unnest($1::uuid[]) ORDER BY 1
         ON CONFLICT (tenant_id) DO NOTHING",
        &tenants
    )
    .execute(&mut *conn)
    .await?;
    let pkeys = sqlx::query!(
        r#"SELECT tenant_id AS "tenant_id: TenantId", pkey FROM tenant_ib_partitions
           WHERE tenant_id = ANY($1)"#,
        &tenants
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(pkeys.into_iter().map(|p| (p.tenant_id, p.pkey)).collect())
}

/// The NVLink partitions of the rows' nodes: (node, partition id, its slots).
async fn nvlink_partitions(
    conn: &mut PgConnection,
    rows: &[ProvisionRow],
) -> Result<Vec<(NodeId, i32, Vec<uuid::Uuid>)>> {
    let mut nodes: Vec<uuid::Uuid> = rows.iter().map(|r| r.node_id.0).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let partitions = sqlx::query!(
        r#"SELECT node_id AS "node_id: NodeId", partition_id,
                  slot_ids AS "slot_ids: Vec<uuid::Uuid>"
           FROM node_fabric_partitions WHERE node_id = ANY($1)"#,
        &nodes
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(partitions
        .into_iter()
        .map(|p| (p.node_id, p.partition_id, p.slot_ids))
        .collect())
}

/// The fabric an allocation joins: its tenant's InfiniBand partition, and for a 2-, 4- or
/// 8-GPU slice the NVLink partition holding exactly its slots.
fn fabric_plan(
    a: &ProvisionRow,
    planned: &[PlannedSlot],
    pkeys: &[(TenantId, i32)],
    partitions: &[(NodeId, i32, Vec<uuid::Uuid>)],
) -> Result<FabricPlan> {
    let pkey = pkeys
        .iter()
        .find(|(t, _)| *t == a.tenant_id)
        .map(|(_, k)| *k)
        .ok_or_else(|| Error::Corrupt(format!("no IB partition key for {}", a.tenant_id)))?;
    let mine: Vec<uuid::Uuid> = planned
        .iter()
        .map(|s| {
            s.slot_id
                .parse()
                .map_err(|_| Error::Corrupt(format!("slot id {}", s.slot_id)))
        })
        .collect::<Result<_>>()?;
    let nvlink_partition = if mine.len() >= 2 {
        partitions
            .iter()
            .find(|(node, _, slots)| {
                *node == a.node_id
                    && slots.len() == mine.len()
                    && mine.iter().all(|s| slots.contains(s))
            })
            .map(|(_, id, _)| {
                u32::try_from(*id).map_err(|_| Error::Corrupt(format!("partition {id}")))
            })
            .transpose()?
    } else {
        None
    };
    Ok(FabricPlan {
        ib_pkey: Some(
            u16::try_from(pkey).map_err(|_| Error::Corrupt(format!("IB partition key {pkey}")))?,
        ),
        nvlink_partition,
    })
}

/// The provision task for an allocation, and its user data sealed (kept beside the spec).
fn provision_spec(
    a: ProvisionRow,
    slots: Vec<PlannedSlot>,
    network: NetworkPlan,
    fabric: FabricPlan,
) -> Result<(TaskSpec, Option<String>)> {
    let restore_from = a.restore_from.map(volume_target).transpose()?;
    let plan = ProvisionPlan {
        restore_from,
        allocation_id: a.id.to_string(),
        name: a.name,
        image: ImageRef {
            name: a.image,
            source: a.image_source,
            sha256: a.image_sha256,
            ssh_user: a.ssh_user,
            cloud_init: if a.cloud_init.as_object().is_some_and(|m| m.is_empty()) {
                String::new()
            } else {
                a.cloud_init.to_string()
            },
        },
        ssh_public_key: a.ssh_public_key,
        user_data: a.user_data,
        slots,
        network,
        fabric,
        // The members and the key are added when the task is handed over
        // (`clusters::with_cluster`): the key never rests in a task, and the list is current.
        cluster: match (a.cluster_id, a.cluster_index, a.cluster_name) {
            (Some(id), Some(index), Some(name)) => Some(agent_protocol::ClusterBoot {
                cluster_id: id.to_string(),
                name,
                index: u32::try_from(index).unwrap_or(0),
                members: Vec::new(),
                ssh_public_key: String::new(),
                ssh_private_key: String::new(),
            }),
            _ => None,
        },
    };
    let spec = if a.shape == "baremetal" {
        TaskSpec::BaremetalProvision(plan)
    } else {
        TaskSpec::VmProvision(plan)
    };
    Ok((spec, a.user_data_sealed))
}

/// A volume's stored target, as a plan carries it.
fn volume_target(v: serde_json::Value) -> Result<agent_protocol::VolumeTarget> {
    serde_json::from_value(v).map_err(|e| Error::Corrupt(format!("volume target: {e}")))
}

/// The planned slots of each allocation in `ids` (every live slot of the node for bare
/// metal), in slot order, with one statement.
///
/// A slice's claim names its slot and a bare-metal claim its node, so the two are joined
/// apart: one join with `slot_id = s.id OR kind = 'baremetal'` cannot use either index, and
/// the planner hashed every live slot of the fleet for each call (1.85 ms a call with 320
/// slots under the dispatch benchmark, the most expensive statement of a launch).
pub(super) async fn planned_slots_of(
    conn: &mut PgConnection,
    ids: &[AllocationId],
) -> Result<Vec<(AllocationId, PlannedSlot)>> {
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.0).collect();
    let rows = sqlx::query_as!(
        SlotRow,
        r#"SELECT c.allocation_id AS "allocation_id: AllocationId", s.id AS "id!: SlotId",
                  s.node_id AS "node_id!: NodeId", s.slot_index AS "slot_index!",
                  s.gpu_pci_address AS "gpu_pci_address!",
                  s.nvme_pci_address AS "nvme_pci_address!", s.nvme_serial AS "nvme_serial!",
                  s.nvme_namespace AS "nvme_namespace!",
                  s.nvme_size_bytes AS "nvme_size_bytes!",
                  s.ib_vf_pci_address AS "ib_vf_pci_address!", s.cpu_set AS "cpu_set!",
                  s.numa_node AS "numa_node!", s.memory_mib AS "memory_mib!",
                  s.capacity_metadata ->> 'destructive_wipe_policy' AS "wipe!"
           FROM resource_claims c JOIN node_resource_slots s ON s.id = c.slot_id
           WHERE c.allocation_id = ANY($1) AND s.retired_at IS NULL
           UNION ALL
           SELECT c.allocation_id, s.id, s.node_id, s.slot_index, s.gpu_pci_address,
                  s.nvme_pci_address, s.nvme_serial, s.nvme_namespace, s.nvme_size_bytes,
                  s.ib_vf_pci_address, s.cpu_set, s.numa_node, s.memory_mib,
                  s.capacity_metadata ->> 'destructive_wipe_policy'
           FROM resource_claims c JOIN node_resource_slots s ON s.node_id = c.node_id
           WHERE c.allocation_id = ANY($1) AND c.kind = 'baremetal' AND s.retired_at IS NULL
           ORDER BY 1, 4"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| Some((r.allocation_id?, r.planned())))
        .collect())
}

/// Writes agent tasks, one per allocation (the arrays side by side), with one statement; a
/// task the allocation already has (not failed) is left as it is.
async fn insert_tasks(
    conn: &mut PgConnection,
    ids: &[uuid::Uuid],
    nodes: &[uuid::Uuid],
    kinds: &[String],
    specs: &[serde_json::Value],
    allocations: &[uuid::Uuid],
    traces: &[Option<String>],
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO agent_tasks (id, node_id, kind, spec, allocation_id, traceparent)
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::uuid[], $6::text[])
         ON CONFLICT (allocation_id, kind)
             WHERE allocation_id IS NOT NULL AND state <> 'failed'
               AND kind NOT IN ('allocation.network_update', 'allocation.volumes_update')
         DO NOTHING",
        ids,
        nodes,
        kinds,
        specs,
        allocations,
        traces as &[Option<String>],
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Queues the release task of each allocation in `ids` that is releasing or cleaning (with
/// the trace context its release ran in), a statement per step for all of them. Returns the
/// nodes to wake, one per allocation.
pub(crate) async fn queue_releases(
    conn: &mut PgConnection,
    ids: &[(AllocationId, Option<String>)],
) -> Result<Vec<NodeId>> {
    let wanted: Vec<uuid::Uuid> = ids.iter().map(|(id, _)| id.0).collect();
    let rows = sqlx::query!(
        r#"SELECT a.id AS "id: AllocationId", a.shape, a.node_id AS "node_id: NodeId", a.state,
                  (SELECT r.target FROM volumes r WHERE r.id = a.stop_root_volume) AS save_root
           FROM allocations a
           WHERE a.id = ANY($1)
           ORDER BY a.id
           FOR NO KEY UPDATE OF a"#,
        &wanted
    )
    .fetch_all(&mut *conn)
    .await?;
    // The state is checked here, not in the query: with it there, the planner intersects the
    // primary key with the index of live allocations, thousands of entries, for a few rows.
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| matches!(r.state.as_str(), "releasing" | "cleaning"))
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let found: Vec<AllocationId> = rows.iter().map(|r| r.id).collect();
    let slots = planned_slots_of(&mut *conn, &found).await?;
    let (mut task_ids, mut nodes, mut kinds, mut specs, mut allocations, mut traces) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for a in rows {
        let plan = ReleasePlan {
            save_root: a.save_root.map(volume_target).transpose()?,
            allocation_id: a.id.to_string(),
            slots: slots
                .iter()
                .filter(|(id, _)| *id == a.id)
                .map(|(_, s)| s.clone())
                .collect(),
        };
        let spec = if a.shape == "baremetal" {
            TaskSpec::BaremetalRelease(plan)
        } else {
            TaskSpec::VmRelease(plan)
        };
        task_ids.push(AgentTaskId::new_random().0);
        nodes.push(a.node_id.0);
        kinds.push(spec.kind().to_string());
        specs.push(serde_json::to_value(&spec).expect("a task spec serializes"));
        allocations.push(a.id.0);
        traces.push(
            ids.iter()
                .find(|(id, _)| *id == a.id)
                .and_then(|(_, t)| t.clone()),
        );
    }
    insert_tasks(
        &mut *conn,
        &task_ids,
        &nodes,
        &kinds,
        &specs,
        &allocations,
        &traces,
    )
    .await?;
    Ok(nodes.into_iter().map(NodeId).collect())
}
