//! The files built into the binary for authors (see `host/build.rs`): the
//! contract under `wit/`, the SDKs under `sdk/`, the project templates under
//! `sdk/new/`, and the runtime package Go bindings import under
//! `go-runtime/`.

use std::path::Path;

use anyhow::Result;

include!(concat!(env!("OUT_DIR"), "/authoring.rs"));

/// The contract's text.
pub fn contract() -> &'static str {
    let (_, bytes) = FILES
        .iter()
        .find(|(name, _)| *name == "wit/provider.wit")
        .expect("the contract is embedded");
    std::str::from_utf8(bytes).expect("the contract is UTF-8")
}

/// The embedded files under `prefix` (which ends with `/`), with their paths
/// below it.
pub fn tree(prefix: &str) -> impl Iterator<Item = (&'static str, &'static [u8])> {
    FILES
        .iter()
        .filter_map(move |(name, bytes)| Some((name.strip_prefix(prefix)?, *bytes)))
}

/// Writes the files under `prefix` into `dir`, passing each file's name and
/// text through `rewrite` (binary files are written as they are).
pub fn write_tree(prefix: &str, dir: &Path, rewrite: impl Fn(&str) -> String) -> Result<()> {
    let mut written = 0;
    for (name, bytes) in tree(prefix) {
        let contents = match std::str::from_utf8(bytes) {
            Ok(text) => rewrite(text).into_bytes(),
            Err(_) => bytes.to_vec(),
        };
        super::write_file(&dir.join(rewrite(name)), &contents)?;
        written += 1;
    }
    anyhow::ensure!(written > 0, "nothing is embedded under {prefix}");
    Ok(())
}
