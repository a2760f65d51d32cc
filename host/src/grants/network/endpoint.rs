//! One allowlist entry, `scheme://host:port`, and how entries match requests
//! and cover one another.
//!
//! The scheme is `http` or `https` (outgoing `wasi:http` requests) or `tcp` or
//! `udp` (`wasi:sockets`). The host is a name, an IP address, or `*` for any
//! host; a `*` label in a name matches exactly one label (`*.example.com`
//! matches `api.example.com`, not `example.com` nor `a.b.example.com`). The
//! port is a number or `*`; HTTP entries without one get the scheme's default
//! port, socket entries must name it.

use std::fmt;
use std::net::IpAddr;

use serde::Deserialize;

use super::address::is_public;

/// What an entry grants access to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
    Tcp,
    Udp,
}

impl Protocol {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "http" => Self::Http,
            "https" => Self::Https,
            "tcp" => Self::Tcp,
            "udp" => Self::Udp,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Self::Http => Some(80),
            Self::Https => Some(443),
            Self::Tcp | Self::Udp => None,
        }
    }

    pub fn is_http(self) -> bool {
        matches!(self, Self::Http | Self::Https)
    }
}

/// The host part of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// `*`: any host, at public addresses only.
    Any,
    /// An address; naming it explicitly allows it even when it is private.
    Ip(IpAddr),
    /// A DNS name in lowercase labels, some of which may be `*`.
    Name(Vec<String>),
}

/// One `scheme://host:port` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Endpoint {
    pub protocol: Protocol,
    pub host: Host,
    /// `None` is `*`: any port.
    pub port: Option<u16>,
}

impl TryFrom<String> for Endpoint {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let invalid = |why: &str| format!("network entry {text:?} {why}");
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| invalid("must look like scheme://host:port"))?;
        let protocol = Protocol::parse(scheme)
            .ok_or_else(|| invalid("has a scheme other than http, https, tcp or udp"))?;
        let (host, port) = split_port(rest).ok_or_else(|| invalid("has an invalid port"))?;
        let port = match port {
            Some("*") => None,
            Some(number) => Some(
                number
                    .parse::<u16>()
                    .ok()
                    .filter(|port| *port != 0)
                    .ok_or_else(|| invalid("has an invalid port"))?,
            ),
            None => Some(
                protocol
                    .default_port()
                    .ok_or_else(|| invalid("needs a port (a number or *)"))?,
            ),
        };
        let host = parse_host(host).ok_or_else(|| invalid("has an invalid host"))?;
        if let Host::Name(labels) = &host
            && !protocol.is_http()
            && labels.iter().any(|label| label == "*")
        {
            return Err(invalid(
                "uses a wildcard label, which a socket grant cannot check: sockets see addresses, not names",
            ));
        }
        Ok(Self {
            protocol,
            host,
            port,
        })
    }
}

/// Splits `host[:port]`, keeping the brackets' contents of an IPv6 host.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            port => Some((host, Some(port.strip_prefix(':')?))),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port))),
        None => Some((authority, None)),
    }
}

fn parse_host(host: &str) -> Option<Host> {
    if host == "*" {
        return Some(Host::Any);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(Host::Ip(ip.to_canonical()));
    }
    let labels = name_labels(host)?;
    labels
        .iter()
        .all(|label| label == "*" || is_dns_label(label))
        .then_some(Host::Name(labels))
}

/// Whether `label` is one label of a DNS host name: 1 to 63 letters, digits
/// and hyphens.
pub fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
}

/// The lowercase labels of a DNS name, without a trailing dot.
pub fn name_labels(name: &str) -> Option<Vec<String>> {
    let name = name.strip_suffix('.').unwrap_or(name);
    (!name.is_empty() && name.len() <= 253)
        .then(|| name.split('.').map(str::to_ascii_lowercase).collect())
}

impl Endpoint {
    /// Whether a request to `host` (a name or an address) and `port` over
    /// `protocol` is on this entry.
    pub fn matches(&self, protocol: Protocol, host: &str, port: u16) -> bool {
        if self.protocol != protocol || self.port.is_some_and(|own| own != port) {
            return false;
        }
        match (&self.host, host.parse::<IpAddr>()) {
            (Host::Any, _) => true,
            (Host::Ip(own), Ok(ip)) => *own == ip.to_canonical(),
            (Host::Name(own), Err(_)) => {
                name_labels(host).is_some_and(|labels| labels_match(own, &labels))
            }
            _ => false,
        }
    }

