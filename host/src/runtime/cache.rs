//! The on-disk cache of compiled components.
//!
//! A component is compiled once; the machine code is stored under a key made of
//! the component's SHA-256 digest and the engine's compatibility hash, so a new
//! resmux build or different engine settings never load stale code. Entries are
//! written to a temporary name and renamed into place, so a crash never leaves a
//! half-written entry behind.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use anyhow::{Context, Result};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where a component's machine code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled now (and stored, when a cache directory is set).
    Compiled,
    /// Loaded from the cache.
    Cached,
}

/// A directory of compiled components, or none to always compile.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: Option<PathBuf>,
}

impl CompileCache {
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self { dir }
    }

    /// Returns the component for `bytes`, whose SHA-256 is `digest`.
    pub fn component(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Component, Origin)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, bytes)?, Origin::Compiled));
        };
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
        let cache = Dir::open_ambient_dir(dir, ambient_authority())
            .with_context(|| format!("cannot open cache directory {}", dir.display()))?;
        let entry = format!("{digest}-{}.cwasm", engine_key(engine));
        if let Ok(compiled) = cache.read(&entry) {
            // SAFETY: entries are written only by `store` below, from this
            // engine's own output, and are keyed by the engine's compatibility
            // hash; wasmtime also checks the header before use.
            match unsafe { Component::deserialize(engine, &compiled) } {
                Ok(component) => return Ok((component, Origin::Cached)),
                Err(error) => tracing::warn!(
                    entry,
                    "ignoring unusable compile cache entry in {}: {error:#}",
                    dir.display()
                ),
            }
        }
        let compiled = engine.precompile_component(bytes)?;
        if let Err(error) = store(&cache, &entry, &compiled) {
            tracing::warn!(
                entry,
                "cannot store compiled component in {}: {error:#}",
                dir.display()
            );
        }
        // SAFETY: `compiled` was produced by this engine a moment ago.
        let component = unsafe { Component::deserialize(engine, &compiled)? };
        Ok((component, Origin::Compiled))
    }
}

fn store(cache: &Dir, entry: &str, compiled: &[u8]) -> std::io::Result<()> {
    let temporary = format!(".{entry}.{}.tmp", std::process::id());
    cache.write(&temporary, compiled)?;
    cache.rename(&temporary, cache, entry)
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
