//! A single granted file, shown to the plugin through a private directory
//! that holds only it: WASI preopens directories, and preopening the file's
//! own folder would expose its neighbours.
//!
//! The private directory holds a hard link to the file, so the plugin reads
//! (and, with `read-write`, writes) the file itself. When no link can be made
//! (the file lies on another filesystem, or the kernel's hard-link protection
//! forbids it), a read-only grant falls back to a copy; a read-write grant is
//! refused, since writes to a copy would be lost.
//!
//! The file's folder is opened once, when the plugin loads, and the file is
//! looked up only by name inside that held folder, never following a
//! symlink and never blocking on a FIFO: before each instance starts, and
//! before each call on an instance kept from an earlier call, the link or
//! copy is renewed if the operator replaced or changed the file, and
//! a symlink or anything but a regular file swapped in for it is refused
//! (the plugin keeps seeing the last good version).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};

use super::Access;

/// Where the renewed link or copy is made before it is renamed into place.
const STAGING: &str = ".staging";

/// One staged file.
#[derive(Debug)]
pub struct SingleFile {
    /// The granted file's folder, held open since the plugin loaded.
    folder: Dir,
    name: String,
    guest_dir: String,
    /// Keeps the private directory on disk while the grant lives.
    _private: tempfile::TempDir,
    /// The private directory, held open.
    private_dir: Dir,
    staged_name: String,
    state: Mutex<Staged>,
}

/// How the private directory shows the file, and which version it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Staged {
    Link {
        device: u64,
        inode: u64,
    },
    Copy {
        inode: u64,
        len: i64,
        modified: (i64, u64),
    },
}

impl Staged {
    fn of(stat: &rustix::fs::Stat, linked: bool) -> Self {
        if linked {
            Self::Link {
                device: stat.st_dev,
                inode: stat.st_ino,
            }
        } else {
            Self::Copy {
                inode: stat.st_ino,
                len: stat.st_size,
                modified: (stat.st_mtime, stat.st_mtime_nsec),
            }
        }
    }

    fn is_link(self) -> bool {
        matches!(self, Self::Link { .. })
    }
}

impl SingleFile {
    /// Creates the private directory for `source`, shown at guest path `guest`.
    pub fn stage(source: &Path, guest: &str, access: Access) -> Result<Self> {
        let (guest_dir, staged_name) = guest
            .rsplit_once('/')
            .filter(|(_, name)| !name.is_empty() && *name != "." && *name != "..")
            .with_context(|| format!("guest path {guest:?} of a file grant must name a file"))?;
        let guest_dir = if guest_dir.is_empty() { "/" } else { guest_dir };
        let (Some(folder), Some(name)) = (source.parent(), source.file_name()) else {
            bail!("{} does not name a file in a folder", source.display());
        };
        let name = name
            .to_str()
            .with_context(|| format!("{} is not a UTF-8 file name", source.display()))?;
        let folder = Dir::open_ambient_dir(folder, ambient_authority())
            .with_context(|| format!("cannot open folder {}", folder.display()))?;
        let private = tempfile::Builder::new()
            .prefix("resmux-grant-")
            .tempdir()
            .context("cannot create a private directory for the file")?;
        let private_dir = Dir::open_ambient_dir(private.path(), ambient_authority())
            .context("cannot open the private directory for the file")?;
        let opened = open_regular(&folder, name)?;
        let linked = match link(&opened, &private_dir, staged_name) {
            Ok(()) => true,
            Err(error) if access == Access::ReadWrite => {
                return Err(error).with_context(|| {
                    format!(
                        "a read-write file grant needs a hard link to the file from {} (same filesystem, and a file resmux may link); grant its directory instead",
                        std::env::temp_dir().display()
                    )
                });
            }
            Err(_) => {
                copy(&opened, &private_dir, staged_name)?;
                false
            }
        };
        let state = Staged::of(&rustix::fs::fstat(&opened)?, linked);
        Ok(Self {
            folder,
            name: name.to_owned(),
            guest_dir: guest_dir.to_owned(),
            _private: private,
            private_dir,
            staged_name: staged_name.to_owned(),
            state: Mutex::new(state),
        })
    }

    pub fn guest_dir(&self) -> &str {
        &self.guest_dir
    }

    /// Renews the link or copy if the granted file changed, and returns the
    /// private directory to preopen.
    pub fn refresh(&self) -> Result<&Dir> {
        let opened = match open_regular(&self.folder, &self.name) {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!("still showing the last good version: {error:#}");
                return Ok(&self.private_dir);
            }
        };
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let current = Staged::of(&rustix::fs::fstat(&opened)?, state.is_link());
        let staged_missing = self
            .private_dir
            .symlink_metadata(&self.staged_name)
            .is_err();
        if current != *state || staged_missing {
            let _ = self.private_dir.remove_file(STAGING);
            if state.is_link() {
                link(&opened, &self.private_dir, STAGING)?;
            } else {
                copy(&opened, &self.private_dir, STAGING)?;
            }
            self.private_dir
                .rename(STAGING, &self.private_dir, &self.staged_name)?;
            *state = current;
        }
        Ok(&self.private_dir)
    }
}

/// Opens `name` in `folder` for reading without following a symlink and
/// without waiting on a FIFO, and only if it is a regular file.
fn open_regular(folder: &Dir, name: &str) -> Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let opened = rustix::fs::openat(folder, name, flags, Mode::empty())
        .map_err(io::Error::from)
        .with_context(|| format!("cannot open granted file {name:?} without following links"))?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&opened)?.st_mode);
    if kind != FileType::RegularFile {
        bail!("granted file {name:?} is no longer a regular file ({kind:?})");
    }
    Ok(opened)
}

/// Hard-links the opened file itself (not whatever its name points at now)
/// as `name` in `dir`.
fn link(opened: &OwnedFd, dir: &Dir, name: &str) -> io::Result<()> {
    let descriptor = format!("/proc/self/fd/{}", opened.as_raw_fd());
    rustix::fs::linkat(CWD, descriptor.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW)?;
    Ok(())
}

/// Copies the opened file's contents to `name` in `dir`.
fn copy(opened: &OwnedFd, dir: &Dir, name: &str) -> io::Result<()> {
    let mut source = File::from(opened.as_fd().try_clone_to_owned()?);
    let mut target = dir.create(name)?.into_std();
    io::copy(&mut source, &mut target)?;
    Ok(())
}
