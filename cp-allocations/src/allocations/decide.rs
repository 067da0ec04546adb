//! What a launch decides, as pure functions over what its transaction read: the request
//! checked and normalised, what the policy chain allows, the GPU quota and the budget against
//! the numbers counted under the scope's lock, and the lifetime. `launch` (in `mod.rs`) is the
//! SQL around them: lock, read, decide, reserve, write. Every refusal is a sentence that names
//! the policy, the level that set it and the numbers.

use sha2::{Digest, Sha256};

use super::{LaunchRequest, MAX_LIFETIME_HOURS};
use cp_base::error::{Denial, Denied, Error, Result};
use cp_identity::account::validate_ssh_keys;
use cp_identity::policy::{Level, Money, PolicyKey, PolicyValue, Resolved};
use cp_inventory::skus::Sku;
use portal_types::allocations::{MAX_TAGS, Tags};

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        reason: reason.into(),
    }
}

/// The scope a quota or budget counts in: the project when the project level set it, the
/// whole tenant when the tenant (or global) level did.
pub(crate) fn counts_in_project(r: &Resolved) -> bool {
    r.decided_by == Some(Level::Project)
}

pub(crate) fn policy(all: &[Resolved], key: PolicyKey) -> &Resolved {
    all.iter()
        .find(|r| r.key == key)
        .expect("resolve_policies returns every key")
}

/// "policy max_gpus_in_use (set at project level)", for pages that show a limit.
pub(super) fn decided(r: &Resolved) -> String {
    format!(
        "policy {} (set at {} level)",
        r.key.as_str(),
        r.decided_by.map(Level::as_str).unwrap_or("no")
    )
}

/// A refusal by the policy `r` resolved to.
pub(crate) fn denied(r: &Resolved, why: Denied) -> Error {
    Denial::error(r.key, r.decided_by, why)
}

/// The guest ports to publish, sorted: each 1–65535, not SSH's 22, no repeats, at most
/// [`agent_protocol::identity::PUBLISHED_PORTS_MAX`].
pub(super) fn check_published_ports(ports: &[u16]) -> Result<Vec<u16>> {
    agent_protocol::identity::published_ports(ports).map_err(|e| invalid("published_ports", e))
}

/// Where each wanted port goes in the stored list (position `k`: public port `k + 1` of the
/// slot): a port published already keeps its position, so its public port never changes; a
/// withdrawn one leaves a hole; a new one takes the first hole, or the end.
pub(super) fn port_layout(current: &[Option<i32>], wanted: &[u16]) -> Vec<Option<i32>> {
    let wanted: Vec<i32> = wanted.iter().map(|&p| i32::from(p)).collect();
    let mut layout: Vec<Option<i32>> = current
        .iter()
        .map(|p| p.filter(|p| wanted.contains(p)))
        .collect();
    for p in wanted {
        if layout.contains(&Some(p)) {
            continue;
        }
        match layout.iter().position(Option::is_none) {
            Some(hole) => layout[hole] = Some(p),
            None => layout.push(Some(p)),
        }
    }
    while layout.last() == Some(&None) {
        layout.pop();
    }
    layout
}

/// Refuses more published ports than `max_published_ports` allows.
pub(super) fn within_published_ports(policies: &[Resolved], ports: &[u16]) -> Result<()> {
    let p = policy(policies, PolicyKey::MaxPublishedPorts);
    if let Some(PolicyValue::MaxPublishedPorts(max)) = &p.value
        && ports.len() > *max as usize
    {
        return Err(denied(
            p,
            Denied::PublishedPorts {
                max: *max,
                asked: ports.len(),
            },
        ));
    }
    Ok(())
}

pub(super) fn check_name(name: &str) -> Result<String> {
    portal_types::allocations::check_instance_name(name).map_err(|reason| invalid("name", reason))
}

