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

use anyhow::Result;
use wasmtime_wasi::WasiCtxBuilder;

pub use ceiling::Ceiling;
pub use environment::{EnvGrant, Source as EnvSource};
pub use files::FileGrant;
pub use limits::Limits;

/// Everything one plugin may do, resolved against the manifest's folder.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub files: Vec<FileGrant>,
    pub env: Vec<EnvGrant>,
    pub limits: Limits,
}

impl Policy {
    /// Resolves the grants of a manifest stored in `manifest_dir`: relative host
    /// paths are taken from there, and every granted path must exist.
    pub fn resolve(
        files: Vec<FileGrant>,
        env: BTreeMap<String, EnvSource>,
        limits: Limits,
        manifest_dir: &Path,
    ) -> Result<Self> {
        let files = files
            .into_iter()
            .map(|grant| grant.resolve(manifest_dir))
            .collect::<Result<_>>()?;
        let env = env
            .into_iter()
            .map(|(name, source)| EnvGrant::resolve(name, source, manifest_dir))
            .collect::<Result<_>>()?;
        limits.validate()?;
        Ok(Self { files, env, limits })
    }

    /// Applies every capability to the WASI context of a new instance.
    pub fn configure(&self, wasi: &mut WasiCtxBuilder) -> Result<()> {
        network::configure(wasi);
        for grant in &self.env {
            grant.configure(wasi);
        }
        for grant in &self.files {
            grant.configure(wasi)?;
        }
        Ok(())
    }
}
