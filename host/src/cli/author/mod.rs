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

/// `resmux wit DIR`: writes the contract to `DIR/provider.wit`.
pub fn write_wit(dir: &Path) -> Result<()> {
    embedded::write_tree("wit/", dir, |text| text.to_owned())
        .with_context(|| format!("cannot write the contract into {}", dir.display()))
}
