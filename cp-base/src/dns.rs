//! Proving control of an email domain: the TXT record a tenant admin is asked to publish, and
//! the lookup that checks it. The resolver is configuration (`PORTAL_DNS_RESOLVER`), so a site
//! can point it at a resolver it trusts and tests at a local `dnsmasq`.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;

/// The label the record is published under: `_gpuaas-challenge.<domain>`.
pub const CHALLENGE_LABEL: &str = "_gpuaas-challenge";
/// The record's value starts with this; the token follows.
pub const CHALLENGE_PREFIX: &str = "gpuaas-domain-verification=";

/// The name to publish the TXT record at.
pub fn challenge_name(domain: &str) -> String {
    format!("{CHALLENGE_LABEL}.{domain}")
}

/// The TXT record's value for a claim's token.
pub fn challenge_value(token: &str) -> String {
    format!("{CHALLENGE_PREFIX}{token}")
}

/// A fresh claim token: 128 random bits as 32 lowercase hex digits (the schema checks the form).
pub fn new_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether one of the TXT strings found is exactly the claim's value. Providers may add
/// quotes or spaces around what they store; nothing else is forgiven.
pub fn proves(found: &[String], token: &str) -> bool {
    let expected = challenge_value(token);
    found
        .iter()
        .any(|s| s.trim().trim_matches('"').trim() == expected)
}

/// Where TXT lookups go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Resolver {
    /// The machine's resolvers (`/etc/resolv.conf`).
    #[default]
    System,
    /// One resolver, by address (UDP, then TCP for long answers).
    At(SocketAddr),
}

/// What a TXT lookup found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxtAnswer {
    /// The strings of every TXT record at the name (each record's strings joined).
    Found(Vec<String>),
    /// The name has no TXT record (or does not exist).
    None,
    /// The lookup itself failed (timeout, refused, no resolver); the reason is for people.
    Failed(String),
}

const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

impl Resolver {
    /// Looks up the TXT records at `name`, without a cache (an admin who just published the
    /// record and checks again must not be told the earlier "none").
    #[tracing::instrument]
    pub async fn txt(&self, name: &str) -> TxtAnswer {
        let builder = match self {
            Resolver::System => match hickory_resolver::TokioResolver::builder_tokio() {
                Ok(b) => b,
                Err(e) => return TxtAnswer::Failed(format!("no resolver configured: {e}")),
            },
            Resolver::At(addr) => {
                let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut server.connections {
                    c.port = addr.port();
                }
                hickory_resolver::TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    TokioRuntimeProvider::default(),
                )
            }
        };
        let mut builder = builder;
        let opts = builder.options_mut();
        opts.cache_size = 0;
        opts.timeout = LOOKUP_TIMEOUT;
        opts.attempts = 1;
        let resolver = match builder.build() {
            Ok(r) => r,
            Err(e) => return TxtAnswer::Failed(format!("no resolver: {e}")),
        };
        // A trailing dot: the name is absolute, never completed with a search domain.
        match resolver.txt_lookup(format!("{name}.")).await {
            Ok(lookup) => TxtAnswer::Found(
                lookup
                    .answers()
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::TXT(txt) => Some(
                            txt.txt_data
                                .iter()
                                .map(|part| String::from_utf8_lossy(part).into_owned())
                                .collect::<String>(),
                        ),
                        _ => None,
                    })
                    .collect(),
            ),
            Err(e) if e.is_no_records_found() || e.is_nx_domain() => TxtAnswer::None,
            Err(e) => {
                tracing::warn!(dns.name = name, error.cause = %e, "TXT lookup failed");
                TxtAnswer::Failed(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_value_proves_a_claim() {
        let token = "0123456789abcdef0123456789abcdef";
        let value = challenge_value(token);
        assert!(proves(std::slice::from_ref(&value), token));
        assert!(proves(
            &["v=spf1 -all".into(), format!(" \"{value}\" ")],
            token
        ));
        assert!(!proves(&[format!("{value}0")], token));
        assert!(!proves(&[token.into()], token));
        assert!(!proves(&[], token));
    }

    #[test]
    fn tokens_are_32_hex_digits_and_differ() {
        let a = new_token();
        assert_eq!(a.len(), 32);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, new_token());
    }

    #[test]
    fn the_record_lives_under_its_own_label() {
        assert_eq!(
            challenge_name("acme.example"),
            "_gpuaas-challenge.acme.example"
        );
    }
}
