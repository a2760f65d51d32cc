//! `NAME.toml`, the manifest an operator puts beside `NAME.wasm`: the scheme,
//! the plugin's configuration, its grants and its limits. Unknown keys are
//! errors, so a typo never silently drops a setting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;

use crate::grants::environment::EnvSection;
use crate::grants::files::FilesSection;
use crate::grants::signers::{PullSection, Signer};
use crate::grants::{Capability, Grants, LimitsSection, NetworkGrant};
use crate::namespace::MountSettings;

/// The shortest interval between two change reports of one plugin.
const MIN_CHANGE_INTERVAL_MS: u64 = 100;

/// One plugin's manifest.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The URI scheme to serve under; defaults to the file's stem.
    pub scheme: Option<String>,
    /// The component to run, relative to the manifest; defaults to the
    /// `.wasm` beside it. Lets one component be mounted twice.
    pub component: Option<PathBuf>,
    /// The component's reference in an OCI registry
    /// (`registry/repository:tag`, optionally `@sha256:…`), instead of a
    /// file.
    pub oci: Option<String>,
    /// Who must have signed the component `oci` names.
    pub signed_by: Option<Signer>,
    /// How the component `oci` names is pulled and checked.
    #[serde(default)]
    pub pull: PullSection,
    /// The component's expected SHA-256, in hex; a mismatch refuses the plugin.
    pub sha256: Option<String>,
    /// Key/value pairs handed to the plugin's `init`.
    #[serde(default)]
    pub config: BTreeMap<String, toml::Value>,
    /// Directories and files the plugin may read (or write).
    #[serde(default)]
    pub files: FilesSection,
    /// Environment variables the plugin may read, by name, with the source of
    /// each value.
    #[serde(default)]
    pub env: EnvSection,
    /// Hosts and ports the plugin may reach.
    #[serde(default)]
    pub network: NetworkGrant,
    /// Limits overriding the defaults.
    #[serde(default)]
    pub limits: LimitsSection,
    /// How the host follows the plugin's changes.
    #[serde(default)]
    pub changes: ChangeSettings,
}

/// The `[changes]` section: how often the plugin's change report is asked
/// for while a client is subscribed to one of its resources, and whether its
/// listing changes only with its granted files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChangeSettings {
    pub interval_ms: u64,
    /// The listing depends on the granted files alone (not on the clock,
    /// the network or anything else): a walked listing serves later walks
    /// until something in the grants changes.
    pub listing_follows_files: bool,
}

impl Default for ChangeSettings {
    fn default() -> Self {
        Self {
            interval_ms: 5_000,
            listing_follows_files: false,
        }
    }
}

impl Manifest {
    /// Reads and parses a manifest file.
    pub fn read(path: &Path) -> Result<Self> {
        crate::operator_file::read_toml(path, "manifest")
    }

    /// The configuration as strings, as the contract hands it to plugins.
    pub fn config_pairs(&self) -> Result<Vec<(String, String)>> {
        self.config
            .iter()
            .map(|(key, value)| {
                let text = match value {
                    toml::Value::String(text) => text.clone(),
                    toml::Value::Integer(_)
                    | toml::Value::Float(_)
                    | toml::Value::Boolean(_)
                    | toml::Value::Datetime(_) => value.to_string(),
                    toml::Value::Array(_) | toml::Value::Table(_) => bail!(
                        "config key {key:?} must be a string, number, boolean or date, not a {}",
                        value.type_str()
                    ),
                };
                Ok((key.clone(), text))
            })
            .collect()
    }

    /// How the namespace serves the plugin.
    pub fn mount_settings(&self) -> MountSettings {
        MountSettings {
            limits: self.limits.answers,
            change_interval: Duration::from_millis(
                self.changes.interval_ms.max(MIN_CHANGE_INTERVAL_MS),
            ),
            listing_follows_files: self.changes.listing_follows_files,
        }
    }

    /// Every capability the manifest grants, in the order they are checked
    /// and resolved; a new capability is one more entry here.
    pub fn capabilities(&self) -> [&dyn Capability; 4] {
        [&self.limits, &self.files, &self.env, &self.network]
    }

    /// The plugin's grants, resolved against `manifest_dir`.
    pub fn grants(&self, manifest_dir: &Path) -> Result<Grants> {
        Grants::resolve(&self.capabilities(), &self.limits, manifest_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::EnvSource;

    #[test]
    fn parses_a_full_manifest() {
        let manifest: Manifest = toml::from_str(
            r#"
            scheme = "docs"
            sha256 = "00"
            [config]
            title = "Docs"
            page_size = 20
            [[files]]
            host = "."
            guest = "/data"
            access = "read-write"
            [env]
            TOKEN = { from_env = "WEATHER_TOKEN" }
            KEY = { from_file = "/run/secrets/key" }
            [network]
            allow = ["https://api.example.com", "tcp://10.0.0.5:5432"]
            [limits]
            timeout_ms = 500
            max_page_entries = 20
            [changes]
            listing_follows_files = true
            "#,
        )
        .unwrap();
        assert_eq!(manifest.scheme.as_deref(), Some("docs"));
        assert_eq!(
            manifest.config_pairs().unwrap(),
            [
                ("page_size".into(), "20".into()),
                ("title".into(), "Docs".into())
            ]
        );
        assert_eq!(manifest.limits.sandbox.timeout_ms, 500);
        assert_eq!(manifest.limits.answers.max_page_entries, 20);
        assert!(manifest.mount_settings().listing_follows_files);
        assert!(!Manifest::default().mount_settings().listing_follows_files);
        assert_eq!(
            manifest.files.0[0].access,
            crate::grants::files::Access::ReadWrite
        );
        assert_eq!(
            manifest.env.0["TOKEN"],
            EnvSource::FromEnv("WEATHER_TOKEN".into())
        );
        assert_eq!(
            manifest.env.0["KEY"],
            EnvSource::FromFile("/run/secrets/key".into())
        );
        assert_eq!(
            manifest.limits.sandbox.memory_mib,
            crate::grants::Limits::default().memory_mib
        );
        assert_eq!(
            manifest.network.entries()[0].to_string(),
            "https://api.example.com:443"
        );
    }

    #[test]
    fn refuses_unknown_keys_and_nested_config() {
        let typo = toml::from_str::<Manifest>("schem = \"x\"").unwrap_err();
        assert!(typo.to_string().contains("unknown field `schem`"), "{typo}");
        let limit = toml::from_str::<Manifest>("[limits]\nmemory = 1").unwrap_err();
        assert!(
            limit.to_string().contains("unknown field `memory`"),
            "{limit}"
        );
        let nested: Manifest = toml::from_str("[config]\nlist = [1]").unwrap();
        let error = nested.config_pairs().unwrap_err().to_string();
        assert!(
            error.contains("\"list\"") && error.contains("array"),
            "{error}"
        );
    }
}
