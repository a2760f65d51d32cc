//! Command-line arguments, and what the subcommands share (the plugin
//! folder, the compile cache, the rules); each subcommand lives in its own
//! module: [`serve`], [`query`], [`check`], [`inspect`], [`compile`],
//! [`top`], [`policy`] and, for plugin authors, [`author`]. Output for
//! people goes to stdout; logs go to stderr, and `serve` keeps stdout for
//! protocol messages alone.

mod author;
mod check;
mod compile;
mod inspect;
mod policy;
mod query;
mod serve;
mod top;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Parser, Subcommand};

use resmux::catalog::{self, Loading};
use resmux::grants::Ceiling;
use resmux::namespace::Namespace;
use resmux::operator_file::{self, MOST_COMPONENT_BYTES};
use resmux::runtime::{CompileCache, HandleBudget, Runtime, Tiers};
use resmux::telemetry::logs::LogFormat;
use resmux::transport::{self, OperatorToken};

/// Entries of one listing page, unless --page-size says otherwise.
const DEFAULT_PAGE_SIZE: u32 = 100;
/// Listed resources `check` reads, unless --reads says otherwise.
const DEFAULT_READS: usize = 100;

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
    /// How log lines are written: `text`, or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "RESMUX_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once when resmux starts; boxing `serve`'s flags would only obscure them"
)]
pub enum Command {
    Serve(serve::Serve),
    /// Show live per-plugin figures (calls/s, p50/p99, faults, quarantine)
    /// from a server started with --metrics.
    Top {
        /// Where the server's metrics listen, e.g. 127.0.0.1:9464.
        address: String,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
        interval: f64,
        /// Print one table (over one interval) and exit, for scripts.
        #[arg(long)]
        once: bool,
        /// A file holding the metrics token, for a server started with
        /// --metrics-token-file.
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
    /// List every resource of the namespace.
    List(FolderArgs),
    /// List every resource template of the namespace.
    Templates(FolderArgs),
    /// Read one resource and print its contents.
    Read {
        #[command(flatten)]
        folder: FolderArgs,
        /// The resource's URI, e.g. `notes://notes/welcome`.
        uri: String,
        /// Write the raw contents to this file instead of printing them.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Ask one plugin what changed since a token from an earlier answer.
    Changes {
        #[command(flatten)]
        folder: FolderArgs,
        /// The plugin's scheme, e.g. `files`.
        scheme: String,
        /// The token an earlier `changes` printed (omit for the first report).
        #[arg(long)]
        since: Option<String>,
    },
    /// Complete one argument of a resource template, as a client's
    /// `completion/complete` would.
    Complete {
        #[command(flatten)]
        folder: FolderArgs,
        /// The URI template, e.g. `dataset://datasets/{name}/rows/{row}`.
        template: String,
        /// The argument to complete, e.g. `name`.
        argument: String,
        /// What has been typed so far (may be empty: "").
        value: String,
        /// A value already chosen for another argument, as NAME=VALUE.
        /// Repeatable.
        #[arg(long = "context", value_parser = name_value)]
        context: Vec<(String, String)>,
    },
    /// Check a plugin component against the contract: load it, start it,
    /// walk its listing and templates, read what it lists, complete every
    /// template argument and ask twice what changed, as the host would.
    Check {
        /// The component, e.g. `target/wasm32-wasip2/release/my_plugin.wasm`.
        component: PathBuf,
        /// Its manifest (default: the `.toml` beside it, if any).
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// The most listed resources to read; a longer listing is sampled
        /// evenly.
        #[arg(long, default_value_t = DEFAULT_READS)]
        reads: usize,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Write a new plugin project that builds with its own build.sh and
    /// passes `resmux check` as it is.
    New {
        /// The language of the project.
        #[arg(long, value_enum)]
        lang: author::scaffold::Language,
        /// The plugin's name, which is also its URI scheme, e.g. `poems`.
        name: String,
        /// Where to write it (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Write the contract (provider.wit) into a folder, for tools that
    /// generate bindings.
    Wit {
        /// The folder, e.g. `wit`.
        dir: PathBuf,
    },
    /// Write the bindings C or Go plugins build with.
    Bindings {
        #[arg(value_enum)]
        lang: author::bindings::Language,
        /// The folder to write them into.
        dir: PathBuf,
    },
    /// Turn a wasm32-wasi (preview 1) reactor module, as C and Go compilers
    /// make, into a plugin component.
    Componentize {
        /// The core module.
        module: PathBuf,
        /// The component to write.
        out: PathBuf,
    },
    /// Serve a plugin project while you work on it: build it with its
    /// build.sh, serve its folder, and rebuild, reload and check it on every
    /// save. Build output and check results go to stderr.
    Dev {
        /// The project folder (it holds build.sh and NAME.toml).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Serve Streamable HTTP on this address (e.g. 127.0.0.1:8080)
        /// instead of stdio.
        #[arg(long)]
        http: Option<std::net::SocketAddr>,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Explain the access policy: its schema, or one decision.
    Policy {
        #[command(subcommand)]
        command: policy::PolicyCommand,
    },
    /// Compile plugin components into the compile cache ahead of time (for
    /// an image build), so that `serve` loads them without compiling: every
    /// component of a plugin folder, with its manifests, or the given
    /// components. Components that manifests name by `oci` are pulled and
    /// their signatures verified first (hence `pull`), so that `serve`
    /// starts without the registry. Exits non-zero, naming them, if any fail.
    #[command(visible_alias = "pull")]
    Compile {
        /// Plugin folders, or components (each with the `.toml` beside it,
        /// if any), or manifests (NAME.toml) that name an `oci` component.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        rules: RulesArgs,
    },
    /// Publish a plugin component to an OCI registry as a Wasm artefact
    /// (config application/vnd.wasm.config.v0+json, one application/wasm
    /// layer), optionally signed as cosign signs; prints the digest.
    Push {
        /// The component, e.g. `target/plugins/notes.wasm`.
        component: PathBuf,
        /// Where to push it, e.g. `registry.example.com/team/notes:1.0`.
        reference: String,
        /// A cosign private key to sign it with (its password in
        /// COSIGN_PASSWORD); `resmux key` makes one.
        #[arg(long)]
        key: Option<PathBuf>,
        /// Registries (HOST:PORT) spoken to over plain HTTP; loopback ones
        /// always are.
        #[arg(
            long = "plain-http-registry",
            env = "RESMUX_PLAIN_HTTP_REGISTRIES",
            value_delimiter = ','
        )]
        plain_http: Vec<String>,
    },
    /// Make a cosign key pair: PREFIX.key, encrypted with COSIGN_PASSWORD,
    /// and PREFIX.pub, the key manifests name in `signed_by`.
    Key {
        /// The path of both files without their extension, e.g. `keys/team`.
        prefix: PathBuf,
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
        #[command(flatten)]
        rules: RulesArgs,
    },
}

impl Command {
    /// The log filter without --log-level or RUST_LOG: a server logs what
    /// it does; a one-shot command only warnings, and what plugins print.
    /// The sigstore crate's own warnings (a signature tag that is not
    /// there, for one) are left out: resmux says what they mean.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Self::Serve(_) | Self::Dev { .. } => "info,sigstore=error",
            _ => "warn,resmux::plugin=info,sigstore=error",
        }
    }
}

#[derive(ClapArgs)]
pub struct FolderArgs {
    /// The folder of plugins: NAME.wasm files with optional NAME.toml manifests.
    #[arg(long, env = "RESMUX_PLUGINS")]
    plugins: PathBuf,
    /// The most entries one page of a listing holds.
    #[arg(long, default_value_t = DEFAULT_PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    page_size: u32,
    /// Which compiled code plugins run: `both` serves each on Winch's
    /// code at once and moves it to Cranelift's once that is compiled in
    /// the background; `optimized` serves each once Cranelift has compiled
    /// it; `baseline` keeps Winch's (to measure it).
    #[arg(long, value_enum, default_value_t = Tiers::Both, env = "RESMUX_TIERS")]
    tiers: Tiers,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    rules: RulesArgs,
}

#[derive(ClapArgs)]
pub struct RulesArgs {
    /// The ceiling: a file of the directories, host variables, secret files
    /// and network entries any manifest may grant at most, who may sign
    /// what is pulled, and whether to run locked.
    #[arg(long, visible_alias = "policy", env = "RESMUX_CEILING")]
    ceiling: Option<PathBuf>,
    /// Require a sha256 pin in every manifest (a signer the ceiling lists,
    /// for a component pulled from a registry) and refuse to start on any
    /// plugin or configuration error instead of serving the rest.
    #[arg(long)]
    locked: bool,
    /// Registries (HOST:PORT) spoken to over plain HTTP; loopback ones
    /// always are. Credentials come from RESMUX_REGISTRY_AUTH (Docker's
    /// config.json format) or Docker's config file.
    #[arg(
        long = "plain-http-registry",
        env = "RESMUX_PLAIN_HTTP_REGISTRIES",
        value_delimiter = ','
    )]
    plain_http: Vec<String>,
}

