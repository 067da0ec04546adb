//! The isolation matrix. Every server function that takes a resource id is called, over
//! HTTP, by a user of another tenant and by each role too weak for it. The table below must
//! name every server function the portal registers: add a new one and this test fails until
//! it is classified.
//!
//! Sessions are created directly in the session store for the demo users (the sign-in flow
//! itself is tested in end2end/tests/sso.test.mjs).

use std::sync::Arc;

use axum::body::Body;
use clap::Parser;
use control_plane::{ControlPlane, UserId, demo};
use http::{Request, StatusCode};
use leptos::server_fn::ServerFn;
use server::config::Config;
use server::{app_state, router};
use tower::ServiceExt;
use tower_sessions::Session;
use tower_sessions_sqlx_store::PostgresStore;

use app::account::{AddSshKey, DeleteSshKey, ListSshKeys};
use app::allocations::{
    GetAllocation, GetLaunchForm, LaunchAllocation, ListAllocations, ReleaseAllocation,
};
use app::audit::SearchAudit;
use app::auth::{BreakGlassSignIn, CurrentUser, SignOut, SsoStart};
use app::billing::{GetBilling, GetInvoice, GetPlatformBilling, GrantCredit, IssueCreditNote};
use app::catalog::{DryRunPlacement, GetCatalog, GetSkuAdmin, SaveSku, SetSkuState};
use app::fleet::{
    ApproveSlotMap, ClearBlockedSlot, EnrolNode, FleetOverview, GetNode, RediscoverNode,
    ReissueNodeToken, RejectSlotMap, SetNodeState,
};
use app::marketplace::{
    ApplyToPublish, BrowseListings, CreateListing, CreateVersion, CurateVersion, DecidePublisher,
    GetListing, GetMarketplaceAdmin, GetPublisherArea, GetVersionReview, SubmitVersion,
};
use app::pages::admin::AdminOverview;
use app::pages::home::GetPlatformHealth;
use app::policies::SetPolicy;
use app::projects::{
    ChangeMemberRole, CreateProject, GetProject, InviteMember, ListProjects, RemoveMember,
    RenameProject,
};
use app::sso_settings::{GetSsoSettings, SaveSsoSettings, VerifySsoDomain};
use app::theme::SetTheme;

const ORIGIN: &str = "http://127.0.0.1:3000";

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    config: Config,
}

/// What a caller may do with a project, at least.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    /// Any project role (or a tenant role that implies one).
    SeeProject,
    /// Launch and release: project operators and admins.
    ProjectOperator,
    ProjectAdmin,
    TenantAdmin,
}

