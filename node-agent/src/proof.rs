//! Cleanup proofs, signed with the node credential: HMAC-SHA-256 keyed with
//! SHA-256(credential) (what the control plane stores), over the proof's signing message.

use agent_protocol::{CleanupProof, SlotCleanup};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Builds and signs the proof for `allocation` on `node`.
pub fn sign(
    credential: &str,
    node_id: &str,
    allocation_id: &str,
    slots: Vec<SlotCleanup>,
) -> CleanupProof {
    let mut proof = CleanupProof {
        allocation_id: allocation_id.to_string(),
        node_id: node_id.to_string(),
        slots,
        signature: String::new(),
    };
    let key = Sha256::digest(credential.as_bytes());
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(proof.signing_message().as_bytes());
    proof.signature = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    proof
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_every_fact() {
        let slot = SlotCleanup {
            slot_id: "s1".into(),
            nvme_serial: "SN1".into(),
            wipe_method: "nvme-format-crypto".into(),
            wipe_ms: 1200,
            wipe_verified: true,
            verified_samples: 64,
            gpu_reset: true,
            gpu_firmware: "96.00.99.00.01".into(),
            firmware_ok: true,
        };
        let a = sign("gpn_secret", "n1", "a1", vec![slot.clone()]);
        assert_eq!(a.signature.len(), 64);
        assert_eq!(a, sign("gpn_secret", "n1", "a1", vec![slot.clone()]));
        assert_ne!(
            a.signature,
            sign("gpn_other", "n1", "a1", vec![slot.clone()]).signature
        );
        let unverified = SlotCleanup {
            wipe_verified: false,
            ..slot
        };
        assert_ne!(
            a.signature,
            sign("gpn_secret", "n1", "a1", vec![unverified]).signature
        );
    }
}
