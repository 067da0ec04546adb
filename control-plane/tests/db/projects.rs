//! Tenant and project access, project administration and the last-admin rule.

use control_plane::prelude::*;

use crate::support::{in_project, in_tenant};

use crate::support::{principal, refusal};
use control_plane::tenancy::{
    InviteOutcome, ProjectAdmins, ProjectRole, ProjectViewers, TenantAdmins, TenantMembers,
    TenantRole,
};
use control_plane::{ControlPlane, Error, demo};

/// A copy of the demo database (kept alive by the returned handle), and a control plane on it
/// with the demo organizations' identity providers.
async fn setup() -> (test_db::TestDb, ControlPlane) {
    let db = crate::support::demo_db().await;
    let cp = db.control_plane();
    cp.seed_demo_identity_providers("http://127.0.0.1:9", "s")
        .await
        .unwrap();
    (db, cp)
}

#[tokio::test]
async fn another_tenant_gets_not_found_never_forbidden() {
    let (_db, cp) = setup().await;
    let carol = principal(&cp, "carol@globex.example").await;
    let err = cp
        .tenant_access::<TenantMembers>(&carol, demo::ACME)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    for project in [demo::ACME_RESEARCH, demo::ACME_INFERENCE] {
        let err = cp
            .project_access::<ProjectViewers>(&carol, project)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
    }
    // A project id that doesn't exist reads the same.
    let err = cp
        .project_access::<ProjectViewers>(&carol, control_plane::ProjectId::new_random())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::NotFound { .. }));
}

#[tokio::test]
async fn the_home_organization_is_the_oldest_membership_with_its_role_checked() {
    let (db, cp) = setup().await;
    let bob = principal(&cp, "bob@acme.example").await;
    let (member, name) = cp
        .home_tenant_access::<TenantMembers>(&bob)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((member.id(), name.as_str()), (demo::ACME, "Acme Corp"));
    assert_eq!(member.role(), TenantRole::Member);
    // The role is checked in the same answer: bob is no admin of it.
    let err = cp
        .home_tenant_access::<TenantAdmins>(&bob)
        .await
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "only organization admins may do this");
    let alice = principal(&cp, "alice@acme.example").await;
    let (admin, _) = cp
        .home_tenant_access::<TenantAdmins>(&alice)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(admin.id(), demo::ACME);

    // A second, newer membership changes nothing; an older one is the home.
    sqlx::query(
        "INSERT INTO tenant_memberships (tenant_id, user_id, role) VALUES ($1, $2, 'admin')",
    )
    .bind(demo::GLOBEX.0)
    .bind(bob.user_id.0)
    .execute(db.pool())
    .await
    .unwrap();
    // The membership is read with the principal, as each request does.
    let bob = principal(&cp, "bob@acme.example").await;
    let (home, _) = cp
        .home_tenant_access::<TenantMembers>(&bob)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(home.id(), demo::ACME);
    sqlx::query(
        "UPDATE tenant_memberships SET created_at = created_at - interval '10 years'
         WHERE tenant_id = $1 AND user_id = $2",
    )
    .bind(demo::GLOBEX.0)
    .bind(bob.user_id.0)
    .execute(db.pool())
    .await
    .unwrap();
    let bob = principal(&cp, "bob@acme.example").await;
    let (home, name) = cp
        .home_tenant_access::<TenantAdmins>(&bob)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((home.id(), name.as_str()), (demo::GLOBEX, "Globex"));

    // Platform staff without a membership have no home organization.
    let admin = cp
        .set_break_glass_password(
            "root@platform.example",
            "Root",
            "correct horse battery staple",
        )
        .await
        .unwrap();
    let admin = cp.principal(admin).await.unwrap().unwrap();
    assert!(
        cp.home_tenant_access::<TenantMembers>(&admin)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn roles_decide_within_a_tenant() {
    let (_db, cp) = setup().await;
    let bob = principal(&cp, "bob@acme.example").await;
    let fiona = principal(&cp, "fiona@acme.example").await;
    let alice = principal(&cp, "alice@acme.example").await;

    // bob: a member; operator of research; can't see inference at all.
    let err = cp
        .tenant_access::<TenantAdmins>(&bob, demo::ACME)
        .await
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "only organization admins may do this");
    let research = in_project::<ProjectViewers>(&cp, &bob, demo::ACME_RESEARCH).await;
    assert_eq!(research.role(), ProjectRole::Operator);
    let err = cp
        .project_access::<ProjectAdmins>(&bob, demo::ACME_RESEARCH)
        .await
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "only project admins may do this");
    assert!(matches!(
        cp.project_access::<ProjectViewers>(&bob, demo::ACME_INFERENCE)
            .await,
        Err(Error::NotFound { .. })
    ));

    // fiona (finance) views every project; alice (tenant admin) administers every project.
    let acme = in_tenant::<TenantMembers>(&cp, &fiona, demo::ACME).await;
    let seen: Vec<_> = cp
        .list_projects(&acme)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.slug, p.my_role))
        .collect();
    assert_eq!(
        seen,
        [
            ("inference".to_string(), ProjectRole::Viewer),
            ("research".to_string(), ProjectRole::Viewer)
        ]
    );
    assert!(
        cp.project_access::<ProjectAdmins>(&alice, demo::ACME_INFERENCE)
            .await
            .is_ok()
    );

    // The proofs that come with the list say what checking each project alone says: bob's
    // list holds research only, as its operator; fiona's both, as their viewer.
    for who in [&bob, &fiona, &alice] {
        let tenant = in_tenant::<TenantMembers>(&cp, who, demo::ACME).await;
        let listed = cp.visible_projects(&tenant).await.unwrap();
        let mut alone = Vec::new();
        for project in [demo::ACME_INFERENCE, demo::ACME_RESEARCH] {
            if let Ok(p) = cp.project_access::<ProjectViewers>(who, project).await {
                alone.push((p.id(), p.role()));
            }
        }
        let mut with_list: Vec<_> = listed
            .iter()
            .map(|(summary, proof)| {
                assert_eq!((summary.id, summary.my_role), (proof.id(), proof.role()));
                assert_eq!(proof.tenant(), demo::ACME);
                (proof.id(), proof.role())
            })
            .collect();
        with_list.sort_by_key(|(id, _)| *id);
        alone.sort_by_key(|(id, _)| *id);
        assert_eq!(with_list, alone, "{}", who.email);
    }
    let bobs = in_tenant::<TenantMembers>(&cp, &bob, demo::ACME).await;
    let listed = cp.visible_projects(&bobs).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].1.role(), ProjectRole::Operator);
}

