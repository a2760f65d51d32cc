//! Embeds what plugin authors get from the `resmux` binary, so that they
//! never need this repository: the contract (`wit/`), the SDKs (`sdk/`), the
//! project templates of `resmux new` (`sdk/new/`), and the runtime package
//! that Go bindings import, which ships inside the `wit-bindgen-go` crate
//! (found through `cargo metadata`, as the crate is already fetched).
//!
//! Writes `$OUT_DIR/authoring.rs`: a list of (embedded path, bytes), where
//! the path is relative to the repository root, or starts with
//! `go-runtime/` for the Go package.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let mut files = Vec::new();
    for dir in [
        "wit",
        "sdk/src",
        "sdk/new",
        "sdk/python",
        "sdk/js",
        "sdk/go",
        "sdk/c",
    ] {
        let dir = root.join(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        collect(&dir, &root, "", &mut files);
    }
    let go_runtime = go_runtime_package();
    collect(
        &go_runtime.join("wit"),
        &go_runtime,
        "go-runtime/",
        &mut files,
    );
    files.push(("go-runtime/go.mod".into(), go_runtime.join("go.mod")));
    files.sort();

    let mut source = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        writeln!(
            source,
            "    ({name:?}, include_bytes!({:?})),",
            path.display()
        )
        .unwrap();
    }
    source.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("authoring.rs");
    std::fs::write(out, source).unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}

/// Every file under `dir`, named by its path below `base` after `prefix`;
/// build outputs and dependencies that a developer's checkout may hold are
/// left out.
fn collect(dir: &Path, base: &Path, prefix: &str, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if ["node_modules", "__pycache__", "target", "build"].contains(&name.as_ref()) {
            continue;
        }
        if path.is_dir() {
            collect(&path, base, prefix, files);
        } else if !name.ends_with(".wasm") {
            let relative = path.strip_prefix(base).unwrap().to_string_lossy();
            files.push((format!("{prefix}{relative}"), path.clone()));
        }
    }
}

/// The `pkg` directory of the `wit-bindgen-go` crate this build uses.
fn go_runtime_package() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap();
    // Resolving the workspace reads the manifest of every package in
    // Cargo.lock, the plugins' too, which `cargo build -p resmux` on a fresh
    // machine has not downloaded: cargo fetches them (the lock file pinned).
    let target = std::env::var("TARGET").unwrap();
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--locked", "--format-version", "1"])
        .args(["--filter-platform", &target])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let manifest = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|package| package["name"] == "wit-bindgen-go")
        .and_then(|package| package["manifest_path"].as_str())
        .expect("wit-bindgen-go is a dependency");
    Path::new(manifest).parent().unwrap().join("src/pkg")
}
