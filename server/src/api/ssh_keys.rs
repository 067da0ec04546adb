//! `/api/v1/ssh-keys`: the token maker's saved SSH public keys, the same the account page
//! shows and a launch picks from. Reading needs the `read` scope; adding and deleting `keys`,
//! on an organization-wide token (the keys reach every later launch of the maker, anywhere).

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use control_plane::ControlPlane;
use control_plane::api_tokens::TokenScope;
use control_plane::prelude::*;
use portal_types::SshKeyId;
use portal_types::account::SshKey;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::RequestId;
use super::auth::{Caller, TokenRefusals};
use super::problem::{ApiError, Problem, bad_body, renamed};
use app::error::AppError;

#[derive(Debug, Serialize, ToSchema)]
pub struct SshKeyList {
    pub ssh_keys: Vec<SshKey>,
}

/// A key to save.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"name": "laptop", "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl bob@laptop"}))]
pub struct NewSshKey {
    /// 1 to 64 characters, unique among the maker's keys.
    pub name: String,
    /// One OpenSSH public key line (`ssh-ed25519 …`, `ecdsa-sha2-…`, or RSA of 3072 bits or
    /// more).
    pub public_key: String,
}

/// The maker's keys, oldest first.
#[utoipa::path(
    get,
    path = "/ssh-keys",
    tag = "ssh-keys",
    operation_id = "list_ssh_keys",
    security(("token" = [])),
    responses(
        (status = 200, description = "The keys.", body = SshKeyList,
         example = json!({"ssh_keys": [{"id": "4f7c2a9e-0b7d-4c53-9a43-1f1f6d2e8a10", "name": "laptop",
             "kind": "ssh-ed25519", "fingerprint": "SHA256:Zq2mP1lq3G9kRkqAq7sYv3v7pZk8b1m6xU3cJp8Yx1Q",
             "comment": "bob@laptop", "created_at": "2026-11-24T09:12:03Z", "last_used_at": null}]})),
        TokenRefusals,
    )
)]
#[tracing::instrument(skip_all)]
pub async fn list(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
) -> Result<Json<SshKeyList>, ApiError> {
    caller.require(TokenScope::Read, &id)?;
    let ssh_keys = cp
        .ssh_keys(&caller.0.principal)
        .await
        .map_err(|e| id.refused(e))?;
    Ok(Json(SshKeyList { ssh_keys }))
}

/// Saves a key, validated as a launch validates it. Needs an organization-wide token with the
/// `keys` scope. Audited with the token; the account page shows it was added through it.
#[utoipa::path(
    post,
    path = "/ssh-keys",
    tag = "ssh-keys",
    operation_id = "add_ssh_key",
    security(("token" = [])),
    request_body = NewSshKey,
    responses(
        (status = 201, description = "Saved.", body = SshKey,
         links(("DeleteSshKey" = (operation_id = "delete_ssh_key", parameters(("id" = "$response.body#/id")),
             description = "Delete it again."))),
         example = json!({"id": "4f7c2a9e-0b7d-4c53-9a43-1f1f6d2e8a10", "name": "laptop", "kind": "ssh-ed25519",
             "fingerprint": "SHA256:Zq2mP1lq3G9kRkqAq7sYv3v7pZk8b1m6xU3cJp8Yx1Q", "comment": "bob@laptop",
             "created_at": "2026-11-24T09:12:03Z", "last_used_at": null})),
        (status = 400, description = "Not a usable public key, or a bad name; `field` says which.", body = Problem, content_type = "application/problem+json",
         example = json!({"type": "urn:gpuaas:problem:invalid", "title": "Invalid input", "status": 400,
             "detail": "Invalid public_key: this is a private key; paste the public key (the .pub file).", "code": "invalid", "field": "public_key"})),
        TokenRefusals,
        (status = 409, description = "The same key is saved already.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn add(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    body: Result<Json<NewSshKey>, JsonRejection>,
) -> Result<(StatusCode, Json<SshKey>), ApiError> {
    caller.0.require_keys().map_err(|e| id.refused(e))?;
    let Json(new) = body.map_err(bad_body)?;
    let key = caller
        .acting(cp.add_ssh_key(&caller.0.principal, &new.name, &new.public_key, Some(&id.0)))
        .await
        // The control plane names the launch form's field; this body calls it public_key.
        .map_err(|e| id.refused(renamed(e, "ssh_public_key", "public_key")))?;
    Ok((StatusCode::CREATED, Json(key)))
}

/// Deletes one of the maker's keys. Needs an organization-wide token with the `keys` scope.
/// Another person's key, or none, is not found. Audited.
#[utoipa::path(
    delete,
    path = "/ssh-keys/{id}",
    tag = "ssh-keys",
    operation_id = "delete_ssh_key",
    security(("token" = [])),
    params(("id" = String, Path, description = "The key's id.", format = Uuid)),
    responses(
        (status = 204, description = "Deleted."),
        TokenRefusals,
        (status = 404, description = "No such key of the token's maker.", body = Problem, content_type = "application/problem+json"),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn delete(
    State(cp): State<ControlPlane>,
    id: RequestId,
    caller: Caller,
    key: Result<Path<SshKeyId>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    caller.0.require_keys().map_err(|e| id.refused(e))?;
    // A malformed id is "not found", like an unknown one.
    let Path(key) = key.map_err(|_| ApiError(AppError::NotFound))?;
    caller
        .acting(cp.delete_ssh_key(&caller.0.principal, key, Some(&id.0)))
        .await
        .map_err(|e| id.refused(e))?;
    Ok(StatusCode::NO_CONTENT)
}
