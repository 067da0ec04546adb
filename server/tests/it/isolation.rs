//! The isolation matrix: every server function the portal registers, called over HTTP by
//! every kind of caller, with the answer each must get.
//!
//! Callers: anonymous; in the organization that owns the resources (Acme) and in another
//! (Globex), a plain member, a project viewer, a project operator, a project admin, an
//! organization admin and organization finance; and platform operators, finance and admins.
//! Each function's rule says, per caller, whether it is allowed, 401, 403 or 404. A refused
//! call must change nothing (every table a function could touch is compared before and after)
//! and an answer to another organization must not name Acme's projects or people. An allowed
//! call that writes runs on its own copy of the database, so that no call depends on another.
//!
//! The table must name every registered server function: add one and
//! `every_server_function_is_in_the_matrix` fails until it has a rule. The public API has a
//! matrix of its own (`every_api_operation_answers_every_caller_as_its_rule_says`): every
//! operation of the OpenAPI document, called by each caller through a token with every scope,
//! since a token is never more than its maker (narrower scopes are tested in tests/it/api.rs). The agent's and
//! Stripe's endpoints are not server functions and have no session callers: they are
//! authenticated by a node token and a webhook signature, and their refusals are tested in
//! tests/it/http.rs (`the_agent_api_enrols_with_a_token_and_refuses_other_versions_and_strangers`)
//! and tests/it/stripe.rs.

use control_plane::prelude::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use control_plane::{ControlPlane, UserId, demo};
use http::StatusCode;
use leptos::server_fn::ServerFn;
use server::{app_state, router};
use test_db::fixtures::principal;
use tower_sessions::Session;

use app::account::{AddSshKey, DeleteSshKey, ListSshKeys};
use app::allocations::{
    GetAllocation, GetGpuHistory, GetLaunchForm, LaunchAllocation, ListAllocations, PublishPorts,
    ReleaseAllocation, StartInstance, StopInstance,
};
use app::audit::SearchAudit;
use app::auth::{BreakGlassSignIn, CurrentUser, SignOut, SsoStart};
use app::billing::{GetBilling, GetInvoice, GetPlatformBilling, GrantCredit, IssueCreditNote};
use app::catalog::{
    DryRunPlacement, GetCatalog, GetSkuAdmin, SaveSku, SetSkuState, SetStoragePrice,
};
use app::clusters::{GetCluster, ListClusters, ReleaseCluster};
use app::fabric::{ApproveFabricDrift, GetFabricTree, ImportFabric, SetFabricPlace};
use app::fleet::{
    ApproveSlotMap, ClearBlockedSlot, EnrolNode, FleetOverview, GetNode, RediscoverNode,
    ReissueNodeToken, RejectSlotMap, ReturnSlotToService, SetGpuHealthPolicy, SetNodeNetwork,
    SetNodeState,
};
use app::marketplace::{
    ApplyToPublish, BrowseListings, CreateListing, CreateVersion, CurateVersion, DecidePublisher,
    GetListing, GetMarketplaceAdmin, GetPublisherArea, GetVersionReview, SubmitVersion,
};
use app::ops::GetOps;
use app::organization::GetOrganization;
use app::pages::admin::{AdminOverview, UnlockBreakGlass};
use app::pages::home::GetHome;
use app::policies::SetPolicy;
use app::projects::{
    CancelInvitation, ChangeMemberRole, CreateProject, GetProject, InviteMember, ListProjects,
    RemoveMember, RenameProject, SetEastWest,
};
use app::sso_settings::{GetSsoSettings, SaveSsoSettings, VerifySsoDomain};
use app::theme::SetTheme;
use app::tokens::{CreateApiToken, ListApiTokens, RevokeApiToken};
use app::volumes::{
    AttachVolume, CreateVolume, DeleteSnapshot, DeleteVolume, DetachVolume, GrowVolume,
    ListVolumes, SnapshotVolume,
};

use crate::support;

// The world every copy of the database starts from (built once, as a template).
const NODE: &str = "0a0e0000-0000-4000-800f-000000000001";
const ALLOCATION: &str = "0a0e0000-0000-4000-800f-000000000002";
const ALICE: &str = "0a0e0000-0000-4000-8002-000000000001";
const VOLUME: &str = "0a0e0000-0000-4000-800f-000000000003";
/// An available snapshot of another volume of Acme's Research.
const SNAPSHOT: &str = "0a0e0000-0000-4000-800f-000000000004";
/// A cluster of two members of Acme's Research.
const CLUSTER: &str = "0a0e0000-0000-4000-800f-000000000006";
/// Globex Labs, the demo's third-party publisher.
const GLOBEX_PUBLISHER: &str = "0a0e0000-0000-4000-8003-000000000001";
const SSH_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x";
/// Another key, for adding.
const OTHER_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g y";

/// What of Acme's no answer to another organization (or to nobody) may name.
const ACME_NAMES: [&str; 4] = [
    "Research",
    "Inference",
    "alice@acme.example",
    "Alice Anders",
];

/// A role inside an organization, as the matrix tries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Role {
    /// An organization member with no project.
    Member,
    /// A member who views the project (Research in Acme, Default in Globex).
    Viewer,
    Operator,
    ProjectAdmin,
    /// The organization's admin (administers every project).
    OrgAdmin,
    /// The organization's finance role (views every project and the bills).
    Finance,
}

