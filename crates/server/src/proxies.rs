//! Who the client is behind a reverse proxy: when the TCP peer is one of the operator's trusted
//! proxies, the client is the right-most address of `X-Forwarded-For` that is not itself a
//! trusted proxy (the left part of the header is the client's to write, so it is never believed).
//! Per-client limits (sign-in links, client registrations) then count real clients, not the proxy.
//! Several `X-Forwarded-For` lines are one list (RFC 9110 §5.3): a proxy that adds a line of its
//! own instead of extending the client's must not leave the client's line the one that is read.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;

/// An address range, `ADDRESS` or `ADDRESS/PREFIX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    address: IpAddr,
    prefix: u8,
}

impl Network {
    /// Reads `10.0.0.0/8`, `::1`, `192.168.1.7`; `Err` names what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or ADDRESS/PREFIX"))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {max}"))?,
        };
        Ok(Self { address, prefix })
    }

    /// Whether `address` lies in the range (IPv4-mapped IPv6 addresses as IPv4).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        match (self.address, address) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_equal(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_equal(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

fn prefix_equal(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let (whole, rest) = (usize::from(prefix / 8), prefix % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// The client behind `peer`: itself, unless it is a trusted proxy that forwarded the request.
pub fn client_behind(peer: IpAddr, forwarded: Option<&str>, trusted: &[Network]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let Some(forwarded) = forwarded else {
        return peer;
    };
    let mut client = peer;
    for hop in forwarded.rsplit(',') {
        match hop.trim().parse::<IpAddr>() {
            Ok(ip) if is_trusted(ip) => client = ip,
            Ok(ip) => return ip,
            // a hop we cannot read: what lies left of it cannot be trusted either
            Err(_) => return client,
        }
    }
    client
}

/// Every `X-Forwarded-For` line of a request, in order, joined into one comma-separated list;
/// `None` without the header. A line that is not text stands as an entry that is no address, so
/// nothing left of it is believed.
pub fn forwarded_for(headers: &HeaderMap) -> Option<String> {
    let lines: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|line| line.to_str().unwrap_or("unreadable"))
        .collect();
    (!lines.is_empty()).then(|| lines.join(","))
}

/// Middleware: replaces the request's client address by the one behind a trusted proxy.
pub async fn real_client(
    State(trusted): State<Arc<Vec<Network>>>,
    mut request: Request,
    next: Next,
) -> Response {
    if !trusted.is_empty()
        && let Some(ConnectInfo(peer)) = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .copied()
    {
        let forwarded = forwarded_for(request.headers());
        let client = client_behind(peer.ip(), forwarded.as_deref(), &trusted);
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::new(client, peer.port())));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_parse_and_contain() {
        let net = Network::parse("10.1.0.0/16").unwrap();
        assert!(net.contains(ip("10.1.200.3")) && !net.contains(ip("10.2.0.1")));
        assert!(Network::parse("::1").unwrap().contains(ip("::1")));
        assert!(
            Network::parse("127.0.0.1")
                .unwrap()
                .contains(ip("::ffff:127.0.0.1"))
        );
        assert!(
            Network::parse("192.168.0.0/23")
                .unwrap()
                .contains(ip("192.168.1.255"))
        );
        assert!(
            !Network::parse("192.168.0.0/23")
                .unwrap()
                .contains(ip("192.168.2.0"))
        );
        for bad in ["", "10.0.0.0/33", "nonsense", "::/129", "1.2.3.4/x"] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_client_is_the_first_untrusted_hop_from_the_right() {
        let trusted = [Network::parse("10.0.0.0/8").unwrap()];
        let peer = ip("10.0.0.5");
        // a client's own X-Forwarded-For entries, left of the proxy's, are not believed
        let header = "1.1.1.1, 203.0.113.9, 10.0.0.7";
        assert_eq!(
            client_behind(peer, Some(header), &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(client_behind(peer, None, &trusted), peer);
        assert_eq!(client_behind(peer, Some("garbage"), &trusted), peer);
        // an untrusted peer is the client, whatever it claims
        assert_eq!(
            client_behind(ip("198.51.100.1"), Some("203.0.113.9"), &trusted),
            ip("198.51.100.1")
        );
        assert_eq!(
            client_behind(peer, Some("10.0.0.9"), &trusted),
            ip("10.0.0.9")
        );
    }

    #[test]
    fn several_header_lines_are_one_list() {
        let trusted = [Network::parse("10.0.0.0/8").unwrap()];
        let peer = ip("10.0.0.5");
        let mut headers = HeaderMap::new();
        assert_eq!(forwarded_for(&headers), None);
        // the client's own line first, the proxy's appended as a line of its own
        headers.append("x-forwarded-for", "1.1.1.1".parse().unwrap());
        headers.append("x-forwarded-for", "203.0.113.9, 10.0.0.7".parse().unwrap());
        let joined = forwarded_for(&headers).unwrap();
        assert_eq!(joined, "1.1.1.1,203.0.113.9, 10.0.0.7");
        assert_eq!(
            client_behind(peer, Some(&joined), &trusted),
            ip("203.0.113.9")
        );
        // a proxy's line holding only trusted hops: the client's entry is right of them
        let mut headers = HeaderMap::new();
        headers.append("x-forwarded-for", "1.1.1.1".parse().unwrap());
        headers.append("x-forwarded-for", "203.0.113.9".parse().unwrap());
        headers.append("x-forwarded-for", "10.0.0.7".parse().unwrap());
        let joined = forwarded_for(&headers).unwrap();
        assert_eq!(
            client_behind(peer, Some(&joined), &trusted),
            ip("203.0.113.9")
        );
        // a line that is not text: nothing left of it is believed
        let mut headers = HeaderMap::new();
        headers.append("x-forwarded-for", "1.1.1.1".parse().unwrap());
        headers.append(
            "x-forwarded-for",
            axum::http::HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        headers.append("x-forwarded-for", "10.0.0.7".parse().unwrap());
        let joined = forwarded_for(&headers).unwrap();
        assert_eq!(client_behind(peer, Some(&joined), &trusted), ip("10.0.0.7"));
    }
}
