//! `resmux inspect`: what a component is, where it came from and who signed
//! it, what it imports and exports, what it says about itself, and what its
//! manifest grants it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{CacheArgs, RulesArgs};
use resmux::catalog::{Entry, locate};
use resmux::grants::{Ceiling, Grants};
use resmux::operator_file::{self, MOST_COMPONENT_BYTES};
use resmux::runtime::Tiers;

pub async fn inspect(
    component: &Path,
    manifest: Option<PathBuf>,
    rules: &RulesArgs,
    cache: CacheArgs,
) -> Result<()> {
    let ceiling = rules.ceiling_path();
    let entry = Entry::for_component(component, manifest)?;
    let manifest = &entry.manifest;
    let manifest_dir = entry.manifest_dir();
    let grants = manifest.grants(manifest_dir)?;
    let runtime = cache.runtime(Tiers::Optimized)?;
    let located = locate(&runtime, &entry, &rules.rules()?).await?;
    let runtime = runtime.with_stack(grants.limits.stack_kib)?;
    let (bytes, _) = operator_file::read_bytes(&located.path, MOST_COMPONENT_BYTES, "component")?;
    let compiled = runtime
        .compile(&bytes, located.pin.as_deref())
        .with_context(|| format!("cannot load {}", entry.component))?;
    let (imports, exports) = runtime.interface(&compiled);
    let mut out = std::io::stdout().lock();
    writeln!(out, "component  {}", entry.component)?;
    if let Some(provenance) = &located.provenance {
        writeln!(out, "pulled     {}", provenance.manifest_digest)?;
        let log = if provenance.logged {
            "with a checked transparency-log entry"
        } else {
            "without a transparency-log entry"
        };
        writeln!(out, "signed by  {}, {log}", provenance.signed_by)?;
    }
    writeln!(out, "size       {} bytes", bytes.len())?;
    writeln!(out, "sha256     {}", compiled.digest)?;
    writeln!(
        out,
        "compiled   {:?} in {} ms, {} tier",
        compiled.origin,
        compiled.elapsed.as_millis(),
        compiled.tier.name()
    )?;
    writeln!(out, "exports")?;
    for name in &exports {
        if name.starts_with("resmux:provider/provider@") {
            writeln!(out, "  {name}")?;
        } else if name.starts_with("resmux:provider/locate@") {
            let status = if grants.may_block() {
                "asked before each read which granted file to read"
            } else {
                "never called: the plugin has no file grants"
            };
            writeln!(out, "  {name:<45} {status}")?;
        } else {
            // componentize-py, for one, exports `exports`, which it calls
            // while building to set up the interpreter.
            writeln!(
                out,
                "  {name:<45} not part of the contract; resmux never calls it"
            )?;
        }
    }
    writeln!(out, "imports")?;
    for name in &imports {
        writeln!(out, "  {name:<45} {}", import_status(name, &grants))?;
    }
    writeln!(
        out,
        "manifest   {}",
        entry
            .manifest_path
            .as_deref()
            .map_or("none (defaults apply)".into(), |path| path
                .display()
                .to_string())
    )?;
    writeln!(out, "scheme     {}://", entry.scheme)?;
    let config = manifest.config_pairs()?;
    for (key, value) in &config {
        writeln!(out, "config     {key} = {value:?}")?;
    }
    for grant in grants.each() {
        let (section, lines) = grant.describe();
        if lines.is_empty() {
            writeln!(out, "{section:<10} none granted")?;
        }
        for line in lines {
            writeln!(out, "{section:<10} {line}")?;
        }
    }
    if let Some(path) = &ceiling {
        match Ceiling::read(path)?.check(&manifest.capabilities(), manifest_dir) {
            Ok(()) => writeln!(out, "ceiling    {} allows every grant", path.display())?,
            Err(refusal) => writeln!(out, "ceiling    REFUSED by {}: {refusal:#}", path.display())?,
        }
    }
    writeln!(out, "answers    {}", manifest.limits.answers.describe())?;
    let plugin = runtime
        .plugin(&entry.scheme, &compiled, grants, manifest.config_pairs()?)
        .with_context(|| format!("{} cannot be served", entry.component))?;
    match plugin.about().await {
        Ok(info) => writeln!(
            out,
            "about      {} {}: {}",
            info.name, info.version, info.description
        )?,
        Err(error) => bail!("{} cannot describe itself: {error}", entry.component),
    }
    match plugin.start().await {
        Ok(()) => writeln!(out, "start      ok")?,
        Err(error) => writeln!(out, "start      FAILED: {error}")?,
    }
    Ok(())
}

/// What a plugin gets when it uses an import, under its grants.
fn import_status(import: &str, grants: &Grants) -> String {
    let interface = import.split('@').next().unwrap_or(import);
    if let Some(status) = grants
        .each()
        .iter()
        .find_map(|grant| grant.import_status(interface))
    {
        return status;
    }
    match interface {
        "wasi:cli/stdout" | "wasi:cli/stderr" => "captured into resmux's log",
        "wasi:cli/stdin" => "linked; always empty",
        _ => "provided",
    }
    .into()
}
