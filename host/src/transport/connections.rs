//! Who may hold a connection, decided on progress rather than arrival. At
//! most [`ConnectionLimits::total`] connections are open at once, at most
//! [`ConnectionLimits::per_source`] of them come from one source, and at
//! most [`ConnectionLimits::per_client`] of them carry one authenticated
//! client's requests.
//!
//! A connection *waits* from the moment it is accepted until its request's
//! headers and body have arrived, and waits again once its response has
//! been sent (an idle keep-alive connection); in between it is *active*
//! ([`super::pacing`] tells which). When a new connection would pass a
//! limit, the connection that has waited longest within that limit (the
//! source's, the client's, the listener's) is closed to make room (one
//! stalled partway through its headers before one that has sent nothing
//! since it came or was last answered, whose request may be on its way,
//! and that before one whose headers are in), and the
//! newcomer gets in: a client that stalls in its headers, trickles its body
//! or idles holds its places only until someone needs them, while a
//! connection that sends its request promptly gets in whatever the flood,
//! even one from its own address (behind a load balancer, every client's).
//! An active connection is never closed to make room: when every place of a
//! limit is held by active connections, the newcomer is turned away, save
//! that [`PROBE_RESERVE`] more are let in to answer the probes alone (past
//! the total, or past a source's share), so that `/healthz` and `/readyz`
//! answer under any flood, and to a load balancer whose every connection
//! is busy with a stream.
//!
//! A source is an IPv4 address, or an IPv6 /64 (what one host or one site
//! is given, so stepping through its addresses gains nothing); an
//! IPv4-mapped IPv6 address counts as its IPv4 address. A client is the
//! name [`crate::access::Client`] gives it; a connection counts as the
//! client of its latest request ([`Admitted::attribute`]). Connections
//! closed to make room and connections (or clients' requests) turned away
//! are logged at most once a second for each kind, for the listener and
//! for clients apart (with how many went unlogged), so a flood of them
//! cannot flood the log.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// The least share of one source or one client, whatever the total: a
/// client's POSTs, its GET stream and a couple of requests in parallel.
const MIN_SHARE: usize = 4;
/// One source (or one client) holds at most this fraction of the total
/// unless the operator says otherwise: at least eight sources are needed to
/// fill the cap, and of the default 512 one source may hold 64, a
/// connection for each of the 64 sessions one client may hold.
const SHARE_DIVISOR: usize = 8;
/// Connections let in past the total when every place is held by an active
/// connection, each to answer the probes alone.
pub const PROBE_RESERVE: usize = 4;
/// The least time between two log lines about connections closed to make
/// room, and likewise between two about connections turned away.
const LOG_INTERVAL: Duration = Duration::from_secs(1);
/// The bits of an IPv6 address that name its /64.
const PREFIX_64: u128 = u128::MAX << 64;

/// The stamps of connections that have sent nothing since they were let in
/// or last answered, above those stalled partway through their headers: a
/// client's request still on its way when a flood of newcomers arrives is
/// not closed for a connection that has stopped halfway.
const NOTHING_RECEIVED: u64 = 1 << 61;
/// The stamps of connections waiting for their request's body, above any
/// of those waiting for headers.
const HEADERS_ARRIVED: u64 = 1 << 62;

/// How many connections may be open at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// In all.
    pub total: usize,
    /// From one source.
    pub per_source: usize,
    /// Carrying one authenticated client's requests.
    pub per_client: usize,
}