/// A server function that takes a resource id, and how to call it against `project`.
struct Case {
    path: &'static str,
    need: Need,
    mutates: bool,
    args: fn(&Ids) -> Vec<(&'static str, String)>,
}

struct Ids {
    project: String,
    alice: String,
    /// An allocation in `project`.
    allocation: String,
}

/// Server functions that take no resource id, and why they are safe without one.
/// Fleet server functions act on platform resources (nodes), never on a tenant's; every
/// tenant user is refused by the platform-role proof (checked at the end of the matrix test).
const FLEET: &[(&str, &[(&str, &str)])] = &[
    (FleetOverview::PATH, &[]),
    (GetNode::PATH, &[("id", NODE)]),
    (
        EnrolNode::PATH,
        &[
            ("hostname", "evil-01"),
            ("region", "eu-west-1"),
            ("rack", "r1"),
            ("family", "hgx-h100-8x"),
            ("shape_gpu_slice", "on"),
        ],
    ),
    (ReissueNodeToken::PATH, &[("id", NODE)]),
    (SetNodeState::PATH, &[("id", NODE), ("state", "cordoned")]),
    (RediscoverNode::PATH, &[("id", NODE)]),
    (ApproveSlotMap::PATH, &[("id", NODE), ("generation", "1")]),
    (
        RejectSlotMap::PATH,
        &[("id", NODE), ("generation", "1"), ("reason", "x")],
    ),
    (
        ClearBlockedSlot::PATH,
        &[("slot", NODE), ("reason", "looked at it")],
    ),
    (GetSkuAdmin::PATH, &[]),
    (
        SaveSku::PATH,
        &[
            ("name", "evil.1x"),
            ("display_name", "Evil"),
            ("shape", "gpu_slice"),
            ("gpu_model", "NVIDIA H100 80GB HBM3"),
            ("gpu_count", "1"),
            ("vcpus", "1"),
            ("memory_gib", "1"),
            ("nvme_gib", "1"),
            ("regions", "eu-west-1"),
            ("families", "hgx-h100-8x"),
            ("price_per_hour", "0.01 USD"),
        ],
    ),
    (SetSkuState::PATH, &[("id", NODE), ("state", "retired")]),
    // Marketplace curation: platform operators only.
    (GetMarketplaceAdmin::PATH, &[]),
    (GetVersionReview::PATH, &[("id", NODE)]),
    (
        CurateVersion::PATH,
        &[("id", NODE), ("action", "publish"), ("reason", "")],
    ),
    (
        DecidePublisher::PATH,
        &[("id", NODE), ("decision", "approve"), ("share", "100")],
    ),
    (DryRunPlacement::PATH, &[("sku", "h100.1x"), ("region", "")]),
    // Platform finance: every organization's invoices, credit grants and credit notes.
    (GetPlatformBilling::PATH, &[]),
    (
        GrantCredit::PATH,
        &[
            ("tenant", "0a0e0000-0000-4000-8000-000000000001"),
            ("amount", "1000.00 USD"),
            ("reason", "x"),
        ],
    ),
    (
        IssueCreditNote::PATH,
        &[("invoice", NODE), ("amount", "1.00 USD"), ("reason", "x")],
    ),
];
const NODE: &str = "00000000-0000-4000-8000-00000000beef";

const NO_RESOURCE_ID: &[(&str, &str)] = &[
    (SetTheme::PATH, "a cookie of the caller's own"),
    (
        GetPlatformHealth::PATH,
        "platform readiness, no tenant data",
    ),
    (CurrentUser::PATH, "the caller's own identity"),
    (ListSshKeys::PATH, "the caller's own saved keys only"),
    (AddSshKey::PATH, "to the caller's own account only"),
    (
        DeleteSshKey::PATH,
        "the caller's own key; another user's is not found (control-plane/tests/account_db.rs)",
    ),
    (BreakGlassSignIn::PATH, "sign-in"),
    (SignOut::PATH, "the caller's own session"),
    (SsoStart::PATH, "sign-in; routed by email domain"),
    (
        AdminOverview::PATH,
        "platform staff only (tested in auth tests)",
    ),
    (ListProjects::PATH, "the caller's own tenant only"),
    (
        GetCatalog::PATH,
        "public: prices and availability, no tenant data",
    ),
    (
        GetLaunchForm::PATH,
        "the caller's own projects, the public catalog and published listings",
    ),
    (
        BrowseListings::PATH,
        "public: published listings only, no tenant data",
    ),
    (
        GetListing::PATH,
        "public: a listing's published versions and the public catalog",
    ),
    (
        GetPublisherArea::PATH,
        "the caller's own organization's publisher (its admins), or the platform's (operators)",
    ),
    (
        ApplyToPublish::PATH,
        "for the caller's own organization; its admins only",
    ),
    (
        CreateListing::PATH,
        "into the caller's own publisher only (organization admins, or operators for the platform)",
    ),
    (
        CreateVersion::PATH,
        "a listing of the caller's own publisher; another publisher's is not found \
         (control-plane/tests/marketplace_db.rs)",
    ),
    (
        SubmitVersion::PATH,
        "a version of the caller's own publisher; another publisher's is not found \
         (control-plane/tests/marketplace_db.rs)",
    ),
    (CreateProject::PATH, "into the caller's own tenant only"),
    (
        GetBilling::PATH,
        "the caller's own tenant; its owners, admins and finance only",
    ),
    (
        GetInvoice::PATH,
        "an invoice of the caller's own tenant (its owners, admins and finance), or any for platform finance; \
         another tenant's id is not found (control-plane/tests/billing_db.rs)",
    ),
    (
        SearchAudit::PATH,
        "the caller's own tenant (admins) or all (platform admins) only",
    ),
    (
        GetSsoSettings::PATH,
        "the caller's own tenant; its admins only",
    ),
    (
        SaveSsoSettings::PATH,
        "the caller's own tenant; its admins only",
    ),
    (
        VerifySsoDomain::PATH,
        "a domain claim of the caller's own tenant; its admins only; another tenant's is not found \
         (control-plane/tests/db/sso.rs)",
    ),
];

fn cases() -> Vec<Case> {
    vec![
        Case {
            path: ListAllocations::PATH,
            need: Need::SeeProject,
            mutates: false,
            args: |i| vec![("project", i.project.clone()), ("state", "all".into())],
        },
        Case {
            path: GetAllocation::PATH,
            need: Need::SeeProject,
            mutates: false,
            args: |i| vec![("id", i.allocation.clone())],
        },
        Case {
            path: LaunchAllocation::PATH,
            need: Need::ProjectOperator,
            mutates: true,
            args: |i| {
                vec![
                    ("project", i.project.clone()),
                    ("sku", "h100.1x".into()),
                    ("region", String::new()),
                    ("listing", "ubuntu-24.04-cuda".into()),
                    ("name", "pwned".into()),
                    ("ssh_public_key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x".into()),
                    ("idempotency_key", "isolation-key-1".into()),
                ]
            },
        },
        Case {
            path: ReleaseAllocation::PATH,
            need: Need::ProjectOperator,
            mutates: true,
            args: |i| vec![("id", i.allocation.clone())],
        },
        Case {
            path: GetProject::PATH,
            need: Need::SeeProject,
            mutates: false,
            args: |i| vec![("id", i.project.clone())],
        },
        Case {
            path: RenameProject::PATH,
            need: Need::ProjectAdmin,
            mutates: true,
            args: |i| vec![("id", i.project.clone()), ("name", "pwned".into())],
        },
        Case {
            path: InviteMember::PATH,
            need: Need::ProjectAdmin,
            mutates: true,
            args: |i| {
                vec![
                    ("id", i.project.clone()),
                    ("email", "mallory@acme.example".into()),
                    ("role", "admin".into()),
                ]
            },
        },
        Case {
            path: ChangeMemberRole::PATH,
            need: Need::ProjectAdmin,
            mutates: true,
            args: |i| {
                vec![
                    ("id", i.project.clone()),
                    ("user", i.alice.clone()),
                    ("role", "viewer".into()),
                ]
            },
        },
        Case {
            path: RemoveMember::PATH,
            need: Need::ProjectAdmin,
            mutates: true,
            args: |i| vec![("id", i.project.clone()), ("user", i.alice.clone())],
        },
        Case {
            path: SetPolicy::PATH,
            need: Need::TenantAdmin,
            mutates: true,
            args: |i| {
                vec![
                    ("scope", "project".into()),
                    ("project", i.project.clone()),
                    ("key", "max_gpus_in_use".into()),
                    ("value", "9999".into()),
                ]
            },
        },
    ]
}

/// A demo user and what they may do with each Acme project.
struct Caller {
    email: &'static str,
    research: Option<Need>,
    inference: Option<Need>,
}

const CALLERS: &[Caller] = &[
    // Another tenant entirely.
    Caller {
        email: "carol@globex.example",
        research: None,
        inference: None,
    },
    // Acme member: operator of research, not in inference.
    Caller {
        email: "bob@acme.example",
        research: Some(Need::ProjectOperator),
        inference: None,
    },
    // Acme finance: views every project.
    Caller {
        email: "fiona@acme.example",
        research: Some(Need::SeeProject),
        inference: Some(Need::SeeProject),
    },
];

async fn session_cookie(
    store: &PostgresStore,
    cp: &ControlPlane,
    pool: &sqlx::PgPool,
    email: &str,
) -> String {
    let id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM users WHERE email = $1")
        .bind(email)
        .fetch_one(pool)
        .await
        .unwrap();
    let principal = cp.principal(UserId(id)).await.unwrap().unwrap();
    let session = Session::new(None, Arc::new(store.clone()), None);
    app::server::sign_in(&session, &principal, "test")
        .await
        .unwrap();
    session.save().await.unwrap();
    format!("portal_session={}", session.id().unwrap())
}

/// An allocation of `project` (made once, by SQL, on a node made for it).
async fn allocation_in(pool: &sqlx::PgPool, project: control_plane::ProjectId) -> String {
    let id: uuid::Uuid = sqlx::query_scalar(
        "WITH n AS (INSERT INTO nodes (id, hostname, region, rack, family, capacity_shapes, enrolled_by)
                    SELECT gen_random_uuid(), 'iso-' || substr(md5($1::text), 1, 8), 'eu-west-1', 'r1', 'hgx-h100-8x',
                           ARRAY['gpu_slice'], (SELECT id FROM users WHERE email = 'alice@acme.example')
                    ON CONFLICT (hostname) DO UPDATE SET rack = 'r1' RETURNING id)
         INSERT INTO allocations (id, tenant_id, project_id, name, sku_id, shape, gpu_count, region, node_id,
                                  listing_version_id, ssh_public_key, price_per_hour_minor, currency, idempotency_key,
                                  request_fingerprint, requested_by, placement, state, requested_at)
         SELECT gen_random_uuid(), p.tenant_id, p.id, 'existing', s.id, 'gpu_slice', 1, 'eu-west-1', n.id,
                i.id, 'k', 299, 'USD', 'existing-' || p.id, 'f', (SELECT id FROM users WHERE email = 'alice@acme.example'),
                '{}', 'placed', now()
         FROM projects p, skus s, listing_versions i, n
         WHERE p.id = $1 AND s.name = 'h100.1x'
           AND i.listing_id = (SELECT id FROM listings WHERE slug = 'ubuntu-24.04-cuda')
         ON CONFLICT (project_id, idempotency_key) DO UPDATE SET name = 'existing'
         RETURNING id",
    )
    .bind(project.0)
    .fetch_one(pool)
    .await
    .unwrap();
    id.to_string()
}

