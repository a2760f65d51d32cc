//! Creating a file that only resmux's user may read or write: always a new
//! file (never one someone planted at the name), never through a symlink
//! (not even one to nowhere, whose target it would create). The compile
//! cache's key, a single granted file's copy and a grant folder's lock are
//! made this way; compile cache entries and pulled components are written
//! this way aside, then renamed into place ([`replace`]).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// Creates `name` in the directory `dir` for writing, readable and
/// writable by its owner alone (mode 600).
#[cfg(unix)]
pub fn create(dir: &Dir, name: &str) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let created = rustix::fs::openat(dir, name, flags, Mode::RUSR | Mode::WUSR)?;
    Ok(File::from(created))
}

/// Creates `name` in the directory `dir` for writing. Windows has no mode
/// bits: the file takes the access list of its folder, which for resmux's
/// own folders (under the user's profile) is the user's alone. `CREATE_NEW`
/// fails on any entry at the name, a symlink included.
#[cfg(windows)]
pub fn create(dir: &Dir, name: &str) -> io::Result<File> {
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    Ok(dir.open_with(name, &options)?.into_std())
}

/// Creates the file at `path` as [`create`] does, in the folder the path
/// names now.
pub fn create_at(path: &Path) -> io::Result<File> {
    let (Some(folder), Some(name)) = (
        path.parent(),
        path.file_name().and_then(|name| name.to_str()),
    ) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file in a folder", path.display()),
        ));
    };
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    create(&Dir::open_ambient_dir(folder, ambient_authority())?, name)
}

/// Writes `parts`, one after the other, as `name` in `dir`: first to a new
/// file of their own (unique even between two writers of one name at
/// once, as [`create`] makes it), then renamed over `name`, so that no
/// reader ever sees half of them.
pub fn replace(dir: &Dir, name: &str, parts: &[&[u8]]) -> io::Result<()> {
    let temporary = format!(
        ".{name}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    );
    let mut file = create(dir, &temporary)?;
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
        .is_ok_and(|pid| pid != std::process::id() && !process_lives(pid))
}

/// Whether a process `pid` lives (a signal could be sent to it, or it is
/// one resmux may not signal).
#[cfg(unix)]
fn process_lives(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Whether a process `pid` lives: it can be opened and has no exit code
/// yet, or it is one resmux may not open.
#[cfg(windows)]
fn process_lives(pid: u32) -> bool {
    use windows_sys::Win32::Foundation::{
        CloseHandle, ERROR_ACCESS_DENIED, GetLastError, STILL_ACTIVE,
    };
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };
    // SAFETY: plain calls; the handle is closed before returning.
    unsafe {
        let process = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
        if process.is_null() {
            return GetLastError() == ERROR_ACCESS_DENIED;
        }
        let mut code = 0;
        let exited = GetExitCodeProcess(process, &mut code) != 0 && code != STILL_ACTIVE as u32;
        CloseHandle(process);
        !exited
    }
}
