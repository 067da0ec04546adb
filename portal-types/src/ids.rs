//! Identifier newtypes. A `TenantId` can't be passed where a `ProjectId` is expected.

use std::fmt;
use std::str::FromStr;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(value_type = String, format = Uuid))]
        #[serde(transparent)]
        #[cfg_attr(feature = "sqlx", sqlx(transparent))]
        pub struct $name(pub uuid::Uuid);

        impl $name {
            #[cfg(feature = "sqlx")]
            pub fn new_random() -> Self {
                Self(uuid::Uuid::new_v4())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                uuid::Uuid::parse_str(s).map(Self)
            }
        }

        impl From<uuid::Uuid> for $name {
            fn from(u: uuid::Uuid) -> Self {
                Self(u)
            }
        }

        impl From<$name> for IdArg<$name> {
            fn from(id: $name) -> Self {
                Self(Ok(id))
            }
        }
    };
}
uuid_id!(
    /// An organization: the ownership root.
    TenantId
);
uuid_id!(
    /// A project inside a tenant: the operational scope that owns resources.
    ProjectId
);
uuid_id!(
    /// A person (or break-glass admin). Attribution only; users never own resources.
    UserId
);
uuid_id!(
    /// An enrolled GPU host.
    NodeId
);
uuid_id!(
    /// A tenant's invoice for one month and currency.
    InvoiceId
);
uuid_id!(
    /// An approved, schedulable bundle on one node (GPU, NVMe, IB VF, CPUs, memory).
    SlotId
);
uuid_id!(
    /// A unit of work queued for a node agent.
    AgentTaskId
);
uuid_id!(
    /// A sellable outcome in the catalog.
    SkuId
);
uuid_id!(
    /// Who publishes marketplace listings: the platform, or an approved organization.
    PublisherId
);
uuid_id!(
    /// A marketplace listing: an OS image, ML stack or app.
    ListingId
);
uuid_id!(
    /// A reviewed version of a listing: what an allocation is launched with.
    ListingVersionId
);
uuid_id!(
    /// A project's lease of slots or of a whole node.
    AllocationId
);
uuid_id!(
    /// A project's block volume on its region's storage backend.
    VolumeId
);
uuid_id!(
    /// Allocations of one SKU placed together within one leaf, spine group or fabric.
    ClusterId
);
uuid_id!(
    /// A point-in-time copy of a volume, from which new volumes are made.
    SnapshotId
);
uuid_id!(
    /// A public key a user saved on their account page.
    SshKeyId
);
uuid_id!(
    /// A bearer token for the public API, acting for the person who made it.
    ApiTokenId
);

/// An id as a caller sent it to a server function: typed when it parses, kept as sent when it
/// does not. Leptos decodes arguments before the function runs, so a strict id would answer a
/// malformed one with 400 before anyone asked who is calling. Carried this way, the function
/// checks the caller first and then answers a malformed id as it answers another tenant's:
/// not found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdArg<T>(Result<T, String>);

impl<T> IdArg<T> {
    /// The id, or `None` where what was sent names nothing.
    pub fn known(self) -> Option<T> {
        self.0.ok()
    }

    /// Whether the field was left empty (an "any" choice in a filter).
    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Err(sent) if sent.trim().is_empty())
    }
}

impl<T: FromStr> IdArg<T> {
    /// What a URL or a form field says, typed if it is an id.
    pub fn read(sent: &str) -> Self {
        Self(sent.trim().parse().map_err(|_| sent.to_string()))
    }
}

/// Nothing sent yet: names nothing.
impl<T> Default for IdArg<T> {
    fn default() -> Self {
        Self(Err(String::new()))
    }
}

impl<T: FromStr> From<&str> for IdArg<T> {
    fn from(sent: &str) -> Self {
        Self::read(sent)
    }
}

impl<T: FromStr> From<String> for IdArg<T> {
    fn from(sent: String) -> Self {
        Self::read(&sent)
    }
}

impl<T: fmt::Display> fmt::Display for IdArg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(id) => id.fmt(f),
            Err(sent) => f.write_str(sent),
        }
    }
}

impl<T: fmt::Display> serde::Serialize for IdArg<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, T: FromStr> serde::Deserialize<'de> for IdArg<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|sent| Self::read(&sent))
    }
}

#[cfg(test)]
mod id_arg_tests {
    use super::*;

    #[test]
    fn an_id_arg_keeps_what_does_not_parse_and_sends_it_back_as_it_came() {
        let id = AllocationId(uuid::Uuid::from_u128(7));
        let sent: IdArg<AllocationId> = serde_json::from_str(&format!("\"{id}\"")).unwrap();
        assert_eq!(sent.clone().known(), Some(id));
        assert_eq!(serde_json::to_string(&sent).unwrap(), format!("\"{id}\""));

        let bad: IdArg<AllocationId> = serde_json::from_str("\"not-an-id\"").unwrap();
        assert_eq!(bad.to_string(), "not-an-id");
        assert_eq!(bad.known(), None);
        assert_eq!(IdArg::<NodeId>::read(" ").known(), None);
    }
}
