//! How this deployment spells canonical resource names.

use crate::ids::{ProjectId, TenantId, UserId};
use crate::resource_name::{ResourceName, ResourceNameError};

/// The configurable head of every canonical name (`{partition}:{service}:…`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naming {
    pub partition: String,
    pub service: String,
}

impl Naming {
    /// Checks both segments once, at start-up, so later names can't fail on them.
    pub fn new(partition: &str, service: &str) -> Result<Self, ResourceNameError> {
        ResourceName::new(partition, service, "", None, None, "naming", "check")?;
        Ok(Self {
            partition: partition.to_string(),
            service: service.to_string(),
        })
    }

    /// `{partition}:{service}::{tenant}::tenant:{tenant}`
    pub fn tenant(&self, tenant: TenantId) -> ResourceName {
        self.name("", Some(tenant), None, "tenant", &tenant.to_string())
    }

    /// `{partition}:{service}::{tenant}:{project}:project:{project}`
    pub fn project(&self, tenant: TenantId, project: ProjectId) -> ResourceName {
        self.name(
            "",
            Some(tenant),
            Some(project),
            "project",
            &project.to_string(),
        )
    }

    /// `{partition}:{service}::{tenant}:{project}:api_token:{id}` (no project: the whole
    /// organization's).
    pub fn api_token(
        &self,
        tenant: TenantId,
        project: Option<ProjectId>,
        id: crate::ids::ApiTokenId,
    ) -> ResourceName {
        self.name("", Some(tenant), project, "api_token", &id.to_string())
    }

    /// `{partition}:{service}::::user:{user}` (users are global, not tenant-owned).
    pub fn platform_user(&self, user: UserId) -> ResourceName {
        self.name("", None, None, "user", &user.to_string())
    }

    /// `{partition}:{service}::{tenant}::tenant_member:{user}`
    pub fn tenant_member(&self, tenant: TenantId, user: UserId) -> ResourceName {
        self.name("", Some(tenant), None, "tenant_member", &user.to_string())
    }

    /// `{partition}:{service}::::platform:{what}`, for platform-wide settings.
    pub fn platform(&self, what: &str) -> ResourceName {
        self.name("", None, None, "platform", what)
    }

    /// `{partition}:{service}:::::sku:{name}`
    pub fn sku(&self, name: &str) -> ResourceName {
        self.name("", None, None, "sku", name)
    }

    /// `{partition}:{service}:::::listing:{slug}`: a marketplace listing and its versions.
    pub fn listing(&self, slug: &str) -> ResourceName {
        self.name("", None, None, "listing", slug)
    }

    /// `{partition}:{service}:::::publisher:{id}`
    pub fn publisher(&self, id: crate::ids::PublisherId) -> ResourceName {
        self.name("", None, None, "publisher", &id.to_string())
    }

    /// `{partition}:{service}:{region}:::node:{node}`
    pub fn node(
        &self,
        region: &str,
        node: crate::ids::NodeId,
    ) -> Result<ResourceName, ResourceNameError> {
        ResourceName::new(
            &self.partition,
            &self.service,
            region,
            None,
            None,
            "node",
            &node.to_string(),
        )
    }

    /// `{partition}:{service}:{region}:{tenant}:{project}:allocation:{id}`
    pub fn allocation(
        &self,
        region: &str,
        tenant: TenantId,
        project: ProjectId,
        id: crate::ids::AllocationId,
    ) -> Result<ResourceName, ResourceNameError> {
        ResourceName::new(
            &self.partition,
            &self.service,
            region,
            Some(tenant),
            Some(project),
            "allocation",
            &id.to_string(),
        )
    }

    /// `{partition}:{service}:{region}:{tenant}:{project}:cluster:{id}`
    pub fn cluster(
        &self,
        region: &str,
        tenant: TenantId,
        project: ProjectId,
        id: crate::ids::ClusterId,
    ) -> Result<ResourceName, ResourceNameError> {
        ResourceName::new(
            &self.partition,
            &self.service,
            region,
            Some(tenant),
            Some(project),
            "cluster",
            &id.to_string(),
        )
    }

    /// `{partition}:{service}:{region}:{tenant}:{project}:volume:{id}`
    pub fn volume(
        &self,
        region: &str,
        tenant: TenantId,
        project: ProjectId,
        id: crate::ids::VolumeId,
    ) -> Result<ResourceName, ResourceNameError> {
        ResourceName::new(
            &self.partition,
            &self.service,
            region,
            Some(tenant),
            Some(project),
            "volume",
            &id.to_string(),
        )
    }

    /// `{partition}:{service}:{region}:{tenant}:{project}:snapshot:{id}`
    pub fn snapshot(
        &self,
        region: &str,
        tenant: TenantId,
        project: ProjectId,
        id: crate::ids::SnapshotId,
    ) -> Result<ResourceName, ResourceNameError> {
        ResourceName::new(
            &self.partition,
            &self.service,
            region,
            Some(tenant),
            Some(project),
            "snapshot",
            &id.to_string(),
        )
    }

    fn name(
        &self,
        region: &str,
        tenant: Option<TenantId>,
        project: Option<ProjectId>,
        rtype: &'static str,
        id: &str,
    ) -> ResourceName {
        ResourceName::new(
            &self.partition,
            &self.service,
            region,
            tenant,
            project,
            rtype,
            id,
        )
        .expect("segments checked in Naming::new; ids are UUIDs; types are constants")
    }
}

impl Default for Naming {
    fn default() -> Self {
        Self {
            partition: "gpuaas".into(),
            service: "portal".into(),
        }
    }
}
