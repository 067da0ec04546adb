//! The audit log: who did what to which resource. Rows are written in the same transaction
//! as the change they describe; the table refuses UPDATE, DELETE and TRUNCATE (a trigger).
//! Reading it, with the access rules, is `audit_log`.

use serde_json::Value;
use sqlx::PgConnection;

use crate::error::Result;
use crate::ids::{ApiTokenId, TenantId, UserId};
use crate::resource_name::ResourceName;

/// Who acted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    User(UserId),
    /// Workers, migrations and seeds.
    System,
    /// A node agent, authenticated with its node credential.
    Agent,
}

/// One audit record, before it is written.
#[derive(Clone, Debug)]
pub struct AuditEntry<'a> {
    pub actor: Actor,
    /// Dotted verb, e.g. `tenant.create`. The database checks the shape.
    pub action: &'a str,
    pub resource: &'a ResourceName,
    pub before: Option<Value>,
    pub after: Option<Value>,
    pub request_id: Option<&'a str>,
}

tokio::task_local! {
    static VIA_TOKEN: ApiTokenId;
}

/// Runs `work` as acting through the API token `token`: every audit record it writes names
/// the token beside the person. The API wraps each call that changes something in it; the
/// token is request context, like the request id, that no domain signature needs to carry.
pub async fn via_token<F: Future>(token: ApiTokenId, work: F) -> F::Output {
    VIA_TOKEN.scope(token, work).await
}

/// Appends `entry` using `conn`, which should be the transaction that makes the change.
#[tracing::instrument(skip_all, fields(audit.action = entry.action, audit.resource = %entry.resource))]
pub async fn record(conn: &mut PgConnection, entry: AuditEntry<'_>) -> Result<i64> {
    let (kind, user) = match entry.actor {
        Actor::User(u) => ("user", Some(u)),
        Actor::System => ("system", None),
        Actor::Agent => ("agent", None),
    };
    let tenant: Option<TenantId> = entry.resource.tenant_id();
    let token = VIA_TOKEN.try_with(|t| *t).ok();
    let id = sqlx::query_scalar!(
        r#"INSERT INTO audit_log
               (actor_user_id, actor_kind, action, resource, tenant_id, before, after, request_id,
                api_token_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
           RETURNING id"#,
        user as Option<UserId>,
        kind,
        entry.action,
        entry.resource.to_string(),
        tenant as Option<TenantId>,
        entry.before,
        entry.after,
        entry.request_id,
        token as Option<ApiTokenId>,
    )
    .fetch_one(conn)
    .await?;
    Ok(id)
}

/// One audit record as people read it (shared with the pages and the API).
pub use portal_types::projects::AuditLine;
