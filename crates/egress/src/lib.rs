//! The egress guard: every outbound connection the service makes for a tenant (web fetches,
//! databases, later models and search) is checked here, on the address it actually connects
//! to. A URL's host is parsed as browsers parse it (so `0x7f000001`, `2130706433`, `0177.1` and
//! `[::ffff:127.0.0.1]` are all 127.0.0.1), names are checked after resolution (every resolved
//! address, so DNS rebinding gains nothing), and every redirect is checked again.

mod hosts;
pub use hosts::{HostPattern, MAX_HOST_PATTERN_CHARS, PatternError, any_matches};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use url::{Host, Url};

/// Why a destination is refused. The message names the address, never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// not http or https
    #[error("only http:// and https:// URLs can be fetched, not {0}://")]
    Scheme(String),
    /// the URL has no host
    #[error("the URL has no host")]
    NoHost,
    /// credentials inside the URL (`user:pass@`) are refused: they would be sent in clear
    /// to whatever the URL names, and logged by proxies on the way
    #[error("a URL may not carry a user name or password; use headers (with {{{{secret:NAME}}}})")]
    Credentials,
    /// a configured endpoint's name with a port that is not configured
    #[error("{host}:{port} is not an endpoint this service is configured with")]
    NotConfigured {
        /// the endpoint's host name
        host: String,
        /// the port asked for
        port: u16,
    },
    /// the address is in a range the guard keeps tenants out of
    #[error("{address} is a {kind} address, which this service does not connect to")]
    Private {
        /// the refused address
        address: IpAddr,
        /// what kind of range it is in
        kind: &'static str,
    },
}

/// Which addresses are reachable: everything public, the private ranges the operator lists
/// (for tenants' own destinations), and the endpoints the operator configured for the
/// service itself (model providers, search engines), each at exactly its host and port.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    allowed: Vec<IpNet>,
    endpoints: Vec<Endpoint>,
}

/// An endpoint the operator configured: its host as written in its URL, and its port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    host: Host<String>,
    port: u16,
}

impl Endpoint {
    /// The endpoint `url` names, if it names a host.
    fn of(url: &Url) -> Option<Self> {
        Some(Self {
            host: url.host()?.to_owned(),
            port: url.port_or_known_default()?,
        })
    }
}

impl EgressPolicy {
    /// A policy that also allows `allowed` (CIDR ranges or single addresses, the operator's
    /// `egress_allow_private`).
    pub fn new(allowed: &[String]) -> Result<Self, String> {
        let allowed = allowed
            .iter()
            .map(|entry| {
                let entry = entry.trim();
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("egress_allow_private: {entry:?} is not an address or a CIDR range")
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            allowed,
            endpoints: Vec::new(),
        })
    }

    /// This policy, and also the endpoints at `urls` (the operator's own settings, such as a
    /// provider's base URL on loopback): each reachable at exactly its host and port, whatever
    /// address it names or its name resolves to. Private addresses that are not such an
    /// endpoint stay refused: configuring a model server on 127.0.0.1:11434 opens that port
    /// to the service's calls to it, not loopback.
    pub fn with_endpoints<'a>(
        mut self,
        urls: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, String> {
        for url in urls {
            let parsed = Url::parse(url.trim()).map_err(|_| format!("{url:?} is not a URL"))?;
            let endpoint = Endpoint::of(&parsed).ok_or_else(|| format!("{url:?} names no host"))?;
            if !self.endpoints.contains(&endpoint) {
                self.endpoints.push(endpoint);
            }
        }
        Ok(self)
    }

    /// Whether a resolved name is a configured endpoint's: its addresses are then reachable
    /// (at the endpoint's port, which [`Self::check_url`] holds the URL to).
    pub fn is_endpoint_name(&self, name: &str) -> bool {
        self.endpoints
            .iter()
            .any(|e| matches!(&e.host, Host::Domain(host) if host.eq_ignore_ascii_case(name)))
    }

    /// Refuses `address` if it is special-purpose and not allowed.
    pub fn check_ip(&self, address: IpAddr) -> Result<(), Refusal> {
        let address = canonical(address);
        if self.allowed.iter().any(|net| net.contains(&address)) {
            return Ok(());
        }
        match special(address) {
            Some(kind) => Err(Refusal::Private { address, kind }),
            None => Ok(()),
        }
    }

