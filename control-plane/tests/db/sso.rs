//! Single sign-on against the database, for the paths that need no live provider. The full
//! round trip, against a real OpenID provider, is in end2end/tests/sso.test.mjs.

use control_plane::sso::SsoError;
use control_plane::{ControlPlane, Error, Naming, demo};
use sqlx::PgPool;

const CALLBACK: &str = "http://127.0.0.1:3000/auth/callback";

async fn seeded(pool: PgPool, issuer: &str) -> ControlPlane {
    let cp = ControlPlane::new(pool, Naming::default());
    cp.seed_demo_identity_providers(issuer, "s3cret")
        .await
        .unwrap();
    cp
}

/// A loopback port with nothing listening on it.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn an_email_domain_no_tenant_owns_is_named_in_the_error() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let cp = seeded(pool, "http://127.0.0.1:9").await;
    match cp
        .sso_begin("Mallory@Unknown.Example", CALLBACK, None)
        .await
    {
        Err(Error::Sso(SsoError::UnknownDomain { domain })) => {
            assert_eq!(domain, "unknown.example")
        }
        other => panic!(
            "expected UnknownDomain, got {:?}",
            other.map(|s| s.authorize_url)
        ),
    }
    let err = cp
        .sso_begin("not an email", CALLBACK, None)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(err, Error::Invalid { field: "email", .. }),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_issuer_is_reported_as_such() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let issuer = format!("http://127.0.0.1:{}", closed_port());
    let cp = seeded(pool, &issuer).await;
    match cp.sso_begin("alice@acme.example", CALLBACK, None).await {
        Err(Error::Sso(e @ SsoError::IssuerUnreachable { .. })) => {
            assert_eq!(e.code(), "issuer_unreachable");
            assert_eq!(
                e.to_string(),
                format!("the identity provider at {issuer} could not be reached")
            );
        }
        other => panic!(
            "expected IssuerUnreachable, got {:?}",
            other.map(|s| s.authorize_url)
        ),
    }
}

#[tokio::test]
async fn a_domain_belongs_to_one_tenant_only() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    seeded(pool.clone(), "http://127.0.0.1:9").await;
    let err = sqlx::query(
        "INSERT INTO tenant_email_domains (domain, tenant_id) VALUES ('acme.example', $1)",
    )
    .bind(demo::GLOBEX.0)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("tenant_email_domains_pkey"),
        "{err}"
    );
    let err = sqlx::query(
        "INSERT INTO tenant_email_domains (domain, tenant_id) VALUES ('Globex.EXAMPLE', $1)",
    )
    .bind(demo::GLOBEX.0)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("tenant_email_domains_domain_check"),
        "{err}"
    );
}

#[tokio::test]
async fn seeding_the_demo_providers_twice_changes_only_what_changed() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
    cp.seed_demo_identity_providers("http://127.0.0.1:10", "n3w")
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT issuer_url, client_secret FROM identity_providers ORDER BY client_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("http://127.0.0.1:10".into(), "n3w".into()),
            ("http://127.0.0.1:10".into(), "n3w".into())
        ]
    );
    let domains: i64 = sqlx::query_scalar("SELECT count(*) FROM tenant_email_domains")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(domains, 2);
}

mod provider_settings {
    use super::*;
    use control_plane::sso::ProviderUpdate;
    use control_plane::tenancy::{TenantAdmins, TenantRole};

    fn update(issuer: &str) -> ProviderUpdate {
        ProviderUpdate {
            issuer_url: issuer.into(),
            client_id: "portal".into(),
            client_secret: Some("s3cret".into()),
            domains: vec!["acme.example".into()],
            role_claim: "groups".into(),
            default_role: TenantRole::Member,
            mappings: vec![("acme-admins".into(), TenantRole::Admin)],
        }
    }

    #[tokio::test]
    async fn bad_settings_are_refused_by_field_and_nothing_is_written() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
        let alice: uuid::Uuid =
            sqlx::query_scalar("SELECT id FROM users WHERE email = 'alice@acme.example'")
                .fetch_one(&pool)
                .await
                .unwrap();
        let alice = cp.principal(alice.into()).await.unwrap().unwrap();
        let who = cp
            .tenant_access::<TenantAdmins>(&alice, demo::ACME)
            .await
            .unwrap();
        let before = cp.provider_settings(&who).await.unwrap();

        let cases: Vec<(ProviderUpdate, &str)> = vec![
            (update("ftp://idp.acme.example"), "issuer_url"),
            (
                ProviderUpdate {
                    client_id: " ".into(),
                    ..update("https://idp.acme.example")
                },
                "client_id",
            ),
            (
                ProviderUpdate {
                    domains: vec![" ".into()],
                    ..update("https://idp.acme.example")
                },
                "domains",
            ),
            (
                ProviderUpdate {
                    domains: vec!["not a domain".into()],
                    ..update("https://idp.acme.example")
                },
                "domains",
            ),
            (
                ProviderUpdate {
                    role_claim: "no spaces allowed".into(),
                    ..update("https://idp.acme.example")
                },
                "role_claim",
            ),
            (
                ProviderUpdate {
                    default_role: TenantRole::Owner,
                    ..update("https://idp.acme.example")
                },
                "default_role",
            ),
            // Nothing listens there: discovery fails before anything is written.
            (
                update(&format!("http://127.0.0.1:{}", closed_port())),
                "issuer_url",
            ),
        ];
        for (u, field) in cases {
            let err = cp.save_provider(&who, u, None).await.unwrap_err();
            match err {
                Error::Invalid {
                    field: f,
                    ref reason,
                } => assert_eq!(f, field, "{reason}"),
                other => panic!("{field}: expected Invalid, got {other}"),
            }
        }
        assert_eq!(cp.provider_settings(&who).await.unwrap(), before);
    }
}
