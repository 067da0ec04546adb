//! A version's content: the draft a publisher types and its checks, the review's
//! field-by-field view and diff, and reading listings and versions (for pages and launches).

use serde_json::{Value, json};
use sqlx::PgConnection;

use cp_base::error::{Error, Result};
use cp_base::ids::{ListingId, ListingVersionId, PublisherId};
use cp_inventory::skus::Shape;
use portal_types::Money;

use crate::cloud_init;
use crate::invalid;
use portal_types::marketplace::{Category, Compatibility, Listing, Version, VersionState};

/// What a publisher types for a new version (shared with the pages and the API).
pub use portal_types::VersionDraft;

/// Cloud-config keys the platform writes itself; a fragment may not set them.
pub(crate) const RESERVED_CLOUD_INIT: &[&str] = &[
    "users",
    "hostname",
    "fqdn",
    "ssh_pwauth",
    "ssh_authorized_keys",
    "network",
    "disable_root",
];

pub(crate) struct CheckedDraft {
    pub(crate) version: String,
    pub(crate) summary: String,
    pub(crate) description_md: String,
    pub(crate) release_notes: String,
    pub(crate) image_source: String,
    pub(crate) image_sha256: Option<String>,
    pub(crate) ssh_user: String,
    pub(crate) cloud_init: Value,
    pub(crate) accepts_user_data: bool,
    pub(crate) published_ports: Vec<i32>,
    pub(crate) shapes: Vec<String>,
    pub(crate) gpu_models: Vec<String>,
    pub(crate) min_gpus: i32,
    pub(crate) fee: Option<Money>,
}

pub(crate) fn bounded(field: &'static str, s: &str, min: usize, max: usize) -> Result<String> {
    let s = s.trim();
    let n = s.chars().count();
    if n < min || n > max {
        return Err(invalid(field, format!("use {min} to {max} characters")));
    }
    Ok(s.to_string())
}

