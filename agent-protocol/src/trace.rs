//! The W3C trace context a task carries from the control plane to the agent (and the agent
//! sends back with its reports), so that one launch is one trace across both.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A W3C `traceparent` (version 00): `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`,
/// lowercase, with neither id all zeros. Anything else is refused, so a stored or received
/// value is always one a collector accepts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TraceParent(String);

/// The HTTP header (and database column) that carries it.
pub const TRACEPARENT: &str = "traceparent";

impl TraceParent {
    /// Checks `s` as a version-00 traceparent.
    pub fn parse(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split('-').collect();
        let hex = |p: &str, len: usize| {
            p.len() == len
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        match parts.as_slice() {
            [version, trace, span, flags]
                if *version == "00"
                    && hex(trace, 32)
                    && hex(span, 16)
                    && hex(flags, 2)
                    && trace.bytes().any(|b| b != b'0')
                    && span.bytes().any(|b| b != b'0') =>
            {
                Ok(Self(s.to_string()))
            }
            _ => Err(format!(
                "{:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)",
                s.chars().take(80).collect::<String>()
            )),
        }
    }

    /// Builds one from its parts: a 32-hex-digit trace id, a 16-hex-digit span id, the flags.
    pub fn from_parts(trace_id: &str, span_id: &str, flags: u8) -> Result<Self, String> {
        Self::parse(&format!("00-{trace_id}-{span_id}-{flags:02x}"))
    }

    /// The trace id, 32 hex digits (what log lines carry).
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The parent span id, 16 hex digits.
    pub fn span_id(&self) -> &str {
        &self.0[36..52]
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.0[53..55], 16).unwrap_or(0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TraceParent {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s)
    }
}

impl From<TraceParent> for String {
    fn from(t: TraceParent) -> String {
        t.0
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_has_its_parts_and_survives_json() {
        let t = TraceParent::parse(GOOD).unwrap();
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.span_id(), "00f067aa0ba902b7");
        assert_eq!(t.flags(), 1);
        assert_eq!(
            TraceParent::from_parts(t.trace_id(), t.span_id(), 1).unwrap(),
            t
        );
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("\"{GOOD}\""));
        assert_eq!(serde_json::from_str::<TraceParent>(&json).unwrap(), t);
    }

    #[test]
    fn anything_but_a_version_00_traceparent_is_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?} accepted");
            assert!(serde_json::from_str::<TraceParent>(&format!("{bad:?}")).is_err());
        }
    }
}
