//! SSH public keys, checked the way `sshd` would read them from `authorized_keys`.

use base64::Engine;

use crate::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
