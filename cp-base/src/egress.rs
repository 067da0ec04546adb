//! Requests the portal makes to addresses a tenant chose: its identity provider's issuer
//! and the endpoints the issuer's discovery document names (keys, token). A tenant admin
//! must not be able to make the portal call into the platform's own network (SSRF), so
//! every such request goes through [`Egress`]:
//!
//! - **https only**; plain http only to a loopback address, and only when the deployment
//!   says so ([`Egress::allowing_loopback_http`], the dev command and the tests).
//! - **Public addresses only**, checked on the addresses a name *resolves to* (the resolver
//!   below hands the connector nothing else, so a re-resolution can't slip a private address
//!   in) and on IP literals in the URL. [`address_allowed`] is an allowlist: global unicast,
//!   nothing from the special-purpose registries (private, loopback, link-local and its
//!   cloud metadata address, shared, documentation, benchmarking, multicast, reserved;
//!   IPv6 unique-local, link-local, and mapped or translated IPv4 of those).
//! - **No redirects**, short timeouts, and answers of at most [`MAX_BODY`] bytes.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openidconnect::{AsyncHttpClient, HttpRequest, HttpResponse};

/// The largest answer read from a tenant's provider (discovery documents and key sets are a
/// few kilobytes).
pub const MAX_BODY: usize = 256 * 1024;

/// Why a request was not made, or failed.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("{0}")]
    Refused(String),
    #[error("the answer is larger than {MAX_BODY} bytes")]
    TooLarge,
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("malformed request or answer: {0}")]
    Malformed(String),
}

/// The HTTP client for tenant-chosen addresses. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Egress {
    client: reqwest::Client,
    policy: Policy,
}

#[derive(Clone, Copy, Debug)]
struct Policy {
    loopback_http: bool,
}

impl Default for Egress {
    fn default() -> Self {
        Self::new(Policy {
            loopback_http: false,
        })
    }
}

impl Egress {
    /// Also allows `http://` to loopback addresses: for the dev command's and the tests' local
    /// identity provider. Never in production.
    pub fn allowing_loopback_http() -> Self {
        Self::new(Policy {
            loopback_http: true,
        })
    }

    fn new(policy: Policy) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10))
            .dns_resolver(Arc::new(Checked { policy }))
            .build()
            .expect("the HTTP client's TLS backend initialises");
        Self { client, policy }
    }

    /// Whether the portal would call `url`, with the reason if not. Resolves the host, so a
    /// name that points into a private network is refused here, with a sentence, rather than
    /// as an unreachable provider later.
    pub async fn check(&self, url: &str) -> Result<(), EgressError> {
        let url = reqwest::Url::parse(url).map_err(|e| EgressError::Refused(e.to_string()))?;
        self.check_url(&url)?;
        let host = url.host_str().unwrap_or_default();
        if literal_address(host).is_none() {
            resolve(self.policy, host).await?;
        }
        Ok(())
    }

    /// The checks that need no lookup: scheme, and the host when it is an address.
    fn check_url(&self, url: &reqwest::Url) -> Result<(), EgressError> {
        let Some(host) = url.host_str() else {
            return Err(EgressError::Refused(format!("{url} has no host")));
        };
        let literal = literal_address(host);
        match url.scheme() {
            "https" => {}
            "http" if self.policy.loopback_http && literal.is_some_and(|a| a.is_loopback()) => {}
            "http" if self.policy.loopback_http => {
                return Err(EgressError::Refused(format!(
                    "{url}: plain http is allowed only to a loopback address (127.0.0.1) in development; use https://"
                )));
            }
            _ => {
                return Err(EgressError::Refused(format!(
                    "{url}: the portal calls identity providers over https:// only"
                )));
            }
        }
        if let Some(address) = literal {
            self.policy.allows(address)?;
        }
        Ok(())
    }

    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, EgressError> {
        let request: reqwest::Request = request
            .try_into()
            .map_err(|e: reqwest::Error| EgressError::Malformed(e.to_string()))?;
        self.check_url(request.url())?;
        let mut response = self.client.execute(request).await?;
        if response
            .content_length()
            .is_some_and(|n| n > MAX_BODY as u64)
        {
            return Err(EgressError::TooLarge);
        }
        let mut builder = openidconnect::http::Response::builder().status(response.status());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(EgressError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        builder
            .body(body)
            .map_err(|e| EgressError::Malformed(e.to_string()))
    }
}

