//! The on-disk cache of compiled components.
//!
//! A component is compiled once; the machine code is stored under a key made of
//! the component's SHA-256 digest and the engine's compatibility hash, so a new
//! resmux build or different engine settings never load stale code. Entries are
//! written to a temporary name and renamed into place, so a crash never leaves a
//! half-written entry behind; the temporary files of a process that died are
//! removed when the cache is opened.
//!
//! A cache that cannot be written (a full disk, a read-only or vanished
//! directory) costs only time: components are compiled in memory, and the
//! failure is logged once, not once per component.
//!
//! The entries are native code that resmux runs, so the cache must not be a
//! way in:
//! - the directory must belong to resmux's user and be writable by nobody
//!   else, or resmux refuses to start with it; an entry that is not a regular
//!   file of resmux's user, writable by it alone, is ignored and recompiled;
//! - every entry carries a keyed BLAKE3 tag (a MAC) under a key kept outside
//!   the cache (in a file of resmux's user that nobody else may read), so an
//!   artefact planted or altered by anyone without the key is recompiled,
//!   never run. BLAKE3 rather than HMAC-SHA256: a restart reads tens of
//!   megabytes of machine code, and tagging it was a quarter of the time.

use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use memmap2::{Mmap, MmapOptions};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Bytes of an entry's tag, before its machine code.
const TAG_BYTES: usize = 32;
/// The extension of an entry: entries of an older tag (`cwasm`, HMAC-SHA256)
/// are left alone rather than refused one by one.
const ENTRY_KIND: &str = "b3.cwasm";

/// Where a component's machine code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled now (and stored, when a cache directory is set).
    Compiled,
    /// Loaded from the cache.
    Cached,
    /// Already loaded for another mount of the same bytes, and shared.
    Shared,
}

/// A directory of compiled components and the key that vouches for them, or
/// none to always compile.
#[derive(Debug, Clone)]
pub struct CompileCache {
    stored: Option<Stored>,
}

#[derive(Clone)]
struct Stored {
    dir: PathBuf,
    key: [u8; 32],
    /// Set once storing or opening the directory has failed and been logged.
    failed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Stored")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CompileCache {
    /// A cache that compiles every time and stores nothing.
    pub fn disabled() -> Self {
        Self { stored: None }
    }

    /// The cache in `dir`, vouched for by the key in `key_file` (created
    /// when missing). Refuses a directory or key file that anyone but
    /// resmux's user could change, or a key file anyone else could read.
    /// A directory or key file that cannot be made (a read-only or full
    /// disk) leaves the cache disabled, with a warning: resmux serves,
    /// compiling in memory.
    pub fn open(dir: &Path, key_file: &Path) -> Result<Self> {
        if let Err(error) = create_private_dir(dir) {
            return Ok(Self::unavailable(format_args!(
                "cannot create cache directory {}: {error}",
                dir.display()
            )));
        }
        let metadata = fs::metadata(dir)
            .with_context(|| format!("cannot read cache directory {}", dir.display()))?;
        only_ours(&metadata, 0o022).with_context(|| {
            format!(
                "refusing compile cache directory {}: its entries are run as native code",
                dir.display()
            )
        })?;
        if fs::symlink_metadata(key_file).is_err()
            && let Err(error) = create_key(key_file)
        {
            return Ok(Self::unavailable(format_args!("{error:#}")));
        }
        let key = read_key(key_file)?;
        remove_left_by_the_dead(dir);
        Ok(Self {
            stored: Some(Stored {
                dir: dir.to_owned(),
                key,
                failed: Arc::default(),
            }),
        })
    }

    fn unavailable(reason: std::fmt::Arguments<'_>) -> Self {
        tracing::warn!("the compile cache is unavailable ({reason}): compiling in memory");
        Self::disabled()
    }

