//! Reading every file resmux takes from outside: components, plugin
//! manifests, the ceiling, the tokens and auth files, the access policy,
//! the secrets, tokens and keys they name, and what a pull stored. Each is
//! opened without waiting (a FIFO with no writer opens at once), must be a
//! regular file (or a link to one), is sized before a byte is read, and is
//! read up to its limit, so that a pipe, a device or a huge file is
//! refused at once by one error that names the file, what it is, and the
//! limit. `serve`, `compile`, `check`, `inspect`, `pull` and `push` all read
//! through here.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

use anyhow::{Context, Result, bail};
use cap_std::fs::Dir;
use serde::de::DeserializeOwned;

/// The largest operator file resmux reads (a manifest, a policy, a key).
pub const MOST_BYTES: u64 = 4 * 1024 * 1024;

/// The largest component resmux reads from a file: the largest plugin
/// built here (Python's, with its interpreter) is 40 MiB.
pub const MOST_COMPONENT_BYTES: u64 = 256 * 1024 * 1024;

/// The text of `path`, which the errors call `what` (for example "tokens
/// file"), of at most [`MOST_BYTES`].
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    let (bytes, _) = read_bytes(path, MOST_BYTES, what)?;
    String::from_utf8(bytes).with_context(|| format!("{what} {} is not UTF-8", path.display()))
}

/// The bytes of the regular file `path` (or the one it links to), of at
/// most `limit`, and its metadata as it was opened; the errors call it
/// `what`.
pub fn read_bytes(path: &Path, limit: u64, what: &str) -> Result<(Vec<u8>, Metadata)> {
    let (file, metadata) = open_regular(path, what)?;
    let too_large = || {
        anyhow::anyhow!(
            "{what} {} is larger than {}, the most resmux reads",
            path.display(),
            size(limit)
        )
    };
    if metadata.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    // It grew while it was read.
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok((bytes, metadata))
}

/// `path` opened for reading without waiting for a writer, if it is a
/// regular file.
fn open_regular(path: &Path, what: &str) -> Result<(File, Metadata)> {
    let cannot_read = || format!("cannot read {what} {}", path.display());
    let file = without_waiting(OpenOptions::new().read(true))
        .open(path)
        .with_context(cannot_read)?;
    let metadata = file.metadata().with_context(cannot_read)?;
    if !metadata.is_file() {
        bail!(
            "{what} {} is {}, not a regular file: resmux does not read it",
            path.display(),
            kind(&metadata)
        );
    }
    Ok((file, metadata))
}

/// Options that open a FIFO without waiting for its writer, and never
/// make a terminal the process's own.
#[cfg(unix)]
fn without_waiting(options: &mut OpenOptions) -> &mut OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    options.custom_flags(flags.bits() as i32)
}

/// Windows opens no pipe or device found in a folder by waiting: a named
/// pipe lives outside every folder, and a device name (`CON`, `NUL`) opens
/// at once and is then refused as not a file.
#[cfg(windows)]
fn without_waiting(options: &mut OpenOptions) -> &mut OpenOptions {
    options
}

/// `name` in `folder`, opened for reading as the entry itself, for a caller
/// that then refuses what is no regular file: on Unix a symbolic link
/// fails to open (the error says so) and a FIFO opens without waiting for
/// a writer. cap-std's `Dir::open` would follow the one and wait on the
/// other.
#[cfg(unix)]
pub fn open_unfollowed(folder: &Dir, name: &str) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match rustix::fs::openat(folder, name, flags, Mode::empty()) {
        Ok(opened) => Ok(File::from(opened)),
        Err(rustix::io::Errno::LOOP) => Err(io::Error::other(
            "it is a symbolic link, which resmux does not follow there",
        )),
        Err(error) => Err(error.into()),
    }
}

/// `name` in `folder`, opened for reading as the entry itself: a symbolic
/// link is opened, not followed (and is then no regular file). cap-std
/// keeps the open inside `folder`; Windows puts no FIFO in a folder.
#[cfg(windows)]
pub fn open_unfollowed(folder: &Dir, name: &str) -> io::Result<File> {
    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    Ok(folder.open_with(name, &options)?.into_std())
}

/// What a file that is not a regular one is.
pub(crate) fn kind(metadata: &Metadata) -> &'static str {
    let kind = metadata.file_type();
    if kind.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        } else if kind.is_char_device() {
            return "a character device";
        } else if kind.is_block_device() {
            return "a block device";
        } else if kind.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

/// `bytes`, in the unit that says it best.
fn size(bytes: u64) -> String {
    match bytes {
        bytes if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) => {
            format!("{} MiB", bytes >> 20)
        }
        bytes if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) => {
            format!("{} KiB", bytes >> 10)
        }
        bytes => format!("{bytes} bytes"),
    }
}

/// Reads and parses the TOML file `path`, which the errors call `what`.
pub fn read_toml<T: DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = read_text(path, what)?;
    toml::from_str(&text).with_context(|| format!("invalid {what} {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_or_an_oversized_file_is_refused_by_name() {
        let error = read_text(Path::new("/dev/zero"), "secret file").unwrap_err();
        assert_eq!(
            error.to_string(),
            "secret file /dev/zero is a character device, not a regular file: resmux does not read it"
        );
        let folder = tempfile::tempdir().unwrap();
        let big = folder.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MOST_BYTES as usize + 1]).unwrap();
        let error = read_toml::<toml::Table>(&big, "manifest").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "manifest {} is larger than 4 MiB, the most resmux reads",
                big.display()
            )
        );
        std::fs::write(&big, vec![b'#'; MOST_BYTES as usize]).unwrap();
        assert!(read_toml::<toml::Table>(&big, "manifest").is_ok());
    }

    #[test]
    fn a_sparse_file_past_the_limit_is_refused_before_a_byte_is_read() {
        let folder = tempfile::tempdir().unwrap();
        let sparse = folder.path().join("sparse.wasm");
        File::create(&sparse).unwrap().set_len(2 << 30).unwrap();
        let error = read_bytes(&sparse, MOST_COMPONENT_BYTES, "component").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "component {} is larger than 256 MiB, the most resmux reads",
                sparse.display()
            )
        );
    }

    #[test]
    fn a_pipe_is_refused_at_once_whether_or_not_a_writer_holds_it() {
        let folder = tempfile::tempdir().unwrap();
        let pipe = folder.path().join("pipe");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &pipe,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        let refusal = format!(
            "token file {} is a FIFO, not a regular file: resmux does not read it",
            pipe.display()
        );
        assert_eq!(
            read_text(&pipe, "token file").unwrap_err().to_string(),
            refusal
        );
        // Read and write: Linux opens a FIFO so without waiting for a reader.
        let _writer = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&pipe)
            .unwrap();
        assert_eq!(
            read_text(&pipe, "token file").unwrap_err().to_string(),
            refusal
        );
    }
}
