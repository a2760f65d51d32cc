//! Reading the operator's files: plugin manifests, the ceiling, the tokens
//! and auth files, the access policy, and the secrets, tokens and keys they
//! name. Each is read whole up to [`MOST_BYTES`] and refused past it, so
//! that a path naming a device, a pipe or a huge file is an error that names
//! it, not a read without end; every error names the file.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;

/// The largest operator file resmux reads.
pub const MOST_BYTES: u64 = 4 * 1024 * 1024;

/// The text of `path`, which the errors call `what` (for example "tokens
/// file"). A pipe with no writer reads as empty rather than waiting for one.
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    let cannot_read = || format!("cannot read {what} {}", path.display());
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .with_context(cannot_read)?;
    let mut text = String::new();
    file.take(MOST_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(cannot_read)?;
    if text.len() as u64 > MOST_BYTES {
        bail!(
            "{what} {} is larger than {} MiB",
            path.display(),
            MOST_BYTES / (1024 * 1024)
        );
    }
    Ok(text)
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
            "secret file /dev/zero is larger than 4 MiB"
        );
        let folder = tempfile::tempdir().unwrap();
        let big = folder.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MOST_BYTES as usize + 1]).unwrap();
        let error = read_toml::<toml::Table>(&big, "manifest").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("manifest {} is larger than 4 MiB", big.display())
        );
        std::fs::write(&big, vec![b'#'; MOST_BYTES as usize]).unwrap();
        assert!(read_toml::<toml::Table>(&big, "manifest").is_ok());
    }

    #[test]
    fn a_pipe_without_a_writer_reads_as_empty_at_once() {
        let folder = tempfile::tempdir().unwrap();
        let pipe = folder.path().join("pipe");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &pipe,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        assert_eq!(read_text(&pipe, "token file").unwrap(), "");
    }
}
