//! Single sign-on against the database, for the paths that need no live provider. The full
//! round trip, against a real OpenID provider, is in end2end/tests/sso.test.mjs.

use control_plane::prelude::*;

use crate::support::in_tenant;

use control_plane::sso::SsoError;
use control_plane::{ControlPlane, Error, Naming, demo};
use sqlx::PgPool;

/// Alice's proof that she administers Acme.
async fn acme_admin(
    cp: &ControlPlane,
) -> control_plane::tenancy::Tenant<control_plane::tenancy::TenantAdmins> {
    let alice: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM users WHERE email = 'alice@acme.example'")
            .fetch_one(cp.pool())
            .await
            .unwrap();
    let alice = cp.principal(alice.into()).await.unwrap().unwrap();
    cp.tenant_access(&alice, demo::ACME).await.unwrap()
}

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
async fn domain_names_are_stored_lowercase_and_claimed_once_per_tenant() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    seeded(pool.clone(), "http://127.0.0.1:9").await;
    let claim = |domain: &'static str, tenant: control_plane::TenantId| {
        sqlx::query(
            "INSERT INTO tenant_email_domains (domain, tenant_id, verification_token)
             VALUES ($1, $2, replace(gen_random_uuid()::text, '-', ''))",
        )
        .bind(domain)
        .bind(tenant.0)
        .execute(&pool)
    };
    let err = claim("acme.example", demo::ACME).await.unwrap_err();
    assert!(
        err.to_string().contains("tenant_email_domains_pkey"),
        "{err}"
    );
    let err = claim("Globex.EXAMPLE", demo::GLOBEX).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("tenant_email_domains_domain_check"),
        "{err}"
    );
}

/// Finding 1 of the security review: a tenant admin could claim any domain (the platform's
/// included) and then sign in as anyone on it through their own provider.
mod domain_proof {
    use super::*;
    use control_plane::dns::Resolver;
    use control_plane::tenancy::TenantAdmins;
    use test_db::dns::LocalDns;

    /// A pending claim, as saving the settings makes one; returns its token.
    async fn claim(pool: &PgPool, domain: &str, tenant: control_plane::TenantId) -> String {
        sqlx::query_scalar(
            "INSERT INTO tenant_email_domains (domain, tenant_id, verification_token)
             VALUES ($1, $2, replace(gen_random_uuid()::text, '-', '')) RETURNING verification_token",
        )
        .bind(domain)
        .bind(tenant.0)
        .fetch_one(pool)
        .await
        .unwrap()
    }

    fn begins_for(result: Result<control_plane::sso::SsoStart, Error>) -> bool {
        !matches!(result, Err(Error::Sso(SsoError::UnknownDomain { .. })))
    }

    #[tokio::test]
    async fn a_claimed_domain_signs_nobody_in_until_its_txt_record_is_found() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
        let token = claim(&pool, "acme-labs.test", demo::ACME).await;
        let name = control_plane::dns::challenge_name("acme-labs.test");
        let value = control_plane::dns::challenge_value(&token);
        let Some(empty) = LocalDns::start(&[]) else {
            return;
        };
        let wrong = LocalDns::start(&[(&name, "gpuaas-domain-verification=0000")]).unwrap();
        let right = LocalDns::start(&[(&name, "v=spf1 -all"), (&name, &value)]).unwrap();
        let who = acme_admin(&cp).await;

        assert!(
            !begins_for(cp.sso_begin("zoe@acme-labs.test", CALLBACK, None).await),
            "a pending domain routes nowhere"
        );
        for dns in [&empty, &wrong] {
            let cp = cp.clone().with_dns_resolver(Resolver::At(dns.addr()));
            match cp.verify_domain(&who, "acme-labs.test", None).await {
                Err(Error::Conflict(m)) => {
                    assert!(m.contains(&value) && m.contains(&name), "{m}")
                }
                other => panic!("expected a conflict naming the record, got {other:?}"),
            }
        }
        // Nothing answers there at all: said so, not "no record".
        let silent = cp.clone().with_dns_resolver(Resolver::At(
            format!("127.0.0.1:{}", closed_port()).parse().unwrap(),
        ));
        match silent.verify_domain(&who, "acme-labs.test", None).await {
            Err(Error::Conflict(m)) => assert!(m.contains("DNS lookup"), "{m}"),
            other => panic!("expected a failed lookup, got {other:?}"),
        }
        assert!(!begins_for(
            cp.sso_begin("zoe@acme-labs.test", CALLBACK, None).await
        ));

