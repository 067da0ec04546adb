//! Break-glass credentials and platform-role proofs, against a real database.

use control_plane::prelude::*;

use crate::support::refusal;
use control_plane::auth::{PlatformAdmin, PlatformRole, PlatformStaff};
use control_plane::{ControlPlane, Error, Naming};
use sqlx::PgPool;

const PW: &str = "correct horse battery staple";

fn cp(pool: PgPool) -> ControlPlane {
    ControlPlane::new(pool, Naming::default())
}

#[tokio::test]
async fn break_glass_sign_in_accepts_only_the_right_password() {
    let db = crate::support::empty_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool.clone());
    let id = cp
        .set_break_glass_password("Ada@Platform.example", "Ada Admin", PW)
        .await
        .unwrap();

    let p = cp
        .verify_break_glass(" ada@platform.EXAMPLE ", PW, None)
        .await
        .unwrap();
    assert_eq!(p.user_id, id);
    assert_eq!(p.email, "ada@platform.example");
    assert_eq!(p.platform_role, Some(PlatformRole::Admin));

    for (email, password) in [
        ("ada@platform.example", "correct horse battery stapl"),
        ("ada@platform.example", ""),
        ("nobody@platform.example", PW),
    ] {
        let err = cp
            .verify_break_glass(email, password, None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidCredentials),
            "{email}/{password}: {err}"
        );
    }
}

#[tokio::test]
async fn setting_again_replaces_the_password_and_both_are_audited() {
    let db = crate::support::empty_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool.clone());
    cp.set_break_glass_password("ada@platform.example", "Ada", PW)
        .await
        .unwrap();
    cp.set_break_glass_password("ada@platform.example", "Ada", "a brand new long password")
        .await
        .unwrap();
    assert!(matches!(
        cp.verify_break_glass("ada@platform.example", PW, None)
            .await,
        Err(Error::InvalidCredentials)
    ));
    cp.verify_break_glass("ada@platform.example", "a brand new long password", None)
        .await
        .unwrap();
    let actions: Vec<String> = sqlx::query_scalar("SELECT action FROM audit_log ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        actions,
        [
            "platform_admin.password_set",
            "platform_admin.password_reset"
        ]
    );
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(users, 1);
}

#[tokio::test]
async fn break_glass_is_for_platform_admins_only() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool.clone());
    // alice is a tenant admin, not platform staff: no break-glass password for her.
    let err = cp
        .set_break_glass_password("alice@acme.example", "Alice", PW)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Conflict(ref m) if m.contains("not a platform admin")),
        "{err}"
    );

    // The table refuses it too, whatever the Rust says.
    let err = sqlx::query(
        "INSERT INTO break_glass_credentials (user_id, password_hash)
         SELECT id, '$argon2id$v=19$x' FROM users WHERE email = 'alice@acme.example'",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("break_glass_credentials_user_id_platform_role_fkey"),
        "{err}"
    );

    // And an admin holding a password can't be quietly demoted.
    cp.set_break_glass_password("ada@platform.example", "Ada", PW)
        .await
        .unwrap();
    let err = sqlx::query(
        "UPDATE users SET platform_role = 'operator' WHERE email = 'ada@platform.example'",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("break_glass_credentials_user_id_platform_role_fkey"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_input_is_refused_by_name_and_nothing_is_written() {
    let db = crate::support::empty_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool.clone());
    assert_eq!(
        refusal(cp.set_break_glass_password("ada@platform.example", "Ada", "too short")).await,
        "invalid password: use at least 12 characters"
    );
    assert_eq!(
        refusal(cp.set_break_glass_password("not-an-email", "Ada", PW)).await,
        "invalid email: \"not-an-email\" is not an email address"
    );
    assert_eq!(
        refusal(cp.set_break_glass_password("ada@platform.example", "  ", PW)).await,
        "invalid name: use 1 to 200 characters"
    );
    assert_eq!(
        refusal(cp.set_break_glass_password("ada@platform.example", &"A".repeat(201), PW)).await,
        "invalid name: use 1 to 200 characters"
    );
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM audit_log)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn platform_proofs_need_the_role() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool.clone());
    let admin = cp
        .set_break_glass_password("ada@platform.example", "Ada", PW)
        .await
        .unwrap();
    let ada = cp.principal(admin).await.unwrap().unwrap();
    assert_eq!(
        ada.platform::<PlatformAdmin>().unwrap().role(),
        PlatformRole::Admin
    );
    assert!(ada.platform::<PlatformStaff>().is_ok());

    let alice_id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM users WHERE email = 'alice@acme.example'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let alice = cp.principal(alice_id.into()).await.unwrap().unwrap();
    let err = alice.platform::<PlatformStaff>().err().unwrap();
    assert_eq!(err.to_string(), "only platform staff may do this");
    let err = alice.platform::<PlatformAdmin>().err().unwrap();
    assert_eq!(err.to_string(), "only platform admins may do this");
}
