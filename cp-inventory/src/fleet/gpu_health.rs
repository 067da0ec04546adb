//! GPU health: agents report XID errors, uncorrectable ECC errors and thermal slowdown with
//! their heartbeats; each event is recorded once (the agent's id for it), and the fleet's
//! policy decides whether it takes the GPU's slot out of service. A slot out of service is not
//! placed (the free blocks, placement's own query and the posture view all leave it out) until
//! an operator returns it, with a reason; both moves are audited. The allocation on the slot
//! keeps running: its tenant is told on the allocation page and decides.

use agent_protocol::{GpuEvent, GpuEventKind};
use serde_json::json;

use crate::fleet::lock_node;
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{NodeId, SlotId, UserId};
use cp_identity::auth::{Platform, PlatformOperators, PlatformStaff};
pub use portal_types::GpuHealthPolicyInput;
pub use portal_types::fleet::{GpuHealthEvent, GpuHealthPolicy};

/// At most this many events in one heartbeat (an agent keeps at most 256 waiting).
pub const MAX_EVENTS_PER_HEARTBEAT: usize = 256;

/// What the policy holds, as the decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub xid_codes: Vec<u32>,
    pub ecc_uncorrectable: bool,
    pub thermal: bool,
}

impl Policy {
    /// Whether an event of `kind` (with `xid`) takes its slot out of service.
    pub fn takes_out_of_service(&self, kind: GpuEventKind, xid: Option<u32>) -> bool {
        match kind {
            GpuEventKind::Xid => xid.is_some_and(|x| self.xid_codes.contains(&x)),
            GpuEventKind::EccUncorrectable => self.ecc_uncorrectable,
            GpuEventKind::Thermal => self.thermal,
        }
    }
}

/// Reads the policy form: XID numbers 1–999 separated by commas or spaces (at most 64, each
/// once), and the two boxes.
pub fn parse_policy(input: &GpuHealthPolicyInput) -> Result<Policy> {
    let mut codes = Vec::new();
    for word in input
        .xid_codes
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        let code = word
            .parse::<u32>()
            .ok()
            .filter(|c| (1..=999).contains(c))
            .ok_or_else(|| Error::Invalid {
                field: "xid_codes",
                reason: format!("{word:?} is not an XID number (1–999)"),
            })?;
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    if codes.len() > 64 {
        return Err(Error::Invalid {
            field: "xid_codes",
            reason: format!("at most 64 XID numbers ({} given)", codes.len()),
        });
    }
    codes.sort_unstable();
    Ok(Policy {
        xid_codes: codes,
        ecc_uncorrectable: GpuHealthPolicyInput::ticked(&input.ecc_uncorrectable),
        thermal: GpuHealthPolicyInput::ticked(&input.thermal),
    })
}

/// One reported event, checked: the id and address exactly as the schema wants them, the
/// detail cleaned (control characters dropped, at most 500 characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidEvent {
    pub id: String,
    pub gpu_pci_address: String,
    pub kind: GpuEventKind,
    pub xid: Option<u32>,
    pub detail: String,
    pub observed_at: time::OffsetDateTime,
}

pub fn check_event(e: &GpuEvent) -> Result<ValidEvent> {
    let invalid = |field: &'static str, reason: String| Error::Invalid { field, reason };
    if e.id.is_empty()
        || e.id.len() > 64
        || !e
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(invalid(
            "gpu_events.id",
            "1–64 characters of A–Z, a–z, 0–9, _ and -".into(),
        ));
    }
    let pci = e.gpu_pci_address.as_str();
    let b = pci.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        pci[r]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    if !(b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
        && hex(0..4)
        && hex(5..7)
        && hex(8..10))
    {
        return Err(invalid(
            "gpu_events.gpu_pci_address",
            format!(
                "{:?} is not a PCI address like 0000:3b:00.0",
                pci.chars().take(40).collect::<String>()
            ),
        ));
    }
    match (e.kind, e.xid) {
        (GpuEventKind::Xid, Some(x)) if (1..=999).contains(&x) => {}
        (GpuEventKind::Xid, _) => {
            return Err(invalid(
                "gpu_events.xid",
                "an XID event names its number (1–999)".into(),
            ));
        }
        (_, Some(_)) => {
            return Err(invalid(
                "gpu_events.xid",
                "only an XID event has an XID number".into(),
            ));
        }
        (_, None) => {}
    }
    let observed_at = time::OffsetDateTime::from_unix_timestamp(e.observed_at)
        .map_err(|_| invalid("gpu_events.observed_at", "not a time".into()))?;
    let detail: String = e
        .detail
        .chars()
        .filter(|c| !c.is_control())
        .take(500)
        .collect();
    Ok(ValidEvent {
        id: e.id.clone(),
        gpu_pci_address: e.gpu_pci_address.clone(),
        kind: e.kind,
        xid: e.xid,
        detail: if detail.trim().is_empty() {
            e.kind.as_str().replace('_', " ")
        } else {
            detail
        },
        observed_at,
    })
}