impl CheckedDraft {
    /// The draft checked field by field; the first refusal names its field.
    pub(crate) fn check(d: &VersionDraft) -> Result<Self> {
        let version = d.version.trim();
        if version.is_empty()
            || version.len() > 32
            || !version.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
        {
            return Err(invalid(
                "version",
                format!("{version:?}: use letters, digits, '.', '_', '+' and '-', e.g. 2.5.1"),
            ));
        }
        let image_source = d.image_source.trim();
        agent_protocol::image_file(image_source).map_err(|e| invalid("image_source", e))?;
        let image_sha256 = match d.image_sha256.trim() {
            "" => None,
            s => Some(agent_protocol::parse_sha256(s).map_err(|e| invalid("image_sha256", e))?),
        };
        let ssh_user = d.ssh_user.trim();
        if ssh_user.is_empty()
            || ssh_user.len() > 32
            || !ssh_user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            || !ssh_user
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
        {
            return Err(invalid(
                "ssh_user",
                "a Unix user name: lowercase letters, digits, '_' and '-'",
            ));
        }
        let cloud_init = if d.cloud_init.trim().is_empty() {
            json!({})
        } else {
            let v: Value = serde_json::from_str(d.cloud_init.trim()).map_err(|e| {
                invalid(
                    "cloud_init",
                    format!("write the cloud-config fragment as a JSON object: {e}"),
                )
            })?;
            let Some(map) = v.as_object() else {
                return Err(invalid(
                    "cloud_init",
                    "write the cloud-config fragment as a JSON object, e.g. {\"runcmd\": [[\"nvidia-smi\"]]}",
                ));
            };
            if let Some(k) = map
                .keys()
                .find(|k| RESERVED_CLOUD_INIT.contains(&k.as_str()))
            {
                return Err(invalid(
                    "cloud_init",
                    format!("{k:?} is set by the platform (users, hostname, SSH and network are)"),
                ));
            }
            cloud_init::check(map).map_err(|reason| invalid("cloud_init", reason))?;
            if d.cloud_init.len() > 32 * 1024 {
                return Err(invalid("cloud_init", "keep the fragment under 32 KiB"));
            }
            v
        };
        let accepts_user_data = match d.accepts_user_data.trim() {
            "" | "no" => false,
            "yes" | "on" => true,
            other => {
                return Err(invalid(
                    "accepts_user_data",
                    format!("{other:?}: yes or no"),
                ));
            }
        };
        let published_ports = agent_protocol::identity::parse_ports(&d.published_ports)
            .and_then(|p| agent_protocol::identity::published_ports(&p))
            .map_err(|e| invalid("published_ports", e))?
            .into_iter()
            .map(i32::from)
            .collect();
        let mut shapes = Vec::new();
        for s in d.shapes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let shape = Shape::parse(s).map_err(|_| {
                invalid(
                    "shapes",
                    format!("{s:?}: use gpu_slice, baremetal or both, comma-separated"),
                )
            })?;
            if !shapes.contains(&shape.as_str().to_string()) {
                shapes.push(shape.as_str().to_string());
            }
        }
        if shapes.is_empty() {
            return Err(invalid(
                "shapes",
                "name at least one of gpu_slice, baremetal",
            ));
        }
        let gpu_models: Vec<String> = d
            .gpu_models
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if gpu_models.iter().any(|m| m.len() > 100) {
            return Err(invalid(
                "gpu_models",
                "a GPU model is at most 100 characters",
            ));
        }
        let min_gpus = match d.min_gpus.trim() {
            "" => 1,
            s => s
                .parse::<i32>()
                .ok()
                .filter(|n| (1..=16).contains(n))
                .ok_or_else(|| {
                    invalid(
                        "min_gpus",
                        format!("{s:?}: use a whole number from 1 to 16"),
                    )
                })?,
        };
        let fee = match d.fee.trim() {
            "" | "0" => None,
            s => {
                let m = Money::parse_hourly("fee", s)?;
                (m.amount_minor > 0).then_some(m)
            }
        };
        Ok(CheckedDraft {
            version: version.to_string(),
            summary: bounded("summary", &d.summary, 1, 200)?,
            description_md: bounded("description", &d.description_md, 0, 20000)?,
            release_notes: bounded("release_notes", &d.release_notes, 0, 5000)?,
            image_source: image_source.to_string(),
            image_sha256,
            ssh_user: ssh_user.to_string(),
            cloud_init,
            accepts_user_data,
            published_ports,
            shapes,
            gpu_models,
            min_gpus,
            fee,
        })
    }
}

pub(crate) struct VersionDbRow {
    pub(crate) id: ListingVersionId,
    pub(crate) listing_id: ListingId,
    pub(crate) version: String,
    pub(crate) state: String,
    pub(crate) summary: String,
    pub(crate) description_md: String,
    pub(crate) release_notes: String,
    pub(crate) image_source: String,
    pub(crate) image_sha256: Option<String>,
    pub(crate) ssh_user: String,
    pub(crate) cloud_init: Value,
    pub(crate) accepts_user_data: bool,
    pub(crate) published_ports: Vec<i32>,
    pub(crate) shapes: Vec<String>,
    pub(crate) gpu_models: Vec<String>,
    pub(crate) min_gpus: i32,
    pub(crate) fee_per_hour_minor: i64,
    pub(crate) fee_currency: Option<String>,
    pub(crate) review_reason: Option<String>,
    pub(crate) state_changed_at: time::OffsetDateTime,
    pub(crate) published_at: Option<time::OffsetDateTime>,
}

pub(crate) fn fee_of(minor: i64, currency: Option<String>) -> Option<Money> {
    match currency {
        Some(currency) if minor > 0 => Some(Money {
            amount_minor: minor,
            currency: currency.into(),
        }),
        _ => None,
    }
}

