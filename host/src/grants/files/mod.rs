//! The file capability: host directories and single host files exposed to a
//! plugin at guest paths.
//!
//! A grant maps one host directory, or one host file, to one guest path,
//! read-only unless it says `read-write`. Read-only allows no write, create,
//! rename, delete or timestamp change. WASI's capability-based filesystem keeps
//! the plugin inside what was granted: paths are resolved relative to the
//! preopened handle, so `..`, absolute paths and symlinks cannot reach beyond
//! it. A single file is shown through a private directory that holds only that
//! file (see [`single`]), in a folder of its own (see [`private`]).
//!
//! A grant is resolved once, when the plugin loads, into an open directory
//! handle. Every instance is given that same directory through the handle
//! (`/proc/self/fd/N` names the open descriptor, not a path), so nothing a
//! plugin or a local user does on disk afterwards (renaming the directory,
//! putting a symlink in its place) changes what the grant points at.

mod located;
mod private;
mod single;
mod staged_io;

use std::any::Any;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::Deserialize;
use wasmtime_wasi::FsPerms;
use wasmtime_wasi::filesystem::Descriptor;

pub use located::on_local_filesystem;
pub use private::remove_stale_folders;
use single::SingleFile;

use crate::file_identity::{self, Identity};

use super::{
    Capability, Ceiling, Grant, InstanceState, LocatedFile, Renewal, SandboxBuilder, WatchedGrant,
};

/// The `[[files]]` entries of a manifest.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct FilesSection(pub Vec<FileGrant>);

impl Capability for FilesSection {
    fn section(&self) -> &'static str {
        "files"
    }

    fn check(&self, ceiling: &Ceiling, manifest_dir: &Path) -> Result<()> {
        for grant in &self.0 {
            let host = manifest_dir.join(&grant.host);
            let host = dunce::canonicalize(&host)
                .with_context(|| format!("granted path {} cannot be opened", host.display()))?;
            let (allowed, what) = match grant.access {
                Access::ReadOnly => (&ceiling.directories, "grant"),
                Access::ReadWrite => (&ceiling.writable, "read-write grant"),
            };
            if !allowed.iter().any(|allowed| host.starts_with(allowed)) {
                bail!("the ceiling allows no {what} of {}", host.display());
            }
        }
        Ok(())
    }

    fn resolve(&self, manifest_dir: &Path) -> Result<Arc<dyn Grant>> {
        let grants: Vec<FileGrant> = self
            .0
            .iter()
            .map(|grant| grant.clone().resolve(manifest_dir))
            .collect::<Result<_>>()?;
        check_distinct(&grants)?;
        Ok(Arc::new(FileGrants(grants)))
    }
}

/// A plugin's resolved file grants.
struct FileGrants(Vec<FileGrant>);

impl Grant for FileGrants {
    fn prepare(&self, _: &Arc<str>, sandbox: &mut SandboxBuilder) -> Result<()> {
        for grant in &self.0 {
            grant.configure(sandbox)?;
        }
        Ok(())
    }

    fn renew(&self, renewal: &Renewal<'_>) -> Result<()> {
        for grant in &self.0 {
            grant.renew(renewal)?;
        }
        Ok(())
    }

    /// Each grant is one preopened directory per instance.
    fn descriptors_per_instance(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(u32::MAX)
    }

    fn may_block(&self) -> bool {
        !self.0.is_empty()
    }

    /// Only directories on local filesystems: a single granted file is
    /// shown afresh before each call, and a network or user-space file
    /// system may hang a `stat` or `close` of what a call left open.
    fn may_run_inline(&self) -> bool {
        self.0.iter().all(|grant| !grant.is_file() && grant.local)
    }

    /// The grant the plugin would reach `guest_path` through (the one with
    /// the longest guest directory above it, as WASI resolves it) opens it,
    /// if that grant is a directory on a local filesystem ([`located`]).
    /// A single granted file is left to the plugin's `read`.
    fn open_located(&self, guest_path: &str) -> Option<LocatedFile> {
        let (grant, below) = self
            .0
            .iter()
            .filter_map(|grant| Some((grant, grant.below(guest_path)?)))
            .max_by_key(|(grant, _)| grant.preopen_path().trim_end_matches('/').len())?;
        match &grant.held {
            Some(Held::Directory(dir)) if grant.local => located::open(dir, below),
            _ => None,
        }
    }

