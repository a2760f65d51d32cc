//! The operator's ceiling: what may ever be granted to any plugin, from an
//! operator policy file. A plugin whose manifest grants more is refused. The
//! same file can demand locked mode, so a deployment cannot be started
//! unlocked by leaving out a flag.
//!
//! ```toml
//! locked = true                          # as if --locked were always given
//! directories = ["/srv/resmux"]          # file grants must lie inside one
//! variables = ["WEATHER_TOKEN"]          # host variables env grants may read
//! secret_files = ["/run/secrets/db"]     # files env grants may read
//! network = ["https://*.example.com"]    # what network entries may allow
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use super::Policy;
use super::environment::Source;
use super::network::Endpoint;

/// What may ever be granted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    #[serde(default)]
    locked: bool,
    #[serde(default)]
    directories: Vec<PathBuf>,
    #[serde(default)]
    variables: Vec<String>,
    #[serde(default)]
    secret_files: Vec<PathBuf>,
    #[serde(default)]
    network: Vec<Endpoint>,
}

impl Ceiling {
    /// Reads a policy file; its relative paths are taken from its folder, and
    /// every path it names must exist.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read operator policy {}", path.display()))?;
        let ceiling: Self = toml::from_str(&text)
            .with_context(|| format!("invalid operator policy {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let canonical = |paths: Vec<PathBuf>| -> Result<Vec<PathBuf>> {
            paths
                .into_iter()
                .map(|entry| {
                    let joined = base.join(&entry);
                    joined.canonicalize().with_context(|| {
                        format!(
                            "operator policy {} names {}, which cannot be opened",
                            path.display(),
                            joined.display()
                        )
                    })
                })
                .collect()
        };
        Ok(Self {
            locked: ceiling.locked,
            directories: canonical(ceiling.directories)?,
            variables: ceiling.variables,
            secret_files: canonical(ceiling.secret_files)?,
            network: ceiling.network,
        })
    }

    /// Whether the operator demands locked mode.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Refuses a policy that grants what the ceiling does not allow.
    /// `manifest_dir` resolves relative secret-file paths as the grant does.
    pub fn check(&self, policy: &Policy, manifest_dir: &Path) -> Result<()> {
        for grant in &policy.files {
            if !self
                .directories
                .iter()
                .any(|allowed| grant.host.starts_with(allowed))
            {
                bail!(
                    "the operator policy allows no grant of {}",
                    grant.host.display()
                );
            }
        }
        for grant in &policy.env {
            match &grant.source {
                Source::FromEnv(variable) if !self.variables.contains(variable) => {
                    bail!("the operator policy allows no grant of host variable {variable}")
                }
                Source::FromFile(file) => {
                    let path = manifest_dir.join(file).canonicalize()?;
                    if !self.secret_files.contains(&path) {
                        bail!(
                            "the operator policy allows no grant of secret file {}",
                            path.display()
                        );
                    }
                }
                Source::FromEnv(_) => {}
            }
        }
        for entry in policy.network.entries() {
            if !self.network.iter().any(|allowed| allowed.covers(entry)) {
                bail!("the operator policy allows no network grant of {entry}");
            }
        }
        Ok(())
    }
}
