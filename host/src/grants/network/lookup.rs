//! Name lookup (`wasi:sockets/ip-name-lookup`) for granted names only.
//!
//! resmux provides the lookup interface itself, in place of WASI's own,
//! which would resolve any name and so give a plugin with a socket grant a
//! DNS side channel. Only a host name that a `tcp://` or `udp://` entry of
//! the plugin's grant names is resolved; every other name answers
//! `name-unresolvable`, exactly as a name that does not exist, and no query
//! leaves the machine for it. An IP literal is answered with itself, without
//! a query. A `*` host grants no name lookup.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use tokio::task::JoinError;

use wasmtime::component::{Linker, Resource, ResourceTable, ResourceType};
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, IpAddress};
use wasmtime_wasi::p2::{DynPollable, Network, Pollable, subscribe};

use super::endpoint::{is_dns_label, name_labels};
use super::resolver::Resolver;
use super::{Host, NetworkGrant, Protocol};

/// The interface resmux provides in place of WASI's.
const INTERFACE: &str = "wasi:sockets/ip-name-lookup@0.2.12";

/// The names one plugin may look up.
#[derive(Debug, Clone, Default)]
pub struct GrantedNames {
    /// Each name as its lowercase labels.
    names: Arc<[Vec<String>]>,
    resolver: Resolver,
}

impl GrantedNames {
    /// The names the socket entries of `grant` name.
    pub fn of(grant: &NetworkGrant) -> Self {
        let names = grant
            .entries()
            .iter()
            .filter(|entry| matches!(entry.protocol, Protocol::Tcp | Protocol::Udp))
            .filter_map(|entry| match &entry.host {
                Host::Name(labels) => Some(labels.clone()),
                Host::Any | Host::Ip(_) => None,
            })
            .collect();
        Self {
            names,
            resolver: grant.resolver().clone(),
        }
    }

    /// The names, as `inspect` shows them.
    pub fn describe(&self) -> Vec<String> {
        self.names.iter().map(|labels| labels.join(".")).collect()
    }

    fn allows(&self, labels: &[String]) -> bool {
        self.names.iter().any(|name| name.as_slice() == labels)
    }
}

/// What the lookup needs of an instance's host state.
pub trait LookupView: Send + 'static {
    fn lookup_parts(&mut self) -> (&mut ResourceTable, &GrantedNames);
}

