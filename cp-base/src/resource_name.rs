//! Canonical resource names:
//! `{partition}:{service}:{region}:{tenant_id}:{project_id}:{resource_type}:{resource_id}`.
//!
//! Used in audit records and shown in the UI. Like an ARN, the scope segments may be empty for
//! resources above that scope: a tenant has no project, a SKU has no tenant.
//!
//! ```
//! use cp_base::resource_name::ResourceName;
//! let n: ResourceName =
//!     "gpuaas:portal:eu-west:6f1c0c52-0d55-4c4c-9a8e-6b1f4f35f0a1::tenant:6f1c0c52-0d55-4c4c-9a8e-6b1f4f35f0a1"
//!         .parse()
//!         .unwrap();
//! assert_eq!(n.resource_type(), "tenant");
//! assert!(n.project_id().is_none());
//! ```

use std::fmt;
use std::str::FromStr;

use crate::ids::{ProjectId, TenantId};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceName {
    partition: String,
    service: String,
    region: String,
    tenant_id: Option<TenantId>,
    project_id: Option<ProjectId>,
    resource_type: String,
    resource_id: String,
}

/// Why a string is not a canonical resource name. Every variant names the segment at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceNameError {
    #[error(
        "a resource name has 7 ':'-separated segments \
         (partition:service:region:tenant_id:project_id:resource_type:resource_id), found {found}"
    )]
    SegmentCount { found: usize },
    #[error("the {segment} segment must not be empty")]
    Empty { segment: &'static str },
    #[error("the {segment} segment {value:?} is invalid: {reason}")]
    Invalid {
        segment: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("a resource name with a project_id must also have a tenant_id")]
    ProjectWithoutTenant,
}

const TOKEN_RULE: &str = "use lowercase letters, digits and '-', starting with a letter";
const ID_RULE: &str = "use letters, digits, '-', '_' and '.' (at most 128)";

fn check_token(segment: &'static str, value: &str) -> Result<(), ResourceNameError> {
    if value.is_empty() {
        return Err(ResourceNameError::Empty { segment });
    }
    let mut chars = value.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if first_ok && rest_ok && value.len() <= 63 {
        Ok(())
    } else {
        Err(ResourceNameError::Invalid {
            segment,
            value: value.to_string(),
            reason: TOKEN_RULE,
        })
    }
}

fn check_region(value: &str) -> Result<(), ResourceNameError> {
    if value.is_empty() {
        Ok(())
    } else {
        check_token("region", value)
    }
}

fn check_resource_type(value: &str) -> Result<(), ResourceNameError> {
    if value.is_empty() {
        return Err(ResourceNameError::Empty {
            segment: "resource_type",
        });
    }
    let ok = value.starts_with(|c: char| c.is_ascii_lowercase())
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok && value.len() <= 63 {
        Ok(())
    } else {
        Err(ResourceNameError::Invalid {
            segment: "resource_type",
            value: value.to_string(),
            reason: "use lowercase letters, digits, '_' and '-', starting with a letter",
        })
    }
}

fn check_resource_id(value: &str) -> Result<(), ResourceNameError> {
    if value.is_empty() {
        return Err(ResourceNameError::Empty {
            segment: "resource_id",
        });
    }
    let ok = value.len() <= 128
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ResourceNameError::Invalid {
            segment: "resource_id",
            value: value.to_string(),
            reason: ID_RULE,
        })
    }
}

fn parse_uuid_segment<T: From<uuid::Uuid>>(
    segment: &'static str,
    value: &str,
) -> Result<Option<T>, ResourceNameError> {
    if value.is_empty() {
        return Ok(None);
    }
    // Only the canonical lowercase hyphenated form, so that every name has one spelling.
    match uuid::Uuid::parse_str(value) {
        Ok(u) if u.hyphenated().to_string() == value => Ok(Some(T::from(u))),
        _ => Err(ResourceNameError::Invalid {
            segment,
            value: value.to_string(),
            reason: "expected a lowercase hyphenated UUID",
        }),
    }
}

