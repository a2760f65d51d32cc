//! The cost of the Wasm read path. Reads of 1 KiB and 1 MiB of text go
//! through the whole host path (namespace, runtime, a plugin) and, in the
//! same run, through a native provider that reads the same text from files
//! behind the same namespace interface; the ratio is the price of the
//! sandbox, in two cases:
//!
//! - **computed**: the `liar` test plugin answers `bytes/N` with N bytes of
//!   text it makes in its linear memory (one fill, the least work there is
//!   to make them), copied out through `read`: what the
//!   sandbox costs a plugin that computes its answer (goals: within 2x of
//!   native at 1 KiB, 1.2x at 1 MiB);
//! - **located**: the `files` example, which exports `locate`, so the host
//!   reads the file itself and the plugin only names it.
//!
//! After each size, the ratios to native are printed beside their goals:
//! the median over criterion's samples of each case's time per read.
//!
//! Also: compiling the plugin, loading it from the compile cache, sharing it
//! with another mount once it is loaded, and starting an instance
//! (instantiate plus `init`).
//!
//! Needs `scripts/build` first (it reads `target/plugins/files.wasm` and
//! `target/test-plugins/liar.wasm`).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use resmux::catalog::Manifest;
use resmux::contract::{
    Body, ChangeReport, Completion, CompletionRequest, Content, Page, Provider, ProviderError,
    ReadResult, ResourceEntry, TemplateEntry,
};
use resmux::namespace::uri::Uri;
use resmux::namespace::{MountSettings, Namespace};
use resmux::runtime::{CompileCache, HandleBudget, Runtime, Tiers, WasmPlugin};

/// Criterion's samples per case; the ratios are taken over the last this
/// many per-read times, which follow its warm-up.
const SAMPLES: usize = 100;

/// The sizes read: the file name of the located and native cases, the
/// byte count of the computed one, and the goal of computed ÷ native.
const SIZES: [(&str, usize, f64); 2] = [("1k", 1024, 2.0), ("1m", 1024 * 1024, 1.2)];

/// A native provider with the files plugin's read path: read the file on the
/// calling thread (as the runtime lets plugins do), check UTF-8, answer text.
struct NativeFiles {
    root: PathBuf,
}

#[async_trait]
impl Provider for NativeFiles {
    async fn list(&self, _: Option<String>) -> Result<Page<ResourceEntry>, ProviderError> {
        Err(ProviderError::Unavailable("reads only".into()))
    }

    async fn templates(&self, _: Option<String>) -> Result<Page<TemplateEntry>, ProviderError> {
        Err(ProviderError::Unavailable("reads only".into()))
    }

    async fn read(&self, path: &str) -> Result<ReadResult, ProviderError> {
        let bytes = std::fs::read(self.root.join(path))
            .map_err(|error| ProviderError::NotFound(error.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|e| ProviderError::Internal(e.to_string()))?;
        Ok(ReadResult {
            contents: vec![Content {
                path: path.to_owned(),
                mime_type: Some("text/plain".into()),
                body: Body::Text(text),
                meta: None,
            }],
            cache: None,
        })
    }

    async fn complete(&self, _: CompletionRequest) -> Result<Completion, ProviderError> {
        Err(ProviderError::Unavailable("reads only".into()))
    }

    async fn changes(&self, _: Option<String>) -> Result<ChangeReport, ProviderError> {
        Err(ProviderError::Unavailable("reads only".into()))
    }
}

/// The bytes of `target/FOLDER/NAME.wasm`.
fn component(folder: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(folder)
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|_| panic!("{} is missing: run scripts/build first", path.display()))
}

fn files_component() -> Vec<u8> {
    component("plugins", "files")
}

/// The plugin `name` of `bytes`, with the grants and limits of `manifest`
/// (a manifest in `folder`).
fn wasm_plugin(
    runtime: &Runtime,
    name: &str,
    bytes: &[u8],
    manifest: &str,
    folder: &Path,
) -> WasmPlugin {
    let manifest: Manifest = toml::from_str(manifest).unwrap();
    let compiled = runtime.compile(bytes, None).unwrap();
    let grants = manifest.grants(folder).unwrap();
    runtime.plugin(name, &compiled, grants, Vec::new()).unwrap()
}

/// The `files` example serving `data` as `/data`.
fn wasm_files(runtime: &Runtime, bytes: &[u8], data: &Path) -> WasmPlugin {
    let manifest = format!(
        "[[files]]\nhost = {:?}\nguest = \"/data\"\n",
        data.display().to_string()
    );
    wasm_plugin(runtime, "files", bytes, &manifest, data)
}