impl RulesArgs {
    /// The ceiling file: `--ceiling`, or `RESMUX_CEILING`, or the variable
    /// it once was, `RESMUX_POLICY`, so that a deployment that still sets
    /// that one keeps its ceiling rather than losing it unnoticed.
    pub fn ceiling_path(&self) -> Option<PathBuf> {
        self.ceiling.clone().or_else(|| {
            let path = std::env::var_os("RESMUX_POLICY")?;
            tracing::warn!("RESMUX_POLICY names the ceiling file; it is RESMUX_CEILING now");
            Some(PathBuf::from(path))
        })
    }

    fn rules(&self) -> Result<catalog::Rules> {
        let ceiling = self
            .ceiling_path()
            .as_deref()
            .map(Ceiling::read)
            .transpose()?;
        Ok(catalog::Rules {
            locked: self.locked || ceiling.as_ref().is_some_and(Ceiling::locked),
            ceiling,
            registries: catalog::Registries {
                plain_http: self.plain_http.clone(),
            },
        })
    }
}

#[derive(ClapArgs)]
pub struct CacheArgs {
    /// Where compiled plugins are cached (default: $XDG_CACHE_HOME/resmux or
    /// ~/.cache/resmux on Linux, ~/Library/Caches/resmux on macOS,
    /// %LOCALAPPDATA%\resmux on Windows).
    #[arg(long, env = "RESMUX_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// The key that vouches for cached code, kept outside the cache
    /// (default: $XDG_STATE_HOME/resmux/cache-key or
    /// ~/.local/state/resmux/cache-key on Linux, ~/Library/Application
    /// Support/resmux/cache-key on macOS, %LOCALAPPDATA%\resmux-state\cache-key
    /// on Windows; made when missing).
    #[arg(long, env = "RESMUX_CACHE_KEY")]
    cache_key: Option<PathBuf>,
    /// Compile every plugin afresh and cache nothing.
    #[arg(long, conflicts_with_all = ["cache_dir", "cache_key"])]
    no_cache: bool,
}

