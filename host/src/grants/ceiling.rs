//! The ceiling: what may ever be granted to any plugin, from the operator's
//! ceiling file (`--ceiling`). A plugin whose manifest grants more is refused. The
//! same file can demand locked mode, so a deployment cannot be started
//! unlocked by leaving out a flag.
//!
//! ```toml
//! locked = true                          # as if --locked were always given
//! directories = ["/srv/resmux"]          # file grants must lie inside one
//! writable = ["/srv/resmux/scratch"]     # read-write grants must lie inside one
//! variables = ["WEATHER_TOKEN"]          # host variables env grants may read
//! secret_files = ["/run/secrets/db"]     # files env grants may read
//! network = ["https://*.example.com"]    # what network entries may allow
//! [signatures]                           # who may sign remote components
//! signers = ["keys/team.pub"]
//! [limits]                               # the most any manifest may set
//! memory_mib = 128
//! timeout_ms = 5000
//! ```
//!
//! A manifest is checked against the ceiling before any of it is resolved:
//! nothing is staged, read or hashed for a manifest that will be refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use super::network::Endpoint;
use super::signers::SignatureCeiling;
use super::{Capability, LimitsSection};

/// What may ever be granted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    #[serde(default)]
    locked: bool,
    #[serde(default)]
    pub(super) directories: Vec<PathBuf>,
    #[serde(default)]
    pub(super) writable: Vec<PathBuf>,
    #[serde(default)]
    pub(super) variables: Vec<String>,
    #[serde(default)]
    pub(super) secret_files: Vec<PathBuf>,
    #[serde(default)]
    pub(super) network: Vec<Endpoint>,
    /// The highest value of each `[limits]` key a manifest may set.
    #[serde(default)]
    limits: BTreeMap<String, u64>,
    /// Who may sign remote components, and what vouches for them.
    signatures: Option<SignatureCeiling>,
}

impl Ceiling {
    /// Reads a ceiling file; its relative paths are taken from its folder, and
    /// every path it names must exist.
    pub fn read(path: &Path) -> Result<Self> {
        let ceiling: Self = crate::operator_file::read_toml(path, "ceiling")?;
        let base = path.parent().unwrap_or(Path::new("."));
        let canonical = |paths: Vec<PathBuf>| -> Result<Vec<PathBuf>> {
            paths
                .into_iter()
                .map(|entry| {
                    let joined = base.join(&entry);
                    dunce::canonicalize(&joined).with_context(|| {
                        format!(
                            "ceiling {} names {}, which cannot be opened",
                            path.display(),
                            joined.display()
                        )
                    })
                })
                .collect()
        };
        let known: Vec<&str> = LimitsSection::default()
            .by_key()
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        if let Some(unknown) = ceiling
            .limits
            .keys()
            .find(|key| !known.contains(&key.as_str()))
        {
            bail!(
                "ceiling {} caps unknown limit {unknown:?}; limits are {}",
                path.display(),
                known.join(", ")
            );
        }
        Ok(Self {
            locked: ceiling.locked,
            directories: canonical(ceiling.directories)?,
            writable: canonical(ceiling.writable)?,
            variables: ceiling.variables,
            secret_files: canonical(ceiling.secret_files)?,
            network: ceiling.network,
            limits: ceiling.limits,
            signatures: ceiling.signatures.map(|section| section.rooted_at(base)),
        })
    }

    /// The `[signatures]` section, if the ceiling has one.
    pub fn signatures(&self) -> Option<&SignatureCeiling> {
        self.signatures.as_ref()
    }

    /// Whether the operator demands locked mode.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Refuses a manifest whose capabilities ask for what the ceiling does
    /// not allow. `manifest_dir` resolves relative paths as the grants will;
    /// nothing is resolved.
    pub fn check(&self, capabilities: &[&dyn Capability], manifest_dir: &Path) -> Result<()> {
        for capability in capabilities {
            capability.check(self, manifest_dir)?;
        }
        Ok(())
    }

    /// The highest value the ceiling allows for the limit `key`, if it caps it.
    pub(super) fn most_for(&self, key: &str) -> Option<u64> {
        self.limits.get(key).copied()
    }
}
