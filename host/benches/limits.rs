//! What the sandbox's limits cost per call. The same reads of the `files`
//! plugin (1 KiB and 1 MiB) run, side by side in one run:
//!
//! - `limited`: through resmux's runtime, with every limit in force (epoch
//!   interruption compiled into the code and charged to a CPU budget, the
//!   memory and table limiter, the handle cap and the host's descriptor
//!   budget, the wall-clock timeout, the call slots, fault accounting, output
//!   capture), as a client's read goes: the plugin locates the file, and
//!   resmux reads it through the grant (`runtime/locate.rs`);
//! - `bare`: through plain wasmtime with the same WASI grant and a fresh
//!   instance per call too, but an engine without epoch interruption and a
//!   store without limits or deadlines.
//!
//! The ratio `limited / bare` is the price of the limits, less what reading
//! located files saves. Needs `scripts/build` first (it reads
//! `target/plugins/files.wasm`).

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use resmux::catalog::Manifest;
use resmux::contract::Provider;
use resmux::runtime::{CompileCache, HandleBudget, Runtime, Tiers};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Bindings of the contract for the bare instance.
mod contract {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "resmux:provider/plugin",
        exports: { default: async },
    });
}

/// The state of a bare instance: WASI and nothing else.
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The files plugin on plain wasmtime: no limits of any kind.
struct BareFiles {
    engine: Engine,
    pre: contract::PluginPre<Bare>,
    data: std::path::PathBuf,
}

impl BareFiles {
    fn new(bytes: &[u8], data: &Path) -> Self {
        let mut config = Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        let component = Component::new(&engine, bytes).unwrap();
        let pre = contract::PluginPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        Self {
            engine,
            pre,
            data: data.to_owned(),
        }
    }

    async fn read(&self, path: &str) -> usize {
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_blocking_current_thread(true)
            .preopened_dir(&self.data, "/data", FsPerms::ReadOnly)
            .unwrap();
        let mut store = Store::new(
            &self.engine,
            Bare {
                wasi: wasi.build(),
                table: ResourceTable::new(),
            },
        );
        let plugin = self.pre.instantiate_async(&mut store).await.unwrap();
        let guest = plugin.resmux_provider_provider();
        guest.call_init(&mut store, &[]).await.unwrap().unwrap();
        let read = guest.call_read(&mut store, path).await.unwrap().unwrap();
        read.contents.len()
    }
}

fn files_component() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/files.wasm");
    std::fs::read(&path)
        .unwrap_or_else(|_| panic!("{} is missing: run scripts/build first", path.display()))
}

fn limits(c: &mut Criterion) {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("1k.txt"), "a".repeat(1024)).unwrap();
    std::fs::write(data.path().join("1m.txt"), "b".repeat(1024 * 1024)).unwrap();
    let bytes = files_component();

    let runtime = Runtime::new(
        CompileCache::disabled(),
        HandleBudget::from_process_limit(),
        Tiers::Optimized,
    )
    .unwrap();
    let manifest: Manifest = toml::from_str(&format!(
        "[[files]]\nhost = {:?}\nguest = \"/data\"\n",
        data.path().display().to_string()
    ))
    .unwrap();
    let compiled = runtime.compile(&bytes, None).unwrap();
    let limited = runtime
        .plugin(
            "files",
            &compiled,
            manifest.grants(data.path()).unwrap(),
            Vec::new(),
        )
        .unwrap();
    let bare = BareFiles::new(&bytes, data.path());
    let tokio = tokio::runtime::Runtime::new().unwrap();

    for size in ["1k", "1m"] {
        let path = format!("{size}.txt");
        let mut group = c.benchmark_group(format!("limits read {size}"));
        group.bench_function("limited", |b| {
            b.to_async(&tokio).iter(|| async {
                assert_eq!(limited.read(&path).await.unwrap().contents.len(), 1);
            })
        });
        group.bench_function("bare", |b| {
            b.to_async(&tokio)
                .iter(|| async { assert_eq!(bare.read(&path).await, 1) })
        });
        group.finish();
    }
}

criterion_group!(benches, limits);
criterion_main!(benches);