    /// The held directory of each grant, or a granted file's held folder
    /// with its name: never the path, which may name another directory by
    /// now.
    fn watched_dirs(&self) -> Vec<WatchedGrant> {
        self.0
            .iter()
            .filter_map(|grant| {
                let (dir, file) = match grant.held.as_ref()? {
                    Held::Directory(dir) => (dir.clone(), None),
                    Held::File(single) => (single.folder(), Some(OsString::from(single.name()))),
                };
                Some(WatchedGrant {
                    label: grant.host.clone(),
                    dir,
                    file,
                })
            })
            .collect()
    }

    fn describe(&self) -> (&'static str, Vec<String>) {
        let lines = self
            .0
            .iter()
            .map(|grant| {
                format!(
                    "{} {} -> {} ({:?})",
                    if grant.is_file() { "file" } else { "directory" },
                    grant.host.display(),
                    grant.guest,
                    grant.access
                )
            })
            .collect();
        ("files", lines)
    }

    fn import_status(&self, interface: &str) -> Option<String> {
        let status = match interface {
            "wasi:filesystem/preopens" | "wasi:filesystem/types" if self.0.is_empty() => {
                "linked; no directory granted"
            }
            "wasi:filesystem/preopens" | "wasi:filesystem/types" => "granted paths only",
            _ => return None,
        };
        Some(status.into())
    }
}

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
    /// What the grant was resolved to when the plugin loaded.
    #[serde(skip)]
    held: Option<Held>,
    /// Whether its directory is on a local filesystem, where resmux may
    /// read located files on its own threads.
    #[serde(skip)]
    local: bool,
}

/// The open handle a resolved grant keeps.
#[derive(Debug, Clone)]
enum Held {
    /// A granted directory, opened once.
    Directory(Arc<Dir>),
    /// A granted file, shown through its private directory.
    File(Arc<SingleFile>),
}

impl FileGrant {
    /// Makes the host path absolute, checks that it exists and opens it; a
    /// single file gets its private directory.
    fn resolve(self, manifest_dir: &Path) -> Result<Self> {
        let joined = manifest_dir.join(&self.host);
        let host = dunce::canonicalize(&joined)
            .with_context(|| format!("granted path {} cannot be opened", joined.display()))?;
        if !self.guest.starts_with('/') {
            bail!(
                "guest path {:?} of the grant for {} must be absolute",
                self.guest,
                host.display()
            );
        }
        let mut local = false;
        let held = if host.is_dir() {
            let dir = Dir::open_ambient_dir(&host, ambient_authority())
                .with_context(|| format!("cannot open granted directory {}", host.display()))?;
            local = located::on_local_filesystem(&dir);
            Held::Directory(Arc::new(dir))
        } else if host.is_file() {
            Held::File(Arc::new(
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
            held: Some(held),
            local,
            ..self
        })
    }

    /// What `guest_path` is below this grant's guest directory, if it is
    /// below it.
    fn below<'a>(&self, guest_path: &'a str) -> Option<&'a str> {
        guest_path
            .strip_prefix(self.preopen_path().trim_end_matches('/'))?
            .strip_prefix('/')
            .filter(|below| !below.is_empty())
    }

    /// Whether this grants one file rather than a directory.
    fn is_file(&self) -> bool {
        matches!(self.held, Some(Held::File(_)))
    }

    /// The guest directory this grant is preopened at.
    fn preopen_path(&self) -> &str {
        match &self.held {
            Some(Held::File(single)) => single.guest_dir(),
            _ => &self.guest,
        }
    }

    /// The directory to preopen: the held one, or the single file's private
    /// one.
    fn preopened_dir(&self) -> Result<&Dir> {
        match &self.held {
            Some(Held::Directory(dir)) => Ok(dir.as_ref()),
            Some(Held::File(single)) => Ok(single.private_dir()),
            None => bail!("grant of {} was never resolved", self.host.display()),
        }
    }

    /// Renews the link or copy of a single granted file; a directory needs
    /// nothing, as it is held open.
    fn renew(&self, renewal: &Renewal<'_>) -> Result<()> {
        match &self.held {
            Some(Held::File(single)) => single
                .renew(renewal)
                .with_context(|| format!("cannot show granted file {}", self.host.display())),
            _ => Ok(()),
        }
    }

    /// Preopens the held directory, or the file's private directory, in a
    /// new instance's WASI context: the one directory of the grant the
    /// instance may keep open between calls.
    fn configure(&self, sandbox: &mut SandboxBuilder) -> Result<()> {
        let perms = match self.access {
            Access::ReadOnly => FsPerms::ReadOnly,
            Access::ReadWrite => FsPerms::ReadWrite,
        };
        let dir = self.preopened_dir()?;
        let cannot_open = || format!("cannot open granted path {}", self.host.display());
        sandbox
            .wasi
            .preopened_dir(
                held_path(dir).with_context(cannot_open)?,
                self.preopen_path(),
                perms,
            )
            .map_err(anyhow::Error::from)
            .with_context(cannot_open)?;
        let identity = file_identity::of(dir)
            .with_context(|| format!("cannot stat granted path {}", self.host.display()))?;
        let directories = sandbox.state(GrantedDirectories::default);
        directories
            .0
            .push((identity, self.access == Access::ReadWrite));
        Ok(())
    }
}

