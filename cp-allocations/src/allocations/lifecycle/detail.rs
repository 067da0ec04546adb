//! What an allocation's page reads: its state, phases, transitions, SSH endpoint, published
//! ports and cleanup certificate.

use agent_protocol::{TaskSpec, identity};

use super::projected;
use cp_base::ControlPlane;
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, ProjectId};
use cp_identity::tenancy::{Project, ProjectViewers};
use portal_types::Money;

pub use portal_types::allocations::{
    AllocationDetail, Certificate, GpuHealthNotice, GpuUtilisation, Phase, PortAddress,
    SshEndpoint, Transition,
};

/// Where a running allocation is reached, from its stored fields (checked by the database).
pub(crate) fn ssh_endpoint(
    state: &str,
    host: Option<&str>,
    port: Option<i32>,
    user: Option<&str>,
) -> Option<SshEndpoint> {
    match (host, port.and_then(|p| u16::try_from(p).ok()), user) {
        (Some(host), Some(port), Some(user)) if state == "running" => Some(SshEndpoint {
            host: host.to_owned(),
            port,
            user: user.to_owned(),
        }),
        _ => None,
    }
}

/// Where the platform planned a provision to be reached: the node's public address and the
/// first slot's SSH port (or, in a plan with no public address, the first slot's own address on
/// port 22), and the listing's SSH user. The host's answer only confirms it: a compromised host
/// must not choose the text a tenant's `ssh` runs.
pub(super) fn planned_endpoint(spec: serde_json::Value) -> Result<SshEndpoint> {
    let plan = match serde_json::from_value::<TaskSpec>(spec) {
        Ok(TaskSpec::VmProvision(plan) | TaskSpec::BaremetalProvision(plan)) => plan,
        Ok(other) => {
            return Err(Error::Corrupt(format!(
                "a provision's task holds a {}",
                other.kind()
            )));
        }
        Err(e) => return Err(Error::Corrupt(format!("a provision's spec: {e}"))),
    };
    let first = plan
        .slots
        .first()
        .ok_or_else(|| Error::Corrupt("a provision plan with no slots".into()))?;
    let (host, port) = match (plan.network.public_host, plan.network.ssh_port) {
        (Some(host), Some(port)) => (host, port),
        _ => (first.ip_address.clone(), 22),
    };
    Ok(SshEndpoint {
        host,
        port,
        user: plan.image.ssh_user,
    })
}

/// Each published guest port with the `host:port` it is reached at: the port at position `k`
/// of the stored list (holes are ports withdrawn since) is the first slot's public port `k + 1`.
pub(crate) fn published_at(
    host: &str,
    base: i32,
    first_slot: i32,
    ports: &[Option<i32>],
) -> Vec<PortAddress> {
    let mut out: Vec<PortAddress> = ports
        .iter()
        .enumerate()
        .filter_map(|(k, &guest)| {
            let public = identity::public_port(
                u16::try_from(base).ok()?,
                u32::try_from(first_slot).ok()?,
                k + 1,
            )?;
            Some(PortAddress {
                guest_port: u16::try_from(guest?).ok()?,
                address: format!("{host}:{public}"),
            })
        })
        .collect();
    out.sort();
    out
}

