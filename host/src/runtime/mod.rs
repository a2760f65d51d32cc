//! Running plugins: wasmtime engines with the component model (one per stack
//! limit in use), the compile cache, the host's descriptor budget
//! ([`handles`]), and [`WasmPlugin`], which calls a component's exports under
//! its policy's limits.
//!
//! The runtime knows nothing of schemes or MCP: it turns component bytes into a
//! [`crate::contract::Provider`].

mod bindings;
mod cache;
mod handles;
mod health;
mod plugin;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

pub use bindings::PluginInfo;
pub use cache::{CompileCache, Origin};
pub use handles::HandleBudget;
pub use plugin::WasmPlugin;

use crate::policy::limits::{DEFAULT_STACK_KIB, EPOCH_TICK};
use crate::policy::{self, Policy, Sandbox};

/// The engine plugins run on, with what every plugin gets linked once
/// ([`policy::link_common`]); each plugin's linker adds what its grants
/// bring, and the policy decides what each call may use. The stack limit is
/// a setting of the engine, so each stack size in use gets an engine of its
/// own, shared by every plugin with that limit (most plugins keep the
/// default, and so share one).
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    linker: Arc<Linker<Sandbox>>,
    cache: CompileCache,
    handles: HandleBudget,
    engines: Arc<Mutex<HashMap<u32, Engined>>>,
}

/// An engine and the linker every plugin on it starts from.
type Engined = (Engine, Arc<Linker<Sandbox>>);

/// Stack above the plugin's own that a call's fiber keeps for the host.
const HOST_STACK: usize = 1536 * 1024;

/// A component compiled and checked against the contract, not yet started.
pub struct Compiled {
    pub component: Component,
    /// Lowercase hex SHA-256 of the component's bytes.
    pub digest: String,
    pub origin: Origin,
    pub elapsed: Duration,
}

impl Runtime {
    /// Creates the engine for the default stack limit; plugins share
    /// `handles`.
    pub fn new(cache: CompileCache, handles: HandleBudget) -> Result<Self> {
        let (engine, linker) = new_engine(DEFAULT_STACK_KIB)?;
        let engines = HashMap::from([(DEFAULT_STACK_KIB, (engine.clone(), linker.clone()))]);
        Ok(Self {
            engine,
            linker,
            cache,
            handles,
            engines: Arc::new(Mutex::new(engines)),
        })
    }

    /// The runtime whose engine gives plugins `stack_kib` KiB of stack; the
    /// engine is created on first use, with the clock that drives its time
    /// limits.
    pub fn with_stack(&self, stack_kib: u32) -> Result<Self> {
        let mut engines = self
            .engines
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let (engine, linker) = match engines.get(&stack_kib) {
            Some(engined) => engined.clone(),
            None => {
                let engined = new_engine(stack_kib)?;
                engines.insert(stack_kib, engined.clone());
                engined
            }
        };
        Ok(Self {
            engine,
            linker,
            cache: self.cache.clone(),
            handles: self.handles.clone(),
            engines: self.engines.clone(),
        })
    }

    /// Compiles `bytes` (or loads them from the compile cache); with a
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
        let (component, origin) = self
            .cache
            .component(&self.engine, bytes, &digest)
            .context("not a loadable component")?;
        Ok(Compiled {
            component,
            digest,
            origin,
            elapsed: started.elapsed(),
        })
    }

    /// Links a compiled component into a plugin named `name`, checking that
    /// it exports the contract and imports nothing the host cannot provide.
    pub fn plugin(
        &self,
        name: &str,
        component: &Component,
        policy: Policy,
        config: Vec<(String, String)>,
    ) -> Result<WasmPlugin> {
        let mut linker = Linker::clone(&self.linker);
        policy
            .link(&mut linker, component)
            .context("cannot link what the plugin's grants bring")?;
        let instance_pre = linker
            .instantiate_pre(component)
            .map_err(anyhow::Error::from)
            .context("the component imports something resmux does not provide")?;
        let pre = bindings::PluginPre::new(instance_pre)
            .map_err(anyhow::Error::from)
            .context("the component does not export resmux:provider/provider@0.1.0")?;
        Ok(WasmPlugin::new(
            name.into(),
            pre,
            policy,
            config,
            self.handles.clone(),
        ))
    }

    /// Names of what a component imports and exports, for `inspect`.
    pub fn interface(&self, component: &Component) -> (Vec<String>, Vec<String>) {
        let ty = component.component_type();
        let imports = ty.imports(&self.engine).map(|(name, _)| name.to_owned());
        let exports = ty.exports(&self.engine).map(|(name, _)| name.to_owned());
        (imports.collect(), exports.collect())
    }
}

/// An engine whose plugins get `stack_kib` KiB of stack, and its common
/// linker.
fn new_engine(stack_kib: u32) -> Result<Engined> {
    let stack = stack_kib as usize * 1024;
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(stack)
        .async_stack_size(stack + HOST_STACK);
    let engine = Engine::new(&config)?;
    let mut linker = Linker::new(&engine);
    policy::link_common(&mut linker)?;
    spawn_epoch_clock(&engine);
    Ok((engine, Arc::new(linker)))
}

/// Advances the engine's epoch until the engine is dropped.
fn spawn_epoch_clock(engine: &Engine) {
    let engine = engine.weak();
    std::thread::Builder::new()
        .name("resmux-epoch".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("the epoch clock thread starts");
}
