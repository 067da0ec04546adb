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
