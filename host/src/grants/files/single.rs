//! A single granted file, shown to the plugin through a private directory
//! that holds only it: WASI preopens directories, and preopening the file's
//! own folder would expose its neighbours. The private directory lies in a
//! folder of its own ([`super::private`]).
//!
//! The private directory holds a hard link to the file, so the plugin reads
//! (and, with `read-write`, writes) the file itself. When no link can be made
//! (the file lies on another filesystem, or the kernel's hard-link protection
//! forbids it, and always on macOS and Windows, which cannot link an open
//! file: [`super::staged_io`]), a read-only grant falls back to a copy; a
//! read-write grant is refused, since writes to a copy would be lost.
//!
//! The file's folder is opened once, when the plugin loads, and the file is
//! looked up only by name inside that held folder, never following a
//! symlink and never blocking on a FIFO. Before each call, on the call's own
//! thread, the link or copy is renewed if the operator replaced or changed
//! the file ([`SingleFile::renew`]); a symlink or anything but a regular file
//! swapped in for it is refused (the plugin keeps seeing the last good
//! version).
//!
//! A copy is made only there, never at load, and within the plugin's limits:
//! a file larger than its `memory_mib` is not copied (the plugin could never
//! hold it in its memory, and a file it locates has the same bound), only
//! the ranges that hold data are written (a sparse file costs only its
//! data), and a copy unfinished when the call's time is up is dropped. The
//! plugin then keeps seeing the last good version (none before the first),
//! and the log names the plugin and the file.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Instant, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::Access;
use super::private::PrivateFolder;
use super::staged_io::{identity_at, link, next_data, open_regular, read_at, write_all_at};
use crate::file_identity::{self, Identity};
use crate::grants::Renewal;
use crate::owner_file;

/// The name a renewed link or copy is made under, in the private folder,
/// before it is renamed into the private directory.
const STAGING: &str = "staging";

/// Bytes a copy reads and writes at a time, between two looks at the clock.
const COPY_CHUNK: usize = 1 << 20;

/// One staged file.
#[derive(Debug)]
pub struct SingleFile {
    /// The granted file's folder, held open since the plugin loaded (and
    /// watched for the file's changes).
    folder: Arc<Dir>,
    name: String,
    /// The granted file's path, to name in the log.
    source: PathBuf,
    guest_dir: String,
    private: PrivateFolder,
    staged_name: String,
    /// Whether the private directory shows a hard link to the file (else a
    /// copy).
    linked: bool,
    shown: Mutex<Shown>,
}

/// Which version of the file the private directory shows.
#[derive(Debug)]
struct Shown {
    /// None before a copy was first made.
    current: Option<Version>,
    /// The last version found too large to copy, logged once.
    too_large: Option<Version>,
    /// The device and inode of what the private directory shows: anything
    /// else under its name (the plugin's own file, renamed over it) is
    /// replaced.
    staged: Option<Identity>,
}

/// A version of the granted file: for a link, the file itself (a change in
/// place shows through it); for a copy, also its size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    Link {
        device: u64,
        inode: u64,
    },
    Copy {
        inode: u64,
        len: u64,
        modified: (u64, u32),
    },
}

impl Version {
    /// The version `file` is now.
    fn of(file: &File, linked: bool) -> io::Result<Self> {
        let (device, inode) = file_identity::of(file)?;
        if linked {
            return Ok(Self::Link { device, inode });
        }
        let metadata = file.metadata()?;
        let modified = metadata.modified()?;
        let since = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(Self::Copy {
            inode,
            len: metadata.len(),
            modified: (since.as_secs(), since.subsec_nanos()),
        })
    }
}

/// How a copy ended.
enum Copied {
    Whole,
    OutOfTime,
}

