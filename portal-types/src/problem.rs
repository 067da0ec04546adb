//! What the public API answers when it refuses or fails: `application/problem+json` (RFC
//! 9457). The server writes it and `gpuctl` reads it, from this one definition.

use serde::{Deserialize, Serialize};

/// An error, as RFC 9457 describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(example = json!({
    "type": "urn:gpuaas:problem:invalid",
    "title": "Invalid input",
    "status": 400,
    "detail": "Invalid region: use lowercase letters, digits and dashes, at most 64 characters.",
    "code": "invalid",
    "field": "region"
})))]
pub struct Problem {
    /// `urn:gpuaas:problem:{code}`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The same for every problem with this code.
    pub title: String,
    pub status: u16,
    /// What went wrong this time, in a sentence for people.
    pub detail: String,
    /// Stable and machine-readable: `invalid`, `not_found`, `sku_unavailable`,
    /// `policy_denied`, `quota_exceeded`, `budget_exceeded`, `conflict`, `unauthenticated`,
    /// `forbidden`, `rate_limited`, `internal`, …
    pub code: String,
    /// For `invalid`: the input that broke a rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `internal`: quote it to support; the cause is in our logs under it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
