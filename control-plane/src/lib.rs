//! The control plane: every rule of the product and its SQL. No axum, no leptos.
//!
//! The portal's server functions and the server's HTTP handlers call into this crate
//! in-process. Postgres is the single source of truth; invariants live in the schema
//! (`migrations/`), and the Rust here checks them again to give better errors.

pub mod account;
pub mod agent_api;
pub mod allocations;
pub mod audit_log;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod demo;
pub mod fleet;
pub mod ids;
pub mod marketplace;
pub mod placement;
pub mod policy;
pub mod skus;
pub mod sso;
pub mod tenancy;

/// Every area's trait, for `use control_plane::prelude::*`: the methods of [`ControlPlane`]
/// come from these, one per area, so call sites read `cp.launch(…)` as ever.
pub mod prelude {
    pub use crate::account::AccountApi;
    pub use crate::agent_api::AgentApi;
    pub use crate::allocations::AllocationsApi;
    pub use crate::allocations::lifecycle::LifecycleApi;
    pub use crate::audit_log::AuditLogApi;
    pub use crate::auth::AuthApi;
    pub use crate::billing::invoices::InvoicesApi;
    pub use crate::billing::reports::BillingReportsApi;
    pub use crate::billing::stripe::StripeApi;
    pub use crate::catalog::CatalogApi;
    pub use crate::fleet::FleetApi;
    pub use crate::marketplace::MarketplaceApi;
    pub use crate::placement::PlacementApi;
    pub use crate::policy::PolicyApi;
    pub use crate::skus::SkusApi;
    pub use crate::sso::SsoApi;
    pub use crate::tenancy::TenancyApi;

    // Crate-private: what areas use of each other without a proof.
    pub(crate) use crate::allocations::lifecycle::LifecycleInternal;
    pub(crate) use crate::audit_log::AuditLogInternal;
    pub(crate) use crate::skus::SkusInternal;
    pub(crate) use crate::sso::SsoInternal;
}

// The base every area stands on, under the paths it always had.
use cp_base::db;
pub use cp_base::{
    MIGRATOR, audit, dns, egress, error, health, naming, ratelimit, resource_name, secrets,
};

pub use error::{Error, Result};
pub use ids::{
    AgentTaskId, AllocationId, ListingId, ListingVersionId, NodeId, ProjectId, PublisherId, SkuId,
    SlotId, TenantId, UserId,
};
pub use naming::Naming;
pub use resource_name::{ResourceName, ResourceNameError};

use sqlx::PgPool;

/// The handle the server keeps and passes to every request: a pool and this deployment's
/// naming. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ControlPlane {
    pool: PgPool,
    naming: Naming,
    /// For identity providers: addresses a tenant chose, so public https only, no
    /// redirects, bounded answers (see [`egress`]).
    http: egress::Egress,
    wake: std::sync::Arc<Wakeups>,
    /// Stripe, when configured (the server always configures it; some tests don't need it).
    stripe: Option<std::sync::Arc<billing::stripe::StripeLink>>,
    /// Break-glass sign-in attempts, per account and per client address.
    sign_in_limits: std::sync::Arc<ratelimit::SignInLimits>,
    /// Seals and opens stored secrets (identity providers' client secrets).
    secrets: std::sync::Arc<secrets::Keyring>,
    /// Where email-domain proofs are looked up.
    dns: dns::Resolver,
    /// Email-domain checks per tenant (each is a DNS lookup): 10, then one every 6 seconds.
    domain_checks: std::sync::Arc<ratelimit::Limiter>,
    /// How long a launch waits for candidate nodes other launches are reserving.
    pub(crate) contention_deadline: std::time::Duration,
}

/// In-process nudges, so that a queued task reaches its agent's waiting claim without a poll.
/// Claimers also poll (another replica may have queued the task), so a lost nudge costs only
/// latency.
#[derive(Debug, Default)]
pub struct Wakeups {
    /// Per node: a task was queued for it (only that node's claimers wake).
    tasks: std::sync::Mutex<std::collections::HashMap<NodeId, std::sync::Arc<tokio::sync::Notify>>>,
}

impl Wakeups {
    /// What a claimer for `node` waits on.
    pub fn tasks_for(&self, node: NodeId) -> std::sync::Arc<tokio::sync::Notify> {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(node)
            .or_default()
            .clone()
    }

    pub fn task_queued(&self, node: NodeId) {
        let waiting = self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .cloned();
        if let Some(n) = waiting {
            n.notify_waiters();
        }
    }
}

impl ControlPlane {
    pub fn new(pool: PgPool, naming: Naming) -> Self {
        Self {
            pool,
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
            contention_deadline: placement::CONTENTION_DEADLINE,
        }
    }

    /// Connects billing to Stripe (or the local Stripe test server).
    pub fn with_stripe(mut self, settings: &billing::stripe::StripeSettings) -> Result<Self> {
        self.stripe = Some(std::sync::Arc::new(billing::stripe::StripeLink::new(
            settings,
        )?));
        Ok(self)
    }

    /// How long a launch keeps trying while the nodes that could take it are being reserved
    /// by other launches ([`placement::CONTENTION_DEADLINE`] unless set).
    pub fn with_contention_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.contention_deadline = deadline;
        self
    }

    /// Looks up email-domain proofs at this resolver instead of the system's.
    pub fn with_dns_resolver(mut self, resolver: dns::Resolver) -> Self {
        self.dns = resolver;
        self
    }

    /// Seals stored secrets with `keys` (the server's `PORTAL_SECRET_KEYS`). Without it, a
    /// key that lives as long as this process: fine for tests, useless across a restart.
    pub fn with_secret_keys(mut self, keys: secrets::Keyring) -> Self {
        self.secrets = std::sync::Arc::new(keys);
        self
    }

    pub(crate) fn secrets(&self) -> &secrets::Keyring {
        &self.secrets
    }

    /// Calls identity providers through `egress` (the dev command and tests allow their
    /// loopback provider with [`egress::Egress::allowing_loopback_http`]).
    pub fn with_egress(mut self, egress: egress::Egress) -> Self {
        self.http = egress;
        self
    }

    pub fn stripe_configured(&self) -> bool {
        self.stripe.is_some()
    }

    pub(crate) fn stripe_link(&self) -> Option<&billing::stripe::StripeLink> {
        self.stripe.as_deref()
    }

    /// The dispatcher and claimers wait on these; see [`Wakeups`].
    pub fn wakeups(&self) -> &Wakeups {
        &self.wake
    }

    pub(crate) fn http(&self) -> &egress::Egress {
        &self.http
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    /// Applies pending migrations (sqlx takes an advisory lock, so replicas may race safely).
    #[tracing::instrument(skip_all)]
    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub async fn readiness(&self) -> health::Readiness {
        health::readiness(&self.pool).await
    }

    pub async fn seed_demo(&self) -> Result<demo::SeedReport> {
        demo::seed(&self.pool, &self.naming).await
    }

    pub async fn seed_demo_identity_providers(&self, issuer: &str, secret: &str) -> Result<()> {
        demo::seed_identity_providers(&self.pool, &self.secrets, issuer, secret).await
    }
}