        let cp = cp.with_dns_resolver(Resolver::At(right.addr()));
        cp.verify_domain(&who, "ACME-Labs.test", Some("req-1"))
            .await
            .unwrap();
        cp.verify_domain(&who, "acme-labs.test", None)
            .await
            .unwrap();
        let via: Option<String> = sqlx::query_scalar(
            "SELECT verified_via FROM tenant_email_domains WHERE domain = 'acme-labs.test'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(via.as_deref(), Some("dns"));
        let audited: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT after->>'domain', request_id FROM audit_log WHERE action = 'email_domain.verify'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            audited,
            vec![("acme-labs.test".into(), Some("req-1".into()))],
            "audited once, by the check that verified it"
        );
        assert!(begins_for(
            cp.sso_begin("zoe@acme-labs.test", CALLBACK, None).await
        ));

        // Another tenant's admin can't check (or learn of) Acme's claims.
        let carol: uuid::Uuid =
            sqlx::query_scalar("SELECT id FROM users WHERE email = 'carol@globex.example'")
                .fetch_one(&pool)
                .await
                .unwrap();
        let carol = cp.principal(carol.into()).await.unwrap().unwrap();
        let globex = in_tenant::<TenantAdmins>(&cp, &carol, demo::GLOBEX).await;
        assert!(matches!(
            cp.verify_domain(&globex, "acme-labs.test", None).await,
            Err(Error::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn a_squatters_claim_never_blocks_the_owner_and_only_one_tenant_holds_it_verified() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
        claim(&pool, "initech.test", demo::GLOBEX).await;
        let token = claim(&pool, "initech.test", demo::ACME).await;
        let Some(dns) = LocalDns::start(&[(
            &control_plane::dns::challenge_name("initech.test"),
            &control_plane::dns::challenge_value(&token),
        )]) else {
            return;
        };
        let cp = cp.with_dns_resolver(Resolver::At(dns.addr()));
        cp.verify_domain(&acme_admin(&cp).await, "initech.test", None)
            .await
            .unwrap();
        let err = sqlx::query(
            "UPDATE tenant_email_domains SET verified_at = now(), verified_via = 'operator'
             WHERE domain = 'initech.test' AND tenant_id = $1",
        )
        .bind(demo::GLOBEX.0)
        .execute(&pool)
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("tenant_email_domains_verified_key"),
            "{err}"
        );
        // And a claim's token can't be swapped for one the claimant knows.
        let err = sqlx::query(
            "UPDATE tenant_email_domains SET verification_token = repeat('0', 32)
             WHERE domain = 'initech.test' AND tenant_id = $1",
        )
        .bind(demo::GLOBEX.0)
        .execute(&pool)
        .await
        .unwrap_err();
        assert!(err.to_string().contains("never change"), "{err}");
    }

    #[tokio::test]
    async fn the_platforms_own_domain_can_never_be_claimed() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
        crate::support::operator(&cp, "ops@platform.example").await;
        let err = sqlx::query(
            "INSERT INTO tenant_email_domains (domain, tenant_id, verification_token)
             VALUES ('platform.example', $1, repeat('a', 32))",
        )
        .bind(demo::ACME.0)
        .execute(&pool)
        .await
        .unwrap_err();
        assert!(err.to_string().contains("belongs to the platform"), "{err}");
    }

