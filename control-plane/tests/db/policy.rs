//! The policy chain against the database: most specific wins, clear falls back, shapes and
//! uniqueness are the table's own rules, and every change is audited.

use control_plane::prelude::*;

use crate::support::{in_project, in_tenant};

use crate::support::principal;

use control_plane::auth::PlatformAdmin;
use control_plane::policy::{Level, PolicyKey, PolicyValue, Scope};
use control_plane::tenancy::{ProjectViewers, TenantAdmins};
use control_plane::{ControlPlane, Error, Naming, demo};

fn gpus(r: &[control_plane::policy::Resolved]) -> (Option<PolicyValue>, Option<Level>) {
    let r = r.iter().find(|r| r.key == PolicyKey::MaxGpusInUse).unwrap();
    (r.value.clone(), r.decided_by)
}

#[tokio::test]
async fn the_most_specific_level_decides_and_clearing_falls_back() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let root = cp
        .set_break_glass_password("root@platform.example", "Root", "a long enough password")
        .await
        .unwrap();
    let root = cp.principal(root).await.unwrap().unwrap();
    let alice = principal(&cp, "alice@acme.example").await;
    let acme_admin = in_tenant::<TenantAdmins>(&cp, &alice, demo::ACME).await;
    let research = in_project::<ProjectViewers>(&cp, &alice, demo::ACME_RESEARCH).await;

    let global = Scope::global(&root.platform::<PlatformAdmin>().unwrap());
    let tenant = Scope::tenant(&acme_admin);
    let project = Scope::project(&acme_admin, &research).unwrap();
    cp.set_policy(
        &global,
        PolicyKey::MaxGpusInUse,
        Some(PolicyValue::MaxGpusInUse(64)),
        None,
    )
    .await
    .unwrap();
    cp.set_policy(
        &tenant,
        PolicyKey::MaxGpusInUse,
        Some(PolicyValue::MaxGpusInUse(32)),
        None,
    )
    .await
    .unwrap();
    cp.set_policy(
        &project,
        PolicyKey::MaxGpusInUse,
        Some(PolicyValue::MaxGpusInUse(8)),
        Some("req-9"),
    )
    .await
    .unwrap();

    let r = cp
        .resolve_policies(Some(demo::ACME), Some(demo::ACME_RESEARCH))
        .await
        .unwrap();
    assert_eq!(
        gpus(&r),
        (Some(PolicyValue::MaxGpusInUse(8)), Some(Level::Project))
    );
    let trace = &r
        .iter()
        .find(|r| r.key == PolicyKey::MaxGpusInUse)
        .unwrap()
        .trace;
    assert_eq!(
        trace,
        &vec![
            (Level::Global, Some(PolicyValue::MaxGpusInUse(64))),
            (Level::Tenant, Some(PolicyValue::MaxGpusInUse(32))),
            (Level::Project, Some(PolicyValue::MaxGpusInUse(8))),
        ]
    );
    let r = cp
        .resolve_policies(Some(demo::ACME), Some(demo::ACME_INFERENCE))
        .await
        .unwrap();
    assert_eq!(
        gpus(&r),
        (Some(PolicyValue::MaxGpusInUse(32)), Some(Level::Tenant))
    );
    let r = cp
        .resolve_policies(Some(demo::GLOBEX), Some(demo::GLOBEX_DEFAULT))
        .await
        .unwrap();
    assert_eq!(
        gpus(&r),
        (Some(PolicyValue::MaxGpusInUse(64)), Some(Level::Global))
    );
    // Nothing set for a key: no limit, nobody decided.
    let skus = r.iter().find(|r| r.key == PolicyKey::AllowedSkus).unwrap();
    assert_eq!((&skus.value, skus.decided_by), (&None, None));

    cp.set_policy(&project, PolicyKey::MaxGpusInUse, None, None)
        .await
        .unwrap();
    let r = cp
        .resolve_policies(Some(demo::ACME), Some(demo::ACME_RESEARCH))
        .await
        .unwrap();
    assert_eq!(
        gpus(&r),
        (Some(PolicyValue::MaxGpusInUse(32)), Some(Level::Tenant))
    );

    let audit: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, resource FROM audit_log WHERE action LIKE 'policy.%' ORDER BY id",
    )
    .fetch_all(cp.pool())
    .await
    .unwrap();
    let project_name = format!(
        "gpuaas:portal::{}:{1}:project:{1}",
        demo::ACME,
        demo::ACME_RESEARCH
    );
    assert_eq!(
        audit,
        vec![
            (
                "policy.set".into(),
                "gpuaas:portal::::platform:policies".into()
            ),
            (
                "policy.set".into(),
                format!("gpuaas:portal::{0}::tenant:{0}", demo::ACME)
            ),
            ("policy.set".into(), project_name.clone()),
            ("policy.clear".into(), project_name),
        ]
    );
}

