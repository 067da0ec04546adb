//! The main navigation's sections: path and title, in order.

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
    title: "Allocations",
};
pub const PROJECTS: Section = Section {
    path: "/projects",
    title: "Projects",
};
pub const BILLING: Section = Section {
    path: "/billing",
    title: "Billing",
};
pub const ADMIN: Section = Section {
    path: "/admin",
    title: "Admin",
};

pub const FLEET: Section = Section {
    path: "/fleet",
    title: "Fleet",
};

/// The main navigation, in order.
pub const SECTIONS: [&Section; 7] = [
    &CATALOG,
    &MARKETPLACE,
    &ALLOCATIONS,
    &PROJECTS,
    &BILLING,
    &FLEET,
    &ADMIN,
];