const ROLES: [Role; 6] = [
    Role::Member,
    Role::Viewer,
    Role::Operator,
    Role::ProjectAdmin,
    Role::OrgAdmin,
    Role::Finance,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Staff {
    Operator,
    Finance,
    Admin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Caller {
    Anonymous,
    /// Of Acme, which owns the resources the functions are called on.
    Acme(Role),
    /// Of Globex: another organization.
    Globex(Role),
    Platform(Staff),
}

fn callers() -> Vec<Caller> {
    let mut all = vec![Caller::Anonymous];
    all.extend(ROLES.map(Caller::Acme));
    all.extend(ROLES.map(Caller::Globex));
    all.extend([Staff::Operator, Staff::Finance, Staff::Admin].map(Caller::Platform));
    all
}

impl Caller {
    fn email(self) -> Option<String> {
        let role = |r: Role| match r {
            Role::Member => "member",
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::ProjectAdmin => "padmin",
            Role::OrgAdmin => "orgadmin",
            Role::Finance => "finance",
        };
        match self {
            Caller::Anonymous => None,
            Caller::Acme(r) => Some(format!("m-{}@acme.example", role(r))),
            Caller::Globex(r) => Some(format!("m-{}@globex.example", role(r))),
            Caller::Platform(s) => Some(format!("m-{s:?}@platform.example").to_lowercase()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Allowed,
    Unauthorized,
    Forbidden,
    NotFound,
}

use Answer::{Allowed, Forbidden, NotFound, Unauthorized};

/// What a caller may do with an Acme project, at least.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    See,
    Operate,
    Administer,
    /// Organization admins only (policies).
    OrgAdmin,
}

/// A caller's standing in Acme's Research project.
fn in_research(c: Caller) -> Option<Need> {
    match c {
        Caller::Acme(Role::Viewer | Role::Finance) => Some(Need::See),
        Caller::Acme(Role::Operator) => Some(Need::Operate),
        Caller::Acme(Role::ProjectAdmin) => Some(Need::Administer),
        Caller::Acme(Role::OrgAdmin) => Some(Need::OrgAdmin),
        _ => None,
    }
}

type Rule = Box<dyn Fn(Caller) -> Answer>;

/// Everyone, signed in or not.
fn public() -> Rule {
    Box::new(|_| Allowed)
}

/// Anyone signed in; what they get is their own.
fn signed_in() -> Rule {
    Box::new(|c| match c {
        Caller::Anonymous => Unauthorized,
        _ => Allowed,
    })
}

/// Acme's Research project (or something in it): not seeing it is 404 (platform staff see
/// no organization's projects), seeing it with too weak a role is 403.
fn research(need: Need) -> Rule {
    Box::new(move |c| match (c, in_research(c)) {
        (Caller::Anonymous, _) => Unauthorized,
        (_, None) => NotFound,
        (_, Some(has)) if has >= need => Allowed,
        _ => Forbidden,
    })
}

/// Platform staff with one of `roles`; everyone else signed in is 403.
fn platform(roles: &'static [Staff]) -> Rule {
    Box::new(move |c| match c {
        Caller::Anonymous => Unauthorized,
        Caller::Platform(s) if roles.contains(&s) => Allowed,
        _ => Forbidden,
    })
}

const OPERATORS: &[Staff] = &[Staff::Operator, Staff::Admin];
const FINANCE: &[Staff] = &[Staff::Finance, Staff::Admin];
const STAFF: &[Staff] = &[Staff::Operator, Staff::Finance, Staff::Admin];

/// `rule`, for a page of the caller's own organization (a project picked on it): platform
/// staff, in none, are refused before any project is looked up.
fn in_own_org(rule: Rule) -> Rule {
    Box::new(move |c| match c {
        Caller::Platform(_) => Forbidden,
        _ => rule(c),
    })
}

/// Members of an organization (their own projects); platform staff belong to none (403).
fn org_member() -> Rule {
    Box::new(|c| match c {
        Caller::Anonymous => Unauthorized,
        Caller::Acme(_) | Caller::Globex(_) => Allowed,
        Caller::Platform(_) => Forbidden,
    })
}

/// The caller's own organization, for its members with one of `roles` (each organization's
/// own data: allowed in Globex as in Acme); platform staff belong to none.
fn own_org(roles: &'static [Role]) -> Rule {
    Box::new(move |c| match c {
        Caller::Anonymous => Unauthorized,
        Caller::Acme(r) | Caller::Globex(r) if roles.contains(&r) => Allowed,
        _ => Forbidden,
    })
}

/// One server function, called with `args`, and the answer `rule` gives each caller.
struct Entry {
    path: &'static str,
    rule: Rule,
    /// Whether an allowed call may write (it then runs on a copy of its own).
    writes: bool,
    args: Vec<(&'static str, String)>,
    /// Besides 2xx, answers that still mean "allowed": the call passed every access check
    /// and was refused on its merits (a state that doesn't permit it), with the reason.
    allowed_also: &'static [u16],
    /// Called on a copy of its own for every caller, refused or not.
    own_copy: bool,
}

fn entry(path: &'static str, rule: Rule, writes: bool, args: &[(&'static str, &str)]) -> Entry {
    Entry {
        path,
        rule,
        writes,
        args: args.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        allowed_also: &[],
        own_copy: false,
    }
}

fn matrix(w: &World) -> Vec<Entry> {
    let admins_finance: &'static [Role] = &[Role::OrgAdmin, Role::Finance];
    let invoice = w.invoice.as_str();
    let version = w.in_review.as_str();
    let ssh = w.ssh_key.as_str();
    let token = w.token.as_str();
    vec![
        // Public: no tenant data.
        entry(SetTheme::PATH, public(), false, &[("theme", "dark")]),
        // Each caller's own home: a visitor's, their organization's or the platform's.
        entry(GetHome::PATH, public(), false, &[]),
        entry(GetCatalog::PATH, public(), false, &[]),
        entry(BrowseListings::PATH, public(), false, &[]),
        entry(GetListing::PATH, public(), false, &[("slug", "vllm")]),
        entry(CurrentUser::PATH, public(), false, &[]),
        entry(SignOut::PATH, public(), true, &[]),
        // Sign-in: the same answer whoever asks (a wrong password, a domain nobody owns).
        entry(
            BreakGlassSignIn::PATH,
            Box::new(|_| Unauthorized),
            true,
            &[
                ("email", "m-admin@platform.example"),
                ("password", "not the password at all"),
            ],
        )
        .own_copy(), // each on a portal of its own: sign-in limits would answer 429 after five
        entry(
            SsoStart::PATH,
            public(),
            true,
            &[("email", "someone@unclaimed.example")],
        )
        .allowed_also(&[400]) // nobody signs in with that domain: the same answer for all
        .own_copy(),
        // The caller's own account.
        entry(ListSshKeys::PATH, signed_in(), false, &[]),
        entry(
            AddSshKey::PATH,
            signed_in(),
            true,
            &[("name", "desktop"), ("public_key", OTHER_KEY)],
        ),
        entry(
            DeleteSshKey::PATH,
            // Acme's admin's key: nobody else's to delete, nor to know about.
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin) => Allowed,
                _ => NotFound,
            }),
            true,
            &[("id", ssh)],
        ),
        // API tokens: each organization's own; made by its admins, revoked by their maker.
        entry(ListApiTokens::PATH, org_member(), false, &[]),
        entry(
            CreateApiToken::PATH,
            own_org(&[Role::OrgAdmin]),
            true,
            &[
                ("name", "deploy"),
                ("project", ""),
                ("scope_read", "on"),
                ("days", "30"),
            ],
        ),
        entry(
            RevokeApiToken::PATH,
            // Acme's admin's token: nobody else outside Acme's admins may know of it.
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin) => Allowed,
                _ => NotFound,
            }),
            true,
            &[("id", token)],
        ),
        entry(ListProjects::PATH, org_member(), false, &[]),
        entry(GetLaunchForm::PATH, org_member(), false, &[]),
        entry(
            CreateProject::PATH,
            own_org(&[Role::OrgAdmin]),
            true,
            &[("name", "Shadow"), ("slug", "shadow")],
        ),
        // Acme's Research project and what is in it.
        entry(
            ListAllocations::PATH,
            in_own_org(research(Need::See)),
            false,
            &[
                ("project", &demo::ACME_RESEARCH.to_string()),
                ("state", "all"),
            ],
        ),
        entry(
            GetAllocation::PATH,
            research(Need::See),
            false,
            &[("id", ALLOCATION)],
        ),
        entry(
            GetGpuHistory::PATH,
            research(Need::See),
            false,
            &[("id", ALLOCATION)],
        ),
        entry(
            LaunchAllocation::PATH,
            research(Need::Operate),
            true,
            &[
                ("project", &demo::ACME_RESEARCH.to_string()),
                ("sku", "h100.1x"),
                ("region", ""),
                ("image", "ubuntu-24.04-cuda"),
                ("name", "matrix"),
                ("ssh_public_keys", SSH_KEY),
                ("idempotency_key", "matrix-1"),
            ],
        )
        .allowed_also(&[409]), // placed nowhere: the matrix's node has reported no GPUs
        entry(
            PublishPorts::PATH,
            research(Need::Operate),
            true,
            &[("id", ALLOCATION), ("published_ports", "8888")],
        )
        .allowed_also(&[409]), // the matrix's allocation may not be running
        entry(
            ReleaseAllocation::PATH,
            research(Need::Operate),
            true,
            &[("id", ALLOCATION)],
        ),
        entry(
            StopInstance::PATH,
            research(Need::Operate),
            true,
            &[("id", ALLOCATION)],
        )
        .allowed_also(&[409]), // the matrix's allocation may not be running
        entry(
            StartInstance::PATH,
            research(Need::Operate),
            true,
            &[("id", ALLOCATION)],
        )
        .allowed_also(&[409]), // nor stopped
        entry(
            GetProject::PATH,
            research(Need::See),
            false,
            &[("id", &demo::ACME_RESEARCH.to_string())],
        ),
        entry(
            RenameProject::PATH,
            research(Need::Administer),
            true,
            &[
                ("id", &demo::ACME_RESEARCH.to_string()),
                ("name", "Renamed"),
            ],
        ),
        entry(
            SetEastWest::PATH,
            research(Need::Administer),
            true,
            &[("id", &demo::ACME_RESEARCH.to_string()), ("on", "yes")],
        ),
        entry(
            InviteMember::PATH,
            research(Need::Administer),
            true,
            &[
                ("id", &demo::ACME_RESEARCH.to_string()),
                ("email", "newcomer@acme.example"),
                ("role", "viewer"),
            ],
        ),
        entry(
            ChangeMemberRole::PATH,
            research(Need::Administer),
            true,
            &[
                ("id", &demo::ACME_RESEARCH.to_string()),
                ("user", ALICE),
                ("role", "viewer"),
            ],
        ),
        entry(
            RemoveMember::PATH,
            research(Need::Administer),
            true,
            &[("id", &demo::ACME_RESEARCH.to_string()), ("user", ALICE)],
        ),
        entry(
            CancelInvitation::PATH,
            research(Need::Administer),
            true,
            &[
                ("id", &demo::ACME_RESEARCH.to_string()),
                ("email", "m-invited@acme.example"),
            ],
        ),
        entry(
            SetPolicy::PATH,
            research(Need::OrgAdmin),
            true,
            &[
                ("scope", "project"),
                ("project", &demo::ACME_RESEARCH.to_string()),
                ("key", "max_gpus_in_use"),
                ("value", "64"),
            ],
        ),
        // The caller's own organization.
        entry(GetBilling::PATH, own_org(admins_finance), false, &[]),
        entry(
            GetInvoice::PATH,
            // Acme's invoice: its admins and finance, and platform finance.
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin | Role::Finance) => Allowed,
                Caller::Globex(Role::OrgAdmin | Role::Finance) => NotFound,
                // The role is checked before the invoice is looked up: the same 403 for any id.
                Caller::Acme(_) | Caller::Globex(_) => Forbidden,
                Caller::Platform(s) if FINANCE.contains(&s) => Allowed,
                Caller::Platform(_) => Forbidden,
            }),
            false,
            &[("id", invoice)],
        ),
        entry(
            SearchAudit::PATH,
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin) | Caller::Globex(Role::OrgAdmin) => Allowed,
                Caller::Platform(Staff::Admin) => Allowed,
                _ => Forbidden,
            }),
            false,
            &[
                ("action", ""),
                ("actor", ""),
                ("resource", ""),
                ("tenant", ""),
            ],
        ),
        entry(GetSsoSettings::PATH, own_org(&[Role::OrgAdmin]), false, &[]),
        entry(
            GetOrganization::PATH,
            own_org(&[Role::OrgAdmin]),
            false,
            &[],
        ),
        entry(
            SaveSsoSettings::PATH,
            own_org(&[Role::OrgAdmin]),
            true,
            &[
                ("issuer_url", "https://192.0.2.1"),
                ("client_id", "x"),
                ("client_secret", "x"),
                ("domains", "acme.example"),
                ("role_claim", "groups"),
                ("default_role", "member"),
                ("mappings", ""),
            ],
        )
        .allowed_also(&[400]), // the issuer is a documentation address: refused on its merits
        entry(
            VerifySsoDomain::PATH,
            // Acme's domain: a claim of Acme's alone.
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin) => Allowed,
                Caller::Globex(Role::OrgAdmin) => NotFound,
                _ => Forbidden,
            }),
            true,
            &[("domain", "acme.example")],
        ),
        // Marketplace: publishing for the caller's own organization.
        entry(
            GetPublisherArea::PATH,
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin) | Caller::Globex(Role::OrgAdmin) => Allowed,
                Caller::Platform(s) if OPERATORS.contains(&s) => Allowed,
                _ => Forbidden,
            }),
            false,
            &[],
        ),
        entry(
            ApplyToPublish::PATH,
            own_org(&[Role::OrgAdmin]),
            true,
            &[("display_name", "Acme Images")],
        )
        .allowed_also(&[409]), // Globex is a publisher already
        entry(
            CreateListing::PATH,
            // Globex Labs' admins, and operators for the platform; Acme publishes nothing.
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Globex(Role::OrgAdmin) => Allowed,
                Caller::Platform(s) if OPERATORS.contains(&s) => Allowed,
                _ => Forbidden,
            }),
            true,
            &listing_args(),
        ),
        entry(
            CreateVersion::PATH,
            // vLLM is Globex Labs' listing.
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Globex(Role::OrgAdmin) => Allowed,
                Caller::Platform(s) if OPERATORS.contains(&s) => NotFound,
                _ => Forbidden,
            }),
            true,
            &version_args(),
        ),
        entry(
            SubmitVersion::PATH,
            // Globex Labs' vLLM version in review (submitting it again is refused on its merits).
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Globex(Role::OrgAdmin) => Allowed,
                Caller::Platform(s) if OPERATORS.contains(&s) => NotFound,
                _ => Forbidden,
            }),
            true,
            &[("id", version)],
        )
        .allowed_also(&[409]),
        // Platform operators.
        // Reading the fleet: all platform staff; changing it: operators.
        entry(FleetOverview::PATH, platform(STAFF), false, &[]),
        entry(GetFabricTree::PATH, platform(STAFF), false, &[]),
        entry(
            ImportFabric::PATH,
            platform(OPERATORS),
            true,
            // The matrix's node is placed on ib0: seen elsewhere, it is kept as drift.
            &[
                ("fabric", "ib9"),
                ("format", "slurm_topology"),
                (
                    "topology",
                    "SwitchName=l9 Nodes=matrix-01\nSwitchName=s9 Switches=l9\n",
                ),
            ],
        ),
        entry(
            ApproveFabricDrift::PATH,
            platform(OPERATORS),
            true,
            &[("id", NODE)],
        )
        .allowed_also(&[409]), // the matrix's node may have no drift to approve
        entry(
            SetFabricPlace::PATH,
            platform(OPERATORS),
            true,
            &[
                ("id", NODE),
                ("fabric", "ib0"),
                ("spine_group", "s1"),
                ("leaf", "l1"),
            ],
        ),
        entry(GetNode::PATH, platform(STAFF), false, &[("id", NODE)]),
        entry(
            EnrolNode::PATH,
            platform(OPERATORS),
            true,
            &[
                ("hostname", "matrix-02"),
                ("region", "eu-west-1"),
                ("rack", "r1"),
                ("family", "hgx-h100-8x"),
                ("shape_gpu_slice", "on"),
            ],
        ),
        entry(
            ReissueNodeToken::PATH,
            platform(OPERATORS),
            true,
            &[("id", NODE)],
        ),
        entry(
            SetNodeState::PATH,
            platform(OPERATORS),
            true,
            &[("id", NODE), ("state", "cordoned")],
        ),
        entry(
            SetNodeNetwork::PATH,
            platform(OPERATORS),
            true,
            &[
                ("id", NODE),
                ("public_host", "gpu-matrix.example.com"),
                // Unchanged: the matrix's node has a live allocation, so the range can't move.
                ("public_port_base", "22000"),
            ],
        ),
        entry(
            RediscoverNode::PATH,
            platform(OPERATORS),
            true,
            &[("id", NODE)],
        ),
        // The node has not reported a discovery: there is no slot map to decide or slot to
        // clear, which operators are told (404) and nobody else gets that far.
        entry(
            ApproveSlotMap::PATH,
            platform_not_found(OPERATORS),
            true,
            &[("id", NODE), ("generation", "1")],
        ),
        entry(
            RejectSlotMap::PATH,
            platform_not_found(OPERATORS),
            true,
            &[("id", NODE), ("generation", "1"), ("reason", "x")],
        ),
        entry(
            ClearBlockedSlot::PATH,
            platform_not_found(OPERATORS),
            true,
            &[("slot", NODE), ("reason", "looked at it")],
        ),
        entry(
            ReturnSlotToService::PATH,
            platform_not_found(OPERATORS),
            true,
            &[("slot", NODE), ("reason", "looked at it")],
        ),
        entry(
            SetGpuHealthPolicy::PATH,
            platform(OPERATORS),
            true,
            &[("xid_codes", "48, 79"), ("ecc_uncorrectable", "true")],
        ),
        entry(GetOps::PATH, platform(STAFF), false, &[]),
        entry(GetSkuAdmin::PATH, platform(STAFF), false, &[]),
        entry(
            SaveSku::PATH,
            platform(OPERATORS),
            true,
            &[
                ("sku[name]", "matrix.1x"),
                ("sku[display_name]", "Matrix"),
                ("sku[shape]", "gpu_slice"),
                ("sku[gpu_model]", "NVIDIA H100 80GB HBM3"),
                ("sku[gpu_count]", "1"),
                ("sku[vcpus]", "1"),
                ("sku[memory_gib]", "1"),
                ("sku[nvme_gib]", "1"),
                ("sku[regions]", "eu-west-1"),
                ("sku[families]", "hgx-h100-8x"),
                ("sku[price_per_hour]", "0.01 USD"),
            ],
        ),
        entry(
            SetSkuState::PATH,
            platform(OPERATORS),
            true,
            &[("id", &w.sku), ("state", "retired")],
        ),
        entry(
            SetStoragePrice::PATH,
            platform(OPERATORS),
            true,
            &[("region", "eu-west-1"), ("price", "0.11 USD")],
        ),
        entry(
            DryRunPlacement::PATH,
            platform(OPERATORS),
            false,
            &[("sku", "h100.1x"), ("region", "")],
        )
        .allowed_also(&[409]), // no capacity: the answer says so
        entry(GetMarketplaceAdmin::PATH, platform(OPERATORS), false, &[]),
        entry(
            GetVersionReview::PATH,
            platform(OPERATORS),
            false,
            &[("id", version)],
        ),
        entry(
            CurateVersion::PATH,
            platform(OPERATORS),
            true,
            &[("id", version), ("action", "reject"), ("reason", "matrix")],
        ),
        entry(
            DecidePublisher::PATH,
            platform(OPERATORS),
            true,
            &[
                ("id", GLOBEX_PUBLISHER),
                ("decision", "suspend"),
                ("share", "70"),
            ],
        ),
        // Volumes: every member lists their own organization's; Research's operators change
        // Research's.
        entry(ListVolumes::PATH, org_member(), false, &[]),
        // Clusters: every member lists their own organization's; Research's viewers read
        // Research's cluster, its operators release it.
        entry(ListClusters::PATH, org_member(), false, &[]),
        entry(
            GetCluster::PATH,
            research(Need::See),
            false,
            &[("id", CLUSTER)],
        ),
        entry(
            ReleaseCluster::PATH,
            research(Need::Operate),
            true,
            &[("id", CLUSTER)],
        ),
        entry(
            CreateVolume::PATH,
            research(Need::Operate),
            true,
            &[
                ("project", &demo::ACME_RESEARCH.to_string()),
                ("name", "matrix-new"),
                ("region", "eu-west-1"),
                ("size_gib", "10"),
                ("idempotency_key", "matrix-create-1"),
            ],
        ),
        entry(
            AttachVolume::PATH,
            research(Need::Operate),
            true,
            &[("id", VOLUME), ("instance", ALLOCATION)],
        ),
        entry(
            DetachVolume::PATH,
            research(Need::Operate),
            true,
            &[("id", VOLUME)],
        ),
        entry(
            GrowVolume::PATH,
            research(Need::Operate),
            true,
            &[("id", VOLUME), ("size_gib", "20")],
        ),
        entry(
            DeleteVolume::PATH,
            research(Need::Operate),
            true,
            &[("id", VOLUME)],
        ),
        entry(
            SnapshotVolume::PATH,
            research(Need::Operate),
            true,
            &[
                ("id", VOLUME),
                ("name", "matrix-snap-2"),
                ("idempotency_key", "matrix-snapshot-2"),
            ],
        ),
        entry(
            DeleteSnapshot::PATH,
            research(Need::Operate),
            true,
            &[("id", SNAPSHOT)],
        ),
        // Platform finance.
        entry(GetPlatformBilling::PATH, platform(FINANCE), false, &[]),
        entry(
            GrantCredit::PATH,
            platform(FINANCE),
            true,
            &[
                ("tenant", &demo::ACME.to_string()),
                ("amount", "10.00 USD"),
                ("reason", "matrix"),
            ],
        ),
        entry(
            IssueCreditNote::PATH,
            platform(FINANCE),
            true,
            &[
                ("invoice", invoice),
                ("amount", "1.00 USD"),
                ("reason", "matrix"),
            ],
        ),
        entry(
            UnlockBreakGlass::PATH,
            platform(&[Staff::Admin]),
            true,
            &[("user", &w.locked)],
        ),
        // Platform staff of any kind.
        entry(AdminOverview::PATH, platform(STAFF), false, &[]),
    ]
}