#[tokio::test]
async fn projects_are_created_renamed_and_audited() {
    let (_db, cp) = setup().await;
    let alice = principal(&cp, "alice@acme.example").await;
    let admin = in_tenant::<TenantAdmins>(&cp, &alice, demo::ACME).await;
    let id = cp
        .create_project(&admin, "Training", "GPU Training", Some("req-7"))
        .await
        .unwrap();
    assert_eq!(
        refusal(cp.create_project(&admin, "training", "Again", None)).await,
        "a project with the short name \"training\" already exists"
    );
    let err = cp
        .create_project(&admin, "no spaces", "x", None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { field: "slug", .. }), "{err}");

    let p = in_project::<ProjectAdmins>(&cp, &alice, id).await;
    cp.rename_project(&p, "GPU training", Some("req-8"))
        .await
        .unwrap();
    let viewer = in_project::<ProjectViewers>(&cp, &alice, id).await;
    let trail = cp.project_audit(&viewer).await.unwrap();
    let actions: Vec<_> = trail.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(actions, ["project.rename", "project.create"]);
    assert_eq!(trail[0].actor, "alice@acme.example");
    assert_eq!(trail[0].request_id.as_deref(), Some("req-8"));
    assert_eq!(
        trail[0].change,
        r#"{"display_name":"GPU Training"} → {"display_name":"GPU training"}"#
    );
}

