//! What the portal and the API show of an allocation: its list row and its page. Times are
//! times (RFC 3339 in JSON); the page formats them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{AllocationId, Money, ProjectId};

/// Labels a tenant puts on an allocation to find it again (`team=vision`), at most
/// [`MAX_TAGS`]; keys are lowercase letters, digits, `.`, `_` and `-`.
pub type Tags = BTreeMap<String, String>;

/// The most tags one allocation carries.
pub const MAX_TAGS: usize = 16;

/// A guest TCP port published on the host, and where it is reached.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PortAddress {
    /// The port inside the VM.
    pub guest_port: u16,
    /// `host:port` to connect to.
    pub address: String,
}

/// Where a tenant connects with SSH, as the platform planned it: the node's approved public
/// address, the port it forwards to the guest's 22, and the listing's SSH user. Never text a
/// host reported: the database checks each field's form, and `gpuctl ssh` builds its argv from
/// these fields, not by splitting [`SshEndpoint::command`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SshEndpoint {
    /// A DNS name or an IP address.
    pub host: String,
    pub port: u16,
    pub user: String,
}

impl SshEndpoint {
    /// What a tenant types: `ssh -p PORT USER@HOST` (no `-p` for port 22).
    pub fn command(&self) -> String {
        let SshEndpoint { host, port, user } = self;
        if *port == 22 {
            format!("ssh {user}@{host}")
        } else {
            format!("ssh -p {port} {user}@{host}")
        }
    }

    /// The argv a program runs: options end before the destination, so nothing in a field
    /// is ever read as an option; `remote` (a command to run there) follows it.
    pub fn argv(&self, remote: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut argv = vec![
            "ssh".to_owned(),
            "-p".to_owned(),
            self.port.to_string(),
            "--".to_owned(),
            format!("{}@{}", self.user, self.host),
        ];
        argv.extend(remote);
        argv
    }
}

/// One allocation in a project's list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AllocationSummary {
    pub id: AllocationId,
    pub project_id: ProjectId,
    pub name: String,
    pub sku: String,
    pub gpu_count: i32,
    pub region: String,
    /// The lifecycle state.
    pub state: String,
    /// What the UI shows: the state, unless desired and actual disagree ("releasing",
    /// "failing", "failed").
    pub projected: String,
    /// The SKU's price per hour, fixed at launch (a listing's fee comes on top).
    pub price_per_hour: Money,
    /// What it has cost since it started running, its listing's fee included (rounded down
    /// to the cent); none before it ran. Stops growing once it is released.
    #[serde(default)]
    pub cost_so_far: Option<Money>,
    pub tags: Tags,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: OffsetDateTime,
    /// When it will be released by itself, if it was launched for a number of hours.
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<OffsetDateTime>,
    /// `ssh -p port user@host`, once running: [`SshEndpoint::command`] of `ssh_endpoint`.
    pub ssh: Option<String>,
    /// Where to connect, field by field, once running.
    #[serde(default)]
    pub ssh_endpoint: Option<SshEndpoint>,
    /// The published guest ports, once running.
    pub published: Vec<PortAddress>,
}

/// A lifecycle transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Transition {
    pub from: Option<String>,
    pub to: String,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: OffsetDateTime,
    /// Since the previous transition.
    pub after_ms: i64,
    pub detail: Option<String>,
}

/// A phase the node agent reported for one of the allocation's tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Phase {
    pub task: String,
    pub phase: String,
    pub status: String,
    pub elapsed_ms: i64,
    pub detail: Option<String>,
}

/// A slot's verified cleanup certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Certificate {
    pub slot_index: i32,
    pub nvme_serial: String,
    pub wipe_method: String,
    pub wipe_verified: bool,
    pub gpu_reset: bool,
    pub firmware_ok: bool,
    pub wipe_ms: Option<i64>,
    pub verified_samples: Option<i32>,
    pub gpu_firmware: Option<String>,
    pub signature: String,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub received_at: OffsetDateTime,
}