    /// The folder `name` beside the compiled entries, for what else resmux
    /// keeps with them (pulled components), made private when missing;
    /// none when nothing is cached.
    pub fn side_dir(&self, name: &str) -> Result<Option<PathBuf>> {
        let Some(stored) = &self.stored else {
            return Ok(None);
        };
        let dir = stored.dir.join(name);
        create_private_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let metadata =
            fs::metadata(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
        only_ours(&metadata, 0o022)
            .with_context(|| format!("refusing {}: it vouches for components", dir.display()))?;
        Ok(Some(dir))
    }

    /// A tag over `record`, stored as `name`, under the cache key: what
    /// only this host (or another holding its key) can have written. None
    /// when nothing is cached.
    pub fn vouch(&self, name: &str, record: &[u8]) -> Option<blake3::Hash> {
        self.stored.as_ref().map(|stored| stored.tag(name, record))
    }

    /// Whether the cache holds an entry for the component whose SHA-256 is
    /// `digest`, compiled by `engine`; its tag is checked only when it is
    /// loaded.
    pub fn holds(&self, engine: &Engine, digest: &str) -> bool {
        self.stored
            .as_ref()
            .is_some_and(|stored| stored.dir.join(entry_name(engine, digest)).is_file())
    }

    /// Returns the component for `bytes`, whose SHA-256 is `digest`.
    pub fn component(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Component, Origin)> {
        let Some(stored) = &self.stored else {
            return Ok((Component::new(engine, bytes)?, Origin::Compiled));
        };
        let dir = &stored.dir;
        let cache = match Dir::open_ambient_dir(dir, ambient_authority()) {
            Ok(cache) => cache,
            Err(error) => {
                stored.failed(format_args!("cannot open {}: {error}", dir.display()));
                return Ok((Component::new(engine, bytes)?, Origin::Compiled));
            }
        };
        let entry = entry_name(engine, digest);
        match stored.load(&cache, &entry) {
            Ok(Some(tagged)) => {
                // SAFETY: the entry carries a valid tag under our key, so this
                // process (or an earlier one with the key) wrote it from this
                // engine's own output; it is keyed by the engine's
                // compatibility hash, and wasmtime checks the header too.
                match unsafe { Component::deserialize(engine, &tagged[TAG_BYTES..]) } {
                    Ok(component) => return Ok((component, Origin::Cached)),
                    Err(error) => tracing::warn!(
                        entry,
                        "ignoring unusable compile cache entry in {}: {error:#}",
                        dir.display()
                    ),
                }
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(
                entry,
                "ignoring compile cache entry in {}: {error:#}; compiling afresh",
                dir.display()
            ),
        }
        let compiled = engine.precompile_component(bytes)?;
        if let Err(error) = stored.store(&cache, &entry, &compiled) {
            stored.failed(format_args!(
                "cannot store compiled components in {}: {error}",
                dir.display()
            ));
        }
        // SAFETY: `compiled` was produced by this engine a moment ago.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        Ok((component, Origin::Compiled))
    }
}

impl Stored {
    /// The tag of `compiled` stored as `entry`: BLAKE3 keyed with the
    /// cache key, over the entry's name (its length first) and the code.
    fn tag(&self, entry: &str, compiled: &[u8]) -> blake3::Hash {
        let mut mac = blake3::Hasher::new_keyed(&self.key);
        mac.update(&(entry.len() as u64).to_le_bytes());
        mac.update(entry.as_bytes());
        mac.update(compiled);
        mac.finalize()
    }

    /// `entry` as stored (its tag, then its machine code from
    /// [`TAG_BYTES`] on), if it is there and its tag is good. The file is
    /// mapped, not read: tens of megabytes are copied once, into the
    /// engine's code memory, instead of twice.
    fn load(&self, cache: &Dir, entry: &str) -> Result<Option<Mmap>> {
        // Neither a link nor a FIFO planted as the entry can hold a compile.
        let file = match crate::operator_file::open_unfollowed(cache, entry) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => bail!("cannot open it: {error}"),
        };
        let metadata = file.metadata()?;
        if !metadata.is_file() {
            bail!("it is not a regular file");
        }
        only_ours(&metadata, 0o022)?;
        // SAFETY: the entry is a regular file of resmux's user that nobody
        // else may write, in a directory nobody else may write, and resmux
        // writes entries aside and renames them into place, never changing
        // one in place. Only a process of resmux's own user (which can read
        // the key anyway) could change it while it is mapped: resmux would
        // then copy bytes other than those it tagged, or stop on SIGBUS if
        // the file were cut short. docs/operators.md says not to edit the cache in place.
        let tagged = unsafe { MmapOptions::new().populate().map(&file)? };
        if tagged.len() < TAG_BYTES {
            bail!("it is too short to carry a tag");
        }
        let (tag, compiled) = tagged.split_at(TAG_BYTES);
        let tag: [u8; TAG_BYTES] = tag.try_into().expect("split at the tag's length");
        // `Hash` compares in constant time.
        if self.tag(entry, compiled) != blake3::Hash::from_bytes(tag) {
            bail!("its tag does not match: it was not written by resmux");
        }
        Ok(Some(tagged))
    }

    /// Logs the first failure to use the directory; later ones only at
    /// debug level.
    fn failed(&self, what: std::fmt::Arguments<'_>) {
        if self.failed.swap(true, Ordering::Relaxed) {
            tracing::debug!("{what}");
        } else {
            tracing::warn!("{what}; compiling in memory, logged once");
        }
    }

    fn store(&self, cache: &Dir, entry: &str, compiled: &[u8]) -> std::io::Result<()> {
        let tag = self.tag(entry, compiled);
        // Mode 600 whatever the umask: a group-writable entry is refused.
        crate::owner_file::replace(cache, entry, &[tag.as_bytes(), compiled])
    }
}

/// Refuses what is not owned by resmux's user, or has any of `forbidden`
/// mode bits set.
#[cfg(unix)]
fn only_ours(metadata: &fs::Metadata, forbidden: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let user = rustix::process::geteuid().as_raw();
    if metadata.uid() != user {
        bail!(
            "it belongs to user {}, not to resmux's user {user}",
            metadata.uid()
        );
    }
    let mode = metadata.mode() & 0o777;
    if mode & forbidden != 0 {
        bail!("its mode {mode:o} lets others change it");
    }
    Ok(())
}

/// Windows keeps who may change a file in its access list, inherited from
/// the folder: the cache lies under the user's own profile, which only the
/// user (and administrators) may change. Nothing more is checked here.
#[cfg(windows)]
fn only_ours(_metadata: &fs::Metadata, _forbidden: u32) -> Result<()> {
    Ok(())
}

/// Creates `dir` and its missing parents, each readable by resmux's user
/// alone (mode 700; on Windows, the parent's access list).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Removes the temporary files of writers that died in the cache `dir`.
fn remove_left_by_the_dead(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(crate::owner_file::left_by_the_dead)
            && fs::remove_file(entry.path()).is_ok()
        {
            tracing::info!(
                "removed {}, left by a resmux that died writing it",
                entry.path().display()
            );
        }
    }
}