impl SingleFile {
    /// Creates the private directory for `source`, shown at guest path
    /// `guest`, with a link to the file in it; a copy is left to the first
    /// renewal.
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
        let private = PrivateFolder::create()?;
        let opened = open_regular(&folder, name)?;
        let linked = match link(&opened, private.shown(), staged_name) {
            Ok(()) => true,
            Err(error) if access == Access::ReadWrite => {
                return Err(error).with_context(|| {
                    format!(
                        "a read-write file grant needs a hard link to the file from {} (same filesystem, and a file resmux may link); grant its directory instead",
                        std::env::temp_dir().display()
                    )
                });
            }
            Err(_) => false,
        };
        let (current, staged) = match linked {
            true => (
                Some(Version::of(&opened, true)?),
                Some(file_identity::of(&opened)?),
            ),
            false => (None, None),
        };
        Ok(Self {
            folder: Arc::new(folder),
            name: name.to_owned(),
            source: source.to_owned(),
            guest_dir: guest_dir.to_owned(),
            private,
            staged_name: staged_name.to_owned(),
            linked,
            shown: Mutex::new(Shown {
                current,
                too_large: None,
                staged,
            }),
        })
    }

    pub fn guest_dir(&self) -> &str {
        &self.guest_dir
    }

    /// The granted file's folder, held open since the plugin loaded.
    pub fn folder(&self) -> Arc<Dir> {
        self.folder.clone()
    }

    /// The granted file's name in its folder.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The private directory to preopen.
    pub fn private_dir(&self) -> &Dir {
        self.private.shown()
    }

    /// Renews the link or copy if the granted file changed, within
    /// `renewal`'s bounds. A call that finds another renewing it goes on
    /// with the version shown now rather than wait.
    pub fn renew(&self, renewal: &Renewal<'_>) -> Result<()> {
        let mut shown = match self.shown.try_lock() {
            Ok(shown) => shown,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        let opened = match open_regular(&self.folder, &self.name) {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(
                    "plugin {}: granted file {}: still showing the last good version: {error:#}",
                    renewal.plugin,
                    self.source.display()
                );
                return Ok(());
            }
        };
        self.remove_strays(renewal);
        let version = Version::of(&opened, self.linked)?;
        let staged_now = identity_at(self.private.shown(), &self.staged_name).ok();
        if shown.current == Some(version) && staged_now.is_some() && staged_now == shown.staged {
            return Ok(());
        }
        let staging = self.private.staging();
        if self.linked {
            let _ = staging.remove_file(STAGING);
            if let Err(error) = link(&opened, staging, STAGING) {
                tracing::warn!(
                    "plugin {}: granted file {}: still showing the last good version: cannot link it: {error}",
                    renewal.plugin,
                    self.source.display()
                );
                return Ok(());
            }
        } else {
            let size = opened.metadata()?.len();
            if !self.copy_within(&opened, size, version, &mut shown, renewal)? {
                return Ok(());
            }
        }
        let renamed = identity_at(staging, STAGING)?;
        staging.rename(STAGING, self.private.shown(), &self.staged_name)?;
        shown.current = Some(version);
        shown.staged = Some(renamed);
        Ok(())
    }

    /// Removes whatever the plugin left in its private directory beside
    /// the file (with a read-write grant it may create entries there, and a
    /// link it made to the file would keep an old version reachable after
    /// the operator replaced it), so nothing of it outlives a call.
    fn remove_strays(&self, renewal: &Renewal<'_>) {
        let shown = self.private.shown();
        let Ok(entries) = shown.entries() else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == self.staged_name.as_str() {
                continue;
            }
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => shown.remove_dir_all(&name),
                _ => shown.remove_file(&name),
            };
            if let Err(error) = removed {
                tracing::warn!(
                    "plugin {}: cannot remove {name:?} it left beside granted file {}: {error}",
                    renewal.plugin,
                    self.source.display()
                );
            }
        }
    }

    /// Makes a copy of `opened` (of `size` bytes, at `version`) to rename
    /// into place, unless it is larger than the plugin's memory limit or the
    /// call's time runs out first: then the plugin keeps seeing the version
    /// shown now, the log says why, and false is returned.
    fn copy_within(
        &self,
        opened: &File,
        size: u64,
        version: Version,
        shown: &mut Shown,
        renewal: &Renewal<'_>,
    ) -> Result<bool> {
        if shown.too_large == Some(version) {
            return Ok(false);
        }
        let memory_mib = renewal.limits.memory_mib;
        if size > memory_mib.saturating_mul(1 << 20) {
            shown.too_large = Some(version);
            tracing::warn!(
                "plugin {}: granted file {} is {size} bytes, more than its memory limit of {memory_mib} MiB: it is not copied, and the plugin keeps seeing the last good version",
                renewal.plugin,
                self.source.display()
            );
            return Ok(false);
        }
        let staging = self.private.staging();
        let _ = staging.remove_file(STAGING);
        let copied = copy(opened, size, staging, STAGING, renewal.deadline);
        if !matches!(copied, Ok(Copied::Whole)) {
            let _ = staging.remove_file(STAGING);
        }
        match copied.with_context(|| format!("cannot copy {}", self.source.display()))? {
            Copied::Whole => Ok(true),
            Copied::OutOfTime => {
                tracing::warn!(
                    "plugin {}: the copy of granted file {} ({size} bytes) was not done within the call's time limit: the plugin keeps seeing the last good version",
                    renewal.plugin,
                    self.source.display()
                );
                Ok(false)
            }
        }
    }
}

