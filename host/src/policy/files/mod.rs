//! The file capability: host directories and single host files exposed to a
//! plugin at guest paths.
//!
//! A grant maps one host directory, or one host file, to one guest path,
//! read-only unless it says `read-write`. Read-only allows no write, create,
//! rename, delete or timestamp change. WASI's capability-based filesystem keeps
//! the plugin inside what was granted: paths are resolved relative to the
//! preopened handle, so `..`, absolute paths and symlinks cannot reach beyond
//! it. A single file is shown through a private directory that holds only that
//! file (see [`single`]).

mod single;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use single::SingleFile;

/// How a plugin may use a granted directory or file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Read files and list directories; no change of any kind.
    #[default]
    ReadOnly,
    /// Also write; in a directory, create, rename and delete below it too.
    ReadWrite,
}

/// One `[[files]]` entry of a manifest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGrant {
    /// The host directory or file, absolute or relative to the manifest's folder.
    pub host: PathBuf,
    /// Where the plugin sees it, for example `/data` or `/etc/app.toml`.
    pub guest: String,
    /// What the plugin may do there.
    #[serde(default)]
    pub access: Access,
    /// For a single file, the private directory that shows it.
    #[serde(skip)]
    single: Option<Arc<SingleFile>>,
}

impl FileGrant {
    /// Makes the host path absolute and checks that it exists; a single file
    /// gets its private directory.
    pub fn resolve(self, manifest_dir: &Path) -> Result<Self> {
        let joined = manifest_dir.join(&self.host);
        let host = joined
            .canonicalize()
            .with_context(|| format!("granted path {} cannot be opened", joined.display()))?;
        if !self.guest.starts_with('/') {
            bail!(
                "guest path {:?} of the grant for {} must be absolute",
                self.guest,
                host.display()
            );
        }
        let single = if host.is_dir() {
            None
        } else if host.is_file() {
            Some(Arc::new(
                SingleFile::stage(&host, &self.guest, self.access)
                    .with_context(|| format!("cannot grant file {}", host.display()))?,
            ))
        } else {
            bail!(
                "granted path {} is neither a directory nor a file",
                host.display()
            );
        };
        Ok(Self {
            host,
            single,
            ..self
        })
    }

    /// Whether this grants one file rather than a directory.
    pub fn is_file(&self) -> bool {
        self.single.is_some()
    }

    /// The guest directory this grant is preopened at.
    pub fn preopen_path(&self) -> &str {
        match &self.single {
            Some(single) => single.guest_dir(),
            None => &self.guest,
        }
    }

    /// Preopens the directory, or the file's private directory, in a new
    /// instance's WASI context.
    pub fn configure(&self, wasi: &mut WasiCtxBuilder) -> Result<()> {
        let perms = match self.access {
            Access::ReadOnly => FsPerms::ReadOnly,
            Access::ReadWrite => FsPerms::ReadWrite,
        };
        let host_dir = match &self.single {
            Some(single) => single
                .refresh()
                .with_context(|| format!("cannot show granted file {}", self.host.display()))?,
            None => &self.host,
        };
        wasi.preopened_dir(host_dir, self.preopen_path(), perms)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot open granted path {}", self.host.display()))?;
        Ok(())
    }
}

/// Refuses grants that would be preopened at one guest directory: the plugin
/// would see only one of them.
pub fn check_distinct(grants: &[FileGrant]) -> Result<()> {
    for (index, grant) in grants.iter().enumerate() {
        let path = grant.preopen_path().trim_end_matches('/');
        if let Some(other) = grants[..index]
            .iter()
            .find(|other| other.preopen_path().trim_end_matches('/') == path)
        {
            bail!(
                "grants for {} and {} both appear at guest directory {path:?}; give them different guest directories",
                other.host.display(),
                grant.host.display()
            );
        }
    }
    Ok(())
}
