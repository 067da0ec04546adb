//! Who someone is in an organization and in a project.

use serde::{Deserialize, Serialize};

use crate::Invalid;

macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $s:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }

            /// The role a form or a mapping names, or which ones there are.
            pub fn parse(s: &str) -> Result<Self, Invalid> {
                match s {
                    $($s => Ok($name::$variant),)+
                    other => Err(Invalid::new(
                        "role",
                        format!("{other:?} is not one of {}", [$($s),+].join(", ")),
                    )),
                }
            }
        }
    };
}

string_enum!(
    /// A person's role in a tenant (organization).
    TenantRole { Owner = "owner", Admin = "admin", Finance = "finance", Member = "member" }
);
string_enum!(
    /// A person's role in a project.
    ProjectRole { Admin = "admin", Operator = "operator", Viewer = "viewer" }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_read_and_write_the_same_words() {
        for r in ProjectRole::ALL {
            assert_eq!(ProjectRole::parse(r.as_str()), Ok(*r));
            // The API and the audit log spell a role as the forms do.
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::Value::from(r.as_str())
            );
        }
        let e = TenantRole::parse("root").unwrap_err();
        assert_eq!(e.field, "role");
        assert_eq!(
            e.reason,
            "\"root\" is not one of owner, admin, finance, member"
        );
    }
}
