//! Command-line arguments and what each subcommand does. Output for people
//! goes to stdout; logs go to stderr, and `serve` keeps stdout for protocol
//! messages alone.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args as ClapArgs, Parser, Subcommand};
use rmcp::ServiceExt;
use tracing_subscriber::EnvFilter;

use resmux::catalog::{self, Manifest};
use resmux::contract::Body;
use resmux::namespace::Namespace;
use resmux::protocol::ResmuxServer;
use resmux::runtime::{CompileCache, Runtime};

/// resmux: an MCP server whose resources come from sandboxed WebAssembly plugins.
///
/// Put NAME.wasm (and optionally NAME.toml) into a folder; each plugin serves
/// resources under its own URI scheme, and resmux merges them into one namespace.
#[derive(Parser)]
#[command(version, about, long_about)]
pub struct Args {
    /// Log filter, e.g. `info` or `resmux=debug` (default: RUST_LOG, else `info`).
    /// Logs always go to stderr.
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Serve the plugin folder over MCP on stdin/stdout.
    Serve(FolderArgs),
    /// List every resource of the namespace.
    List(FolderArgs),
    /// List every resource template of the namespace.
    Templates(FolderArgs),
    /// Read one resource and print its contents.
    Read {
        #[command(flatten)]
        folder: FolderArgs,
        /// The resource's URI, e.g. `notes://welcome`.
        uri: String,
        /// Write the raw contents to this file instead of printing them.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Show a plugin component's interface, what it says about itself, and
    /// what its manifest grants.
    Inspect {
        /// The component, e.g. `plugins/notes.wasm`.
        component: PathBuf,
        /// Its manifest (default: the `.toml` beside it, if any).
        #[arg(long)]
        manifest: Option<PathBuf>,
        #[command(flatten)]
        cache: CacheArgs,
    },
}

#[derive(ClapArgs)]
pub struct FolderArgs {
    /// The folder of plugins: NAME.wasm files with optional NAME.toml manifests.
    #[arg(long, env = "RESMUX_PLUGINS")]
    plugins: PathBuf,
    /// The most entries one page of a listing holds.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    page_size: u32,
    #[command(flatten)]
    cache: CacheArgs,
}

#[derive(ClapArgs)]
pub struct CacheArgs {
    /// Where compiled plugins are cached (default: $XDG_CACHE_HOME/resmux or ~/.cache/resmux).
    #[arg(long, env = "RESMUX_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every plugin afresh and cache nothing.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl CacheArgs {
    fn runtime(&self) -> Result<Runtime> {
        let dir = if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default_cache_dir)
        };
        Runtime::new(CompileCache::new(dir))
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("resmux"))
}

