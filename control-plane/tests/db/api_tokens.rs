//! API tokens against the database: made once with their secret, found by it, never more than
//! their maker, revoked at once, audited, and kept by the table's own rules.

use control_plane::prelude::*;

use control_plane::api_tokens::{NewToken, TokenScope, TokenState};
use control_plane::demo::{ACME, ACME_RESEARCH, GLOBEX};
use control_plane::tenancy::{ProjectAdmins, ProjectRole};
use control_plane::{ControlPlane, Error};

use crate::support::{assert_db_refuses, in_project, principal, refusal};

fn org_token(name: &str, scopes: &[TokenScope]) -> NewToken {
    NewToken {
        name: name.into(),
        project: None,
        scopes: scopes.to_vec(),
        days: 30,
    }
}

async fn authenticates(cp: &ControlPlane, secret: &str) -> bool {
    match cp.authenticate_token(secret, Some("192.0.2.7")).await {
        Ok(_) => true,
        Err(Error::Unauthenticated) => false,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_token_is_shown_once_acts_for_its_maker_and_dies_when_revoked() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    let made = cp
        .create_api_token(
            &alice,
            ACME,
            &org_token("ci", &[TokenScope::Launch, TokenScope::Read]),
            Some("req-t1"),
        )
        .await
        .unwrap();
    assert!(made.secret.starts_with("gpk_"), "{}", made.secret);
    assert_eq!(made.secret.len(), 47);
    assert_eq!(made.token.display_prefix, made.secret[..12]);
    assert_eq!(made.token.scopes, [TokenScope::Read, TokenScope::Launch]);
    assert_eq!(made.token.created_by, "alice@acme.example");
    assert_eq!(made.token.project, None);
    let days = (made.token.expires_at - made.token.created_at).whole_days();
    assert_eq!(days, 30);
    // Only a hash is kept.
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_tokens WHERE secret_sha256 = sha256(convert_to($1, 'UTF8'))",
    )
    .bind(&made.secret)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(stored, 1);
    // The secret itself is nowhere: not in any column of the token's row, nor in the audit log
    // (its part after the prefix, so the shown prefix doesn't count).
    let tail = &made.secret[12..];
    let plain: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM api_tokens t WHERE strpos(t::text, $1) > 0)
              + (SELECT count(*) FROM audit_log a WHERE strpos(a::text, $1) > 0)",
    )
    .bind(tail)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(plain, 0);
    // (The check can fail: the prefix it leaves out is in both.)
    let prefix: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM api_tokens t WHERE strpos(t::text, $1) > 0)
              + (SELECT count(*) FROM audit_log a WHERE strpos(a::text, $1) > 0)",
    )
    .bind(&made.secret[..12])
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(prefix, 2);

    let caller = cp
        .authenticate_token(&made.secret, Some("192.0.2.7"))
        .await
        .unwrap();
    assert_eq!(caller.principal.email, "alice@acme.example");
    assert_eq!((caller.tenant, caller.project), (ACME, None));
    assert!(caller.require(TokenScope::Launch).is_ok());
    assert!(matches!(
        caller.require(TokenScope::Billing),
        Err(Error::Forbidden { .. })
    ));
    let listed = cp.api_tokens(&alice, ACME).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_used_from.as_deref(), Some("192.0.2.7"));
    assert!(listed[0].last_used_at.is_some());

    // Wrong, malformed and oversized secrets are all the same refusal.
    for bad in [
        "gpk_not-a-real-token-at-all-not-a-real-token-xx",
        "Bearer gpk_x",
        "",
        &"gpk_".repeat(100),
    ] {
        assert!(!authenticates(&cp, bad).await, "{bad}");
    }

    cp.revoke_api_token(&alice, made.token.id, Some("req-t2"))
        .await
        .unwrap();
    assert!(!authenticates(&cp, &made.secret).await);
    // Revoking again changes nothing.
    cp.revoke_api_token(&alice, made.token.id, None)
        .await
        .unwrap();
    let actions: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, coalesce(request_id, '') FROM audit_log
         WHERE action LIKE 'api_token.%' AND after ->> 'token' = $1 ORDER BY id",
    )
    .bind(made.token.id.to_string())
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            ("api_token.create".to_string(), "req-t1".to_string()),
            ("api_token.revoke".to_string(), "req-t2".to_string())
        ]
    );
}

