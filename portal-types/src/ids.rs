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
    /// A public key a user saved on their account page.
    SshKeyId
);
uuid_id!(
    /// A bearer token for the public API, acting for the person who made it.
    ApiTokenId
);
