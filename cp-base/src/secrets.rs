//! Secrets the portal must keep and later use (identity providers' client secrets) are stored
//! sealed: AES-256-GCM under a key from configuration, never in plain text.
//!
//! - A [`Keyring`] holds named keys; the first seals, all of them open. Rotating is: put the
//!   new key first and keep the old one after it, restart (every replica re-seals what the
//!   old key sealed: `ControlPlane::reseal_secrets`), then drop the old key.
//! - A sealed value is `sealed:v1:<key id>:<base64 of nonce ‖ ciphertext ‖ tag>`; the schema
//!   refuses anything else in a column that holds one.
//! - The ciphertext is bound to where it is kept (the associated data names the table, column
//!   and row), so a value copied into another tenant's row does not open.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

const PREFIX: &str = "sealed:v1:";

/// Why a keyring could not be built or a value not opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretsError {
    #[error("{0}")]
    BadKeyring(String),
    #[error("the value is not sealed")]
    NotSealed,
    #[error("the value was sealed with key {0:?}, which is not in the keyring")]
    UnknownKey(String),
    #[error("the value does not open with its key (altered, or moved from another row)")]
    DoesNotOpen,
}

struct Key {
    id: String,
    key: LessSafeKey,
}

/// The keys that seal and open stored secrets. Debug never shows a key.
pub struct Keyring {
    keys: Vec<Key>,
    random: SystemRandom,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("keys", &self.keys.iter().map(|k| &k.id).collect::<Vec<_>>())
            .finish()
    }
}

impl Keyring {
    /// Parses `id:base64-key[,id:base64-key…]` (the `PORTAL_SECRET_KEYS` setting): key ids of
    /// 1 to 32 lowercase letters, digits or `-`, keys of 32 random bytes in base64. The first
    /// seals.
    pub fn parse(setting: &str) -> Result<Self, SecretsError> {
        let mut keys = Vec::new();
        for entry in setting.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (id, material) = entry.split_once(':').ok_or_else(|| {
                SecretsError::BadKeyring("each key is written id:base64-key".into())
            })?;
            if id.is_empty()
                || id.len() > 32
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(SecretsError::BadKeyring(format!(
                    "key id {id:?}: use 1 to 32 lowercase letters, digits or -"
                )));
            }
            let bytes = STANDARD
                .decode(material)
                .map_err(|_| SecretsError::BadKeyring(format!("key {id:?} is not valid base64")))?;
            if keys.iter().any(|k: &Key| k.id == id) {
                return Err(SecretsError::BadKeyring(format!(
                    "key id {id:?} appears twice"
                )));
            }
            keys.push(Key {
                id: id.to_string(),
                key: key_from(&bytes).ok_or_else(|| {
                    SecretsError::BadKeyring(format!(
                        "key {id:?} has {} bytes; use 32 random bytes (openssl rand -base64 32)",
                        bytes.len()
                    ))
                })?,
            });
        }
        if keys.is_empty() {
            return Err(SecretsError::BadKeyring(
                "no key: give id:base64-key (openssl rand -base64 32)".into(),
            ));
        }
        Ok(Self {
            keys,
            random: SystemRandom::new(),
        })
    }

    /// A keyring with one random key that lives as long as this process: for tests and tools
    /// that never read back what another process sealed.
    pub fn ephemeral() -> Self {
        let random = SystemRandom::new();
        let mut bytes = [0u8; 32];
        random.fill(&mut bytes).expect("the system has randomness");
        Self {
            keys: vec![Key {
                id: "ephemeral".into(),
                key: key_from(&bytes).expect("32 bytes make a key"),
            }],
            random,
        }
    }

    /// The id of the key that seals.
    pub fn current(&self) -> &str {
        &self.keys[0].id
    }

    /// Seals `plain`, bound to `place` (table, column and row).
    pub fn seal(&self, plain: &str, place: &str) -> String {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .expect("the system has randomness");
        let mut data = plain.as_bytes().to_vec();
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(place.as_bytes()),
                &mut data,
            )
            .expect("AES-GCM seals any length the schema allows");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        format!("{PREFIX}{}:{}", key.id, STANDARD.encode(out))
    }

    /// Opens what [`Keyring::seal`] sealed at `place`.
    pub fn open(&self, sealed: &str, place: &str) -> Result<String, SecretsError> {
        let (id, data) = sealed
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .ok_or(SecretsError::NotSealed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SecretsError::UnknownKey(id.to_string()))?;
        let bytes = STANDARD
            .decode(data)
            .map_err(|_| SecretsError::DoesNotOpen)?;
        if bytes.len() < NONCE_LEN {
            return Err(SecretsError::DoesNotOpen);
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let mut rest = rest.to_vec();
        let nonce =
            Nonce::try_assume_unique_for_key(nonce).map_err(|_| SecretsError::DoesNotOpen)?;
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(place.as_bytes()), &mut rest)
            .map_err(|_| SecretsError::DoesNotOpen)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SecretsError::DoesNotOpen)
    }

    /// The key id a stored value was sealed with (`None`: not sealed).
    pub fn sealed_with(stored: &str) -> Option<&str> {
        stored
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .map(|(id, _)| id)
    }
}

