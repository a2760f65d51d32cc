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
mod epoch;
mod executor;
mod handles;
mod health;
mod instance;
pub(crate) mod locate;
mod meter;
mod placement;
mod plugin;
mod pool_share;
mod stuck;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use bindings::PluginInfo;
pub use cache::{CompileCache, Origin};
pub use handles::HandleBudget;
pub use plugin::WasmPlugin;

use self::epoch::EpochClock;
pub use self::pool_share::PoolShareFull;
use self::pool_share::{PoolLedger, Slots};

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
/// default, and so share one).
#[derive(Clone)]
pub struct Runtime {
    on: Arc<Engined>,
    cache: CompileCache,
    handles: HandleBudget,
    engines: Arc<Mutex<HashMap<u32, Arc<Engined>>>>,
}

/// An engine, the linker every plugin on it starts from, and the components
/// loaded on it by digest: every mount of the same bytes shares one compiled
/// component (its machine code and memory images).
struct Engined {
    engine: Engine,
    epoch: EpochClock,
    linker: Linker<Sandbox>,
    components: Mutex<HashMap<String, Arc<Component>>>,
    /// One turn per digest being compiled: a second load of the same
    /// component (`resmux dev`'s check beside its server, two mounts) waits
    /// for the first and shares what it compiled.
    compiling: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// The pool's slots not reserved by a plugin; none when instances are
    /// allocated one by one.
    pool: Option<Arc<PoolLedger>>,
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
}

impl Runtime {
    /// Creates the engine for the default stack limit; plugins share
    /// `handles`.
    pub fn new(cache: CompileCache, handles: HandleBudget) -> Result<Self> {
        executor::start()?;
        let on = Arc::new(Engined::new(DEFAULT_STACK_KIB)?);
        let engines = HashMap::from([(DEFAULT_STACK_KIB, on.clone())]);
        Ok(Self {
            on,
            cache,
            handles,
            engines: Arc::new(Mutex::new(engines)),
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
                let on = Arc::new(Engined::new(stack_kib)?);
                engines.insert(stack_kib, on.clone());
                on
            }
        };
        Ok(Self {
            on,
            cache: self.cache.clone(),
            handles: self.handles.clone(),
            engines: self.engines.clone(),
        })
    }

    /// Compiles `bytes` (or loads them from the compile cache, or shares
    /// them with a mount that already loaded them); with a `pin`, bytes of
    /// another SHA-256 are refused before anything is compiled or loaded.
    pub fn compile(&self, bytes: &[u8], pin: Option<&str>) -> Result<Compiled> {
        let started = Instant::now();
        let digest = hex::encode(Sha256::digest(bytes));
        if let Some(expected) = pin
            && !expected.eq_ignore_ascii_case(&digest)
        {
            bail!("its sha256 is {digest}, but the manifest pins {expected}");
        }
        let turn = self.on.compile_turn(&digest);
        let (component, origin) = {
            let _turn = turn.lock().unwrap_or_else(PoisonError::into_inner);
            match self.on.loaded(&digest) {
                Some(component) => (component, Origin::Shared),
                None => {
                    let (component, origin) = self
                        .cache
                        .component(&self.on.engine, bytes, &digest)
                        .context("not a loadable component")?;
                    (self.on.keep(&digest, component), origin)
                }
            }
        };
        Ok(Compiled {
            component,
            digest,
            origin,
            elapsed: started.elapsed(),
        })
    }

    /// Whether loading `bytes` on this engine would compile nothing: a
    /// plugin uses them already, or the compile cache holds an entry for
    /// them (which is checked only when it is loaded).
    pub fn has_compiled(&self, bytes: &[u8]) -> bool {
        let digest = hex::encode(Sha256::digest(bytes));
        self.on.loaded(&digest).is_some() || self.cache.holds(&self.on.engine, &digest)
    }

    /// Links a compiled component into a plugin named `name`, checking that
    /// it exports the contract and imports nothing the host cannot provide.
    pub fn plugin(
        &self,
        name: &str,
        component: &Arc<Component>,
        grants: Grants,
        config: Vec<(String, String)>,
    ) -> Result<WasmPlugin> {
        let mut linker = self.on.linker.clone();
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
        let pool_share = match &self.on.pool {
            Some(pool) => Some(pool.reserve(Slots::of(component), grants.limits.concurrent_calls)?),
            None => None,
        };
        let linked = plugin::Linked {
            component: component.clone(),
            pre: instance_pre,
            indices,
            pool_share,
        };
        Ok(WasmPlugin::new(name.into(), linked, grants, config, self))
    }

    /// Names of what a component imports and exports, for `inspect`.
    pub fn interface(&self, component: &Component) -> (Vec<String>, Vec<String>) {
        let engine = &self.on.engine;
        let ty = component.component_type();
        let imports = ty.imports(engine).map(|(name, _)| name.to_owned());
        let exports = ty.exports(engine).map(|(name, _)| name.to_owned());
        (imports.collect(), exports.collect())
    }
}

impl Engined {
    /// An engine whose plugins get `stack_kib` KiB of stack, its instances
    /// drawn from a pool, and its common linker.
    fn new(stack_kib: u32) -> Result<Self> {
        let stack = stack_kib as usize * 1024;
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(stack)
            .async_stack_size(stack + HOST_STACK)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
        let (engine, pool) = match Engine::new(&config) {
            Ok(engine) => {
                crate::telemetry::metrics()
                    .instance_pool_capacity
                    .inc_by(i64::from(POOLED_INSTANCES));
                let pool = PoolLedger::new(Slots {
                    instances: POOLED_INSTANCES,
                    memories: POOLED_INSTANCES,
                    tables: POOLED_TABLES,
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
                (Engine::new(&config)?, None)
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
        })
    }

    /// The component of `digest`, if a plugin on this engine still uses it.
    fn loaded(&self, digest: &str) -> Option<Arc<Component>> {
        self.in_use().get(digest).cloned()
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
        self.in_use()
            .entry(digest.to_owned())
            .or_insert_with(|| Arc::new(component))
            .clone()
    }

    /// The components some plugin still holds; the others are forgotten.
    fn in_use(&self) -> MutexGuard<'_, HashMap<String, Arc<Component>>> {
        let mut components = self
            .components
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        components.retain(|_, held| Arc::strong_count(held) > 1);
        components
    }
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