/// Benches reads of `uri` as `name` in `group`: each sample's time per
/// read, in µs, warm-up included.
fn bench_reads(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    tokio: &tokio::runtime::Runtime,
    namespace: &Namespace,
    uri: &Uri,
) -> Vec<f64> {
    let per_read = RefCell::new(Vec::new());
    group.bench_function(name, |b| {
        b.to_async(tokio).iter_custom(|iters| {
            let per_read = &per_read;
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let read = namespace.read(uri).await.unwrap();
                    assert_eq!(read.contents.len(), 1);
                }
                let elapsed = started.elapsed();
                per_read
                    .borrow_mut()
                    .push(elapsed.as_secs_f64() * 1e6 / iters as f64);
                elapsed
            }
        })
    });
    per_read.into_inner()
}

/// The median of the last [`SAMPLES`] per-read times; none when the case
/// did not run (filtered out).
fn median(mut per_read: Vec<f64>) -> Option<f64> {
    let mut samples = per_read.split_off(per_read.len().saturating_sub(SAMPLES));
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len().checked_sub(1)? / 2).copied()
}

fn read_path(c: &mut Criterion) {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("1k.txt"), "a".repeat(1024)).unwrap();
    std::fs::write(data.path().join("1m.txt"), "b".repeat(1024 * 1024)).unwrap();
    let runtime = Runtime::new(
        CompileCache::disabled(),
        HandleBudget::from_process_limit(),
        Tiers::Optimized,
    )
    .unwrap();
    let namespace = Namespace::new(100);
    let files = wasm_files(&runtime, &files_component(), data.path());
    namespace
        .mount("located", Arc::new(files), MountSettings::default())
        .unwrap();
    // No grants: the liar cannot locate, every read goes through `read`.
    let liar = wasm_plugin(
        &runtime,
        "liar",
        &component("test-plugins", "liar"),
        "",
        data.path(),
    );
    namespace
        .mount("computed", Arc::new(liar), MountSettings::default())
        .unwrap();
    let native = NativeFiles {
        root: data.path().to_owned(),
    };
    namespace
        .mount("native", Arc::new(native), MountSettings::default())
        .unwrap();
    let tokio = tokio::runtime::Runtime::new().unwrap();

    for (size, bytes, goal) in SIZES {
        let mut group = c.benchmark_group(format!("read {size}"));
        group.sample_size(SAMPLES);
        let mut time = |name: &str, uri: &str| {
            let uri = Uri::parse(uri).unwrap();
            median(bench_reads(&mut group, name, &tokio, &namespace, &uri))
        };
        let computed = time(
            "computed (liar, through read)",
            &format!("computed://bytes/{bytes}"),
        );
        let located = time(
            "located (files, the host reads)",
            &format!("located://{size}.txt"),
        );
        let native = time("native", &format!("native://{size}.txt"));
        group.finish();
        if let (Some(computed), Some(located), Some(native)) = (computed, located, native) {
            println!(
                "read {size}, median µs per read ÷ native's ({native:.1} µs): \
                 computed {:.2}x (goal ≤ {goal}x), located {:.2}x\n",
                computed / native,
                located / native
            );
        }
    }
}

fn loading(c: &mut Criterion) {
    let bytes = files_component();
    let cache_dir = tempfile::tempdir().unwrap();
    let key_dir = tempfile::tempdir().unwrap();
    let uncached = Runtime::new(
        CompileCache::disabled(),
        HandleBudget::from_process_limit(),
        Tiers::Optimized,
    )
    .unwrap();
    let cached = Runtime::new(
        CompileCache::open(cache_dir.path(), &key_dir.path().join("key")).unwrap(),
        HandleBudget::from_process_limit(),
        Tiers::Optimized,
    )
    .unwrap();
    cached.compile(&bytes, None).unwrap();
    let mut group = c.benchmark_group("load files.wasm");
    group.sample_size(10);
    group.bench_function("compile", |b| {
        b.iter(|| uncached.compile(&bytes, None).unwrap())
    });
    group.bench_function("cached load", |b| {
        b.iter(|| cached.compile(&bytes, None).unwrap())
    });
    let loaded = cached.compile(&bytes, None).unwrap();
    group.bench_function("another mount of a loaded component", |b| {
        b.iter(|| cached.compile(&bytes, None).unwrap())
    });
    drop(loaded);
    group.finish();

    let data = tempfile::tempdir().unwrap();
    let plugin = wasm_files(&uncached, &bytes, data.path());
    let tokio = tokio::runtime::Runtime::new().unwrap();
    c.bench_function("instantiate and init", |b| {
        b.to_async(&tokio)
            .iter(|| async { plugin.start().await.unwrap() })
    });
}

criterion_group!(benches, read_path, loading);
criterion_main!(benches);
