//! The two tiers of compiled code a plugin runs on, and its move from the
//! first to the second.
//!
//! A component is first compiled by wasmtime's baseline compiler, Winch,
//! whose whole point is compile speed (a 19 MB Python component in about a
//! second on two cores, against four for Cranelift), so the plugin serves
//! at once. Cranelift then compiles it in the background ([`optimize`]):
//! one component at a time, once no baseline compile is under way, on
//! threads of their own that run only on a core nothing else wants
//! (`SCHED_IDLE`), so that neither the protocol's threads, nor the plugins'
//! calls, nor a baseline compile wait for it. A baseline compile runs on
//! threads of its own too ([`Threads::Foreground`]), at the plugins' priority,
//! below the protocol's threads. Once its code is ready, an instance of it
//! runs `init`, and the plugin moves to it between calls
//! ([`WasmPlugin::move_to`]): calls in flight finish on the baseline code,
//! and the plugin keeps its call slots, health and stuck calls.
//!
//! Both tiers go into the compile cache (under their own engine's key), so
//! nothing is compiled twice: a plugin whose optimized code is cached, or
//! loaded for another mount, starts on it directly, and a server that exits
//! early keeps the tier it finished. A component Winch cannot compile (a
//! proposal it lacks, such as tail calls) is compiled by Cranelift alone,
//! which the log says once; so is every component where Winch cannot run
//! at all (another architecture).

use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::Mutex;

use super::Runtime;
use super::plugin::WasmPlugin;
use crate::telemetry::board::board;
use crate::telemetry::metrics;
use crate::under_way::UnderWay;

/// Which code `resmux serve` runs its plugins on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Tiers {
    /// Winch's code at once, then Cranelift's once it is compiled.
    #[default]
    Both,
    /// Cranelift's alone: a plugin serves once Cranelift has compiled it.
    Optimized,
    /// Winch's alone, never moved up (to measure it).
    Baseline,
}

/// The code a plugin runs on now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Winch's, with Cranelift's not yet being compiled.
    Baseline,
    /// Winch's, while Cranelift compiles its own.
    Optimizing,
    /// Cranelift's.
    Optimized,
}

impl Tier {
    pub const ALL: [Self; 3] = [Self::Baseline, Self::Optimizing, Self::Optimized];

    /// Its name in the metrics, the log and the console.
    pub fn name(self) -> &'static str {
        match self {
            Self::Baseline => "baseline",
            Self::Optimizing => "optimizing",
            Self::Optimized => "optimized",
        }
    }
}

/// Code of the baseline tier, and what compiling its optimized tier takes.
pub struct ToOptimize {
    pub(super) bytes: Vec<u8>,
    pub(super) digest: String,
    /// The runtime of the plugin's stack limit, whose engine compiles the
    /// optimized tier.
    pub(super) runtime: Runtime,
}

/// Says that the plugin `scheme` (whose runtime id is `plugin`) runs on
/// `tier`'s code now, which took `compiled` to compile or load if it is
/// new code; nothing, if that plugin no longer serves `scheme` (a replaced
/// one, still finishing a call).
pub fn now_on(scheme: &str, plugin: u64, tier: Tier, compiled: Option<Duration>) {
    let code = match tier {
        Tier::Optimized => Tier::Optimized,
        Tier::Baseline | Tier::Optimizing => Tier::Baseline,
    };
    let compiled = compiled.map(|elapsed| (code.name(), elapsed));
    if !board().code(plugin, tier.name(), compiled) {
        return;
    }
    let metrics = metrics::metrics();
    for each in Tier::ALL {
        metrics
            .plugin_tier
            .get_or_create(&metrics::PluginTier::new(scheme, each.name()))
            .set(i64::from(each == tier));
    }
    if let Some((code, elapsed)) = compiled {
        metrics
            .plugin_compile_seconds
            .get_or_create(&metrics::PluginTier::new(scheme, code))
            .set(elapsed.as_secs_f64());
    }
}

/// Compiles the optimized tier of `plugin`, which serves `scheme` on the
/// baseline code `job` came from, in the background, and moves the plugin
/// to it. The plugin holds the job until its turn comes, so that nothing of
/// a plugin gone by then (replaced or removed) is kept, or compiled. A
/// failure leaves the plugin on its baseline code, and says why.
pub fn optimize(plugin: &Arc<WasmPlugin>, scheme: &str, job: ToOptimize) {
    plugin.hold_to_optimize(job);
    let (plugin, scheme) = (Arc::downgrade(plugin), scheme.to_owned());
    tokio::spawn(async move {
        if let Err(error) = optimized(&plugin, &scheme).await {
            if let Some(plugin) = plugin.upgrade() {
                now_on(&scheme, plugin.id(), Tier::Baseline, None);
            }
            tracing::warn!(
                scheme,
                "plugin stays on its baseline code: optimizing it failed: {error:#}"
            );
        }
    });
}

