//! Browser sessions stored with their user, against a real database.

use control_plane::auth::PlatformRole;
use control_plane::prelude::*;
use control_plane::sessions::SessionWrite;
use control_plane::{ControlPlane, Naming};
use serde_json::{Map, Value, json};
use time::{Duration, OffsetDateTime};

fn data(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn write<'a>(
    id: &'a str,
    user: Option<control_plane::ids::UserId>,
    data: &'a Map<String, Value>,
    expires_in: Duration,
) -> SessionWrite<'a> {
    SessionWrite {
        id,
        user,
        data,
        expires_at: OffsetDateTime::now_utc() + expires_in,
    }
}

#[tokio::test]
async fn a_session_is_read_with_its_user_as_the_user_is_now() {
    let db = crate::support::empty_db().await;
    let cp = ControlPlane::new(db.pool().clone(), Naming::default());
    let ada = crate::support::operator(&cp, "ada@platform.example")
        .await
        .principal()
        .user_id;
    let signed_in = data(json!({"signed_in": {"user": ada.to_string()}, "seen": 5}));
    let anonymous = data(json!({"return_to": "/billing"}));
    assert!(
        cp.create_session(write(
            "sessionid-with-a-user",
            Some(ada),
            &signed_in,
            Duration::HOUR
        ))
        .await
        .unwrap()
    );
    assert!(
        cp.create_session(write(
            "sessionid-nobody-yet",
            None,
            &anonymous,
            Duration::HOUR
        ))
        .await
        .unwrap()
    );

    let s = cp.session("sessionid-with-a-user").await.unwrap().unwrap();
    assert_eq!(s.data, signed_in);
    let user = s.user.expect("the session's user, read with it");
    assert_eq!(user.user_id, ada);
    assert_eq!(user.email, "ada@platform.example");
    assert_eq!(user.platform_role, Some(PlatformRole::Operator));
    let s = cp.session("sessionid-nobody-yet").await.unwrap().unwrap();
    assert_eq!((s.data, s.user), (anonymous.clone(), None));

    // The user's row is read afresh: a revoked role shows on the next read.
    sqlx::query("UPDATE users SET platform_role = NULL WHERE id = $1")
        .bind(ada.0)
        .execute(db.pool())
        .await
        .unwrap();
    let user = cp
        .session("sessionid-with-a-user")
        .await
        .unwrap()
        .unwrap()
        .user
        .unwrap();
    assert_eq!(user.platform_role, None);

    // Signing in later: a save names the user.
    cp.save_session(write(
        "sessionid-nobody-yet",
        Some(ada),
        &signed_in,
        Duration::HOUR,
    ))
    .await
    .unwrap();
    let s = cp.session("sessionid-nobody-yet").await.unwrap().unwrap();
    assert_eq!(s.user.map(|u| u.user_id), Some(ada));

    // A deleted user's sessions go with them.
    sqlx::query("DELETE FROM users WHERE id = $1")
        .bind(ada.0)
        .execute(db.pool())
        .await
        .unwrap();
    assert_eq!(cp.session("sessionid-with-a-user").await.unwrap(), None);
    assert_eq!(cp.session("sessionid-nobody-yet").await.unwrap(), None);
}

#[tokio::test]
async fn a_taken_id_is_refused_and_expired_sessions_are_neither_read_nor_kept() {
    let db = crate::support::empty_db().await;
    let cp = ControlPlane::new(db.pool().clone(), Naming::default());
    let first = data(json!({"n": 1}));
    let second = data(json!({"n": 2}));
    assert!(
        cp.create_session(write("sessionid-taken-once", None, &first, Duration::HOUR))
            .await
            .unwrap()
    );
    assert!(
        !cp.create_session(write("sessionid-taken-once", None, &second, Duration::HOUR))
            .await
            .unwrap(),
        "a second session under a taken id"
    );
    assert_eq!(
        cp.session("sessionid-taken-once")
            .await
            .unwrap()
            .unwrap()
            .data,
        first,
        "the first session is untouched"
    );

    cp.save_session(write(
        "sessionid-expired-now",
        None,
        &first,
        -Duration::SECOND,
    ))
    .await
    .unwrap();
    assert_eq!(cp.session("sessionid-expired-now").await.unwrap(), None);
    assert_eq!(cp.delete_expired_sessions().await.unwrap(), 1);
    assert!(cp.session("sessionid-taken-once").await.unwrap().is_some());

    cp.delete_session("sessionid-taken-once").await.unwrap();
    assert_eq!(cp.session("sessionid-taken-once").await.unwrap(), None);

    // The table refuses what the store never writes: an id that is no session id.
    let err = cp
        .save_session(write("short", None, &first, Duration::HOUR))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sessions_id_check"), "{err}");
}

