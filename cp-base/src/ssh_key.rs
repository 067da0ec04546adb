//! A fresh Ed25519 key pair in OpenSSH's formats: the public key line `ssh-ed25519 AAAA… comment`
//! and the private key file (`openssh-key-v1`, unencrypted), as `ssh-keygen -t ed25519 -N ''`
//! writes them. Made with `ring` (already the control plane's cryptography), so no other
//! crate is needed for one format.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};

/// A key pair: the public key line and the private key file's text.
pub struct OpenSshKeyPair {
    pub public: String,
    pub private: String,
}

const KEY_TYPE: &[u8] = b"ssh-ed25519";

/// A new key pair whose public line ends with `comment` (letters, digits and `@._-` only).
pub fn ed25519(comment: &str) -> Result<OpenSshKeyPair, String> {
    if !comment
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "@._-".contains(c))
    {
        return Err(format!("{comment:?} can't be a key's comment"));
    }
    let random = SystemRandom::new();
    let mut seed = [0u8; 32];
    random
        .fill(&mut seed)
        .map_err(|_| "no randomness for a key".to_string())?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
        .map_err(|_| "an Ed25519 key from its seed".to_string())?;
    let public: [u8; 32] = pair
        .public_key()
        .as_ref()
        .try_into()
        .map_err(|_| "an Ed25519 public key is 32 bytes".to_string())?;
    let mut check = [0u8; 4];
    random
        .fill(&mut check)
        .map_err(|_| "no randomness for a key".to_string())?;

    let mut blob = Vec::new();
    string(&mut blob, KEY_TYPE);
    string(&mut blob, &public);

    let mut secret = Vec::new();
    secret.extend_from_slice(&check);
    secret.extend_from_slice(&check);
    string(&mut secret, KEY_TYPE);
    string(&mut secret, &public);
    string(&mut secret, &[&seed[..], &public[..]].concat());
    string(&mut secret, comment.as_bytes());
    for pad in 1..=7u8 {
        if secret.len() % 8 == 0 {
            break;
        }
        secret.push(pad);
    }

    let mut file = b"openssh-key-v1\0".to_vec();
    string(&mut file, b"none");
    string(&mut file, b"none");
    string(&mut file, b"");
    file.extend_from_slice(&1u32.to_be_bytes());
    string(&mut file, &blob);
    string(&mut file, &secret);

    let body = STANDARD.encode(&file);
    let mut private = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(70) {
        private.push_str(std::str::from_utf8(line).unwrap_or_default());
        private.push('\n');
    }
    private.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    Ok(OpenSshKeyPair {
        public: format!("ssh-ed25519 {} {comment}", STANDARD.encode(&blob)),
        private,
    })
}

/// SSH's `string`: a 32-bit big-endian length, then the bytes.
fn string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ssh-keygen -y` reads the private key and prints its public key: the line we made.
    #[test]
    fn ssh_keygen_reads_the_private_key_and_derives_the_public_line() {
        let pair = ed25519("cluster-ring@gpuaas").unwrap();
        assert_ne!(
            pair.private,
            ed25519("x").unwrap().private,
            "fresh each time"
        );
        assert!(ed25519("a b").is_err());
        let found = std::process::Command::new("sh")
            .args(["-c", "command -v ssh-keygen"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            println!("SKIPPED: ssh-keygen is not installed (apt-get install openssh-client)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("ssh-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("id_ed25519");
        std::fs::write(&path, &pair.private).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = std::process::Command::new("ssh-keygen")
            .arg("-y")
            .arg("-f")
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pair.public);
    }
}