    #[tokio::test]
    async fn no_identity_is_ever_linked_to_platform_staff_or_another_tenants_user() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
        let ops = crate::support::operator(&cp, "ops@acme.example").await;
        let link = |user: uuid::Uuid, subject: &'static str| {
            sqlx::query(
                "INSERT INTO user_identities (issuer, subject, user_id, tenant_id)
                 VALUES ('http://idp.test', $1, $2, $3)",
            )
            .bind(subject)
            .bind(user)
            .bind(demo::ACME.0)
            .execute(&pool)
        };
        let err = link(ops.principal().user_id.0, "ops").await.unwrap_err();
        assert!(err.to_string().contains("platform staff"), "{err}");
        let carol: uuid::Uuid =
            sqlx::query_scalar("SELECT id FROM users WHERE email = 'carol@globex.example'")
                .fetch_one(&pool)
                .await
                .unwrap();
        let err = link(carol, "carol").await.unwrap_err();
        assert!(err.to_string().contains("another organization"), "{err}");
        let alice: uuid::Uuid =
            sqlx::query_scalar("SELECT id FROM users WHERE email = 'alice@acme.example'")
                .fetch_one(&pool)
                .await
                .unwrap();
        link(alice, "alice").await.unwrap();
    }
}

#[tokio::test]
async fn seeding_the_demo_providers_twice_changes_only_what_changed() {
    let db = crate::support::demo_db().await;
    let pool = db.pool().clone();
    let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
    // Long enough that the sealed text (random base64) cannot contain it by chance: a 3-letter
    // secret did, once in a CI run.
    let plain = "n3w-demo-client-secret";
    cp.seed_demo_identity_providers("http://127.0.0.1:10", plain)
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT issuer_url, client_secret FROM identity_providers ORDER BY client_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for (issuer, secret) in rows {
        assert_eq!(issuer, "http://127.0.0.1:10");
        assert!(
            secret.starts_with("sealed:v1:ephemeral:") && !secret.contains(plain),
            "{secret}"
        );
    }
    let domains: i64 = sqlx::query_scalar("SELECT count(*) FROM tenant_email_domains")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(domains, 2);
}

mod provider_settings {
    use super::*;
    use control_plane::sso::ProviderUpdate;
    use control_plane::tenancy::TenantRole;

    /// Acme's settings with `issuer`, as an admin would save them.
    pub(super) fn update(issuer: &str) -> ProviderUpdate {
        ProviderUpdate {
            issuer_url: issuer.into(),
            client_id: "portal".into(),
            client_secret: Some("s3cret".into()),
            domains: vec!["acme.example".into()],
            role_claim: "groups".into(),
            default_role: TenantRole::Member,
            mappings: vec![("acme-admins".into(), TenantRole::Admin)],
            token_idle_days: 30,
        }
    }

    #[tokio::test]
    async fn bad_settings_are_refused_by_field_and_nothing_is_written() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let cp = seeded(pool.clone(), "http://127.0.0.1:9").await;
        let who = acme_admin(&cp).await;
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

/// Finding 5 (SSRF): a tenant admin's issuer URL, and every URL its discovery document names,
/// is called only over https on a public address, never followed through a redirect, and
/// read only up to a bound.
mod issuer_egress {
    use super::provider_settings::update;
    use super::*;
    use control_plane::egress::Egress;
    use control_plane::tenancy::TenantAdmins;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback HTTP server that answers every request with `answer(base, path)` and counts
    /// the requests it got.
    struct Fake {
        base: String,
        hits: Arc<AtomicUsize>,
    }

