//! Tenants, projects and who belongs to them, with the proofs that calls need.
//!
//! Access to another tenant's resource answers [`Error::NotFound`], never `Forbidden`: a user
//! of tenant A learns nothing about tenant B, not even that a project id exists.

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::{Principal, check_display_name, email_domain, normalize_email};
use cp_base::ControlPlane;
use cp_base::audit::{self, Actor, AuditEntry};
use cp_base::error::{Error, Result};
use cp_base::ids::{AllocationId, ProjectId, TenantId, UserId};

pub use portal_types::{ProjectRole, TenantRole};

/// Which tenant roles a [`Tenant`] proof stands for.
pub trait TenantRequirement {
    const ROLES: &'static [TenantRole];
    const WHO: &'static str;
}

/// Anyone in the tenant.
pub struct TenantMembers;
impl TenantRequirement for TenantMembers {
    const ROLES: &'static [TenantRole] = TenantRole::ALL;
    const WHO: &'static str = "members of this organization";
}

/// Owners and admins.
pub struct TenantAdmins;
impl TenantRequirement for TenantAdmins {
    const ROLES: &'static [TenantRole] = &[TenantRole::Owner, TenantRole::Admin];
    const WHO: &'static str = "organization admins";
}

/// Proof that a principal holds one of `R::ROLES` in `tenant`.
pub struct Tenant<R: TenantRequirement> {
    user: UserId,
    tenant: TenantId,
    role: TenantRole,
    _requirement: PhantomData<R>,
}

impl<R: TenantRequirement> Tenant<R> {
    pub fn id(&self) -> TenantId {
        self.tenant
    }
    pub fn role(&self) -> TenantRole {
        self.role
    }
    pub fn user(&self) -> UserId {
        self.user
    }
}

/// Which project roles a [`Project`] proof stands for.
pub trait ProjectRequirement {
    const ROLES: &'static [ProjectRole];
    const WHO: &'static str;
}

/// Anyone who can see the project.
pub struct ProjectViewers;
impl ProjectRequirement for ProjectViewers {
    const ROLES: &'static [ProjectRole] = ProjectRole::ALL;
    const WHO: &'static str = "project members";
}

/// Those who may launch and release: project admins and operators.
pub struct ProjectOperators;
impl ProjectRequirement for ProjectOperators {
    const ROLES: &'static [ProjectRole] = &[ProjectRole::Admin, ProjectRole::Operator];
    const WHO: &'static str = "project admins and operators";
}

pub struct ProjectAdmins;
impl ProjectRequirement for ProjectAdmins {
    const ROLES: &'static [ProjectRole] = &[ProjectRole::Admin];
    const WHO: &'static str = "project admins";
}

/// Proof that a principal holds (effectively) one of `R::ROLES` in `project`.
pub struct Project<R: ProjectRequirement> {
    user: UserId,
    tenant: TenantId,
    project: ProjectId,
    role: ProjectRole,
    _requirement: PhantomData<R>,
}

// By hand: a derive would ask `R: Clone` of the marker. A copy proves what the original did.
impl<R: ProjectRequirement> Clone for Project<R> {
    fn clone(&self) -> Self {
        Self {
            user: self.user,
            tenant: self.tenant,
            project: self.project,
            role: self.role,
            _requirement: PhantomData,
        }
    }
}

impl<R: ProjectRequirement> Project<R> {
    pub fn id(&self) -> ProjectId {
        self.project
    }
    /// Who holds the role (for attribution).
    pub fn user(&self) -> UserId {
        self.user
    }
    pub fn tenant(&self) -> TenantId {
        self.tenant
    }
    pub fn role(&self) -> ProjectRole {
        self.role
    }
}

pub use portal_types::projects::{Invitation, Member, ProjectDetail, ProjectSummary};

/// What inviting did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InviteOutcome {
    /// The person already belongs to the organization: they are a member now.
    Added,
    /// They haven't signed in yet: the invitation waits for their first sign-in.
    Pending,
}