#[tokio::test]
async fn only_admins_make_tokens_and_outsiders_learn_nothing() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    let bob = principal(&cp, "bob@acme.example").await;
    let carol = principal(&cp, "carol@globex.example").await;
    let read = org_token("r", &[TokenScope::Read]);
    // Bob is a member of Acme and an operator of research: neither is enough.
    assert_eq!(
        refusal(cp.create_api_token(&bob, ACME, &read, None)).await,
        "only organization admins may do this"
    );
    let research = NewToken {
        project: Some(ACME_RESEARCH),
        ..read.clone()
    };
    assert_eq!(
        refusal(cp.create_api_token(&bob, ACME, &research, None)).await,
        "only project admins may do this"
    );
    // Carol (Globex) cannot reach Acme at all, nor put Acme's project under Globex.
    assert!(matches!(
        cp.create_api_token(&carol, ACME, &read, None).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        cp.create_api_token(&carol, GLOBEX, &research, None).await,
        Err(Error::NotFound { .. })
    ));
    // Bad input names its field, and nothing is written.
    for (bad, field) in [
        (org_token(" ", &[TokenScope::Read]), "name"),
        (org_token("x", &[]), "scopes"),
        (
            NewToken {
                days: 400,
                ..read.clone()
            },
            "days",
        ),
    ] {
        match cp.create_api_token(&alice, ACME, &bad, None).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM api_tokens")
        .fetch_one(cp.pool())
        .await
        .unwrap();
    assert_eq!(count, 0);

    let made = cp
        .create_api_token(&alice, ACME, &research, None)
        .await
        .unwrap();
    assert_eq!(made.token.project.as_deref(), Some("research"));
    // Others in Acme see only their own tokens; outsiders can't revoke or see them.
    assert!(cp.api_tokens(&bob, ACME).await.unwrap().is_empty());
    assert!(matches!(
        cp.api_tokens(&carol, ACME).await,
        Err(Error::NotFound { .. })
    ));
    for who in [&bob, &carol] {
        assert!(matches!(
            cp.revoke_api_token(who, made.token.id, None).await,
            Err(Error::NotFound { .. })
        ));
    }
    assert!(authenticates(&cp, &made.secret).await);
}

#[tokio::test]
async fn a_token_stops_working_when_its_maker_loses_access_or_it_expires() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    let bob = principal(&cp, "bob@acme.example").await;
    let research = in_project::<ProjectAdmins>(&cp, &alice, ACME_RESEARCH).await;
    cp.change_member_role(&research, bob.user_id, ProjectRole::Admin, None)
        .await
        .unwrap();
    let made = cp
        .create_api_token(
            &bob,
            ACME,
            &NewToken {
                name: "bob's ci".into(),
                project: Some(ACME_RESEARCH),
                scopes: vec![TokenScope::Launch],
                days: 7,
            },
            None,
        )
        .await
        .unwrap();
    assert!(authenticates(&cp, &made.secret).await);
    cp.remove_member(&research, bob.user_id, None)
        .await
        .unwrap();
    assert!(
        !authenticates(&cp, &made.secret).await,
        "bob left the project; his token went with him"
    );

    // An expired token, made a year ago.
    sqlx::query(
        "INSERT INTO api_tokens (id, tenant_id, created_by, name, display_prefix, secret_sha256,
                                 scopes, created_at, expires_at)
         VALUES (gen_random_uuid(), $1, $2, 'old', 'gpk_oldoldol',
                 sha256(convert_to('gpk_expired-expired-expired-expired-expired-e', 'UTF8')),
                 '{read}', now() - interval '400 days', now() - interval '35 days')",
    )
    .bind(ACME.0)
    .bind(alice.user_id.0)
    .execute(cp.pool())
    .await
    .unwrap();
    assert!(!authenticates(&cp, "gpk_expired-expired-expired-expired-expired-e").await);
    // The tokens page says so, and offers no revoke for it.
    let listed = cp.api_tokens(&alice, ACME).await.unwrap();
    let old = listed.iter().find(|t| t.name == "old").unwrap();
    assert_eq!(old.state, control_plane::api_tokens::TokenState::Expired);
    assert_eq!(old.revoked_at, None);
}

