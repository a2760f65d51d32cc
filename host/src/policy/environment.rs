//! The environment capability: variables a plugin may read, each named in the
//! manifest and taken from the host's environment or from a file, so that a
//! secret never has to be written into the manifest itself. Nothing of the
//! host's environment is inherited otherwise.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use wasmtime_wasi::WasiCtxBuilder;

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
pub struct EnvGrant {
    pub name: String,
    pub source: Source,
    value: Secret,
}

impl EnvGrant {
    /// Reads the value of `name` from its source.
    pub fn resolve(name: String, source: Source, manifest_dir: &Path) -> Result<Self> {
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
                let text = std::fs::read_to_string(&path).with_context(|| {
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

    /// Sets the variable in a new instance's WASI context.
    pub fn configure(&self, wasi: &mut WasiCtxBuilder) {
        wasi.env(&self.name, &self.value.0);
    }
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
    }
}