impl ConnectionLimits {
    /// `total` connections, of which one source may hold `per_source` and
    /// one client `per_client`: by default an eighth of them (at least 4),
    /// never more than `total`.
    pub fn new(total: usize, per_source: Option<usize>, per_client: Option<usize>) -> Self {
        let share = |given: Option<usize>| {
            given
                .unwrap_or((total / SHARE_DIVISOR).max(MIN_SHARE))
                .min(total)
        };
        Self {
            total,
            per_source: share(per_source),
            per_client: share(per_client),
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
    /// The next connection's id, and the next waiting period's stamp: ids
    /// and stamps come from one counter, so both only grow.
    next: u64,
    entries: HashMap<u64, Entry>,
    /// The waiting connections by when they began to wait (a stamp),
    /// oldest first, and their ids.
    waiting: BTreeMap<u64, u64>,
    /// Connections counted against the total.
    regular: usize,
    /// Connections let in past the total to answer the probes alone.
    probes: usize,
    by_source: HashMap<Source, Share>,
    by_client: HashMap<Arc<str>, Share>,
    /// What was logged of connections let in, and of clients' requests.
    admissions: Logs,
    clients: Logs,
}

/// One open connection.
struct Entry {
    peer: SocketAddr,
    source: Source,
    /// The client of its latest request, once one was authenticated.
    client: Option<Arc<str>>,
    /// When it began to wait, while it waits.
    waiting: Option<u64>,
    probe_only: bool,
    /// Cancelled when the connection is closed to make room.
    evicted: CancellationToken,
}

/// What one source or one client holds.
#[derive(Default)]
struct Share {
    held: usize,
    /// The stamps of its waiting connections, oldest first.
    waiting: BTreeSet<u64>,
}

/// The log lines of connections closed to make room and of those turned
/// away, each at most one a [`LOG_INTERVAL`].
#[derive(Default)]
struct Logs {
    evictions: Throttle,
    refusals: Throttle,
}

/// Log lines of one kind, at most one a [`LOG_INTERVAL`].
#[derive(Default)]
struct Throttle {
    last_logged: Option<Instant>,
    unlogged: u64,
}

/// One connection let in, as its requests see it (each carries it among
/// its extensions, [`super::listener`]). A request may outlive its
/// connection: what it tells of a connection already closed changes
/// nothing, and its place is given back by the connection's [`Place`].
pub struct Admitted {
    connections: Arc<Connections>,
    id: u64,
    probe_only: bool,
    evicted: CancellationToken,
    /// Set while the connection waits with nothing received, so that only
    /// the first bytes of a request take the lock, not every read.
    nothing_received: AtomicBool,
}

/// The place a connection holds, given back when its task drops it (when
/// the connection ends, however it ends).
pub struct Place(Arc<Admitted>);

impl Connections {
    /// A listener's connections, none open yet, to be held within `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::default(),
        })
    }

    /// Lets in a connection from `peer`, waiting for its request. When its
    /// source holds its share, the source's connection that has waited
    /// longest (one counted against the total first) is closed to make
    /// room, or, none waiting but one let in for the probes, or none at
    /// all, the newcomer is let in to answer the probes alone; when the
    /// listener holds its most, the one of all that has waited longest, or
    /// the newcomer is let in to
    /// answer the probes alone. Of those there are at most
    /// [`PROBE_RESERVE`] at once, and again the one of them that has waited
    /// longest makes room; when none waits, the newcomer is turned away.
    /// Each is logged, at most once a second.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Place> {
        let source = Source::of(peer.ip());
        let mut open = self.open();
        let mut evicted = Vec::new();
        let held = open.by_source.get(&source).map_or(0, |share| share.held);
        // Set when the source holds its share, every connection of it busy.
        let mut source_busy = None;
        if held >= self.limits.per_source {
            let reason =
                format!("source {source} holds {held} connections, the most one source may hold");
            match open.first_waiting(open.by_source.get(&source)) {
                Some((id, probe_only)) => {
                    if let Some(gone) = open.evict(id) {
                        evicted.push((gone, reason.clone()));
                    }
                    // None of the source's other connections waits: the
                    // newcomer takes the probe's place it freed.
                    if probe_only {
                        source_busy = Some(reason);
                    }
                }
                None => source_busy = Some(reason),
            }
        }
        // A connection closed above for the source was either counted
        // against the total, which has room now, or a probe's, whose
        // reserve has room now: nobody is closed for a newcomer then
        // turned away.
        let probe_only = match source_busy {
            // A source whose connections are all busy (a load balancer's,
            // every one of them streaming) still gets its probes answered.
            Some(reason) => {
                if !open.probe_room(&mut evicted, &reason) {
                    return refuse(open, peer, &reason);
                }
                true
            }
            None if open.regular < self.limits.total => false,
            None => {
                let reason = format!(
                    "{} connections are open, the most allowed",
                    self.limits.total
                );
                if let Some(gone) = open.oldest_waiting(false).and_then(|id| open.evict(id)) {
                    evicted.push((gone, reason));
                    false
                } else if open.probe_room(&mut evicted, &reason) {
                    true
                } else {
                    return refuse(open, peer, &reason);
                }
            }
        };
        let (id, token) = open.insert(peer, source, probe_only);
        let now = Instant::now();
        let to_log: Vec<(SocketAddr, String, u64)> = evicted
            .into_iter()
            .filter_map(|(gone, reason)| {
                Some((gone, reason, open.admissions.evictions.take_turn(now)?))
            })
            .collect();
        drop(open);
        for (gone, reason, unlogged) in to_log {
            log_eviction(gone, &reason, unlogged);
        }
        Some(Place(Arc::new(Admitted {
            connections: self.clone(),
            id,
            probe_only,
            evicted: token,
            nothing_received: AtomicBool::new(true),
        })))
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Turns away a connection from `peer`: none of those it would take the
/// place of waits.
fn refuse(mut open: MutexGuard<'_, Open>, peer: SocketAddr, reason: &str) -> Option<Place> {
    let unlogged = open.admissions.refusals.take_turn(Instant::now());
    drop(open);
    match unlogged {
        Some(0) => tracing::warn!(
            %peer,
            "closed a new connection: {reason}, and none of them waits for its request"
        ),
        Some(unlogged) => tracing::warn!(
            %peer,
            "closed a new connection: {reason}, and none of them waits for its request ({unlogged} more turned away since the last such line)"
        ),
        None => {}
    }
    None
}

