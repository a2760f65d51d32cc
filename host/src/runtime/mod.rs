//! Running plugins: wasmtime engines with the component model (one per stack
//! limit in use, each with the [`epoch`] clock of its time limits, which
//! sleeps while no call runs), the compile cache, the host's descriptor budget
//! ([`handles`]), and [`WasmPlugin`], which calls a component's exports under
//! its grants' limits.
//!
//! The runtime knows nothing of schemes or MCP: it turns component bytes into a
//! [`crate::contract::Provider`].

mod bindings;
mod cache;
mod call;
mod epoch;
mod executor;
mod fault;
mod handles;
mod health;
mod instance;
pub(crate) mod locate;
mod meter;
mod placement;
mod plugin;
mod pool_share;
mod stuck;
mod tiers;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Strategy,
};

pub use bindings::PluginInfo;
pub use cache::{CompileCache, Origin};
pub use executor::{cores, handle as plugin_threads, plugin_workers, protocol_workers};
pub use handles::HandleBudget;
pub use plugin::WasmPlugin;

use self::epoch::EpochClock;
pub use self::pool_share::PoolShareFull;
use self::pool_share::{PoolLedger, PoolShare, Slots};
use self::tiers::Threads;
pub use self::tiers::{Tier, Tiers, ToOptimize, now_on, optimize};

use crate::grants::limits::{
    DEFAULT_STACK_KIB, MAX_CORE_INSTANCES, MAX_MEMORIES, MAX_MEMORY_MIB, MAX_TABLE_ELEMENTS,
    MAX_TABLES,
};
use crate::grants::{self, Grants, Sandbox};

/// The engine plugins run on, with what every plugin gets linked once
/// ([`grants::link_common`]); each plugin's linker adds what its grants
/// bring, and the grants decide what each call may use. The stack limit is
/// a setting of the engine, so each stack size in use gets an engine of its
/// own, shared by every plugin with that limit (most plugins keep the
/// default, and so share one), and beside it the engine of its baseline
/// tier ([`tiers`]).
#[derive(Clone)]
pub struct Runtime {
    /// The engine of the optimized tier for this stack limit.
    on: Arc<Engined>,
    cache: CompileCache,
    handles: HandleBudget,
    engines: Arc<Mutex<HashMap<u32, Arc<Engined>>>>,
    tiers: Tiers,
}

/// An engine, the linker every plugin on it starts from, and the components
/// loaded on it by digest: every mount of the same bytes shares one compiled
/// component (its machine code and memory images).
struct Engined {
    engine: Engine,
    epoch: EpochClock,
    linker: Linker<Sandbox>,
    /// Held by the plugins that run them: a component none runs any more
    /// (baseline code a plugin moved up from) is freed at once.
    components: Mutex<HashMap<String, Weak<Component>>>,
    /// One turn per digest being compiled: a second load of the same
    /// component (`resmux dev`'s check beside its server, two mounts) waits
    /// for the first and shares what it compiled.
    compiling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The pool's slots not reserved by a plugin; none when instances are
    /// allocated one by one. An engine and its baseline twin share one: a
    /// plugin holds one share whichever code it runs, its calls on both
    /// never outnumber its call slots, and the idle instances of the code
    /// it left go with that code's last call.
    pool: Option<Arc<PoolLedger>>,
    stack_kib: u32,
    /// For an engine of the optimized tier, its baseline twin, made on
    /// first use; none where Winch cannot compile for this machine.
    baseline: OnceLock<Option<Arc<Engined>>>,
    /// For a baseline engine, the components Winch refused, by digest:
    /// they go to Cranelift at once, and are logged once.
    refused: Mutex<HashSet<String>>,
}

/// Stack above the plugin's own that a call's fiber keeps for the host.
const HOST_STACK: usize = 1536 * 1024;

/// Instances (and their linear memories, tables and fiber stacks) the
/// pooling allocator of one engine holds at once. Only address space is
/// reserved up front; a slot costs memory once it is used, and a slot
/// released keeps its mappings for the next instance of the same component.
const POOLED_INSTANCES: u32 = 1_000;

/// Bytes of a released memory or table that stay mapped and are reset by
/// copying (only the pages the call dirtied, where the kernel can say which:
/// `PAGEMAP_SCAN`, Linux 6.7) rather than handed back to the kernel: the
/// next call then takes no page faults and the host no TLB shootdowns.
const KEEP_RESIDENT: usize = 1 << 20;

/// Core instances in the pool: a counter with nothing reserved behind it,
/// so as many as every pooled instance may hold, and they never run out
/// before the instances do.
const POOLED_CORE_INSTANCES: u32 = MAX_CORE_INSTANCES * POOLED_INSTANCES;

