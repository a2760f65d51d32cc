//! The environment capability: variables a plugin may read, each named in the
//! manifest and taken from the host's environment or from a file, so that a
//! secret never has to be written into the manifest itself. Nothing of the
//! host's environment is inherited otherwise.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use super::{Capability, Ceiling, Grant, SandboxBuilder};
use crate::operator_file;

/// The `[env]` section of a manifest: each variable's name and source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct EnvSection(pub BTreeMap<String, Source>);

impl Capability for EnvSection {
    fn section(&self) -> &'static str {
        "env"
    }

    fn check(&self, ceiling: &Ceiling, manifest_dir: &Path) -> Result<()> {
        for source in self.0.values() {
            match source {
                Source::FromEnv(variable) if !ceiling.variables.contains(variable) => {
                    bail!("the ceiling allows no grant of host variable {variable}")
                }
                Source::FromFile(file) => {
                    let path = manifest_dir.join(file);
                    let path = dunce::canonicalize(&path).with_context(|| {
                        format!("secret file {} cannot be opened", path.display())
                    })?;
                    if !ceiling.secret_files.contains(&path) {
                        bail!(
                            "the ceiling allows no grant of secret file {}",
                            path.display()
                        );
                    }
                }
                Source::FromEnv(_) => {}
            }
        }
        Ok(())
    }

    fn resolve(&self, manifest_dir: &Path) -> Result<Arc<dyn Grant>> {
        let grants = self
            .0
            .iter()
            .map(|(name, source)| EnvGrant::resolve(name.clone(), source.clone(), manifest_dir))
            .collect::<Result<_>>()?;
        Ok(Arc::new(EnvGrants(grants)))
    }
}

/// A plugin's resolved variables.
struct EnvGrants(Vec<EnvGrant>);

impl Grant for EnvGrants {
    fn prepare(&self, _: &Arc<str>, sandbox: &mut SandboxBuilder) -> Result<()> {
        for grant in &self.0 {
            sandbox.wasi.env(&grant.name, &grant.value.0);
        }
        Ok(())
    }

    fn describe(&self) -> (&'static str, Vec<String>) {
        let lines = self
            .0
            .iter()
            .map(|grant| {
                let source = match &grant.source {
                    Source::FromEnv(host) => format!("host variable {host}"),
                    Source::FromFile(file) => format!("file {}", file.display()),
                };
                format!("{} (from {source})", grant.name)
            })
            .collect();
        ("env", lines)
    }

    fn import_status(&self, interface: &str) -> Option<String> {
        let status = match interface {
            "wasi:cli/environment" if self.0.is_empty() => "linked; empty environment",
            "wasi:cli/environment" => "granted variables only",
            _ => return None,
        };
        Some(status.into())
    }
}

/// Where one variable's value comes from: a `[env]` entry of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Source {
    /// A variable of the host's environment, by name.
    FromEnv(String),
    /// A file whose contents (without a trailing newline) are the value;
    /// relative to the manifest's folder.
    FromFile(PathBuf),
}

/// A value that never appears in logs or debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("<redacted>")
    }
}

/// A variable granted to a plugin, with its value resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EnvGrant {
    name: String,
    source: Source,
    value: Secret,
}

impl EnvGrant {
    /// Reads the value of `name` from its source.
    fn resolve(name: String, source: Source, manifest_dir: &Path) -> Result<Self> {
        let valid_name = !name.is_empty()
            && !name.contains('=')
            && !name.chars().any(|c| c.is_control() || c.is_whitespace());
        if !valid_name {
            bail!("environment variable name {name:?} is invalid");
        }
        let value = match &source {
            Source::FromEnv(host_name) => std::env::var(host_name).with_context(|| {
                format!(
                    "variable {name} is granted from host variable {host_name}, which is not set"
                )
            })?,
            Source::FromFile(file) => {
                let path = manifest_dir.join(file);
                let text = read_secret_file(&path).with_context(|| {
                    format!(
                        "variable {name} is granted from {}, which cannot be read",
                        path.display()
                    )
                })?;
                text.strip_suffix('\n').unwrap_or(&text).to_owned()
            }
        };
        Ok(Self {
            name,
            source,
            value: Secret(value),
        })
    }
}

/// The longest secret file read into a variable.
const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// Reads a secret file, which must be a regular file (never a device, FIFO
/// or terminal, and opening it never waits) of at most [`MAX_SECRET_BYTES`].
fn read_secret_file(path: &Path) -> Result<String> {
    let (bytes, _) = operator_file::read_bytes(path, MAX_SECRET_BYTES, "secret file")?;
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("it is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_files_and_redacts_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        let grant = EnvGrant::resolve("TOKEN".into(), Source::FromFile("token".into()), dir.path())
            .unwrap();
        assert_eq!(grant.value.0, "s3cret");
        assert!(!format!("{grant:?}").contains("s3cret"));
    }

    #[test]
    fn refuses_unset_variables_and_bad_names() {
        let here = Path::new(".");
        let unset = Source::FromEnv("RESMUX_TEST_SURELY_UNSET".into());
        let error = EnvGrant::resolve("X".into(), unset, here).unwrap_err();
        assert!(format!("{error:#}").contains("RESMUX_TEST_SURELY_UNSET, which is not set"));
        let bad = EnvGrant::resolve("A=B".into(), Source::FromEnv("PATH".into()), here);
        assert!(bad.is_err());
        let device = Source::FromFile("/dev/zero".into());
        let error = EnvGrant::resolve("X".into(), device, here).unwrap_err();
        assert!(
            format!("{error:#}").contains("not a regular file"),
            "{error:#}"
        );
    }
}
