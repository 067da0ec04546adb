//! Group placement: the launches waiting at one moment in this server process are placed
//! together, in one transaction with one commit and about fifteen statements for the whole
//! group, instead of a transaction of about twenty-five statements each.
//!
//! A launch joins the process's queue and waits for one of [`TURNS`] turns. Whoever gets a
//! turn takes every launch queued by then (its own, unless another turn took it already) and
//! runs them as a group in a task of its own, so a caller that goes away doesn't take the
//! others' answers with it. Under load a group is everything that queued while the previous
//! group ran: no timer, no added wait when the process is idle (a lone launch is a group of
//! one).
//!
//! The group makes the same decisions [`super::launch_once`] makes, reading once per SKU,
//! listing version and project what each launch would have read, in the same transaction as
//! the writes: the idempotency keys' advisory locks (in one order, so groups never deadlock),
//! the policy chain, the name, placement ([`placement::place_group`]: one read of the free
//! blocks per SKU, nodes locked with `SKIP LOCKED`, so two replicas' groups take different
//! nodes), the allocations, claims, provision tasks and audit records (one statement each).
//! The database refuses a double-booking exactly as before.
//!
//! A launch no node has room for at all is refused by the group with placement's own
//! explanation. Anything else out of the ordinary is answered "alone": the caller runs the
//! one-launch path ([`super::launch_once`]), which decides it with its own transaction and
//! says why in words. That is: a repeated idempotency key, published ports, a policy that
//! needs its scope locked (a GPU quota or a monthly budget), anything the group's checks
//! refuse (the one-launch path refuses it again, with the same sentence), a launch the group's
//! nodes had no room for while other nodes were busy (the one-launch path waits for them), and
//! every member of a group whose transaction failed.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::json;
use sqlx::{Connection, PgConnection};
use time::OffsetDateTime;
use tokio::sync::{Semaphore, oneshot};

use super::decide::{self, ValidLaunch};
use super::{LaunchRequest, lifecycle};
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::Result;
use cp_base::ids::{AllocationId, ApiTokenId, NodeId, ProjectId, TenantId, UserId};
use cp_identity::policy::{Resolved, resolve_policies_on};
use cp_inventory::placement::{self, Placement};
use cp_inventory::skus::{Shape, Sku, sku_by_name};

/// Groups in flight at once per process: one being written while the next is decided.
pub const TURNS: usize = 2;

/// The most launches one group takes; more wait for the next turn.
pub const MAX_GROUP: usize = 64;

/// What a launch gets back from its group.
#[derive(Debug)]
pub(super) enum Answer {
    Placed(AllocationId),
    /// `sku_unavailable`: no node has room for it at all (the words [`placement::place`]
    /// would have said).
    Unavailable(String),
    /// Decide it on the one-launch path.
    Alone,
}

/// A launch waiting for its group, with what the group needs to decide and record it.
struct Member {
    user: UserId,
    tenant: TenantId,
    project: ProjectId,
    req: LaunchRequest,
    valid: ValidLaunch,
    request_id: Option<String>,
    /// The API token the launch came through, for its audit record.
    token: Option<ApiTokenId>,
    /// The launch's trace context, for its provision task.
    trace: Option<String>,
    answer: oneshot::Sender<Answer>,
}

/// A process's queue of one kind of work (launches, releases) and its turns, kept per
/// handle ([`ControlPlane::shared`]).
pub(super) struct Queue<M> {
    waiting: Mutex<Vec<M>>,
    turns: std::sync::Arc<Semaphore>,
}

impl<M> Default for Queue<M> {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
            turns: std::sync::Arc::new(Semaphore::new(TURNS)),
        }
    }
}

