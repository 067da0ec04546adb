//! Volumes: a project's block storage, kept off the GPU hosts so it outlives an instance and
//! any host of its region can attach it.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{AllocationId, ProjectId, SnapshotId, VolumeId};
use crate::{Currency, Invalid, Micros, Money};

/// The most a volume holds, in GiB (16 TiB).
pub const MAX_VOLUME_GIB: u32 = 16 * 1024;

/// Where a volume is in its life. The database holds the same table of moves
/// (`volume_transitions`) and refuses every other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum VolumeState {
    /// The storage backend is making it.
    Creating,
    /// Made, attached to nothing.
    Available,
    /// Being attached to an instance: served by the backend, then plugged in by the host.
    Attaching,
    InUse,
    /// Being unplugged from its instance and withdrawn by the backend.
    Detaching,
    /// Being erased; then deleted.
    Deleting,
    Deleted,
    /// A step failed; the reason says which. It can still be deleted.
    Error,
}

impl VolumeState {
    pub const ALL: [VolumeState; 8] = [
        VolumeState::Creating,
        VolumeState::Available,
        VolumeState::Attaching,
        VolumeState::InUse,
        VolumeState::Detaching,
        VolumeState::Deleting,
        VolumeState::Deleted,
        VolumeState::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Creating => "creating",
            VolumeState::Available => "available",
            VolumeState::Attaching => "attaching",
            VolumeState::InUse => "in_use",
            VolumeState::Detaching => "detaching",
            VolumeState::Deleting => "deleting",
            VolumeState::Deleted => "deleted",
            VolumeState::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        VolumeState::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a volume state"))
    }

    /// Whether a volume in this state may move to `next`.
    pub fn can_become(self, next: VolumeState) -> bool {
        use VolumeState::*;
        matches!(
            (self, next),
            (Creating, Available | Error)
                | (Available, Attaching | Deleting)
                | (Attaching, InUse | Detaching | Error)
                | (InUse, Detaching)
                | (Detaching, Available | Error)
                | (Deleting, Deleted | Error)
                | (Error, Deleting)
        )
    }

    /// Whether it holds (or is about to hold) storage that is billed and counts for quota.
    pub fn holds_storage(self) -> bool {
        !matches!(self, VolumeState::Deleted)
    }
}

impl fmt::Display for VolumeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str().replace('_', " "))
    }
}

/// A volume as its project's members, the API and the CLI read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Volume {
    pub id: VolumeId,
    pub project_id: ProjectId,
    pub name: String,
    pub region: String,
    pub size_gib: u32,
    /// `block`: attached to one instance at a time.
    pub kind: String,
    pub state: VolumeState,
    /// Why it is in `error`.
    pub error: Option<String>,
    /// The instance it is attached to (attaching, in use or detaching).
    pub attached_to: Option<AllocationId>,
    /// That instance's name.
    pub attached_name: Option<String>,
    /// The snapshot it was made from, if any (it may have been deleted since).
    #[serde(default)]
    pub source_snapshot: Option<SnapshotId>,
    /// That snapshot's name.
    #[serde(default)]
    pub source_snapshot_name: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub state_changed_at: OffsetDateTime,
    /// What it costs for a month (730 hours) at its size, at the storage price of its region
    /// when it was made; none for a volume made before storage had a price.
    #[serde(default)]
    pub monthly_cost: Option<Money>,
}

/// Where a snapshot is in its life (`snapshot_transitions` in the database).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SnapshotState {
    /// The storage backend is copying the volume.
    Creating,
    /// Kept; new volumes can be made from it.
    Available,
    /// Being erased.
    Deleting,
    Deleted,
    /// A step failed; `error` says which and why. It can be deleted.
    Error,
}

impl SnapshotState {
    pub const ALL: [SnapshotState; 5] = [
        SnapshotState::Creating,
        SnapshotState::Available,
        SnapshotState::Deleting,
        SnapshotState::Deleted,
        SnapshotState::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotState::Creating => "creating",
            SnapshotState::Available => "available",
            SnapshotState::Deleting => "deleting",
            SnapshotState::Deleted => "deleted",
            SnapshotState::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        SnapshotState::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a snapshot state"))
    }
}

impl fmt::Display for SnapshotState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A snapshot as its project's members, the API and the CLI read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    pub id: SnapshotId,
    pub project_id: ProjectId,
    /// The volume it was taken of.
    pub volume_id: VolumeId,
    pub volume_name: String,
    pub name: String,
    pub region: String,
    /// What it holds: its volume's size when it was taken. A volume made from it holds at
    /// least this.
    pub size_gib: u32,
    pub state: SnapshotState,
    /// Why it is in `error`.
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub created_at: OffsetDateTime,
    /// What keeping it costs for a month (730 hours), at its region's storage price when it
    /// was taken.
    pub monthly_cost: Money,
}

