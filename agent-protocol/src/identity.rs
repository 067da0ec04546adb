//! A slot's deterministic network identity, computed the same way by the control plane (for
//! plans and the tenant's SSH details) and by the agent (which refuses a plan that disagrees).

use sha2::{Digest, Sha256};

/// `52:54:` + the first 4 bytes of sha256(`{node_id}:{slot_index}`), lowercase hex.
pub fn mac_address(node_id: &str, slot_index: u32) -> String {
    let h = Sha256::digest(format!("{node_id}:{slot_index}").as_bytes());
    format!("52:54:{:02x}:{:02x}:{:02x}:{:02x}", h[0], h[1], h[2], h[3])
}

/// `10.100.0.{10 + slot_index}`.
pub fn ip_address(slot_index: u32) -> String {
    format!("10.100.0.{}", 10 + slot_index)
}

/// The host's address on the slot network: every guest's gateway, DHCP and DNS server, and
/// telemetry sink.
pub const GATEWAY: &str = "10.100.0.1";

/// The slot network, `10.100.0.0/24`.
pub const SLOT_NETWORK: &str = "10.100.0.0/24";

/// The host-side name of the interface a slot's guest NIC is on: the VM's tap device (its
/// libvirt `<target dev>`), a bridge port.
pub fn slot_interface(slot_index: u32) -> String {
    format!("gslot{slot_index}")
}

/// Every project's private network: one L2 segment per project (a VXLAN across hosts), all
/// with this range, as every VPC may use the same one. A member's address is
/// [`private_address`] of its host number, unique within its project.
pub const PRIVATE_NETWORK: &str = "10.128.0.0/16";

/// The host numbers a project's members take on [`PRIVATE_NETWORK`] (`.0.10` to `.255.254`).
pub const PRIVATE_HOSTS: std::ops::RangeInclusive<u16> = 10..=65534;

/// `10.128.{host / 256}.{host % 256}`.
pub fn private_address(host: u16) -> String {
    format!("10.128.{}.{}", host >> 8, host & 0xff)
}

/// The host number of a private address, if it is one ([`PRIVATE_HOSTS`] in
/// [`PRIVATE_NETWORK`]).
pub fn private_host(address: &str) -> Option<u16> {
    let rest = address.strip_prefix("10.128.")?;
    let (hi, lo) = rest.split_once('.')?;
    let host = hi.parse::<u8>().ok()? as u16 * 256 + lo.parse::<u8>().ok()? as u16;
    (PRIVATE_HOSTS.contains(&host) && private_address(host) == address).then_some(host)
}

/// A private NIC's MAC: `52:56:0a:80:` + its host number, so unique within a project's
/// segment like the address it follows from.
pub fn private_mac(host: u16) -> String {
    format!("52:56:0a:80:{:02x}:{:02x}", host >> 8, host & 0xff)
}

/// The host-side name of a slot's private NIC (the VM's second tap), a port of its project's
/// [`overlay_bridge`].
pub fn private_interface(slot_index: u32) -> String {
    format!("gpriv{slot_index}")
}

/// The VXLAN network identifiers a project may have (24 bits; below 4096 left to the
/// operator's own segments).
pub const VNIS: std::ops::RangeInclusive<u32> = 4096..=16_777_215;

/// The bridge a project's private NICs on one host join.
pub fn overlay_bridge(vni: u32) -> String {
    format!("gpb{vni}")
}

/// The VXLAN device that carries a project's segment to other hosts, a port of its bridge.
pub fn overlay_vxlan(vni: u32) -> String {
    format!("gpx{vni}")
}

/// The UDP port VXLAN travels on between hosts (IANA's).
pub const VXLAN_PORT: u16 = 4789;

/// How many public ports each slot owns on its host, from the host's port base: the first
/// forwards to the guest's SSH port, the others to the ports the tenant publishes.
pub const PORTS_PER_SLOT: u16 = 8;