/// The guest's last GPU report, as its node forwarded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuUtilisation {
    /// Mean utilisation over the guest's GPUs.
    pub percent: i16,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: OffsetDateTime,
}

/// A GPU health event on one of the allocation's GPUs while it held them, as its tenant sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuHealthNotice {
    /// The slot of the GPU (as in `slot_indexes`).
    pub slot_index: i32,
    /// What the driver reported, e.g. "XID 79: GPU has fallen off the bus."
    pub detail: String,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub observed_at: OffsetDateTime,
    /// Whether the fleet's policy took the GPU out of service for it: nothing new is placed on
    /// it until an operator has looked.
    pub out_of_service: bool,
}

impl GpuHealthNotice {
    /// "At 2026-11-26 12:00 UTC the GPU in slot 3 reported XID 79: … It is out of service: …"
    pub fn sentence(&self) -> String {
        let mut s = format!(
            "At {} the GPU in slot {} reported {}",
            crate::utc(self.observed_at),
            self.slot_index,
            self.detail.trim_end_matches('.'),
        );
        s.push('.');
        if self.out_of_service {
            s.push_str(
                " It is out of service: work on it may fail. Release this allocation and launch \
                 again to get a healthy GPU.",
            );
        }
        s
    }
}

/// An allocation's page: what it is, where, its state on both sides, how to reach it, and
/// its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AllocationDetail {
    pub id: AllocationId,
    pub canonical_name: String,
    pub project_id: ProjectId,
    pub name: String,
    pub sku: String,
    pub shape: String,
    pub gpu_count: i32,
    pub region: String,
    pub node: String,
    pub slot_indexes: Vec<i32>,
    /// The listing and version it was launched with, e.g. "PyTorch 2.5".
    pub image: String,
    /// The listing's slug (its marketplace page).
    pub listing: String,
    /// The SKU's price per hour, fixed at launch.
    pub price_per_hour: Money,
    /// The listing's fee per hour on top (zero for most images).
    pub fee_per_hour: Money,
    pub tags: Tags,
    pub desired_state: String,
    pub observed_state: String,
    pub state: String,
    pub projected: String,
    /// The current (or last) task and its last phase.
    pub execution: Option<String>,
    pub failure: Option<String>,
    pub placement_why: String,
    /// `ssh -p port user@host`, once running: [`SshEndpoint::command`] of `ssh_endpoint`.
    pub ssh: Option<String>,
    /// Where to connect, field by field, once running.
    #[serde(default)]
    pub ssh_endpoint: Option<SshEndpoint>,
    /// The published guest ports, once running.
    pub published: Vec<PortAddress>,
    pub gpu_utilisation: Option<GpuUtilisation>,
    /// GPU health events on its GPUs since it was placed, newest first.
    pub gpu_health: Vec<GpuHealthNotice>,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub expires_at: Option<OffsetDateTime>,
    /// When it started running (and so costing), if it has.
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub running_since: Option<OffsetDateTime>,
    /// When it stopped costing: its release. None while it runs.
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub ran_until: Option<OffsetDateTime>,
    /// How long it has run (until its release, or until now), in seconds.
    #[serde(default)]
    pub ran_for_s: Option<i64>,
    /// What it has cost so far (its final cost once released), its listing's fee included,
    /// rounded down to the cent; none before it ran.
    #[serde(default)]
    pub cost_so_far: Option<Money>,
    pub transitions: Vec<Transition>,
    pub phases: Vec<Phase>,
    pub certificates: Vec<Certificate>,
    /// Whether the caller may release it now.
    pub can_release: bool,
    /// A stopping or stopped instance's boot disk, kept as storage until it is started
    /// again (or released).
    #[serde(default)]
    pub stopped_disk: Option<StoppedDisk>,
    /// What a stop would keep, and its monthly cost, while it runs and can be stopped (it is
    /// no cluster's member, and its region prices storage).
    #[serde(default)]
    pub stop_keeps: Option<StoppedDisk>,
    /// Whether the caller may stop it now.
    #[serde(default)]
    pub can_stop: bool,
    /// Whether the caller may start it now (it is stopped).
    #[serde(default)]
    pub can_start: bool,
}

