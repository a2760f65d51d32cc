//! The network capability: an allowlist of `scheme://host:port` entries,
//! enforced in one place for each way out of the sandbox.
//!
//! - `http`/`https` entries allow outgoing `wasi:http` requests ([`HttpPolicy`]),
//!   which resmux resolves, vets and connects itself.
//! - `tcp`/`udp` entries allow `wasi:sockets` connections and datagrams; name
//!   lookup is switched on only when such an entry exists.
//!
//! HTTP entries never open sockets and socket entries never allow HTTP. An
//! address that is not public (loopback, private, link-local, ...) is refused
//! unless an entry names that address itself, also when a public-looking name
//! resolves to it. Without entries, a plugin has no network at all.

mod address;
mod endpoint;
mod http;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde::Deserialize;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::sockets::SocketAddrUse;

pub use address::is_public;
pub use endpoint::{Endpoint, Host, Protocol};
pub use http::HttpPolicy;

/// The `[network]` section of a manifest.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkGrant {
    /// The allowlist, for example `["https://api.example.com", "tcp://10.0.0.5:5432"]`.
    #[serde(default)]
    allow: Arc<[Endpoint]>,
}

impl NetworkGrant {
    pub fn entries(&self) -> &[Endpoint] {
        &self.allow
    }

    fn grants(&self, protocol: Protocol) -> bool {
        self.allow.iter().any(|entry| entry.protocol == protocol)
    }

    /// Applies the socket half of the grant to a new instance's WASI context;
    /// refusals are logged under `plugin`.
    pub fn configure(&self, plugin: &Arc<str>, wasi: &mut WasiCtxBuilder) {
        let tcp = self.grants(Protocol::Tcp);
        let udp = self.grants(Protocol::Udp);
        wasi.allow_tcp(tcp)
            .allow_udp(udp)
            .allow_ip_name_lookup(tcp || udp);
        let grant = self.clone();
        let plugin = plugin.clone();
        wasi.socket_addr_check(move |address, usage| {
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
                Host::Name(labels) => is_public(ip) && resolves_to(&labels.join("."), ip).await,
            };
            if allowed {
                return true;
            }
        }
        false
    }
}

fn is_implicit_bind(address: SocketAddr) -> bool {
    address.ip().is_unspecified() && address.port() == 0
}

/// Whether `name` currently resolves to `ip`.
async fn resolves_to(name: &str, ip: IpAddr) -> bool {
    match tokio::net::lookup_host((name, 0)).await {
        Ok(mut addresses) => addresses.any(|address| address.ip().to_canonical() == ip),
        Err(_) => false,
    }
}