fn log_eviction(peer: SocketAddr, reason: &str, unlogged: u64) {
    if unlogged == 0 {
        tracing::warn!(
            %peer,
            "closed the connection that had waited longest without finishing a request, to make room: {reason}"
        );
    } else {
        tracing::warn!(
            %peer,
            "closed the connection that had waited longest without finishing a request, to make room: {reason} ({unlogged} more closed so since the last such line)"
        );
    }
}

impl Admitted {
    /// Whether the connection was let in past the total, to answer the
    /// probes alone.
    pub fn probe_only(&self) -> bool {
        self.probe_only
    }

    /// Cancelled when the connection is closed to make room: its task then
    /// drops it.
    pub fn eviction(&self) -> CancellationToken {
        self.evicted.clone()
    }

    /// Bytes have arrived on the connection: if they are the first since
    /// it was let in or last answered, it waits on among those stalled in
    /// their headers, from when it began to wait.
    pub fn bytes_arrived(&self) {
        if self.nothing_received.swap(false, Ordering::Relaxed) {
            self.connections.open().bytes_arrived(self.id);
        }
    }

    /// The request's headers have arrived: the connection waits on for its
    /// body, behind every connection still waiting for headers.
    pub fn headers_arrived(&self) {
        self.connections.open().headers_arrived(self.id);
    }

    /// The request's headers and body have arrived, or its response is
    /// ready: the connection is active, and is not closed to make room
    /// before it waits again.
    pub fn progressed(&self) {
        self.connections.open().stop_waiting(self.id);
    }

    /// The response is sent (or dropped): the connection waits for its next
    /// request, from now.
    pub fn idle(&self) {
        self.connections.open().start_waiting(self.id);
        self.nothing_received.store(true, Ordering::Relaxed);
    }