/// A stopped instance's boot disk, saved on the region's storage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoppedDisk {
    pub size_gib: u32,
    /// What it costs for a month while the instance stays stopped, at the region's storage
    /// price when it was saved.
    pub monthly_cost: Money,
}

impl StoppedDisk {
    /// "7,154 GiB for 715.40 USD a month".
    pub fn label(&self) -> String {
        format!(
            "{} GiB for {} a month",
            crate::money::group_thousands(&self.size_gib.to_string()),
            self.monthly_cost.grouped()
        )
    }
}

impl AllocationDetail {
    /// "14.00 USD per hour (12.50 USD SKU + 1.50 USD listing fee)", or "12.50 USD per hour".
    pub fn price_label(&self) -> String {
        if self.fee_per_hour.amount_minor > 0 {
            let total = Money {
                amount_minor: self.price_per_hour.amount_minor + self.fee_per_hour.amount_minor,
                currency: self.price_per_hour.currency.clone(),
            };
            format!(
                "{total} per hour ({} SKU + {} listing fee)",
                self.price_per_hour, self.fee_per_hour
            )
        } else {
            format!("{} per hour", self.price_per_hour)
        }
    }
}

/// An instance's name as typed, checked: 1 to 63 letters, digits and '-', starting and ending
/// with a letter or digit; lowercased. The refusal quotes what was typed. The launch form
/// checks it as the person types; the control plane checks it again.
pub fn check_instance_name(typed: &str) -> Result<String, String> {
    let name = typed.trim().to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(name)
    } else {
        let shown: String = typed.trim().chars().take(70).collect();
        Err(format!(
            "{shown:?}: use 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// Tags as people type them: "team=vision, stage=dev", commas or new lines, a tag without
/// `=` having an empty value; the inverse of [`tags_label`]. The control plane checks what
/// keys and values may be.
pub fn parse_tags(input: &str) -> Tags {
    input
        .split([',', '\n'])
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (k, v) = t.split_once('=').unwrap_or((t, ""));
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect()
}

/// Placement's reason (written for operators: partitions, NUMA nodes, slot counts) in the
/// words a tenant reads it in: what it means for their GPUs. An unknown reason is shown as it
/// is rather than guessed at.
pub fn placement_in_words(why: &str) -> String {
    if why.starts_with("the whole node") {
        "A whole machine, yours alone: the smallest free one that fits.".into()
    } else if why.starts_with("NVLink partition") {
        "Your GPUs are joined by NVLink on one machine, for the fastest GPU-to-GPU traffic.".into()
    } else if why.contains("NVLink partition") {
        "One GPU, placed so that NVLink groups stay whole for larger instances.".into()
    } else if why.contains("across NUMA nodes") {
        "Your GPUs are on one machine but split across its CPU sockets: no single socket had \
         enough free GPUs."
            .into()
    } else if why.starts_with("1 slot(s) on NUMA node") {
        "Your GPU and its CPU cores share one CPU socket, for the fastest host-to-GPU traffic."
            .into()
    } else if why.contains("on NUMA node") {
        "Your GPUs and their CPU cores share one CPU socket, for the fastest host-to-GPU traffic."
            .into()
    } else {
        why.to_string()
    }
}

/// "team=vision, stage=dev", for a page.
pub fn tags_label(tags: &Tags) -> String {
    tags.iter()
        .map(|(k, v)| {
            if v.is_empty() {
                k.clone()
            } else {
                format!("{k}={v}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The day, in UTC: `2026-11-03`.
pub fn day(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}

/// `2026-11-21 13:02:11 UTC`: how pages write a time.
pub fn utc(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_in_utc_to_the_second() {
        let t = OffsetDateTime::from_unix_timestamp(1_763_730_131).unwrap();
        assert_eq!(utc(t), "2025-11-21 13:02:11 UTC");
        let east = t.to_offset(time::UtcOffset::from_hms(9, 0, 0).unwrap());
        assert_eq!(utc(east), "2025-11-21 13:02:11 UTC");
        // 23:00 on the 20th in UTC-5 is already the 21st in UTC.
        let west = OffsetDateTime::from_unix_timestamp(1_763_697_600)
            .unwrap()
            .to_offset(time::UtcOffset::from_hms(-5, 0, 0).unwrap());
        assert_eq!(west.day(), 20);
        assert_eq!(day(west), "2025-11-21");
    }

    #[test]
    fn times_travel_as_rfc_3339() {
        let t = OffsetDateTime::from_unix_timestamp(1_763_730_131).unwrap();
        let p = Transition {
            from: None,
            to: "placed".into(),
            at: t,
            after_ms: 0,
            detail: None,
        };
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["at"], "2025-11-21T13:02:11Z");
        assert_eq!(serde_json::from_value::<Transition>(json).unwrap(), p);
    }
}

#[cfg(test)]
mod tag_tests {
    use super::*;

    #[test]
    fn an_instance_name_is_checked_and_its_refusal_quotes_what_was_typed() {
        assert_eq!(check_instance_name(" Train-7 "), Ok("train-7".into()));
        for bad in ["", "-x", "x-", "Train_7", &"a".repeat(64)] {
            let e = check_instance_name(bad).unwrap_err();
            assert!(e.starts_with(&format!("{:?}", bad.trim())), "{e}");
        }
    }

    #[test]
    fn tags_read_as_typed_and_print_back() {
        let tags = parse_tags(" team=vision,stage = dev\ngpu-heavy\n\n");
        assert_eq!(
            tags,
            Tags::from([
                ("gpu-heavy".into(), String::new()),
                ("stage".into(), "dev".into()),
                ("team".into(), "vision".into()),
            ])
        );
        assert_eq!(tags_label(&tags), "gpu-heavy, stage=dev, team=vision");
        assert_eq!(parse_tags(&tags_label(&tags)), tags);
        assert!(parse_tags("  ,\n").is_empty());
    }
}

#[cfg(test)]
mod placement_words {
    use super::placement_in_words;

    #[test]
    fn each_reason_placement_gives_reads_as_what_it_means_for_the_gpus() {
        for (why, words) in [
            (
                "NVLink partition 2 (2 GPUs), leaving every larger free partition whole on gpu-a (8 free slots: best fit)",
                "joined by NVLink",
            ),
            (
                "slot 3: from an already broken NVLink partition on gpu-a (5 free slots: best fit)",
                "NVLink groups stay whole",
            ),
            (
                "2 slot(s) on NUMA node 1 (best fit) on gpu-b (4 free slots: best fit)",
                "Your GPUs and their CPU cores share one CPU socket",
            ),
            (
                "1 slot(s) on NUMA node 0 (best fit) on gpu-b (4 free slots: best fit)",
                "Your GPU and its CPU cores share one CPU socket",
            ),
            (
                "4 slots across NUMA nodes 0 and 1: no single NUMA node has 4 free on gpu-b (4 free slots: best fit)",
                "split across its CPU sockets",
            ),
            (
                "the whole node gpu-c (8 GPUs, no claims): the smallest free node that fits",
                "A whole machine",
            ),
        ] {
            let said = placement_in_words(why);
            assert!(said.contains(words), "{why} → {said}");
            assert!(!said.contains("slot") && !said.contains("NUMA"), "{said}");
        }
        assert_eq!(placement_in_words("imported"), "imported");
    }
}
