//! What a plugin author runs, with nothing but the `resmux` binary and the
//! tools of their own language: `resmux new` writes a project
//! ([`scaffold`]), `resmux wit` the contract, `resmux bindings` and
//! `resmux componentize` the steps C and Go need ([`bindings`]), and
//! `resmux dev` serves a project and rebuilds it on every save ([`dev`]).
//! Everything they write comes from [`embedded`], built into the binary.

pub mod bindings;
pub mod dev;
mod embedded;
pub mod scaffold;

use std::path::Path;

use anyhow::{Context, Result};

/// Writes `contents` to `path`, making its folder. A file that holds them
/// already keeps its time stamp, so that builds and watchers that track it
/// have nothing to redo.
fn write_file(path: &Path, contents: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    if std::fs::read(path).ok().as_deref() != Some(contents) {
        std::fs::write(path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `resmux wit DIR`: writes the contract to `DIR/provider.wit`.
pub fn write_wit(dir: &Path) -> Result<()> {
    embedded::write_tree("wit/", dir, |text| text.to_owned())
        .with_context(|| format!("cannot write the contract into {}", dir.display()))
}
