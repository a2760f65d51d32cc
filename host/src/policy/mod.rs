//! The grants and limits of one plugin, built once from its manifest.
//!
//! Everything is denied unless a grant says otherwise. Each capability lives in
//! its own module with the same shape: a manifest section that deserialises
//! into a value, and `configure`, which applies that value to the WASI context
//! of a new instance. Limits are read by the runtime on every call. A new WASI
//! context inherits no variable, argument or standard input from the host.

pub mod ceiling;
pub mod environment;
pub mod files;
pub mod limits;
pub mod network;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use wasmtime_wasi::WasiCtxBuilder;

pub use ceiling::Ceiling;
pub use environment::{EnvGrant, Source as EnvSource};
pub use files::FileGrant;
pub use limits::Limits;
pub use network::NetworkGrant;

/// Everything one plugin may do, resolved against the manifest's folder.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub files: Vec<FileGrant>,
    pub env: Vec<EnvGrant>,
    pub network: NetworkGrant,
    pub limits: Limits,
}

impl Policy {
    /// Resolves the grants of a manifest stored in `manifest_dir`: relative host
    /// paths are taken from there, and every granted path must exist.
    pub fn resolve(
        files: Vec<FileGrant>,
        env: BTreeMap<String, EnvSource>,
        network: NetworkGrant,
        limits: Limits,
        manifest_dir: &Path,
    ) -> Result<Self> {
        let files: Vec<FileGrant> = files
            .into_iter()
            .map(|grant| grant.resolve(manifest_dir))
            .collect::<Result<_>>()?;
        files::check_distinct(&files)?;
        let env = env
            .into_iter()
            .map(|(name, source)| EnvGrant::resolve(name, source, manifest_dir))
            .collect::<Result<_>>()?;
        limits.validate()?;
        Ok(Self {
            files,
            env,
            network,
            limits,
        })
    }

    /// Applies every capability to the WASI context of a new instance of
    /// `plugin`; the HTTP half of the network grant is applied by
    /// [`network::HttpPolicy`].
    pub fn configure(&self, plugin: &Arc<str>, wasi: &mut WasiCtxBuilder) -> Result<()> {
        self.network.configure(plugin, wasi);
        for grant in &self.env {
            grant.configure(wasi);
        }
        for grant in &self.files {
            grant.configure(wasi)?;
        }
        Ok(())
    }
}
