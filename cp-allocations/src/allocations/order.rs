//! A launch as a person orders it, from the portal's form, the API or `gpuctl` (through the
//! API): saved keys by id, keys typed in, one of them perhaps to be saved too. One
//! conversion to the [`LaunchRequest`] that [`AllocationsApi::launch`] checks, so a launch
//! option is added here once and every surface has it.
//!
//! Errors name the order's fields, which are the public API's (`image`, `ssh_public_keys`),
//! so the form, the API and the CLI describe a refusal in the same words.

use super::{AllocationsApi, LaunchRequest, Launched, Tags};
use cp_base::ControlPlane;
use cp_base::error::{Error, Result};
use cp_base::ids::SshKeyId;
use cp_identity::account::AccountApi;
use cp_identity::auth::Principal;
use cp_identity::tenancy::{Project, ProjectOperators};

/// What a tenant orders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchOrder {
    pub sku: String,
    /// `None`: any of the SKU's regions.
    pub region: Option<String>,
    /// The marketplace listing's slug (an OS image is a listing too).
    pub image: String,
    /// `None`: the listing's newest published version.
    pub version: Option<String>,
    pub name: String,
    pub keys: OrderKeys,
    /// The same key twice creates one allocation.
    pub idempotency_key: String,
    /// Release it automatically after this many hours; `None`: when released.
    pub lifetime_hours: Option<u32>,
    pub published_ports: Vec<u16>,
    pub tags: Tags,
    pub user_data: Option<String>,
    /// Volumes of the project to attach.
    pub volumes: Vec<cp_base::ids::VolumeId>,
}

/// The SSH keys a launch installs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderKeys {
    /// The orderer's saved keys (a key of someone else's is "not found").
    pub saved: Vec<SshKeyId>,
    /// Public key lines typed in.
    pub typed: Vec<String>,
    /// Also save the one typed key under this name (the launch form's "save as"); ignored
    /// when none is typed.
    pub save_as: Option<String>,
}

/// See [`AllocationsApi::launch_order`].
pub(super) async fn launch(
    cp: &ControlPlane,
    orderer: &Principal,
    who: &Project<ProjectOperators>,
    order: LaunchOrder,
    request_id: Option<&str>,
) -> Result<Launched> {
    let ssh_public_key = keys(cp, orderer, order.keys, request_id).await?;
    let req = LaunchRequest {
        sku: order.sku,
        region: order.region.unwrap_or_default(),
        listing: order.image,
        version: order.version.unwrap_or_default(),
        ssh_public_key,
        name: order.name,
        idempotency_key: order.idempotency_key,
        lifetime_hours: order.lifetime_hours,
        published_ports: order.published_ports,
        tags: order.tags,
        user_data: order.user_data,
        volumes: order.volumes,
    };
    cp.launch(who, &req, request_id).await.map_err(|e| match e {
        Error::Invalid { field, reason } => Error::Invalid {
            field: order_field(field),
            reason,
        },
        e => e,
    })
}

/// The key lines to install, one per line: the saved ones asked for, then the typed ones
/// (saving the typed one when asked).
pub(super) async fn keys(
    cp: &ControlPlane,
    orderer: &Principal,
    keys: OrderKeys,
    request_id: Option<&str>,
) -> Result<String> {
    let mut lines = cp.ssh_key_lines(orderer, &keys.saved).await?;
    let typed: Vec<String> = keys
        .typed
        .into_iter()
        .filter(|k| !k.trim().is_empty())
        .collect();
    if let Some(name) = keys.save_as.filter(|n| !n.trim().is_empty()) {
        match typed.as_slice() {
            [] => {}
            [key] => save_typed_key(cp, orderer, &name, key, request_id).await?,
            _ => {
                return Err(Error::Invalid {
                    field: "save_key_as",
                    reason: "type exactly one key to save it".into(),
                });
            }
        }
    }
    lines.extend(typed);
    Ok(lines.join("\n"))
}

/// Saves the typed key under `name`. Already saved is not an error: launching with it is
/// what was asked.
async fn save_typed_key(
    cp: &ControlPlane,
    orderer: &Principal,
    name: &str,
    key: &str,
    request_id: Option<&str>,
) -> Result<()> {
    match cp.add_ssh_key(orderer, name, key, request_id).await {
        Ok(_) | Err(Error::Conflict(_)) => Ok(()),
        // Here the key's name is the "save as" field.
        Err(Error::Invalid {
            field: "name",
            reason,
        }) => Err(Error::Invalid {
            field: "save_key_as",
            reason,
        }),
        Err(Error::Invalid { field, reason }) => Err(Error::Invalid {
            field: order_field(field),
            reason,
        }),
        Err(e) => Err(e),
    }
}

/// The order's name for a field the launch or the key check names.
pub(super) fn order_field(field: &'static str) -> &'static str {
    match field {
        "listing" => "image",
        "ssh_public_key" | "public_key" | "key" => "ssh_public_keys",
        f => f,
    }
}

#[cfg(test)]
mod tests {
    use super::order_field;

    #[test]
    fn refusals_name_the_orders_fields() {
        assert_eq!(order_field("listing"), "image");
        assert_eq!(order_field("ssh_public_key"), "ssh_public_keys");
        assert_eq!(order_field("public_key"), "ssh_public_keys");
        assert_eq!(order_field("name"), "name");
        assert_eq!(order_field("idempotency_key"), "idempotency_key");
    }
}