/// Tags as stored: at most [`MAX_TAGS`], keys of 1 to 63 lowercase letters, digits, `.`,
/// `_` and `-` starting with a letter or digit, values of at most 128 printable characters.
pub(super) fn check_tags(tags: &Tags) -> Result<Tags> {
    if tags.len() > MAX_TAGS {
        return Err(invalid(
            "tags",
            format!("{} tags: give at most {MAX_TAGS}", tags.len()),
        ));
    }
    let mut out = Tags::new();
    for (key, value) in tags {
        let k = key.trim();
        let key_ok = (1..=63).contains(&k.len())
            && k.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && k.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
            });
        if !key_ok {
            return Err(invalid(
                "tags",
                format!(
                    "tag {:?}: use 1 to 63 lowercase letters, digits, '.', '_' and '-', starting with a letter or digit",
                    truncated(k)
                ),
            ));
        }
        let v = value.trim();
        if v.chars().count() > 128 || v.chars().any(char::is_control) {
            return Err(invalid(
                "tags",
                format!(
                    "the value of tag {k}: at most 128 characters, none of them control characters"
                ),
            ));
        }
        if out.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(invalid("tags", format!("tag {k} is given twice")));
        }
    }
    Ok(out)
}

/// The most user data a launch may carry, in bytes.
pub const MAX_USER_DATA: usize = 16 * 1024;

/// User data as cloud-init runs it: a `#cloud-config` document or a `#!` script, UTF-8 without
/// NUL, at most [`MAX_USER_DATA`] bytes. Empty is none. (Whether the image accepts it is
/// checked against the version.)
pub(super) fn check_user_data(user_data: Option<&str>) -> Result<Option<String>> {
    let Some(u) = user_data.filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    if u.len() > MAX_USER_DATA {
        return Err(invalid(
            "user_data",
            format!(
                "{} bytes: user data is at most {MAX_USER_DATA} bytes (16 KiB)",
                u.len()
            ),
        ));
    }
    if !(u.starts_with("#cloud-config") || u.starts_with("#!")) {
        return Err(invalid(
            "user_data",
            "start it with #cloud-config (a cloud-config document) or #! (a script)",
        ));
    }
    if u.contains('\0') {
        return Err(invalid("user_data", "user data is text: it has a NUL byte"));
    }
    if u.starts_with("#cloud-config") {
        check_cloud_config(u)?;
    }
    Ok(Some(u.to_owned()))
}

/// The keys with which a cloud-config document chooses how cloud-init merges it. cloud-init
/// reads them before the part's `X-Merge-Type` header, so a tenant's document naming them could
/// replace the user, SSH and telemetry settings of the platform's part in their VM.
const MERGE_KEYS: [&str; 2] = ["merge_how", "merge_type"];

/// A tenant's cloud-config as cloud-init loads it: one YAML document, a mapping (or empty),
/// without [`MERGE_KEYS`]. Read with a YAML parser, so no quoting or escape spells a key past it.
fn check_cloud_config(u: &str) -> Result<()> {
    use yaml_rust2::{Yaml, YamlLoader};
    let docs = YamlLoader::load_from_str(u)
        .map_err(|e| invalid("user_data", format!("#cloud-config is not valid YAML: {e}")))?;
    let doc = match docs.as_slice() {
        [] => return Ok(()),
        [doc] => doc,
        _ => {
            return Err(invalid(
                "user_data",
                "#cloud-config holds one YAML document; this has several (---)",
            ));
        }
    };
    let keys = match doc {
        Yaml::Null => return Ok(()),
        Yaml::Hash(keys) => keys,
        _ => {
            return Err(invalid(
                "user_data",
                "#cloud-config is a mapping of keys (packages:, runcmd:, …)",
            ));
        }
    };
    if let Some(key) = MERGE_KEYS
        .into_iter()
        .find(|k| keys.contains_key(&Yaml::String((*k).to_owned())))
    {
        return Err(invalid(
            "user_data",
            format!(
                "remove {key}: the platform chooses how your cloud-config is merged with its own \
                 (your lists are appended and your other keys added, never replacing the user, \
                 SSH keys or telemetry the platform sets up)"
            ),
        ));
    }
    Ok(())
}

/// The first 40 characters of what a caller sent, for an error message.
pub(super) fn truncated(s: &str) -> String {
    s.chars().take(40).collect()
}

fn check_idempotency_key(key: &str) -> Result<&str> {
    let key = key.trim();
    if (8..=200).contains(&key.len()) && key.chars().all(|c| c.is_ascii_graphic()) {
        Ok(key)
    } else {
        Err(invalid(
            "idempotency_key",
            "use 8 to 200 printable characters (a UUID per launch form, for example)",
        ))
    }
}

