//! The control plane's handle: a pool, this deployment's naming, and the clients and limits
//! every area shares. Each area adds its methods through its own trait (`FleetApi`,
//! `TenancyApi`, …; see `control_plane::prelude`).

use sqlx::PgPool;

use crate::ids::NodeId;
use crate::naming::Naming;
use crate::{MIGRATOR, Result, dns, egress, health, ratelimit, reasons, secrets};

/// How long a launch keeps trying while the nodes that could take it are being reserved by
/// other launches, by default.
pub const CONTENTION_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// The handle the server keeps and passes to every request: a pool and this deployment's
/// naming. Cheap to clone: one reference count.
#[derive(Clone, Debug)]
pub struct ControlPlane {
    inner: std::sync::Arc<Inner>,
}

/// What a handle holds. The `with_*` builders change a handle's own copy (clone-on-write), so
/// a handle configured from a clone keeps sharing the clone's queues, limits and wakeups.
#[derive(Clone, Debug)]
struct Inner {
    pool: crate::pool::Db,
    naming: Naming,
    /// For identity providers: addresses a tenant chose, so public https only, no
    /// redirects, bounded answers (see [`egress`]).
    http: egress::Egress,
    wake: std::sync::Arc<Wakeups>,
    /// Stripe, when configured (the server always configures it; some tests don't need it).
    stripe: Option<std::sync::Arc<crate::stripe_link::StripeLink>>,
    /// Break-glass sign-in attempts, per account and per client address.
    sign_in_limits: std::sync::Arc<ratelimit::SignInLimits>,
    /// Seals and opens stored secrets (identity providers' client secrets).
    secrets: std::sync::Arc<secrets::Keyring>,
    /// Where email-domain proofs are looked up.
    dns: dns::Resolver,
    /// Email-domain checks per tenant (each is a DNS lookup): 10, then one every 6 seconds.
    domain_checks: std::sync::Arc<ratelimit::Limiter>,
    /// Public API calls per organization, across all its tokens: 100, then one every 100 ms.
    api_calls: std::sync::Arc<ratelimit::Limiter>,
    /// API tokens made per person: 10, then one every 6 minutes.
    token_creations: std::sync::Arc<ratelimit::Limiter>,
    /// Live API tokens one organization may hold.
    token_cap: u32,
    /// Refused API tokens per client address: 20, then one every 3 seconds.
    api_refusals: std::sync::Arc<ratelimit::Limiter>,
    /// Unauthenticated API calls (the offers) per client address: 60, then one a second.
    public_api_calls: std::sync::Arc<ratelimit::Limiter>,
    /// How long a launch waits for candidate nodes other launches are reserving.
    contention_deadline: std::time::Duration,
    /// The last explanation of a refusal per SKU and regions (see [`reasons`]).
    reasons: std::sync::Arc<reasons::RefusalReasons>,
    /// Password hashes (argon2, 19 MiB each) computed at once; see [`ControlPlane::hashing`].
    hashing: std::sync::Arc<tokio::sync::Semaphore>,
    /// A hash of a random password, verified against when an email is unknown.
    dummy_hash: std::sync::Arc<tokio::sync::OnceCell<String>>,
    /// What the control plane counts (launches, dispatch lag, tasks, Stripe), for `/metrics`.
    metrics: crate::metrics::Metrics,
    /// State a domain crate keeps per handle, shared by its clones (cp-allocations keeps the
    /// launches waiting to be placed together here); see [`ControlPlane::shared`].
    shared: std::sync::Arc<std::sync::Mutex<Vec<std::sync::Arc<dyn std::any::Any + Send + Sync>>>>,
}

/// Live API tokens one organization may hold unless the deployment sets another number: each is
/// a secret to leak, and the API's budgets are per organization, not per token.
pub const TOKEN_CAP: u32 = 50;

/// Argon2 takes about 19 MiB and tens of milliseconds a hash: at most this many at once per
/// handle, so a burst of sign-ins (which the rate limits slow, but don't stop across many
/// addresses) can't take all memory and every blocking thread. Others wait their turn.
pub const CONCURRENT_HASHES: usize = 4;

/// In-process nudges, so that a queued task reaches its agent's waiting claim without a poll.
///
/// A task queued by this process nudges its node's claimers at once. A task queued by another
/// replica is found by one watcher per process ([`Wakeups::watched`]): every
/// [`WATCH_INTERVAL`] it reads which nodes have queued tasks, once for the whole process, and
/// nudges the claimers waiting for those. A waiting claim looks in the database only when
/// nudged (and once when it starts), so an idle fleet of agents costs one small query per
/// interval, not one per agent.
#[derive(Debug, Default)]
pub struct Wakeups {
    /// Per node: its claimers' nudge, and how many claimers are waiting now.
    tasks: std::sync::Mutex<
        std::collections::HashMap<NodeId, (std::sync::Arc<tokio::sync::Notify>, usize)>,
    >,
    /// Whether this process's watcher runs.
    watching: std::sync::atomic::AtomicBool,
}

