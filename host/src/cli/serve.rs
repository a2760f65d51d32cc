//! `resmux serve`: its flags, and serving the folder's namespace over MCP
//! on stdio or Streamable HTTP, with the access rules, the audit log, the
//! response cache, the metrics and the console they ask for. A new flag is
//! a field of [`Serve`] and its use in [`Serve::serve_on`].

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args as ClapArgs, CommandFactory, FromArgMatches};
use tokio::task::JoinHandle;

use super::{FolderArgs, load_all, warn_if_empty};
use resmux::access::audit::AuditLog;
use resmux::access::shared_limits::SharedLimits;
use resmux::access::{AccessList, Admission, ResourceServer};
use resmux::catalog::{self, Loading, startup};
use resmux::console::{Console, Served};
use resmux::namespace::cursor::{self, CursorSeal};
use resmux::namespace::{Namespace, changes};
use resmux::protocol::{self, Observed, ResmuxServer, ResponseCache};
use resmux::runtime::Runtime;
use resmux::transport::{self, ConnectionLimits, DEFAULT_SESSION_IDLE, HttpOptions, OperatorToken};

/// HTTP connections open at once, unless --max-connections says otherwise.
const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Serve the plugin folder over MCP: on stdin/stdout, or over Streamable
/// HTTP at /mcp with --http.
#[derive(ClapArgs)]
pub struct Serve {
    #[command(flatten)]
    folder: FolderArgs,
    /// Serve Streamable HTTP on this address (e.g. 127.0.0.1:8080)
    /// instead of stdio.
    #[arg(long)]
    http: Option<std::net::SocketAddr>,
    /// A host name clients may use in `Host` besides loopback ones;
    /// required to listen on a non-loopback address. Repeatable.
    #[arg(long = "allow-host", requires = "http")]
    allowed_hosts: Vec<String>,
    /// A browser origin allowed besides loopback ones, e.g.
    /// https://app.example.com:443. Repeatable.
    #[arg(long = "allow-origin", requires = "http")]
    allowed_origins: Vec<String>,
    /// Do not offer the tool bridge (search_resources, read_resource) to
    /// clients that only use tools.
    #[arg(long)]
    no_tools: bool,
    /// A tokens file: the clients that may connect over HTTP, each with
    /// its bearer token, schemes and rate limit. Without it, HTTP is open
    /// to whoever reaches the address.
    #[arg(long, env = "RESMUX_TOKENS", requires = "http")]
    tokens: Option<PathBuf>,
    /// A Redis (`redis://[:PASSWORD@]HOST:PORT/DB`, 5 or later) where replicas share the tokens
    /// file's rate limits, so that a client's `reads_per_minute` holds
    /// for all of them together. While it does not answer, each replica
    /// holds clients to their limit on its own.
    #[arg(
        long,
        env = "RESMUX_REDIS",
        requires = "tokens",
        hide_env_values = true
    )]
    redis: Option<String>,
    /// An auth file whose `[oauth]` table makes resmux an OAuth 2.1
    /// resource server: access tokens of that issuer, for this server,
    /// let clients in (beside the tokens file's, if both are given).
    #[arg(long, env = "RESMUX_AUTH", requires = "http")]
    auth: Option<PathBuf>,
    /// A Cedar access policy: what the clients of --tokens and --auth may
    /// list, read, subscribe to and complete, URI by URI (see `resmux
    /// policy schema`). The tokens file's `schemes` are added to it.
    #[arg(long, env = "RESMUX_ACCESS_POLICY", requires = "http")]
    access_policy: Option<PathBuf>,
    /// HTTP connections open at once; past it, the connection that has
    /// waited longest for its request is closed to make room for a new
    /// one (one whose request is under way never is).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, requires = "http")]
    max_connections: usize,
    /// HTTP connections one source (an IPv4 address, an IPv6 /64) may
    /// hold at once; default: an eighth of --max-connections, at least 4.
    /// Behind a reverse proxy every client is the proxy's address: raise
    /// it to --max-connections there, and let --max-connections-per-client
    /// bound the clients.
    #[arg(long, requires = "http")]
    max_connections_per_source: Option<NonZeroUsize>,
    /// HTTP connections one client of --tokens or --auth may hold at
    /// once, counted from its first request on each; default: an eighth
    /// of --max-connections, at least 4.
    #[arg(long, requires = "http")]
    max_connections_per_client: Option<NonZeroUsize>,
    /// Seconds an HTTP session may go unused (no request, no open
    /// stream) before it ends, its subscriptions with it.
    #[arg(long, default_value_t = DEFAULT_SESSION_IDLE.as_secs(), value_parser = clap::value_parser!(u64).range(1..), requires = "http")]
    session_idle_seconds: u64,
    /// Append one JSON line per read, subscription and completion to
    /// this file.
    #[arg(long, env = "RESMUX_AUDIT_LOG")]
    audit_log: Option<PathBuf>,
    /// Memory for answers kept within their cache hint, in MiB; 0 keeps none.
    #[arg(long, default_value_t = 64)]
    response_cache_mib: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics, the operator's
    /// console at http://ADDR/console, and the probes /healthz and
    /// /readyz, on a listener of their own (the probes never need a
    /// token).
    #[arg(long, env = "RESMUX_METRICS")]
    metrics: Option<std::net::SocketAddr>,
    /// A file holding the bearer token scrapes of /metrics must carry
    /// (Prometheus: `authorization: { credentials_file: FILE }`).
    #[arg(long, env = "RESMUX_METRICS_TOKEN_FILE", requires = "metrics")]
    metrics_token_file: Option<PathBuf>,
    /// A file holding the bearer token the console's data must carry.
    /// That data reads every resource past the access policy, so it has
    /// a token of its own, which a scraper never holds. Without it, the
    /// data is served only on a loopback listener of an HTTP server
    /// without --tokens or --auth.
    #[arg(
        long,
        env = "RESMUX_CONSOLE_TOKEN_FILE",
        requires = "metrics",
        conflicts_with = "no_console"
    )]
    console_token_file: Option<PathBuf>,
    /// Serve no console on the metrics listener: metrics and probes only.
    #[arg(long, requires = "metrics")]
    no_console: bool,
    /// A file of cursor secrets, one a line (32 bytes or more each):
    /// replicas given the same open each other's cursors. The first
    /// seals, every one opens. To replace a secret without breaking a
    /// walk, roll out three changes, each to every replica: add the new
    /// one last, move it first, drop the old one. Default: a random
    /// secret, whose cursors open in this process only.
    #[arg(
        long,
        env = "RESMUX_CURSOR_SECRET_FILE",
        conflicts_with = "cursor_secret"
    )]
    cursor_secret_file: Option<PathBuf>,
    /// The cursor secrets themselves, as in --cursor-secret-file; best
    /// given in the environment, where `ps` does not show it.
    #[arg(long, env = "RESMUX_CURSOR_SECRET", hide_env_values = true)]
    cursor_secret: Option<String>,
    /// Seconds between changes of the key derived from the cursor secret
    /// (60 or more, the same on every replica): a cursor opens for one
    /// to two of these, and a listing page with a cursor is kept for at
    /// most half of one.
    #[arg(long, env = "RESMUX_CURSOR_ROTATION", default_value_t = cursor::DEFAULT_ROTATION.as_secs(), value_parser = clap::value_parser!(u64).range(60..))]
    cursor_rotation: u64,
    /// Name the resource URI (`mcp.resource.uri`) in the spans of reads
    /// and subscriptions; left out unless asked for, as URIs may carry
    /// data.
    #[arg(long)]
    trace_uris: bool,
}