    /// Counts the connection as `client`'s (and no longer as the client's
    /// of an earlier request on it). When `client` holds its share, its
    /// connection that has waited longest (never this one) is closed to
    /// make room; when none of them waits, the request is to be refused:
    /// `Err` with the share.
    pub fn attribute(&self, client: &str) -> Result<(), usize> {
        let limit = self.connections.limits.per_client;
        let mut open = self.connections.open();
        let Some(entry) = open.entries.get(&self.id) else {
            // Closed already: nothing to count.
            return Ok(());
        };
        if entry.client.as_deref() == Some(client) {
            return Ok(());
        }
        // This connection is not yet counted as `client`'s: the waiting
        // connections of its share are others.
        let held = open.by_client.get(client).map_or(0, |share| share.held);
        let mut evicted = None;
        if held >= limit {
            let reason =
                format!("client {client} holds {held} connections, the most one client may hold");
            match open
                .first_waiting(open.by_client.get(client))
                .and_then(|(id, _)| open.evict(id))
            {
                Some(gone) => evicted = Some((gone, reason)),
                None => {
                    let unlogged = open.clients.refusals.take_turn(Instant::now());
                    drop(open);
                    match unlogged {
                        Some(0) => tracing::warn!(
                            "refused a request: {reason}, and none of them waits for its request"
                        ),
                        Some(unlogged) => tracing::warn!(
                            "refused a request: {reason}, and none of them waits for its request ({unlogged} more turned away since the last such line)"
                        ),
                        None => {}
                    }
                    return Err(held);
                }
            }
        }
        open.attribute(self.id, client);
        let to_log = evicted.and_then(|(gone, reason)| {
            Some((
                gone,
                reason,
                open.clients.evictions.take_turn(Instant::now())?,
            ))
        });
        drop(open);
        if let Some((gone, reason, unlogged)) = to_log {
            log_eviction(gone, &reason, unlogged);
        }
        Ok(())
    }
}

impl Place {
    /// The connection, as its requests are to see it.
    pub fn admitted(&self) -> &Arc<Admitted> {
        &self.0
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.connections.open().remove(self.0.id);
    }
}

impl Open {
    /// Whether a place kept for the probes is free, or is freed by closing
    /// the one of them that has waited longest (added to `evicted`, with
    /// `reason`).
    fn probe_room(&mut self, evicted: &mut Vec<(SocketAddr, String)>, reason: &str) -> bool {
        if self.probes < PROBE_RESERVE {
            return true;
        }
        let Some(gone) = self.oldest_waiting(true).and_then(|id| self.evict(id)) else {
            return false;
        };
        evicted.push((
            gone,
            format!("{reason}, and the {PROBE_RESERVE} kept for probes are taken"),
        ));
        true
    }

    /// Lets in a connection, waiting from now and counted everywhere: its
    /// id, and what tells its task that it was closed to make room.
    fn insert(
        &mut self,
        peer: SocketAddr,
        source: Source,
        probe_only: bool,
    ) -> (u64, CancellationToken) {
        let id = self.next;
        self.next += 1;
        let evicted = CancellationToken::new();
        self.entries.insert(
            id,
            Entry {
                peer,
                source,
                client: None,
                waiting: None,
                probe_only,
                evicted: evicted.clone(),
            },
        );
        if probe_only {
            self.probes += 1;
        } else {
            self.regular += 1;
        }
        self.by_source.entry(source).or_default().held += 1;
        self.start_waiting(id);
        (id, evicted)
    }

    /// The connection `id` waits, from now (unless it already waits), for
    /// its request, of which nothing has arrived.
    fn start_waiting(&mut self, id: u64) {
        self.wait_from(id, NOTHING_RECEIVED);
    }

    /// The connection `id`, waiting, has its request's headers: it waits
    /// on for its body, after every connection still waiting for headers,
    /// which go first when room is made (a request sent promptly whose
    /// body is on its way is never closed for a stalled one).
    fn headers_arrived(&mut self, id: u64) {
        if self
            .entries
            .get(&id)
            .is_some_and(|entry| entry.waiting.is_some())
        {
            self.stop_waiting(id);
            self.wait_from(id, HEADERS_ARRIVED);
        }
    }

    /// Bytes have arrived on the connection `id`: if it waited with
    /// nothing received, it waits on with the connections stalled in their
    /// headers, its place among them kept from when it began to wait.
    fn bytes_arrived(&mut self, id: u64) {
        let Some(stamp) = self.entries.get(&id).and_then(|entry| entry.waiting) else {
            return;
        };
        if (NOTHING_RECEIVED..HEADERS_ARRIVED).contains(&stamp) {
            self.stop_waiting(id);
            self.wait_with(id, stamp - NOTHING_RECEIVED);
        }
    }