fn check_slug(slug: &str) -> Result<()> {
    let ok = (1..=63).contains(&slug.len())
        && slug
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !slug.starts_with('-')
        && !slug.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid {
            field: "slug",
            reason: format!("{slug:?}: use 1 to 63 lowercase letters, digits and inner hyphens"),
        })
    }
}

/// The highest project role a tenant role implies by itself, if any.
fn implied_project_role(role: TenantRole) -> Option<ProjectRole> {
    match role {
        TenantRole::Owner | TenantRole::Admin => Some(ProjectRole::Admin),
        TenantRole::Finance => Some(ProjectRole::Viewer),
        TenantRole::Member => None,
    }
}

fn strongest(a: Option<ProjectRole>, b: Option<ProjectRole>) -> Option<ProjectRole> {
    let rank = |r: &ProjectRole| ProjectRole::ALL.iter().position(|x| x == r).unwrap_or(9);
    match (a, b) {
        (Some(a), Some(b)) => Some(if rank(&a) <= rank(&b) { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The principal's access to `project` as `R`, from their tenant role and their own project
/// role as stored. Neither gives them a role there: `NotFound { what }` (they may not see it);
/// a role too weak for `R`: `Forbidden`.
fn project_role<R: ProjectRequirement>(
    principal: &Principal,
    (tenant, project): (TenantId, ProjectId),
    tenant_role: &str,
    own_role: Option<&str>,
    what: &'static str,
) -> Result<Project<R>> {
    let implied = implied_project_role(TenantRole::parse(tenant_role)?);
    let own = own_role.map(ProjectRole::parse).transpose()?;
    let role = strongest(implied, own).ok_or(Error::NotFound { what })?;
    grant(principal.user_id, (tenant, project), role)
}

/// The proof that `user`, holding `role` in `project`, may act as `R` there; a role too weak
/// for `R`: `Forbidden`. Every `Project` proof is made here.
fn grant<R: ProjectRequirement>(
    user: UserId,
    (tenant, project): (TenantId, ProjectId),
    role: ProjectRole,
) -> Result<Project<R>> {
    if !R::ROLES.contains(&role) {
        return Err(Error::Forbidden { needed: R::WHO });
    }
    Ok(Project {
        user,
        tenant,
        project,
        role,
        _requirement: PhantomData,
    })
}

/// What the control plane offers for tenants, projects and their members.
#[allow(async_fn_in_trait)]
pub trait TenancyApi {
    /// The principal's home organization (their oldest membership) with its name, and their
    /// role in it checked against `R`. Asks no statement: the membership was read with the
    /// principal, in the request's first statement ([`Principal::home`]). None if they belong
    /// to no organization.
    async fn home_tenant_access<R: TenantRequirement>(
        &self,
        principal: &Principal,
    ) -> Result<Option<(Tenant<R>, String)>>;

    /// Checks the principal's role in `tenant`. Not a member: `NotFound`.
    async fn tenant_access<R: TenantRequirement>(
        &self,
        principal: &Principal,
        tenant: TenantId,
    ) -> Result<Tenant<R>>;

    /// Checks the principal's effective role in `project`: their project membership, or what
    /// their tenant role implies (admins administer every project, finance views them).
    /// Outside the tenant, or a member who can't see the project: `NotFound`.
    async fn project_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        project: ProjectId,
    ) -> Result<Project<R>>;

    /// [`project_access`](Self::project_access) to the project `allocation` belongs to, in
    /// one statement. An allocation that doesn't exist, or in a project the principal can't
    /// see: `NotFound`.
    async fn allocation_project_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        allocation: AllocationId,
    ) -> Result<Project<R>>;

    /// The projects of `tenant` the caller can see, with their effective role.
    async fn list_projects(&self, who: &Tenant<TenantMembers>) -> Result<Vec<ProjectSummary>>;

    /// [`list_projects`](Self::list_projects), each with the caller's proof that they view it:
    /// a page that lists the projects and then shows one asks one statement, not two.
    async fn visible_projects(
        &self,
        who: &Tenant<TenantMembers>,
    ) -> Result<Vec<(ProjectSummary, Project<ProjectViewers>)>>;

    /// Creates a project; its creator becomes its first admin. Audited.
    async fn create_project(
        &self,
        who: &Tenant<TenantAdmins>,
        slug: &str,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<ProjectId>;

    async fn rename_project(
        &self,
        who: &Project<ProjectAdmins>,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Lets the project's guests on one host reach each other (or stops it), running ones
    /// included (each gets a network update for its agent). Guests of different projects
    /// never reach each other. Audited.
    async fn set_east_west(
        &self,
        who: &Project<ProjectAdmins>,
        on: bool,
        request_id: Option<&str>,
    ) -> Result<()>;

    async fn project_detail(&self, who: &Project<ProjectViewers>) -> Result<ProjectDetail>;

    /// Invites `email` into the project. Someone already in the organization becomes a member
    /// at once; anyone else gets an invitation that turns into a membership at their first
    /// sign-in. The address must be one the organization signs in with.
    async fn invite_member(
        &self,
        who: &Project<ProjectAdmins>,
        email: &str,
        role: ProjectRole,
        request_id: Option<&str>,
    ) -> Result<InviteOutcome>;

    async fn change_member_role(
        &self,
        who: &Project<ProjectAdmins>,
        member: UserId,
        role: ProjectRole,
        request_id: Option<&str>,
    ) -> Result<()>;

    async fn remove_member(
        &self,
        who: &Project<ProjectAdmins>,
        member: UserId,
        request_id: Option<&str>,
    ) -> Result<()>;

    /// Withdraws an invitation not yet accepted: the address no longer becomes a member at
    /// its first sign-in. None open for it: not found. Audited.
    async fn cancel_invitation(
        &self,
        who: &Project<ProjectAdmins>,
        email: &str,
        request_id: Option<&str>,
    ) -> Result<()>;
}

impl TenancyApi for ControlPlane {
    async fn home_tenant_access<R: TenantRequirement>(
        &self,
        principal: &Principal,
    ) -> Result<Option<(Tenant<R>, String)>> {
        let Some(home) = &principal.home else {
            return Ok(None);
        };
        if !R::ROLES.contains(&home.role) {
            return Err(Error::Forbidden { needed: R::WHO });
        }
        let access = Tenant {
            user: principal.user_id,
            tenant: home.id,
            role: home.role,
            _requirement: PhantomData,
        };
        Ok(Some((access, home.name.clone())))
    }

    async fn tenant_access<R: TenantRequirement>(
        &self,
        principal: &Principal,
        tenant: TenantId,
    ) -> Result<Tenant<R>> {
        let role = sqlx::query_scalar!(
            "SELECT role FROM tenant_memberships WHERE tenant_id = $1 AND user_id = $2",
            tenant as TenantId,
            principal.user_id as UserId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound {
            what: "organization",
        })?;
        let role = TenantRole::parse(&role)?;
        if !R::ROLES.contains(&role) {
            return Err(Error::Forbidden { needed: R::WHO });
        }
        Ok(Tenant {
            user: principal.user_id,
            tenant,
            role,
            _requirement: PhantomData,
        })
    }

    async fn project_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        project: ProjectId,
    ) -> Result<Project<R>> {
        let row = sqlx::query!(
            r#"SELECT p.tenant_id AS "tenant: TenantId", tm.role AS tenant_role,
                      pm.role AS "project_role?"
               FROM projects p
               JOIN tenant_memberships tm ON tm.tenant_id = p.tenant_id AND tm.user_id = $2
               LEFT JOIN project_memberships pm ON pm.project_id = p.id AND pm.user_id = $2
               WHERE p.id = $1"#,
            project as ProjectId,
            principal.user_id as UserId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "project" })?;
        project_role(
            principal,
            (row.tenant, project),
            &row.tenant_role,
            row.project_role.as_deref(),
            "project",
        )
    }

    async fn allocation_project_access<R: ProjectRequirement>(
        &self,
        principal: &Principal,
        allocation: AllocationId,
    ) -> Result<Project<R>> {
        let row = sqlx::query!(
            r#"SELECT p.id AS "project: ProjectId", p.tenant_id AS "tenant: TenantId",
                      tm.role AS tenant_role, pm.role AS "project_role?"
               FROM allocations a
               JOIN projects p ON p.id = a.project_id
               JOIN tenant_memberships tm ON tm.tenant_id = p.tenant_id AND tm.user_id = $2
               LEFT JOIN project_memberships pm ON pm.project_id = p.id AND pm.user_id = $2
               WHERE a.id = $1"#,
            allocation as AllocationId,
            principal.user_id as UserId
        )
        .fetch_optional(self.pool())
        .await?
        .ok_or(Error::NotFound { what: "allocation" })?;
        project_role(
            principal,
            (row.tenant, row.project),
            &row.tenant_role,
            row.project_role.as_deref(),
            "allocation",
        )
    }

    async fn list_projects(&self, who: &Tenant<TenantMembers>) -> Result<Vec<ProjectSummary>> {
        Ok(self
            .visible_projects(who)
            .await?
            .into_iter()
            .map(|(summary, _)| summary)
            .collect())
    }

    async fn visible_projects(
        &self,
        who: &Tenant<TenantMembers>,
    ) -> Result<Vec<(ProjectSummary, Project<ProjectViewers>)>> {
        let rows = sqlx::query!(
            r#"SELECT p.id AS "id: ProjectId", p.slug, p.display_name, pm.role AS "my_role?",
                      (SELECT count(*) FROM project_memberships x WHERE x.project_id = p.id) AS "members!"
               FROM projects p
               LEFT JOIN project_memberships pm ON pm.project_id = p.id AND pm.user_id = $2
               WHERE p.tenant_id = $1
               ORDER BY p.display_name"#,
            who.tenant as TenantId,
            who.user as UserId
        )
        .fetch_all(self.pool())
        .await?;
        let implied = implied_project_role(who.role);
        let mut out = Vec::new();
        for r in rows {
            let own = r.my_role.as_deref().map(ProjectRole::parse).transpose()?;
            if let Some(role) = strongest(implied, own) {
                let proof = grant::<ProjectViewers>(who.user, (who.tenant, r.id), role)?;
                let summary = ProjectSummary {
                    id: r.id,
                    slug: r.slug,
                    display_name: r.display_name,
                    my_role: role,
                    members: r.members,
                    canonical_name: self.naming().project(who.tenant, r.id).to_string(),
                };
                out.push((summary, proof));
            }
        }
        Ok(out)
    }

    async fn create_project(
        &self,
        who: &Tenant<TenantAdmins>,
        slug: &str,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<ProjectId> {
        let slug = slug.trim().to_lowercase();
        check_slug(&slug)?;
        let name = check_display_name(display_name)?;
        let id = ProjectId::new_random();
        let mut tx = self.pool().begin().await?;
        let inserted = sqlx::query!(
            "INSERT INTO projects (id, tenant_id, slug, display_name) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant_id, slug) DO NOTHING",
            id as ProjectId,
            who.tenant as TenantId,
            slug,
            name,
        )
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(Error::Conflict(format!(
                "a project with the short name {slug:?} already exists"
            )));
        }
        sqlx::query!(
            "INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
             VALUES ($1, $2, $3, 'admin')",
            id as ProjectId,
            who.tenant as TenantId,
            who.user as UserId,
        )
        .execute(&mut *tx)
        .await?;
        let resource = self.naming().project(who.tenant, id);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "project.create",
                resource: &resource,
                before: None,
                after: Some(json!({ "slug": slug, "display_name": name })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn rename_project(
        &self,
        who: &Project<ProjectAdmins>,
        display_name: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let name = check_display_name(display_name)?;
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query_scalar!(
            "SELECT display_name FROM projects WHERE id = $1 FOR UPDATE",
            who.project as ProjectId
        )
        .fetch_one(&mut *tx)
        .await?;
        if before == name {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE projects SET display_name = $2 WHERE id = $1",
            who.project as ProjectId,
            name
        )
        .execute(&mut *tx)
        .await?;
        let resource = self.naming().project(who.tenant, who.project);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "project.rename",
                resource: &resource,
                before: Some(json!({ "display_name": before })),
                after: Some(json!({ "display_name": name })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(project.id = %who.project, east_west = on))]
    async fn set_east_west(
        &self,
        who: &Project<ProjectAdmins>,
        on: bool,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query_scalar!(
            "SELECT east_west FROM projects WHERE id = $1 FOR UPDATE",
            who.project as ProjectId
        )
        .fetch_one(&mut *tx)
        .await?;
        if before == on {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE projects SET east_west = $2 WHERE id = $1",
            who.project as ProjectId,
            on
        )
        .execute(&mut *tx)
        .await?;
        // Running guests get the new rule too: their agents re-render the host's ruleset.
        sqlx::query!(
            "INSERT INTO outbox (kind, allocation_id, traceparent)
             SELECT 'allocation.network_update', id, $2 FROM allocations
             WHERE project_id = $1 AND state = 'running'",
            who.project as ProjectId,
            cp_base::trace_context::current().map(String::from),
        )
        .execute(&mut *tx)
        .await?;
        let resource = self.naming().project(who.tenant, who.project);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "project.east_west",
                resource: &resource,
                before: Some(json!({ "east_west": before })),
                after: Some(json!({ "east_west": on })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn project_detail(&self, who: &Project<ProjectViewers>) -> Result<ProjectDetail> {
        let p = sqlx::query!(
            r#"SELECT p.slug, p.display_name, t.display_name AS tenant_name, p.east_west
               FROM projects p JOIN tenants t ON t.id = p.tenant_id WHERE p.id = $1"#,
            who.project as ProjectId
        )
        .fetch_one(self.pool())
        .await?;
        let members = sqlx::query!(
            r#"SELECT u.id AS "id: UserId", u.email, u.display_name, pm.role
               FROM project_memberships pm JOIN users u ON u.id = pm.user_id
               WHERE pm.project_id = $1 ORDER BY u.display_name"#,
            who.project as ProjectId
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|m| {
            Ok(Member {
                user_id: m.id,
                email: m.email,
                display_name: m.display_name,
                role: ProjectRole::parse(&m.role)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
        let invitations = sqlx::query!(
            r#"SELECT i.email, i.role, u.display_name AS invited_by
               FROM project_invitations i JOIN users u ON u.id = i.invited_by
               WHERE i.project_id = $1 AND i.accepted_at IS NULL ORDER BY i.created_at"#,
            who.project as ProjectId
        )
        .fetch_all(self.pool())
        .await?
        .into_iter()
        .map(|i| {
            Ok(Invitation {
                email: i.email,
                role: ProjectRole::parse(&i.role)?,
                invited_by: i.invited_by,
            })
        })
        .collect::<Result<Vec<_>>>()?;
        Ok(ProjectDetail {
            east_west: p.east_west,
            summary: ProjectSummary {
                id: who.project,
                slug: p.slug,
                display_name: p.display_name,
                my_role: who.role,
                members: members.len() as i64,
                canonical_name: self.naming().project(who.tenant, who.project).to_string(),
            },
            tenant_name: p.tenant_name,
            members,
            invitations,
        })
    }

    async fn invite_member(
        &self,
        who: &Project<ProjectAdmins>,
        email: &str,
        role: ProjectRole,
        request_id: Option<&str>,
    ) -> Result<InviteOutcome> {
        let email = normalize_email(email)?;
        let domain = email_domain(&email);
        let owns_domain = tenant_owns_domain(self.pool(), who.tenant, domain).await?;
        let mut tx = self.pool().begin().await?;
        let existing = sqlx::query!(
            r#"SELECT u.id AS "id: UserId", pm.role AS "project_role?"
               FROM users u
               JOIN tenant_memberships tm ON tm.user_id = u.id AND tm.tenant_id = $1
               LEFT JOIN project_memberships pm ON pm.user_id = u.id AND pm.project_id = $2
               WHERE lower(u.email) = $3"#,
            who.tenant as TenantId,
            who.project as ProjectId,
            email
        )
        .fetch_optional(&mut *tx)
        .await?;
        let resource = self.naming().project(who.tenant, who.project);
        let outcome = match existing {
            Some(row) if row.project_role.is_some() => {
                return Err(Error::Conflict(format!(
                    "{email} is already a member of this project"
                )));
            }
            Some(row) => {
                sqlx::query!(
                    "INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
                     VALUES ($1, $2, $3, $4)",
                    who.project as ProjectId,
                    who.tenant as TenantId,
                    row.id as UserId,
                    role.as_str(),
                )
                .execute(&mut *tx)
                .await?;
                audit::record(
                    &mut tx,
                    AuditEntry {
                        actor: Actor::User(who.user),
                        action: "project_membership.add",
                        resource: &resource,
                        before: None,
                        after: Some(json!({ "email": email, "role": role.as_str() })),
                        request_id,
                    },
                )
                .await?;
                InviteOutcome::Added
            }
            None => {
                if !owns_domain {
                    return Err(Error::Invalid {
                        field: "email",
                        reason: format!(
                            "{email} can't sign in to this organization: {domain} is not one of its email domains"
                        ),
                    });
                }
                let inserted = sqlx::query!(
                    "INSERT INTO project_invitations (id, tenant_id, project_id, email, role, invited_by)
                     VALUES (gen_random_uuid(), $1, $2, $3, $4, $5)
                     ON CONFLICT (project_id, email) WHERE accepted_at IS NULL DO NOTHING",
                    who.tenant as TenantId,
                    who.project as ProjectId,
                    email,
                    role.as_str(),
                    who.user as UserId,
                )
                .execute(&mut *tx)
                .await?;
                if inserted.rows_affected() == 0 {
                    return Err(Error::Conflict(format!("{email} has already been invited")));
                }
                audit::record(
                    &mut tx,
                    AuditEntry {
                        actor: Actor::User(who.user),
                        action: "project_invitation.create",
                        resource: &resource,
                        before: None,
                        after: Some(json!({ "email": email, "role": role.as_str() })),
                        request_id,
                    },
                )
                .await?;
                InviteOutcome::Pending
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    async fn change_member_role(
        &self,
        who: &Project<ProjectAdmins>,
        member: UserId,
        role: ProjectRole,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query_scalar!(
            "SELECT role FROM project_memberships WHERE project_id = $1 AND user_id = $2 FOR UPDATE",
            who.project as ProjectId,
            member as UserId
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "member" })?;
        if before == role.as_str() {
            return Ok(());
        }
        sqlx::query!(
            "UPDATE project_memberships SET role = $3 WHERE project_id = $1 AND user_id = $2",
            who.project as ProjectId,
            member as UserId,
            role.as_str()
        )
        .execute(&mut *tx)
        .await
        .map_err(last_admin_error)?;
        let resource = self.naming().project(who.tenant, who.project);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "project_membership.role_change",
                resource: &resource,
                before: Some(json!({ "user_id": member, "role": before })),
                after: Some(json!({ "user_id": member, "role": role.as_str() })),
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn remove_member(
        &self,
        who: &Project<ProjectAdmins>,
        member: UserId,
        request_id: Option<&str>,
    ) -> Result<()> {
        let mut tx = self.pool().begin().await?;
        let before = sqlx::query_scalar!(
            "DELETE FROM project_memberships WHERE project_id = $1 AND user_id = $2 RETURNING role",
            who.project as ProjectId,
            member as UserId
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(last_admin_error)?
        .ok_or(Error::NotFound { what: "member" })?;
        let resource = self.naming().project(who.tenant, who.project);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "project_membership.remove",
                resource: &resource,
                before: Some(json!({ "user_id": member, "role": before })),
                after: None,
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn cancel_invitation(
        &self,
        who: &Project<ProjectAdmins>,
        email: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let email = email.trim().to_lowercase();
        let mut tx = self.pool().begin().await?;
        let role = sqlx::query_scalar!(
            "DELETE FROM project_invitations
             WHERE project_id = $1 AND email = $2 AND accepted_at IS NULL RETURNING role",
            who.project as ProjectId,
            email
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound { what: "invitation" })?;
        let resource = self.naming().project(who.tenant, who.project);
        audit::record(
            &mut tx,
            AuditEntry {
                actor: Actor::User(who.user),
                action: "project_invitation.cancel",
                resource: &resource,
                before: Some(json!({ "email": email, "role": role })),
                after: None,
                request_id,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The database's last-admin rule, as the error a user reads.
fn last_admin_error(e: sqlx::Error) -> Error {
    match cp_base::db::violated(&e) {
        Some("project_keeps_an_admin") => Error::Conflict(
            "a project must keep at least one admin: make someone else admin first".into(),
        ),
        _ => e.into(),
    }
}

/// Turns the open invitations for `email` in `tenant` into memberships. Called inside the
/// sign-in transaction, right after the user's tenant membership exists.
/// Whether `domain` is one of `tenant`'s verified sign-in email domains.
pub(crate) async fn tenant_owns_domain(
    conn: impl sqlx::PgExecutor<'_>,
    tenant: TenantId,
    domain: &str,
) -> Result<bool> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM tenant_email_domains
                              WHERE tenant_id = $1 AND domain = $2 AND verified_at IS NOT NULL)
                  AS "owns!""#,
        tenant as TenantId,
        domain,
    )
    .fetch_one(conn)
    .await?)
}

pub(crate) async fn accept_invitations(
    tx: &mut sqlx::PgConnection,
    cp: &ControlPlane,
    tenant: TenantId,
    user: UserId,
    email: &str,
) -> Result<usize> {
    let accepted = sqlx::query!(
        r#"UPDATE project_invitations SET accepted_at = now()
           WHERE tenant_id = $1 AND email = $2 AND accepted_at IS NULL
           RETURNING project_id AS "project: ProjectId", role"#,
        tenant as TenantId,
        email
    )
    .fetch_all(&mut *tx)
    .await?;
    for inv in &accepted {
        sqlx::query!(
            "INSERT INTO project_memberships (project_id, tenant_id, user_id, role)
             VALUES ($1, $2, $3, $4) ON CONFLICT (project_id, user_id) DO NOTHING",
            inv.project as ProjectId,
            tenant as TenantId,
            user as UserId,
            inv.role
        )
        .execute(&mut *tx)
        .await?;
        let resource = cp.naming().project(tenant, inv.project);
        audit::record(
            tx,
            AuditEntry {
                actor: Actor::User(user),
                action: "project_invitation.accept",
                resource: &resource,
                before: None,
                after: Some(json!({ "email": email, "role": inv.role })),
                request_id: None,
            },
        )
        .await?;
    }
    Ok(accepted.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_name_the_choices() {
        assert_eq!(
            ProjectRole::parse("operator").unwrap(),
            ProjectRole::Operator
        );
        assert_eq!(
            ProjectRole::parse("root").unwrap_err().to_string(),
            "invalid role: \"root\" is not one of admin, operator, viewer"
        );
    }

    #[test]
    fn tenant_admins_administer_every_project_and_finance_views_them() {
        assert_eq!(
            strongest(
                implied_project_role(TenantRole::Admin),
                Some(ProjectRole::Viewer)
            ),
            Some(ProjectRole::Admin)
        );
        assert_eq!(
            strongest(implied_project_role(TenantRole::Finance), None),
            Some(ProjectRole::Viewer)
        );
        assert_eq!(
            strongest(implied_project_role(TenantRole::Member), None),
            None
        );
        assert_eq!(
            strongest(
                implied_project_role(TenantRole::Member),
                Some(ProjectRole::Operator)
            ),
            Some(ProjectRole::Operator)
        );
    }

    #[test]
    fn slugs_are_checked_with_the_rule_in_the_message() {
        assert!(check_slug("gpu-research-2").is_ok());
        for bad in ["", "-x", "x-", "Research", "a b", &"x".repeat(64)] {
            assert!(
                matches!(check_slug(bad), Err(Error::Invalid { field: "slug", .. })),
                "{bad}"
            );
        }
    }
}