#[allow(async_fn_in_trait)]
pub trait GpuHealthApi {
    /// The fleet's GPU health policy.
    async fn gpu_health_policy(&self, who: &Platform<PlatformStaff>) -> Result<GpuHealthPolicy>;

    /// Changes which events take a slot out of service (from now on; slots already out stay
    /// out). Audited.
    async fn set_gpu_health_policy(
        &self,
        who: &Platform<PlatformOperators>,
        input: &GpuHealthPolicyInput,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Puts a slot a GPU health event took out of service back into placement, saying what
    /// was checked. Audited.
    async fn return_slot_to_service(
        &self,
        who: &Platform<PlatformOperators>,
        slot: SlotId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<()>;
}

async fn read_policy(conn: &mut sqlx::PgConnection) -> Result<(Policy, GpuHealthPolicy)> {
    let r = sqlx::query!(
        r#"SELECT p.xid_codes, p.ecc_uncorrectable, p.thermal, p.updated_at,
                  u.email AS "updated_by?"
           FROM gpu_health_policy p LEFT JOIN users u ON u.id = p.updated_by"#
    )
    .fetch_one(conn)
    .await?;
    let codes: Vec<u32> = r
        .xid_codes
        .iter()
        .filter_map(|c| u32::try_from(*c).ok())
        .collect();
    Ok((
        Policy {
            xid_codes: codes.clone(),
            ecc_uncorrectable: r.ecc_uncorrectable,
            thermal: r.thermal,
        },
        GpuHealthPolicy {
            xid_codes: codes,
            ecc_uncorrectable: r.ecc_uncorrectable,
            thermal: r.thermal,
            updated_by: r.updated_by,
            updated_at: r.updated_at,
        },
    ))
}

impl GpuHealthApi for ControlPlane {
    #[tracing::instrument(skip_all)]
    async fn gpu_health_policy(&self, _who: &Platform<PlatformStaff>) -> Result<GpuHealthPolicy> {
        Ok(read_policy(&mut *self.pool().acquire().await?).await?.1)
    }

    #[tracing::instrument(skip_all)]
    async fn set_gpu_health_policy(
        &self,
        who: &Platform<PlatformOperators>,
        input: &GpuHealthPolicyInput,
        request_id: Option<&str>,
    ) -> Result<()> {
        let new = parse_policy(input)?;
        let mut tx = self.pool().begin().await?;
        let (old, _) = read_policy(&mut tx).await?;
        if old == new {
            return Ok(());
        }
        let codes: Vec<i32> = new.xid_codes.iter().map(|c| *c as i32).collect();
        sqlx::query!(
            "UPDATE gpu_health_policy SET xid_codes = $1, ecc_uncorrectable = $2, thermal = $3,
                                          updated_by = $4, updated_at = now()",
            &codes,
            new.ecc_uncorrectable,
            new.thermal,
            who.principal().user_id as UserId,
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: "fleet.gpu_health_policy.update",
                resource: &self.naming().platform("gpu-health-policy"),
                before: Some(json!({ "xid_codes": old.xid_codes, "ecc_uncorrectable": old.ecc_uncorrectable, "thermal": old.thermal })),
                after: Some(json!({ "xid_codes": new.xid_codes, "ecc_uncorrectable": new.ecc_uncorrectable, "thermal": new.thermal })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(slot.id = %slot))]
    async fn return_slot_to_service(
        &self,
        who: &Platform<PlatformOperators>,
        slot: SlotId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let reason = crate::fleet::checked_reason(reason)?;
        let node = sqlx::query_scalar!(
            r#"SELECT node_id AS "node: NodeId" FROM node_resource_slots
               WHERE id = $1 AND retired_at IS NULL"#,
            slot as SlotId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "slot" })?;
        let mut tx = self.pool().begin().await?;
        let region = lock_node(&mut tx, node).await?.region;
        let row = sqlx::query!(
            r#"SELECT s.slot_index, e.detail AS "detail?", s.out_of_service_at
               FROM node_resource_slots s
               LEFT JOIN gpu_health_events e ON e.id = s.out_of_service_event
               WHERE s.id = $1"#,
            slot as SlotId
        )
        .fetch_one(&mut *tx)
        .await?;
        let Some(detail) = row.detail else {
            return Err(Error::Conflict(format!(
                "slot {} is in service",
                row.slot_index
            )));
        };
        sqlx::query!(
            "UPDATE node_resource_slots SET out_of_service_event = NULL, out_of_service_at = NULL
             WHERE id = $1",
            slot as SlotId
        )
        .execute(&mut *tx)
        .await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.principal().user_id),
                action: "node.slot.return_to_service",
                resource: &self.naming().node(&region, node)?,
                before: Some(json!({ "slot": row.slot_index, "out_of_service": detail, "since": row.out_of_service_at.map(portal_types::utc) })),
                after: Some(json!({ "slot": row.slot_index, "out_of_service": null, "reason": reason })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// What the agent API uses: recording a heartbeat's events.
#[doc(hidden)]
pub mod hidden {
    use super::*;

    #[allow(async_fn_in_trait)]
    pub trait GpuHealthInternal {
        /// Records the node's events (each once, by its agent id) and takes slots out of
        /// service as the policy says, audited as the agent's doing. Returns how many were new.
        async fn record_gpu_events(&self, node: NodeId, events: &[GpuEvent]) -> Result<usize>;
    }

    impl GpuHealthInternal for ControlPlane {
        #[tracing::instrument(skip_all, fields(node.id = %node, events = events.len()))]
        async fn record_gpu_events(&self, node: NodeId, events: &[GpuEvent]) -> Result<usize> {
            if events.is_empty() {
                return Ok(0);
            }
            if events.len() > MAX_EVENTS_PER_HEARTBEAT {
                return Err(Error::Invalid {
                    field: "gpu_events",
                    reason: format!(
                        "at most {MAX_EVENTS_PER_HEARTBEAT} events a heartbeat ({} sent)",
                        events.len()
                    ),
                });
            }
            let valid = events.iter().map(check_event).collect::<Result<Vec<_>>>()?;
            let mut tx = self.pool().begin().await?;
            let region = lock_node(&mut tx, node).await?.region;
            let (policy, _) = read_policy(&mut tx).await?;
            let mut new = Vec::new();
            for e in &valid {
                let slot = sqlx::query!(
                    r#"SELECT id AS "id: SlotId", slot_index, out_of_service_event
                       FROM node_resource_slots
                       WHERE node_id = $1 AND gpu_pci_address = $2 AND retired_at IS NULL"#,
                    node as NodeId,
                    e.gpu_pci_address
                )
                .fetch_optional(&mut *tx)
                .await?;
                let out = slot.is_some() && policy.takes_out_of_service(e.kind, e.xid);
                let id = uuid::Uuid::new_v4();
                let inserted = sqlx::query_scalar!(
                    "INSERT INTO gpu_health_events
                         (id, node_id, agent_event_id, gpu_pci_address, slot_id, kind, xid, detail,
                          observed_at, took_out_of_service)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                     ON CONFLICT (node_id, agent_event_id) DO NOTHING
                     RETURNING id",
                    id,
                    node as NodeId,
                    e.id,
                    e.gpu_pci_address,
                    slot.as_ref().map(|s| s.id) as Option<SlotId>,
                    e.kind.as_str(),
                    e.xid.map(|x| x as i32),
                    e.detail,
                    e.observed_at,
                    out
                )
                .fetch_optional(&mut *tx)
                .await?;
                if inserted.is_none() {
                    continue;
                }
                new.push((e.kind, out));
                let Some(slot) = slot.filter(|s| out && s.out_of_service_event.is_none()) else {
                    continue;
                };
                sqlx::query!(
                    "UPDATE node_resource_slots SET out_of_service_event = $2, out_of_service_at = now()
                     WHERE id = $1",
                    slot.id as SlotId,
                    id
                )
                .execute(&mut *tx)
                .await?;
                audit::record(
                    &mut tx,
                    AuditEntry {
                        actor: Actor::Agent,
                        action: "node.slot.out_of_service",
                        resource: &self.naming().node(&region, node)?,
                        before: Some(json!({ "slot": slot.slot_index, "out_of_service": null })),
                        after: Some(json!({
                            "slot": slot.slot_index, "gpu": e.gpu_pci_address, "event": e.kind.as_str(),
                            "xid": e.xid, "detail": e.detail,
                        })),
                        request_id: None,
                    },
                )
                .await?;
            }
            tx.commit().await?;
            for (kind, out) in &new {
                self.metrics().gpu_event(kind.as_str(), *out);
            }
            Ok(new.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(codes: &str) -> GpuHealthPolicyInput {
        GpuHealthPolicyInput {
            xid_codes: codes.into(),
            ecc_uncorrectable: Some("true".into()),
            thermal: None,
        }
    }

    #[test]
    fn the_policy_form_takes_numbers_and_names_what_it_refuses() {
        let p = parse_policy(&input("79, 48 63,,64  74 79")).unwrap();
        assert_eq!(p.xid_codes, [48, 63, 64, 74, 79]);
        assert!(p.takes_out_of_service(GpuEventKind::Xid, Some(79)));
        assert!(!p.takes_out_of_service(GpuEventKind::Xid, Some(13)));
        assert!(p.takes_out_of_service(GpuEventKind::EccUncorrectable, None));
        assert!(!p.takes_out_of_service(GpuEventKind::Thermal, None));
        assert!(parse_policy(&input("")).unwrap().xid_codes.is_empty());
        for bad in ["79, x", "0", "1000", "-4", "7.9"] {
            let e = parse_policy(&input(bad)).unwrap_err().to_string();
            assert!(
                e.contains("xid_codes") && e.contains("not an XID number"),
                "{bad}: {e}"
            );
        }
        let many = (1..=65)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(
            parse_policy(&input(&many))
                .unwrap_err()
                .to_string()
                .contains("at most 64")
        );
    }

    #[test]
    fn events_are_checked_before_anything_is_written() {
        let ok = GpuEvent {
            id: "xid-sim-7".into(),
            gpu_pci_address: "0000:3b:00.0".into(),
            kind: GpuEventKind::Xid,
            xid: Some(79),
            detail: "GPU has fallen\u{7} off the bus".into(),
            observed_at: 1_764_000_000,
        };
        assert_eq!(
            check_event(&ok).unwrap().detail,
            "GPU has fallen off the bus"
        );
        let bad = |f: fn(&mut GpuEvent)| {
            let mut e = ok.clone();
            f(&mut e);
            check_event(&e).unwrap_err().to_string()
        };
        assert!(bad(|e| e.id = "a b".into()).contains("gpu_events.id"));
        assert!(bad(|e| e.gpu_pci_address = "0000:3B:00.0".into()).contains("PCI address"));
        assert!(bad(|e| e.gpu_pci_address = "../../etc".into()).contains("PCI address"));
        assert!(bad(|e| e.xid = None).contains("names its number"));
        assert!(bad(|e| e.xid = Some(0)).contains("names its number"));
        assert!(bad(|e| e.kind = GpuEventKind::Thermal).contains("only an XID"));
        assert!(bad(|e| e.observed_at = i64::MAX).contains("observed_at"));
    }
}
