//! Reading the operator's TOML files (plugin manifests, the ceiling,
//! the tokens and auth files), with errors that name the file.

use std::path::Path;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;

/// Reads and parses `path`, which the errors call `what` (for example
/// "manifest").
pub fn read<T: DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid {what} {}", path.display()))
}