/// Tables in the pool: two for each instance, as toolchains make.
const POOLED_TABLES: u32 = 2 * POOLED_INSTANCES;

/// A component compiled and checked against the contract, not yet started.
pub struct Compiled {
    pub component: Arc<Component>,
    /// Lowercase hex SHA-256 of the component's bytes.
    pub digest: String,
    pub origin: Origin,
    pub elapsed: Duration,
    /// [`Tier::Baseline`] or [`Tier::Optimized`].
    pub tier: Tier,
    /// For baseline code that is to move up: what compiling the optimized
    /// tier takes ([`optimize`]).
    pub to_optimize: Option<ToOptimize>,
    /// The engine it was compiled for, which links it.
    on: Arc<Engined>,
}

impl Runtime {
    /// Creates the engine for the default stack limit; plugins share
    /// `handles`, and run on the code `tiers` says.
    pub fn new(cache: CompileCache, handles: HandleBudget, tiers: Tiers) -> Result<Self> {
        executor::start()?;
        let on = Arc::new(Engined::new(DEFAULT_STACK_KIB, Strategy::Cranelift, None)?);
        let engines = HashMap::from([(DEFAULT_STACK_KIB, on.clone())]);
        Ok(Self {
            on,
            cache,
            handles,
            engines: Arc::new(Mutex::new(engines)),
            tiers,
        })
    }

    /// The compile cache, which pulled components are kept beside.
    pub fn cache(&self) -> &CompileCache {
        &self.cache
    }

    /// The runtime whose engine gives plugins `stack_kib` KiB of stack; the
    /// engine is created on first use, with the clock that drives its time
    /// limits.
    pub fn with_stack(&self, stack_kib: u32) -> Result<Self> {
        let mut engines = self.engines.lock().unwrap_or_else(PoisonError::into_inner);
        let on = match engines.get(&stack_kib) {
            Some(on) => on.clone(),
            None => {
                let on = Arc::new(Engined::new(stack_kib, Strategy::Cranelift, None)?);
                engines.insert(stack_kib, on.clone());
                on
            }
        };
        Ok(Self {
            on,
            cache: self.cache.clone(),
            handles: self.handles.clone(),
            engines: self.engines.clone(),
            tiers: self.tiers,
        })
    }

    /// Compiles `bytes` (or loads them from the compile cache, or shares
    /// them with a mount that already loaded them) on the soonest tier
    /// [`Tiers`] allows: the optimized code if it is ready, else the
    /// baseline tier's, which comes with what optimizing it takes. With a
    /// `pin`, bytes of another SHA-256 are refused before anything is
    /// compiled or loaded.
    pub fn compile(&self, bytes: &[u8], pin: Option<&str>) -> Result<Compiled> {
        let started = Instant::now();
        let digest = hex::encode(Sha256::digest(bytes));
        if let Some(expected) = pin
            && !expected.eq_ignore_ascii_case(&digest)
        {
            bail!("its sha256 is {digest}, but the manifest pins {expected}");
        }
        let optimized_ready = || self.on.holds(&self.cache, &digest);
        let baseline = match self.tiers {
            Tiers::Optimized => None,
            Tiers::Both if optimized_ready() => None,
            Tiers::Both | Tiers::Baseline => self
                .on
                .baseline()
                .filter(|baseline| !baseline.was_refused(&digest)),
        };
        let optimized = |started: Instant| -> Result<Compiled> {
            let (component, origin) =
                self.compile_on(&self.on, bytes, &digest, Threads::Foreground)?;
            Ok(Compiled {
                component,
                digest: digest.clone(),
                origin,
                elapsed: started.elapsed(),
                tier: Tier::Optimized,
                to_optimize: None,
                on: self.on.clone(),
            })
        };
        let Some(baseline) = baseline else {
            return optimized(started);
        };
        match self.compile_on(&baseline, bytes, &digest, Threads::Foreground) {
            Ok((component, origin)) => Ok(Compiled {
                component,
                digest: digest.clone(),
                origin,
                elapsed: started.elapsed(),
                tier: Tier::Baseline,
                to_optimize: (self.tiers == Tiers::Both).then(|| ToOptimize {
                    bytes: bytes.to_vec(),
                    digest: digest.clone(),
                    runtime: self.clone(),
                }),
                on: baseline,
            }),
            Err(refusal) => {
                let compiled = optimized(Instant::now())?;
                if baseline.refuse(&digest) {
                    tracing::warn!(
                        sha256 = digest,
                        "the baseline compiler cannot compile this component ({refusal:#}); it runs on Cranelift's code alone, compiled in {} ms",
                        compiled.elapsed.as_millis()
                    );
                }
                Ok(compiled)
            }
        }
    }