#[tokio::test]
async fn inviting_adds_members_or_waits_for_first_sign_in() {
    let (_db, cp) = setup().await;
    let alice = principal(&cp, "alice@acme.example").await;
    let p = in_project::<ProjectAdmins>(&cp, &alice, demo::ACME_INFERENCE).await;
    assert_eq!(
        cp.invite_member(&p, "Bob@Acme.Example", ProjectRole::Viewer, None)
            .await
            .unwrap(),
        InviteOutcome::Added
    );
    assert_eq!(
        cp.invite_member(&p, "hank@acme.example", ProjectRole::Operator, None)
            .await
            .unwrap(),
        InviteOutcome::Pending
    );
    assert_eq!(
        refusal(cp.invite_member(&p, "hank@acme.example", ProjectRole::Viewer, None)).await,
        "hank@acme.example has already been invited"
    );
    assert_eq!(
        refusal(cp.invite_member(&p, "bob@acme.example", ProjectRole::Viewer, None)).await,
        "bob@acme.example is already a member of this project"
    );
    // carol is a Globex user: her address isn't one of Acme's domains.
    assert_eq!(
        refusal(cp.invite_member(&p, "carol@globex.example", ProjectRole::Viewer, None)).await,
        "invalid email: carol@globex.example can't sign in to this organization: globex.example is not one of its email domains"
    );
    let v = in_project::<ProjectViewers>(&cp, &alice, demo::ACME_INFERENCE).await;
    let detail = cp.project_detail(&v).await.unwrap();
    assert_eq!(detail.invitations.len(), 1);
    assert_eq!(detail.invitations[0].email, "hank@acme.example");
    assert!(detail.members.iter().any(|m| m.email == "bob@acme.example"));

    // Withdrawn before the first sign-in: gone, and audited; a second time finds none.
    cp.cancel_invitation(&p, " Hank@Acme.Example", None)
        .await
        .unwrap();
    assert!(cp.project_detail(&v).await.unwrap().invitations.is_empty());
    let again = cp
        .cancel_invitation(&p, "hank@acme.example", None)
        .await
        .unwrap_err();
    assert!(matches!(again, Error::NotFound { .. }), "{again}");
    let trail = cp.project_audit(&v).await.unwrap();
    assert_eq!(trail[0].action, "project_invitation.cancel");
    assert_eq!(trail[0].changes[0].field, "email");
    assert_eq!(
        trail[0].changes[0].before.as_deref(),
        Some("hank@acme.example")
    );
    assert_eq!(trail[0].changes[0].after, None);
}

#[tokio::test]
async fn a_project_keeps_at_least_one_admin() {
    let (_db, cp) = setup().await;
    let alice = principal(&cp, "alice@acme.example").await;
    let bob = principal(&cp, "bob@acme.example").await;
    let p = in_project::<ProjectAdmins>(&cp, &alice, demo::ACME_RESEARCH).await;
    assert_eq!(
        refusal(cp.remove_member(&p, alice.user_id, None)).await,
        "a project must keep at least one admin: make someone else admin first"
    );
    let err = cp
        .change_member_role(&p, alice.user_id, ProjectRole::Viewer, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    // With a second admin, the first can go.
    cp.change_member_role(&p, bob.user_id, ProjectRole::Admin, None)
        .await
        .unwrap();
    cp.remove_member(&p, alice.user_id, None).await.unwrap();
    // The database itself refuses, whatever the Rust says.
    let err = sqlx::query("DELETE FROM project_memberships WHERE project_id = $1")
        .bind(demo::ACME_RESEARCH.0)
        .execute(cp.pool())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("a project must keep at least one admin"),
        "{err}"
    );
}

#[tokio::test]
async fn two_admins_removing_each_other_at_once_leave_one() {
    let (_db, cp) = setup().await;
    let alice = principal(&cp, "alice@acme.example").await;
    let bob = principal(&cp, "bob@acme.example").await;
    let p = in_project::<ProjectAdmins>(&cp, &alice, demo::ACME_RESEARCH).await;
    cp.change_member_role(&p, bob.user_id, ProjectRole::Admin, None)
        .await
        .unwrap();
    let pb = in_project::<ProjectAdmins>(&cp, &bob, demo::ACME_RESEARCH).await;
    let (a, b) = tokio::join!(
        cp.remove_member(&p, bob.user_id, None),
        cp.remove_member(&pb, alice.user_id, None)
    );
    assert!(a.is_ok() != b.is_ok(), "exactly one wins: {a:?} / {b:?}");
    let admins: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM project_memberships WHERE project_id = $1 AND role = 'admin'",
    )
    .bind(demo::ACME_RESEARCH.0)
    .fetch_one(cp.pool())
    .await
    .unwrap();
    assert_eq!(admins, 1);
}