/// Queues `member` (which carries the sender of `rx`) and waits for its answer; whoever holds
/// a turn runs the waiting members as groups with `run`, which answers each. `gone` is the
/// answer when a group ended without answering (its task panicked).
async fn combine<M, A, F, Fut>(
    cp: &ControlPlane,
    member: M,
    mut rx: oneshot::Receiver<A>,
    gone: impl Fn() -> A,
    run: F,
) -> A
where
    M: Send + 'static,
    F: Fn(ControlPlane, Vec<M>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let queue = cp.shared::<Queue<M>>();
    queue
        .waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(member);
    // Let the other callers ready to run now queue theirs first, so that they join this
    // group rather than each waiting for the next (one scheduler hop).
    tokio::task::yield_now().await;
    let Ok(mut turn) = queue.turns.clone().acquire_owned().await else {
        return gone();
    };
    // With the turn: run groups until ours has been answered (a group takes at most
    // MAX_GROUP, so ours may be in the next one), or until none waits (ours is in a group
    // the other turn is running).
    loop {
        if let Ok(answer) = rx.try_recv() {
            return answer;
        }
        let group: Vec<M> = {
            let mut waiting = queue.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let n = waiting.len().min(MAX_GROUP);
            waiting.drain(..n).collect()
        };
        if group.is_empty() {
            drop(turn);
            return rx.await.unwrap_or_else(|_| gone());
        }
        // In a task of its own, holding the turn: a caller that goes away leaves it running.
        let work = run(cp.clone(), group);
        match tokio::spawn(async move {
            work.await;
            turn
        })
        .await
        {
            Ok(t) => turn = t,
            Err(_) => return rx.await.unwrap_or_else(|_| gone()),
        }
    }
}

/// Queues a checked launch for the next group and waits for its answer.
pub(super) async fn join(
    cp: &ControlPlane,
    user: UserId,
    tenant: TenantId,
    project: ProjectId,
    req: &LaunchRequest,
    valid: ValidLaunch,
    request_id: Option<&str>,
) -> Answer {
    let (tx, rx) = oneshot::channel();
    let member = Member {
        user,
        tenant,
        project,
        req: req.clone(),
        valid,
        request_id: request_id.map(str::to_owned),
        token: audit::current_token(),
        trace: cp_base::trace_context::current().map(String::from),
        answer: tx,
    };
    combine(
        cp,
        member,
        rx,
        || Answer::Alone,
        |cp, group| async move { run(&cp, group).await },
    )
    .await
}

/// Runs one group and answers each member (every one `Alone` when the transaction failed).
#[tracing::instrument(skip_all, fields(launches = group.len()))]
async fn run(cp: &ControlPlane, group: Vec<Member>) {
    let answers = match decide_and_write(cp, &group).await {
        Ok((answers, wake)) => {
            for node in wake {
                cp.wakeups().task_queued(node);
            }
            answers
        }
        Err(e) => {
            tracing::warn!(error.cause = %e, launches = group.len(), "group placement failed; each launch is decided alone");
            group.iter().map(|_| Answer::Alone).collect()
        }
    };
    let placed = answers
        .iter()
        .filter(|a| matches!(a, Answer::Placed(_)))
        .count();
    if placed > 0 {
        cp.metrics().launch_group(placed);
    }
    for (m, a) in group.into_iter().zip(answers) {
        let _ = m.answer.send(a);
    }
}

/// What the group read once per project.
struct ProjectFacts {
    policies: Vec<Resolved>,
}

/// One launch the group will place: its member, SKU, listing version and checked values.
struct Decided<'a> {
    at: usize,
    m: &'a Member,
    sku: std::sync::Arc<Sku>,
    software: std::sync::Arc<cp_marketplace::LaunchVersion>,
    regions: Vec<String>,
    expires_at: Option<OffsetDateTime>,
    id: AllocationId,
}

/// The group's transaction. Returns each member's answer, and the nodes to wake.
async fn decide_and_write(
    cp: &ControlPlane,
    group: &[Member],
) -> Result<(Vec<Answer>, Vec<NodeId>)> {
    let now = OffsetDateTime::now_utc();
    let mut answers: Vec<Answer> = group.iter().map(|_| Answer::Alone).collect();
    let mut tx = cp.pool().begin().await?;
    let candidates = first_of_each_key_and_name(group);
    let candidates = lock_keys_and_skip_taken(&mut tx, group, candidates).await?;
    let decided = decide_each(&mut tx, group, candidates, now).await?;
    let placed = place_by_sku(cp, &mut tx, &decided, &mut answers, now).await?;
    if placed.is_empty() {
        tx.rollback().await?;
        return Ok((answers, Vec::new()));
    }
    let wake = queue_and_audit(cp, &mut tx, &decided, &placed).await?;
    tx.commit().await?;
    for (k, _) in &placed {
        answers[decided[*k].at] = Answer::Placed(decided[*k].id);
    }
    Ok((answers, wake))
}

