//! The policy chain: global → tenant → project. The most specific setting wins, and each
//! resolution carries a trace of every level, so a decision can say which level made it.

use crate::tenancy::TenancyApi;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{ProjectId, TenantId, UserId};
use cp_base::resource_name::ResourceName;

pub use portal_types::{BUDGET_CURRENCIES, Currency, Level, Money, PolicyKey};

/// A policy setting, typed by its key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyValue {
    MaxGpusInUse(u32),
    AllowedSkus(Vec<String>),
    /// Marketplace listing slugs a project may launch.
    AllowedListings(Vec<String>),
    AllowedRegions(Vec<String>),
    MaxAllocationLifetimeHours(u32),
    MonthlyBudget(Money),
    /// TCP ports an allocation may publish besides SSH.
    MaxPublishedPorts(u32),
    /// GiB of volumes, all of them together, in the scope that set it.
    MaxVolumeGib(u32),
    /// Volumes, in the scope that set it.
    MaxVolumes(u32),
}

fn parse_list(field: &'static str, input: &str) -> Result<Vec<String>> {
    let items: Vec<String> = input
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err(Error::Invalid {
            field,
            reason: "name at least one (clear the setting to allow all)".into(),
        });
    }
    if let Some(bad) = items.iter().find(|s| {
        s.len() > 63
            || !s.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '_')
            })
    }) {
        return Err(Error::Invalid {
            field,
            reason: format!("{bad:?}: use letters, digits, '-', '.' and '_'"),
        });
    }
    let mut items = items;
    items.sort();
    items.dedup();
    Ok(items)
}

fn parse_whole(field: &'static str, input: &str, min: u32, max: u32) -> Result<u32> {
    input
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| Error::Invalid {
            field,
            reason: format!("{:?}: use a whole number from {min} to {max}", input.trim()),
        })
}

impl PolicyValue {
    pub fn key(&self) -> PolicyKey {
        match self {
            PolicyValue::MaxGpusInUse(_) => PolicyKey::MaxGpusInUse,
            PolicyValue::AllowedSkus(_) => PolicyKey::AllowedSkus,
            PolicyValue::AllowedListings(_) => PolicyKey::AllowedListings,
            PolicyValue::AllowedRegions(_) => PolicyKey::AllowedRegions,
            PolicyValue::MaxAllocationLifetimeHours(_) => PolicyKey::MaxAllocationLifetimeHours,
            PolicyValue::MonthlyBudget(_) => PolicyKey::MonthlyBudget,
            PolicyValue::MaxPublishedPorts(_) => PolicyKey::MaxPublishedPorts,
            PolicyValue::MaxVolumeGib(_) => PolicyKey::MaxVolumeGib,
            PolicyValue::MaxVolumes(_) => PolicyKey::MaxVolumes,
        }
    }

    /// Parses what a person typed for `key`; errors name the key and the rule.
    pub fn parse(key: PolicyKey, input: &str) -> Result<Self> {
        Ok(match key {
            PolicyKey::MaxGpusInUse => {
                PolicyValue::MaxGpusInUse(parse_whole("max_gpus_in_use", input, 0, 100_000)?)
            }
            PolicyKey::AllowedSkus => PolicyValue::AllowedSkus(parse_list("allowed_skus", input)?),
            PolicyKey::AllowedListings => {
                PolicyValue::AllowedListings(parse_list("allowed_listings", input)?)
            }
            PolicyKey::AllowedRegions => {
                PolicyValue::AllowedRegions(parse_list("allowed_regions", input)?)
            }
            PolicyKey::MaxAllocationLifetimeHours => PolicyValue::MaxAllocationLifetimeHours(
                parse_whole("max_allocation_lifetime_hours", input, 1, 8760)?,
            ),
            PolicyKey::MonthlyBudget => PolicyValue::MonthlyBudget(Money::parse(input)?),
            PolicyKey::MaxPublishedPorts => PolicyValue::MaxPublishedPorts(parse_whole(
                "max_published_ports",
                input,
                0,
                agent_protocol::identity::PUBLISHED_PORTS_MAX as u32,
            )?),
            PolicyKey::MaxVolumeGib => {
                PolicyValue::MaxVolumeGib(parse_whole("max_volume_gib", input, 0, 10_000_000)?)
            }
            PolicyKey::MaxVolumes => {
                PolicyValue::MaxVolumes(parse_whole("max_volumes", input, 0, 100_000)?)
            }
        })
    }