    /// The connection `id` waits from now, its stamp in `band`.
    fn wait_from(&mut self, id: u64, band: u64) {
        let stamp = band + self.next;
        if self.wait_with(id, stamp) {
            self.next += 1;
        }
    }

    /// The connection `id` waits with `stamp`, unless it already waits:
    /// whether it did not.
    fn wait_with(&mut self, id: u64, stamp: u64) -> bool {
        let Some(entry) = self.entries.get_mut(&id) else {
            return false;
        };
        if entry.waiting.is_some() {
            return false;
        }
        entry.waiting = Some(stamp);
        self.waiting.insert(stamp, id);
        if let Some(share) = self.by_source.get_mut(&entry.source) {
            share.waiting.insert(stamp);
        }
        if let Some(client) = &entry.client
            && let Some(share) = self.by_client.get_mut(client)
        {
            share.waiting.insert(stamp);
        }
        true
    }

    /// The connection `id` is active.
    fn stop_waiting(&mut self, id: u64) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        let Some(stamp) = entry.waiting.take() else {
            return;
        };
        self.waiting.remove(&stamp);
        if let Some(share) = self.by_source.get_mut(&entry.source) {
            share.waiting.remove(&stamp);
        }
        if let Some(client) = &entry.client
            && let Some(share) = self.by_client.get_mut(client)
        {
            share.waiting.remove(&stamp);
        }
    }

    /// Counts the connection `id` as `client`'s, and no longer as another
    /// client's.
    fn attribute(&mut self, id: u64, client: &str) {
        let name = match self.by_client.get_key_value(client) {
            Some((name, _)) => name.clone(),
            None => Arc::from(client),
        };
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        if let Some(previous) = entry.client.take() {
            if let (Some(stamp), Some(share)) = (entry.waiting, self.by_client.get_mut(&previous)) {
                share.waiting.remove(&stamp);
            }
            release(&mut self.by_client, &previous);
        }
        let share = self.by_client.entry(name.clone()).or_default();
        share.held += 1;
        if let Some(stamp) = entry.waiting {
            share.waiting.insert(stamp);
        }
        entry.client = Some(name);
    }

    /// The connection `id` is gone: its entry, if it was still open, and
    /// its place given back.
    fn remove(&mut self, id: u64) -> Option<Entry> {
        self.stop_waiting(id);
        let entry = self.entries.remove(&id)?;
        if entry.probe_only {
            self.probes -= 1;
        } else {
            self.regular -= 1;
        }
        release(&mut self.by_source, &entry.source);
        if let Some(client) = &entry.client {
            release(&mut self.by_client, client);
        }
        Some(entry)
    }

    /// Closes the connection `id` to make room: its place is given back
    /// now, and its task, told, drops it. The address it came from.
    fn evict(&mut self, id: u64) -> Option<SocketAddr> {
        let entry = self.remove(id)?;
        entry.evicted.cancel();
        Some(entry.peer)
    }

    /// The connection of `share` (a source's, a client's) that has waited
    /// longest, of those counted against the total if one of them waits,
    /// else of those let in for the probes; and whether it was let in for
    /// the probes. (A client's are never the probes': those answer no
    /// request a client is known by.)
    fn first_waiting(&self, share: Option<&Share>) -> Option<(u64, bool)> {
        let waiting = share?.waiting.iter().filter_map(|stamp| {
            let id = *self.waiting.get(stamp)?;
            Some((id, self.entries.get(&id)?.probe_only))
        });
        let mut first_probe = None;
        for (id, probe_only) in waiting {
            if !probe_only {
                return Some((id, false));
            }
            first_probe.get_or_insert((id, true));
        }
        first_probe
    }

    /// The connection that has waited longest of those counted against the
    /// total (or, with `probe_only`, of those let in for the probes). The
    /// probes' are at most [`PROBE_RESERVE`], and they are looked for only
    /// when no other waits, so either search passes over a handful at most.
    fn oldest_waiting(&self, probe_only: bool) -> Option<u64> {
        self.waiting.values().copied().find(|id| {
            self.entries
                .get(id)
                .is_some_and(|entry| entry.probe_only == probe_only)
        })
    }
}

