//! The main navigation's sections: path, title and what each page holds.

pub struct Section {
    pub path: &'static str,
    pub title: &'static str,
    /// One or two sentences: what this page holds.
    pub purpose: &'static str,
}

pub const CATALOG: Section = Section {
    path: "/catalog",
    title: "Catalog",
    purpose: "Every SKU you can launch, bare-metal nodes and GPU slices, with its price and live \
              availability per region.",
};
pub const MARKETPLACE: Section = Section {
    path: "/marketplace",
    title: "Marketplace",
    purpose: "OS images with GPU drivers, ML stacks such as PyTorch, vLLM and Jupyter, and apps \
              such as a Slurm head node or a Ray cluster, each launched onto a SKU that fits.",
};
pub const ALLOCATIONS: Section = Section {
    path: "/allocations",
    title: "Allocations",
    purpose: "Your project's running slices and nodes: their provisioning progress, SSH details, \
              release, and the cleanup certificate after release.",
};
pub const PROJECTS: Section = Section {
    path: "/projects",
    title: "Projects",
    purpose: "Your organization's projects, who belongs to them, and their policies: GPU caps, \
              allowed SKUs and regions, lifetimes and budgets.",
};
pub const BILLING: Section = Section {
    path: "/billing",
    title: "Billing",
    purpose: "Spend by project and SKU, invoices with their Stripe status, credits and CSV export.",
};
pub const ADMIN: Section = Section {
    path: "/admin",
    title: "Admin",
    purpose: "For platform operators: node enrolment, slot-map approval, drain and cleanup, SKUs, \
              marketplace review, fleet health and the audit log.",
};

pub const FLEET: Section = Section {
    path: "/fleet",
    title: "Fleet",
    purpose: "For platform staff: every GPU host, its posture, slots and slot-map proposals.",
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