#[tokio::test]
async fn another_tenants_project_is_not_a_scope() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    let carol = principal(&cp, "carol@globex.example").await;
    let globex_admin = in_tenant::<TenantAdmins>(&cp, &carol, demo::GLOBEX).await;
    let research = in_project::<ProjectViewers>(&cp, &alice, demo::ACME_RESEARCH).await;
    assert!(matches!(
        Scope::project(&globex_admin, &research),
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn the_table_checks_value_shapes_and_one_setting_per_scope() {
    let db = crate::support::empty_db().await;
    let pool = db.pool().clone();
    for (key, value) in [
        ("max_gpus_in_use", "-1"),
        ("max_gpus_in_use", "1.5"),
        ("max_gpus_in_use", "\"8\""),
        ("allowed_skus", "[]"),
        (
            "monthly_budget",
            r#"{"amount_minor": 100, "currency": "usd"}"#,
        ),
        ("max_allocation_lifetime_hours", "0"),
    ] {
        let err = sqlx::query("INSERT INTO policies (key, value) VALUES ($1, $2::jsonb)")
            .bind(key)
            .bind(value)
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("policies_value_shape"),
            "{key}={value}: {err}"
        );
    }
    let err = sqlx::query("INSERT INTO policies (key, value) VALUES ('no_such_key', '1')")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("policies_key_check"), "{err}");

    sqlx::query("INSERT INTO policies (key, value) VALUES ('max_gpus_in_use', '8')")
        .execute(&pool)
        .await
        .unwrap();
    let err = sqlx::query("INSERT INTO policies (key, value) VALUES ('max_gpus_in_use', '9')")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("policies_scope_key"),
        "two global settings: {err}"
    );
}

#[tokio::test]
async fn who_may_see_and_who_may_set_policies_at_each_level() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    use control_plane::policy::Target;
    let cp = ControlPlane::new(pool.clone(), Naming::default());
    let root = cp
        .set_break_glass_password("root@platform.example", "Root", "a long enough password")
        .await
        .unwrap();
    let root = cp.principal(root).await.unwrap().unwrap();
    let alice = principal(&cp, "alice@acme.example").await;
    let bob = principal(&cp, "bob@acme.example").await;
    let fiona = principal(&cp, "fiona@acme.example").await;
    let carol = principal(&cp, "carol@globex.example").await;
    let research = Target::Project(demo::ACME_RESEARCH);
    let acme = Target::Tenant(demo::ACME);

    let can_edit = |r: control_plane::Result<(Vec<_>, bool)>| {
        r.map(|(rows, e)| {
            assert_eq!(rows.len(), PolicyKey::ALL.len());
            e
        })
    };
    assert!(can_edit(cp.policies_at(&root, Target::Global).await).unwrap());
    assert!(can_edit(cp.policies_at(&alice, acme).await).unwrap());
    assert!(can_edit(cp.policies_at(&alice, research).await).unwrap());
    // Members and finance see the policies in force, and can't change them.
    assert!(!can_edit(cp.policies_at(&bob, research).await).unwrap());
    assert!(!can_edit(cp.policies_at(&bob, acme).await).unwrap());
    assert!(!can_edit(cp.policies_at(&fiona, research).await).unwrap());
    // Tenant users aren't platform staff; another tenant sees nothing.
    assert!(matches!(
        cp.policies_at(&alice, Target::Global).await,
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        cp.policies_at(&carol, research).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        cp.policy_scope(&carol, acme).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        cp.policy_scope(&bob, research).await,
        Err(Error::Forbidden { .. })
    ));
}