/// One component compiled by Cranelift at a time.
static OPTIMIZING: Mutex<()> = Mutex::const_new(());

async fn optimized(plugin: &Weak<WasmPlugin>, scheme: &str) -> Result<()> {
    let _turn = OPTIMIZING.lock().await;
    FOREGROUND.until_none().await;
    let Some((id, job)) = plugin
        .upgrade()
        .and_then(|plugin| Some((plugin.id(), plugin.take_to_optimize()?)))
    else {
        return Ok(());
    };
    tracing::debug!(scheme, "optimizing the plugin's code");
    now_on(scheme, id, Tier::Optimizing, None);
    let started = Instant::now();
    let ToOptimize {
        bytes,
        digest,
        runtime,
    } = job;
    let on = runtime.on.clone();
    let (component, _) =
        on_optimizer(move || runtime.compile_on(&runtime.on, &bytes, &digest, Threads::Optimizer))
            .await?
            .context("Cranelift cannot compile it")?;
    let elapsed = started.elapsed();
    let Some(plugin) = plugin.upgrade() else {
        return Ok(());
    };
    let grants = plugin.grants();
    let linked = on.link(&component, &grants, plugin.pool_share())?;
    plugin
        .move_to(linked, on.epoch.clone())
        .await
        .context("its optimized code does not start")?;
    now_on(scheme, id, Tier::Optimized, Some(elapsed));
    tracing::info!(
        scheme,
        elapsed_ms = elapsed.as_millis() as u64,
        "plugin moved to optimized code"
    );
    Ok(())
}

/// Runs `work` on the optimizer's threads, whose parallel compilation stays
/// on them.
async fn on_optimizer<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let (done, outcome) = tokio::sync::oneshot::channel();
    let pool = OPTIMIZER
        .pool()
        .context("cannot start the optimizer's threads")?;
    pool.spawn(move || {
        let _ = done.send(work());
    });
    outcome
        .await
        .context("the optimizer's thread ended before it finished")
}

/// The threads a compile runs on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Threads {
    /// The compile threads, at the plugins' priority: a compile a client
    /// may be waiting for, which the optimizer waits for.
    Foreground,
    /// The calling thread: the optimizer's own.
    Optimizer,
}

impl Threads {
    /// Runs `work`, whose parallel compilation stays on these threads; a
    /// foreground compile runs on the caller's thread (and rayon's) if the
    /// compile threads cannot be started.
    pub(super) fn run<T: Send>(self, work: impl FnOnce() -> T + Send) -> T {
        match self {
            Self::Optimizer => work(),
            Self::Foreground => {
                let _under_way = FOREGROUND.start();
                match COMPILER.pool() {
                    Some(pool) => pool.install(work),
                    None => work(),
                }
            }
        }
    }
}

/// Compiles a client may be waiting for, under way now.
static FOREGROUND: LazyLock<Arc<UnderWay>> = LazyLock::new(Arc::default);

/// A pool of compile threads, a core each, started on first use at the
/// priority `lower` gives them.
struct CompileThreads {
    name: &'static str,
    lower: fn(),
    pool: OnceLock<Option<rayon::ThreadPool>>,
}

/// Baseline compiles (and any a client waits for), at the plugins'
/// priority.
static COMPILER: CompileThreads = CompileThreads {
    name: "compile",
    lower: super::executor::lower_to_plugins,
    pool: OnceLock::new(),
};

/// Optimized compiles in the background, below everything.
static OPTIMIZER: CompileThreads = CompileThreads {
    name: "optimize",
    lower: super::executor::idle_this_thread,
    pool: OnceLock::new(),
};

impl CompileThreads {
    fn pool(&'static self) -> Option<&'static rayon::ThreadPool> {
        self.pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(super::executor::cores())
                    .thread_name(move |index| format!("{}:{index}", self.name))
                    .start_handler(move |_| (self.lower)())
                    // A compile that panics fails its plugin, not the process.
                    .panic_handler(|_| tracing::error!("compiling a plugin panicked"))
                    .build()
                    .inspect_err(|error| {
                        tracing::warn!("cannot start the {} threads: {error}", self.name);
                    })
                    .ok()
            })
            .as_ref()
    }
}
