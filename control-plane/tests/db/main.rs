//! The control plane's database tests, in one binary so that they link once. Each test gets
//! its own database, copied from a template built once per run (`support::empty_db`: migrated;
//! `support::demo_db`: migrated and the demo seeded; `support::blank_db`: nothing applied).

mod support;

mod account;
mod allocations;
mod api_tokens;
mod auth;
mod billing;
mod clusters;
mod fabric;
mod fleet;
mod id_token;
mod marketplace;
mod policy;
mod pool;
mod private_networks;
mod projects;
mod reconcile;
mod sessions;
mod snapshots;
mod sso;
mod stop_start;
mod storage_billing;
mod tenancy;
mod volumes;