/// The most ports one allocation may publish besides SSH.
pub const PUBLISHED_PORTS_MAX: usize = PORTS_PER_SLOT as usize - 1;

/// The guest ports to publish, sorted: each 1–65535, not SSH's 22, no repeats, at most
/// [`PUBLISHED_PORTS_MAX`]; or why not, in words. A launch's ports and a listing's defaults
/// follow the same rule.
pub fn published_ports(ports: &[u16]) -> Result<Vec<u16>, String> {
    if ports.len() > PUBLISHED_PORTS_MAX {
        return Err(format!(
            "{} ports: publish at most {PUBLISHED_PORTS_MAX} besides SSH",
            ports.len()
        ));
    }
    let mut sorted = ports.to_vec();
    sorted.sort_unstable();
    if let Some(bad) = sorted.iter().find(|&&p| p == 0 || p == 22) {
        return Err(format!(
            "{bad}: give TCP ports from 1 to 65535 other than 22 (SSH is published already)"
        ));
    }
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("{} is listed twice", w[0]));
    }
    Ok(sorted)
}

/// "8888, 6006" (commas or spaces) as port numbers, or the first word that is not one.
pub fn parse_ports(input: &str) -> Result<Vec<u16>, String> {
    input
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .take(64)
        .map(|p| {
            p.parse::<u16>()
                .map_err(|_| format!("{p:?} is not a TCP port (1 to 65535)."))
        })
        .collect()
}

/// The `k`-th public port of a slot (0: SSH) on a host whose range starts at `base`, or `None`
/// past 65535 or past the slot's block.
pub fn public_port(base: u16, slot_index: u32, k: usize) -> Option<u16> {
    if k >= PORTS_PER_SLOT as usize {
        return None;
    }
    let port = base as u64 + slot_index as u64 * PORTS_PER_SLOT as u64 + k as u64;
    u16::try_from(port).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fixed vectors: sha256("00000000-0000-0000-0000-000000000001:0") starts b5 e2 f5 90…,
    /// computed independently with `printf '%s' … | sha256sum`.
    #[test]
    fn mac_and_ip_match_fixed_vectors() {
        let node = "00000000-0000-0000-0000-000000000001";
        assert_eq!(mac_address(node, 0), MAC_0);
        assert_eq!(mac_address(node, 7), MAC_7);
        assert_ne!(
            mac_address("00000000-0000-0000-0000-000000000002", 0),
            MAC_0
        );
        assert_eq!(ip_address(0), "10.100.0.10");
        assert_eq!(ip_address(7), "10.100.0.17");
    }

    #[test]
    fn each_slot_owns_a_block_of_public_ports() {
        assert_eq!(public_port(22000, 0, 0), Some(22000));
        assert_eq!(public_port(22000, 1, 0), Some(22008));
        assert_eq!(public_port(22000, 1, 7), Some(22015));
        assert_eq!(public_port(22000, 1, 8), None, "past the slot's block");
        assert_eq!(public_port(65530, 1, 0), None, "past 65535");
        assert_eq!(slot_interface(3), "gslot3");
    }

    #[test]
    fn a_private_address_and_its_mac_follow_from_the_host_number() {
        assert_eq!(private_address(10), "10.128.0.10");
        assert_eq!(private_address(258), "10.128.1.2");
        assert_eq!(private_mac(258), "52:56:0a:80:01:02");
        assert_eq!(private_host("10.128.1.2"), Some(258));
        for bad in [
            "10.128.0.9",
            "10.128.255.255",
            "10.129.0.10",
            "10.128.01.2",
            "10.128.1",
        ] {
            assert_eq!(private_host(bad), None, "{bad}");
        }
        assert_eq!(overlay_bridge(4096), "gpb4096");
        assert!(overlay_vxlan(*VNIS.end()).len() <= 15, "an interface name");
    }

    const MAC_0: &str = "52:54:b5:e2:f5:90";
    const MAC_7: &str = "52:54:df:a3:c5:27";
}