/// The members the group may decide: launches with the same key (or name) as an earlier one
/// in the group go alone, so each key and name is decided once here; so do launches that
/// publish ports.
fn first_of_each_key_and_name(group: &[Member]) -> Vec<usize> {
    let mut seen_keys = std::collections::HashSet::new();
    let mut seen_names = std::collections::HashSet::new();
    let mut candidates: Vec<usize> = Vec::new();
    for (i, m) in group.iter().enumerate() {
        let key_new = seen_keys.insert((m.project, m.valid.idempotency_key.clone()));
        let name_new = seen_names.insert((m.project, m.valid.name.clone()));
        if key_new && name_new && m.valid.published_ports.is_empty() {
            candidates.push(i);
        }
    }
    candidates
}

/// Takes each candidate's idempotency-key lock (the one `launch_once` takes, all in one
/// order), then leaves out a key seen before and a name a live allocation has: the one-launch
/// path answers both.
async fn lock_keys_and_skip_taken(
    conn: &mut PgConnection,
    group: &[Member],
    candidates: Vec<usize>,
) -> Result<Vec<usize>> {
    let keys: Vec<String> = candidates
        .iter()
        .map(|&i| format!("{}:{}", group[i].project, group[i].valid.idempotency_key))
        .collect();
    sqlx::query!(
        r#"SELECT count(*) AS "n!" FROM (
               SELECT pg_advisory_xact_lock(h) FROM (
                   SELECT DISTINCT hashtextextended(k, 7) AS h FROM unnest($1::text[]) AS k
                   ORDER BY h) ordered) locked"#,
        &keys
    )
    .fetch_one(&mut *conn)
    .await?;
    let projects: Vec<uuid::Uuid> = candidates.iter().map(|&i| group[i].project.0).collect();
    let names: Vec<String> = candidates
        .iter()
        .map(|&i| group[i].valid.name.clone())
        .collect();
    let key_only: Vec<String> = candidates
        .iter()
        .map(|&i| group[i].valid.idempotency_key.clone())
        .collect();
    let taken = sqlx::query_scalar!(
        r#"SELECT k.n AS "n!" FROM unnest($1::uuid[], $2::text[], $3::text[])
                WITH ORDINALITY AS k(project, name, key, n)
           WHERE EXISTS (SELECT 1 FROM allocations a
                         WHERE a.project_id = k.project AND a.idempotency_key = k.key)
              OR EXISTS (SELECT 1 FROM allocations a
                         WHERE a.project_id = k.project AND a.name = k.name
                           AND a.state <> 'released')"#,
        &projects,
        &names,
        &key_only
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(candidates
        .into_iter()
        .enumerate()
        .filter(|(k, _)| !taken.contains(&(*k as i64 + 1)))
        .map(|(_, i)| i)
        .collect())
}

