//! The wire contract between the control plane (`/agent/v1/*`) and the node agent.
//!
//! Only the version handshake exists so far. Enrolment, heartbeats, task claims, phase reports
//! and cleanup proofs arrive with the fleet work (issue 4); they will be added here, as serde
//! types only, so that both sides compile against one definition.

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks. The server refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;

/// The URL prefix of the node API for [`PROTOCOL_VERSION`].
pub const API_PREFIX: &str = "/agent/v1";

/// Sent by an agent with every request (as the `x-agent-protocol` header and in bodies).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentHello {
    pub protocol_version: u32,
    pub agent_version: String,
}

impl AgentHello {
    /// Whether a server speaking [`PROTOCOL_VERSION`] can talk to this agent.
    pub fn is_supported(&self) -> bool {
        self.protocol_version == PROTOCOL_VERSION
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_checks_version() {
        let hello = AgentHello {
            protocol_version: PROTOCOL_VERSION,
            agent_version: "0.1.0".into(),
        };
        let json = serde_json::to_string(&hello).unwrap();
        assert_eq!(json, r#"{"protocol_version":1,"agent_version":"0.1.0"}"#);
        let back: AgentHello = serde_json::from_str(&json).unwrap();
        assert!(back.is_supported());
        let future = AgentHello {
            protocol_version: 2,
            ..back
        };
        assert!(!future.is_supported());
    }
}
