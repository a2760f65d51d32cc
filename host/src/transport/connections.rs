//! Who may hold a connection: at most [`ConnectionLimits::total`] are open
//! at once, and at most [`ConnectionLimits::per_source`] of them come from
//! one source, so a client that opens connections as fast as they are
//! closed holds its share and no more, and every other source still gets in.
//! A source is an IPv4 address, or an IPv6 /64 (what one host or one site is
//! given, so stepping through its addresses gains nothing); an IPv4-mapped
//! IPv6 address counts as its IPv4 address. A connection turned away is
//! closed at once, and logged at most once a second (with how many went
//! unlogged), so a flood of them cannot flood the log.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The least share of one source, whatever the total: a client's POSTs, its
/// GET stream and a couple of requests in parallel.
const MIN_SHARE: usize = 4;
/// One source holds at most this fraction of the total unless the operator
/// says otherwise: at least eight sources are needed to fill the cap, and of
/// the default 512 one source may hold 64, a connection for each of the 64
/// sessions one client may hold.
const SHARE_DIVISOR: usize = 8;
/// The least time between two log lines about connections turned away.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);
/// The bits of an IPv6 address that name its /64.
const PREFIX_64: u128 = u128::MAX << 64;

/// How many connections may be open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// In all.
    pub total: usize,
    /// From one source.
    pub per_source: usize,
}

impl ConnectionLimits {
    /// `total` connections, of which one source may hold `per_source`: by
    /// default an eighth of them (at least 4), never more than `total`.
    pub fn new(total: usize, per_source: Option<usize>) -> Self {
        let share = per_source.unwrap_or((total / SHARE_DIVISOR).max(MIN_SHARE));
        Self {
            total,
            per_source: share.min(total),
        }
    }
}

/// Where a connection comes from, as shares count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(Ipv4Addr),
    /// The /64 the address lies in.
    V6(Ipv6Addr),
}

impl Source {
    fn of(address: IpAddr) -> Self {
        match address.to_canonical() {
            IpAddr::V4(address) => Self::V4(address),
            IpAddr::V6(address) => Self::V6(Ipv6Addr::from_bits(address.to_bits() & PREFIX_64)),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(address) => write!(out, "{address}"),
            Self::V6(prefix) => write!(out, "{prefix}/64"),
        }
    }
}

/// The connections of one listener open now.
pub struct Connections {
    limits: ConnectionLimits,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_source: HashMap<Source, usize>,
    last_logged: Option<Instant>,
    unlogged: u64,
}

/// One connection let in; its place is given back when it is dropped.
pub struct Admitted {
    connections: Arc<Connections>,
    source: Source,
}

impl Connections {
    /// A listener's connections, none open yet, to be held within `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::default(),
        })
    }

    /// Lets in a connection from `peer`, or turns it away (and logs why,
    /// at most once a second): the listener holds its most, or the source
    /// holds its share.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Admitted> {
        let source = Source::of(peer.ip());
        let mut open = self.open();
        let held = open.by_source.get(&source).copied().unwrap_or(0);
        let refusal = if open.total >= self.limits.total {
            format!(
                "{} connections are open, the most allowed",
                self.limits.total
            )
        } else if held >= self.limits.per_source {
            format!("source {source} holds {held} connections, the most one source may hold")
        } else {
            open.total += 1;
            *open.by_source.entry(source).or_default() += 1;
            return Some(Admitted {
                connections: self.clone(),
                source,
            });
        };
        let unlogged = open.refusal_to_log(Instant::now());
        drop(open);
        match unlogged {
            Some(0) => tracing::warn!(%peer, "closed a connection: {refusal}"),
            Some(unlogged) => tracing::warn!(
                %peer,
                "closed a connection: {refusal} ({unlogged} more closed since the last such line)"
            ),
            None => {}
        }
        None
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Open {
    /// Whether a connection turned away `now` is logged (at most one a
    /// [`REFUSAL_LOG_INTERVAL`]): if so, how many went unlogged before it.
    fn refusal_to_log(&mut self, now: Instant) -> Option<u64> {
        if self
            .last_logged
            .is_some_and(|logged| now.duration_since(logged) < REFUSAL_LOG_INTERVAL)
        {
            self.unlogged += 1;
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.connections.open();
        open.total -= 1;
        if let Some(held) = open.by_source.get_mut(&self.source) {
            *held -= 1;
            if *held == 0 {
                open.by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(address: &str) -> SocketAddr {
        SocketAddr::new(address.parse().unwrap(), 40000)
    }

    #[test]
    fn an_ipv6_source_is_its_64_and_a_mapped_ipv4_address_is_itself() {
        assert_eq!(
            Source::of("2001:db8:1:2:aaaa::1".parse().unwrap()),
            Source::of("2001:db8:1:2:ffff:1:2:3".parse().unwrap())
        );
        assert_ne!(
            Source::of("2001:db8:1:2::1".parse().unwrap()),
            Source::of("2001:db8:1:3::1".parse().unwrap())
        );
        assert_eq!(
            Source::of("::ffff:192.0.2.7".parse().unwrap()),
            Source::of("192.0.2.7".parse().unwrap())
        );
        assert_eq!(
            Source::of("2001:db8:1:2::1".parse().unwrap()).to_string(),
            "2001:db8:1:2::/64"
        );
    }

    #[test]
    fn one_source_holds_its_share_and_others_still_get_in() {
        let connections = Connections::new(ConnectionLimits::new(8, Some(3)));
        let flood: Vec<Admitted> = (0..3)
            .map(|_| connections.admit(peer("2001:db8::1")).unwrap())
            .collect();
        assert!(connections.admit(peer("2001:db8::2")).is_none());
        let others: Vec<Admitted> = (1..=5)
            .map(|last| connections.admit(peer(&format!("192.0.2.{last}"))).unwrap())
            .collect();
        assert!(
            connections.admit(peer("192.0.2.9")).is_none(),
            "all 8 are open"
        );
        drop(flood);
        assert!(connections.admit(peer("2001:db8::3")).is_some());
        drop(others);
        assert_eq!(connections.open().total, 0);
        assert!(connections.open().by_source.is_empty());
    }

    #[test]
    fn the_default_share_is_an_eighth_of_the_total_and_at_least_4() {
        assert_eq!(ConnectionLimits::new(512, None).per_source, 64);
        assert_eq!(ConnectionLimits::new(16, None).per_source, 4);
        assert_eq!(ConnectionLimits::new(2, None).per_source, 2);
        assert_eq!(ConnectionLimits::new(8, Some(100)).per_source, 8);
    }
}
