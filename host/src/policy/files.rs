//! The file capability: host directories exposed to a plugin at guest paths.
//!
//! A grant maps one host directory to one guest path, read-only unless it
//! says `read-write`. Read-only allows no write, create, rename, delete or
//! timestamp change. WASI's
//! capability-based filesystem keeps the plugin inside the directory: paths are
//! resolved relative to the preopened handle, so `..`, absolute paths and
//! symlinks cannot reach beyond it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

/// How a plugin may use a granted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Read files and list directories; no change of any kind.
    #[default]
    ReadOnly,
    /// Also create, write, rename and delete below the directory.
    ReadWrite,
}

/// One `[[files]]` entry of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGrant {
    /// The host directory, absolute or relative to the manifest's folder.
    pub host: PathBuf,
    /// Where the plugin sees it, for example `/data`.
    pub guest: String,
    /// What the plugin may do there.
    #[serde(default)]
    pub access: Access,
}

impl FileGrant {
    /// Makes the host path absolute and checks that it is a directory.
    pub fn resolve(self, manifest_dir: &Path) -> Result<Self> {
        let joined = manifest_dir.join(&self.host);
        let host = joined
            .canonicalize()
            .with_context(|| format!("granted directory {} cannot be opened", joined.display()))?;
        if !host.is_dir() {
            bail!("granted path {} is not a directory", host.display());
        }
        if !self.guest.starts_with('/') {
            bail!(
                "guest path {:?} of the grant for {} must be absolute",
                self.guest,
                host.display()
            );
        }
        Ok(Self { host, ..self })
    }

    /// Preopens the directory in a new instance's WASI context.
    pub fn configure(&self, wasi: &mut WasiCtxBuilder) -> Result<()> {
        let perms = match self.access {
            Access::ReadOnly => FsPerms::ReadOnly,
            Access::ReadWrite => FsPerms::ReadWrite,
        };
        wasi.preopened_dir(&self.host, &self.guest, perms)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot open granted directory {}", self.host.display()))?;
        Ok(())
    }
}