/// The flags' parser on its own, for [`Serve::for_project`].
#[derive(clap::Parser)]
struct ServeCommand {
    #[command(flatten)]
    serve: Serve,
}

impl Serve {
    /// What `resmux dev` serves: the project folder `plugins`, as `resmux
    /// serve --plugins DIR --response-cache-mib 0` would (every
    /// answer fresh, so that a client sees the last build), over HTTP at
    /// `http` if given, whatever the environment says.
    pub fn for_project(plugins: &Path, http: Option<std::net::SocketAddr>) -> Result<Self> {
        let mut line = vec![
            "resmux-dev".into(),
            "--plugins".into(),
            plugins.as_os_str().to_owned(),
            "--response-cache-mib".into(),
            "0".into(),
        ];
        if let Some(address) = http {
            line.extend(["--http".into(), address.to_string().into()]);
        }
        let parser = ServeCommand::command().mut_args(|flag| flag.env(None));
        let matches = parser.try_get_matches_from(line)?;
        Ok(ServeCommand::from_arg_matches(&matches)?.serve)
    }

    /// Serves until the client leaves (stdio) or a stop signal (HTTP).
    pub async fn execute(self) -> Result<()> {
        self.serve_on(None).await
    }

    /// Serves the folder's namespace with plugins compiled by `runtime`, or
    /// by a runtime with the flags' compile cache, made once every other
    /// flag is found sound. Clients are answered once the plugins whose
    /// code is compiled already have loaded; the others arrive while it
    /// serves ([`startup`]). With --locked, every plugin loads first.
    pub async fn serve_on(self, runtime: Option<Runtime>) -> Result<()> {
        let cursor_seal = cursor_seal(
            self.cursor_secret_file.as_deref(),
            self.cursor_secret.as_deref(),
            Duration::from_secs(self.cursor_rotation),
        )?;
        let metrics_token = self
            .metrics_token_file
            .as_deref()
            .map(|path| transport::read_token_file(path, OperatorToken::Metrics))
            .transpose()?;
        let console_token = self
            .console_token_file
            .as_deref()
            .map(|path| transport::read_token_file(path, OperatorToken::Console))
            .transpose()?;
        if console_token.is_some() && console_token == metrics_token {
            bail!(
                "the console token is the metrics token: the console's data reads every resource, so give it a token no scraper holds"
            );
        }
        let shared_limits = self
            .redis
            .as_deref()
            .map(SharedLimits::open)
            .transpose()?
            .map(Arc::new);
        let access = admission(
            self.tokens.as_deref(),
            self.auth.as_deref(),
            self.access_policy.as_deref(),
            shared_limits.as_ref(),
        )?
        .map(Arc::new);
        if let Some(oauth) = access.as_ref().and_then(|access| access.oauth.as_ref()) {
            oauth.prefetch_keys();
        }
        let http = self.http.map(|address| HttpOptions {
            address,
            allowed_hosts: self.allowed_hosts,
            allowed_origins: self.allowed_origins,
            access,
            connections: ConnectionLimits::new(
                self.max_connections,
                self.max_connections_per_source.map(NonZeroUsize::get),
                self.max_connections_per_client.map(NonZeroUsize::get),
            ),
            session_idle: Duration::from_secs(self.session_idle_seconds),
        });
        let folder = self.folder;
        let runtime = match runtime {
            Some(runtime) => runtime,
            None => folder.cache.runtime(folder.tiers)?,
        };
        resmux::platform::say_differences();
        let rules = folder.rules.rules()?;
        // In locked mode nothing is served unaudited.
        let audit = self
            .audit_log
            .as_deref()
            .map(|path| AuditLog::open(path, rules.locked))
            .transpose()?;
        // Dropped when serving ends, however it ends: waits, briefly, until
        // the audit lines still queued are written.
        let _flushed = audit.as_ref().map(AuditLog::flushed_on_drop);
        let namespace =
            Arc::new(Namespace::new(folder.page_size as usize).with_cursor_seal(cursor_seal));
        let response_cache_bytes = self.response_cache_mib.saturating_mul(1024 * 1024);
        let cache = (response_cache_bytes > 0)
            .then(|| ResponseCache::new(response_cache_bytes, &namespace));
        let server = ResmuxServer::new(
            namespace.clone(),
            protocol::Options {
                tool_bridge: !self.no_tools,
                audit,
                cache,
            },
        );
        if let Some(address) = self.metrics {
            let console = !self.no_console;
            let routes = match console {
                true => Console::routes(Served {
                    server: server.clone(),
                    token: console_token,
                    admission: http.as_ref().and_then(|http| http.access.clone()),
                    folder: folder.plugins.clone(),
                    http: http.is_some(),
                    listener: address,
                    audited: self.audit_log.is_some(),
                    allowed_hosts: http
                        .as_ref()
                        .map_or_else(Vec::new, |http| http.allowed_hosts.clone()),
                }),
                false => axum::Router::new(),
            };
            let bound = transport::serve_metrics(address, metrics_token.as_deref(), routes).await?;
            if console {
                tracing::info!("serving the console at http://{bound}/console");
            }
        }
        let arriving = if rules.locked {
            let loading = load_all(&folder, &runtime, &rules, &namespace).await?;
            all_arrived(&folder.plugins, runtime, rules, &namespace, &loading)?;
            None
        } else {
            start_loading(&folder.plugins, runtime, rules, &namespace).await?
        };
        changes::spawn_poller(&namespace);
        let server = Observed::new(server, self.trace_uris);
        let serving = async move {
            match http {
                Some(options) => transport::serve_http(server, options).await,
                None => transport::serve_stdio(server).await,
            }
        };
        match arriving {
            None => serving.await,
            // Serves until the client leaves, unless watching the folder
            // fails once every plugin has arrived.
            Some(arriving) => tokio::select! {
                served = serving => served,
                Ok(Err(error)) = arriving => Err(error),
            },
        }
    }
}

