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

    const MAC_0: &str = "52:54:b5:e2:f5:90";
    const MAC_7: &str = "52:54:df:a3:c5:27";
}