impl CacheArgs {
    /// The runtime, with this cache, running plugins on `tiers`' code.
    fn runtime(&self, tiers: Tiers) -> Result<Runtime> {
        let dir = self
            .cache_dir
            .clone()
            .or_else(|| dirs::cache_dir().map(|base| base.join("resmux")));
        let key = self.cache_key.clone().or_else(default_cache_key);
        let cache = match (self.no_cache, dir, key) {
            (false, Some(dir), Some(key)) => CompileCache::open(&dir, &key)?,
            _ => CompileCache::disabled(),
        };
        Runtime::new(cache, HandleBudget::from_process_limit(), tiers)
    }
}

/// Where the compile cache's key is kept when no flag says: the user's
/// state folder (Linux), or beside it in the user's own application data
/// where there is none, outside the cache folder (which on Windows is that
/// same folder's `resmux`).
fn default_cache_key() -> Option<PathBuf> {
    match dirs::state_dir() {
        Some(state) => Some(state.join("resmux").join("cache-key")),
        None if cfg!(windows) => {
            dirs::data_local_dir().map(|base| base.join("resmux-state").join("cache-key"))
        }
        None => dirs::data_local_dir().map(|base| base.join("resmux").join("cache-key")),
    }
}

fn name_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds >= 0.1 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!(
            "{text:?} is not a number of seconds of at least 0.1"
        )),
    }
}

