//! What an agent's answers do: a finished task moves its allocation on (running, or released
//! once the cleanup proof verifies), a failure ends the claims and blocks what was not wiped.

use agent_protocol::{
    CleanupProof, PhaseReport, PhaseStatus, ReleasePlan, TaskOutcome, TaskOutput, TaskSpec,
};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use sqlx::PgConnection;

use super::detail::planned_endpoint;
use super::user_data::SEALED_USER_DATA;
use super::{WIPE_PHASE, begin_release, queue_later};
use cp_base::error::{Error, Result};
use cp_base::ids::{AgentTaskId, AllocationId, NodeId};

/// Verifies a cleanup proof against the release plan and the node's current credential.
fn verify_proof(
    proof: &CleanupProof,
    allocation: AllocationId,
    node: NodeId,
    plan: &ReleasePlan,
    credential_hash: &[u8],
) -> std::result::Result<(), String> {
    if proof.allocation_id != allocation.to_string() || proof.node_id != node.to_string() {
        return Err("the proof is for another allocation or node".into());
    }
    let mut expected: Vec<&str> = plan.slots.iter().map(|s| s.slot_id.as_str()).collect();
    let mut got: Vec<&str> = proof.slots.iter().map(|s| s.slot_id.as_str()).collect();
    expected.sort();
    got.sort();
    if expected != got {
        return Err(format!(
            "the proof covers slots {got:?}, the release was for {expected:?}"
        ));
    }
    for s in &proof.slots {
        let planned = plan
            .slots
            .iter()
            .find(|p| p.slot_id == s.slot_id)
            .expect("same slot sets");
        if s.nvme_serial != planned.nvme_serial {
            return Err(format!(
                "slot {}: wiped NVMe {} but the slot's is {}",
                planned.slot_index, s.nvme_serial, planned.nvme_serial
            ));
        }
        if s.wipe_method != planned.wipe_policy {
            return Err(format!(
                "slot {}: wiped with {} but the policy is {}",
                planned.slot_index, s.wipe_method, planned.wipe_policy
            ));
        }
        if !(s.wipe_verified && s.gpu_reset && s.firmware_ok) {
            return Err(format!(
                "slot {}: wipe verified {}, GPU reset {}, firmware ok {}",
                planned.slot_index, s.wipe_verified, s.gpu_reset, s.firmware_ok
            ));
        }
        if s.verified_samples == 0 || s.gpu_firmware.trim().is_empty() {
            return Err(format!(
                "slot {}: the proof names no read-back samples or no GPU firmware",
                planned.slot_index
            ));
        }
    }
    let signature = (0..proof.signature.len())
        .step_by(2)
        .map(|i| {
            proof
                .signature
                .get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or("the signature is not hex")?;
    let mut mac = Hmac::<Sha256>::new_from_slice(credential_hash).expect("any key length");
    mac.update(proof.signing_message().as_bytes());
    mac.verify_slice(&signature)
        .map_err(|_| "the signature does not verify with the node's credential".to_string())
}

/// Ends the allocation's active claims; the trigger `resource_claims_release_cleans` sends
/// their slots to `cleaning`.
async fn end_claims(conn: &mut PgConnection, id: AllocationId) -> Result<()> {
    sqlx::query!(
        "UPDATE resource_claims SET released_at = now() WHERE allocation_id = $1 AND released_at IS NULL",
        id as AllocationId
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The allocation's state, locked, if nobody else holds it (a replica's reaper skips it).
pub(super) async fn lock_state(
    conn: &mut PgConnection,
    id: AllocationId,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT state FROM allocations WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED",
        id as AllocationId
    )
    .fetch_optional(conn)
    .await?)
}

/// Releases the allocation's claims and ends it; its slots are blocked with `reason`.
pub(super) async fn end_blocked(
    conn: &mut PgConnection,
    id: AllocationId,
    failure: &str,
    observed: &str,
) -> Result<()> {
    end_claims(&mut *conn, id).await?;
    sqlx::query!(
        "UPDATE node_resource_slots s SET cleanup_state = 'blocked', cleanup_detail = $2
         FROM resource_claims c
         WHERE c.allocation_id = $1 AND c.node_id = s.node_id AND s.retired_at IS NULL
           AND (c.slot_id = s.id OR c.kind = 'baremetal') AND s.cleanup_state <> 'clean'",
        id as AllocationId,
        format!("allocation {id}: {failure}. Check the host, then clear the slot."),
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET desired_state = 'released', state = 'released',
                released_at = now(), observed_state = $3, failure = coalesce(failure || '; ', '') || $2
         WHERE id = $1",
        id as AllocationId,
        failure,
        observed
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Whether an agent's result for a task of this kind may change its node's claims or slots,
/// so that the result must hold the node's row first. Only the kinds known not to are named:
/// a kind added later locks the node until it is listed here.
pub(crate) fn result_changes_claims(kind: &str) -> bool {
    !matches!(
        kind,
        "slice.vm_provision" | "baremetal.provision" | "allocation.network_update"
    )
}

/// The state of the allocation a node's task belongs to, its row locked; `None` for a task of
/// no allocation (or no such task). An agent's result takes its node, then this, then the
/// task: the order a release keeps too (the allocation, then its queued tasks).
pub(crate) async fn lock_allocation_of(
    conn: &mut PgConnection,
    node: NodeId,
    task: AgentTaskId,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar!(
        "SELECT a.state FROM allocations a
         WHERE a.id = (SELECT allocation_id FROM agent_tasks WHERE id = $1 AND node_id = $2)
         FOR NO KEY UPDATE OF a",
        task as AgentTaskId,
        node as NodeId
    )
    .fetch_optional(conn)
    .await?)
}

/// A provision answered, either way: the tenant's user data has served (it runs at the guest's
/// first boot, and a failed provision is released), so neither the task nor the allocation
/// keeps it.
async fn forget_user_data(
    conn: &mut PgConnection,
    task: AgentTaskId,
    id: AllocationId,
) -> Result<()> {
    sqlx::query!(
        "UPDATE agent_tasks SET spec = spec - 'user_data' - 'user_data_sealed'
         WHERE id = $1 AND (spec ? 'user_data' OR spec ? 'user_data_sealed')",
        task as AgentTaskId
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET user_data = NULL, user_data_sealed = NULL
         WHERE id = $1 AND (user_data IS NOT NULL OR user_data_sealed IS NOT NULL)",
        id as AllocationId
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records an allocation task's result (called by `finish_task` in its transaction, which
/// holds the allocation's row: `state` is its state, from [`lock_allocation_of`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn task_finished(
    conn: &mut PgConnection,
    node: NodeId,
    task: AgentTaskId,
    kind: &str,
    id: AllocationId,
    state: &str,
    spec: serde_json::Value,
    outcome: &TaskOutcome,
) -> Result<()> {
    // Only a provision that carried user data has any to forget: the others (most) cost
    // no statement here.
    let carried_user_data = [SEALED_USER_DATA, "user_data"]
        .iter()
        .any(|k| spec.get(k).is_some_and(|v| !v.is_null()));
    if matches!(kind, "slice.vm_provision" | "baremetal.provision") && carried_user_data {
        forget_user_data(&mut *conn, task, id).await?;
    }
    let (task_state, task_error) = match (kind, outcome) {
        ("slice.vm_provision" | "baremetal.provision", TaskOutcome::Succeeded { output }) => {
            provisioned(conn, node, kind, id, spec, output).await?
        }
        ("slice.vm_provision" | "baremetal.provision", TaskOutcome::Failed { error }) => {
            provision_failed(conn, id, state, error).await?
        }
        ("slice.vm_release" | "baremetal.release", outcome) => {
            match cleanup_verdict(conn, node, task, id, state, spec, outcome).await? {
                Ok(proof) => cleaned(conn, node, task, id, state, proof).await?,
                Err(reason) => {
                    end_blocked(&mut *conn, id, &reason, "absent").await?;
                    ("failed", Some(reason))
                }
            }
        }
        ("allocation.network_update", TaskOutcome::Succeeded { output }) => {
            if !matches!(output, TaskOutput::NetworkUpdated {}) {
                return Err(Error::Invalid {
                    field: "result",
                    reason: format!("a {kind} task answers that the network is updated"),
                });
            }
            ("succeeded", None)
        }
        // The allocation keeps running; the failed task (with its reason) is what the page shows.
        ("allocation.network_update", TaskOutcome::Failed { error }) => {
            ("failed", Some(error.clone()))
        }
        ("allocation.volumes_update", TaskOutcome::Succeeded { output }) => {
            let TaskOutput::VolumesUpdated { attached } = output else {
                return Err(Error::Invalid {
                    field: "result",
                    reason: format!("a {kind} task answers with the volumes plugged in"),
                });
            };
            super::volumes::plugged(conn, id, attached).await?;
            ("succeeded", None)
        }
        ("allocation.volumes_update", TaskOutcome::Failed { error }) => {
            super::volumes::plug_failed(conn, id, error).await?;
            ("failed", Some(error.clone()))
        }
        _ => {
            return Err(Error::Corrupt(format!(
                "task {task} of kind {kind} belongs to an allocation"
            )));
        }
    };
    sqlx::query!(
        "UPDATE agent_tasks SET state = $2, finished_at = now(), error = $3 WHERE id = $1",
        task as AgentTaskId,
        task_state,
        task_error.map(|e| if e.trim().is_empty() {
            "the agent gave no reason".to_string()
        } else {
            e
        }),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// How a task ended: its state, and the reason when it failed.
type TaskEnd = (&'static str, Option<String>);

/// A provision answered with where to connect: the allocation runs, reached at the endpoint
/// the platform planned (a host that reports another is logged, not believed).
async fn provisioned(
    conn: &mut PgConnection,
    node: NodeId,
    kind: &str,
    id: AllocationId,
    spec: serde_json::Value,
    output: &TaskOutput,
) -> Result<TaskEnd> {
    let TaskOutput::Provisioned(p) = output else {
        return Err(Error::Invalid {
            field: "result",
            reason: format!("a {kind} task answers with where to connect"),
        });
    };
    let planned = planned_endpoint(spec)?;
    if (p.ssh_host.as_str(), p.ssh_port, p.ssh_user.as_str())
        != (planned.host.as_str(), planned.port, planned.user.as_str())
    {
        tracing::warn!(
            node.id = %node, allocation.id = %id,
            reported.host = %p.ssh_host.escape_debug(), reported.port = p.ssh_port,
            reported.user = %p.ssh_user.escape_debug(),
            "a host reported another SSH endpoint than the one planned; the planned one stands"
        );
    }
    // A release may have been asked for meanwhile: then only the observation counts.
    sqlx::query!(
        "UPDATE allocations SET observed_state = 'running', ssh_host = $2, ssh_port = $3,
                ssh_user = $4,
                state = CASE WHEN state = 'provisioning' THEN 'running' ELSE state END
         WHERE id = $1",
        id as AllocationId,
        planned.host,
        i32::from(planned.port),
        planned.user
    )
    .execute(&mut *conn)
    .await?;
    super::volumes::after_running(conn, id).await?;
    crate::allocations::stop_start::restored(conn, id).await?;
    Ok(("succeeded", None))
}

/// A provision failed: the host may have written to the slot, so it is cleaned like any
/// release (the provision was claimed, this is its answer: nothing to cancel).
async fn provision_failed(
    conn: &mut PgConnection,
    id: AllocationId,
    state: &str,
    error: &str,
) -> Result<TaskEnd> {
    if state == "provisioning" {
        begin_release(&mut *conn, id, Some(&format!("provision failed: {error}"))).await?;
        queue_later(&mut *conn, "allocation.release", id).await?;
        super::cluster::member_failed(&mut *conn, id, error).await?;
    }
    Ok(("failed", Some(error.to_owned())))
}

/// What a release's answer proves: its cleanup proof, verified against the release plan and
/// the node's current credential, or why the slots can't go back.
#[allow(clippy::too_many_arguments)]
async fn cleanup_verdict<'o>(
    conn: &mut PgConnection,
    node: NodeId,
    task: AgentTaskId,
    id: AllocationId,
    state: &str,
    spec: serde_json::Value,
    outcome: &'o TaskOutcome,
) -> Result<std::result::Result<&'o CleanupProof, String>> {
    let stage = if state == "cleaning" {
        "cleanup failed"
    } else {
        "release failed"
    };
    let verdict = match outcome {
        TaskOutcome::Failed { error } => Err(format!("{stage}: {error}")),
        TaskOutcome::Succeeded {
            output: TaskOutput::Cleaned(proof),
        } => {
            let plan: TaskSpec = serde_json::from_value(spec)
                .map_err(|e| Error::Corrupt(format!("task {task} spec: {e}")))?;
            let (TaskSpec::VmRelease(plan) | TaskSpec::BaremetalRelease(plan)) = plan else {
                return Err(Error::Corrupt(format!("task {task} is not a release")));
            };
            let hash = sqlx::query_scalar!(
                "SELECT credential_hash FROM node_credentials
                 WHERE node_id = $1 AND revoked_at IS NULL",
                node as NodeId
            )
            .fetch_optional(&mut *conn)
            .await?
            .unwrap_or_default();
            verify_proof(proof, id, node, &plan, &hash)
                .map(|()| proof)
                .map_err(|e| format!("cleanup proof refused: {e}"))
        }
        TaskOutcome::Succeeded { .. } => Err(format!(
            "{stage}: the agent answered without a cleanup proof"
        )),
    };
    Ok(verdict)
}

/// A verified cleanup: its certificates, the slots clean, the allocation released.
async fn cleaned(
    conn: &mut PgConnection,
    node: NodeId,
    task: AgentTaskId,
    id: AllocationId,
    state: &str,
    proof: &CleanupProof,
) -> Result<TaskEnd> {
    for s in &proof.slots {
        sqlx::query!(
            "INSERT INTO cleanup_certificates
                 (id, allocation_id, node_id, slot_id, task_id, nvme_serial,
                  wipe_method, wipe_verified, gpu_reset, firmware_ok, signature,
                  wipe_ms, verified_samples, gpu_firmware)
             VALUES (gen_random_uuid(), $1, $2, $3::text::uuid, $4, $5, $6, $7, $8, $9, $10,
                     $11, $12, $13)",
            id as AllocationId,
            node as NodeId,
            s.slot_id,
            task as AgentTaskId,
            s.nvme_serial,
            s.wipe_method,
            s.wipe_verified,
            s.gpu_reset,
            s.firmware_ok,
            proof.signature,
            s.wipe_ms.min(i64::MAX as u64) as i64,
            s.verified_samples.min(i32::MAX as u32) as i32,
            s.gpu_firmware.chars().take(200).collect::<String>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    if state != "cleaning" {
        // A wipe that started ended the claims with the move to `cleaning`
        // ([`wipe_started`]); one reported without that phase ends them now.
        end_claims(&mut *conn, id).await?;
    }
    sqlx::query!(
        "UPDATE node_resource_slots SET cleanup_state = 'clean', cleanup_detail = NULL
         WHERE id = ANY(SELECT (s ->> 'slot_id')::uuid
                        FROM jsonb_array_elements($1::jsonb) AS s)",
        serde_json::to_value(&proof.slots).expect("serializes"),
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "UPDATE allocations SET state = 'released', released_at = now(),
                observed_state = 'absent'
         WHERE id = $1 AND state IN ('releasing', 'cleaning')",
        id as AllocationId
    )
    .execute(&mut *conn)
    .await?;
    Ok(("succeeded", None))
}

/// Whether a phase report changes the node's claims: the start of a release's wipe does
/// ([`wipe_started`]); the caller then holds the node's row before anything else.
pub(crate) fn phase_changes_claims(report: &PhaseReport) -> bool {
    report.status == PhaseStatus::Started && report.phase.trim() == WIPE_PHASE
}

/// A release task's wipe has started: the VM is gone, so the allocation is now `cleaning`
/// and its claims end; the slots wait in `cleaning` until the proof verifies. Called in the
/// phase report's transaction, which holds the node's row.
pub(crate) async fn wipe_started(conn: &mut PgConnection, task: AgentTaskId) -> Result<()> {
    let moved = sqlx::query_scalar!(
        r#"UPDATE allocations SET state = 'cleaning', observed_state = 'absent'
           WHERE state = 'releasing'
             AND id = (SELECT allocation_id FROM agent_tasks
                       WHERE id = $1 AND kind IN ('slice.vm_release', 'baremetal.release'))
           RETURNING id AS "id: AllocationId""#,
        task as AgentTaskId
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = moved {
        end_claims(&mut *conn, id).await?;
    }
    Ok(())
}