/// A launch request with every field checked and normalised; nothing read yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ValidLaunch {
    pub name: String,
    pub idempotency_key: String,
    /// One validated key per line.
    pub ssh_public_key: String,
    /// Lower case; empty: any of the SKU's regions.
    pub region: String,
    pub lifetime_hours: Option<u32>,
    /// Sorted.
    pub published_ports: Vec<u16>,
    pub tags: Tags,
    pub user_data: Option<String>,
    /// Volumes to attach, sorted, without repeats.
    pub volumes: Vec<cp_base::ids::VolumeId>,
    /// What a repeated idempotency key must match to return the first allocation.
    pub fingerprint: String,
}

impl ValidLaunch {
    pub fn check(req: &LaunchRequest) -> Result<Self> {
        let name = check_name(&req.name)?;
        if let Some(h) = req.lifetime_hours
            && !(1..=MAX_LIFETIME_HOURS).contains(&h)
        {
            return Err(invalid(
                "lifetime_hours",
                format!(
                    "{h}: choose 1 to {MAX_LIFETIME_HOURS} hours, or none to keep it until released"
                ),
            ));
        }
        let idempotency_key = check_idempotency_key(&req.idempotency_key)?.to_owned();
        let ssh_public_key = validate_ssh_keys(&req.ssh_public_key)?;
        let region = req.region.trim().to_ascii_lowercase();
        let published_ports = check_published_ports(&req.published_ports)?;
        let tags = check_tags(&req.tags)?;
        let user_data = check_user_data(req.user_data.as_deref())?;
        let mut volumes = req.volumes.clone();
        volumes.sort_by_key(|v| v.0);
        volumes.dedup();
        let most = agent_protocol::MAX_VOLUMES_PER_INSTANCE;
        if volumes.len() > most {
            return Err(invalid(
                "volumes",
                format!("{} volumes: an instance has at most {most}", volumes.len()),
            ));
        }
        let ports = published_ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let fingerprint = {
            let mut h = Sha256::new();
            for part in [
                req.sku.trim(),
                &region,
                req.listing.trim(),
                req.version.trim(),
                &ssh_public_key,
                &name,
                &ports,
            ] {
                h.update(part.as_bytes());
                h.update([0]);
            }
            // Tags came later: a launch without them keeps the fingerprint it always had.
            if !tags.is_empty() {
                h.update(serde_json::to_vec(&tags).unwrap_or_default());
            }
            // So did user data, which is hashed after a marker no tag JSON can end with.
            if let Some(u) = &user_data {
                h.update(b"\0user_data\0");
                h.update(u.as_bytes());
            }
            // And a lifetime: a retry asking for another one is another launch, not the same.
            if let Some(hours) = req.lifetime_hours {
                h.update(b"\0lifetime_hours\0");
                h.update(hours.to_string().as_bytes());
            }
            // And volumes attached at launch.
            if !volumes.is_empty() {
                h.update(b"\0volumes\0");
                for v in &volumes {
                    h.update(v.0.as_bytes());
                }
            }
            format!("{:x}", h.finalize())
        };
        Ok(Self {
            name,
            idempotency_key,
            ssh_public_key,
            region,
            lifetime_hours: req.lifetime_hours,
            published_ports,
            tags,
            user_data,
            volumes,
            fingerprint,
        })
    }
}

/// Where the SKU may run: the region asked for, or every region it is sold in.
pub(super) fn regions(sku: &Sku, region: &str) -> Result<Vec<String>> {
    if region.is_empty() {
        Ok(sku.regions.clone())
    } else if sku.regions.iter().any(|r| r == region) {
        Ok(vec![region.to_string()])
    } else {
        Err(invalid(
            "region",
            format!(
                "{} is sold in {}, not {region}",
                sku.name,
                sku.regions.join(", ")
            ),
        ))
    }
}

/// What the policy chain lets this launch do before anything is counted: the regions left
/// after `allowed_regions`, and the limits still to check under the scope's lock.
#[derive(Debug)]
pub(super) struct Allowed<'p> {
    pub regions: Vec<String>,
    pub max_gpus: Option<(u32, &'p Resolved)>,
    pub budget: Option<(&'p Money, &'p Resolved)>,
}