/// Everything a server function here could change, in one string.
async fn fingerprint(pool: &sqlx::PgPool) -> String {
    sqlx::query_scalar(
        "SELECT concat_ws('|',
            (SELECT string_agg(id::text || display_name, ',' ORDER BY id) FROM projects),
            (SELECT string_agg(project_id::text || user_id::text || role, ',' ORDER BY project_id, user_id) FROM project_memberships),
            (SELECT count(*) FROM project_invitations),
            (SELECT string_agg(key || value::text, ',' ORDER BY id) FROM policies),
            (SELECT count(*) FROM audit_log),
            (SELECT count(*) FROM nodes),
            (SELECT string_agg(id::text || state || desired_state, ',' ORDER BY id) FROM allocations),
            (SELECT string_agg(name || state, ',' ORDER BY name) FROM skus),
            (SELECT string_agg(id::text || state, ',' ORDER BY id) FROM listing_versions),
            (SELECT string_agg(id::text || status || revenue_share_bps, ',' ORDER BY id) FROM publishers),
            (SELECT count(*) FROM node_bootstrap_tokens))",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[test]
fn every_server_function_is_in_the_matrix() {
    let cases = cases();
    let known: Vec<&str> = cases
        .iter()
        .map(|c| c.path)
        .chain(NO_RESOURCE_ID.iter().map(|(p, _)| *p))
        .chain(FLEET.iter().map(|(p, _)| *p))
        .collect();
    let registered: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_string())
        .collect();
    assert!(!registered.is_empty());
    for path in &registered {
        assert!(
            known.contains(&path.as_str()),
            "server function {path} is missing from the isolation matrix (server/tests/isolation.rs): \
             add it to cases() if it takes a resource id, else to NO_RESOURCE_ID with the reason"
        );
    }
    for path in known {
        assert!(
            registered.iter().any(|r| r == path),
            "{path} is in the matrix but not registered"
        );
    }
}