pub async fn run(command: Command) -> Result<()> {
    match command {
        Command::Serve(serve) => serve.execute().await,
        Command::Top {
            address,
            interval,
            once,
            token_file,
        } => {
            let token = token_file
                .as_deref()
                .map(|path| transport::read_token_file(path, OperatorToken::Metrics))
                .transpose()?;
            let interval = std::time::Duration::from_secs_f64(interval);
            top::top(&address, token.as_deref(), interval, once).await
        }
        Command::List(folder) => query::list(folder).await,
        Command::Templates(folder) => query::templates(folder).await,
        Command::Read {
            folder,
            uri,
            output,
        } => query::read(folder, &uri, output.as_deref()).await,
        Command::Changes {
            folder,
            scheme,
            since,
        } => query::changes(folder, &scheme, since).await,
        Command::Complete {
            folder,
            template,
            argument,
            value,
            context,
        } => query::complete(folder, &template, &argument, &value, context).await,
        Command::Check {
            component,
            manifest,
            reads,
            cache,
        } => {
            let stdout = Box::new(std::io::stdout());
            check::check(
                &component,
                manifest,
                &cache.runtime(Tiers::Optimized)?,
                reads,
                stdout,
            )
            .await
        }
        Command::New { lang, name, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            author::scaffold::new_project(lang, &name, &dir)
        }
        Command::Wit { dir } => author::write_wit(&dir),
        Command::Bindings { lang, dir } => author::bindings::write_bindings(lang, &dir),
        Command::Componentize { module, out } => author::bindings::componentize(&module, &out),
        Command::Dev { dir, http, cache } => author::dev::dev(&dir, http, cache).await,
        Command::Policy { command } => policy::run(command),
        Command::Inspect {
            component,
            manifest,
            cache,
            rules,
        } => inspect::inspect(&component, manifest, &rules, cache).await,
        Command::Compile {
            paths,
            cache,
            rules,
        } => compile::compile(&paths, &cache, &rules.rules()?).await,
        Command::Push {
            component,
            reference,
            key,
            plain_http,
        } => {
            let (bytes, _) =
                operator_file::read_bytes(&component, MOST_COMPONENT_BYTES, "component")?;
            let registries = catalog::Registries { plain_http };
            let digest =
                catalog::registry::publish::push(bytes, &reference, key.as_deref(), &registries)
                    .await
                    .with_context(|| format!("cannot push {}", component.display()))?;
            let signed = if key.is_some() { ", signed" } else { "" };
            println!("pushed {reference} as {digest}{signed}");
            Ok(())
        }
        Command::Key { prefix } => {
            let (private, public) = catalog::registry::publish::generate_key(&prefix)?;
            println!(
                "wrote {} (encrypted with COSIGN_PASSWORD) and {}",
                private.display(),
                public.display()
            );
            Ok(())
        }
    }
}

async fn namespace(folder: &FolderArgs) -> Result<Namespace> {
    let namespace = Namespace::new(folder.page_size as usize);
    let runtime = folder.cache.runtime(folder.tiers)?;
    load_all(folder, &runtime, &folder.rules.rules()?, &namespace).await?;
    Ok(namespace)
}

/// Loads every plugin of the folder into `namespace`, and returns once all
/// have loaded or failed.
async fn load_all(
    folder: &FolderArgs,
    runtime: &Runtime,
    rules: &catalog::Rules,
    namespace: &Namespace,
) -> Result<Loading> {
    let mut loading = catalog::load_folder(runtime, &folder.plugins, rules).await?;
    loading.mount_into(namespace)?;
    warn_if_empty(&folder.plugins, &loading);
    Ok(loading)
}

fn warn_if_empty(plugins: &Path, loading: &Loading) {
    if loading.loaded.is_empty() {
        tracing::warn!(folder = %plugins.display(), "no plugin loaded; the namespace is empty");
    }
}