/// Whose launches to serialise before counting, so that two can't both fit under a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LockScope {
    Project,
    Tenant,
}

impl Allowed<'_> {
    /// The project when every limit that applies counts in the project; the tenant when one
    /// counts tenant-wide; nothing when no limit applies.
    pub fn lock(&self) -> Option<LockScope> {
        let limits: Vec<&Resolved> = self
            .max_gpus
            .map(|(_, r)| r)
            .into_iter()
            .chain(self.budget.map(|(_, r)| r))
            .collect();
        match limits.is_empty() {
            true => None,
            false if limits.iter().all(|r| counts_in_project(r)) => Some(LockScope::Project),
            false => Some(LockScope::Tenant),
        }
    }
}

/// `allowed_skus`, `allowed_listings` and `allowed_regions`, in that order.
pub(super) fn allowed<'p>(
    policies: &'p [Resolved],
    sku: &Sku,
    listing_slug: &str,
    requested_region: &str,
    mut regions: Vec<String>,
) -> Result<Allowed<'p>> {
    let skus = policy(policies, PolicyKey::AllowedSkus);
    if let Some(PolicyValue::AllowedSkus(list)) = &skus.value
        && !list.contains(&sku.name)
    {
        return Err(denied(
            skus,
            Denied::NotAllowed {
                allowed: list.clone(),
                asked: sku.name.clone(),
            },
        ));
    }
    let listings = policy(policies, PolicyKey::AllowedListings);
    if let Some(PolicyValue::AllowedListings(list)) = &listings.value
        && !list.iter().any(|l| l == listing_slug)
    {
        return Err(denied(
            listings,
            Denied::NotAllowed {
                allowed: list.clone(),
                asked: listing_slug.to_string(),
            },
        ));
    }
    let in_regions = policy(policies, PolicyKey::AllowedRegions);
    if let Some(PolicyValue::AllowedRegions(list)) = &in_regions.value {
        regions.retain(|r| list.contains(r));
        if regions.is_empty() {
            return Err(denied(
                in_regions,
                Denied::NoRegion {
                    allowed: list.clone(),
                    sku: sku.name.clone(),
                    sold_in: if requested_region.is_empty() {
                        sku.regions.join(", ")
                    } else {
                        requested_region.to_string()
                    },
                },
            ));
        }
    }
    let max_gpus = policy(policies, PolicyKey::MaxGpusInUse);
    let budget = policy(policies, PolicyKey::MonthlyBudget);
    Ok(Allowed {
        regions,
        max_gpus: match &max_gpus.value {
            Some(PolicyValue::MaxGpusInUse(max)) => Some((*max, max_gpus)),
            _ => None,
        },
        budget: match &budget.value {
            Some(PolicyValue::MonthlyBudget(limit)) => Some((limit, budget)),
            _ => None,
        },
    })
}

/// What `members` of `sku` are called in a refusal: the SKU, or "16 × the SKU".
fn launched(sku: &Sku, members: u32) -> String {
    if members == 1 {
        sku.name.clone()
    } else {
        format!("{members} × {}", sku.name)
    }
}

/// `max_gpus_in_use` against the GPUs in use in its scope, for `members` launches of `sku`
/// (more than one for a cluster).
pub(super) fn within_gpu_quota(
    (max, decided_by): (u32, &Resolved),
    in_use: i64,
    sku: &Sku,
    members: u32,
) -> Result<()> {
    let gpus = i64::from(sku.gpu_count) * i64::from(members);
    if in_use + gpus > max as i64 {
        return Err(denied(
            decided_by,
            Denied::GpuQuota {
                max,
                scope: if counts_in_project(decided_by) {
                    "project"
                } else {
                    "organization"
                },
                in_use,
                sku: launched(sku, members),
                gpus: i32::try_from(gpus).unwrap_or(i32::MAX),
            },
        ));
    }
    Ok(())
}