/// Reads once per SKU, listing version and project, and decides each candidate as the
/// one-launch path would; anything refused, or needing a lock of its own, goes alone.
async fn decide_each<'g>(
    conn: &mut PgConnection,
    group: &'g [Member],
    candidates: Vec<usize>,
    now: OffsetDateTime,
) -> Result<Vec<Decided<'g>>> {
    let mut skus: HashMap<String, Option<std::sync::Arc<Sku>>> = HashMap::new();
    let mut versions: HashMap<
        (String, String),
        Option<std::sync::Arc<cp_marketplace::LaunchVersion>>,
    > = HashMap::new();
    let mut facts: HashMap<ProjectId, ProjectFacts> = HashMap::new();
    let mut decided: Vec<Decided> = Vec::new();
    for i in candidates {
        let m = &group[i];
        if !skus.contains_key(&m.req.sku) {
            let sku = sku_by_name(&mut *conn, &m.req.sku)
                .await
                .ok()
                .filter(|s| s.state == "active")
                .map(std::sync::Arc::new);
            skus.insert(m.req.sku.clone(), sku);
        }
        let Some(sku) = skus[&m.req.sku].clone() else {
            continue;
        };
        let vkey = (m.req.listing.clone(), m.req.version.clone());
        if !versions.contains_key(&vkey) {
            let v = cp_marketplace::launch_version(&mut *conn, &vkey.0, &vkey.1)
                .await
                .ok()
                .map(std::sync::Arc::new);
            versions.insert(vkey.clone(), v);
        }
        let Some(software) = versions[&vkey].clone() else {
            continue;
        };
        if software.compatibility.why_not(&sku).is_some()
            || (m.valid.user_data.is_some() && !software.accepts_user_data)
        {
            continue;
        }
        let Ok(regions) = decide::regions(&sku, &m.valid.region) else {
            continue;
        };
        if let std::collections::hash_map::Entry::Vacant(e) = facts.entry(m.project) {
            let policies = resolve_policies_on(&mut *conn, Some(m.tenant), Some(m.project)).await?;
            e.insert(ProjectFacts { policies });
        }
        let policies = &facts[&m.project].policies;
        let Ok(allowed) = decide::allowed(policies, &sku, &software.slug, &m.valid.region, regions)
        else {
            continue;
        };
        if allowed.lock().is_some() {
            continue;
        }
        let Ok(hours) = decide::lifetime(policies, m.valid.lifetime_hours) else {
            continue;
        };
        decided.push(Decided {
            at: i,
            m,
            regions: allowed.regions,
            sku,
            software,
            expires_at: hours.map(|h| now + time::Duration::hours(i64::from(h))),
            id: AllocationId::new_random(),
        });
    }
    Ok(decided)
}

