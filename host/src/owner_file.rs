//! Creating a file that only resmux's user may read or write: always a new
//! file (never one someone planted at the name), never through a symlink
//! (not even one to nowhere, whose target it would create). The compile
//! cache's key, a single granted file's copy and a grant folder's lock are
//! made this way.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};

/// Creates `name` in the directory `dir` (or, with `rustix::fs::CWD`, at
/// the path `name`) for writing, readable and writable by its owner alone.
pub fn create(dir: impl AsFd, name: impl rustix::path::Arg) -> io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let created = rustix::fs::openat(dir, name, flags, Mode::RUSR | Mode::WUSR)?;
    Ok(File::from(created))
}