impl Entry {
    fn allowed_also(mut self, statuses: &'static [u16]) -> Self {
        self.allowed_also = statuses;
        self
    }

    fn own_copy(mut self) -> Self {
        self.own_copy = true;
        self
    }
}

/// Platform staff with one of `roles` get through to a resource that isn't there (404);
/// everyone else signed in is 403.
fn platform_not_found(roles: &'static [Staff]) -> Rule {
    Box::new(move |c| match c {
        Caller::Anonymous => Unauthorized,
        Caller::Platform(s) if roles.contains(&s) => NotFound,
        _ => Forbidden,
    })
}

fn version_fields() -> Vec<(&'static str, &'static str)> {
    vec![
        ("summary", "Matrix"),
        ("description_md", ""),
        ("release_notes", ""),
        ("image_source", "/var/lib/gpuaas/images/matrix.qcow2"),
        (
            "image_sha256",
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
        ),
        ("ssh_user", "ubuntu"),
        ("cloud_init", ""),
        ("shapes", "gpu_slice"),
        ("gpu_models", ""),
        ("min_gpus", "1"),
        ("fee", ""),
    ]
}

fn listing_args() -> Vec<(&'static str, &'static str)> {
    let mut args = vec![
        ("slug", "matrix"),
        ("name", "Matrix"),
        ("category", "app"),
        ("version", "1.0"),
    ];
    args.extend(version_fields());
    args
}