/// Replaces WASI's name lookup in `linker` with resmux's.
pub fn link<T: LookupView>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut lookup = linker.instance(INTERFACE)?;
    lookup.resource(
        "resolve-address-stream",
        ResourceType::host::<AddressStream>(),
        |mut store, handle| {
            let (table, _) = store.data_mut().lookup_parts();
            table.delete(Resource::<AddressStream>::new_own(handle))?;
            Ok(())
        },
    )?;
    lookup.func_wrap(
        "resolve-addresses",
        |mut store, (network, name): (Resource<Network>, String)| {
            let (table, names) = store.data_mut().lookup_parts();
            table.get(&network)?;
            let stream = match resolve(names, &name) {
                Ok(stream) => stream,
                Err(code) => return Ok((Err(code),)),
            };
            Ok((Ok(table.push(stream)?),))
        },
    )?;
    lookup.func_wrap(
        "[method]resolve-address-stream.resolve-next-address",
        |mut store, (stream,): (Resource<AddressStream>,)| {
            let (table, _) = store.data_mut().lookup_parts();
            Ok((table.get_mut(&stream)?.next(),))
        },
    )?;
    lookup.func_wrap(
        "[method]resolve-address-stream.subscribe",
        |mut store, (stream,): (Resource<AddressStream>,)| {
            let (table, _) = store.data_mut().lookup_parts();
            let pollable: Resource<DynPollable> = subscribe(table, stream)?;
            Ok((pollable,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Starts resolving `name`, if it may be resolved at all.
fn resolve(names: &GrantedNames, name: &str) -> Result<AddressStream, ErrorCode> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(AddressStream::done(vec![ip]));
    }
    if let Some(ip) = name
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|inner| inner.parse::<Ipv6Addr>().ok())
    {
        return Ok(AddressStream::done(vec![IpAddr::V6(ip)]));
    }
    let labels = name_labels(name)
        .filter(|labels| labels.iter().all(|label| is_dns_label(label)))
        .ok_or(ErrorCode::InvalidArgument)?;
    if !names.allows(&labels) {
        tracing::warn!(name, "refused a name lookup: no socket grant names it");
        return Err(ErrorCode::NameUnresolvable);
    }
    let lookup = names
        .resolver
        .lookup(&labels.join("."), 0)
        .map_err(|busy| {
            tracing::warn!(name, "refused a name lookup: {busy}");
            ErrorCode::TemporaryResolverFailure
        })?;
    Ok(AddressStream {
        state: State::Pending(lookup),
    })
}

/// The addresses a finished lookup found.
fn found(joined: Result<io::Result<Vec<SocketAddr>>, JoinError>) -> Result<Vec<IpAddr>, ErrorCode> {
    match joined {
        Ok(Ok(addresses)) => Ok(addresses
            .iter()
            .map(|address| address.ip().to_canonical())
            .collect()),
        Ok(Err(_)) | Err(_) => Err(ErrorCode::NameUnresolvable),
    }
}

/// The addresses of one lookup, as the plugin takes them one by one.
pub struct AddressStream {
    state: State,
}

enum State {
    Pending(tokio::task::JoinHandle<io::Result<Vec<SocketAddr>>>),
    Done(Result<std::vec::IntoIter<IpAddr>, ErrorCode>),
}

impl AddressStream {
    fn done(addresses: Vec<IpAddr>) -> Self {
        Self {
            state: State::Done(Ok(addresses.into_iter())),
        }
    }

    /// The next address, `None` at the end, `would-block` while resolving.
    fn next(&mut self) -> Result<Option<IpAddress>, ErrorCode> {
        if let State::Pending(task) = &mut self.state {
            if !task.is_finished() {
                return Err(ErrorCode::WouldBlock);
            }
            let finished = futures::FutureExt::now_or_never(task).map(found);
            let Some(outcome) = finished else {
                return Err(ErrorCode::WouldBlock);
            };
            self.state = State::Done(outcome.map(Vec::into_iter));
        }
        match &mut self.state {
            State::Done(Ok(addresses)) => Ok(addresses.next().map(IpAddress::from)),
            State::Done(Err(code)) => Err(*code),
            State::Pending(_) => Err(ErrorCode::WouldBlock),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for AddressStream {
    async fn ready(&mut self) {
        if let State::Pending(task) = &mut self.state {
            let outcome = found(task.await);
            self.state = State::Done(outcome.map(Vec::into_iter));
        }
    }
}

impl Drop for AddressStream {
    fn drop(&mut self) {
        if let State::Pending(task) = &self.state {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(entries: &str) -> GrantedNames {
        let grant: NetworkGrant = toml::from_str(&format!("allow = {entries}")).unwrap();
        GrantedNames::of(&grant)
    }

    fn labels(name: &str) -> Vec<String> {
        name.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn only_names_of_socket_entries_resolve() {
        let granted = names(
            r#"["tcp://db.example.com:5432", "udp://ns.dns.example:53", "https://api.example.com", "tcp://*:25"]"#,
        );
        assert!(granted.allows(&labels("db.example.com")));
        assert!(granted.allows(&labels("ns.dns.example")));
        assert!(
            !granted.allows(&labels("api.example.com")),
            "an HTTP entry grants no lookup"
        );
        assert!(!granted.allows(&labels("a.ns.dns.example")));
        assert!(!granted.allows(&labels("leak.attacker.example")));
        assert!(matches!(
            resolve(&granted, "leak.attacker.example"),
            Err(ErrorCode::NameUnresolvable)
        ));
        assert!(matches!(
            resolve(&granted, "bad name"),
            Err(ErrorCode::InvalidArgument)
        ));
        let mut literal = resolve(&granted, "10.1.2.3").unwrap();
        assert!(matches!(literal.next(), Ok(Some(_))));
        assert!(matches!(literal.next(), Ok(None)));
    }
}