/// The file capability's share of one instance: the directories granted
/// to it, preopened, each as the file system knows it ([`Identity`]) with
/// whether the grant lets it write there. They are the only descriptors it
/// may keep between calls.
#[derive(Default)]
struct GrantedDirectories(Vec<(Identity, bool)>);

impl InstanceState for GrantedDirectories {
    /// A descriptor of one of the granted directories itself (preopened, or
    /// opened again), with no more access than a grant of it gives: not a
    /// file, not a directory below one, and not a read-only grant reached
    /// through a read-write one above it.
    fn may_keep(&self, resource: &dyn Any) -> bool {
        let Some(Descriptor::Dir(dir)) = resource.downcast_ref::<Descriptor>() else {
            return false;
        };
        let writes = !dir.perms.write_not_permitted();
        file_identity::of(&*dir.dir).is_ok_and(|identity| {
            self.0
                .iter()
                .any(|&(granted, writable)| granted == identity && (writable || !writes))
        })
    }
}

/// The name of an open directory's own descriptor: opening it gives that
/// directory whatever has happened to its path since.
#[cfg(target_os = "linux")]
fn held_path(dir: &Dir) -> Result<PathBuf> {
    use std::os::fd::AsRawFd;
    Ok(PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())))
}

/// macOS names an open descriptor `/dev/fd/N`: opening it duplicates the
/// descriptor, whatever has happened to the directory's path since.
#[cfg(target_os = "macos")]
fn held_path(dir: &Dir) -> Result<PathBuf> {
    use std::os::fd::AsRawFd;
    Ok(PathBuf::from(format!("/dev/fd/{}", dir.as_raw_fd())))
}

/// Windows has no name for an open handle: the path the held directory
/// has now, asked of the handle itself (`GetFinalPathNameByHandleW`), so
/// a grant renamed since it loaded is followed there. Between this and the
/// open that follows, the path could be given to another directory: the
/// one race Linux and macOS do not have (docs/security.md).
#[cfg(windows)]
fn held_path(dir: &Dir) -> Result<PathBuf> {
    use std::os::windows::ffi::OsStringExt;
    use std::os::windows::io::{AsHandle, AsRawHandle};
    use windows_sys::Win32::Storage::FileSystem::{
        FILE_NAME_NORMALIZED, GetFinalPathNameByHandleW,
    };
    let handle = dir.as_handle().as_raw_handle();
    let mut name = vec![0u16; 512];
    loop {
        let capacity = u32::try_from(name.len()).unwrap_or(u32::MAX);
        // SAFETY: the handle is open for the call, and the buffer holds
        // `capacity` UTF-16 units.
        let length = unsafe {
            GetFinalPathNameByHandleW(handle, name.as_mut_ptr(), capacity, FILE_NAME_NORMALIZED)
        } as usize;
        if length == 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        if length < name.len() {
            name.truncate(length);
            return Ok(PathBuf::from(OsString::from_wide(&name)));
        }
        name.resize(length + 1, 0);
    }
}

/// Refuses grants that would be preopened at one guest directory: the plugin
/// would see only one of them.
fn check_distinct(grants: &[FileGrant]) -> Result<()> {
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