/// A budget can only count what is priced in its currency.
pub(super) fn budget_currency((limit, decided_by): (&Money, &Resolved), sku: &Sku) -> Result<()> {
    if limit.currency != sku.price.currency {
        return Err(denied(
            decided_by,
            Denied::BudgetCurrency {
                budget: limit.currency.clone(),
                sku: sku.name.clone(),
                priced_in: sku.price.currency.clone(),
            },
        ));
    }
    Ok(())
}

/// `monthly_budget` against what is spent this month (in minor units, rounded up) plus the
/// first hour (SKU price and listing fee) of `members` launches.
pub(super) fn within_budget(
    (limit, decided_by): (&Money, &Resolved),
    spent: i64,
    sku: &Sku,
    fee: i64,
    software_label: &str,
    members: u32,
) -> Result<()> {
    let first_hour = (sku.price.amount_minor + fee).saturating_mul(i64::from(members));
    if spent + first_hour > limit.amount_minor {
        return Err(denied(
            decided_by,
            Denied::OverBudget {
                limit: limit.clone(),
                spent: Money::new(spent, limit.currency.clone()),
                first_hour: Money::new(first_hour, limit.currency.clone()),
                sku: launched(sku, members),
                with: (fee > 0).then(|| software_label.to_string()),
            },
        ));
    }
    Ok(())
}

