//! Pulled components, kept by digest in the `oci` folder of the compile
//! cache, and this host's record of what it verified: for each reference,
//! the manifest digest, the component and the signer that passed, tagged
//! under the cache key so that nobody without it can forge one. The record
//! is what lets a plugin serve while its registry is down, and an
//! air-gapped host start from what `resmux pull` fetched. With the cache
//! turned off, components go to a private temporary folder for the life of
//! the process and nothing is recorded.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Provenance, Pulled};

/// The largest record of a pull this host reads back: a few hundred bytes
/// of digests and names.
const MOST_RECORD_BYTES: u64 = 64 * 1024;
use crate::grants::signers::{Accepted, Identity, SignatureRules};
use crate::operator_file::{self, MOST_COMPONENT_BYTES};
use crate::runtime::CompileCache;

/// Where pulled components and their records are kept.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    cache: CompileCache,
    /// The temporary folder used without a cache, removed with the last
    /// clone of the store.
    _temporary: Option<Arc<tempfile::TempDir>>,
}

/// What was verified for one reference.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    provenance: Provenance,
    /// Who signed, in a form that does not depend on file names.
    signer: String,
    /// The trust root the signature was checked under.
    trust: String,
    component_sha256: String,
}

/// A record as stored: its text and its tag.
#[derive(Debug, Serialize, Deserialize)]
struct Tagged {
    record: String,
    tag: String,
}

impl Store {
    /// The store of `cache`.
    pub fn open(cache: &CompileCache) -> Result<Self> {
        match cache.side_dir("oci")? {
            Some(dir) => {
                for folder in ["components", "verified"] {
                    fs::create_dir_all(dir.join(folder))
                        .with_context(|| format!("cannot create {}", dir.join(folder).display()))?;
                }
                Ok(Self {
                    dir,
                    cache: cache.clone(),
                    _temporary: None,
                })
            }
            None => {
                let temporary = tempfile::Builder::new()
                    .prefix("resmux-pulled-")
                    .tempdir()
                    .context("cannot create a folder for pulled components")?;
                fs::create_dir(temporary.path().join("components"))?;
                Ok(Self {
                    dir: temporary.path().to_owned(),
                    cache: cache.clone(),
                    _temporary: Some(Arc::new(temporary)),
                })
            }
        }
    }

    fn component_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("components").join(format!("{sha256}.wasm"))
    }

    /// The stored component whose SHA-256 is `sha256`, if it is there with
    /// those very bytes (a damaged one is removed).
    pub fn component(&self, sha256: &str) -> Option<PathBuf> {
        let path = self.component_path(sha256);
        let (bytes, _) =
            operator_file::read_bytes(&path, MOST_COMPONENT_BYTES, "pulled component").ok()?;
        if hex::encode(Sha256::digest(&bytes)) == sha256 {
            return Some(path);
        }
        tracing::warn!(path = %path.display(), "removing a damaged pulled component");
        let _ = fs::remove_file(&path);
        None
    }

    /// Stores `bytes`, whose SHA-256 is `sha256`, and returns its path.
    pub fn keep_component(&self, sha256: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.component_path(sha256);
        write_aside(
            &self.dir.join("components"),
            &format!("{sha256}.wasm"),
            bytes,
        )
        .with_context(|| format!("cannot store the pulled component {}", path.display()))?;
        Ok(path)
    }

    /// Records that `provenance`'s reference was verified under `rules`,
    /// signed by `signer`, with the component `component_sha256`.
    pub fn record(
        &self,
        provenance: &Provenance,
        signer: &Accepted,
        rules: &SignatureRules,
        component_sha256: &str,
    ) -> Result<()> {
        let name = record_name(&provenance.reference);
        let record = Record {
            provenance: provenance.clone(),
            signer: signer_id(signer)?,
            trust: rules.trust_digest(),
            component_sha256: component_sha256.to_owned(),
        };
        let text = serde_json::to_string(&record)?;
        let Some(tag) = self.cache.vouch(&name, text.as_bytes()) else {
            return Ok(());
        };
        let tagged = serde_json::to_vec(&Tagged {
            record: text,
            tag: tag.to_hex().to_string(),
        })?;
        write_aside(&self.dir.join("verified"), &name, &tagged)
            .with_context(|| format!("cannot record the pull of {}", provenance.reference))
    }

    /// What this host verified for `reference` last, if its record is
    /// intact, its component is stored, and its signer, trust root, log
    /// entry and size pass `rules`.
    pub fn verified(&self, reference: &str, rules: &SignatureRules) -> Result<Option<Pulled>> {
        let name = record_name(reference);
        let record = self.dir.join("verified").join(&name);
        let Ok((stored, _)) = operator_file::read_bytes(&record, MOST_RECORD_BYTES, "pull record")
        else {
            return Ok(None);
        };
        let Ok(tagged) = serde_json::from_slice::<Tagged>(&stored) else {
            tracing::warn!(reference, "ignoring a damaged record of a pull");
            return Ok(None);
        };
        let vouched = self.cache.vouch(&name, tagged.record.as_bytes());
        let intact = blake3::Hash::from_hex(&tagged.tag)
            .ok()
            .is_some_and(|tag| Some(tag) == vouched);
        if !intact {
            tracing::warn!(
                reference,
                "ignoring a record of a pull this host did not write"
            );
            return Ok(None);
        }
        let record: Record = serde_json::from_str(&tagged.record)?;
        let accepted = rules
            .signers
            .iter()
            .map(signer_id)
            .collect::<Result<Vec<_>>>()?;
        let logged_enough = record.provenance.logged || !rules.require_log_entry;
        if record.provenance.reference != reference
            || !accepted.contains(&record.signer)
            || record.trust != rules.trust_digest()
            || !logged_enough
        {
            return Ok(None);
        }
        let Some(component) = self.component(&record.component_sha256) else {
            return Ok(None);
        };
        let size = fs::metadata(&component).map_or(u64::MAX, |metadata| metadata.len());
        if size > rules.max_component_bytes {
            return Ok(None);
        }
        Ok(Some(Pulled {
            component,
            component_sha256: record.component_sha256,
            provenance: record.provenance,
        }))
    }
}

/// The file name of `reference`'s record.
fn record_name(reference: &str) -> String {
    format!("{}.json", blake3::hash(reference.as_bytes()).to_hex())
}

/// A signer's identity: its key's bytes, or its identity and issuer.
fn signer_id(signer: &Accepted) -> Result<String> {
    Ok(match signer {
        Accepted::Key { der, .. } => format!("key {}", hex::encode(Sha256::digest(der))),
        Accepted::Identity(Identity { identity, issuer }) => {
            serde_json::to_string(&(identity, issuer))?
        }
    })
}

/// [`crate::owner_file::replace`] in the folder at `folder`.
fn write_aside(folder: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = Dir::open_ambient_dir(folder, ambient_authority())?;
    crate::owner_file::replace(&dir, name, &[bytes])
}