fn key_from(bytes: &[u8]) -> Option<LessSafeKey> {
    (bytes.len() == 32)
        .then(|| UnboundKey::new(&AES_256_GCM, bytes).ok())
        .flatten()
        .map(LessSafeKey::new)
}

/// 32 random bytes, URL-safe base64, after a prefix that says what the secret is (`gpn_` a
/// node credential, `gpk_` an API token): bearer secrets that are shown once.
pub fn new_secret(prefix: &str) -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// What is kept of such a secret. They are high-entropy, so a plain SHA-256 is the right hash:
/// lookups stay indexable.
pub fn secret_hash(secret: &str) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, secret.trim().as_bytes())
        .as_ref()
        .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:HxwdHhsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=";

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_in_its_place() {
        let one = Keyring::parse(K1).unwrap();
        let sealed = one.seal("s3cret", "identity_providers.client_secret:t1");
        assert!(sealed.starts_with("sealed:v1:k1:"), "{sealed}");
        assert!(!sealed.contains("s3cret"));
        // Two seals of one secret differ (a fresh nonce each time).
        assert_ne!(
            sealed,
            one.seal("s3cret", "identity_providers.client_secret:t1")
        );
        assert_eq!(
            one.open(&sealed, "identity_providers.client_secret:t1")
                .unwrap(),
            "s3cret"
        );
        // Moved to another row, it does not open.
        assert_eq!(
            one.open(&sealed, "identity_providers.client_secret:t2"),
            Err(SecretsError::DoesNotOpen)
        );
        // Altered, it does not open.
        let mut altered = sealed.clone().into_bytes();
        let last = altered.len() - 3;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            one.open(
                &String::from_utf8(altered).unwrap(),
                "identity_providers.client_secret:t1"
            ),
            Err(SecretsError::DoesNotOpen)
        );
        assert_eq!(one.open("s3cret", "x"), Err(SecretsError::NotSealed));

        // Rotation: the new key seals, the old one still opens; without it, nothing does.
        let rotated = Keyring::parse(&format!("{K2},{K1}")).unwrap();
        assert_eq!(rotated.current(), "k2");
        assert_eq!(
            rotated
                .open(&sealed, "identity_providers.client_secret:t1")
                .unwrap(),
            "s3cret"
        );
        let resealed = rotated.seal("s3cret", "p");
        assert_eq!(Keyring::sealed_with(&resealed), Some("k2"));
        assert_eq!(
            Keyring::parse(K2).unwrap().open(&sealed, "p"),
            Err(SecretsError::UnknownKey("k1".into()))
        );
    }

    #[test]
    fn a_bad_keyring_is_refused_with_the_reason() {
        for (setting, says) in [
            ("", "no key"),
            ("k1", "id:base64-key"),
            ("K1:AAAA", "lowercase"),
            ("k1:not base64!", "not valid base64"),
            ("k1:AAAA", "has 3 bytes"),
            (&format!("{K1},{K1}"), "appears twice"),
        ] {
            match Keyring::parse(setting) {
                Err(SecretsError::BadKeyring(why)) => {
                    assert!(why.contains(says), "{setting}: {why}")
                }
                other => panic!("{setting}: {other:?}"),
            }
        }
        // Debug names keys, never shows them.
        let shown = format!("{:?}", Keyring::parse(K1).unwrap());
        assert!(shown.contains("k1") && !shown.contains("AAEC"), "{shown}");
    }
}