/// How often the watcher looks for tasks other replicas queued: their longest extra wait.
pub const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// A claimer waiting for its node's tasks; it stops counting as waiting when dropped.
#[derive(Debug)]
pub struct Waiting<'a> {
    wakeups: &'a Wakeups,
    node: NodeId,
    notify: std::sync::Arc<tokio::sync::Notify>,
}

impl Waiting<'_> {
    /// What the claimer waits on.
    pub fn notify(&self) -> &tokio::sync::Notify {
        &self.notify
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut tasks = self.wakeups.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = tasks.get_mut(&self.node) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                tasks.remove(&self.node);
            }
        }
    }
}

impl Wakeups {
    /// Registers a claimer for `node` until the returned guard is dropped.
    pub fn wait_for(&self, node: NodeId) -> Waiting<'_> {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let entry = tasks.entry(node).or_default();
        entry.1 += 1;
        Waiting {
            wakeups: self,
            node,
            notify: entry.0.clone(),
        }
    }

    /// Nudges `node`'s waiting claimers, if any.
    pub fn task_queued(&self, node: NodeId) {
        let waiting = self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .map(|e| e.0.clone());
        if let Some(n) = waiting {
            n.notify_waiters();
        }
    }

    /// The nodes with a claimer waiting now.
    pub fn waiting_nodes(&self) -> std::collections::HashSet<NodeId> {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect()
    }

    /// Whether the caller is the first to ask, and so starts this process's watcher.
    pub fn should_start_watcher(&self) -> bool {
        !self
            .watching
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

impl ControlPlane {
    pub fn new(pool: PgPool, naming: Naming) -> Self {
        let reasons =
            reasons::RefusalReasons::new(reasons::REASONS_TTL).refreshing_from(pool.clone());
        let inner = Inner {
            pool: crate::pool::Db::new(pool),
            naming,
            http: egress::Egress::default(),
            secrets: std::sync::Arc::new(secrets::Keyring::ephemeral()),
            wake: Default::default(),
            stripe: None,
            sign_in_limits: Default::default(),
            dns: dns::Resolver::default(),
            domain_checks: std::sync::Arc::new(ratelimit::Limiter::new(
                10,
                std::time::Duration::from_secs(60),
            )),
            api_calls: std::sync::Arc::new(ratelimit::Limiter::new(
                100,
                std::time::Duration::from_secs(10),
            )),
            token_creations: std::sync::Arc::new(ratelimit::Limiter::new(
                10,
                std::time::Duration::from_secs(3600),
            )),
            token_cap: TOKEN_CAP,
            api_refusals: std::sync::Arc::new(ratelimit::Limiter::new(
                20,
                std::time::Duration::from_secs(60),
            )),
            public_api_calls: std::sync::Arc::new(ratelimit::Limiter::new(
                60,
                std::time::Duration::from_secs(60),
            )),
            contention_deadline: CONTENTION_DEADLINE,
            reasons: std::sync::Arc::new(reasons),
            hashing: std::sync::Arc::new(tokio::sync::Semaphore::new(CONCURRENT_HASHES)),
            dummy_hash: Default::default(),
            metrics: Default::default(),
            shared: Default::default(),
        };
        Self {
            inner: std::sync::Arc::new(inner),
        }
    }

    /// This handle's own copy of what it holds, to configure.
    fn configure(&mut self) -> &mut Inner {
        std::sync::Arc::make_mut(&mut self.inner)
    }

    /// The handle's one `T`, made with `T::default()` on first use and shared by every clone
    /// of this handle (not by other handles on the same pool: each is its own server). For
    /// state a crate above this one keeps per server process without this crate knowing its
    /// type.
    pub fn shared<T: Default + Send + Sync + 'static>(&self) -> std::sync::Arc<T> {
        let mut all = self.inner.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = all.iter().find_map(|a| a.clone().downcast::<T>().ok()) {
            return found;
        }
        let made = std::sync::Arc::new(T::default());
        all.push(made.clone());
        made
    }

    /// Connects billing to Stripe (or the local Stripe test server).
    pub fn with_stripe(mut self, settings: &crate::stripe_link::StripeSettings) -> Result<Self> {
        self.configure().stripe = Some(std::sync::Arc::new(crate::stripe_link::StripeLink::new(
            settings,
        )?));
        Ok(self)
    }

    /// How long a launch keeps trying while the nodes that could take it are being reserved
    /// by other launches ([`CONTENTION_DEADLINE`] unless set).
    pub fn with_contention_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.configure().contention_deadline = deadline;
        self
    }

    /// Reuses the explanation of a refusal for `ttl` ([`reasons::REASONS_TTL`] unless set;
    /// zero recomputes it every time).
    pub fn with_refusal_reasons_ttl(mut self, ttl: std::time::Duration) -> Self {
        let reasons =
            reasons::RefusalReasons::new(ttl).refreshing_from(self.inner.pool.sqlx().clone());
        self.configure().reasons = std::sync::Arc::new(reasons);
        self
    }

    /// Lets each organization hold `cap` live API tokens ([`TOKEN_CAP`] unless set).
    pub fn with_token_cap(mut self, cap: u32) -> Self {
        self.configure().token_cap = cap;
        self
    }

    /// Live API tokens one organization may hold.
    pub fn token_cap(&self) -> u32 {
        self.inner.token_cap
    }

    /// API tokens made, per person.
    pub fn token_creations(&self) -> &ratelimit::Limiter {
        &self.inner.token_creations
    }

    /// Looks up email-domain proofs at this resolver instead of the system's.
    pub fn with_dns_resolver(mut self, resolver: dns::Resolver) -> Self {
        self.configure().dns = resolver;
        self
    }

    /// Seals stored secrets with `keys` (the server's `PORTAL_SECRET_KEYS`). Without it, a
    /// key that lives as long as this process: fine for tests, useless across a restart.
    pub fn with_secret_keys(mut self, keys: secrets::Keyring) -> Self {
        self.configure().secrets = std::sync::Arc::new(keys);
        self
    }

    pub fn secrets(&self) -> &secrets::Keyring {
        &self.inner.secrets
    }

    /// Calls identity providers through `egress` (the dev command and tests allow their
    /// loopback provider with [`egress::Egress::allowing_loopback_http`]).
    pub fn with_egress(mut self, egress: egress::Egress) -> Self {
        self.configure().http = egress;
        self
    }

    pub fn stripe_configured(&self) -> bool {
        self.inner.stripe.is_some()
    }

    pub fn stripe_link(&self) -> Option<&crate::stripe_link::StripeLink> {
        self.inner.stripe.as_deref()
    }

    /// The dispatcher and claimers wait on these; see [`Wakeups`].
    pub fn wakeups(&self) -> &Wakeups {
        &self.inner.wake
    }

    /// The handle's wakeups without keeping them alive (the watcher stops when they go).
    pub fn wakeups_weak(&self) -> std::sync::Weak<Wakeups> {
        std::sync::Arc::downgrade(&self.inner.wake)
    }

    pub fn http(&self) -> &egress::Egress {
        &self.inner.http
    }

    /// The counters `/metrics` serves.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.inner.metrics
    }

    /// Recent explanations of refusals, shared by placement and the catalog.
    pub fn refusal_reasons(&self) -> &reasons::RefusalReasons {
        &self.inner.reasons
    }

    /// How long a launch waits for candidate nodes other launches are reserving.
    pub fn contention_deadline(&self) -> std::time::Duration {
        self.inner.contention_deadline
    }

    /// Break-glass sign-in attempts, per account and per client address.
    pub fn sign_in_limits(&self) -> &ratelimit::SignInLimits {
        &self.inner.sign_in_limits
    }

    /// Where email-domain proofs are looked up.
    pub fn dns(&self) -> &dns::Resolver {
        &self.inner.dns
    }

    /// Email-domain checks per tenant.
    pub fn domain_checks(&self) -> &ratelimit::Limiter {
        &self.inner.domain_checks
    }

    /// Public API calls, per organization.
    pub fn api_calls(&self) -> &ratelimit::Limiter {
        &self.inner.api_calls
    }

    /// Refused API tokens, per client address.
    pub fn api_refusals(&self) -> &ratelimit::Limiter {
        &self.inner.api_refusals
    }

    /// Unauthenticated API calls, per client address.
    pub fn public_api_calls(&self) -> &ratelimit::Limiter {
        &self.inner.public_api_calls
    }

    /// Turns to compute a password hash ([`CONCURRENT_HASHES`] at once), per handle: each
    /// handle's limit is its own, also when a process holds several (as tests do).
    pub fn hashing(&self) -> &tokio::sync::Semaphore {
        &self.inner.hashing
    }

    /// Where the dummy password hash is made once and kept.
    pub fn dummy_hash_cell(&self) -> &tokio::sync::OnceCell<String> {
        &self.inner.dummy_hash
    }

    pub fn pool(&self) -> &crate::pool::Db {
        &self.inner.pool
    }

    pub fn naming(&self) -> &Naming {
        &self.inner.naming
    }

    /// Applies pending migrations (sqlx takes an advisory lock, so replicas may race safely).
    #[tracing::instrument(skip_all)]
    pub async fn migrate(&self) -> Result<()> {
        crate::migrations::accept_rewordings(self.inner.pool.sqlx()).await?;
        MIGRATOR.run(self.inner.pool.sqlx()).await?;
        Ok(())
    }

    pub async fn readiness(&self) -> health::Readiness {
        health::readiness(self.inner.pool.sqlx()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handle_configured_from_a_clone_changes_only_itself_and_shares_the_rest() {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap();
        let first = ControlPlane::new(pool, Naming::default());
        let second = first
            .clone()
            .with_contention_deadline(std::time::Duration::from_secs(7));
        assert_eq!(
            second.contention_deadline(),
            std::time::Duration::from_secs(7)
        );
        assert_eq!(first.contention_deadline(), CONTENTION_DEADLINE);
        assert!(std::sync::Arc::ptr_eq(
            &first.shared::<std::sync::atomic::AtomicU8>(),
            &second.shared::<std::sync::atomic::AtomicU8>()
        ));
        assert!(std::ptr::eq(first.wakeups(), second.wakeups()));
    }
}
