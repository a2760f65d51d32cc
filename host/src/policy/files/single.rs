//! A single granted file, shown to the plugin through a private directory
//! that holds only it: WASI preopens directories, and preopening the file's
//! own folder would expose its neighbours.
//!
//! The private directory holds a hard link to the file, so the plugin reads
//! (and, with `read-write`, writes) the file itself. When no link can be made
//! (the file lies on another filesystem, or the kernel's hard-link protection
//! forbids it), a read-only grant falls back to a copy; a read-write grant is
//! refused, since writes to a copy would be lost. Before each
//! instance starts, the link or copy is renewed if the host file was replaced
//! or changed since.

use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{Context, Result};

use super::Access;

/// One staged file.
#[derive(Debug)]
pub struct SingleFile {
    source: PathBuf,
    guest_dir: String,
    dir: tempfile::TempDir,
    staged: PathBuf,
    state: Mutex<Staged>,
}

/// How the private directory shows the file, and which version it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Staged {
    Link {
        device: u64,
        inode: u64,
    },
    Copy {
        inode: u64,
        len: u64,
        modified: Option<SystemTime>,
    },
}

impl Staged {
    fn of(metadata: &Metadata, linked: bool) -> Self {
        if linked {
            Self::Link {
                device: metadata.dev(),
                inode: metadata.ino(),
            }
        } else {
            Self::Copy {
                inode: metadata.ino(),
                len: metadata.len(),
                modified: metadata.modified().ok(),
            }
        }
    }

    fn is_link(self) -> bool {
        matches!(self, Self::Link { .. })
    }
}

impl SingleFile {
    /// Creates the private directory for `source`, shown at guest path `guest`.
    pub fn stage(source: &Path, guest: &str, access: Access) -> Result<Self> {
        let (guest_dir, name) = guest
            .rsplit_once('/')
            .filter(|(_, name)| !name.is_empty() && *name != "." && *name != "..")
            .with_context(|| format!("guest path {guest:?} of a file grant must name a file"))?;
        let guest_dir = if guest_dir.is_empty() { "/" } else { guest_dir };
        let dir = tempfile::Builder::new()
            .prefix("resmux-grant-")
            .tempdir()
            .context("cannot create a private directory for the file")?;
        let staged = dir.path().join(name);
        let metadata = fs::metadata(source)?;
        let linked = match fs::hard_link(source, &staged) {
            Ok(()) => true,
            Err(error) if access == Access::ReadWrite => {
                return Err(error).with_context(|| {
                    format!(
                        "a read-write file grant needs a hard link to the file from {} (same filesystem, and a file resmux may link); grant its directory instead",
                        std::env::temp_dir().display()
                    )
                });
            }
            Err(_) => {
                fs::copy(source, &staged)?;
                false
            }
        };
        Ok(Self {
            source: source.to_owned(),
            guest_dir: guest_dir.to_owned(),
            dir,
            staged,
            state: Mutex::new(Staged::of(&metadata, linked)),
        })
    }

    pub fn guest_dir(&self) -> &str {
        &self.guest_dir
    }

    /// Renews the link or copy if the host file changed, and returns the
    /// private directory to preopen.
    pub fn refresh(&self) -> Result<&Path> {
        let metadata = fs::metadata(&self.source)?;
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let current = Staged::of(&metadata, state.is_link());
        let staged_missing = !self.staged.exists();
        if current != *state || staged_missing {
            let fresh = self.dir.path().join(".staging");
            let _ = fs::remove_file(&fresh);
            if state.is_link() {
                fs::hard_link(&self.source, &fresh)?;
            } else {
                fs::copy(&self.source, &fresh)?;
            }
            fs::rename(&fresh, &self.staged)?;
            *state = current;
        }
        Ok(self.dir.path())
    }
}