impl ResourceName {
    /// Builds a name, checking every segment as [`FromStr`] does.
    pub fn new(
        partition: &str,
        service: &str,
        region: &str,
        tenant_id: Option<TenantId>,
        project_id: Option<ProjectId>,
        resource_type: &str,
        resource_id: &str,
    ) -> Result<Self, ResourceNameError> {
        check_token("partition", partition)?;
        check_token("service", service)?;
        check_region(region)?;
        if project_id.is_some() && tenant_id.is_none() {
            return Err(ResourceNameError::ProjectWithoutTenant);
        }
        check_resource_type(resource_type)?;
        check_resource_id(resource_id)?;
        Ok(Self {
            partition: partition.to_string(),
            service: service.to_string(),
            region: region.to_string(),
            tenant_id,
            project_id,
            resource_type: resource_type.to_string(),
            resource_id: resource_id.to_string(),
        })
    }

    pub fn partition(&self) -> &str {
        &self.partition
    }
    pub fn service(&self) -> &str {
        &self.service
    }
    pub fn region(&self) -> &str {
        &self.region
    }
    pub fn tenant_id(&self) -> Option<TenantId> {
        self.tenant_id
    }
    pub fn project_id(&self) -> Option<ProjectId> {
        self.project_id
    }
    pub fn resource_type(&self) -> &str {
        &self.resource_type
    }
    pub fn resource_id(&self) -> &str {
        &self.resource_id
    }
}

impl FromStr for ResourceName {
    type Err = ResourceNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let [partition, service, region, tenant, project, rtype, rid] = parts[..] else {
            return Err(ResourceNameError::SegmentCount { found: parts.len() });
        };
        let tenant_id = parse_uuid_segment::<TenantId>("tenant_id", tenant)?;
        let project_id = parse_uuid_segment::<ProjectId>("project_id", project)?;
        Self::new(
            partition, service, region, tenant_id, project_id, rtype, rid,
        )
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenant = self.tenant_id.map(|t| t.to_string()).unwrap_or_default();
        let project = self.project_id.map(|p| p.to_string()).unwrap_or_default();
        write!(
            f,
            "{}:{}:{}:{}:{}:{}:{}",
            self.partition,
            self.service,
            self.region,
            tenant,
            project,
            self.resource_type,
            self.resource_id
        )
    }
}

