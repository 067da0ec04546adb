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

/// The API token the current task acts through, if any (see [`via_token`]): for work that
/// another task finishes on this one's behalf, as group placement does.
pub fn current_token() -> Option<ApiTokenId> {
    VIA_TOKEN.try_with(|t| *t).ok()
}

/// Appends several entries with one statement, each with the API token it was made through
/// (see [`current_token`]); in order, as [`record`] one by one would.
#[tracing::instrument(skip_all, fields(audit.entries = entries.len()))]
pub async fn record_many(
    conn: &mut PgConnection,
    entries: &[(AuditEntry<'_>, Option<ApiTokenId>)],
) -> Result<()> {
    let mut users = Vec::with_capacity(entries.len());
    let mut kinds = Vec::with_capacity(entries.len());
    let mut actions = Vec::with_capacity(entries.len());
    let mut resources = Vec::with_capacity(entries.len());
    let mut tenants = Vec::with_capacity(entries.len());
    let mut befores = Vec::with_capacity(entries.len());
    let mut afters = Vec::with_capacity(entries.len());
    let mut request_ids = Vec::with_capacity(entries.len());
    let mut tokens = Vec::with_capacity(entries.len());
    for (e, token) in entries {
        let (kind, user) = match e.actor {
            Actor::User(u) => ("user", Some(u.0)),
            Actor::System => ("system", None),
            Actor::Agent => ("agent", None),
        };
        users.push(user);
        kinds.push(kind.to_string());
        actions.push(e.action.to_string());
        resources.push(e.resource.to_string());
        tenants.push(e.resource.tenant_id().map(|t| t.0));
        befores.push(e.before.clone().unwrap_or(Value::Null));
        afters.push(e.after.clone().unwrap_or(Value::Null));
        request_ids.push(e.request_id.map(str::to_string));
        tokens.push(token.map(|t| t.0));
    }
    sqlx::query!(
        r#"INSERT INTO audit_log
               (actor_user_id, actor_kind, action, resource, tenant_id, before, after, request_id,
                api_token_id)
           SELECT u, k, a, r, t, nullif(b, 'null'::jsonb), nullif(af, 'null'::jsonb), q, tok
           FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::jsonb[],
                       $7::jsonb[], $8::text[], $9::uuid[])
                WITH ORDINALITY AS e(u, k, a, r, t, b, af, q, tok, n)
           ORDER BY n"#,
        &users as &[Option<uuid::Uuid>],
        &kinds,
        &actions,
        &resources,
        &tenants as &[Option<uuid::Uuid>],
        &befores,
        &afters,
        &request_ids as &[Option<String>],
        &tokens as &[Option<uuid::Uuid>],
    )
    .execute(conn)
    .await?;
    Ok(())
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