fn version_args() -> Vec<(&'static str, &'static str)> {
    let mut args = vec![("slug", "vllm"), ("version", "9.9.9")];
    args.extend(version_fields());
    args
}

/// The ids a copy of the matrix database holds, and a session cookie per caller.
struct World {
    invoice: String,
    /// An API token Acme's admin made.
    token: String,
    in_review: String,
    ssh_key: String,
    sku: String,
    /// A locked break-glass account.
    locked: String,
    cookies: HashMap<String, String>,
}

/// Builds the template: the demo, the matrix's callers and their sessions, and the resources
/// the functions are called on (an allocation on a node, an invoice, a saved key).
async fn build_world(pool: sqlx::PgPool) {
    let cp = ControlPlane::new(pool.clone(), control_plane::Naming::default());
    control_plane::MIGRATOR.run(&pool).await.unwrap();
    cp.seed_demo().await.unwrap();
    cp.seed_demo_identity_providers("http://127.0.0.1:9", "s")
        .await
        .unwrap();
    sqlx::raw_sql(include_str!("isolation_world.sql"))
        .execute(&pool)
        .await
        .unwrap();
    // A month of Acme's usage, rated and invoiced.
    let mut conn = pool.acquire().await.unwrap();
    control_plane::billing::history::import_run(
        &mut conn,
        &control_plane::billing::history::ImportedRun {
            tenant: demo::ACME,
            project: demo::ACME_RESEARCH,
            sku: "h100.1x",
            listing: "ubuntu-24.04-cuda",
            name: "october",
            started_at: time::macros::datetime!(2026-10-01 00:00 UTC),
            ended_at: time::macros::datetime!(2026-10-01 10:00 UTC),
            price_per_hour_minor: None,
            by: UserId(ALICE.parse().unwrap()),
            key: "october",
        },
    )
    .await
    .unwrap();
    drop(conn);
    control_plane::billing::rating::rate_until(
        cp.pool(),
        time::macros::datetime!(2026-11-01 00:00 UTC),
        100,
    )
    .await
    .unwrap();
    control_plane::billing::invoices::close_months(
        cp.pool(),
        time::macros::datetime!(2026-11-02 00:00 UTC),
    )
    .await
    .unwrap();
    // The Acme admin's saved key.
    let admin = principal(&cp, "m-orgadmin@acme.example").await;
    cp.add_ssh_key(&admin, "laptop", SSH_KEY, None)
        .await
        .unwrap();
    // And an API token of theirs.
    cp.create_api_token(
        &admin,
        demo::ACME,
        &control_plane::api_tokens::NewToken {
            name: "ci".into(),
            project: None,
            scopes: vec![control_plane::api_tokens::TokenScope::Read],
            days: 30,
        },
        None,
    )
    .await
    .unwrap();
    // A token with every scope for every caller in an organization (written here, as only
    // admins may make one through the portal: the matrix asks what each maker's token may do).
    for email in callers()
        .into_iter()
        .filter(|c| matches!(c, Caller::Acme(_) | Caller::Globex(_)))
        .filter_map(Caller::email)
    {
        sqlx::query(
            "INSERT INTO api_tokens (id, tenant_id, created_by, name, display_prefix,
                                     secret_sha256, scopes, expires_at)
             SELECT gen_random_uuid(), m.tenant_id, u.id, 'matrix', 'gpk_matrix00',
                    sha256(convert_to($2, 'UTF8')), ARRAY['read', 'launch', 'billing', 'admin', 'keys'],
                    now() + interval '300 days'
               FROM users u JOIN tenant_memberships m ON m.user_id = u.id
              WHERE u.email = $1",
        )
        .bind(&email)
        .bind(matrix_secret(&email))
        .execute(&pool)
        .await
        .unwrap();
    }
    // A session for every caller, remembered in the template.
    let store = app::server::PortalSessionStore::new(cp.clone());
    sqlx::raw_sql("CREATE TABLE matrix_sessions (email text PRIMARY KEY, cookie text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    for email in callers().into_iter().filter_map(Caller::email) {
        let principal = principal(&cp, &email).await;
        let session = Session::new(None, Arc::new(store.clone()), None);
        app::server::sign_in(&session, &principal, "test")
            .await
            .unwrap();
        session.save().await.unwrap();
        sqlx::query("INSERT INTO matrix_sessions VALUES ($1, $2)")
            .bind(&email)
            .bind(format!("portal_session={}", session.id().unwrap()))
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// A fresh copy of the matrix database, and a portal over it.
async fn copy() -> (test_db::TestDb, axum::Router, World) {
    let db = test_db::fresh("isolation", |pool| Box::pin(build_world(pool))).await;
    let config = support::config(&db.url(), &[]);
    let app = router(app_state(&config).unwrap());
    let pool = db.pool();
    let one = |sql: &'static str| async move {
        sqlx::query_scalar::<_, String>(sql)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    let world = World {
        invoice: one("SELECT id::text FROM invoices LIMIT 1").await,
        token: one("SELECT id::text FROM api_tokens WHERE name = 'ci'").await,
        in_review: one(
            "SELECT v.id::text FROM listing_versions v JOIN listings l ON l.id = v.listing_id
             WHERE l.slug = 'vllm' AND v.state = 'in_review' LIMIT 1",
        )
        .await,
        ssh_key: one("SELECT id::text FROM user_ssh_keys LIMIT 1").await,
        sku: one("SELECT id::text FROM skus WHERE name = 'l40s.1x'").await,
        locked: one("SELECT id::text FROM users WHERE email = 'm-locked@platform.example'").await,
        cookies: sqlx::query_as::<_, (String, String)>("SELECT email, cookie FROM matrix_sessions")
            .fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .collect(),
    };
    (db, app, world)
}

/// Everything a server function could change, in one string (sessions aside: signing in and
/// out is what some of them are for).
async fn fingerprint(pool: &sqlx::PgPool) -> String {
    sqlx::query_scalar(
        "SELECT concat_ws('|',
            (SELECT string_agg(id::text || display_name, ',' ORDER BY id) FROM projects),
            (SELECT string_agg(project_id::text || user_id::text || role, ',' ORDER BY project_id, user_id) FROM project_memberships),
            (SELECT string_agg(tenant_id::text || user_id::text || role, ',' ORDER BY tenant_id, user_id) FROM tenant_memberships),
            (SELECT count(*) FROM users),
            (SELECT count(*) FROM project_invitations),
            (SELECT string_agg(key || value::text, ',' ORDER BY id) FROM policies),
            (SELECT count(*) FROM audit_log),
            (SELECT string_agg(id::text || admin_state || hostname, ',' ORDER BY id) FROM nodes),
            (SELECT string_agg(id::text || state || desired_state, ',' ORDER BY id) FROM allocations),
            (SELECT string_agg(id::text || coalesce(release_requested_at::text, ''), ',' ORDER BY id) FROM clusters),
            (SELECT string_agg(node_id::text || fabric || leaf || coalesce(drift_leaf, ''), ',' ORDER BY node_id) FROM node_fabric_places),
            (SELECT string_agg(id::text || state || size_gib || coalesce(attached_to::text, ''), ',' ORDER BY id) FROM volumes),
            (SELECT count(*) FROM volume_jobs),
            (SELECT string_agg(id::text || state, ',' ORDER BY id) FROM volume_snapshots),
            (SELECT string_agg(name || state, ',' ORDER BY name) FROM skus),
            (SELECT string_agg(id::text || state, ',' ORDER BY id) FROM listing_versions),
            (SELECT count(*) FROM listings),
            (SELECT string_agg(id::text || status || revenue_share_bps, ',' ORDER BY id) FROM publishers),
            (SELECT count(*) FROM node_bootstrap_tokens),
            (SELECT count(*) FROM agent_tasks),
            (SELECT string_agg(id::text || name, ',' ORDER BY id) FROM user_ssh_keys),
            (SELECT string_agg(id::text || coalesce(revoked_at::text, ''), ',' ORDER BY id) FROM api_tokens),
            (SELECT string_agg(issuer_url || client_id || client_secret, ',' ORDER BY tenant_id) FROM identity_providers),
            (SELECT string_agg(domain || coalesce(verified_via, ''), ',' ORDER BY domain) FROM tenant_email_domains),
            (SELECT count(*) FROM journal_entries),
            (SELECT count(*) FROM credit_notes),
            (SELECT string_agg(user_id::text || failed_attempts || coalesce(locked_until::text, ''), ',' ORDER BY user_id) FROM break_glass_credentials),
            (SELECT string_agg(id::text || status, ',' ORDER BY id) FROM invoices))",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

fn answer_of(status: StatusCode, also: &[u16]) -> Option<Answer> {
    match status.as_u16() {
        200..=399 => Some(Allowed),
        401 => Some(Unauthorized),
        403 => Some(Forbidden),
        404 => Some(NotFound),
        s if also.contains(&s) => Some(Allowed),
        _ => None,
    }
}

#[test]
fn every_server_function_is_in_the_matrix() {
    let world = World {
        invoice: String::new(),
        token: String::new(),
        in_review: String::new(),
        ssh_key: String::new(),
        sku: String::new(),
        locked: String::new(),
        cookies: HashMap::new(),
    };
    let known: Vec<&str> = matrix(&world).iter().map(|e| e.path).collect();
    let registered: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_string())
        .collect();
    assert!(!registered.is_empty());
    for path in &registered {
        assert!(
            known.contains(&path.as_str()),
            "server function {path} is missing from the isolation matrix (server/tests/it/isolation.rs): \
             give it an entry with the rule for every caller"
        );
    }
    for path in &known {
        assert!(
            registered.iter().any(|r| r == path),
            "{path} is in the matrix but not registered"
        );
    }
    let mut unique = known.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        known.len(),
        "a function is in the matrix twice"
    );
}

