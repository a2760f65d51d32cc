//! Creating a file that only resmux's user may read or write: always a new
//! file (never one someone planted at the name), never through a symlink
//! (not even one to nowhere, whose target it would create). The compile
//! cache's key, a single granted file's copy and a grant folder's lock are
//! made this way; compile cache entries and pulled components are written
//! this way aside, then renamed into place ([`replace`]).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;

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
    let written = parts.iter().try_for_each(|part| file.write_all(part));
    drop(file);
    let placed = written.and_then(|()| dir.rename(&temporary, dir, name));
    if placed.is_err() {
        // A full disk leaves no part of the file behind.
        let _ = dir.remove_file(&temporary);
    }
    placed
}

/// Whether `name` is a file [`replace`] was writing when its process died:
/// its temporary name, with the process id of a process that is gone.
pub fn left_by_the_dead(name: &str) -> bool {
    let Some(inner) = name
        .strip_prefix('.')
        .and_then(|name| name.strip_suffix(".tmp"))
    else {
        return false;
    };
    let mut parts = inner.rsplitn(3, '.');
    let (Some(_random), Some(pid), Some(_name)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    pid.parse::<u32>()
        .is_ok_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists())
}
