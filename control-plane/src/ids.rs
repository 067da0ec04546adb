//! Identifier newtypes, from `portal-types` (shared with the pages in the browser).

pub use portal_types::{
    AgentTaskId, AllocationId, ListingId, ListingVersionId, NodeId, ProjectId, PublisherId, SkuId,
    SlotId, SshKeyId, TenantId, UserId,
};