/// Who may connect, and the access policy that guards them: none without a
/// tokens file or an auth file.
pub(super) fn admission(
    tokens: Option<&Path>,
    auth: Option<&Path>,
    access_policy: Option<&Path>,
    shared_limits: Option<&Arc<SharedLimits>>,
) -> Result<Option<Admission>> {
    if tokens.is_none() && auth.is_none() {
        if let Some(path) = access_policy {
            bail!(
                "access policy {} decides for the clients of --tokens and --auth; give one of them",
                path.display()
            );
        }
        return Ok(None);
    }
    let tokens = tokens
        .map(|tokens| AccessList::read(tokens, shared_limits))
        .transpose()?;
    let oauth = auth.map(ResourceServer::read).transpose()?;
    Admission::new(tokens, oauth, access_policy).map(Some)
}

/// The seal of the cursors this server issues: one from the operator's
/// secrets, shared with other replicas, or a random one.
fn cursor_seal(file: Option<&Path>, text: Option<&str>, rotation: Duration) -> Result<CursorSeal> {
    match (file, text) {
        (Some(file), _) => {
            let text = resmux::operator_file::read_text(file, "the cursor secret file")?;
            CursorSeal::shared(&text, rotation)
                .map_err(|error| anyhow::anyhow!("cursor secret file {}: {error}", file.display()))
        }
        (None, Some(text)) => CursorSeal::shared(text, rotation)
            .map_err(|error| anyhow::anyhow!("RESMUX_CURSOR_SECRET: {error}")),
        (None, None) => Ok(CursorSeal::random(rotation)),
    }
}