/// Copies the first `size` bytes of `source` to a new file `name` in `dir`,
/// writing only the ranges that hold data (holes stay holes), a chunk at a
/// time, and gives up once `deadline` has passed.
fn copy(source: &File, size: u64, dir: &Dir, name: &str, deadline: Instant) -> io::Result<Copied> {
    let target = owner_file::create(dir, name)?;
    let mut buffer = vec![0; COPY_CHUNK];
    let mut offset = 0;
    while offset < size {
        if Instant::now() >= deadline {
            return Ok(Copied::OutOfTime);
        }
        let Some((data, hole)) = next_data(source, offset)? else {
            break;
        };
        let end = hole.min(size).min(data.saturating_add(COPY_CHUNK as u64));
        let Some(wanted) = end.checked_sub(data).filter(|wanted| *wanted > 0) else {
            // Past the size measured, or changed under the copy: the next
            // renewal sees the new version.
            break;
        };
        let wanted = usize::try_from(wanted).unwrap_or(COPY_CHUNK);
        let read = read_at(source, &mut buffer[..wanted], data)?;
        if read == 0 {
            break;
        }
        write_all_at(&target, &buffer[..read], data)?;
        offset = data + read as u64;
    }
    target.set_len(size)?;
    Ok(Copied::Whole)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::{FileExt, MetadataExt};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_copy_writes_only_the_data_and_gives_up_at_its_deadline() {
        let size = 8 << 20;
        let source = tempfile::tempfile().unwrap();
        source.write_all_at(b"start", 0).unwrap();
        source.write_all_at(b"end", size - 3).unwrap();
        let folder = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(folder.path(), ambient_authority()).unwrap();
        let later = Instant::now() + Duration::from_secs(60);

        let whole = copy(&source, size, &dir, "whole", later).unwrap();
        assert!(matches!(whole, Copied::Whole));
        let copied = std::fs::read(folder.path().join("whole")).unwrap();
        assert_eq!(copied.len() as u64, size);
        assert!(copied.starts_with(b"start") && copied.ends_with(b"end"));
        assert!(copied[5..copied.len() - 3].iter().all(|byte| *byte == 0));
        let on_disk = std::fs::metadata(folder.path().join("whole"))
            .unwrap()
            .blocks()
            * 512;
        assert!(on_disk < 1 << 20, "the copy takes {on_disk} bytes on disk");

        let part = copy(&source, 4, &dir, "part", later).unwrap();
        assert!(matches!(part, Copied::Whole));
        assert_eq!(std::fs::read(folder.path().join("part")).unwrap(), b"star");

        let late = copy(&source, size, &dir, "late", Instant::now()).unwrap();
        assert!(matches!(late, Copied::OutOfTime));
    }

    #[test]
    fn a_copy_never_writes_through_what_is_already_at_its_name() {
        let source = tempfile::tempfile().unwrap();
        source.write_all_at(b"data", 0).unwrap();
        let folder = tempfile::tempdir().unwrap();
        let victim = folder.path().join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        std::os::unix::fs::symlink(&victim, folder.path().join("staging")).unwrap();
        let dir = Dir::open_ambient_dir(folder.path(), ambient_authority()).unwrap();
        let later = Instant::now() + Duration::from_secs(60);
        assert!(copy(&source, 4, &dir, "staging", later).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
    }
}
