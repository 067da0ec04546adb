//! SSH public keys, checked the way `sshd` would read them from `authorized_keys`.

use base64::Engine;

use cp_base::error::{Error, Result};

const TYPES: &[&str] = &[
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-rsa",
];

fn invalid(reason: impl Into<String>) -> Error {
    Error::Invalid {
        field: "ssh_public_key",
        reason: reason.into(),
    }
}

/// Reads one SSH wire-format string (u32 length, then bytes).
fn read_string<'a>(blob: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    let s = blob.get(4..4 + len)?;
    *blob = &blob[4 + len..];
    Some(s)
}

/// One public key line: `type base64 [comment]`. Returns it normalised (single spaces, no
/// trailing newline). Private keys, several keys, unknown types, a body that doesn't decode or
/// doesn't match its type, and RSA keys under 2048 bits are refused with the reason.
pub fn validate_ssh_key(input: &str) -> Result<String> {
    let line = input.trim();
    if line.is_empty() {
        return Err(invalid(
            "paste a public key, e.g. the contents of ~/.ssh/id_ed25519.pub",
        ));
    }
    if line.contains("PRIVATE KEY") {
        return Err(invalid(
            "this is a private key: never share it. Paste the .pub file instead",
        ));
    }
    if line.lines().count() > 1 {
        return Err(invalid("paste exactly one key (one line)"));
    }
    let mut parts = line.split_whitespace();
    let kind = parts.next().unwrap_or_default();
    if !TYPES.contains(&kind) {
        return Err(invalid(format!(
            "{:?} is not a supported key type; use one of {}",
            kind.chars().take(40).collect::<String>(),
            TYPES.join(", ")
        )));
    }
    let body = parts
        .next()
        .ok_or_else(|| invalid("the key has a type but no key data"))?;
    let blob = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| invalid("the key data is not valid base64; was the key cut short?"))?;
    let mut rest = blob.as_slice();
    let inner = read_string(&mut rest).ok_or_else(|| invalid("the key data is truncated"))?;
    if inner != kind.as_bytes() {
        return Err(invalid(format!(
            "the key says {kind} but its data is a {} key",
            String::from_utf8_lossy(inner)
        )));
    }
    match kind {
        "ssh-ed25519" => {
            let key = read_string(&mut rest).ok_or_else(|| invalid("the key data is truncated"))?;
            if key.len() != 32 {
                return Err(invalid("an ed25519 key has 32 bytes"));
            }
        }
        "ssh-rsa" => {
            let _e = read_string(&mut rest).ok_or_else(|| invalid("the key data is truncated"))?;
            let n = read_string(&mut rest).ok_or_else(|| invalid("the key data is truncated"))?;
            let n = n.strip_prefix(&[0]).unwrap_or(n);
            let bits = n.len() * 8 - n.first().map(|b| b.leading_zeros() as usize).unwrap_or(8);
            if bits < 2048 {
                return Err(invalid(format!(
                    "this RSA key has {bits} bits; use at least 2048 (or an ed25519 key)"
                )));
            }
        }
        _ => {
            read_string(&mut rest).ok_or_else(|| invalid("the key data is truncated"))?;
        }
    }
    let comment: Vec<&str> = parts.collect();
    let mut out = format!("{kind} {body}");
    if !comment.is_empty() {
        out.push(' ');
        out.push_str(&comment.join(" "));
    }
    if out.len() > 16384 {
        return Err(invalid("the key is too long"));
    }
    Ok(out)
}

/// At most this many keys go into one allocation.
pub const MAX_KEYS_PER_ALLOCATION: usize = 10;

/// Several keys, one per line (blank lines ignored), each checked as [`validate_ssh_key`]
/// does; duplicates are dropped. Returns them normalised, one per line.
pub fn validate_ssh_keys(input: &str) -> Result<String> {
    let mut keys: Vec<String> = Vec::new();
    for line in input.lines().filter(|l| !l.trim().is_empty()) {
        let key = validate_ssh_key(line)?;
        if !keys.iter().any(|k| fingerprint(k) == fingerprint(&key)) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(invalid(
            "choose a saved key or paste a public key, e.g. the contents of ~/.ssh/id_ed25519.pub",
        ));
    }
    if keys.len() > MAX_KEYS_PER_ALLOCATION {
        return Err(invalid(format!(
            "at most {MAX_KEYS_PER_ALLOCATION} keys per allocation; {} were given",
            keys.len()
        )));
    }
    Ok(keys.join("\n"))
}

