//! Files a plugin locates, opened for resmux to read on its behalf: only
//! below the granted directory (never above it, never across a mount point
//! inside it, never through `/proc` magic links), only on a local disk or
//! memory filesystem, only regular files, and without waiting on anything (a
//! FIFO's writer, a lease's holder). resmux reads these on its runtime's own
//! threads, so nothing here may hang: a granted directory on a network or
//! FUSE filesystem, whose operations can, is never read this way, and its
//! files go to the plugin's `read` on a thread of its own.

use cap_std::fs::Dir;

use super::super::LocatedFile;

/// Filesystems (by `statfs` magic) whose operations answer from local
/// storage or memory.
#[cfg(target_os = "linux")]
const LOCAL_FILESYSTEMS: &[u32] = &[
    0x0000_EF53, // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x0102_1994, // tmpfs
    0x8584_58F6, // ramfs
    0x794C_7630, // overlayfs
    0x2FC1_2FC1, // zfs
    0xF2F5_2010, // f2fs
    0xCA45_1A4E, // bcachefs
];

/// Whether the files below `dir` (any descriptor of a directory or file)
/// live on a local filesystem: resmux may read them on its own threads, and
/// the kernel reports every change to them (a network filesystem's changes
/// made on another machine are not reported).
#[cfg(target_os = "linux")]
pub fn on_local_filesystem(dir: impl std::os::fd::AsFd) -> bool {
    // The magic is 32 bits wide, in a field that is wider on most targets.
    rustix::fs::fstatfs(dir).is_ok_and(|stat| LOCAL_FILESYSTEMS.contains(&(stat.f_type as u32)))
}

/// Opens `below`, a relative path under `dir`, if it is a regular file
/// reached without leaving `dir` or its filesystem.
#[cfg(target_os = "linux")]
pub fn open(dir: &Dir, below: &str) -> Option<LocatedFile> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::fs::File;
    let opened = rustix::fs::openat2(
        dir,
        below,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_XDEV | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let file = File::from(opened);
    let metadata = file.metadata().ok()?;
    metadata.is_file().then(|| LocatedFile {
        file,
        size: metadata.len(),
    })
}

/// Elsewhere no call opens a path beneath a directory without leaving it
/// (Linux's `openat2` with `RESOLVE_BENEATH`): no directory counts as local,
/// and a plugin's files reach it through its own `read`, on the threads of
/// calls that may block.
#[cfg(not(target_os = "linux"))]
pub fn on_local_filesystem<T>(_dir: T) -> bool {
    false
}

/// Never called where no directory is local; a file found so is left to
/// the plugin's `read`.
#[cfg(not(target_os = "linux"))]
pub fn open(_dir: &Dir, _below: &str) -> Option<LocatedFile> {
    None
}