/// Tells `namespace` to expect every plugin of the folder `plugins`, loads
/// those whose code is compiled already, and returns the task that compiles
/// and loads the others, if any are left.
async fn start_loading(
    plugins: &Path,
    runtime: Runtime,
    rules: catalog::Rules,
    namespace: &Arc<Namespace>,
) -> Result<Option<JoinHandle<Result<()>>>> {
    let mut expected = startup::expect_folder(plugins, namespace)?;
    expected.load_compiled(&runtime, &rules, namespace).await;
    let compiling = expected.left_to_compile() > 0;
    let (plugins, namespace) = (plugins.to_owned(), namespace.clone());
    let rest = async move {
        let loading = expected.load_the_rest(&runtime, &rules, &namespace).await;
        warn_if_empty(&plugins, &loading);
        all_arrived(&plugins, runtime, rules, &namespace, &loading)
    };
    if !compiling {
        // A warm start: ready, and the folder watched, before anything is
        // served.
        rest.await?;
        return Ok(None);
    }
    Ok(Some(tokio::spawn(rest)))
}

/// Once every plugin of the folder has loaded or failed: `/readyz` answers
/// ready, and the folder is watched from now on.
fn all_arrived(
    plugins: &Path,
    runtime: Runtime,
    rules: catalog::Rules,
    namespace: &Arc<Namespace>,
    loading: &Loading,
) -> Result<()> {
    tracing::info!(schemes = ?namespace.schemes(), "namespace ready");
    transport::mark_ready();
    catalog::live::spawn(plugins, runtime, rules, namespace.clone(), loading)
}

#[cfg(test)]
mod tests {
    use super::Serve;

    /// `resmux dev` serves as the command line it stands for: a flag
    /// renamed or a required one added fails here, not in an author's
    /// terminal.
    #[test]
    fn a_project_is_served_fresh_over_the_given_transport() {
        let address = "127.0.0.1:8123".parse().unwrap();
        let over_http = Serve::for_project("/project".as_ref(), Some(address)).unwrap();
        assert_eq!(over_http.folder.plugins, std::path::Path::new("/project"));
        assert_eq!(over_http.http, Some(address));
        assert_eq!(over_http.response_cache_mib, 0);
        assert_eq!(over_http.tokens, None);
        assert!(
            !over_http.no_tools && over_http.metrics.is_none() && over_http.audit_log.is_none()
        );
        let over_stdio = Serve::for_project("/project".as_ref(), None).unwrap();
        assert_eq!(over_stdio.http, None);
    }
}
