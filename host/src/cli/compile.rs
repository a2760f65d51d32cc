//! `resmux compile` and `resmux pull`: fill the compile cache ahead of time,
//! for an image build or an air-gapped host, so that `resmux serve` loads
//! every plugin without compiling it. Components that manifests name by
//! `oci` are pulled and verified first, under the same rules as `serve`,
//! and kept in the cache: `serve` still asks their registry first, but
//! serves what was verified here when the registry cannot be reached.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};

use super::CacheArgs;
use resmux::catalog::{self, Entry, Failure, Provenance, Rules};
use resmux::runtime::{Compiled, Origin, Tiers};

/// Compiles every component of the folders among `paths` (with their
/// manifests, which choose the engine a component is compiled for), and
/// every other path as a component with the `.toml` beside it; says on
/// stdout what it compiled, and fails naming every one that did not.
pub async fn compile(paths: &[PathBuf], cache: &CacheArgs, rules: &Rules) -> Result<()> {
    if cache.no_cache {
        bail!("resmux compile (and pull) fill the compile cache, which --no-cache turns off");
    }
    let runtime = cache.runtime(Tiers::Optimized)?;
    let mut entries = Vec::new();
    let mut failures = Vec::new();
    for path in paths {
        if path.is_dir() {
            let (found, refused) = catalog::scan(path)?;
            entries.extend(found);
            failures.extend(refused);
        } else {
            match Entry::for_component(path, None) {
                Ok(entry) => entries.push(entry),
                Err(error) => failures.push(Failure {
                    declared_by: path.clone(),
                    error,
                }),
            }
        }
    }
    let total = entries.len() + failures.len();
    let mut written: std::io::Result<()> = Ok(());
    catalog::compile_each(&runtime, entries, rules, |entry, outcome| match outcome {
        Ok((compiled, provenance)) => {
            if written.is_ok() {
                written = writeln!(
                    std::io::stdout(),
                    "{}  {}{}",
                    describe(&compiled),
                    entry.declared_by.display(),
                    provenance.as_ref().map(pulled).unwrap_or_default()
                );
            }
        }
        Err(error) => failures.push(Failure {
            declared_by: entry.declared_by,
            error,
        }),
    })
    .await;
    written?;
    for failure in &failures {
        eprintln!(
            "resmux: {} not ready: {:#}",
            failure.declared_by.display(),
            failure.error
        );
    }
    if !failures.is_empty() {
        let names: Vec<String> = failures
            .iter()
            .map(|failure| failure.declared_by.display().to_string())
            .collect();
        bail!(
            "{} of {total} plugin(s) not ready: {}",
            failures.len(),
            names.join(", ")
        );
    }
    Ok(())
}

/// Where a pulled component came from, for the output.
fn pulled(provenance: &Provenance) -> String {
    format!(
        "  (pulled {}@{}, signed by {})",
        provenance.reference, provenance.manifest_digest, provenance.signed_by
    )
}

/// Where a component's code came from, for the output.
fn describe(compiled: &Compiled) -> String {
    match compiled.origin {
        Origin::Compiled => format!("compiled in {} ms", compiled.elapsed.as_millis()),
        Origin::Cached => "already in the cache".to_owned(),
        Origin::Shared => "same component as another plugin".to_owned(),
    }
}
