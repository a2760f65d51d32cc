//! Name resolution on a plugin's behalf (its own lookups, the names of its
//! HTTP requests, the checks of its socket connections): at most
//! [`MAX_LOOKUPS`] at once per plugin, each holding its place until the
//! system's resolver returns. The resolver blocks a thread of tokio's
//! blocking pool (the plugin's own, during a call it runs inline with its
//! file operations, `runtime::placement`), and a plugin that drops a lookup, a request or the whole
//! instance does not stop it: without a bound, a plugin whose granted name
//! answers slowly could fill the pool every plugin's file calls need.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Lookups one plugin may have in progress at once.
pub const MAX_LOOKUPS: usize = 8;

/// One plugin's lookups in progress.
#[derive(Debug, Clone)]
pub struct Resolver {
    lookups: Arc<Semaphore>,
}

impl Default for Resolver {
    fn default() -> Self {
        Self {
            lookups: Arc::new(Semaphore::new(MAX_LOOKUPS)),
        }
    }
}

/// The plugin has [`MAX_LOOKUPS`] lookups in progress already.
#[derive(Debug, thiserror::Error)]
#[error("the plugin already has {MAX_LOOKUPS} name lookups in progress")]
pub struct Busy;

impl Resolver {
    /// Starts resolving `host` (for `port`) on tokio's blocking pool; the
    /// lookup keeps its place until the system's resolver returns, whether
    /// anyone still waits for the answer or not.
    pub fn lookup(
        &self,
        host: &str,
        port: u16,
    ) -> Result<JoinHandle<io::Result<Vec<SocketAddr>>>, Busy> {
        let place = self.lookups.clone().try_acquire_owned().map_err(|_| Busy)?;
        let host = host.to_owned();
        Ok(tokio::task::spawn_blocking(move || {
            let _place = place;
            (host.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect)
        }))
    }

    /// The addresses `host` resolves to now (for `port`).
    pub async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let lookup = self.lookup(host, port).map_err(io::Error::other)?;
        lookup.await.map_err(io::Error::other)?
    }
}
