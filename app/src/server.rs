//! Server-side glue for server functions: how they reach the control plane.

use control_plane::ControlPlane;
use leptos::prelude::use_context;

use crate::AppError;

/// The control plane provided by the server for this request.
pub fn control_plane() -> Result<ControlPlane, AppError> {
    use_context::<ControlPlane>()
        .ok_or_else(|| AppError::internal("ControlPlane missing from the request context"))
}