    /// Loads `bytes`, whose SHA-256 is `digest`, on `on`: shared with a
    /// plugin that runs it already, from the compile cache, or compiled
    /// now (and cached) on `threads`. The turn of `digest` is waited for
    /// here, never on a compile thread: a compile thread that blocked could
    /// hold up the very compile it waits for, which rayon may have handed
    /// it a part of.
    fn compile_on(
        &self,
        on: &Engined,
        bytes: &[u8],
        digest: &str,
        threads: Threads,
    ) -> Result<(Arc<Component>, Origin)> {
        let turn = on.compile_turn(digest);
        let _turn = turn.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(component) = on.loaded(digest) {
            return Ok((component, Origin::Shared));
        }
        let (component, origin) = threads
            .run(|| self.cache.component(&on.engine, bytes, digest))
            .context("not a loadable component")?;
        Ok((on.keep(digest, component), origin))
    }

    /// Whether loading `bytes` would compile nothing: a plugin uses them
    /// already, or the compile cache holds an entry for them (which is
    /// checked only when it is loaded), on a tier [`Tiers`] allows.
    pub fn has_compiled(&self, bytes: &[u8]) -> bool {
        let digest = hex::encode(Sha256::digest(bytes));
        let baseline = || {
            self.tiers != Tiers::Optimized
                && self
                    .on
                    .baseline()
                    .is_some_and(|baseline| baseline.holds(&self.cache, &digest))
        };
        (self.tiers != Tiers::Baseline && self.on.holds(&self.cache, &digest)) || baseline()
    }

    /// Links a compiled component into a plugin named `name`, checking that
    /// it exports the contract and imports nothing the host cannot provide,
    /// and reserving its share of the instance pool.
    pub fn plugin(
        &self,
        name: &str,
        compiled: &Compiled,
        grants: Grants,
        config: Vec<(String, String)>,
    ) -> Result<WasmPlugin> {
        let linked = compiled.on.link(&compiled.component, &grants, None)?;
        Ok(WasmPlugin::new(
            name.into(),
            linked,
            grants,
            config,
            compiled.on.epoch.clone(),
            self.handles.clone(),
        ))
    }

    /// Names of what a compiled component imports and exports, for
    /// `inspect`.
    pub fn interface(&self, compiled: &Compiled) -> (Vec<String>, Vec<String>) {
        let engine = &compiled.on.engine;
        let ty = compiled.component.component_type();
        let imports = ty.imports(engine).map(|(name, _)| name.to_owned());
        let exports = ty.exports(engine).map(|(name, _)| name.to_owned());
        (imports.collect(), exports.collect())
    }
}

impl Engined {
    /// An engine whose plugins get `stack_kib` KiB of stack, compiled by
    /// `strategy`, its instances drawn from a pool, and its common linker.
    /// A baseline engine shares `ledger`, its optimized twin's.
    fn new(stack_kib: u32, strategy: Strategy, ledger: Option<Arc<PoolLedger>>) -> Result<Self> {
        let stack = stack_kib as usize * 1024;
        let mut config = Config::new();
        config
            .strategy(strategy)
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(stack)
            .async_stack_size(stack + HOST_STACK)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
        let (engine, pool) = match Engine::new(&config) {
            Ok(engine) => {
                let pool = ledger.unwrap_or_else(|| {
                    crate::telemetry::metrics()
                        .instance_pool_capacity
                        .inc_by(i64::from(POOLED_INSTANCES));
                    PoolLedger::new(Slots {
                        instances: POOLED_INSTANCES,
                        memories: POOLED_INSTANCES,
                        tables: POOLED_TABLES,
                    })
                });
                (engine, Some(pool))
            }
            Err(error) => {
                // The pool reserves terabytes of address space up front,
                // which a limit on it (RLIMIT_AS) may forbid.
                tracing::warn!(
                    "instances are allocated one by one, slower: the instance pool cannot be set up: {error:#}"
                );
                config.allocation_strategy(InstanceAllocationStrategy::OnDemand);
                // A baseline engine still counts its plugins' shares in its
                // twin's pool, which their optimized code will draw on.
                (Engine::new(&config)?, ledger)
            }
        };
        let mut linker = Linker::new(&engine);
        grants::link_common(&mut linker)?;
        let epoch = EpochClock::start(&engine)?;
        Ok(Self {
            engine,
            epoch,
            linker,
            components: Mutex::default(),
            compiling: Mutex::default(),
            pool,
            stack_kib,
            baseline: OnceLock::new(),
            refused: Mutex::default(),
        })
    }