    /// Whether every request `other` allows is one this entry allows too: how
    /// an operator's ceiling bounds a manifest's grant. `*` covers a private
    /// address only if the ceiling names that address itself.
    pub fn covers(&self, other: &Endpoint) -> bool {
        if self.protocol != other.protocol || self.port.is_some_and(|own| Some(own) != other.port) {
            return false;
        }
        match (&self.host, &other.host) {
            (Host::Any, Host::Ip(theirs)) => is_public(*theirs),
            (Host::Any, _) => true,
            (Host::Ip(own), Host::Ip(theirs)) => own == theirs,
            (Host::Name(own), Host::Name(theirs)) => labels_match(own, theirs),
            _ => false,
        }
    }

    /// Whether this entry names `ip` itself, which lets a request reach it
    /// even when the address is private.
    pub fn names_address(&self, ip: IpAddr) -> bool {
        self.host == Host::Ip(ip.to_canonical())
    }
}

/// Label-wise match; a `*` pattern label matches any one label.
fn labels_match(pattern: &[String], labels: &[String]) -> bool {
    pattern.len() == labels.len()
        && pattern
            .iter()
            .zip(labels)
            .all(|(own, theirs)| own == "*" || own == theirs)
}

impl fmt::Display for Endpoint {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(out, "{}://", self.protocol.name())?;
        match &self.host {
            Host::Any => write!(out, "*")?,
            Host::Ip(IpAddr::V6(ip)) => write!(out, "[{ip}]")?,
            Host::Ip(ip) => write!(out, "{ip}")?,
            Host::Name(labels) => write!(out, "{}", labels.join("."))?,
        }
        match self.port {
            Some(port) => write!(out, ":{port}"),
            None => write!(out, ":*"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> Endpoint {
        Endpoint::try_from(text.to_owned()).unwrap()
    }

    #[test]
    fn parses_entries_with_default_and_wildcard_ports() {
        assert_eq!(
            entry("https://API.example.com").to_string(),
            "https://api.example.com:443"
        );
        assert_eq!(
            entry("http://127.0.0.1:*").to_string(),
            "http://127.0.0.1:*"
        );
        assert_eq!(entry("tcp://[::1]:5432").to_string(), "tcp://[::1]:5432");
        for bad in [
            "example.com",
            "ftp://example.com",
            "tcp://db.internal",
            "http://example.com:0",
            "http://example.com:http",
            "http://exa mple.com",
            "tcp://*.internal:5432",
            "http://:80",
        ] {
            assert!(Endpoint::try_from(bad.to_owned()).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcards_match_one_label_or_any_port() {
        let api = entry("https://*.example.com");
        assert!(api.matches(Protocol::Https, "api.example.com", 443));
        assert!(api.matches(Protocol::Https, "API.Example.com.", 443));
        assert!(!api.matches(Protocol::Https, "example.com", 443));
        assert!(!api.matches(Protocol::Https, "a.b.example.com", 443));
        assert!(!api.matches(Protocol::Https, "api.example.com", 8443));
        assert!(!api.matches(Protocol::Http, "api.example.com", 443));
        let local = entry("http://127.0.0.1:*");
        assert!(local.matches(Protocol::Http, "127.0.0.1", 8080));
        assert!(!local.matches(Protocol::Http, "localhost", 8080));
        assert!(entry("http://*:*").matches(Protocol::Http, "10.0.0.1", 1));
    }

    #[test]
    fn a_ceiling_covers_only_narrower_entries() {
        let ceiling = entry("https://*.example.com:*");
        assert!(ceiling.covers(&entry("https://api.example.com")));
        assert!(ceiling.covers(&entry("https://*.example.com:8443")));
        assert!(!ceiling.covers(&entry("https://example.com")));
        assert!(!ceiling.covers(&entry("http://api.example.com")));
        assert!(!entry("https://api.example.com").covers(&entry("https://*.example.com")));
        assert!(!entry("https://api.example.com").covers(&entry("https://api.example.com:*")));
        assert!(entry("tcp://*:5432").covers(&entry("tcp://93.184.215.14:5432")));
        assert!(!entry("tcp://*:5432").covers(&entry("tcp://10.0.0.5:5432")));
        assert!(!entry("http://*:*").covers(&entry("http://169.254.169.254")));
    }
}
