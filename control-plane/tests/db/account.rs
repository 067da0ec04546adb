//! Saved SSH keys: validated like a launch's, one per fingerprint and name, bounded, kept
//! apart per user, audited.

use control_plane::prelude::*;

use crate::support::refusal;
use control_plane::ControlPlane;
use control_plane::auth::Principal;

/// Made with `ssh-keygen -t ed25519`; `ssh-keygen -l` prints this fingerprint for it.
const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEorqTlXDEue8uPXrBC/J2mGhCVSlB9xbL3JVhwex5yy bob@laptop";
const FINGERPRINT: &str = "SHA256:PkWeU4s/wEXKkVZfEiNTf04tZrBbB/fELrKhI2lIpKc";

async fn user(cp: &ControlPlane, email: &str) -> Principal {
    let id = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO users (id, email, display_name) VALUES ($1, $2, $2)")
        .bind(id)
        .bind(email)
        .execute(cp.pool())
        .await
        .unwrap();
    cp.principal(id.into()).await.unwrap().unwrap()
}

fn invalid_reason(e: control_plane::Error) -> String {
    match e {
        control_plane::Error::Invalid { reason, .. } => reason,
        other => panic!("expected invalid input, got {other:?}"),
    }
}

#[tokio::test]
async fn keys_are_validated_kept_per_user_and_audited() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let bob = user(&cp, "bob@acme.example").await;
    let carol = user(&cp, "carol@globex.example").await;

    let saved = cp
        .add_ssh_key(&bob, " laptop ", KEY, Some("req-1"))
        .await
        .unwrap();
    assert_eq!(saved.name, "laptop");
    assert_eq!(saved.kind, "ssh-ed25519");
    assert_eq!(saved.fingerprint, FINGERPRINT);
    assert_eq!(saved.comment.as_deref(), Some("bob@laptop"));
    assert_eq!(saved.last_used_at, None);

    // Refusals name the problem and save nothing.
    let private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";
    let why = invalid_reason(
        cp.add_ssh_key(&bob, "oops", private, None)
            .await
            .unwrap_err(),
    );
    assert!(why.contains("this is a private key"), "{why}");
    let why = invalid_reason(
        cp.add_ssh_key(&bob, "cut", "ssh-ed25519 AAAAC3Nza", None)
            .await
            .unwrap_err(),
    );
    assert!(why.contains("base64") || why.contains("truncated"), "{why}");
    let why = invalid_reason(cp.add_ssh_key(&bob, "", KEY, None).await.unwrap_err());
    assert!(why.contains("1 to 64 characters"), "{why}");
    assert_eq!(
        refusal(cp.add_ssh_key(&bob, "desktop", KEY, None)).await,
        "this key is already saved, as \"laptop\""
    );
    let other = format!(
        "ssh-ed25519 {}",
        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    );
    let why = invalid_reason(
        cp.add_ssh_key(&bob, "LAPTOP", &other, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(why, "you already have a key named \"LAPTOP\"");
    assert_eq!(cp.ssh_keys(&bob).await.unwrap().len(), 1);

    // Carol may save the same key for herself, but can't see, use or delete bob's.
    cp.add_ssh_key(&carol, "laptop", KEY, None).await.unwrap();
    assert_eq!(cp.ssh_keys(&carol).await.unwrap().len(), 1);
    let err = cp.ssh_key_lines(&carol, &[saved.id]).await.unwrap_err();
    assert!(
        matches!(err, control_plane::Error::NotFound { .. }),
        "{err}"
    );
    let err = cp.delete_ssh_key(&carol, saved.id, None).await.unwrap_err();
    assert!(
        matches!(err, control_plane::Error::NotFound { .. }),
        "{err}"
    );

    // Bob's launch uses it and marks it used.
    let lines = cp.ssh_key_lines(&bob, &[saved.id]).await.unwrap();
    assert_eq!(lines, vec![KEY.to_string()]);
    assert!(cp.ssh_keys(&bob).await.unwrap()[0].last_used_at.is_some());

    cp.delete_ssh_key(&bob, saved.id, Some("req-2"))
        .await
        .unwrap();
    assert!(cp.ssh_keys(&bob).await.unwrap().is_empty());
    let audited: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT action, request_id FROM audit_log WHERE actor_user_id = $1 ORDER BY id",
    )
    .bind(bob.user_id.0)
    .fetch_all(cp.pool())
    .await
    .unwrap();
    assert_eq!(
        audited,
        vec![
            ("user.ssh_key_add".to_string(), Some("req-1".to_string())),
            ("user.ssh_key_delete".to_string(), Some("req-2".to_string())),
        ]
    );
}

#[tokio::test]
async fn a_user_keeps_at_most_fifty_keys() {
    let db = crate::support::empty_db().await;
    let cp = db.control_plane();
    let dave = user(&cp, "dave@acme.example").await;
    for i in 0..50u8 {
        sqlx::query(
            "INSERT INTO user_ssh_keys (id, user_id, name, public_key, fingerprint)
             VALUES ($1, $2, $3, 'ssh-ed25519 AAAA', $4)",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(dave.user_id.0)
        .bind(format!("key {i}"))
        .bind(format!("SHA256:{:0>43}", i))
        .execute(cp.pool())
        .await
        .unwrap();
    }
    assert_eq!(
        refusal(cp.add_ssh_key(&dave, "one more", KEY, None)).await,
        "you keep at most 50 SSH keys; delete one first"
    );
}