#[tokio::test]
async fn the_table_keeps_tokens_fixed_revocations_final_and_rows_forever() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    let made = cp
        .create_api_token(&alice, ACME, &org_token("fixed", &[TokenScope::Read]), None)
        .await
        .unwrap();
    let id = made.token.id;
    assert_db_refuses(
        &cp,
        &format!("UPDATE api_tokens SET scopes = '{{read,admin}}' WHERE id = '{id}'"),
        "only its last use and its revocation may change",
    )
    .await;
    assert_db_refuses(
        &cp,
        &format!("DELETE FROM api_tokens WHERE id = '{id}'"),
        "never deleted",
    )
    .await;
    assert_db_refuses(
        &cp,
        &format!(
            "INSERT INTO api_tokens (id, tenant_id, created_by, name, display_prefix, secret_sha256, scopes, expires_at)
             VALUES (gen_random_uuid(), '{}', '{}', 'x', 'gpk_abcdefgh', sha256('x'), '{{root}}', now() + interval '1 day')",
            ACME, alice.user_id
        ),
        "api_tokens_scopes_check",
    )
    .await;
    assert_db_refuses(
        &cp,
        &format!(
            "INSERT INTO api_tokens (id, tenant_id, created_by, name, display_prefix, secret_sha256, scopes, expires_at)
             VALUES (gen_random_uuid(), '{}', '{}', 'x', 'gpk_abcdefgh', sha256('y'), '{{read}}', now() + interval '2 years')",
            ACME, alice.user_id
        ),
        "api_tokens_check",
    )
    .await;
    cp.revoke_api_token(&alice, id, None).await.unwrap();
    assert_db_refuses(
        &cp,
        &format!("UPDATE api_tokens SET revoked_at = NULL, revoked_by = NULL WHERE id = '{id}'"),
        "is revoked",
    )
    .await;
}

/// Leaving revokes for good: removed from the project, bob's token for it is revoked (by no
/// one: the row says why), and invited back he does not get it back.
#[tokio::test]
async fn leaving_a_project_revokes_its_tokens_for_good() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    let bob = principal(&cp, "bob@acme.example").await;
    let research = in_project::<ProjectAdmins>(&cp, &alice, ACME_RESEARCH).await;
    cp.change_member_role(&research, bob.user_id, ProjectRole::Admin, None)
        .await
        .unwrap();
    let project_token = NewToken {
        name: "bob's ci".into(),
        project: Some(ACME_RESEARCH),
        scopes: vec![TokenScope::Read],
        days: 7,
    };
    let made = cp
        .create_api_token(&bob, ACME, &project_token, None)
        .await
        .unwrap();
    let alices = cp
        .create_api_token(
            &alice,
            ACME,
            &org_token("alice's", &[TokenScope::Read]),
            None,
        )
        .await
        .unwrap();
    cp.remove_member(&research, bob.user_id, None)
        .await
        .unwrap();
    let why: (Option<String>, Option<uuid::Uuid>) =
        sqlx::query_as("SELECT revoked_because, revoked_by FROM api_tokens WHERE id = $1")
            .bind(made.token.id.0)
            .fetch_one(cp.pool())
            .await
            .unwrap();
    assert_eq!(why, (Some("left".into()), None));
    let listed = cp.api_tokens(&alice, ACME).await.unwrap();
    let state = |id| listed.iter().find(|t| t.id == id).unwrap().state;
    assert_eq!(state(made.token.id), TokenState::Revoked);
    assert_eq!(state(alices.token.id), TokenState::Active, "only bob's");

    cp.invite_member(&research, "bob@acme.example", ProjectRole::Admin, None)
        .await
        .unwrap();
    assert!(!authenticates(&cp, &made.secret).await, "still revoked");
    assert!(authenticates(&cp, &alices.secret).await);
}