/// The cache key in `path`, which must be a file of resmux's user alone.
fn read_key(path: &Path) -> Result<[u8; 32]> {
    let refuse = |reason: &str| {
        anyhow::anyhow!(
            "refusing compile cache key {}: {reason}; whoever has it can make resmux run native code",
            path.display()
        )
    };
    let metadata = fs::symlink_metadata(path)
        .with_context(|| format!("cannot read compile cache key {}", path.display()))?;
    if !metadata.is_file() {
        return Err(refuse("it is not a regular file"));
    }
    // Read within the bounds every outside file gets: swapped since the
    // look above for a FIFO or a huge file, it is refused, not waited on
    // or read whole; and its owner and mode are those of the file read.
    let (key, opened) = crate::operator_file::read_bytes(path, 32, "compile cache key")?;
    if only_ours(&opened, 0o077).is_err() {
        return Err(refuse("it must belong to resmux's user with mode 600"));
    }
    key.try_into()
        .map_err(|_| refuse("it does not hold 32 bytes"))
}

/// Writes 32 random bytes (mode 0600) to `path`, unless another process got
/// there first: the key is written aside, to a file of its own folder that
/// this call creates ([`create_aside`]), and linked into place whole.
fn create_key(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent() {
        create_private_dir(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let aside = path.with_extension(format!(
        "{}.{:016x}.new",
        std::process::id(),
        rand::random::<u64>()
    ));
    let key: [u8; 32] = rand::random();
    let mut file = create_aside(&aside)
        .with_context(|| format!("cannot create compile cache key {}", aside.display()))?;
    file.write_all(&key)?;
    drop(file);
    let linked = fs::hard_link(&aside, path);
    let _ = fs::remove_file(&aside);
    match linked {
        Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => Err(error)
            .with_context(|| format!("cannot create compile cache key {}", path.display())),
        _ => Ok(()),
    }
}

/// Creates `path` as the key's file aside ([`crate::owner_file::create`]).
fn create_aside(path: &Path) -> std::io::Result<File> {
    crate::owner_file::create_at(path)
}

/// The name of the entry of the component whose SHA-256 is `digest`,
/// compiled by `engine`.
fn entry_name(engine: &Engine, digest: &str) -> String {
    format!("{digest}-{}.{ENTRY_KIND}", engine_key(engine))
}

/// A short stable digest of everything that makes compiled code compatible
/// with this engine.
fn engine_key(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}

/// Feeds `Hash` output into SHA-256, which, unlike `DefaultHasher`, is stable.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("SHA-256 has 32 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_key_is_never_written_through_what_was_planted_at_its_temporary_name() {
        let folder = tempfile::tempdir().unwrap();
        let victim = folder.path().join("victim");
        fs::write(&victim, b"untouched").unwrap();
        let planted = folder.path().join("cache-key.1.new");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let refused = create_aside(&planted).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&victim).unwrap(), b"untouched");

        // A link to nowhere is not followed to create its target either.
        let target = folder.path().join("made-through-the-link");
        let dangling = folder.path().join("cache-key.2.new");
        std::os::unix::fs::symlink(&target, &dangling).unwrap();
        assert!(create_aside(&dangling).is_err());
        assert!(
            fs::symlink_metadata(&target).is_err(),
            "the link was followed"
        );

        // A plain file planted there is not written either.
        let file = folder.path().join("cache-key.3.new");
        fs::write(&file, b"planted").unwrap();
        assert!(create_aside(&file).is_err());
        assert_eq!(fs::read(&file).unwrap(), b"planted");
    }

    #[test]
    fn a_missing_key_is_made_private_and_then_kept() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("state/cache-key");
        create_key(&path).unwrap();
        let made = read_key(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_key(&path).unwrap(), made);
        let left: Vec<_> = fs::read_dir(folder.path().join("state"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["cache-key"], "a temporary file was left behind");
    }
}