/// Waits (at most 5 s) until `read` says yes: an announcement crosses a connection.
async fn soon<F, Fut>(what: &str, mut read: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !read().await {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Reads `id` on `cp` twice and says whether the second read was the kept one.
async fn kept_on_second_read(cp: &ControlPlane, id: &str) -> bool {
    cp.session(id).await.unwrap();
    let before = cp.metrics().session_reads_kept();
    cp.session(id).await.unwrap();
    cp.metrics().session_reads_kept() == before + 1
}

#[tokio::test]
async fn a_kept_session_is_dropped_as_each_change_to_it_commits_on_any_replica() {
    let db = crate::support::empty_db().await;
    // This replica keeps reads for a minute, so only the announcements can drop them.
    let here = ControlPlane::new(db.pool().clone(), Naming::default());
    here.principal_cache()
        .set_ttl(std::time::Duration::from_secs(60));
    // Another replica, which writes.
    let there = ControlPlane::new(db.pool().clone(), Naming::default());
    let ada = crate::support::operator(&there, "ada@platform.example")
        .await
        .principal()
        .user_id;
    let signed_in = data(json!({"signed_in": {"user": ada.to_string()}}));
    there
        .create_session(write(
            "sessionid-kept-here",
            Some(ada),
            &signed_in,
            Duration::HOUR,
        ))
        .await
        .unwrap();
    there
        .create_session(write(
            "sessionid-nobody-yet",
            None,
            &signed_in,
            Duration::HOUR,
        ))
        .await
        .unwrap();

    // Without the watcher, nothing is kept.
    assert!(!kept_on_second_read(&here, "sessionid-kept-here").await);
    let watcher = tokio::spawn({
        let here = here.clone();
        async move { here.watch_principal_changes().await }
    });
    let cache = here.principal_cache();
    soon("the watcher listens", || async { cache.is_live() }).await;
    assert!(kept_on_second_read(&here, "sessionid-kept-here").await);
    assert!(
        !kept_on_second_read(&here, "sessionid-nobody-yet").await,
        "a session nobody signed in to is not kept"
    );

    let user = |cp: ControlPlane| async move {
        cp.session("sessionid-kept-here")
            .await
            .unwrap()
            .and_then(|s| s.user)
    };
    let sql = |q: &'static str| {
        let pool = db.pool().clone();
        async move {
            // Statements about Ada name her as $1; the tenant's none.
            let names_ada = q.contains("$1");
            let q = sqlx::query(q);
            let q = if names_ada { q.bind(ada.0) } else { q };
            q.execute(&pool).await.unwrap();
        }
    };

    // The user's row.
    sql("UPDATE users SET platform_role = NULL WHERE id = $1").await;
    soon("the revoked platform role shows", || async {
        user(here.clone()).await.unwrap().platform_role.is_none()
    })
    .await;
    assert!(kept_on_second_read(&here, "sessionid-kept-here").await);

    // A membership: the home organization, then its name, then its role, then none.
    sql("INSERT INTO tenants (id, slug, display_name) VALUES ('00000000-0000-4000-8000-0000000000aa', 'acme', 'Acme')").await;
    sql("INSERT INTO tenant_memberships (tenant_id, user_id, role) VALUES ('00000000-0000-4000-8000-0000000000aa', $1, 'member')").await;
    soon("the new home organization shows", || async {
        user(here.clone()).await.unwrap().home.is_some()
    })
    .await;
    sql("UPDATE tenants SET display_name = 'Acme Corp' WHERE slug = 'acme'").await;
    soon("the organization's new name shows", || async {
        user(here.clone()).await.unwrap().home.unwrap().name == "Acme Corp"
    })
    .await;
    sql("UPDATE tenant_memberships SET role = 'admin' WHERE user_id = $1").await;
    soon("the new role shows", || async {
        user(here.clone()).await.unwrap().home.unwrap().role
            == control_plane::tenancy::TenantRole::Admin
    })
    .await;
    sql("DELETE FROM tenant_memberships WHERE user_id = $1").await;
    soon("the removed membership shows", || async {
        user(here.clone()).await.unwrap().home.is_none()
    })
    .await;

    // The session's own data, written on the other replica.
    let more = data(json!({"signed_in": {"user": ada.to_string()}, "seen": 1}));
    there
        .save_session(write(
            "sessionid-kept-here",
            Some(ada),
            &more,
            Duration::HOUR,
        ))
        .await
        .unwrap();
    soon("the other replica's write shows", || async {
        here.session("sessionid-kept-here")
            .await
            .unwrap()
            .unwrap()
            .data
            == more
    })
    .await;

    // Losing the announcements drops everything and keeps nothing until they are back.
    assert!(kept_on_second_read(&here, "sessionid-kept-here").await);
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity, pg_terminate_backend(pid, 5000) \
         WHERE datname = current_database() AND query ILIKE 'listen %'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(ended, 1, "the watcher's one listening connection");
    soon("the watcher notices", || async { !cache.is_live() }).await;
    assert!(cache.is_empty(), "nothing kept without the announcements");
    sql("UPDATE users SET display_name = 'Ada L.' WHERE id = $1").await;
    assert_eq!(user(here.clone()).await.unwrap().display_name, "Ada L.");
    soon("the watcher listens again", || async { cache.is_live() }).await;
    assert!(kept_on_second_read(&here, "sessionid-kept-here").await);

    // Signing out on the other replica.
    there.delete_session("sessionid-kept-here").await.unwrap();
    soon("the sign-out shows", || async {
        here.session("sessionid-kept-here").await.unwrap().is_none()
    })
    .await;
    // And on this one, at once.
    there
        .create_session(write(
            "sessionid-ends-here",
            Some(ada),
            &signed_in,
            Duration::HOUR,
        ))
        .await
        .unwrap();
    assert!(kept_on_second_read(&here, "sessionid-ends-here").await);
    here.delete_session("sessionid-ends-here").await.unwrap();
    assert_eq!(here.session("sessionid-ends-here").await.unwrap(), None);
    watcher.abort();
}