#[tokio::test]
async fn every_function_answers_every_caller_as_its_rule_says_and_refusals_change_nothing() {
    let (db, app, world) = copy().await;
    let pool = db.pool().clone();
    let entries = matrix(&world);
    let mut problems = Vec::new();
    let (mut calls, mut refused, mut copies) = (0, 0, 0);
    for e in &entries {
        for caller in callers() {
            let expected = (e.rule)(caller);
            let email = caller.email();
            let what = format!("{} as {caller:?}", e.path);
            let cookie = |w: &World| email.as_ref().map(|m| w.cookies[m].clone());
            calls += 1;
            let fresh;
            let (app, world, pool) = if e.own_copy || (expected == Allowed && e.writes) {
                // On a copy of its own: it may change things, and nothing else sees them.
                copies += 1;
                fresh = copy().await;
                (&fresh.1, &fresh.2, fresh.0.pool().clone())
            } else {
                (&app, &world, pool.clone())
            };
            let before = fingerprint(&pool).await;
            let (status, _, text) = support::call(
                app,
                e.path,
                cookie(world).as_deref(),
                &support::form(&e.args),
            )
            .await;
            let got = answer_of(status, e.allowed_also);
            if got != Some(expected) {
                problems.push(format!(
                    "{what}: expected {expected:?}, got {status}: {text}"
                ));
            }
            if text.contains("Origin check") {
                problems.push(format!(
                    "{what}: refused by the origin check, not by access"
                ));
            }
            let changed = fingerprint(&pool).await != before;
            if changed && !(expected == Allowed && e.writes) {
                problems.push(format!("{what}: answered {status} and changed something"));
            }
            if expected != Allowed {
                refused += 1;
                if matches!(caller, Caller::Globex(_) | Caller::Anonymous) {
                    for leak in ACME_NAMES {
                        if text.contains(leak) {
                            problems.push(format!("{what}: leaked {leak:?}: {text}"));
                        }
                    }
                }
            }
        }
    }
    // Straight to stderr: the test harness captures `println!` of passing tests.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "isolation matrix: {} functions x {} callers = {calls} calls; {refused} refused \
         (each checked to change nothing); {} allowed; {copies} calls on a copy of their own",
        entries.len(),
        callers().len(),
        calls - refused
    );
    assert!(
        problems.is_empty(),
        "{} of {calls} answers were wrong:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The secret of the matrix's token for the caller with `email`.
fn matrix_secret(email: &str) -> String {
    format!("gpk_matrix_{}", email.replace(['@', '.'], "_"))
}

/// One operation of the public API, and the answer `rule` gives each caller.
struct ApiEntry {
    method: &'static str,
    path: String,
    body: Option<serde_json::Value>,
    rule: Rule,
    writes: bool,
    /// Besides 2xx, answers that still mean "allowed" (refused on the merits).
    allowed_also: &'static [u16],
}

fn api(method: &'static str, path: impl Into<String>, rule: Rule, writes: bool) -> ApiEntry {
    ApiEntry {
        method,
        path: path.into(),
        body: None,
        rule,
        writes,
        allowed_also: &[],
    }
}

/// Anyone with a token (a member of some organization); without one, 401.
fn token_holder() -> Rule {
    Box::new(|c| match c {
        Caller::Anonymous => Unauthorized,
        _ => Allowed,
    })
}

fn api_matrix(w: &World) -> Vec<ApiEntry> {
    let project = demo::ACME_RESEARCH;
    let admins_finance: &'static [Role] = &[Role::OrgAdmin, Role::Finance];
    let launch = serde_json::json!({
        "project": project.to_string(), "sku": "h100.1x", "image": "ubuntu-24.04-cuda",
        "name": "matrix-launch", "ssh_public_keys": [SSH_KEY],
    });
    vec![
        api("GET", "/api/v1/offers", public(), false),
        api("GET", "/api/v1/storage-prices", public(), false),
        api("GET", "/api/v1/images", token_holder(), false),
        api(
            "GET",
            format!("/api/v1/images?project={project}"),
            research(Need::See),
            false,
        ),
        api("GET", "/api/v1/instances", token_holder(), false),
        api(
            "GET",
            format!("/api/v1/instances?project={project}"),
            research(Need::See),
            false,
        ),
        api(
            "GET",
            format!("/api/v1/instances/{ALLOCATION}"),
            research(Need::See),
            false,
        ),
        ApiEntry {
            body: Some(launch),
            // No capacity left on the matrix's node is a refusal on the merits.
            allowed_also: &[409],
            ..api("POST", "/api/v1/instances", research(Need::Operate), true)
        },
        api(
            "DELETE",
            format!("/api/v1/instances/{ALLOCATION}"),
            research(Need::Operate),
            true,
        ),
        ApiEntry {
            // The matrix's instance may not be running.
            allowed_also: &[409],
            ..api(
                "POST",
                format!("/api/v1/instances/{ALLOCATION}/stop"),
                research(Need::Operate),
                true,
            )
        },
        ApiEntry {
            // Nor stopped.
            allowed_also: &[409],
            ..api(
                "POST",
                format!("/api/v1/instances/{ALLOCATION}/start"),
                research(Need::Operate),
                true,
            )
        },
        api("GET", "/api/v1/clusters", token_holder(), false),
        api(
            "GET",
            format!("/api/v1/clusters?project={project}"),
            research(Need::See),
            false,
        ),
        api(
            "GET",
            format!("/api/v1/clusters/{CLUSTER}"),
            research(Need::See),
            false,
        ),
        api(
            "GET",
            format!("/api/v1/clusters/{CLUSTER}/topology?format=slurm"),
            research(Need::See),
            false,
        ),
        ApiEntry {
            body: Some(serde_json::json!({
                "project": project.to_string(), "sku": "h100.8x", "members": 2, "locality": "leaf",
                "image": "ubuntu-24.04-cuda", "name": "matrix-cluster", "ssh_public_keys": [SSH_KEY],
            })),
            // No fabric has room for it in the matrix's world: a refusal on the merits.
            allowed_also: &[409],
            ..api("POST", "/api/v1/clusters", research(Need::Operate), true)
        },
        api(
            "DELETE",
            format!("/api/v1/clusters/{CLUSTER}"),
            research(Need::Operate),
            true,
        ),
        api("GET", "/api/v1/volumes", token_holder(), false),
        api(
            "GET",
            format!("/api/v1/volumes?project={project}"),
            research(Need::See),
            false,
        ),
        api(
            "GET",
            format!("/api/v1/volumes/{VOLUME}"),
            research(Need::See),
            false,
        ),
        ApiEntry {
            body: Some(serde_json::json!({
                "project": project.to_string(), "name": "matrix-api", "region": "eu-west-1", "size_gib": 5,
            })),
            ..api("POST", "/api/v1/volumes", research(Need::Operate), true)
        },
        ApiEntry {
            body: Some(serde_json::json!({"size_gib": 20})),
            ..api(
                "PATCH",
                format!("/api/v1/volumes/{VOLUME}"),
                research(Need::Operate),
                true,
            )
        },
        ApiEntry {
            body: Some(serde_json::json!({"instance": ALLOCATION})),
            ..api(
                "POST",
                format!("/api/v1/volumes/{VOLUME}/attach"),
                research(Need::Operate),
                true,
            )
        },
        api(
            "POST",
            format!("/api/v1/volumes/{VOLUME}/detach"),
            research(Need::Operate),
            true,
        ),
        api(
            "DELETE",
            format!("/api/v1/volumes/{VOLUME}"),
            research(Need::Operate),
            true,
        ),
        ApiEntry {
            body: Some(serde_json::json!({"name": "matrix-api-snap"})),
            ..api(
                "POST",
                format!("/api/v1/volumes/{VOLUME}/snapshots"),
                research(Need::Operate),
                true,
            )
        },
        api("GET", "/api/v1/snapshots", token_holder(), false),
        api(
            "GET",
            format!("/api/v1/snapshots?project={project}"),
            research(Need::See),
            false,
        ),
        api(
            "GET",
            format!("/api/v1/snapshots/{SNAPSHOT}"),
            research(Need::See),
            false,
        ),
        api(
            "DELETE",
            format!("/api/v1/snapshots/{SNAPSHOT}"),
            research(Need::Operate),
            true,
        ),
        api("GET", "/api/v1/ssh-keys", token_holder(), false),
        ApiEntry {
            body: Some(serde_json::json!({"name": "matrix", "public_key": OTHER_KEY})),
            ..api("POST", "/api/v1/ssh-keys", token_holder(), true)
        },
        // Acme's admin's own key: nobody else may know of it.
        api(
            "DELETE",
            format!("/api/v1/ssh-keys/{}", w.ssh_key),
            Box::new(|c| match c {
                Caller::Anonymous => Unauthorized,
                Caller::Acme(Role::OrgAdmin) => Allowed,
                _ => NotFound,
            }),
            true,
        ),
        api("GET", "/api/v1/projects", token_holder(), false),
        api(
            "GET",
            format!("/api/v1/projects/{project}/members"),
            research(Need::See),
            false,
        ),
        api(
            "GET",
            format!("/api/v1/projects/{project}/audit"),
            research(Need::See),
            false,
        ),
        api("GET", "/api/v1/audit", own_org(&[Role::OrgAdmin]), false),
        api("GET", "/api/v1/usage", own_org(admins_finance), false),
        api("GET", "/api/v1/invoices", own_org(admins_finance), false),
    ]
}

/// Every operation the OpenAPI document lists is in the API matrix, and nothing else.
#[tokio::test]
async fn every_api_operation_is_in_the_matrix() {
    let doc = server::api::document();
    let mut documented: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |m| format!("{} {path}", m.to_uppercase()))
        })
        .collect();
    documented.sort();
    let world = World {
        invoice: String::new(),
        token: String::new(),
        in_review: String::new(),
        ssh_key: "{id}".into(),
        sku: String::new(),
        locked: String::new(),
        cookies: HashMap::new(),
    };
    // The matrix's paths with their ids put back as the document's templates.
    let research = demo::ACME_RESEARCH.to_string();
    let mut known: Vec<String> = api_matrix(&world)
        .iter()
        .map(|e| {
            let path = e
                .path
                .trim_start_matches("/api/v1")
                .split('?')
                .next()
                .unwrap()
                .replace(ALLOCATION, "{id}")
                .replace(VOLUME, "{id}")
                .replace(SNAPSHOT, "{id}")
                .replace(CLUSTER, "{id}")
                .replace(&research, "{id}");
            format!("{} {path}", e.method)
        })
        .collect();
    known.sort();
    known.dedup();
    assert_eq!(
        known, documented,
        "the API matrix (server/tests/it/isolation.rs, api_matrix) must name every operation of the OpenAPI document"
    );
}

