//! Enrolling a node: the operator's form, checked, and the one-time bootstrap token its
//! agent exchanges for a credential.

use serde_json::json;
use time::OffsetDateTime;

use super::{BOOTSTRAP_TOKEN_TTL, CAPACITY_SHAPES, lock_node, new_secret, secret_hash, utc};
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{NodeId, UserId};
use cp_identity::auth::{Platform, PlatformOperators};
pub use portal_types::fleet::{
    Enrolment, FleetView, NodeDetail, NodeSummary, POSTURES, ProposalSlot, ProposalView, SlotRow,
    TaskRow,
};

/// What an operator types to enrol a node.
#[derive(Clone, Debug, Default)]
pub struct NewNode {
    pub hostname: String,
    pub region: String,
    pub rack: String,
    pub family: String,
    pub capacity_shapes: Vec<String>,
}

fn check_new_node(n: &NewNode) -> Result<NewNode> {
    let invalid = |field: &'static str, reason: &str| Error::Invalid {
        field,
        reason: reason.to_string(),
    };
    let hostname = n.hostname.trim().to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if hostname.is_empty() || hostname.len() > 253 || !hostname.split('.').all(label_ok) {
        return Err(invalid(
            "hostname",
            "use letters, digits and hyphens in dot-separated labels (e.g. gpu-hgx-01)",
        ));
    }
    let region = n.region.trim().to_string();
    let region_ok = region.len() >= 2
        && region.len() <= 32
        && region.starts_with(|c: char| c.is_ascii_lowercase())
        && !region.ends_with('-')
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !region_ok {
        return Err(invalid(
            "region",
            "use 2–32 lowercase letters, digits and hyphens, starting with a letter (e.g. eu-west-1)",
        ));
    }
    let rack = n.rack.trim().to_string();
    if rack.is_empty() || rack.chars().count() > 64 || rack.chars().any(char::is_control) {
        return Err(invalid(
            "rack",
            "give the rack, up to 64 characters (e.g. r12)",
        ));
    }
    let family = n.family.trim().to_string();
    let family_ok = family.len() >= 2
        && family.len() <= 64
        && family
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !family.starts_with('-')
        && !family.ends_with('-');
    if !family_ok {
        return Err(invalid(
            "node family",
            "use lowercase letters, digits and hyphens (e.g. hgx-h100-8x)",
        ));
    }
    let mut shapes: Vec<String> = Vec::new();
    for s in &n.capacity_shapes {
        let s = s.trim();
        if !CAPACITY_SHAPES.contains(&s) {
            return Err(invalid(
                "capacity shapes",
                &format!("{s:?} is not one of gpu_slice, baremetal"),
            ));
        }
        if !shapes.iter().any(|x| x == s) {
            shapes.push(s.to_string());
        }
    }
    if shapes.is_empty() {
        return Err(invalid(
            "capacity shapes",
            "choose at least one shape the node may serve (gpu_slice, baremetal)",
        ));
    }
    Ok(NewNode {
        hostname,
        region,
        rack,
        family,
        capacity_shapes: shapes,
    })
}

/// What the control plane offers for enrolling nodes.
#[allow(async_fn_in_trait)]
pub trait EnrolmentApi {
    /// Enrols a node and returns its one-time bootstrap token.
    async fn enrol_node(
        &self,
        who: &Platform<PlatformOperators>,
        node: &NewNode,
        request_id: Option<&str>,
    ) -> Result<Enrolment>;

    /// A fresh bootstrap token for a node (the old one, if unused, stops working). Used to
    /// enrol a reinstalled host again: its old credential is revoked when the new token is used.
    async fn reissue_bootstrap_token(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<Enrolment>;
}

impl EnrolmentApi for ControlPlane {
    #[tracing::instrument(skip_all, fields(node.hostname = %node.hostname))]
    async fn enrol_node(
        &self,
        who: &Platform<PlatformOperators>,
        node: &NewNode,
        request_id: Option<&str>,
    ) -> Result<Enrolment> {
        let node = check_new_node(node)?;
        let id = NodeId::new_random();
        let name = self.naming().node(&node.region, id)?;
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let inserted = sqlx::query!(
            r#"INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, enrolled_by)
               VALUES ($1, $2, $3, $4, $5, $6, $7)
               ON CONFLICT (hostname) DO NOTHING"#,
            id as NodeId,
            node.hostname,
            node.region,
            node.rack,
            node.family,
            &node.capacity_shapes,
            actor as UserId,
        )
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(Error::Conflict(format!(
                "a node named {} is already enrolled",
                node.hostname
            )));
        }
        let (token, expires) = issue_token(&mut tx, id, actor).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.enrol",
                resource: &name,
                before: None,
                after: Some(json!({
                    "hostname": node.hostname, "region": node.region, "rack": node.rack,
                    "family": node.family, "capacity_shapes": node.capacity_shapes,
                    "bootstrap_token_expires": utc(expires),
                })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Enrolment {
            node_id: id,
            hostname: node.hostname,
            bootstrap_token: token,
            expires_at: expires,
        })
    }

    #[tracing::instrument(skip_all, fields(node.id = %node))]
    async fn reissue_bootstrap_token(
        &self,
        who: &Platform<PlatformOperators>,
        node: NodeId,
        request_id: Option<&str>,
    ) -> Result<Enrolment> {
        let actor = who.principal().user_id;
        let mut tx = self.pool().begin().await?;
        let row = lock_node(&mut tx, node).await?;
        sqlx::query!(
            "UPDATE node_bootstrap_tokens SET revoked_at = now()
             WHERE node_id = $1 AND used_at IS NULL AND revoked_at IS NULL",
            node as NodeId
        )
        .execute(&mut *tx)
        .await?;
        let (token, expires) = issue_token(&mut tx, node, actor).await?;
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(actor),
                action: "node.bootstrap_token.issue",
                resource: &self.naming().node(&row.region, node)?,
                before: None,
                after: Some(json!({ "expires": utc(expires) })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Enrolment {
            node_id: node,
            hostname: row.hostname,
            bootstrap_token: token,
            expires_at: expires,
        })
    }
}

async fn issue_token(
    tx: &mut sqlx::PgConnection,
    node: NodeId,
    actor: UserId,
) -> Result<(String, OffsetDateTime)> {
    let token = new_secret("gpb_");
    let expires = sqlx::query_scalar!(
        r#"INSERT INTO node_bootstrap_tokens (id, node_id, token_hash, created_by, expires_at)
           VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
           RETURNING expires_at"#,
        uuid::Uuid::new_v4(),
        node as NodeId,
        secret_hash(&token),
        actor as UserId,
        BOOTSTRAP_TOKEN_TTL.whole_seconds() as f64,
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok((token, expires))
}