    async fn fake(answer: fn(&str, &str) -> String) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let (b, h) = (base.clone(), hits.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (b, h) = (b.clone(), h.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut read = 0;
                    while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => read += n,
                        }
                    }
                    h.fetch_add(1, Ordering::SeqCst);
                    let head = String::from_utf8_lossy(&buf[..read]);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    let _ = socket.write_all(answer(&b, &path).as_bytes()).await;
                });
            }
        });
        Fake { base, hits }
    }

    fn json(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    /// A discovery document for `base` whose key set is at `jwks`, with `extra` fields first.
    fn document(base: &str, jwks: &str, extra: &str) -> String {
        format!(
            r#"{{{extra}"issuer":"{base}","authorization_endpoint":"{base}/auth","token_endpoint":"{base}/token",
                "jwks_uri":"{jwks}","response_types_supported":["code"],"subject_types_supported":["public"],
                "id_token_signing_alg_values_supported":["RS256"]}}"#
        )
    }

    fn discovery(base: &str, jwks: &str) -> String {
        json(&document(base, jwks, ""))
    }

    async fn refused(
        cp: &ControlPlane,
        who: &control_plane::tenancy::Tenant<TenantAdmins>,
        issuer: &str,
    ) -> String {
        match cp.save_provider(who, update(issuer), None).await {
            Err(Error::Invalid {
                field: "issuer_url",
                reason,
            }) => reason,
            other => panic!("{issuer}: expected an issuer_url refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_issuer_never_leads_the_portal_into_the_platforms_network() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let strict = seeded(pool.clone(), "http://127.0.0.1:9").await;
        let who = acme_admin(&strict).await;
        let before = strict.provider_settings(&who).await.unwrap();

        // A working provider on loopback: a production portal still never calls it.
        let good = fake(|base, path| match path {
            "/.well-known/openid-configuration" => discovery(base, &format!("{base}/jwks")),
            _ => json(r#"{"keys":[]}"#),
        })
        .await;
        assert!(
            refused(&strict, &who, &good.base)
                .await
                .contains("https:// only")
        );
        let on_loopback = good.base.replace("http://", "https://");
        assert!(
            refused(&strict, &who, &on_loopback)
                .await
                .contains("127.0.0.1 is not a public address")
        );
        for (issuer, says) in [
            (
                "https://169.254.169.254/latest/meta-data",
                "not a public address",
            ),
            ("https://10.0.0.8", "not a public address"),
            ("https://[::ffff:192.168.0.1]", "not a public address"),
            ("https://[fd00::1]", "not a public address"),
            ("https://localhost:8443", "localhost resolves to"),
        ] {
            let reason = refused(&strict, &who, issuer).await;
            assert!(reason.contains(says), "{issuer}: {reason}");
        }
        assert_eq!(good.hits.load(Ordering::SeqCst), 0, "no request was made");

        // Development allows plain http to loopback, and the provider saves...
        let dev = strict.clone().with_egress(Egress::allowing_loopback_http());
        dev.save_provider(&who, update(&good.base), None)
            .await
            .unwrap();
        assert!(
            good.hits.load(Ordering::SeqCst) >= 2,
            "discovery and keys fetched"
        );

        // ...but what the discovery document names is held to the same rule: a key set on
        // the metadata address is never fetched.
        let metadata = fake(|base, path| match path {
            "/.well-known/openid-configuration" => {
                discovery(base, "http://169.254.169.254/latest/meta-data/iam")
            }
            _ => json(r#"{"keys":[]}"#),
        })
        .await;
        let reason = refused(&dev, &who, &metadata.base).await;
        assert!(
            reason.contains("does not answer OpenID discovery"),
            "{reason}"
        );
        assert_eq!(metadata.hits.load(Ordering::SeqCst), 1, "only the document");

        // Redirects are not followed, wherever they lead.
        let target = fake(|base, _| discovery(base, &format!("{base}/jwks"))).await;
        let redirect = fake(|_, _| {
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                .to_string()
        })
        .await;
        let reason = refused(&dev, &who, &redirect.base).await;
        assert!(
            reason.contains("does not answer OpenID discovery"),
            "{reason}"
        );
        assert_eq!(target.hits.load(Ordering::SeqCst), 0);

        // An answer larger than the bound is not read to its end.
        let huge = fake(|base, _| {
            let padding = "x".repeat(control_plane::egress::MAX_BODY + 1);
            json(&document(
                base,
                &format!("{base}/jwks"),
                &format!(r#""padding":"{padding}","#),
            ))
        })
        .await;
        let reason = refused(&dev, &who, &huge.base).await;
        assert!(
            reason.contains("does not answer OpenID discovery"),
            "{reason}"
        );

        // Only the development save above changed anything.
        let after = dev.provider_settings(&who).await.unwrap().unwrap();
        assert_ne!(Some(&after), before.as_ref());
        assert_eq!(after.issuer_url, good.base);
    }
}

/// Finding 9: client secrets are stored sealed, under keys that rotate.
mod secrets_at_rest {
    use super::*;
    use control_plane::secrets::Keyring;

    const K1: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2:HxwdHhsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=";

    async fn stored(pool: &PgPool) -> Vec<String> {
        sqlx::query_scalar("SELECT client_secret FROM identity_providers ORDER BY tenant_id")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    fn keys(setting: &str) -> Keyring {
        Keyring::parse(setting).unwrap()
    }

    #[tokio::test]
    async fn client_secrets_are_sealed_reseal_under_a_new_key_and_open_only_in_their_row() {
        let db = crate::support::demo_db().await;
        let pool = db.pool().clone();
        let one = ControlPlane::new(pool.clone(), Naming::default()).with_secret_keys(keys(K1));
        one.seed_demo_identity_providers("http://127.0.0.1:9", "s3cret")
            .await
            .unwrap();
        for s in stored(&pool).await {
            assert!(
                s.starts_with("sealed:v1:k1:") && !s.contains("s3cret"),
                "{s}"
            );
        }
        // The schema takes nothing else.
        let err = sqlx::query("UPDATE identity_providers SET client_secret = 's3cret'")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("identity_providers_client_secret_sealed"),
            "{err}"
        );

        // A secret stored before sealing existed (the constraint is NOT VALID for those rows)
        // is sealed at the next start.
        sqlx::raw_sql(
            "ALTER TABLE identity_providers DROP CONSTRAINT identity_providers_client_secret_sealed;
             UPDATE identity_providers SET client_secret = 'legacy'
              WHERE tenant_id = (SELECT id FROM tenants WHERE slug = 'globex');
             ALTER TABLE identity_providers ADD CONSTRAINT identity_providers_client_secret_sealed
               CHECK (client_secret ~ '^sealed:v1:[a-z0-9-]{1,32}:[A-Za-z0-9+/]+={0,2}$'
                      AND length(client_secret) <= 1500) NOT VALID;",
        )
        .execute(&pool)
        .await
        .unwrap();
        assert!(stored(&pool).await.contains(&"legacy".to_string()));
        assert_eq!(one.reseal_secrets().await.unwrap(), 1);
        assert!(
            stored(&pool)
                .await
                .iter()
                .all(|s| s.starts_with("sealed:v1:k1:"))
        );
        assert_eq!(one.reseal_secrets().await.unwrap(), 0, "idempotent");

        // Rotation: k2 first, k1 kept to open; every row moves to k2.
        let rotated = ControlPlane::new(pool.clone(), Naming::default())
            .with_secret_keys(keys(&format!("{K2},{K1}")));
        assert_eq!(rotated.reseal_secrets().await.unwrap(), 2);
        assert!(
            stored(&pool)
                .await
                .iter()
                .all(|s| s.starts_with("sealed:v1:k2:"))
        );
        // Now k1 can go; a portal with only k1 can't open them.
        let only_new =
            ControlPlane::new(pool.clone(), Naming::default()).with_secret_keys(keys(K2));
        assert_eq!(only_new.reseal_secrets().await.unwrap(), 0);
        let only_old =
            ControlPlane::new(pool.clone(), Naming::default()).with_secret_keys(keys(K1));
        let err = only_old.reseal_secrets().await.unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"key "k2", which is not in the keyring"#),
            "{err}"
        );

        // A sealed secret copied into another tenant's row does not open there.
        sqlx::raw_sql(
            "UPDATE identity_providers SET client_secret =
               (SELECT client_secret FROM identity_providers i JOIN tenants t ON t.id = i.tenant_id WHERE t.slug = 'acme')
             WHERE tenant_id = (SELECT id FROM tenants WHERE slug = 'globex')",
        )
        .execute(&pool)
        .await
        .unwrap();
        let moved = ControlPlane::new(pool.clone(), Naming::default())
            .with_secret_keys(keys(&format!("k3:{},{K2}", &K1[3..])));
        let err = moved.reseal_secrets().await.unwrap_err();
        assert!(err.to_string().contains("does not open"), "{err}");
    }
}