impl<'c> AsyncHttpClient<'c> for Egress {
    type Error = EgressError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, EgressError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

impl Policy {
    fn allows(self, address: IpAddr) -> Result<(), EgressError> {
        if address_allowed(address) || (self.loopback_http && address.is_loopback()) {
            Ok(())
        } else {
            Err(EgressError::Refused(format!(
                "{address} is not a public address; the portal never calls private, loopback, \
                 link-local or metadata addresses"
            )))
        }
    }
}

/// The address a URL's host names literally (`10.0.0.1`, `[::1]`), if it does.
fn literal_address(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// Resolves `host` and keeps only the addresses [`Policy::allows`]; refuses when none is left.
async fn resolve(policy: Policy, host: &str) -> Result<Vec<SocketAddr>, EgressError> {
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|e| EgressError::Refused(format!("{host} does not resolve: {e}")))?
        .collect();
    let allowed: Vec<SocketAddr> = found
        .iter()
        .copied()
        .filter(|a| policy.allows(a.ip()).is_ok())
        .collect();
    match (found.first(), allowed.is_empty()) {
        (Some(first), true) => Err(EgressError::Refused(format!(
            "{host} resolves to {}, which is not a public address; the portal never calls \
             private, loopback, link-local or metadata addresses",
            first.ip()
        ))),
        (None, _) => Err(EgressError::Refused(format!("{host} has no address"))),
        (Some(_), false) => Ok(allowed),
    }
}

/// reqwest's resolver for [`Egress`]: the connector only ever sees allowed addresses.
struct Checked {
    policy: Policy,
}

impl reqwest::dns::Resolve for Checked {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let addresses = resolve(policy, name.as_str()).await?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether `address` is a public, global unicast address (an allowlist of what remains after
/// the IANA special-purpose address registries).
pub fn address_allowed(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(a) => v4_allowed(a),
        IpAddr::V6(a) => v6_allowed(a),
    }
}

fn v4_allowed(a: Ipv4Addr) -> bool {
    let [b0, b1, b2, _] = a.octets();
    !(b0 == 0                                   // "this network"
        || b0 == 10                             // private
        || (b0 == 100 && (64..128).contains(&b1)) // shared (carrier-grade NAT)
        || b0 == 127                            // loopback
        || (b0 == 169 && b1 == 254)             // link-local, cloud metadata
        || (b0 == 172 && (16..32).contains(&b1)) // private
        || (b0 == 192 && b1 == 0 && b2 == 0)    // IETF protocol assignments
        || (b0 == 192 && b1 == 0 && b2 == 2)    // documentation
        || (b0 == 192 && b1 == 88 && b2 == 99)  // 6to4 relay anycast
        || (b0 == 192 && b1 == 168)             // private
        || (b0 == 198 && (18..20).contains(&b1)) // benchmarking
        || (b0 == 198 && b1 == 51 && b2 == 100) // documentation
        || (b0 == 203 && b1 == 0 && b2 == 113)  // documentation
        || b0 >= 224) // multicast, reserved, broadcast
}

fn v6_allowed(a: Ipv6Addr) -> bool {
    if let Some(v4) = a.to_ipv4_mapped() {
        return v4_allowed(v4);
    }
    let s = a.segments();
    // Only the global unicast block 2000::/3 is allowed, minus its special-purpose parts.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments (Teredo, benchmarking, ORCHID…)
        && !(s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        && s[0] != 0x2002 // 6to4: carries an IPv4 address
        && !(s[0] == 0x3fff && s[1] < 0x1000) // documentation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_unicast_addresses_are_allowed() {
        for allowed in [
            "8.8.8.8",
            "1.1.1.1",
            "151.101.1.69",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450:4001::200e",
        ] {
            assert!(address_allowed(allowed.parse().unwrap()), "{allowed}");
        }
        for refused in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.170",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "2002:a9fe:a9fe::1",
            "2001::1",
        ] {
            assert!(!address_allowed(refused.parse().unwrap()), "{refused}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked_before_any_request() {
        let strict = Egress::default();
        let dev = Egress::allowing_loopback_http();
        let refused = |r: Result<(), EgressError>| match r {
            Err(EgressError::Refused(why)) => why,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert!(refused(strict.check("http://idp.example.com").await).contains("https:// only"));
        assert!(refused(strict.check("http://127.0.0.1:9/").await).contains("https:// only"));
        assert!(
            refused(strict.check("https://169.254.169.254/latest").await)
                .contains("not a public address")
        );
        assert!(refused(strict.check("https://[::1]/").await).contains("not a public address"));
        assert!(refused(strict.check("https://10.0.0.8/").await).contains("not a public address"));
        // A name is judged by what it resolves to.
        assert!(
            refused(strict.check("https://localhost/").await).contains("localhost resolves to")
        );
        assert!(refused(strict.check("ftp://8.8.8.8/").await).contains("https:// only"));
        // Development: plain http to loopback, nothing else.
        dev.check("http://127.0.0.1:9/").await.unwrap();
        assert!(refused(dev.check("http://10.0.0.8/").await).contains("loopback"));
        assert!(
            refused(dev.check("https://169.254.169.254/").await).contains("not a public address")
        );
    }
}