    /// The baseline twin of this engine of the optimized tier, made on
    /// first use; none, said once, where Winch cannot compile for this
    /// machine.
    fn baseline(&self) -> Option<Arc<Engined>> {
        self.baseline
            .get_or_init(|| {
                Engined::new(self.stack_kib, Strategy::Winch, self.pool.clone())
                    .inspect_err(|error| {
                        tracing::warn!(
                            "plugins run on Cranelift's code alone, each once it is compiled: the baseline compiler cannot run here: {error:#}"
                        );
                    })
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }

    /// Whether a plugin on this engine runs the component of `digest`, or
    /// `cache` holds it compiled for this engine.
    fn holds(&self, cache: &CompileCache, digest: &str) -> bool {
        self.loaded(digest).is_some() || cache.holds(&self.engine, digest)
    }

    /// Whether Winch refused the component of `digest` before.
    fn was_refused(&self, digest: &str) -> bool {
        lock(&self.refused).contains(digest)
    }

    /// Notes that Winch refused the component of `digest`; false if it
    /// was noted already (a second mount compiled at the same time).
    fn refuse(&self, digest: &str) -> bool {
        lock(&self.refused).insert(digest.to_owned())
    }

    /// `component` linked under `grants`, checked to export the contract
    /// and import nothing the host cannot provide, with `share` of the
    /// instance pool, or a share reserved now.
    fn link(
        &self,
        component: &Arc<Component>,
        grants: &Grants,
        share: Option<Arc<PoolShare>>,
    ) -> Result<plugin::Linked> {
        let mut linker = self.linker.clone();
        grants
            .link(&mut linker, component)
            .context("cannot link what the plugin's grants bring")?;
        let instance_pre = linker
            .instantiate_pre(component)
            .map_err(anyhow::Error::from)
            .context("the component imports something resmux does not provide")?;
        let indices = bindings::PluginIndices::new(&instance_pre)
            .map_err(anyhow::Error::from)
            .context("the component does not export resmux:provider/provider@0.1.0")?;
        let pool_share = match (share, &self.pool) {
            (Some(share), _) => Some(share),
            (None, Some(pool)) => Some(Arc::new(
                pool.reserve(Slots::of(component), grants.limits.concurrent_calls)?,
            )),
            (None, None) => None,
        };
        Ok(plugin::Linked {
            component: component.clone(),
            pre: instance_pre,
            indices,
            pool_share,
        })
    }

    /// The component of `digest`, if a plugin on this engine still uses it.
    fn loaded(&self, digest: &str) -> Option<Arc<Component>> {
        self.in_use().get(digest).and_then(Weak::upgrade)
    }

    /// The turn to take before compiling `digest`; turns nobody waits for
    /// any more are forgotten.
    fn compile_turn(&self, digest: &str) -> Arc<Mutex<()>> {
        let mut compiling = self
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        compiling.retain(|_, turn| Arc::strong_count(turn) > 1);
        compiling.entry(digest.to_owned()).or_default().clone()
    }

    /// Shares `component` under `digest`.
    fn keep(&self, digest: &str, component: Component) -> Arc<Component> {
        let mut components = self.in_use();
        if let Some(kept) = components.get(digest).and_then(Weak::upgrade) {
            return kept;
        }
        let component = Arc::new(component);
        components.insert(digest.to_owned(), Arc::downgrade(&component));
        component
    }

    /// The components some plugin still holds; the others are forgotten.
    fn in_use(&self) -> MutexGuard<'_, HashMap<String, Weak<Component>>> {
        let mut components = lock(&self.components);
        components.retain(|_, held| held.strong_count() > 0);
        components
    }
}

/// `mutex`'s guard, whether or not a thread panicked holding it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pooling allocator's settings: an instance is a few microseconds and
/// no system call away, its memories set up from copy-on-write images of the
/// component's data, reset in place when released, and its fiber stack
/// taken from the pool. Every slot
/// fits the largest limits a plugin may be given (`memory_mib`,
/// `table_elements`); a plugin's own limits are enforced by its store. A
/// component that declares more core instances, memories or tables than one
/// instance may hold is refused when it is loaded, naming the limit, and
/// each plugin draws only on its reserved share ([`pool_share`]).
fn pool() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOLED_INSTANCES)
        .total_core_instances(POOLED_CORE_INSTANCES)
        .total_memories(POOLED_INSTANCES)
        .total_tables(POOLED_TABLES)
        .total_stacks(POOLED_INSTANCES)
        .max_core_instances_per_component(MAX_CORE_INSTANCES)
        .max_memories_per_component(MAX_MEMORIES)
        .max_tables_per_component(MAX_TABLES)
        .max_component_instance_size(8 << 20)
        .max_core_instance_size(8 << 20)
        .max_memories_per_module(4)
        .max_tables_per_module(4)
        .max_memory_size((MAX_MEMORY_MIB as usize) << 20)
        .table_elements(MAX_TABLE_ELEMENTS as usize)
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT);
    pool
}