#[tokio::test]
async fn other_tenants_and_weaker_roles_get_nothing_and_change_nothing() {
    let db = test_db::demo().await;
    let config = Flags::parse_from([
        "server",
        "--database-url",
        &db.url(),
        "--public-url",
        ORIGIN,
    ])
    .config;
    let state = app_state(&config).unwrap();
    let cp = state.cp.clone();
    let pool = cp.pool().clone();
    cp.migrate().await.unwrap();
    cp.seed_demo_identity_providers("http://127.0.0.1:9", "s")
        .await
        .unwrap();
    let app = router(state);
    let store = PostgresStore::new(pool.clone());
    let alice: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM users WHERE email = 'alice@acme.example'")
            .fetch_one(&pool)
            .await
            .unwrap();

    let mut checked = 0;
    for caller in CALLERS {
        let cookie = session_cookie(&store, &cp, &pool, caller.email).await;
        for (project, may) in [
            (demo::ACME_RESEARCH, caller.research),
            (demo::ACME_INFERENCE, caller.inference),
        ] {
            let ids = Ids {
                project: project.to_string(),
                alice: alice.to_string(),
                allocation: allocation_in(&pool, project).await,
            };
            for case in cases() {
                if may.is_some_and(|m| m >= case.need) {
                    continue; // allowed: not an isolation case
                }
                let before = fingerprint(&pool).await;
                let body = serde_urlencoded_form(&(case.args)(&ids));
                let res = app
                    .clone()
                    .oneshot(
                        Request::post(case.path)
                            .header("content-type", "application/x-www-form-urlencoded")
                            .header("origin", ORIGIN)
                            .header("cookie", &cookie)
                            .body(Body::from(body))
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                let status = res.status();
                let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
                    .await
                    .unwrap();
                let text = String::from_utf8_lossy(&bytes);
                let what = format!("{} as {} on {project}", case.path, caller.email);
                assert!(
                    !text.contains("Origin check"),
                    "{what}: refused by the origin check, not by authorization"
                );
                // Another tenant's resource doesn't exist for the caller (404); a weaker role
                // in the same tenant is refused (403). Never a 500.
                if may.is_none() {
                    assert_eq!(status, StatusCode::NOT_FOUND, "{what}: {text}");
                    assert!(
                        text.contains("NotFound"),
                        "{what}: expected not-found, got {text}"
                    );
                } else {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {text}");
                    assert!(
                        text.contains("Forbidden"),
                        "{what}: expected forbidden, got {text}"
                    );
                }
                for leak in [
                    "Research",
                    "Inference",
                    "alice@acme.example",
                    "Alice Anders",
                ] {
                    assert!(!text.contains(leak), "{what}: leaked {leak:?}: {text}");
                }
                assert_eq!(
                    fingerprint(&pool).await,
                    before,
                    "{what}: changed something (mutates={})",
                    case.mutates
                );
                checked += 1;
            }
        }
    }
    for caller in CALLERS {
        let cookie = session_cookie(&store, &cp, &pool, caller.email).await;
        for (path, args) in FLEET {
            let before = fingerprint(&pool).await;
            let pairs: Vec<(&str, String)> =
                args.iter().map(|(k, v)| (*k, v.to_string())).collect();
            let res = app
                .clone()
                .oneshot(
                    Request::post(*path)
                        .header("content-type", "application/x-www-form-urlencoded")
                        .header("origin", ORIGIN)
                        .header("cookie", &cookie)
                        .body(Body::from(serde_urlencoded_form(&pairs)))
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = res.status();
            let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{path} as {}: {text}",
                caller.email
            );
            assert!(
                text.contains("Forbidden") && text.contains("platform"),
                "{path} as {}: expected a platform-role refusal, got {text}",
                caller.email
            );
            assert_eq!(
                fingerprint(&pool).await,
                before,
                "{path} as {} changed something",
                caller.email
            );
        }
    }
    // carol: 10 cases x 2 projects; bob: 5 on research (operator there) + 10 on inference;
    // fiona: 7 on each (she sees both, launches and releases in neither).
    assert_eq!(checked, 20 + 15 + 14);
    drop(db);
}

fn serde_urlencoded_form(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
