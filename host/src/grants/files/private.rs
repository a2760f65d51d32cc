//! The folders single-file grants are shown from: one per grant, named
//! `resmux-grant-*` in the system's temporary folder, holding the private
//! directory the plugin is given and a `lock` file that this process holds
//! locked (`flock`; on Windows `LockFileEx`, both through std's
//! `File::try_lock`) for as long as the grant lives.
//!
//! A resmux killed with SIGKILL cannot remove its folders, but the kernel
//! drops its locks with it: at start, resmux removes every such folder of
//! its user whose lock it can take ([`remove_stale_folders`]). A lock, unlike
//! a process id, is never reused by another process. The lock file is locked
//! before it gets its name, so a folder found with a `lock` whose lock is
//! free belongs to no living resmux; a folder without one (still being made,
//! or made by an older resmux) is left alone.

use std::fs::File;
use std::io;
use std::path::Path;

use anyhow::{Context, Result};
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::staged_io;
use crate::owner_file;

/// What the folders' names start with.
const PREFIX: &str = "resmux-grant-";
/// The lock file, under the name it gets once locked.
const LOCK: &str = "lock";
/// The lock file while it is being locked.
const LOCKING: &str = "lock.new";
/// The private directory the plugin is given.
const SHOWN: &str = "shown";

/// One grant's folder, removed when the grant goes.
#[derive(Debug)]
pub struct PrivateFolder {
    /// The folder, held open: where a renewed link or copy is made before
    /// it is renamed into the private directory.
    staging: Dir,
    /// The private directory, held open.
    shown: Dir,
    /// Removes the folder when dropped (before the lock is let go).
    _removed: tempfile::TempDir,
    /// Held locked while the grant lives.
    _lock: File,
}

impl PrivateFolder {
    /// A new folder, locked, with an empty private directory.
    pub fn create() -> Result<Self> {
        let removed = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir()
            .context("cannot create a private folder for the file")?;
        let staging = Dir::open_ambient_dir(removed.path(), ambient_authority())
            .context("cannot open the private folder for the file")?;
        let lock = lock(&staging).with_context(|| {
            format!(
                "cannot lock the private folder {} for the file",
                removed.path().display()
            )
        })?;
        staging
            .create_dir(SHOWN)
            .context("cannot create a private directory for the file")?;
        let shown = staging
            .open_dir(SHOWN)
            .context("cannot open the private directory for the file")?;
        Ok(Self {
            staging,
            shown,
            _removed: removed,
            _lock: lock,
        })
    }

    /// Where a renewed link or copy is made, on the private directory's
    /// filesystem but out of the plugin's sight.
    pub fn staging(&self) -> &Dir {
        &self.staging
    }

    /// The private directory the plugin is given.
    pub fn shown(&self) -> &Dir {
        &self.shown
    }
}

/// Creates the lock file, locks it, and only then gives it its name.
fn lock(folder: &Dir) -> io::Result<File> {
    let lock = owner_file::create(folder, LOCKING)?;
    lock.try_lock().map_err(io::Error::from)?;
    folder.rename(LOCKING, folder, LOCK)?;
    Ok(lock)
}

/// Removes the grant folders of this user in the system's temporary folder
/// that no living resmux holds: those whose lock it can take. Only real
/// folders are looked at, never through a symlink.
pub fn remove_stale_folders() {
    let temporary = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&temporary) else {
        return;
    };
    for entry in entries.flatten() {
        let named = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(PREFIX));
        // A directory entry's metadata is the entry's own, not a link's target.
        let ours = || {
            entry
                .metadata()
                .is_ok_and(|metadata| metadata.is_dir() && of_this_user(&metadata))
        };
        if !named || !ours() {
            continue;
        }
        let folder = entry.path();
        // Held while the folder is removed, so two starting resmux processes
        // do not both remove it.
        let Some(_lock) = take_lock(&folder) else {
            continue;
        };
        match std::fs::remove_dir_all(&folder) {
            Ok(()) => tracing::info!(
                "removed {}, the private folder of a single-file grant of a resmux that is gone",
                folder.display()
            ),
            Err(error) => tracing::warn!(
                "cannot remove {}, the private folder of a single-file grant of a resmux that is gone: {error}",
                folder.display()
            ),
        }
    }
}

/// Whether a folder belongs to resmux's user. On Windows the temporary
/// folder is the user's own (under the profile), so any folder in it is.
fn of_this_user(metadata: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    return std::os::unix::fs::MetadataExt::uid(metadata) == rustix::process::geteuid().as_raw();
    #[cfg(windows)]
    return metadata.is_dir();
}

/// The lock of `folder`, if it has a lock file and nobody holds it: the
/// folder opened only if it is no symlink, the lock file only if it is a
/// regular file reached without following one.
fn take_lock(folder: &Path) -> Option<File> {
    let folder = open_unfollowed(folder)?;
    let lock = staged_io::open_regular(&folder, LOCK).ok()?;
    lock.try_lock().ok()?;
    Some(lock)
}

/// The directory at `path`, unless `path` is a symlink.
#[cfg(unix)]
fn open_unfollowed(path: &Path) -> Option<Dir> {
    use rustix::fs::{Mode, OFlags};
    let directory = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = rustix::fs::open(path, directory, Mode::empty()).ok()?;
    Some(Dir::from_std_file(File::from(opened)))
}

/// The directory at `path`, unless `path` is a symlink (or junction).
#[cfg(windows)]
fn open_unfollowed(path: &Path) -> Option<Dir> {
    if !std::fs::symlink_metadata(path).ok()?.is_dir() {
        return None;
    }
    Dir::open_ambient_dir(path, ambient_authority()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_locked_while_it_lives_and_gone_after() {
        let folder = PrivateFolder::create().unwrap();
        let path = folder._removed.path().to_owned();
        assert!(
            take_lock(&path).is_none(),
            "a living folder's lock was taken"
        );
        assert!(path.join(SHOWN).is_dir());
        assert!(!path.join(LOCKING).exists());
        drop(folder);
        assert!(!path.exists());
    }
}