#[tokio::test]
async fn audit_search_is_scoped_to_the_tenant_and_filters() {
    use control_plane::audit_log::{AuditFilter, AuditScope};
    use control_plane::auth::PlatformAdmin;
    let (_db, cp) = setup().await;
    let alice = principal(&cp, "alice@acme.example").await;
    let carol = principal(&cp, "carol@globex.example").await;
    let acme = in_tenant::<TenantAdmins>(&cp, &alice, demo::ACME).await;
    let globex = in_tenant::<TenantAdmins>(&cp, &carol, demo::GLOBEX).await;
    cp.create_project(&acme, "a1", "A one", None).await.unwrap();
    cp.create_project(&globex, "g1", "G one", None)
        .await
        .unwrap();

    let acme_log = cp
        .audit_search(&AuditScope::tenant(&acme), &AuditFilter::default())
        .await
        .unwrap();
    assert!(!acme_log.is_empty());
    assert!(
        acme_log
            .iter()
            .all(|l| l.resource.contains(&demo::ACME.to_string())),
        "only Acme's records: {acme_log:#?}"
    );
    // A tenant admin can't widen the search to another tenant by filter.
    let widened = cp
        .audit_search(
            &AuditScope::tenant(&acme),
            &AuditFilter {
                tenant_slug: Some("globex".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(widened.len(), acme_log.len());

    let by_alice = cp
        .audit_search(
            &AuditScope::tenant(&acme),
            &AuditFilter {
                actor_email: Some("ALICE@acme.example".into()),
                action_prefix: Some("project.".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(by_alice.len(), 1);
    assert_eq!(by_alice[0].action, "project.create");

    let root = cp
        .set_break_glass_password("root@platform.example", "Root", "a long enough password")
        .await
        .unwrap();
    let root = cp.principal(root).await.unwrap().unwrap();
    let all = AuditScope::all(&root.platform::<PlatformAdmin>().unwrap());
    let globex_only = cp
        .audit_search(
            &all,
            &AuditFilter {
                tenant_slug: Some("globex".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!globex_only.is_empty());
    assert!(
        globex_only
            .iter()
            .all(|l| l.resource.contains(&demo::GLOBEX.to_string()))
    );
    let everything = cp
        .audit_search(&all, &AuditFilter::default())
        .await
        .unwrap();
    // Everything also holds the platform admin's own record, which belongs to no tenant.
    assert!(everything.len() > acme_log.len() + globex_only.len());
    assert!(
        everything
            .iter()
            .any(|l| l.action == "platform_admin.password_set")
    );

    // The next page: what is older than a record, newest first.
    let older = cp
        .audit_search(
            &all,
            &AuditFilter {
                before: Some(everything[0].id),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        older.iter().map(|l| l.id).collect::<Vec<_>>(),
        everything[1..].iter().map(|l| l.id).collect::<Vec<_>>()
    );
    // A range of days, both ends included; a day that isn't one is refused by name.
    let today = time::OffsetDateTime::now_utc().date();
    let days = |since: time::Date, until: time::Date| AuditFilter {
        since: Some(since.to_string()),
        until: Some(until.to_string()),
        ..Default::default()
    };
    let (yesterday, tomorrow) = (today.previous_day().unwrap(), today.next_day().unwrap());
    let around = cp
        .audit_search(&all, &days(yesterday, tomorrow))
        .await
        .unwrap();
    assert_eq!(around.len(), everything.len());
    let ahead = cp
        .audit_search(&all, &days(tomorrow, tomorrow))
        .await
        .unwrap();
    assert!(ahead.is_empty());
    let refused = cp
        .audit_search(
            &all,
            &AuditFilter {
                until: Some("31/12/2026".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            control_plane::Error::Invalid { field: "until", .. }
        ),
        "{refused:?}"
    );
}