/// Sends logs to stderr, filtered by `level`, else RUST_LOG, else `info`.
pub fn init_logging(level: Option<&str>) {
    let filter = match level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

pub async fn run(command: Command) -> Result<()> {
    match command {
        Command::Serve(folder) => serve(folder).await,
        Command::List(folder) => list(folder).await,
        Command::Templates(folder) => templates(folder).await,
        Command::Read {
            folder,
            uri,
            output,
        } => read(folder, &uri, output.as_deref()).await,
        Command::Inspect {
            component,
            manifest,
            cache,
        } => inspect(&component, manifest, cache).await,
    }
}

async fn namespace(folder: &FolderArgs) -> Result<Namespace> {
    let runtime = folder.cache.runtime()?;
    let loading = catalog::load_folder(&runtime, &folder.plugins).await?;
    let mut namespace = Namespace::new(folder.page_size as usize);
    loading.mount_into(&mut namespace)?;
    if loading.loaded.is_empty() {
        tracing::warn!(folder = %folder.plugins.display(), "no plugin loaded; the namespace is empty");
    }
    Ok(namespace)
}

async fn serve(folder: FolderArgs) -> Result<()> {
    let namespace = namespace(&folder).await?;
    let schemes: Vec<&str> = namespace.schemes().collect();
    tracing::info!(schemes = ?schemes, "serving MCP on stdio");
    let server = ResmuxServer::new(Arc::new(namespace));
    let service = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .context("the MCP session did not start")?;
    service.waiting().await.context("the MCP session failed")?;
    Ok(())
}

async fn list(folder: FolderArgs) -> Result<()> {
    let namespace = namespace(&folder).await?;
    let mut stdout = std::io::stdout().lock();
    let mut cursor = None;
    loop {
        let page = namespace.list(cursor.as_deref()).await?;
        for resource in page.items {
            let mime = resource.metadata.mime_type.as_deref().unwrap_or("-");
            let size = resource.size.map_or("-".into(), |size| size.to_string());
            writeln!(
                stdout,
                "{}\t{}\t{mime}\t{size}",
                resource.uri, resource.metadata.name
            )?;
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(());
        }
    }
}

async fn templates(folder: FolderArgs) -> Result<()> {
    let namespace = namespace(&folder).await?;
    let mut stdout = std::io::stdout().lock();
    let mut cursor = None;
    loop {
        let page = namespace.templates(cursor.as_deref()).await?;
        for template in page.items {
            let description = template.metadata.description.as_deref().unwrap_or("");
            writeln!(
                stdout,
                "{}\t{}\t{description}",
                template.uri_template, template.metadata.name
            )?;
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(());
        }
    }
}

async fn read(folder: FolderArgs, uri: &str, output: Option<&Path>) -> Result<()> {
    let namespace = namespace(&folder).await?;
    let read = namespace.read(uri).await?;
    if let Some(output) = output {
        let mut file = std::fs::File::create(output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        for content in &read.contents {
            match &content.body {
                Body::Text(text) => file.write_all(text.as_bytes())?,
                Body::Blob(bytes) => file.write_all(bytes)?,
            }
        }
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    let several = read.contents.len() > 1;
    for content in read.contents {
        let mime = content.mime_type.as_deref().unwrap_or("unknown type");
        match content.body {
            Body::Text(text) => {
                if several {
                    writeln!(stdout, "--- {} ({mime})", content.uri)?;
                }
                write!(stdout, "{text}")?;
                if !text.ends_with('\n') {
                    writeln!(stdout)?;
                }
            }
            Body::Blob(bytes) => {
                writeln!(
                    stdout,
                    "--- {} ({mime}, {} bytes of binary; use --output FILE to save them)",
                    content.uri,
                    bytes.len()
                )?;
                write_hex_preview(&mut stdout, &bytes)?;
            }
        }
    }
    Ok(())
}

/// Prints up to 256 bytes as offset, hex and ASCII columns.
fn write_hex_preview(out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    const PREVIEW: usize = 256;
    for (row, chunk) in bytes[..bytes.len().min(PREVIEW)].chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|byte| format!("{byte:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&byte| {
                if byte.is_ascii_graphic() || byte == b' ' {
                    byte as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(out, "{:08x}  {:<47}  {ascii}", row * 16, hex.join(" "))?;
    }
    if bytes.len() > PREVIEW {
        writeln!(out, "... {} more bytes", bytes.len() - PREVIEW)?;
    }
    Ok(())
}

async fn inspect(component: &Path, manifest: Option<PathBuf>, cache: CacheArgs) -> Result<()> {
    let manifest_path = manifest.or_else(|| {
        let beside = component.with_extension("toml");
        beside.exists().then_some(beside)
    });
    let manifest = manifest_path
        .as_deref()
        .map(Manifest::read)
        .transpose()?
        .unwrap_or_default();
    let runtime = cache.runtime()?;
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
    let manifest_dir = manifest_path
        .as_deref()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let policy = manifest.policy(manifest_dir)?;
    writeln!(out, "imports")?;
    for name in &imports {
        writeln!(out, "  {name:<45} {}", import_status(name, &policy))?;
    }
    let stem = component
        .file_stem()
        .map(|stem| stem.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let scheme = manifest.scheme.clone().unwrap_or(stem);
    writeln!(
        out,
        "manifest   {}",
        manifest_path
            .as_deref()
            .map_or("none (defaults apply)".into(), |path| path
                .display()
                .to_string())
    )?;
    writeln!(out, "scheme     {scheme}://")?;
    for (key, value) in manifest.config_pairs()? {
        writeln!(out, "config     {key} = {value:?}")?;
    }
    if policy.files.is_empty() {
        writeln!(out, "files      none granted")?;
    }
    for grant in &policy.files {
        writeln!(
            out,
            "files      {} -> {} ({:?})",
            grant.host.display(),
            grant.guest,
            grant.access
        )?;
    }
    writeln!(out, "network    none granted")?;
    writeln!(out, "env        none granted")?;
    let limits = policy.limits;
    writeln!(
        out,
        "limits     memory {} MiB, {} ms per call, {} bytes per read, {} entries per page",
        limits.memory_mib, limits.timeout_ms, limits.max_read_bytes, limits.max_page_entries
    )?;
    let plugin = runtime
        .plugin(
            &scheme,
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
fn import_status(import: &str, policy: &resmux::policy::Policy) -> &'static str {
    let family = import.split('@').next().unwrap_or(import);
    match family {
        "wasi:sockets/network"
        | "wasi:sockets/instance-network"
        | "wasi:sockets/tcp"
        | "wasi:sockets/tcp-create-socket"
        | "wasi:sockets/udp"
        | "wasi:sockets/udp-create-socket"
        | "wasi:sockets/ip-name-lookup" => "linked; every use denied (no network grant)",
        "wasi:filesystem/preopens" | "wasi:filesystem/types" if policy.files.is_empty() => {
            "linked; no directory granted"
        }
        "wasi:filesystem/preopens" | "wasi:filesystem/types" => "granted directories only",
        "wasi:cli/environment" => "linked; empty environment",
        "wasi:cli/stdout" | "wasi:cli/stderr" => "captured into resmux's log",
        "wasi:cli/stdin" => "linked; always empty",
        _ => "provided",
    }
}
