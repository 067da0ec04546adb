//! What a SKU sells: a whole node, or slots of one.

use serde::{Deserialize, Serialize};

use crate::Invalid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Shape {
    /// One whole enrolled node.
    Baremetal,
    /// One or more approved slots on one node.
    GpuSlice,
}

impl Shape {
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Baremetal => "baremetal",
            Shape::GpuSlice => "gpu_slice",
        }
    }

    pub fn parse(s: &str) -> Result<Self, Invalid> {
        match s.trim() {
            "baremetal" => Ok(Shape::Baremetal),
            "gpu_slice" => Ok(Shape::GpuSlice),
            other => Err(Invalid::new(
                "shape",
                format!("{other:?} is not baremetal or gpu_slice"),
            )),
        }
    }
}
