//! The main menu: its sections, and which of them a person can open.
//!
//! The menu offers only what the person may use; the pages and their server functions still
//! refuse whoever reaches them anyway. [`sections_for`] is the one rule, computed on the
//! server from who is signed in and sent to the browser as paths.

use portal_types::TenantRole;
use serde::{Deserialize, Serialize};

pub struct Section {
    pub path: &'static str,
    pub title: &'static str,
}

pub const CATALOG: Section = Section {
    path: "/catalog",
    title: "Catalog",
};
pub const MARKETPLACE: Section = Section {
    path: "/marketplace",
    title: "Marketplace",
};
pub const ALLOCATIONS: Section = Section {
    path: "/allocations",
    title: "Instances",
};
pub const VOLUMES: Section = Section {
    path: "/volumes",
    title: "Volumes",
};
pub const PROJECTS: Section = Section {
    path: "/projects",
    title: "Projects",
};
pub const BILLING: Section = Section {
    path: "/billing",
    title: "Billing",
};
pub const ORGANIZATION: Section = Section {
    path: "/organization",
    title: "Organization",
};
pub const FLEET: Section = Section {
    path: "/fleet",
    title: "Fleet",
};
pub const PLATFORM_BILLING: Section = Section {
    path: "/admin/billing",
    title: "Platform billing",
};
pub const ADMIN: Section = Section {
    path: "/admin",
    title: "Admin",
};

/// Every section, in menu order.
pub const ALL: [&Section; 10] = [
    &CATALOG,
    &MARKETPLACE,
    &ALLOCATIONS,
    &VOLUMES,
    &PROJECTS,
    &BILLING,
    &ORGANIZATION,
    &FLEET,
    &PLATFORM_BILLING,
    &ADMIN,
];

/// What the menu needs to know about a person: their platform role (`admin`, `operator`,
/// `finance`) and their role in their home organization. Both `None`: signed out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roles {
    pub platform: Option<String>,
    pub tenant: Option<TenantRole>,
}

impl Roles {
    fn platform_is(&self, any: &[&str]) -> bool {
        self.platform.as_deref().is_some_and(|p| any.contains(&p))
    }

    fn tenant_is(&self, any: &[TenantRole]) -> bool {
        self.tenant.is_some_and(|t| any.contains(&t))
    }

    /// Sees their organization's spend and invoices (the server's `TenantFinance`).
    pub fn tenant_finance(&self) -> bool {
        self.tenant_is(&[TenantRole::Owner, TenantRole::Admin, TenantRole::Finance])
    }

    /// Runs their organization: SSO, members, audit (the server's `TenantAdmins`).
    pub fn tenant_admin(&self) -> bool {
        self.tenant_is(&[TenantRole::Owner, TenantRole::Admin])
    }

    pub fn platform_operator(&self) -> bool {
        self.platform_is(&["admin", "operator"])
    }

    pub fn platform_finance(&self) -> bool {
        self.platform_is(&["admin", "finance"])
    }

    pub fn platform_staff(&self) -> bool {
        self.platform.is_some()
    }
}

/// The sections `roles` can open, in menu order: the public catalog and marketplace for
/// everyone; instances, volumes and projects for members of an organization; its billing for its
/// admins and finance; its settings for its admins; the fleet, the platform's billing and the
/// admin pages for the platform staff whose role uses them.
pub fn sections_for(roles: &Roles) -> Vec<&'static Section> {
    ALL.into_iter()
        .filter(|s| match s.path {
            "/catalog" | "/marketplace" => true,
            "/allocations" | "/volumes" | "/projects" => roles.tenant.is_some(),
            "/billing" => roles.tenant_finance(),
            "/organization" => roles.tenant_admin(),
            "/fleet" => roles.platform_operator(),
            "/admin/billing" => roles.platform_finance(),
            "/admin" => roles.platform_staff(),
            _ => false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titles(roles: Roles) -> Vec<&'static str> {
        sections_for(&roles).into_iter().map(|s| s.title).collect()
    }

    #[test]
    fn each_role_is_offered_only_what_it_can_open() {
        assert_eq!(titles(Roles::default()), ["Catalog", "Marketplace"]);
        let tenant = |r| Roles {
            platform: None,
            tenant: Some(r),
        };
        assert_eq!(
            titles(tenant(TenantRole::Member)),
            ["Catalog", "Marketplace", "Instances", "Volumes", "Projects"]
        );
        assert_eq!(
            titles(tenant(TenantRole::Finance)),
            [
                "Catalog",
                "Marketplace",
                "Instances",
                "Volumes",
                "Projects",
                "Billing"
            ]
        );
        for admin in [TenantRole::Admin, TenantRole::Owner] {
            assert_eq!(
                titles(tenant(admin)),
                [
                    "Catalog",
                    "Marketplace",
                    "Instances",
                    "Volumes",
                    "Projects",
                    "Billing",
                    "Organization"
                ]
            );
        }
        let staff = |r: &str| Roles {
            platform: Some(r.into()),
            tenant: None,
        };
        assert_eq!(
            titles(staff("admin")),
            [
                "Catalog",
                "Marketplace",
                "Fleet",
                "Platform billing",
                "Admin"
            ]
        );
        assert_eq!(
            titles(staff("operator")),
            ["Catalog", "Marketplace", "Fleet", "Admin"]
        );
        assert_eq!(
            titles(staff("finance")),
            ["Catalog", "Marketplace", "Platform billing", "Admin"]
        );
    }
}
