//! Creating a file that only resmux's user may read or write: always a new
//! file (never one someone planted at the name), never through a symlink
//! (not even one to nowhere, whose target it would create). The compile
//! cache's key, a single granted file's copy and a grant folder's lock are
//! made this way; compile cache entries and pulled components are written
//! this way aside, then renamed into place ([`replace`]).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};

/// Creates `name` in the directory `dir` (or, with `rustix::fs::CWD`, at
/// the path `name`) for writing, readable and writable by its owner alone.
pub fn create(dir: impl AsFd, name: impl rustix::path::Arg) -> io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let created = rustix::fs::openat(dir, name, flags, Mode::RUSR | Mode::WUSR)?;
    Ok(File::from(created))
}

/// Writes `parts`, one after the other, as `name` in `dir`: first to a new
/// file of their own (unique even between two writers of one name at
/// once, as [`create`] makes it), then renamed over `name`, so that no
/// reader ever sees half of them.
pub fn replace(dir: &cap_std::fs::Dir, name: &str, parts: &[&[u8]]) -> io::Result<()> {
    let temporary = format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    );
    let mut file = create(dir, temporary.as_str())?;
    for part in parts {
        file.write_all(part)?;
    }
    drop(file);
    dir.rename(&temporary, dir, name)
}