/// Placement, one SKU and region set at a time; each writes its allocations and claims
/// before the next reads the free blocks, in a savepoint, so a refusal by the database sends
/// only that part alone. A SKU with no room at all is answered here.
async fn place_by_sku(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    decided: &[Decided<'_>],
    answers: &mut [Answer],
    now: OffsetDateTime,
) -> Result<Vec<(usize, Placement)>> {
    let mut by_sku: Vec<(uuid::Uuid, Vec<String>, Vec<usize>)> = Vec::new();
    for (k, d) in decided.iter().enumerate() {
        match by_sku
            .iter_mut()
            .find(|(s, r, _)| *s == d.sku.id.0 && *r == d.regions)
        {
            Some((_, _, members)) => members.push(k),
            None => by_sku.push((d.sku.id.0, d.regions.clone(), vec![k])),
        }
    }
    let mut placed: Vec<(usize, Placement)> = Vec::new();
    for (_, regions, members) in by_sku {
        let sku = decided[members[0]].sku.clone();
        let mut sp = conn.begin().await?;
        let places = match placement::place_group(
            &mut sp,
            &sku,
            &regions,
            members.len(),
            cp.refusal_reasons(),
        )
        .await
        {
            Err(cp_base::error::Error::SkuUnavailable(why)) => {
                // Decided: refusals need no commit, and the rest of the group goes on.
                for k in &members {
                    answers[decided[*k].at] = Answer::Unavailable(why.clone());
                }
                sp.rollback().await?;
                continue;
            }
            other => other?,
        };
        let these: Vec<(usize, Placement)> = members.iter().copied().zip(places).collect();
        if these.is_empty() {
            sp.rollback().await?;
            continue;
        }
        match reserve(&mut sp, cp.secrets(), decided, &these, now).await {
            Ok(()) => {
                sp.commit().await?;
                placed.extend(these);
            }
            Err(cp_base::error::Error::Database(sqlx::Error::Database(e)))
                if matches!(e.code().as_deref(), Some("23505" | "23P01" | "23514")) =>
            {
                tracing::debug!(db.error = %e, "group reservation refused; those launches go alone");
                sp.rollback().await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(placed)
}

/// The placed launches' provision tasks and audit records; returns the nodes to wake.
async fn queue_and_audit(
    cp: &ControlPlane,
    conn: &mut PgConnection,
    decided: &[Decided<'_>],
    placed: &[(usize, Placement)],
) -> Result<Vec<NodeId>> {
    let provisions: Vec<(AllocationId, Option<String>)> = placed
        .iter()
        .map(|(k, _)| (decided[*k].id, decided[*k].m.trace.clone()))
        .collect();
    let wake =
        lifecycle::queue_provisions(&mut *conn, &provisions, lifecycle::Written::AsProvisioning)
            .await?;
    let mut resources = Vec::with_capacity(placed.len());
    for (k, p) in placed {
        let d = &decided[*k];
        resources.push(
            cp.naming()
                .allocation(&p.region, d.m.tenant, d.m.project, d.id)?,
        );
    }
    let entries: Vec<(AuditEntry, Option<ApiTokenId>)> = placed
        .iter()
        .zip(&resources)
        .map(|((k, p), resource)| {
            let d = &decided[*k];
            let fee = d
                .software
                .compatibility
                .fee
                .as_ref()
                .map_or(0, |f| f.amount_minor);
            (
                AuditEntry {
                    actor: Actor::User(d.m.user),
                    action: "allocation.launch",
                    resource,
                    before: None,
                    after: Some(json!({
                        "name": d.m.valid.name, "sku": d.sku.name, "node": p.hostname,
                        "software": d.software.label, "published_ports": d.m.valid.published_ports,
                        "tags": d.m.valid.tags,
                        "user_data_bytes": d.m.valid.user_data.as_ref().map(String::len),
                        "slots": p.slot_indexes, "price_per_hour": d.sku.price.to_string(),
                        "fee_per_hour": fee, "why": p.why,
                    })),
                    request_id: d.m.request_id.as_deref(),
                },
                d.m.token,
            )
        })
        .collect();
    audit::record_many(&mut *conn, &entries).await?;
    Ok(wake)
}

/// Writes the allocations and claims of one SKU's placements, a statement each.
async fn reserve(
    conn: &mut PgConnection,
    keys: &cp_base::secrets::Keyring,
    decided: &[Decided<'_>],
    placed: &[(usize, Placement)],
    now: OffsetDateTime,
) -> Result<()> {
    let n = placed.len();
    let mut ids = Vec::with_capacity(n);
    let mut tenants = Vec::with_capacity(n);
    let mut projects = Vec::with_capacity(n);
    let mut names = Vec::with_capacity(n);
    let mut nodes = Vec::with_capacity(n);
    let mut regions = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut keys_ssh = Vec::with_capacity(n);
    let mut idempotency = Vec::with_capacity(n);
    let mut fingerprints = Vec::with_capacity(n);
    let mut users = Vec::with_capacity(n);
    let mut placements = Vec::with_capacity(n);
    let mut expires = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut user_data = Vec::with_capacity(n);
    let (mut claim_allocations, mut claim_nodes, mut claim_slots) = (vec![], vec![], vec![]);
    let sku = &decided[placed[0].0].sku;
    for (k, p) in placed {
        let d = &decided[*k];
        ids.push(d.id.0);
        tenants.push(d.m.tenant.0);
        projects.push(d.m.project.0);
        names.push(d.m.valid.name.clone());
        nodes.push(p.node_id.0);
        regions.push(p.region.clone());
        versions.push(d.software.id.0);
        keys_ssh.push(d.m.valid.ssh_public_key.clone());
        idempotency.push(d.m.valid.idempotency_key.clone());
        fingerprints.push(d.m.valid.fingerprint.clone());
        users.push(d.m.user.0);
        placements
            .push(json!({ "why": p.why, "hostname": p.hostname, "slot_indexes": p.slot_indexes }));
        expires.push(d.expires_at);
        tags.push(serde_json::to_value(&d.m.valid.tags).unwrap_or_default());
        user_data.push(
            d.m.valid
                .user_data
                .as_deref()
                .map(|u| lifecycle::seal_user_data(keys, d.id, u)),
        );
        match sku.shape {
            Shape::GpuSlice => {
                for s in &p.slots {
                    claim_allocations.push(d.id.0);
                    claim_nodes.push(p.node_id.0);
                    claim_slots.push(Some(s.0));
                }
            }
            Shape::Baremetal => {
                claim_allocations.push(d.id.0);
                claim_nodes.push(p.node_id.0);
                claim_slots.push(None);
            }
        }
    }
    sqlx::query!(
        r#"INSERT INTO allocations
               (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                listing_version_id, ssh_public_key, price_per_hour_minor, currency, idempotency_key,
                request_fingerprint, requested_by, placement, state, observed_state,
                requested_at, expires_at, tags, user_data_sealed)
           SELECT id, tenant, project, name, $16, $17, $18, region, node, version, ssh, $19, $20,
                  key, fingerprint, requested_by, placement, 'provisioning', 'provisioning', $21,
                  expires, tags, user_data
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::uuid[],
                       $7::uuid[], $8::text[], $9::text[], $10::text[], $11::uuid[], $12::jsonb[],
                       $13::timestamptz[], $14::jsonb[], $15::text[])
                AS a(id, tenant, project, name, region, node, version, ssh, key, fingerprint,
                     requested_by, placement, expires, tags, user_data)"#,
        &ids,
        &tenants,
        &projects,
        &names,
        &regions,
        &nodes,
        &versions,
        &keys_ssh,
        &idempotency,
        &fingerprints,
        &users,
        &placements,
        &expires as &[Option<OffsetDateTime>],
        &tags,
        &user_data as &[Option<String>],
        sku.id.0,
        sku.shape.as_str(),
        sku.gpu_count,
        sku.price.amount_minor,
        sku.price.currency.as_str(),
        now,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        r#"INSERT INTO resource_claims (id, node_id, slot_id, kind, allocation_id)
           SELECT gen_random_uuid(), node, slot, $4, allocation
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) AS c(allocation, node, slot)"#,
        &claim_allocations,
        &claim_nodes,
        &claim_slots as &[Option<uuid::Uuid>],
        sku.shape.as_str(),
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A release waiting for its group.
pub(super) struct Release {
    user: UserId,
    tenant: TenantId,
    project: ProjectId,
    id: AllocationId,
    request_id: Option<String>,
    token: Option<ApiTokenId>,
    trace: Option<String>,
    answer: oneshot::Sender<Option<Result<()>>>,
}

/// Releases an allocation of the caller's project together with the other releases waiting
/// now, as [`super::AllocationsApi::release_allocation`] does one: the allocations locked (in
/// id order, so groups never deadlock), marked for release with a provision the agent hasn't
/// started cancelled, their release tasks queued, audited, in one transaction. `None`: the
/// group failed; release it alone.
pub(super) async fn release(
    cp: &ControlPlane,
    user: UserId,
    tenant: TenantId,
    project: ProjectId,
    id: AllocationId,
    request_id: Option<&str>,
) -> Option<Result<()>> {
    let (tx, rx) = oneshot::channel();
    let member = Release {
        user,
        tenant,
        project,
        id,
        request_id: request_id.map(str::to_owned),
        token: audit::current_token(),
        trace: cp_base::trace_context::current().map(String::from),
        answer: tx,
    };
    combine(
        cp,
        member,
        rx,
        || None,
        |cp, group| async move { release_group(&cp, group).await },
    )
    .await
}

#[tracing::instrument(skip_all, fields(releases = group.len()))]
async fn release_group(cp: &ControlPlane, group: Vec<Release>) {
    match release_together(cp, &group).await {
        Ok((answers, wake, unstarted)) => {
            // Before the agents are woken, so that none starts a release that needs no wipe.
            lifecycle::end_unstarted_or_log(cp.pool(), &unstarted).await;
            for node in wake {
                cp.wakeups().task_queued(node);
            }
            for (m, a) in group.into_iter().zip(answers) {
                let _ = m.answer.send(Some(a));
            }
        }
        Err(e) => {
            tracing::warn!(error.cause = %e, releases = group.len(), "group release failed; each is released alone");
            for m in group {
                let _ = m.answer.send(None);
            }
        }
    }
}

/// The group's transaction. Returns each member's answer, the nodes to wake, and the
/// allocations whose provision it cancelled unclaimed (for [`lifecycle::end_unstarted`]).
async fn release_together(
    cp: &ControlPlane,
    group: &[Release],
) -> Result<(Vec<Result<()>>, Vec<NodeId>, Vec<AllocationId>)> {
    let ids: Vec<uuid::Uuid> = group.iter().map(|m| m.id.0).collect();
    let projects: Vec<uuid::Uuid> = group.iter().map(|m| m.project.0).collect();
    let mut tx = cp.pool().begin().await?;
    let found = sqlx::query!(
        r#"SELECT a.id AS "id: AllocationId", a.project_id AS "project_id: ProjectId", a.state,
                  a.region, a.cluster_index, c.name AS "cluster?"
           FROM allocations a LEFT JOIN clusters c ON c.id = a.cluster_id
           WHERE a.id = ANY($1)
             AND EXISTS (SELECT 1 FROM unnest($1::uuid[], $2::uuid[]) AS k(id, project)
                         WHERE k.id = a.id AND k.project = a.project_id)
           ORDER BY a.id
           FOR NO KEY UPDATE OF a"#,
        &ids,
        &projects
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut answers = Vec::with_capacity(group.len());
    let mut releasing: Vec<uuid::Uuid> = Vec::new();
    let mut entries_for: Vec<(usize, String, String)> = Vec::new();
    for (i, m) in group.iter().enumerate() {
        match found
            .iter()
            .find(|r| r.id == m.id && r.project_id == m.project)
        {
            None => answers.push(Err(cp_base::error::Error::NotFound { what: "allocation" })),
            Some(r) => {
                let done = matches!(r.state.as_str(), "releasing" | "cleaning" | "released");
                if let (false, Some(cluster)) = (done, &r.cluster) {
                    answers.push(Err(super::clusters::member_refusal(
                        cluster,
                        r.cluster_index,
                    )));
                    continue;
                }
                answers.push(Ok(()));
                if !done && !releasing.contains(&m.id.0) {
                    releasing.push(m.id.0);
                    entries_for.push((i, r.state.clone(), r.region.clone()));
                }
            }
        }
    }
    if releasing.is_empty() {
        tx.rollback().await?;
        return Ok((answers, Vec::new(), Vec::new()));
    }
    sqlx::query!(
        "UPDATE allocations SET desired_state = 'released', state = 'releasing'
         WHERE id = ANY($1) AND state IN ('placed', 'provisioning', 'running')",
        &releasing
    )
    .execute(&mut *tx)
    .await?;
    // Cancelled before any agent claimed them (`claimed_at` stays empty): these may end
    // without a wipe once this commits.
    let unstarted: Vec<AllocationId> = sqlx::query_scalar!(
        r#"UPDATE agent_tasks SET state = 'failed', finished_at = now(),
                  error = 'cancelled: the allocation was released before the agent started it'
           WHERE allocation_id = ANY($1) AND state = 'queued'
             AND kind IN ('slice.vm_provision', 'baremetal.provision')
           RETURNING allocation_id AS "id!: AllocationId""#,
        &releasing
    )
    .fetch_all(&mut *tx)
    .await?;
    let traces: Vec<(AllocationId, Option<String>)> = entries_for
        .iter()
        .map(|(i, ..)| (group[*i].id, group[*i].trace.clone()))
        .collect();
    let wake = lifecycle::queue_releases(&mut tx, &traces).await?;
    let mut resources = Vec::with_capacity(entries_for.len());
    for (i, _, region) in &entries_for {
        let m = &group[*i];
        resources.push(cp.naming().allocation(region, m.tenant, m.project, m.id)?);
    }
    let entries: Vec<(AuditEntry, Option<ApiTokenId>)> = entries_for
        .iter()
        .zip(&resources)
        .map(|((i, state, _), resource)| {
            let m = &group[*i];
            (
                AuditEntry {
                    actor: Actor::User(m.user),
                    action: "allocation.release",
                    resource,
                    before: Some(json!({ "state": state })),
                    after: Some(json!({ "state": "releasing" })),
                    request_id: m.request_id.as_deref(),
                },
                m.token,
            )
        })
        .collect();
    audit::record_many(&mut tx, &entries).await?;
    tx.commit().await?;
    Ok((answers, wake, unstarted))
}