/// In an organization that signs in with its own identity provider, a token lapses when its
/// maker has not signed in for the organization's idle period (someone disabled at the
/// provider can't), and works again once they sign in. A long-poll notices too.
#[tokio::test]
async fn a_token_lapses_when_its_maker_stops_signing_in() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    let alice = principal(&cp, "alice@acme.example").await;
    // Made 40 days ago, good for a year, by alice, whose last sign-in was 35 days ago.
    let secret = "gpk_lapsing-lapsing-lapsing-lapsing-lapsing-l";
    sqlx::query(
        "INSERT INTO api_tokens (id, tenant_id, created_by, name, display_prefix, secret_sha256,
                                 scopes, created_at, expires_at)
         VALUES (gen_random_uuid(), $1, $2, 'old', 'gpk_lapsinga', sha256(convert_to($3, 'UTF8')),
                 '{read}', now() - interval '40 days', now() + interval '300 days')",
    )
    .bind(ACME.0)
    .bind(alice.user_id.0)
    .bind(secret)
    .execute(cp.pool())
    .await
    .unwrap();
    assert!(
        authenticates(&cp, secret).await,
        "no identity provider of its own: membership is what counts"
    );
    control_plane::demo::seed_identity_providers(
        cp.pool().sqlx(),
        cp.secrets(),
        "https://idp.acme.example",
        "s3cret",
    )
    .await
    .unwrap();
    let signed_in = |days: i32| {
        sqlx::query(
            "INSERT INTO user_identities (issuer, subject, user_id, tenant_id, last_login)
             VALUES ('https://idp.acme.example', 'alice', $1, $2, now() - make_interval(days => $3))
             ON CONFLICT (issuer, subject) DO UPDATE SET last_login = EXCLUDED.last_login",
        )
        .bind(alice.user_id.0)
        .bind(ACME.0)
        .bind(days)
        .execute(cp.pool())
    };
    signed_in(35).await.unwrap();
    let caller = {
        // A caller that authenticated before the lapse was noticed, as a long-poll holds it.
        let fresh = cp
            .create_api_token(&alice, ACME, &org_token("fresh", &[TokenScope::Read]), None)
            .await
            .unwrap();
        cp.authenticate_token(&fresh.secret, None).await.unwrap()
    };
    assert!(
        !authenticates(&cp, secret).await,
        "35 days > the default 30"
    );
    let listed = cp.api_tokens(&alice, ACME).await.unwrap();
    let old = listed.iter().find(|t| t.name == "old").unwrap();
    assert_eq!(old.state, TokenState::Lapsed);
    let fresh = listed.iter().find(|t| t.name == "fresh").unwrap();
    assert_eq!(fresh.state, TokenState::Active);
    let lapses = fresh.lapses_at.expect("a lapse date for the page");
    assert_eq!((lapses - fresh.created_at).whole_days(), 30);
    cp.token_still_live(&caller).await.unwrap();

    // The organization allows 60 days: the old token works again.
    sqlx::query("UPDATE identity_providers SET token_idle_days = 60 WHERE tenant_id = $1")
        .bind(ACME.0)
        .execute(cp.pool())
        .await
        .unwrap();
    assert!(authenticates(&cp, secret).await);
    // Back to 30, and alice signs in again: it works again.
    sqlx::query("UPDATE identity_providers SET token_idle_days = 30 WHERE tenant_id = $1")
        .bind(ACME.0)
        .execute(cp.pool())
        .await
        .unwrap();
    assert!(!authenticates(&cp, secret).await);
    signed_in(0).await.unwrap();
    assert!(authenticates(&cp, secret).await);

    // A long-poll's caller is re-checked against revocation as it waits.
    cp.revoke_api_token(&alice, caller.token, None)
        .await
        .unwrap();
    assert!(matches!(
        cp.token_still_live(&caller).await,
        Err(Error::Unauthenticated)
    ));
}

/// An organization holds a bounded number of live tokens, a person makes them at a bounded
/// rate, and all the organization's tokens share one budget of calls.
#[tokio::test]
async fn tokens_are_capped_per_organization_and_share_its_budget() {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane().with_token_cap(3);
    let alice = principal(&cp, "alice@acme.example").await;
    let mut made = Vec::new();
    for n in 0..3 {
        made.push(
            cp.create_api_token(
                &alice,
                ACME,
                &org_token(&format!("t{n}"), &[TokenScope::Read]),
                None,
            )
            .await
            .unwrap(),
        );
    }
    match cp
        .create_api_token(&alice, ACME, &org_token("t3", &[TokenScope::Read]), None)
        .await
    {
        Err(Error::Conflict(m)) => assert!(m.contains("3 live API tokens"), "{m}"),
        other => panic!("{other:?}"),
    }
    cp.revoke_api_token(&alice, made[0].token.id, None)
        .await
        .unwrap();
    cp.create_api_token(&alice, ACME, &org_token("t3", &[TokenScope::Read]), None)
        .await
        .unwrap();

    // One budget for the organization: spent through one token, the next refuses too.
    let mut limited = None;
    for n in 0..2000 {
        match cp.authenticate_token(&made[1].secret, None).await {
            Ok(_) => {}
            Err(Error::RateLimited { .. }) => {
                limited = Some(n);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(limited.is_some_and(|n| n >= 100), "{limited:?}");
    // Another token of the organization draws on the same budget: it is refused within the
    // few calls the budget refills meanwhile, where a budget of its own would allow 100.
    let mut answered = 0;
    loop {
        match cp.authenticate_token(&made[2].secret, None).await {
            Ok(_) if answered < 50 => answered += 1,
            Err(Error::RateLimited { .. }) => break,
            other => panic!("{answered} answered, then {other:?}"),
        }
    }

    // Making tokens is limited per person (ten at once), whatever the cap.
    let cp = cp.with_token_cap(1000);
    let refused = loop {
        match cp
            .create_api_token(&alice, ACME, &org_token("more", &[TokenScope::Read]), None)
            .await
        {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(matches!(refused, Error::RateLimited { .. }), "{refused:?}");
}