impl TryFrom<VersionDbRow> for Version {
    type Error = Error;
    fn try_from(r: VersionDbRow) -> Result<Version> {
        Ok(Version {
            id: r.id,
            version: r.version,
            state: VersionState::parse(&r.state).map_err(|e| Error::Corrupt(e.to_string()))?,
            summary: r.summary,
            description_md: r.description_md,
            release_notes: r.release_notes,
            image_source: r.image_source,
            image_sha256: r.image_sha256,
            ssh_user: r.ssh_user,
            cloud_init: if r.cloud_init.as_object().is_some_and(|m| m.is_empty()) {
                String::new()
            } else {
                format!("{:#}", r.cloud_init)
            },
            accepts_user_data: r.accepts_user_data,
            published_ports: r
                .published_ports
                .iter()
                .map(|&p| u16::try_from(p).map_err(|_| Error::Corrupt(format!("port {p}"))))
                .collect::<Result<_>>()?,
            compatibility: Compatibility {
                shapes: r
                    .shapes
                    .iter()
                    .map(|s| Shape::parse(s).map_err(Error::from))
                    .collect::<Result<_>>()?,
                gpu_models: r.gpu_models,
                min_gpus: r.min_gpus,
                fee: fee_of(r.fee_per_hour_minor, r.fee_currency),
            },
            review_reason: r.review_reason,
            state_changed_at: r.state_changed_at,
            published_at: r.published_at,
        })
    }
}

/// One version as the operator reviewing it sees it: every field a launch uses or a tenant
/// reads, and what changed since the version in force.
#[derive(Clone, Debug)]
pub struct VersionReview {
    pub slug: String,
    pub listing: String,
    pub publisher: String,
    pub version: Version,
    /// The newest published version of the same listing (not this one), if any.
    pub in_force: Option<Version>,
}

/// One field that differs between the version in force and the one under review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    pub field: &'static str,
    pub before: String,
    pub after: String,
}

/// Every reviewed field of a version, by label, in reading order.
pub fn review_fields(v: &Version) -> Vec<(&'static str, String)> {
    let c = &v.compatibility;
    let or = |s: &str, none: &str| {
        if s.trim().is_empty() {
            none.to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        ("Summary", v.summary.clone()),
        ("Description (Markdown)", or(&v.description_md, "(none)")),
        ("Release notes", or(&v.release_notes, "(none)")),
        ("Image source", v.image_source.clone()),
        (
            "Image SHA-256",
            v.image_sha256.clone().unwrap_or_else(|| "(none)".into()),
        ),
        ("SSH user", v.ssh_user.clone()),
        ("Cloud-init", or(&v.cloud_init, "(none)")),
        (
            "Tenant user data",
            if v.accepts_user_data {
                "accepted"
            } else {
                "not accepted"
            }
            .into(),
        ),
        (
            "Published ports",
            or(
                &v.published_ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                "(none)",
            ),
        ),
        (
            "Shapes",
            c.shapes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("GPU models", or(&c.gpu_models.join(", "), "any")),
        ("Minimum GPUs", c.min_gpus.to_string()),
        (
            "Hourly fee",
            c.fee
                .as_ref()
                .map_or_else(|| "none".to_string(), |f| f.to_string()),
        ),
    ]
}

/// A digest of everything a review shows ([`review_fields`]). An approval names the digest
/// its reviewer was shown, so nothing is approved unseen (or other than what was seen), and the
/// audit log keeps it. A version's content is fixed once submitted, so the digest is stable
/// for as long as a decision is pending.
pub fn content_digest(v: &Version) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (label, value) in review_fields(v) {
        for part in [label, value.as_str()] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part.as_bytes());
        }
    }
    let hex: String = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The fields of `new` that differ from `old`.
pub fn changes(old: &Version, new: &Version) -> Vec<FieldChange> {
    review_fields(old)
        .into_iter()
        .zip(review_fields(new))
        .filter(|((_, before), (_, after))| before != after)
        .map(|((field, before), (_, after))| FieldChange {
            field,
            before,
            after,
        })
        .collect()
}

