//! A tenant's user data: sealed at rest, opened only for its agent, forgotten once provisioned.

use cp_base::error::{Error, Result};
use cp_base::ids::AllocationId;

/// The key of a provision task's spec that holds the tenant's user data, sealed; the agent
/// is handed it open, as the plan's `user_data`.
pub(crate) const SEALED_USER_DATA: &str = "user_data_sealed";

/// Where a tenant's user data is sealed to: this allocation's, and nothing else's.
fn user_data_place(id: AllocationId) -> String {
    format!("allocations.user_data:{id}")
}

/// Seals a tenant's user data as stored: it may carry their secrets, so it is kept like
/// identity providers' client secrets, readable only with the deployment's keys.
pub(crate) fn seal_user_data(
    keys: &cp_base::secrets::Keyring,
    id: AllocationId,
    plain: &str,
) -> String {
    keys.seal(plain, &user_data_place(id))
}

/// A claimed provision's spec as the agent needs it: the sealed user data opened into the
/// plan's `user_data`. Other specs are returned as they are.
pub(crate) fn open_user_data(
    keys: &cp_base::secrets::Keyring,
    mut spec: serde_json::Value,
) -> Result<serde_json::Value> {
    let Some(sealed) = spec
        .as_object_mut()
        .and_then(|s| s.remove(SEALED_USER_DATA))
    else {
        return Ok(spec);
    };
    let (Some(sealed), Some(id)) = (
        sealed.as_str(),
        spec.get("allocation_id").and_then(|i| i.as_str()),
    ) else {
        return Err(Error::Corrupt("a provision's sealed user data".into()));
    };
    let id: AllocationId = id
        .parse()
        .map_err(|_| Error::Corrupt(format!("a provision for allocation {id:?}")))?;
    let plain = keys
        .open(sealed, &user_data_place(id))
        .map_err(|e| Error::Corrupt(format!("allocation {id}'s user data: {e}")))?;
    spec["user_data"] = plain.into();
    Ok(spec)
}