/// How long the allocation lives: what was asked, within `max_allocation_lifetime_hours`;
/// the policy's limit when nothing was asked.
pub(super) fn lifetime(policies: &[Resolved], asked: Option<u32>) -> Result<Option<u32>> {
    let lifetime = policy(policies, PolicyKey::MaxAllocationLifetimeHours);
    let max = match &lifetime.value {
        Some(PolicyValue::MaxAllocationLifetimeHours(h)) => Some(*h),
        _ => None,
    };
    match (asked, max) {
        (Some(asked), Some(max)) if asked > max => {
            Err(denied(lifetime, Denied::Lifetime { max, asked }))
        }
        (Some(asked), _) => Ok(Some(asked)),
        (None, max) => Ok(max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cp_base::ids::SkuId;
    use cp_inventory::skus::Shape;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEorqTlXDEue8uPXrBC/J2mGhCVSlB9xbL3JVhwex5yy";

    fn usd(amount_minor: i64) -> Money {
        Money {
            amount_minor,
            currency: "USD".into(),
        }
    }

    fn sku(name: &str, gpus: i32, price_minor: i64) -> Sku {
        Sku {
            id: SkuId::new_random(),
            name: name.into(),
            display_name: name.into(),
            shape: Shape::GpuSlice,
            gpu_model: "NVIDIA H100 80GB HBM3".into(),
            gpu_count: gpus,
            vcpus: 26 * gpus,
            memory_gib: 225 * gpus,
            nvme_gib: 3500,
            regions: vec!["eu-west-1".into(), "us-east-1".into()],
            families: vec!["hgx-h100-8x".into()],
            price: usd(price_minor),
            state: "active".into(),
        }
    }

    /// The resolved chain with `set` decided at its level and every other key unset.
    fn chain(set: &[(PolicyValue, Level)]) -> Vec<Resolved> {
        PolicyKey::ALL
            .iter()
            .map(|&key| match set.iter().find(|(v, _)| v.key() == key) {
                Some((v, level)) => Resolved {
                    key,
                    value: Some(v.clone()),
                    decided_by: Some(*level),
                    trace: vec![(*level, Some(v.clone()))],
                },
                None => Resolved {
                    key,
                    value: None,
                    decided_by: None,
                    trace: Vec::new(),
                },
            })
            .collect()
    }

    fn request(name: &str) -> LaunchRequest {
        LaunchRequest {
            sku: "h100.1x".into(),
            region: " US-East-1 ".into(),
            listing: "ubuntu-24.04-cuda".into(),
            version: String::new(),
            ssh_public_key: KEY.into(),
            name: name.into(),
            idempotency_key: "0f4c1b6e-launch".into(),
            lifetime_hours: None,
            published_ports: Vec::new(),
            tags: Default::default(),
            user_data: None,
            volumes: Vec::new(),
        }
    }

    fn refusal(r: Result<impl std::fmt::Debug>) -> Denial {
        match r {
            Err(Error::PolicyDenied(d)) => *d,
            other => panic!("expected a policy denial, got {other:?}"),
        }
    }

    /// The sentence a refusal shows.
    fn denied(r: Result<impl std::fmt::Debug>) -> String {
        refusal(r).to_string()
    }

    #[test]
    fn a_request_is_checked_and_normalised_before_anything_is_read() {
        let v = ValidLaunch::check(&request(" Train-1 ")).unwrap();
        assert_eq!(v.name, "train-1");
        assert_eq!(v.region, "us-east-1");
        assert_eq!(v.ssh_public_key, KEY);
        // The same request fingerprints the same; another name doesn't.
        assert_eq!(
            v.fingerprint,
            ValidLaunch::check(&request("train-1")).unwrap().fingerprint
        );
        assert_ne!(
            v.fingerprint,
            ValidLaunch::check(&request("train-2")).unwrap().fingerprint
        );
        for (req, field) in [
            (request("-x"), "name"),
            (
                LaunchRequest {
                    lifetime_hours: Some(0),
                    ..request("a")
                },
                "lifetime_hours",
            ),
            (
                LaunchRequest {
                    idempotency_key: "short".into(),
                    ..request("a")
                },
                "idempotency_key",
            ),
            (
                LaunchRequest {
                    ssh_public_key: "ssh-ed25519 !!".into(),
                    ..request("a")
                },
                "ssh_public_key",
            ),
        ] {
            match ValidLaunch::check(&req) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn regions_are_the_one_asked_for_or_all_the_sku_is_sold_in() {
        let s = sku("h100.1x", 1, 298);
        assert_eq!(regions(&s, "").unwrap(), ["eu-west-1", "us-east-1"]);
        assert_eq!(regions(&s, "us-east-1").unwrap(), ["us-east-1"]);
        assert_eq!(
            regions(&s, "ap-south-1").unwrap_err().to_string(),
            "invalid region: h100.1x is sold in eu-west-1, us-east-1, not ap-south-1"
        );
    }

    #[test]
    fn allow_lists_refuse_by_name_and_narrow_the_regions() {
        let s = sku("h100.2x", 2, 596);
        let all = || s.regions.clone();
        let p = chain(&[(
            PolicyValue::AllowedSkus(vec!["l40s.1x".into()]),
            Level::Tenant,
        )]);
        assert_eq!(
            denied(allowed(&p, &s, "ubuntu", "", all())),
            "policy allowed_skus (set at organization level) allows l40s.1x, not h100.2x"
        );
        let p = chain(&[(
            PolicyValue::AllowedListings(vec!["ubuntu".into()]),
            Level::Project,
        )]);
        assert_eq!(
            denied(allowed(&p, &s, "pytorch", "", all())),
            "policy allowed_listings (set at project level) allows ubuntu, not pytorch"
        );
        let p = chain(&[(
            PolicyValue::AllowedRegions(vec!["us-east-1".into()]),
            Level::Tenant,
        )]);
        assert_eq!(
            allowed(&p, &s, "ubuntu", "", all()).unwrap().regions,
            ["us-east-1"]
        );
        assert_eq!(
            denied(allowed(
                &p,
                &s,
                "ubuntu",
                "eu-west-1",
                vec!["eu-west-1".into()]
            )),
            "policy allowed_regions (set at organization level) allows us-east-1; h100.2x is sold only in eu-west-1"
        );
    }

    #[test]
    fn limits_lock_the_narrowest_scope_that_holds_them_all() {
        let s = sku("h100.1x", 1, 298);
        let lock = |set: &[(PolicyValue, Level)]| {
            allowed(&chain(set), &s, "ubuntu", "", s.regions.clone())
                .unwrap()
                .lock()
        };
        assert_eq!(lock(&[]), None);
        assert_eq!(
            lock(&[(PolicyValue::MaxGpusInUse(8), Level::Project)]),
            Some(LockScope::Project)
        );
        assert_eq!(
            lock(&[
                (PolicyValue::MaxGpusInUse(8), Level::Project),
                (PolicyValue::MonthlyBudget(usd(100_000)), Level::Tenant)
            ]),
            Some(LockScope::Tenant)
        );
        assert_eq!(
            lock(&[(PolicyValue::MaxGpusInUse(8), Level::Global)]),
            Some(LockScope::Tenant)
        );
    }

    #[test]
    fn the_gpu_quota_and_the_budget_allow_exactly_up_to_their_limit() {
        let s = sku("h100.2x", 2, 596);
        let p = chain(&[(PolicyValue::MaxGpusInUse(8), Level::Tenant)]);
        let quota = (8, &p[0]);
        within_gpu_quota(quota, 6, &s, 1).unwrap();
        let d = refusal(within_gpu_quota(quota, 7, &s, 1));
        assert_eq!(
            (d.key, d.level),
            (PolicyKey::MaxGpusInUse, Some(Level::Tenant))
        );
        assert_eq!(
            d.why,
            Denied::GpuQuota {
                max: 8,
                scope: "organization",
                in_use: 7,
                sku: "h100.2x".into(),
                gpus: 2
            }
        );
        assert_eq!(
            denied(within_gpu_quota(quota, 7, &s, 1)),
            "policy max_gpus_in_use (set at organization level) allows 8 GPUs in use in this organization; 7 are in use and h100.2x would need 2"
        );
        let limit = usd(10_000);
        let p = chain(&[(PolicyValue::MonthlyBudget(limit.clone()), Level::Project)]);
        let budget = (&limit, policy(&p, PolicyKey::MonthlyBudget));
        budget_currency(budget, &s).unwrap();
        // 94.04 spent + 5.96 for the first hour is exactly 100.00: allowed.
        within_budget(budget, 9_404, &s, 0, "Ubuntu", 1).unwrap();
        let d = refusal(within_budget(budget, 9_404, &s, 25, "PyTorch 2.5", 1));
        assert_eq!(
            (d.key, d.level),
            (PolicyKey::MonthlyBudget, Some(Level::Project))
        );
        assert!(
            matches!(&d.why, Denied::OverBudget { spent, first_hour, with: Some(w), .. }
                if spent.amount_minor == 9_404 && first_hour.amount_minor == 621 && w == "PyTorch 2.5"),
            "{d:?}"
        );
        assert_eq!(
            denied(within_budget(budget, 9_404, &s, 25, "PyTorch 2.5", 1)),
            "policy monthly_budget (set at project level) is 100.00 USD; 94.04 USD is spent this month, and 6.21 USD for the first hour of h100.2x with PyTorch 2.5 would make 100.25 USD, 0.25 USD over"
        );
        let eur = Money {
            amount_minor: 10_000,
            currency: "EUR".into(),
        };
        assert_eq!(
            denied(budget_currency((&eur, budget.1), &s)),
            "policy monthly_budget (set at project level) is in EUR, but h100.2x is priced in USD; ask an admin to set the budget in USD"
        );
    }

    #[test]
    fn published_ports_keep_their_positions() {
        assert_eq!(
            port_layout(&[], &[6006, 8888]),
            vec![Some(6006), Some(8888)]
        );
        // 6006 withdrawn: 8888 keeps position 1; 9000 fills the hole.
        let l = port_layout(&[Some(6006), Some(8888)], &[8888]);
        assert_eq!(l, vec![None, Some(8888)]);
        assert_eq!(port_layout(&l, &[8888, 9000]), vec![Some(9000), Some(8888)]);
        assert_eq!(
            port_layout(&[Some(1), Some(2)], &[1, 2, 3]),
            vec![Some(1), Some(2), Some(3)]
        );
        assert_eq!(port_layout(&[Some(1), Some(2)], &[1]), vec![Some(1)]);
        assert_eq!(port_layout(&[Some(1)], &[]), Vec::<Option<i32>>::new());
    }

    #[test]
    fn the_lifetime_is_the_ask_within_the_policy_or_the_policy() {
        assert_eq!(lifetime(&chain(&[]), None).unwrap(), None);
        assert_eq!(lifetime(&chain(&[]), Some(8)).unwrap(), Some(8));
        let p = chain(&[(PolicyValue::MaxAllocationLifetimeHours(24), Level::Global)]);
        assert_eq!(lifetime(&p, None).unwrap(), Some(24));
        assert_eq!(lifetime(&p, Some(24)).unwrap(), Some(24));
        assert_eq!(
            denied(lifetime(&p, Some(25))),
            "policy max_allocation_lifetime_hours (set at global level) allows allocations to live 24 hours; this launch asked for 25"
        );
    }

    #[test]
    fn user_data_is_a_bounded_cloud_config_or_script() {
        assert_eq!(check_user_data(None).unwrap(), None);
        assert_eq!(check_user_data(Some("  \n")).unwrap(), None);
        let doc = "#cloud-config\npackages: [htop]\n";
        assert_eq!(check_user_data(Some(doc)).unwrap().as_deref(), Some(doc));
        assert!(check_user_data(Some("#!/bin/sh\necho hi\n")).is_ok());
        let reason = |u: &str| match check_user_data(Some(u)) {
            Err(Error::Invalid { field, reason }) => {
                assert_eq!(field, "user_data");
                reason
            }
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(
            reason("packages: [htop]"),
            "start it with #cloud-config (a cloud-config document) or #! (a script)"
        );
        assert!(reason("#!/bin/sh\n\0").contains("NUL"));
        // However a document spells the merge keys, they are refused by name.
        for doc in [
            "#cloud-config\nmerge_how: dict(replace)+list(replace)\nusers: []\n",
            "#cloud-config\n'merge_type': 'dict(replace)'\n",
            "#cloud-config\n\"merge\\x5fhow\": x\n",
            "#cloud-config\n{users: [], merge_how: [{name: dict, settings: [replace]}]}\n",
            "#cloud-config\n? merge_how\n: x\n",
        ] {
            let r = reason(doc);
            assert!(
                r.starts_with("remove merge_how:") || r.starts_with("remove merge_type:"),
                "{doc:?}: {r}"
            );
        }
        // Nested, the key is the tenant's own data, not a merge rule.
        assert!(check_user_data(Some("#cloud-config\nwrite_files:\n- merge_how: x\n")).is_ok());
        assert!(check_user_data(Some("#cloud-config\n")).is_ok());
        assert!(reason("#cloud-config\n- a\n- b\n").contains("mapping"));
        assert!(reason("#cloud-config\na: 1\n---\nb: 2\n").contains("one YAML document"));
        assert!(reason("#cloud-config\na: [1\n").contains("not valid YAML"));
        let big = format!("#!/bin/sh\n{}", "x".repeat(MAX_USER_DATA));
        assert_eq!(
            reason(&big),
            format!(
                "{} bytes: user data is at most 16384 bytes (16 KiB)",
                big.len()
            )
        );
    }

    #[test]
    fn user_data_is_part_of_what_an_idempotency_key_stands_for() {
        let req = |u: Option<&str>| LaunchRequest {
            sku: "h100.1x".into(),
            listing: "ubuntu-24.04-cuda".into(),
            name: "job".into(),
            idempotency_key: "launch-0001".into(),
            ssh_public_key: KEY.into(),
            user_data: u.map(str::to_owned),
            ..LaunchRequest::default()
        };
        let plain = ValidLaunch::check(&req(None)).unwrap().fingerprint;
        let a = ValidLaunch::check(&req(Some("#!/bin/sh\necho a\n")))
            .unwrap()
            .fingerprint;
        let b = ValidLaunch::check(&req(Some("#!/bin/sh\necho b\n")))
            .unwrap()
            .fingerprint;
        assert_ne!(plain, a);
        assert_ne!(a, b);
        // Empty user data is none: the fingerprint launches always had.
        assert_eq!(
            ValidLaunch::check(&req(Some(""))).unwrap().fingerprint,
            plain
        );
    }

    #[test]
    fn a_lifetime_is_part_of_what_an_idempotency_key_stands_for() {
        let req = |hours: Option<u32>| LaunchRequest {
            sku: "h100.1x".into(),
            listing: "ubuntu-24.04-cuda".into(),
            name: "job".into(),
            idempotency_key: "launch-0001".into(),
            ssh_public_key: KEY.into(),
            lifetime_hours: hours,
            ..LaunchRequest::default()
        };
        let fingerprint = |hours| ValidLaunch::check(&req(hours)).unwrap().fingerprint;
        assert_ne!(fingerprint(Some(8)), fingerprint(Some(24)));
        assert_ne!(fingerprint(Some(8)), fingerprint(None));
        assert_eq!(fingerprint(Some(8)), fingerprint(Some(8)));
    }
}