/// Versions of `listings` (all of them, or only published ones), newest first.
pub(crate) async fn versions_of(
    conn: &mut PgConnection,
    listings: &[ListingId],
    published_only: bool,
) -> Result<Vec<(ListingId, Version)>> {
    let rows = sqlx::query_as!(
        VersionDbRow,
        r#"SELECT id AS "id: ListingVersionId", listing_id AS "listing_id: ListingId", version,
                  state, summary, description_md, release_notes, image_source, image_sha256,
                  ssh_user, cloud_init, accepts_user_data, published_ports, shapes, gpu_models,
                  min_gpus, fee_per_hour_minor, fee_currency, review_reason, state_changed_at, published_at
           FROM listing_versions
           WHERE listing_id = ANY($1) AND (state = 'published' OR NOT $2)
           ORDER BY created_at DESC"#,
        &listings.iter().map(|l| l.0).collect::<Vec<_>>(),
        published_only
    )
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| Ok((r.listing_id, Version::try_from(r)?)))
        .collect()
}

/// Listings with their versions; `published_only` hides the rest and listings left empty.
pub(crate) async fn load_listings(
    conn: &mut PgConnection,
    slug: Option<&str>,
    publisher: Option<PublisherId>,
    published_only: bool,
) -> Result<Vec<Listing>> {
    let rows = sqlx::query!(
        r#"SELECT l.id AS "id: ListingId", l.slug, l.name, l.category,
                  p.id AS "publisher_id: PublisherId", p.display_name AS publisher,
                  l.logo IS NOT NULL AS "has_logo!"
           FROM listings l JOIN publishers p ON p.id = l.publisher_id
           WHERE ($1::text IS NULL OR l.slug = $1) AND ($2::uuid IS NULL OR l.publisher_id = $2)
           ORDER BY l.name"#,
        slug,
        publisher.map(|p| p.0)
    )
    .fetch_all(&mut *conn)
    .await?;
    let ids: Vec<ListingId> = rows.iter().map(|r| r.id).collect();
    let mut versions = versions_of(conn, &ids, published_only).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mine: Vec<Version> = versions
            .extract_if(.., |(l, _)| *l == r.id)
            .map(|(_, v)| v)
            .collect();
        if published_only && mine.is_empty() {
            continue;
        }
        out.push(Listing {
            id: r.id,
            slug: r.slug,
            name: r.name,
            category: Category::parse(&r.category).map_err(|e| Error::Corrupt(e.to_string()))?,
            publisher: r.publisher,
            publisher_id: r.publisher_id,
            has_logo: r.has_logo,
            versions: mine,
        });
    }
    Ok(out)
}

/// What a launch resolves a listing (and optional version) to.
pub struct LaunchVersion {
    pub id: ListingVersionId,
    pub slug: String,
    pub label: String,
    pub compatibility: Compatibility,
    /// Whether a launch may carry its own user data.
    pub accepts_user_data: bool,
}

