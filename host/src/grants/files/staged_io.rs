//! The file system calls a single granted file is shown with
//! ([`super::single`]) that differ between Unix and Windows: opening the
//! granted file by name without following a link or waiting on a FIFO,
//! linking the opened file itself, telling what lies at a name, and where
//! a file's data lies.

use std::fs::File;
use std::io;

use anyhow::{Context, Result, bail};
use cap_std::fs::Dir;

use crate::file_identity::{self, Identity};
use crate::operator_file;

/// Opens `name` in `folder` for reading without following a symlink and
/// without waiting on a FIFO ([`operator_file::open_unfollowed`]), and only
/// if it is a regular file.
pub fn open_regular(folder: &Dir, name: &str) -> Result<File> {
    let opened = operator_file::open_unfollowed(folder, name)
        .with_context(|| format!("cannot open granted file {name:?} without following links"))?;
    let metadata = opened.metadata()?;
    if !metadata.is_file() {
        bail!(
            "granted file {name:?} is no longer a regular file ({})",
            operator_file::kind(&metadata)
        );
    }
    Ok(opened)
}

/// Hard-links the opened file itself (not whatever its name points at now)
/// as `name` in `dir`, through the name Linux gives its descriptor.
#[cfg(target_os = "linux")]
pub fn link(opened: &File, dir: &Dir, name: &str) -> io::Result<()> {
    use rustix::fs::{AtFlags, CWD};
    use std::os::fd::AsRawFd;
    let descriptor = format!("/proc/self/fd/{}", opened.as_raw_fd());
    rustix::fs::linkat(CWD, descriptor.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW)?;
    Ok(())
}

/// Windows and macOS make hard links by name only (macOS has no name for
/// a descriptor to link from), which a swap between the look and the link
/// could turn to another file: a copy is shown instead.
#[cfg(not(target_os = "linux"))]
pub fn link(_opened: &File, _dir: &Dir, _name: &str) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "only Linux links the file opened, not a name",
    ))
}

/// What lies at `name` in `dir` (a symlink itself, not what it points at).
#[cfg(unix)]
pub fn identity_at(dir: &Dir, name: &str) -> io::Result<Identity> {
    use rustix::fs::AtFlags;
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(file_identity::of_stat(&stat))
}

/// What lies at `name` in `dir`: only a regular file counts.
#[cfg(windows)]
pub fn identity_at(dir: &Dir, name: &str) -> io::Result<Identity> {
    if !dir.symlink_metadata(name)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    file_identity::of(dir.open(name)?.into_std())
}

/// Where the next run of data at or after `offset` in `file` starts and
/// ends (its end may lie past the file's), if any data follows: a hole
/// is skipped.
#[cfg(unix)]
pub fn next_data(file: &File, offset: u64) -> io::Result<Option<(u64, u64)>> {
    use rustix::fs::SeekFrom;
    let data = match rustix::fs::seek(file, SeekFrom::Data(offset)) {
        Ok(data) => data,
        Err(rustix::io::Errno::NXIO) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let hole = rustix::fs::seek(file, SeekFrom::Hole(data))?;
    Ok(Some((data, hole)))
}

/// Windows: everything from `offset` on counts as data.
#[cfg(windows)]
pub fn next_data(_file: &File, offset: u64) -> io::Result<Option<(u64, u64)>> {
    Ok(Some((offset, u64::MAX)))
}

/// Reads from `file` at `offset` into `buffer`.
#[cfg(unix)]
pub fn read_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buffer, offset)
}

/// Reads from `file` at `offset` into `buffer`.
#[cfg(windows)]
pub fn read_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buffer, offset)
}

/// Writes all of `bytes` to `file` at `offset`.
#[cfg(unix)]
pub fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Writes all of `bytes` to `file` at `offset`.
#[cfg(windows)]
pub fn write_all_at(file: &File, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    while !bytes.is_empty() {
        let written = std::os::windows::fs::FileExt::seek_write(file, bytes, offset)?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[written..];
        offset += written as u64;
    }
    Ok(())
}