#[tokio::test]
async fn every_api_operation_answers_every_caller_as_its_rule_says() {
    use axum::body::Body;
    let (db, app, world) = copy().await;
    let pool = db.pool().clone();
    let entries = api_matrix(&world);
    // Platform staff belong to no organization and hold no tokens.
    let callers: Vec<Caller> = callers()
        .into_iter()
        .filter(|c| !matches!(c, Caller::Platform(_)))
        .collect();
    let mut problems = Vec::new();
    let (mut calls, mut refused, mut copies) = (0, 0, 0);
    for e in &entries {
        for &caller in &callers {
            let expected = (e.rule)(caller);
            let what = format!("{} {} as {caller:?}", e.method, e.path);
            calls += 1;
            let fresh;
            let (app, pool) = if expected == Allowed && e.writes {
                copies += 1;
                fresh = copy().await;
                (&fresh.1, fresh.0.pool().clone())
            } else {
                (&app, pool.clone())
            };
            let mut req = http::Request::builder().method(e.method).uri(&e.path);
            if let Some(email) = caller.email() {
                req = req.header("authorization", format!("Bearer {}", matrix_secret(&email)));
            }
            let req = match &e.body {
                Some(b) => req
                    .header("content-type", "application/json")
                    .body(Body::from(b.to_string())),
                None => req.body(Body::empty()),
            }
            .unwrap();
            let before = fingerprint(&pool).await;
            let (status, _, text) = support::send(app, req).await;
            let got = answer_of(status, e.allowed_also);
            if got != Some(expected) {
                problems.push(format!(
                    "{what}: expected {expected:?}, got {status}: {text}"
                ));
            }
            let changed = fingerprint(&pool).await != before;
            if changed && !(expected == Allowed && e.writes) {
                problems.push(format!("{what}: answered {status} and changed something"));
            }
            if expected != Allowed {
                refused += 1;
            }
            // Whatever another organization is answered, allowed or not, names nothing of
            // Acme's.
            if matches!(caller, Caller::Globex(_) | Caller::Anonymous) {
                for leak in ACME_NAMES.iter().chain([&ALLOCATION]) {
                    if text.contains(leak) {
                        problems.push(format!("{what}: leaked {leak:?}: {text}"));
                    }
                }
            }
        }
    }
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "API isolation matrix: {} calls (the document's operations, some with a project and \
         without) x {} callers = {calls} calls; {refused} refused (each checked to change \
         nothing); {} allowed; {copies} calls on a copy of their own",
        entries.len(),
        callers.len(),
        calls - refused
    );
    assert!(
        problems.is_empty(),
        "{} of {calls} answers were wrong:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Bad input on every server function, from a caller it allows (so the input, not access, is
/// what is tested): each argument in turn replaced by an odd value (empty, a NUL, 100 KB, huge
/// and negative numbers, bidi and CJK text, a nil UUID, JSON, a path), an argument left out,
/// an unknown one added, one given twice, an empty body and bytes that aren't UTF-8. Never a
/// 5xx: the caller's mistake is a 4xx that says so.
#[tokio::test]
async fn every_server_function_answers_bad_input_without_a_5xx() {
    let (_db, app, world) = copy().await;
    let odd: [String; 12] = [
        String::new(),
        "\u{0}".into(),
        "x".repeat(100_000),
        "-1".into(),
        "99999999999999999999999".into(),
        "1e309".into(),
        "\u{202e}é漢字\t\n".into(),
        "00000000-0000-0000-0000-000000000000".into(),
        "true".into(),
        "{\"a\":[1,2]}".into(),
        "../../etc/passwd".into(),
        "NaN".into(),
    ];
    let entries = matrix(&world);
    let (mut calls, mut by_status) = (0, BTreeMap::<u16, usize>::new());
    let mut problems = Vec::new();
    for e in &entries {
        let caller = callers()
            .into_iter()
            .find(|c| (e.rule)(*c) == Allowed)
            .unwrap_or(Caller::Anonymous);
        let cookie = caller.email().map(|m| world.cookies[&m].clone());
        let mut bodies: Vec<String> = Vec::new();
        for (i, value) in odd.iter().enumerate() {
            let mut args = e.args.clone();
            if !args.is_empty() {
                let at = i % args.len();
                args[at].1 = value.clone();
            }
            bodies.push(support::form(&args));
        }
        if let Some((_, rest)) = e.args.split_first() {
            bodies.push(support::form(rest));
            let mut twice = e.args.clone();
            twice.push(e.args[0].clone());
            bodies.push(support::form(&twice));
        }
        let mut unknown = e.args.clone();
        unknown.push(("unexpected_field", "1".into()));
        bodies.push(support::form(&unknown));
        bodies.push(String::new());
        bodies.push("%FF%FE%80=%C3%28".into());
        for body in bodies {
            calls += 1;
            let (status, _, text) = support::call(&app, e.path, cookie.as_deref(), &body).await;
            *by_status.entry(status.as_u16()).or_default() += 1;
            if status.is_server_error() {
                problems.push(format!(
                    "{} as {caller:?}: {status} for {:?}: {text}",
                    e.path,
                    &body[..body.len().min(200)]
                ));
            }
        }
    }
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "bad input: {} server functions, {calls} calls: {by_status:?}",
        entries.len()
    );
    assert!(
        problems.is_empty(),
        "{} of {calls} answers were 5xx:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