/// What a GiB of storage costs in a region, per GiB-month of 730 hours, rated per second.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoragePrice {
    pub region: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "USD"))]
    pub currency: Currency,
    /// Micro-units (10^-6 of the currency) per GiB-month: `100000` is 0.10.
    pub per_gib_month_micro: i64,
}

impl StoragePrice {
    /// Hours in the month storage is priced by, whatever the calendar says.
    pub const HOURS_PER_MONTH: i64 = 730;
    /// The most a GiB-month may cost: 1,000.00.
    pub const MAX_PER_GIB_MONTH: Micros = Micros(1_000_000_000);

    /// A price as an operator types it: `0.10 USD` per GiB-month (up to six decimals). Errors
    /// name `field`.
    pub fn parse(field: &'static str, region: &str, input: &str) -> Result<Self, Invalid> {
        let parts: Vec<&str> = input.split_whitespace().collect();
        let [amount, currency] = parts[..] else {
            return Err(Invalid::new(
                field,
                format!("{input:?}: write a price per GiB-month and a currency, e.g. \"0.10 USD\""),
            ));
        };
        let currency = Currency::parse_as(field, currency)?;
        let micro = Micros::parse_amount(field, amount, Self::MAX_PER_GIB_MONTH)?;
        if micro.0 == 0 {
            return Err(Invalid::new(field, "a storage price is above zero"));
        }
        Ok(StoragePrice {
            region: region.to_owned(),
            currency,
            per_gib_month_micro: micro.0,
        })
    }

    /// `0.10 USD`, or all six decimals where they are needed (`0.085 USD`).
    pub fn per_gib_month(&self) -> String {
        let m = Micros(self.per_gib_month_micro).to_string();
        let m = m.trim_end_matches('0');
        let m = match m.split_once('.') {
            Some((w, f)) if f.len() < 2 => format!("{w}.{f:0<2}"),
            _ => m.to_owned(),
        };
        format!("{m} {}", self.currency)
    }

    /// What `gib` GiB cost for a whole month, to the cent.
    pub fn monthly(&self, gib: u32) -> Money {
        Micros(self.per_gib_month_micro * i64::from(gib)).money(&self.currency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_price_is_read_as_typed_and_shown_as_people_write_it() {
        let p = StoragePrice::parse("price", "eu-west-1", "0.10 usd").unwrap();
        assert_eq!(p.per_gib_month_micro, 100_000);
        assert_eq!(p.per_gib_month(), "0.10 USD");
        assert_eq!(p.monthly(500), Money::new(5_000, "USD"));
        let fine = StoragePrice::parse("price", "eu-west-1", "0.085 EUR").unwrap();
        assert_eq!(fine.per_gib_month(), "0.085 EUR");
        assert_eq!(fine.monthly(3), Money::new(26, "EUR"));
        for bad in [
            "0.10",
            "0 USD",
            "0.1234567 USD",
            "-1 USD",
            "1001 USD",
            "ten USD",
            "0.10 XYZ",
        ] {
            let err = StoragePrice::parse("price", "eu-west-1", bad).unwrap_err();
            assert_eq!(err.field, "price", "{bad}");
        }
    }

    #[test]
    fn only_the_state_machines_moves_are_allowed() {
        use VolumeState::*;
        let allowed = [
            (Creating, Available),
            (Creating, Error),
            (Available, Attaching),
            (Available, Deleting),
            (Attaching, InUse),
            (Attaching, Detaching),
            (Attaching, Error),
            (InUse, Detaching),
            (Detaching, Available),
            (Detaching, Error),
            (Deleting, Deleted),
            (Deleting, Error),
            (Error, Deleting),
        ];
        for from in VolumeState::ALL {
            for to in VolumeState::ALL {
                assert_eq!(
                    from.can_become(to),
                    allowed.contains(&(from, to)),
                    "{from} → {to}"
                );
            }
        }
        // What people must not be able to do, said outright.
        assert!(!InUse.can_become(Deleting), "delete while attached");
        assert!(
            !Deleted.can_become(Available),
            "a deleted volume comes back"
        );
        assert!(!InUse.can_become(Attaching), "attach twice");
        for s in VolumeState::ALL {
            assert_eq!(VolumeState::parse(s.as_str()), Ok(s));
        }
        assert!(VolumeState::parse("gone").is_err());
    }
}
