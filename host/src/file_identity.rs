//! Which file an open file or a path is, as the file system knows it: its
//! device and inode on Unix, its volume serial number and file index on
//! Windows. Two equal identities are the same file, whatever names it.

use std::io;
use std::path::Path;

/// A file as the file system knows it.
pub type Identity = (u64, u64);

/// The identity of an open file or directory.
#[cfg(unix)]
pub fn of(file: impl std::os::fd::AsFd) -> io::Result<Identity> {
    Ok(of_stat(&rustix::fs::fstat(file)?))
}

/// The identity a `stat` gives: its fields' widths differ between Unixes
/// (`st_dev` is 32 bits wide and signed on macOS).
#[cfg(unix)]
#[allow(clippy::unnecessary_cast)]
pub fn of_stat(stat: &rustix::fs::Stat) -> Identity {
    (stat.st_dev as u64, stat.st_ino as u64)
}

/// The identity of what `path` names now, following a symlink.
#[cfg(unix)]
pub fn of_path(path: &Path) -> io::Result<Identity> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path)?;
    Ok((metadata.dev(), metadata.ino()))
}

/// The identity of an open file or directory.
#[cfg(windows)]
pub fn of(file: impl std::os::windows::io::AsHandle) -> io::Result<Identity> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Storage::FileSystem::{
        BY_HANDLE_FILE_INFORMATION, GetFileInformationByHandle,
    };
    let handle = file.as_handle();
    let mut information = std::mem::MaybeUninit::<BY_HANDLE_FILE_INFORMATION>::uninit();
    // SAFETY: the handle is open for the call, and the structure is written
    // whole when the call succeeds.
    if unsafe { GetFileInformationByHandle(handle.as_raw_handle(), information.as_mut_ptr()) } == 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call succeeded.
    let information = unsafe { information.assume_init() };
    let index =
        (u64::from(information.nFileIndexHigh) << 32) | u64::from(information.nFileIndexLow);
    Ok((u64::from(information.dwVolumeSerialNumber), index))
}

/// The identity of what `path` names now, following a symlink: opened
/// with no access to its data (a directory too, with backup semantics).
#[cfg(windows)]
pub fn of_path(path: &Path) -> io::Result<Identity> {
    use std::os::windows::fs::OpenOptionsExt;
    use windows_sys::Win32::Storage::FileSystem::FILE_FLAG_BACKUP_SEMANTICS;
    let opened = std::fs::OpenOptions::new()
        .access_mode(0)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(path)?;
    of(&opened)
}
