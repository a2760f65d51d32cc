//! The cost of the Wasm read path. Reads of a 1 KiB and a 1 MiB file go
//! through the whole host path (namespace, runtime, the `files` plugin) and,
//! in the same run, through a native provider that reads the same files
//! behind the same namespace interface; the ratio is the price of the
//! sandbox. Also: compiling the plugin, loading it from the compile cache,
//! sharing it with another mount once it is loaded, and starting an
//! instance (instantiate plus `init`).
//!
//! Needs `scripts/build` first (it reads `target/plugins/files.wasm`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use resmux::catalog::Manifest;
use resmux::contract::{
    Body, ChangeReport, Completion, CompletionRequest, Content, Page, Provider, ProviderError,
    ReadResult, ResourceEntry, TemplateEntry,
};
use resmux::namespace::uri::Uri;
use resmux::namespace::{MountSettings, Namespace};
use resmux::runtime::{CompileCache, HandleBudget, Runtime, WasmPlugin};

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

fn files_component() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/files.wasm");
    std::fs::read(&path)
        .unwrap_or_else(|_| panic!("{} is missing: run scripts/build first", path.display()))
}

fn wasm_files(runtime: &Runtime, bytes: &[u8], data: &Path) -> WasmPlugin {
    let manifest: Manifest = toml::from_str(&format!(
        "[[files]]\nhost = {:?}\nguest = \"/data\"\n",
        data.display().to_string()
    ))
    .unwrap();
    let compiled = runtime.compile(bytes, None).unwrap();
    let policy = manifest.policy(data).unwrap();
    runtime
        .plugin("files", &compiled.component, policy, Vec::new())
        .unwrap()
}

fn read_path(c: &mut Criterion) {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("1k.txt"), "a".repeat(1024)).unwrap();
    std::fs::write(data.path().join("1m.txt"), "b".repeat(1024 * 1024)).unwrap();
    let runtime =
        Runtime::new(CompileCache::disabled(), HandleBudget::from_process_limit()).unwrap();
    let plugin = wasm_files(&runtime, &files_component(), data.path());
    let namespace = Namespace::new(100);
    namespace
        .mount("wasm", Arc::new(plugin), MountSettings::default())
        .unwrap();
    let native = NativeFiles {
        root: data.path().to_owned(),
    };
    namespace
        .mount("native", Arc::new(native), MountSettings::default())
        .unwrap();
    let tokio = tokio::runtime::Runtime::new().unwrap();

    for size in ["1k", "1m"] {
        let mut group = c.benchmark_group(format!("read {size}"));
        for scheme in ["wasm", "native"] {
            let uri = Uri::parse(&format!("{scheme}://{size}.txt")).unwrap();
            group.bench_function(scheme, |b| {
                b.to_async(&tokio).iter(|| async {
                    let read = namespace.read(&uri).await.unwrap();
                    assert_eq!(read.contents.len(), 1);
                })
            });
        }
        group.finish();
    }
}

fn loading(c: &mut Criterion) {
    let bytes = files_component();
    let cache_dir = tempfile::tempdir().unwrap();
    let key_dir = tempfile::tempdir().unwrap();
    let uncached =
        Runtime::new(CompileCache::disabled(), HandleBudget::from_process_limit()).unwrap();
    let cached = Runtime::new(
        CompileCache::open(cache_dir.path(), &key_dir.path().join("key")).unwrap(),
        HandleBudget::from_process_limit(),
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