/// One connection fewer in `shares[key]`, and no entry once it holds none.
fn release<K, Q>(shares: &mut HashMap<K, Share>, key: &Q)
where
    K: Eq + Hash + Borrow<Q>,
    Q: Eq + Hash + ?Sized,
{
    if let Some(share) = shares.get_mut(key) {
        share.held -= 1;
        if share.held == 0 {
            shares.remove(key);
        }
    }
}

impl Throttle {
    /// Whether a line `now` is logged (at most one a [`LOG_INTERVAL`]): if
    /// so, how many went unlogged before it.
    fn take_turn(&mut self, now: Instant) -> Option<u64> {
        if self
            .last_logged
            .is_some_and(|logged| now.duration_since(logged) < LOG_INTERVAL)
        {
            self.unlogged += 1;
            return None;
        }
        self.last_logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(address: &str) -> SocketAddr {
        SocketAddr::new(address.parse().unwrap(), 40000)
    }

    fn admit(connections: &Arc<Connections>, address: &str) -> Place {
        connections
            .admit(peer(address))
            .unwrap_or_else(|| panic!("a connection from {address} was turned away"))
    }

    fn active(connections: &Arc<Connections>, address: &str) -> Place {
        let place = admit(connections, address);
        place.admitted().progressed();
        place
    }

    fn evicted(place: &Place) -> bool {
        place.admitted().eviction().is_cancelled()
    }

    /// Every count is back to nothing.
    fn assert_empty(connections: &Connections) {
        let open = connections.open();
        assert_eq!((open.regular, open.probes), (0, 0));
        assert!(open.entries.is_empty());
        assert!(open.waiting.is_empty());
        assert!(open.by_source.is_empty());
        assert!(open.by_client.is_empty());
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
        let connections = Connections::new(ConnectionLimits::new(8, Some(3), None));
        let flood: Vec<Place> = (0..3)
            .map(|_| active(&connections, "2001:db8::1"))
            .collect();
        // The /64 holds its share, all of it active: one more of it
        // answers the probes alone.
        let probe_of_the_flood = admit(&connections, "2001:db8::2");
        assert!(probe_of_the_flood.admitted().probe_only());
        let others: Vec<Place> = (1..=5)
            .map(|last| active(&connections, &format!("192.0.2.{last}")))
            .collect();
        assert!(flood.iter().chain(&others).all(|place| !evicted(place)));
        // All 8 are open and active: one more answers the probes alone.
        let probe = admit(&connections, "192.0.2.9");
        assert!(probe.admitted().probe_only());
        drop(flood);
        drop(admit(&connections, "2001:db8::3"));
        drop((others, probe, probe_of_the_flood));
        assert_empty(&connections);
    }

    #[test]
    fn a_probe_s_place_freed_for_a_busy_source_takes_its_newcomer_in_for_the_probes_alone() {
        let connections = Connections::new(ConnectionLimits::new(64, Some(2), None));
        let busy: Vec<Place> = (0..2).map(|_| active(&connections, "192.0.2.1")).collect();
        let probe = admit(&connections, "192.0.2.1");
        assert!(probe.admitted().probe_only());
        // The probe, answered, waits; the source's other two are busy: the
        // newcomer takes the probe's place, not a third regular one.
        let newcomer = admit(&connections, "192.0.2.1");
        assert!(evicted(&probe) && newcomer.admitted().probe_only());
        assert!(busy.iter().all(|place| !evicted(place)));
        // Once one of the busy two waits, it makes room, and the next
        // newcomer gets a regular place.
        busy[0].admitted().idle();
        let regular = admit(&connections, "192.0.2.1");
        assert!(evicted(&busy[0]) && !regular.admitted().probe_only());
        assert!(!evicted(&newcomer));
        assert_eq!(connections.open().regular, 2);
        drop((busy, probe, newcomer, regular));
        assert_empty(&connections);
    }

    #[test]
    fn over_the_share_the_source_s_oldest_waiting_connection_makes_room() {
        let connections = Connections::new(ConnectionLimits::new(16, Some(3), None));
        let elsewhere = admit(&connections, "192.0.2.9");
        let first = admit(&connections, "192.0.2.1");
        let busy = active(&connections, "192.0.2.1");
        let second = admit(&connections, "192.0.2.1");
        // The source holds 3: the newcomer takes the place of the one that
        // has waited longest, never the active one nor another source's,
        // though that one waited longer still.
        let third = admit(&connections, "192.0.2.1");
        assert!(evicted(&first));
        assert!(!evicted(&busy) && !evicted(&second) && !evicted(&third));
        assert!(!evicted(&elsewhere));
        let fourth = admit(&connections, "192.0.2.1");
        assert!(evicted(&second) && !evicted(&third) && !evicted(&fourth));
        assert_eq!(
            connections.open().by_source[&Source::of("192.0.2.1".parse().unwrap())].held,
            3
        );
        // Active, it stays; once answered it waits again, from now.
        busy.admitted().idle();
        let fifth = admit(&connections, "192.0.2.1");
        assert!(evicted(&third) && !evicted(&busy));
        let sixth = admit(&connections, "192.0.2.1");
        assert!(evicted(&fourth) && !evicted(&busy) && !evicted(&fifth));
        drop((elsewhere, first, busy, second, third, fourth, fifth, sixth));
        assert_empty(&connections);
    }

    #[test]
    fn a_request_whose_headers_arrived_outlasts_every_connection_stalled_in_its_headers() {
        let connections = Connections::new(ConnectionLimits::new(16, Some(3), None));
        let prompt = admit(&connections, "192.0.2.1");
        let stalled = admit(&connections, "192.0.2.1");
        let later = admit(&connections, "192.0.2.1");
        // The oldest, but its headers are in: its body is on its way.
        prompt.admitted().headers_arrived();
        let newcomer = admit(&connections, "192.0.2.1");
        assert!(evicted(&stalled) && !evicted(&prompt));
        let another = admit(&connections, "192.0.2.1");
        assert!(evicted(&later) && !evicted(&prompt));
        // Only it is left waiting for a body: it goes last, but it goes.
        drop((newcomer, another));
        drop((stalled, later));
        assert!(!evicted(&prompt));
        drop(prompt);
        assert_empty(&connections);
    }

    #[test]
    fn a_connection_that_has_sent_nothing_yet_outlasts_every_one_stalled_in_its_headers() {
        let connections = Connections::new(ConnectionLimits::new(16, Some(3), None));
        let stalled = admit(&connections, "192.0.2.1");
        let prompt = admit(&connections, "192.0.2.1");
        let later = admit(&connections, "192.0.2.1");
        stalled.admitted().bytes_arrived();
        later.admitted().bytes_arrived();
        // The flood's newcomers: `prompt`'s request is still on its way.
        let newcomer = admit(&connections, "192.0.2.1");
        assert!(evicted(&stalled) && !evicted(&prompt) && !evicted(&later));
        let another = admit(&connections, "192.0.2.1");
        assert!(evicted(&later) && !evicted(&prompt));
        // With no connection stalled in its headers left, the one that has
        // waited longest goes, whatever it sent.
        let third = admit(&connections, "192.0.2.1");
        assert!(evicted(&prompt) && !evicted(&newcomer) && !evicted(&another));
        drop((stalled, prompt, later, newcomer, another, third));
        assert_empty(&connections);
    }

    #[test]
    fn at_the_total_the_oldest_waiting_connection_of_all_makes_room() {
        let connections = Connections::new(ConnectionLimits::new(4, Some(4), None));
        let busy = active(&connections, "192.0.2.1");
        let oldest = admit(&connections, "192.0.2.2");
        let younger = admit(&connections, "192.0.2.3");
        let answered = active(&connections, "192.0.2.4");
        let newcomer = admit(&connections, "192.0.2.5");
        assert!(evicted(&oldest));
        assert!(!evicted(&busy) && !evicted(&younger) && !evicted(&answered));
        // An answered connection waits again, from now: younger than the
        // newcomer.
        answered.admitted().idle();
        let next = admit(&connections, "192.0.2.6");
        assert!(evicted(&younger) && !evicted(&answered) && !evicted(&newcomer));
        let last = admit(&connections, "192.0.2.7");
        assert!(evicted(&newcomer) && !evicted(&answered) && !evicted(&next));
        assert_eq!(connections.open().regular, 4);
        drop((busy, oldest, younger, answered, newcomer, next, last));
        assert_empty(&connections);
    }

    #[test]
    fn when_every_place_is_active_a_few_more_answer_only_probes() {
        let connections = Connections::new(ConnectionLimits::new(2, Some(2), None));
        let busy: Vec<Place> = (1..=2)
            .map(|last| active(&connections, &format!("192.0.2.{last}")))
            .collect();
        let probes: Vec<Place> = (1..=PROBE_RESERVE)
            .map(|last| admit(&connections, &format!("198.51.100.{last}")))
            .collect();
        assert!(probes.iter().all(|place| place.admitted().probe_only()));
        assert!(!busy[0].admitted().probe_only());
        // The reserve is full: its oldest waiting connection makes room.
        let newest = admit(&connections, "198.51.100.99");
        assert!(newest.admitted().probe_only());
        assert!(evicted(&probes[0]) && probes[1..].iter().all(|place| !evicted(place)));
        // With the reserve active too, a newcomer is turned away.
        for place in probes[1..].iter().chain([&newest]) {
            place.admitted().progressed();
        }
        assert!(connections.admit(peer("198.51.100.100")).is_none());
        assert!(busy.iter().all(|place| !evicted(place)));
        drop((busy, probes, newest));
        assert_empty(&connections);
    }

    #[test]
    fn a_client_holds_its_share_and_its_oldest_waiting_connection_makes_room() {
        let connections = Connections::new(ConnectionLimits::new(16, Some(16), Some(2)));
        let first = admit(&connections, "127.0.0.1");
        first.admitted().attribute("alice").unwrap();
        let second = admit(&connections, "127.0.0.1");
        second.admitted().attribute("alice").unwrap();
        let bob = admit(&connections, "127.0.0.1");
        bob.admitted().attribute("bob").unwrap();
        // A later request on the same connection, by the same client, is
        // not counted twice.
        second.admitted().attribute("alice").unwrap();
        let third = admit(&connections, "127.0.0.1");
        third.admitted().attribute("alice").unwrap();
        assert!(evicted(&first));
        assert!(!evicted(&second) && !evicted(&third) && !evicted(&bob));
        // With both of alice's active, a third request of hers is refused.
        second.admitted().progressed();
        third.admitted().progressed();
        let fourth = admit(&connections, "127.0.0.1");
        assert_eq!(fourth.admitted().attribute("alice"), Err(2));
        assert!(!evicted(&second) && !evicted(&third) && !evicted(&fourth));
        // The connection turned to bob's counts as his, no longer as hers.
        third.admitted().idle();
        third.admitted().attribute("bob").unwrap();
        fourth.admitted().attribute("alice").unwrap();
        assert_eq!(connections.open().by_client["alice"].held, 2);
        assert_eq!(connections.open().by_client["bob"].held, 2);
        drop((first, second, third, fourth, bob));
        assert_empty(&connections);
    }

    #[test]
    fn what_a_request_tells_of_a_closed_connection_changes_nothing() {
        let connections = Connections::new(ConnectionLimits::new(4, Some(4), Some(4)));
        let place = admit(&connections, "192.0.2.1");
        let admitted = place.admitted().clone();
        drop(place);
        admitted.progressed();
        admitted.idle();
        assert_eq!(admitted.attribute("alice"), Ok(()));
        assert_empty(&connections);
    }

    #[test]
    fn the_default_share_is_an_eighth_of_the_total_and_at_least_4() {
        assert_eq!(ConnectionLimits::new(512, None, None).per_source, 64);
        assert_eq!(ConnectionLimits::new(512, None, None).per_client, 64);
        assert_eq!(ConnectionLimits::new(16, None, None).per_source, 4);
        assert_eq!(ConnectionLimits::new(2, None, None).per_client, 2);
        assert_eq!(ConnectionLimits::new(8, Some(100), Some(100)).per_source, 8);
        assert_eq!(ConnectionLimits::new(8, None, Some(100)).per_client, 8);
    }
}