/// The version `slug` + `version` names (empty version: the newest published), refused in
/// words unless it is published.
pub async fn launch_version(
    conn: &mut PgConnection,
    slug: &str,
    version: &str,
) -> Result<LaunchVersion> {
    let slug = slug.trim().to_ascii_lowercase();
    let version = version.trim();
    let mut listings = load_listings(conn, Some(&slug), None, false).await?;
    let listing = listings
        .pop()
        .ok_or_else(|| invalid("listing", format!("there is no listing {slug:?}")))?;
    let v = if version.is_empty() {
        listing.current().ok_or_else(|| {
            invalid(
                "listing",
                format!("{} has no published version to launch", listing.name),
            )
        })?
    } else {
        let v = listing
            .versions
            .iter()
            .find(|v| v.version == version)
            .ok_or_else(|| {
                invalid(
                    "version",
                    format!("{} has no version {version:?}", listing.name),
                )
            })?;
        if v.state != VersionState::Published {
            return Err(invalid(
                "version",
                format!(
                    "{} {} is {}; only published versions can be launched{}",
                    listing.name,
                    v.version,
                    v.state,
                    listing
                        .current()
                        .map(|c| format!(" (the current one is {})", c.version))
                        .unwrap_or_default()
                ),
            ));
        }
        v
    };
    // Versions made before images had to live in the image directory (the platform's own
    // are kept by migration 0013) would be accepted here and then refused by the host's
    // agent: say so now, before anything is claimed.
    if agent_protocol::image_file(&v.image_source).is_err() {
        return Err(invalid(
            "version",
            format!(
                "{} {} can't be launched: its image {:?} is not a file in the operator's image \
                 directory ({}); a new version with an image there must be published",
                listing.name,
                v.version,
                v.image_source,
                agent_protocol::IMAGE_DIR
            ),
        ));
    }
    // A concurrent deprecation waits for this launch (and a launch after it sees it).
    sqlx::query!(
        "SELECT 1 AS one FROM listing_versions WHERE id = $1 FOR SHARE",
        v.id as ListingVersionId
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(LaunchVersion {
        id: v.id,
        label: format!("{} {}", listing.name, v.version),
        slug: listing.slug.clone(),
        compatibility: v.compatibility.clone(),
        accepts_user_data: v.accepts_user_data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_are_checked_field_by_field() {
        let good = VersionDraft {
            version: "2.5.1".into(),
            summary: "PyTorch".into(),
            image_source: "/var/lib/gpuaas/images/pytorch.qcow2".into(),
            ssh_user: "ubuntu".into(),
            cloud_init: r#"{"packages": ["nvtop"]}"#.into(),
            shapes: "gpu_slice, baremetal".into(),
            fee: "0.25 USD".into(),
            published_ports: "8888 8000,".into(),
            ..Default::default()
        };
        let c = CheckedDraft::check(&good).unwrap();
        assert_eq!(c.shapes, vec!["gpu_slice", "baremetal"]);
        assert_eq!(
            c.published_ports,
            vec![8000, 8888],
            "sorted, separators ignored"
        );
        assert_eq!(c.fee.unwrap().amount_minor, 25);
        let field = |d: VersionDraft| match CheckedDraft::check(&d) {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {:?}", other.map(|c| c.version)),
        };
        for (d, f) in [
            (
                VersionDraft {
                    version: "two words".into(),
                    ..good.clone()
                },
                "version",
            ),
            (
                VersionDraft {
                    cloud_init: "[1]".into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    cloud_init: r#"{"users": []}"#.into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    cloud_init: "runcmd: [ls]".into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    cloud_init: r#"{"runcmd": [["nvidia-smi"]]}"#.into(),
                    ..good.clone()
                },
                "cloud_init",
            ),
            (
                VersionDraft {
                    image_source: "/etc/shadow".into(),
                    ..good.clone()
                },
                "image_source",
            ),
            (
                VersionDraft {
                    image_source: "/var/lib/gpuaas/images/../../../root/disk.qcow2".into(),
                    ..good.clone()
                },
                "image_source",
            ),
            (
                VersionDraft {
                    shapes: "vm".into(),
                    ..good.clone()
                },
                "shapes",
            ),
            (
                VersionDraft {
                    shapes: "".into(),
                    ..good.clone()
                },
                "shapes",
            ),
            (
                VersionDraft {
                    min_gpus: "0".into(),
                    ..good.clone()
                },
                "min_gpus",
            ),
            (
                VersionDraft {
                    fee: "a lot".into(),
                    ..good.clone()
                },
                "fee",
            ),
            (
                VersionDraft {
                    ssh_user: "Root".into(),
                    ..good.clone()
                },
                "ssh_user",
            ),
            (
                VersionDraft {
                    image_source: "a b".into(),
                    ..good.clone()
                },
                "image_source",
            ),
            (
                VersionDraft {
                    summary: " ".into(),
                    ..good.clone()
                },
                "summary",
            ),
            (
                VersionDraft {
                    published_ports: "22".into(),
                    ..good.clone()
                },
                "published_ports",
            ),
            (
                VersionDraft {
                    published_ports: "8000, 8000".into(),
                    ..good.clone()
                },
                "published_ports",
            ),
            (
                VersionDraft {
                    published_ports: "http".into(),
                    ..good.clone()
                },
                "published_ports",
            ),
            (
                VersionDraft {
                    published_ports: "1 2 3 4 5 6 7 8".into(),
                    ..good.clone()
                },
                "published_ports",
            ),
        ] {
            assert_eq!(field(d), f);
        }
    }
}
