//! The network capability: an allowlist of `scheme://host:port` entries,
//! enforced in one place for each way out of the sandbox.
//!
//! - `http`/`https` entries allow outgoing `wasi:http` requests ([`HttpPolicy`]),
//!   which resmux resolves, vets and connects itself.
//! - `tcp`/`udp` entries allow `wasi:sockets` connections and datagrams, and
//!   lookups of the host names they name ([`lookup`]), and of no other name.
//!
//! HTTP entries never open sockets and socket entries never allow HTTP. An
//! address that is not public (loopback, private, link-local, ...) is refused
//! unless an entry names that address itself, also when a public-looking name
//! resolves to it. Without entries, a plugin has no network at all.

mod address;
mod endpoint;
mod http;
mod lookup;
mod resolver;
mod unlinked;

use std::any::Any;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, bail};
use serde::Deserialize;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi_http::{FieldMap, WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::{Capability, Ceiling, Grant, InstanceState, Sandbox, SandboxBuilder};

pub use address::is_public;
pub use endpoint::{Endpoint, Host, Protocol};
use http::HttpPolicy;
pub use lookup::link as link_lookup;
use lookup::{GrantedNames, LookupView};

/// The `[network]` section of a manifest.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkGrant {
    /// The allowlist, for example `["https://api.example.com", "tcp://10.0.0.5:5432"]`.
    #[serde(default)]
    allow: Arc<[Endpoint]>,
    /// The plugin's lookups in progress, shared by every instance.
    #[serde(skip)]
    resolver: resolver::Resolver,
}

impl NetworkGrant {
    pub fn entries(&self) -> &[Endpoint] {
        &self.allow
    }

    /// The plugin's lookups in progress.
    pub fn resolver(&self) -> &resolver::Resolver {
        &self.resolver
    }

    /// Whether any entry allows `wasi:http` requests: only then is
    /// `wasi:http` linked for the plugin.
    fn grants_http(&self) -> bool {
        self.grants(Protocol::Http) || self.grants(Protocol::Https)
    }

    fn grants(&self, protocol: Protocol) -> bool {
        self.allow.iter().any(|entry| entry.protocol == protocol)
    }

    /// Applies the socket half of the grant to a new instance: refusals are
    /// logged under `plugin`.
    fn configure_sockets(&self, plugin: &Arc<str>, sandbox: &mut SandboxBuilder) {
        let tcp = self.grants(Protocol::Tcp);
        let udp = self.grants(Protocol::Udp);
        sandbox.wasi.allow_tcp(tcp).allow_udp(udp);
        let grant = self.clone();
        let plugin = plugin.clone();
        sandbox.wasi.socket_addr_check(move |address, usage| {
            let grant = grant.clone();
            let plugin = plugin.clone();
            Box::pin(async move {
                let allowed = grant.allows_socket(address, usage).await;
                if !allowed {
                    tracing::warn!(%plugin, %address, ?usage, "denied a socket use: not on the network allowlist");
                }
                allowed
            })
        });
    }

    /// Whether a socket may use `address` for `usage`. Binds are allowed only
    /// to the wildcard address and an ephemeral port (the implicit bind of an
    /// outgoing socket); listening and accepting are never allowed.
    async fn allows_socket(&self, address: SocketAddr, usage: SocketAddrUse) -> bool {
        let protocol = match usage {
            SocketAddrUse::TcpConnect => Protocol::Tcp,
            SocketAddrUse::UdpSend | SocketAddrUse::UdpReceive => Protocol::Udp,
            SocketAddrUse::TcpBind => {
                return self.grants(Protocol::Tcp) && is_implicit_bind(address);
            }
            SocketAddrUse::UdpBind => {
                return self.grants(Protocol::Udp) && is_implicit_bind(address);
            }
            SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => return false,
        };
        let ip = address.ip().to_canonical();
        for entry in self.allow.iter() {
            if entry.protocol != protocol || entry.port.is_some_and(|port| port != address.port()) {
                continue;
            }
            let allowed = match &entry.host {
                Host::Any => is_public(ip),
                Host::Ip(own) => *own == ip,
                Host::Name(labels) => {
                    is_public(ip) && self.resolves_to(&labels.join("."), ip).await
                }
            };
            if allowed {
                return true;
            }
        }
        false
    }
}

