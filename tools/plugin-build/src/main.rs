//! Build steps for plugins written in C and Go, in Rust so that cargo pins
//! them:
//!
//! - `bindings WIT_DIR OUT_DIR` writes the C bindings of the world
//!   `resmux:provider/plugin` (a header, its implementation, and the object
//!   that carries the component type into the linked module);
//! - `go-bindings WIT_DIR OUT_DIR` writes the Go bindings of the same world
//!   (a module `wit_component` whose exports the author completes);
//! - `component MODULE OUT [WIT_DIR]` turns a wasm32-wasi (preview 1) reactor
//!   module into a WASI 0.2 component through the preview-1 adapter that
//!   matches resmux's wasmtime, first embedding the world's type from
//!   `WIT_DIR` when the module does not carry it (Go's does not).

use std::path::Path;

use anyhow::{Context, Result, bail};
use wit_bindgen_core::Files;
use wit_bindgen_core::wit_parser::{Resolve, WorldId};
use wit_component::ComponentEncoder;

const WORLD: &str = "resmux:provider/plugin";

fn main() -> Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    match arguments.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["bindings", wit, out] => bindings(Path::new(wit), Path::new(out), Language::C),
        ["go-bindings", wit, out] => bindings(Path::new(wit), Path::new(out), Language::Go),
        ["component", module, out] => component(Path::new(module), Path::new(out), None),
        ["component", module, out, wit] => {
            component(Path::new(module), Path::new(out), Some(Path::new(wit)))
        }
        _ => bail!(
            "usage: resmux-plugin-build bindings|go-bindings WIT_DIR OUT_DIR | component MODULE OUT [WIT_DIR]"
        ),
    }
}

enum Language {
    C,
    Go,
}

/// The contract's WIT and its plugin world.
fn world(wit: &Path) -> Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("cannot read the WIT in {}", wit.display()))?;
    let world = resolve.select_world(&[package], Some(WORLD))?;
    Ok((resolve, world))
}

fn bindings(wit: &Path, out: &Path, language: Language) -> Result<()> {
    let (mut resolve, world) = world(wit)?;
    let mut files = Files::default();
    let mut generator = match language {
        Language::C => wit_bindgen_c::Opts::default().build(),
        Language::Go => wit_bindgen_go::Opts::default().build(),
    };
    generator.generate(&mut resolve, world, &mut files)?;
    std::fs::create_dir_all(out)?;
    for (name, contents) in files.iter() {
        let path = out.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn component(module: &Path, out: &Path, wit: Option<&Path>) -> Result<()> {
    let mut bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    if let Some(wit) = wit {
        let (resolve, world) = world(wit)?;
        wit_component::embed_component_metadata(
            &mut bytes,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
            false,
        )?;
    }
    let component = ComponentEncoder::default()
        .module(&bytes)?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .validate(true)
        .encode()
        .with_context(|| format!("{} cannot become a component", module.display()))?;
    std::fs::write(out, component).with_context(|| format!("cannot write {}", out.display()))
}
