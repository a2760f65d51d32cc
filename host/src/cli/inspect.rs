//! `resmux inspect`: what a component is, what it imports and exports, what
//! it says about itself, and what its manifest grants it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::CacheArgs;
use resmux::catalog::Entry;
use resmux::policy::network::Protocol;
use resmux::policy::{Ceiling, EnvSource, Policy};

pub async fn inspect(
    component: &Path,
    manifest: Option<PathBuf>,
    ceiling: Option<&Path>,
    cache: CacheArgs,
) -> Result<()> {
    let entry = Entry::for_component(component, manifest)?;
    let manifest = &entry.manifest;
    let manifest_dir = entry.manifest_dir();
    let policy = manifest.policy(manifest_dir)?;
    let runtime = cache.runtime()?.with_stack(policy.limits.stack_kib)?;
    let bytes =
        std::fs::read(component).with_context(|| format!("cannot read {}", component.display()))?;
    let compiled = runtime
        .compile(&bytes)
        .with_context(|| format!("{} is not a loadable component", component.display()))?;
    let (imports, exports) = runtime.interface(&compiled.component);
    let mut out = std::io::stdout().lock();
    writeln!(out, "component  {}", component.display())?;
    writeln!(out, "size       {} bytes", bytes.len())?;
    writeln!(out, "sha256     {}", compiled.digest)?;
    writeln!(
        out,
        "compiled   {:?} in {} ms",
        compiled.origin,
        compiled.elapsed.as_millis()
    )?;
    writeln!(out, "exports")?;
    for name in &exports {
        writeln!(out, "  {name}")?;
    }
    writeln!(out, "imports")?;
    for name in &imports {
        writeln!(out, "  {name:<45} {}", import_status(name, &policy))?;
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
    if policy.files.is_empty() {
        writeln!(out, "files      none granted")?;
    }
    for grant in &policy.files {
        writeln!(
            out,
            "files      {} {} -> {} ({:?})",
            if grant.is_file() { "file" } else { "directory" },
            grant.host.display(),
            grant.guest,
            grant.access
        )?;
    }
    if policy.network.entries().is_empty() {
        writeln!(out, "network    none granted")?;
    }
    for entry in policy.network.entries() {
        writeln!(out, "network    {entry}")?;
    }
    if policy.env.is_empty() {
        writeln!(out, "env        none granted")?;
    }
    for grant in &policy.env {
        let source = match &grant.source {
            EnvSource::FromEnv(host) => format!("host variable {host}"),
            EnvSource::FromFile(file) => format!("file {}", file.display()),
        };
        writeln!(out, "env        {} (from {source})", grant.name)?;
    }
    if let Some(path) = ceiling {
        match Ceiling::read(path)?.check(&policy, manifest_dir) {
            Ok(()) => writeln!(out, "ceiling    {} allows every grant", path.display())?,
            Err(refusal) => writeln!(out, "ceiling    REFUSED by {}: {refusal:#}", path.display())?,
        }
    }
    let limits = policy.limits;
    writeln!(
        out,
        "limits     memory {} MiB, tables {} elements, stack {} KiB, CPU {} ms and wall clock {} ms per call, {} calls at once",
        limits.memory_mib,
        limits.table_elements,
        limits.stack_kib,
        limits.cpu_ms,
        limits.timeout_ms,
        limits.concurrent_calls
    )?;
    writeln!(
        out,
        "answers    {} bytes per read, {} entries per page, {} bytes per string",
        limits.max_read_bytes, limits.max_page_entries, limits.max_string_bytes
    )?;
    let plugin = runtime
        .plugin(
            &entry.scheme,
            &compiled.component,
            policy,
            manifest.config_pairs()?,
        )
        .with_context(|| format!("{} cannot be served", component.display()))?;
    match plugin.about().await {
        Ok(info) => writeln!(
            out,
            "about      {} {}: {}",
            info.name, info.version, info.description
        )?,
        Err(error) => bail!("{} cannot describe itself: {error}", component.display()),
    }
    match plugin.start().await {
        Ok(()) => writeln!(out, "start      ok")?,
        Err(error) => writeln!(out, "start      FAILED: {error}")?,
    }
    Ok(())
}

/// What a plugin gets when it uses an import, under its policy.
fn import_status(import: &str, policy: &Policy) -> &'static str {
    let family = import.split('@').next().unwrap_or(import);
    match family {
        "wasi:http/outgoing-handler" if !grants(policy, Protocol::is_http) => {
            "linked; every request denied (no http or https entry)"
        }
        "wasi:http/outgoing-handler" => "allowlisted http and https requests only",
        "wasi:sockets/network"
        | "wasi:sockets/instance-network"
        | "wasi:sockets/tcp"
        | "wasi:sockets/tcp-create-socket"
        | "wasi:sockets/udp"
        | "wasi:sockets/udp-create-socket"
        | "wasi:sockets/ip-name-lookup"
            if !grants(policy, |protocol| !protocol.is_http()) =>
        {
            "linked; every use denied (no tcp or udp entry)"
        }
        "wasi:sockets/ip-name-lookup" => "any name (a tcp or udp entry exists)",
        "wasi:sockets/network"
        | "wasi:sockets/instance-network"
        | "wasi:sockets/tcp"
        | "wasi:sockets/tcp-create-socket"
        | "wasi:sockets/udp"
        | "wasi:sockets/udp-create-socket" => "allowlisted tcp and udp peers only",
        "wasi:filesystem/preopens" | "wasi:filesystem/types" if policy.files.is_empty() => {
            "linked; no directory granted"
        }
        "wasi:filesystem/preopens" | "wasi:filesystem/types" => "granted paths only",
        "wasi:cli/environment" if policy.env.is_empty() => "linked; empty environment",
        "wasi:cli/environment" => "granted variables only",
        "wasi:cli/stdout" | "wasi:cli/stderr" => "captured into resmux's log",
        "wasi:cli/stdin" => "linked; always empty",
        _ => "provided",
    }
}

fn grants(policy: &Policy, kind: impl Fn(Protocol) -> bool) -> bool {
    policy
        .network
        .entries()
        .iter()
        .any(|entry| kind(entry.protocol))
}