impl Capability for NetworkGrant {
    fn section(&self) -> &'static str {
        "network"
    }

    fn check(&self, ceiling: &Ceiling, _: &Path) -> Result<()> {
        for entry in self.entries() {
            if !ceiling.network.iter().any(|allowed| allowed.covers(entry)) {
                bail!("the ceiling allows no network grant of {entry}");
            }
        }
        Ok(())
    }

    fn resolve(&self, _: &Path) -> Result<Arc<dyn Grant>> {
        Ok(Arc::new(ResolvedNetwork {
            names: GrantedNames::of(self),
            grant: self.clone(),
        }))
    }
}

/// A plugin's network grant, with the names it may look up.
struct ResolvedNetwork {
    grant: NetworkGrant,
    names: GrantedNames,
}

impl Grant for ResolvedNetwork {
    fn link(&self, linker: &mut Linker<Sandbox>, component: &Component) -> Result<()> {
        if self.grant.grants_http() {
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
        } else {
            unlinked::stub_http(linker, component)?;
        }
        Ok(())
    }

    fn prepare(&self, plugin: &Arc<str>, sandbox: &mut SandboxBuilder) -> Result<()> {
        self.grant.configure_sockets(plugin, sandbox);
        sandbox.state(|| NetworkState::new(plugin, self.grant.clone(), self.names.clone()));
        Ok(())
    }

    fn describe(&self) -> (&'static str, Vec<String>) {
        let lines = self
            .grant
            .entries()
            .iter()
            .map(ToString::to_string)
            .collect();
        ("network", lines)
    }

    fn import_status(&self, interface: &str) -> Option<String> {
        let sockets = self.grant.grants(Protocol::Tcp) || self.grant.grants(Protocol::Udp);
        let status = match interface {
            "wasi:http/outgoing-handler" | "wasi:http/types" if !self.grant.grants_http() => {
                "not linked; every call traps (no http or https entry)".into()
            }
            "wasi:http/outgoing-handler" => "allowlisted http and https requests only".into(),
            "wasi:sockets/ip-name-lookup" if self.names.describe().is_empty() => {
                "resmux's own; no name resolves (no tcp or udp entry names a host)".into()
            }
            "wasi:sockets/ip-name-lookup" => {
                format!("resmux's own; only {}", self.names.describe().join(", "))
            }
            socket if SOCKET_INTERFACES.contains(&socket) && !sockets => {
                "linked; every use denied (no tcp or udp entry)".into()
            }
            socket if SOCKET_INTERFACES.contains(&socket) => {
                "allowlisted tcp and udp peers only".into()
            }
            _ => return None,
        };
        Some(status)
    }
}

/// The `wasi:sockets` interfaces a socket grant governs (name lookup aside).
const SOCKET_INTERFACES: [&str; 6] = [
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
];

/// Bytes of the header fields one `wasi:http` fields resource may hold.
const HTTP_FIELDS_BYTES: usize = 64 * 1024;

/// The network's share of one instance: its `wasi:http` context, the policy
/// its outgoing requests pass, and the names it may look up. An instance
/// whose network grant was not prepared gets one that denies everything.
struct NetworkState {
    http: WasiHttpCtx,
    policy: HttpPolicy,
    names: GrantedNames,
}

impl NetworkState {
    fn new(plugin: &Arc<str>, grant: NetworkGrant, names: GrantedNames) -> Self {
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(HTTP_FIELDS_BYTES);
        Self {
            http,
            policy: HttpPolicy::new(plugin.clone(), grant),
            names,
        }
    }

    fn denying(plugin: &Arc<str>) -> Self {
        Self::new(plugin, NetworkGrant::default(), GrantedNames::default())
    }
}

impl InstanceState for NetworkState {
    /// Header fields: plain data, whatever happens while it waits.
    fn may_keep(&self, resource: &dyn Any) -> bool {
        resource.is::<FieldMap>()
    }
}

impl WasiHttpView for Sandbox {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let (table, state) = self.table_and_state(NetworkState::denying);
        WasiHttpCtxView {
            ctx: &mut state.http,
            table,
            hooks: &mut state.policy,
        }
    }
}

impl LookupView for Sandbox {
    fn lookup_parts(&mut self) -> (&mut ResourceTable, &GrantedNames) {
        let (table, state) = self.table_and_state(NetworkState::denying);
        (table, &state.names)
    }
}

fn is_implicit_bind(address: SocketAddr) -> bool {
    address.ip().is_unspecified() && address.port() == 0
}

impl NetworkGrant {
    /// Whether `name` currently resolves to `ip` (no, when the plugin has
    /// too many lookups in progress).
    async fn resolves_to(&self, name: &str, ip: IpAddr) -> bool {
        match self.resolver.resolve(name, 0).await {
            Ok(addresses) => addresses
                .iter()
                .any(|address| address.ip().to_canonical() == ip),
            Err(_) => false,
        }
    }
}