/// The key's fingerprint as `ssh-keygen -l` prints it: `SHA256:` and the unpadded base64 of
/// the SHA-256 of the key blob. `key` is a line [`validate_ssh_key`] accepted.
pub fn fingerprint(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let body = key.split_whitespace().nth(1).unwrap_or_default();
    let blob = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap_or_default();
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(&blob))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_what_ssh_keygen_prints() {
        // Made with `ssh-keygen -t ed25519`; `ssh-keygen -l -f` of it printed
        // 256 SHA256:PkWeU4s/wEXKkVZfEiNTf04tZrBbB/fELrKhI2lIpKc no comment (ED25519)
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEorqTlXDEue8uPXrBC/J2mGhCVSlB9xbL3JVhwex5yy";
        assert_eq!(
            fingerprint(&validate_ssh_key(key).unwrap()),
            "SHA256:PkWeU4s/wEXKkVZfEiNTf04tZrBbB/fELrKhI2lIpKc"
        );
    }

    #[test]
    fn several_keys_one_per_line_without_duplicates() {
        let a = format!("ssh-ed25519 {} a@x", blob(&[b"ssh-ed25519", &[1; 32]]));
        let b = format!("ssh-ed25519 {} b@x", blob(&[b"ssh-ed25519", &[2; 32]]));
        let both = validate_ssh_keys(&format!("{a}\n\n{b}\n{a} again")).unwrap();
        assert_eq!(both, format!("{a}\n{b}"));
        let many: String = (0..11u8)
            .map(|i| format!("ssh-ed25519 {}\n", blob(&[b"ssh-ed25519", &[i; 32]])))
            .collect();
        match validate_ssh_keys(&many) {
            Err(Error::Invalid { reason, .. }) => {
                assert!(reason.contains("at most 10"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(validate_ssh_keys(" \n").is_err());
    }

    fn blob(parts: &[&[u8]]) -> String {
        let mut v = Vec::new();
        for p in parts {
            v.extend((p.len() as u32).to_be_bytes());
            v.extend(*p);
        }
        base64::engine::general_purpose::STANDARD.encode(v)
    }

    #[test]
    fn a_good_ed25519_key_is_normalised() {
        let key = format!(
            "ssh-ed25519   {}  bob@laptop \n",
            blob(&[b"ssh-ed25519", &[7; 32]])
        );
        let ok = validate_ssh_key(&key).unwrap();
        assert!(ok.starts_with("ssh-ed25519 AAAA"));
        assert!(ok.ends_with(" bob@laptop"));
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        let reason = |k: &str| match validate_ssh_key(k) {
            Err(Error::Invalid { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason("").contains("paste a public key"));
        assert!(reason("-----BEGIN OPENSSH PRIVATE KEY-----").contains("private key"));
        assert!(reason("ssh-dss AAAA").contains("not a supported key type"));
        assert!(reason("ssh-ed25519 !!!").contains("not valid base64"));
        let mislabelled = format!("ssh-ed25519 {}", blob(&[b"ssh-rsa", &[1; 3]]));
        assert!(reason(&mislabelled).contains("data is a ssh-rsa key"));
        let short = format!("ssh-ed25519 {}", blob(&[b"ssh-ed25519", &[7; 16]]));
        assert!(reason(&short).contains("32 bytes"));
        let weak = format!("ssh-rsa {}", blob(&[b"ssh-rsa", &[1, 0, 1], &[0xff; 128]]));
        assert!(reason(&weak).contains("1024 bits"), "{}", reason(&weak));
        let strong = format!("ssh-rsa {}", blob(&[b"ssh-rsa", &[1, 0, 1], &[0xff; 256]]));
        assert!(validate_ssh_key(&strong).is_ok());
        let two = format!("{strong}\n{strong}");
        assert!(reason(&two).contains("exactly one key"));
    }
}