impl serde::Serialize for ResourceName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ResourceName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "6f1c0c52-0d55-4c4c-9a8e-6b1f4f35f0a1";
    const P: &str = "0b7d3c8e-2f4a-4b7e-8d6c-1a2b3c4d5e6f";

    #[test]
    fn round_trips_every_scope() {
        let names = [
            format!("gpuaas:portal:eu-west-1:{T}:{P}:allocation:alloc-42"),
            format!("gpuaas:portal::{T}::tenant:{T}"),
            format!("gpuaas:portal:eu-west-1:{T}:{P}:project:{P}"),
            "gpuaas:catalog:us-east:::sku:h100.8x-sxm".to_string(),
            "gpuaas-cn:portal::::platform:global".to_string(),
        ];
        for s in names {
            let parsed: ResourceName = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(parsed.to_string(), s);
            let again: ResourceName = parsed.to_string().parse().unwrap();
            assert_eq!(again, parsed);
        }
    }

    #[test]
    fn exposes_segments() {
        let n: ResourceName = format!("gpuaas:portal:eu-west-1:{T}:{P}:allocation:a1")
            .parse()
            .unwrap();
        assert_eq!(n.partition(), "gpuaas");
        assert_eq!(n.service(), "portal");
        assert_eq!(n.region(), "eu-west-1");
        assert_eq!(n.tenant_id().unwrap().to_string(), T);
        assert_eq!(n.project_id().unwrap().to_string(), P);
        assert_eq!(n.resource_type(), "allocation");
        assert_eq!(n.resource_id(), "a1");
    }

    #[test]
    fn serde_uses_the_string_form() {
        let s = format!("gpuaas:portal::{T}::tenant:{T}");
        let n: ResourceName = s.parse().unwrap();
        let json = serde_json::to_string(&n).unwrap();
        assert_eq!(json, format!("\"{s}\""));
        let bad = serde_json::from_str::<ResourceName>("\"a:b\"").unwrap_err();
        assert!(
            bad.to_string().contains("7 ':'-separated segments"),
            "{bad}"
        );
    }

    fn err(s: &str) -> ResourceNameError {
        s.parse::<ResourceName>().unwrap_err()
    }

    #[test]
    fn rejects_bad_input_naming_the_segment() {
        assert_eq!(err(""), ResourceNameError::SegmentCount { found: 1 });
        assert_eq!(
            err("gpuaas:portal:eu:x:y:z"),
            ResourceNameError::SegmentCount { found: 6 }
        );
        assert_eq!(
            err(&format!("gpuaas:portal::{T}::tenant:{T}:extra")),
            ResourceNameError::SegmentCount { found: 8 }
        );
        assert_eq!(
            err(&format!(":portal::{T}::tenant:{T}")),
            ResourceNameError::Empty {
                segment: "partition"
            }
        );
        assert_eq!(
            err(&format!("gpuaas:::{T}::tenant:{T}")),
            ResourceNameError::Empty { segment: "service" }
        );
        assert_eq!(
            err(&format!("gpuaas:portal::{T}:::{T}")),
            ResourceNameError::Empty {
                segment: "resource_type"
            }
        );
        assert_eq!(
            err(&format!("gpuaas:portal::{T}::tenant:")),
            ResourceNameError::Empty {
                segment: "resource_id"
            }
        );
        assert_eq!(
            err(&format!("gpuaas:portal:::{P}:project:{P}")),
            ResourceNameError::ProjectWithoutTenant
        );
        for (input, segment) in [
            (format!("GPUaaS:portal::{T}::tenant:{T}"), "partition"),
            (format!("gpuaas:por tal::{T}::tenant:{T}"), "service"),
            ("gpuaas:portal:EU_West:::tenant:x".to_string(), "region"),
            ("gpuaas:portal::acme::tenant:x".to_string(), "tenant_id"),
            (
                format!("gpuaas:portal::{}::tenant:x", T.to_uppercase()),
                "tenant_id",
            ),
            (
                format!("gpuaas:portal::{T}:research:project:x"),
                "project_id",
            ),
            (format!("gpuaas:portal::{T}::Tenant:x"), "resource_type"),
            (format!("gpuaas:portal::{T}::tenant:a/b"), "resource_id"),
            (
                format!("gpuaas:portal::{T}::tenant:{}", "x".repeat(129)),
                "resource_id",
            ),
        ] {
            match err(&input) {
                ResourceNameError::Invalid { segment: s, .. } => {
                    assert_eq!(s, segment, "{input}")
                }
                other => panic!("{input}: expected Invalid({segment}), got {other:?}"),
            }
        }
    }

    #[test]
    fn errors_read_clearly() {
        assert_eq!(
            err("gpuaas:portal::acme::tenant:x").to_string(),
            "the tenant_id segment \"acme\" is invalid: expected a lowercase hyphenated UUID"
        );
        assert_eq!(
            err("a:b").to_string(),
            "a resource name has 7 ':'-separated segments \
             (partition:service:region:tenant_id:project_id:resource_type:resource_id), found 2"
        );
    }

    #[test]
    fn constructor_applies_the_same_rules() {
        let t = TenantId(uuid::Uuid::parse_str(T).unwrap());
        let p = ProjectId(uuid::Uuid::parse_str(P).unwrap());
        let n = ResourceName::new("gpuaas", "portal", "", Some(t), Some(p), "project", P).unwrap();
        assert_eq!(n.to_string(), format!("gpuaas:portal::{T}:{P}:project:{P}"));
        assert_eq!(
            ResourceName::new("gpuaas", "portal", "", None, Some(p), "project", P),
            Err(ResourceNameError::ProjectWithoutTenant)
        );
        assert!(matches!(
            ResourceName::new("gpuaas", "portal", "", Some(t), None, "tenant", "a:b"),
            Err(ResourceNameError::Invalid {
                segment: "resource_id",
                ..
            })
        ));
    }
}