    /// The addresses among `found` that are allowed, in their order; when none is, the refusal
    /// of the last one refused (`None`: `found` was empty).
    pub fn allowed(
        &self,
        found: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Vec<SocketAddr>, Option<Refusal>> {
        let mut refusal = None;
        let allowed: Vec<SocketAddr> = found
            .into_iter()
            .filter(|addr| match self.check_ip(addr.ip()) {
                Ok(()) => true,
                Err(err) => {
                    refusal = Some(err);
                    false
                }
            })
            .collect();
        if allowed.is_empty() {
            return Err(refusal);
        }
        Ok(allowed)
    }

    /// Refuses a URL that is not http(s), carries credentials, or names a refused address by
    /// an IP literal in any notation. A host name still has to pass [`Self::check_ip`] for
    /// each address it resolves to.
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme(url.scheme().chars().take(32).collect()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::Credentials);
        }
        if let Some(endpoint) = Endpoint::of(url) {
            if self.endpoints.contains(&endpoint) {
                return Ok(());
            }
            if let Host::Domain(name) = &endpoint.host
                && self.is_endpoint_name(name)
            {
                // the name resolves past the guard, so only at the port configured
                return Err(Refusal::NotConfigured {
                    host: name.chars().take(256).collect(),
                    port: endpoint.port,
                });
            }
        }
        match url.host() {
            None => Err(Refusal::NoHost),
            Some(Host::Ipv4(v4)) => self.check_ip(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.check_ip(IpAddr::V6(v6)),
            Some(Host::Domain(_)) => Ok(()),
        }
    }
}

/// An IPv6 address that carries an IPv4 one (mapped, compatible, NAT64, 6to4) as that IPv4
/// address, so that no notation reaches an IPv4 range the guard refuses.
fn canonical(address: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = address else {
        return address;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let segments = v6.segments();
    let octets = v6.octets();
    let embedded =
        |at: usize| Ipv4Addr::new(octets[at], octets[at + 1], octets[at + 2], octets[at + 3]);
    // ::a.b.c.d (deprecated "compatible"), ::0.0.1.2 too, but not :: and ::1
    if segments[..6].iter().all(|s| *s == 0) && (segments[6] != 0 || segments[7] > 1) {
        return IpAddr::V4(embedded(12));
    }
    // IPv4-translated ::ffff:0:a.b.c.d (SIIT)
    if segments[..4].iter().all(|s| *s == 0) && segments[4] == 0xffff && segments[5] == 0 {
        return IpAddr::V4(embedded(12));
    }
    // NAT64 64:ff9b::/96 and 64:ff9b:1::/48
    if segments[0] == 0x64 && segments[1] == 0xff9b {
        return IpAddr::V4(embedded(12));
    }
    // 6to4 2002:AABB:CCDD::/48
    if segments[0] == 0x2002 {
        return IpAddr::V4(embedded(2));
    }
    address
}

/// The kind of special-purpose range `address` is in, if any.
fn special(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(a: Ipv4Addr) -> Option<&'static str> {
    let [first, second, third, _] = a.octets();
    let kind = if a.is_loopback() {
        "loopback"
    } else if a.is_unspecified() || first == 0 {
        "unspecified ('this network')"
    } else if a.is_private() {
        "private"
    } else if a.is_link_local() {
        // 169.254.169.254 and friends: cloud metadata services live here
        "link-local (cloud metadata)"
    } else if first == 100 && (64..128).contains(&second) {
        "shared (CGNAT)"
    } else if a.is_multicast() {
        "multicast"
    } else if a.is_broadcast() || first >= 240 {
        "reserved"
    } else if first == 192 && second == 0 && third == 0 {
        "IETF protocol assignment"
    } else if a.is_documentation() {
        "documentation"
    } else if first == 198 && (second == 18 || second == 19) {
        "benchmarking"
    } else {
        return None;
    };
    Some(kind)
}

fn special_v6(a: Ipv6Addr) -> Option<&'static str> {
    let first = a.segments()[0];
    let kind = if a.is_loopback() {
        "loopback"
    } else if a.is_unspecified() {
        "unspecified"
    } else if a.is_multicast() {
        "multicast"
    } else if first & 0xffc0 == 0xfe80 {
        "link-local"
    } else if first & 0xffc0 == 0xfec0 {
        "site-local"
    } else if first & 0xfe00 == 0xfc00 {
        // fd00:ec2::254 (a cloud metadata service) is one of these
        "unique local (private)"
    } else if first == 0x2001 && a.segments()[1] == 0x0db8 {
        "documentation"
    } else if first == 0x2001 && a.segments()[1] == 0 {
        // Teredo 2001::/32 tunnels to an IPv4 address hidden in the last 32 bits
        "Teredo tunnel"
    } else if first == 0x2001 && a.segments()[1] == 0x0002 && a.segments()[2] == 0 {
        "benchmarking"
    } else if first == 0x0100 && a.segments()[1..4].iter().all(|s| *s == 0) {
        "discard-only"
    } else {
        return None;
    };
    Some(kind)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