pub(crate) async fn detail(
    cp: &ControlPlane,
    who: &Project<ProjectViewers>,
    id: AllocationId,
    run: AllocationId,
    can_change: bool,
) -> Result<AllocationDetail> {
    use sqlx::types::Json;
    /// The allocation's latest agent task, for the one-line summary.
    #[derive(Debug, serde::Deserialize)]
    struct Execution {
        kind: String,
        state: String,
        error: Option<String>,
        last_phase: Option<String>,
    }
    // One statement: the allocation with its history, phases, latest task, certificates and
    // GPU reports as JSON beside it (a page shows all of them; each was a round trip).
    let a = sqlx::query_file!(
        "queries/allocation_detail.sql",
        run as AllocationId,
        who.id() as ProjectId
    )
    .fetch_optional(cp.pool())
    .await?
    .ok_or(Error::NotFound { what: "allocation" })?;
    let transitions = a.transitions.0;
    let phases = a.phases.0;
    let certificates = a.certificates.0;
    let gpu_utilisation = a.gpu_utilisation.map(|u| u.0);
    let gpu_health = a.gpu_health.0;
    let execution = a.execution.map(|Json(t)| {
        let mut s = format!("{} {}", t.kind, t.state);
        if let Some(p) = t.last_phase {
            s.push_str(&format!(" (last phase: {p})"));
        }
        if let Some(e) = t.error {
            s.push_str(&format!(": {e}"));
        }
        s
    });
    let slot_indexes: Vec<i32> = a
        .placement
        .get("slot_indexes")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let ssh = ssh_endpoint(
        &a.state,
        a.ssh_host.as_deref(),
        a.ssh_port,
        a.ssh_user.as_deref(),
    );
    use crate::allocations::stop_start::{instance_state, root_disk_gib};
    let shown = instance_state(&a.state, a.stops);
    let disk = |gib: i64, micro: i64, currency: String| {
        let size_gib = u32::try_from(gib).map_err(|_| Error::Corrupt("root disk size".into()))?;
        Ok::<_, Error>(portal_types::allocations::StoppedDisk {
            size_gib,
            monthly_cost: portal_types::volumes::StoragePrice {
                region: a.region.clone(),
                currency: currency.into(),
                per_gib_month_micro: micro,
            }
            .monthly(size_gib),
        })
    };
    let stopped_disk = match (a.root_gib, a.root_price_micro, a.root_currency) {
        (Some(gib), Some(micro), Some(currency)) => Some(disk(gib.into(), micro, currency)?),
        _ => None,
    };
    let stoppable =
        !a.stops && !a.in_cluster && a.state == "running" && a.desired_state == "running";
    let stop_keeps = match (
        stoppable,
        a.boot_disk_bytes,
        a.storage_price_micro,
        a.storage_currency,
    ) {
        (true, Some(bytes), Some(micro), Some(currency)) => {
            Some(disk(root_disk_gib(bytes), micro, currency)?)
        }
        _ => None,
    };
    // A stopped instance is where it is meant to be: its run is released, its disk kept.
    let (desired_state, observed_state) = match shown {
        Some("stopped") => ("stopped".to_owned(), "stopped".to_owned()),
        Some(_) => ("stopped".to_owned(), a.observed_state),
        None => (a.desired_state.clone(), a.observed_state),
    };
    Ok(AllocationDetail {
        id,
        can_stop: can_change && stop_keeps.is_some(),
        stop_keeps,
        can_start: can_change && shown == Some("stopped"),
        stopped_disk,
        canonical_name: cp
            .naming()
            .allocation(&a.region, who.tenant(), who.id(), id)?
            .to_string(),
        project_id: who.id(),
        gpu_utilisation,
        gpu_health,
        projected: shown.map_or_else(
            || projected(&a.state, &a.desired_state, a.failure.as_deref()),
            str::to_owned,
        ),
        ssh: ssh.as_ref().map(SshEndpoint::command),
        ssh_endpoint: ssh,
        published: match (&a.ssh_host, slot_indexes.iter().min()) {
            (Some(host), Some(&first)) if a.state == "running" => {
                published_at(host, a.public_port_base, first, &a.published_ports)
            }
            _ => Vec::new(),
        },
        name: a.name,
        sku: a.sku,
        shape: a.shape,
        gpu_count: a.gpu_count,
        region: a.region,
        node: a.hostname,
        slot_indexes,
        image: a.image,
        listing: a.listing,
        price_per_hour: Money {
            amount_minor: a.price_per_hour_minor,
            currency: a.currency.clone().into(),
        },
        cost_so_far: a.cost_minor.map(|c| Money::new(c, a.currency.as_str())),
        running_since: a.running_since,
        ran_until: a.ran_until,
        ran_for_s: a.ran_for_s,
        fee_per_hour: Money {
            amount_minor: a.fee_per_hour_minor,
            currency: a.currency.into(),
        },
        tags: serde_json::from_value(a.tags).unwrap_or_default(),
        desired_state,
        observed_state,
        can_release: can_change
            && (matches!(a.state.as_str(), "placed" | "provisioning" | "running")
                || shown == Some("stopped")),
        state: shown.map_or(a.state, str::to_owned),
        execution,
        failure: a.failure,
        placement_why: a
            .placement
            .get("why")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string(),
        created_at: a.created_at,
        expires_at: a.expires_at,
        transitions,
        phases,
        certificates,
    })
}
