//! Tenancy, the audit log's guarantees, the demo seed and readiness.

use control_plane::audit::{self, Actor, AuditEntry};
use control_plane::health::Readiness;
use control_plane::prelude::*;
use control_plane::{ControlPlane, MIGRATOR, Naming, TenantId, demo};
use serde_json::json;
use sqlx::PgPool;

fn cp(pool: PgPool) -> ControlPlane {
    ControlPlane::new(pool, Naming::default())
}

fn db_message(err: sqlx::Error) -> String {
    err.as_database_error()
        .map(|e| e.message().to_string())
        .unwrap_or_else(|| panic!("expected a database error, got {err:?}"))
}

#[tokio::test]
async fn audit_log_refuses_update_delete_and_truncate() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let resource = Naming::default().tenant(demo::ACME);
    let mut conn = pool.acquire().await.unwrap();
    let id = audit::record(
        &mut conn,
        AuditEntry {
            actor: Actor::System,
            action: "tenant.rename",
            resource: &resource,
            before: Some(json!({"display_name": "Acme"})),
            after: Some(json!({"display_name": "Acme Corp"})),
            request_id: Some("req-1"),
        },
    )
    .await
    .unwrap();

    let update = sqlx::query("UPDATE audit_log SET action = 'tenant.delete' WHERE id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        db_message(update),
        "audit_log is append-only: UPDATE is not allowed"
    );

    let delete = sqlx::query("DELETE FROM audit_log WHERE id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        db_message(delete),
        "audit_log is append-only: DELETE is not allowed"
    );

    let truncate = sqlx::query("TRUNCATE audit_log")
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        db_message(truncate),
        "audit_log is append-only: TRUNCATE is not allowed"
    );

    // The row is untouched.
    let (action, tenant, request): (String, Option<uuid::Uuid>, Option<String>) =
        sqlx::query_as("SELECT action, tenant_id, request_id FROM audit_log WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(action, "tenant.rename");
    assert_eq!(tenant, Some(demo::ACME.0));
    assert_eq!(request.as_deref(), Some("req-1"));
}

#[tokio::test]
async fn audit_log_rejects_malformed_rows() {
    let db = crate::support::empty_db().await;
    let pool = db.pool().clone();
    // A user actor without a user id is refused by the table itself.
    let err = sqlx::query(
        "INSERT INTO audit_log (actor_kind, action, resource) VALUES ('user', 'tenant.create', 'x')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(db_message(err).contains("audit_log_check"));
    // So is an action that is not a dotted verb.
    let err = sqlx::query(
        "INSERT INTO audit_log (actor_kind, action, resource) VALUES ('system', 'Create Tenant', 'x')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(db_message(err).contains("audit_log_action_check"));
}

#[tokio::test]
async fn demo_seed_is_idempotent_and_audited() {
    let db = crate::support::empty_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool.clone());
    let first = cp.seed_demo().await.unwrap();
    assert_eq!(
        first,
        demo::SeedReport {
            tenants: 2,
            projects: 3,
            users: 4
        }
    );
    let second = cp.seed_demo().await.unwrap();
    assert_eq!(second, demo::SeedReport::default());

    let audits: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(audits, 5, "2 tenant.create + 3 project.create, once");
    let acme_resource: String = sqlx::query_scalar(
        "SELECT resource FROM audit_log WHERE action = 'tenant.create' AND tenant_id = $1",
    )
    .bind(demo::ACME.0)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        acme_resource,
        format!("gpuaas:portal::{0}::tenant:{0}", demo::ACME)
    );
    let bob_projects: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.slug, pm.role FROM project_memberships pm
         JOIN projects p ON p.id = pm.project_id
         JOIN users u ON u.id = pm.user_id WHERE u.email = 'bob@acme.example'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(bob_projects, vec![("research".into(), "operator".into())]);
}

#[tokio::test]
async fn project_membership_requires_same_tenant_membership() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    // carol belongs to Globex; she cannot be put into Acme's research project.
    let err = sqlx::query(
        "INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
         SELECT $1, $2, id, 'viewer' FROM users WHERE email = 'carol@globex.example'",
    )
    .bind(demo::ACME_RESEARCH.0)
    .bind(demo::ACME.0)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        db_message(err).contains("project_memberships_tenant_id_user_id_fkey"),
        "foreign key to tenant_memberships must refuse"
    );
    // Nor can a project be claimed for the wrong tenant.
    let err = sqlx::query(
        "INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
         SELECT $1, $2, id, 'viewer' FROM users WHERE email = 'carol@globex.example'",
    )
    .bind(demo::ACME_RESEARCH.0)
    .bind(demo::GLOBEX.0)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(db_message(err).contains("project_memberships_tenant_id_project_id_fkey"));
}

#[tokio::test]
async fn emails_are_unique_case_insensitively_and_slugs_are_checked() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let err = sqlx::query(
        "INSERT INTO users (id, email, display_name) VALUES (gen_random_uuid(), 'Alice@ACME.example', 'A')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(db_message(err).contains("users_email_key"));

    let err =
        sqlx::query("INSERT INTO tenants (id, slug, display_name) VALUES ($1, 'Not A Slug', 'x')")
            .bind(TenantId::new_random().0)
            .execute(&pool)
            .await
            .unwrap_err();
    assert!(db_message(err).contains("slug_check"));
}

#[tokio::test]
async fn readiness_waits_for_migrations() {
    let db = crate::support::blank_db().await;
    let pool = db.pool().clone();
    let cp = cp(pool);
    let expected = MIGRATOR.iter().count();
    assert_eq!(
        cp.readiness().await,
        Readiness::MigrationsPending {
            applied: 0,
            expected
        }
    );
    cp.migrate().await.unwrap();
    assert_eq!(
        cp.readiness().await,
        Readiness::Ready {
            migrations: expected
        }
    );
}

/// A database that applied migration 0043 before its header comment was corrected still
/// migrates: its record moves to the new text's checksum. One that applied any other text
/// is refused, as sqlx refuses it.
#[tokio::test]
async fn a_reworded_migration_is_accepted_only_from_its_old_text() {
    let db = crate::support::blank_db().await;
    let cp = cp(db.pool().clone());
    cp.migrate().await.unwrap();
    let record = |checksum: Vec<u8>| {
        let pool = db.pool().clone();
        async move {
            sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = 20261204000043")
                .bind(checksum)
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let old = cp_base::migrations::old_checksum(20261204000043).expect("0043 was reworded");
    assert_eq!(old.len(), 48, "a SHA-384");
    record(old).await;
    cp.migrate()
        .await
        .expect("the old text's record is moved on");
    let now: Vec<u8> =
        sqlx::query_scalar("SELECT checksum FROM _sqlx_migrations WHERE version = 20261204000043")
            .fetch_one(db.pool())
            .await
            .unwrap();
    let current = MIGRATOR
        .iter()
        .find(|m| m.version == 20261204000043)
        .unwrap();
    assert_eq!(now, current.checksum.as_ref());

    record(vec![0; 48]).await;
    assert!(
        cp.migrate().await.is_err(),
        "another text than the old one is still refused"
    );
}