    fn to_json(&self) -> Value {
        match self {
            PolicyValue::MaxGpusInUse(n)
            | PolicyValue::MaxAllocationLifetimeHours(n)
            | PolicyValue::MaxPublishedPorts(n)
            | PolicyValue::MaxVolumeGib(n)
            | PolicyValue::MaxVolumes(n) => json!(n),
            PolicyValue::AllowedSkus(v)
            | PolicyValue::AllowedRegions(v)
            | PolicyValue::AllowedListings(v) => json!(v),
            PolicyValue::MonthlyBudget(m) => json!(m),
        }
    }

    fn from_json(key: PolicyKey, v: Value) -> Result<Self> {
        let bad = |e: serde_json::Error| Error::Corrupt(format!("policy {}: {e}", key.as_str()));
        Ok(match key {
            PolicyKey::MaxGpusInUse => {
                PolicyValue::MaxGpusInUse(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::AllowedSkus => {
                PolicyValue::AllowedSkus(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::AllowedListings => {
                PolicyValue::AllowedListings(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::AllowedRegions => {
                PolicyValue::AllowedRegions(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::MaxAllocationLifetimeHours => {
                PolicyValue::MaxAllocationLifetimeHours(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::MonthlyBudget => {
                PolicyValue::MonthlyBudget(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::MaxPublishedPorts => {
                PolicyValue::MaxPublishedPorts(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::MaxVolumeGib => {
                PolicyValue::MaxVolumeGib(serde_json::from_value(v).map_err(bad)?)
            }
            PolicyKey::MaxVolumes => {
                PolicyValue::MaxVolumes(serde_json::from_value(v).map_err(bad)?)
            }
        })
    }
}

impl fmt::Display for PolicyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyValue::MaxGpusInUse(n) => write!(f, "{n} GPUs"),
            PolicyValue::AllowedSkus(v)
            | PolicyValue::AllowedRegions(v)
            | PolicyValue::AllowedListings(v) => f.write_str(&v.join(", ")),
            PolicyValue::MaxAllocationLifetimeHours(h) => write!(f, "{h} hours"),
            PolicyValue::MonthlyBudget(m) => write!(f, "{m}"),
            PolicyValue::MaxPublishedPorts(n) => write!(f, "{n} ports"),
            PolicyValue::MaxVolumeGib(n) => write!(f, "{n} GiB"),
            PolicyValue::MaxVolumes(n) => write!(f, "{n} volumes"),
        }
    }
}

/// The answer for one key: the value in force, which level decided, and every level's
/// setting from the most general to the most specific.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    pub key: PolicyKey,
    pub value: Option<PolicyValue>,
    pub decided_by: Option<Level>,
    pub trace: Vec<(Level, Option<PolicyValue>)>,
}

/// The most specific setting wins. `levels` runs from general to specific.
pub fn resolve(key: PolicyKey, levels: Vec<(Level, Option<PolicyValue>)>) -> Resolved {
    let decided = levels
        .iter()
        .rev()
        .find_map(|(level, v)| v.clone().map(|v| (*level, v)));
    Resolved {
        key,
        value: decided.as_ref().map(|(_, v)| v.clone()),
        decided_by: decided.map(|(l, _)| l),
        trace: levels,
    }
}

/// Where a setting lives. Built only from proofs, so a scope implies the right to set it.
pub enum Scope {
    Global {
        by: UserId,
    },
    Tenant {
        by: UserId,
        tenant: TenantId,
    },
    Project {
        by: UserId,
        tenant: TenantId,
        project: ProjectId,
    },
}

impl Scope {
    /// Platform admins set global policies.
    pub fn global(who: &crate::auth::Platform<crate::auth::PlatformAdmin>) -> Self {
        Scope::Global {
            by: who.principal().user_id,
        }
    }

    /// Tenant admins set their tenant's policies.
    pub fn tenant(who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>) -> Self {
        Scope::Tenant {
            by: who.user(),
            tenant: who.id(),
        }
    }

    /// Tenant admins set policies for any of their tenant's projects. `project` must have been
    /// checked to be in `who`'s tenant (the foreign key refuses otherwise).
    pub fn project(
        who: &crate::tenancy::Tenant<crate::tenancy::TenantAdmins>,
        project: &crate::tenancy::Project<crate::tenancy::ProjectViewers>,
    ) -> Result<Self> {
        if project.tenant() != who.id() {
            return Err(Error::NotFound { what: "project" });
        }
        Ok(Scope::Project {
            by: who.user(),
            tenant: who.id(),
            project: project.id(),
        })
    }

    fn parts(&self) -> (UserId, Option<TenantId>, Option<ProjectId>) {
        match *self {
            Scope::Global { by } => (by, None, None),
            Scope::Tenant { by, tenant } => (by, Some(tenant), None),
            Scope::Project {
                by,
                tenant,
                project,
            } => (by, Some(tenant), Some(project)),
        }
    }
}

/// Where a policy table applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Global,
    Tenant(TenantId),
    Project(ProjectId),
}

/// What the control plane offers for the policy chain.
#[allow(async_fn_in_trait)]
pub trait PolicyApi {
    /// The scope to set policies at `target`, if `principal` may: platform admins set global
    /// policies; a tenant's admins set the tenant's and its projects'.
    async fn policy_scope(
        &self,
        principal: &crate::auth::Principal,
        target: Target,
    ) -> Result<Scope>;

    /// The policies in force at `target`, for anyone who may see it (platform staff for
    /// global, the tenant's members, the project's viewers), and whether they may set them.
    async fn policies_at(
        &self,
        principal: &crate::auth::Principal,
        target: Target,
    ) -> Result<(Vec<Resolved>, bool)>;

    /// Every key, resolved for `tenant` (and `project`, if given).
    async fn resolve_policies(
        &self,
        tenant: Option<TenantId>,
        project: Option<ProjectId>,
    ) -> Result<Vec<Resolved>>;

    /// Sets (`Some`) or clears (`None`) one setting at `scope`. Audited.
    async fn set_policy(
        &self,
        scope: &Scope,
        key: PolicyKey,
        value: Option<PolicyValue>,
        request_id: Option<&str>,
    ) -> Result<()>;
}

impl PolicyApi for ControlPlane {
    async fn policy_scope(
        &self,
        principal: &crate::auth::Principal,
        target: Target,
    ) -> Result<Scope> {
        use crate::tenancy::{ProjectViewers, TenantAdmins};
        match target {
            Target::Global => Ok(Scope::global(
                &principal.platform::<crate::auth::PlatformAdmin>()?,
            )),
            Target::Tenant(t) => Ok(Scope::tenant(
                &self.tenant_access::<TenantAdmins>(principal, t).await?,
            )),
            Target::Project(p) => {
                let project = self.project_access::<ProjectViewers>(principal, p).await?;
                let admin = self
                    .tenant_access::<TenantAdmins>(principal, project.tenant())
                    .await?;
                Scope::project(&admin, &project)
            }
        }
    }

    async fn policies_at(
        &self,
        principal: &crate::auth::Principal,
        target: Target,
    ) -> Result<(Vec<Resolved>, bool)> {
        use crate::tenancy::{ProjectViewers, TenantMembers};
        let (tenant, project) = match target {
            Target::Global => {
                principal.platform::<crate::auth::PlatformStaff>()?;
                (None, None)
            }
            Target::Tenant(t) => {
                self.tenant_access::<TenantMembers>(principal, t).await?;
                (Some(t), None)
            }
            Target::Project(p) => {
                let seen = self.project_access::<ProjectViewers>(principal, p).await?;
                (Some(seen.tenant()), Some(p))
            }
        };
        let can_edit = match self.policy_scope(principal, target).await {
            Ok(_) => true,
            Err(Error::Forbidden { .. }) => false,
            Err(e) => return Err(e),
        };
        Ok((self.resolve_policies(tenant, project).await?, can_edit))
    }

    async fn resolve_policies(
        &self,
        tenant: Option<TenantId>,
        project: Option<ProjectId>,
    ) -> Result<Vec<Resolved>> {
        resolve_policies_on(&mut *self.pool().acquire().await?, tenant, project).await
    }

    async fn set_policy(
        &self,
        scope: &Scope,
        key: PolicyKey,
        value: Option<PolicyValue>,
        request_id: Option<&str>,
    ) -> Result<()> {
        if let Some(v) = &value
            && v.key() != key
        {
            return Err(Error::Invalid {
                field: "value",
                reason: format!(
                    "a {} value was given for {}",
                    v.key().as_str(),
                    key.as_str()
                ),
            });
        }
        let (by, tenant, project) = scope.parts();
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query_scalar!(
            "DELETE FROM policies WHERE tenant_id IS NOT DISTINCT FROM $1
               AND project_id IS NOT DISTINCT FROM $2 AND key = $3 RETURNING value",
            tenant as Option<TenantId>,
            project as Option<ProjectId>,
            key.as_str(),
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(v) = &value {
            sqlx::query!(
                "INSERT INTO policies (tenant_id, project_id, key, value, updated_by)
                 VALUES ($1, $2, $3, $4, $5)",
                tenant as Option<TenantId>,
                project as Option<ProjectId>,
                key.as_str(),
                v.to_json(),
                by as UserId,
            )
            .execute(&mut *tx)
            .await?;
        }
        let resource: ResourceName = match (tenant, project) {
            (Some(t), Some(p)) => self.naming().project(t, p),
            (Some(t), None) => self.naming().tenant(t),
            _ => self.naming().platform("policies"),
        };
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(by),
                action: if value.is_some() {
                    "policy.set"
                } else {
                    "policy.clear"
                },
                resource: &resource,
                before: before.map(|v| json!({ key.as_str(): v })),
                after: value.map(|v| json!({ key.as_str(): v.to_json() })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// [`ControlPlane::resolve_policies`] on `conn`: a launch resolves its policies in the
/// transaction that reserves.
pub async fn resolve_policies_on(
    conn: &mut sqlx::PgConnection,
    tenant: Option<TenantId>,
    project: Option<ProjectId>,
) -> Result<Vec<Resolved>> {
    let rows = sqlx::query_as!(
        SetPolicy,
        r#"SELECT key, value, tenant_id AS "tenant: TenantId", project_id AS "project: ProjectId"
               FROM policies
               WHERE (tenant_id IS NULL AND project_id IS NULL)
                  OR (tenant_id = $1 AND project_id IS NULL)
                  OR (tenant_id = $1 AND project_id = $2)"#,
        tenant as Option<TenantId>,
        project as Option<ProjectId>,
    )
    .fetch_all(conn)
    .await?;
    resolve_set(&rows, tenant.is_some(), project)
}

/// The policies in force for `tenant` itself and for each of `projects` (its own), in that
/// order, from one read of everything set globally and anywhere in the tenant.
pub async fn resolve_tenant_policies_on(
    conn: impl sqlx::PgExecutor<'_>,
    tenant: TenantId,
    projects: &[ProjectId],
) -> Result<(Vec<Resolved>, Vec<Vec<Resolved>>)> {
    let rows = sqlx::query_as!(
        SetPolicy,
        r#"SELECT key, value, tenant_id AS "tenant: TenantId", project_id AS "project: ProjectId"
               FROM policies
               WHERE (tenant_id IS NULL AND project_id IS NULL) OR tenant_id = $1"#,
        tenant as TenantId,
    )
    .fetch_all(conn)
    .await?;
    let own = resolve_set(&rows, true, None)?;
    let each = projects
        .iter()
        .map(|&p| resolve_set(&rows, true, Some(p)))
        .collect::<Result<_>>()?;
    Ok((own, each))
}

/// A policy as set at one level.
struct SetPolicy {
    key: String,
    value: serde_json::Value,
    tenant: Option<TenantId>,
    project: Option<ProjectId>,
}

/// Every key resolved down the chain global → tenant (if `tenant`) → `project`, from `rows`,
/// which hold at least what is set at those levels (rows of other projects are passed over).
fn resolve_set(
    rows: &[SetPolicy],
    tenant: bool,
    project: Option<ProjectId>,
) -> Result<Vec<Resolved>> {
    let mut levels = vec![Level::Global];
    if tenant {
        levels.push(Level::Tenant);
    }
    if project.is_some() {
        levels.push(Level::Project);
    }
    PolicyKey::ALL
        .into_iter()
        .map(|key| {
            let trace = levels
                .iter()
                .map(|&level| {
                    let row = rows.iter().find(|r| {
                        r.key == key.as_str()
                            && match level {
                                Level::Global => r.tenant.is_none(),
                                Level::Tenant => r.tenant.is_some() && r.project.is_none(),
                                Level::Project => r.project == project,
                            }
                    });
                    let value = row
                        .map(|r| PolicyValue::from_json(key, r.value.clone()))
                        .transpose()?;
                    Ok((level, value))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(resolve(key, trace))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_setting_wins_and_the_trace_says_so() {
        let r = resolve(
            PolicyKey::MaxGpusInUse,
            vec![
                (Level::Global, Some(PolicyValue::MaxGpusInUse(64))),
                (Level::Tenant, Some(PolicyValue::MaxGpusInUse(32))),
                (Level::Project, None),
            ],
        );
        assert_eq!(r.value, Some(PolicyValue::MaxGpusInUse(32)));
        assert_eq!(r.decided_by, Some(Level::Tenant));
        assert_eq!(r.trace.len(), 3);
        let r = resolve(
            PolicyKey::AllowedSkus,
            vec![(Level::Global, None), (Level::Tenant, None)],
        );
        assert_eq!((r.value, r.decided_by), (None, None));
    }

    #[test]
    fn values_parse_by_key_with_the_rule_in_the_error() {
        assert_eq!(
            PolicyValue::parse(PolicyKey::MaxGpusInUse, " 16 ").unwrap(),
            PolicyValue::MaxGpusInUse(16)
        );
        assert_eq!(
            PolicyValue::parse(PolicyKey::MaxGpusInUse, "-1")
                .unwrap_err()
                .to_string(),
            "invalid max_gpus_in_use: \"-1\": use a whole number from 0 to 100000"
        );
        assert_eq!(
            PolicyValue::parse(PolicyKey::AllowedRegions, "us-east, EU-West,us-east").unwrap(),
            PolicyValue::AllowedRegions(vec!["eu-west".into(), "us-east".into()])
        );
        assert!(PolicyValue::parse(PolicyKey::AllowedSkus, " , ").is_err());
        assert_eq!(
            PolicyValue::parse(PolicyKey::MaxAllocationLifetimeHours, "0")
                .unwrap_err()
                .to_string(),
            "invalid max_allocation_lifetime_hours: \"0\": use a whole number from 1 to 8760"
        );
        assert_eq!(
            PolicyValue::parse(PolicyKey::MonthlyBudget, "5000 usd").unwrap(),
            PolicyValue::MonthlyBudget(Money {
                amount_minor: 500_000,
                currency: "USD".into()
            })
        );
        assert_eq!(Money::parse("12.5 EUR").unwrap().amount_minor, 1250);
        assert_eq!(Money::parse("12.5 EUR").unwrap().to_string(), "12.50 EUR");
        for bad in [
            "12.345 USD",
            "12 XYZ",
            "USD 12",
            "twelve USD",
            "-5 USD",
            "12",
        ] {
            assert!(Money::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Money::parse("5 JPY").unwrap_err().to_string(),
            "invalid monthly_budget: JPY is not supported; use one of USD, EUR, GBP, CHF, CAD, AUD"
        );
    }

    #[test]
    fn money_is_bounded_at_the_edge() {
        assert_eq!(
            Money::parse("1000000000.00 USD").unwrap().amount_minor,
            Money::MAX_MINOR
        );
        for too_much in [
            "1000000000.01 USD",
            "92233720368547758.07 USD",
            "99999999999999999999 USD",
        ] {
            let err = Money::parse(too_much).unwrap_err().to_string();
            assert!(
                err.contains("is more than the largest amount accepted (1000000000 USD)"),
                "{too_much}: {err}"
            );
        }
        assert_eq!(
            Money::parse_hourly("fee", "100000 EUR")
                .unwrap()
                .amount_minor,
            Money::MAX_PER_HOUR_MINOR
        );
        assert_eq!(
            Money::parse_hourly("price_per_hour", "100000.01 USD")
                .unwrap_err()
                .to_string(),
            "invalid price_per_hour: 100000.01 USD per hour is more than the most a price may be (100000.00 USD per hour)"
        );
    }
}
