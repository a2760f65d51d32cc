//! Build steps for plugins written in C, in Rust so that cargo pins them:
//!
//! - `bindings WIT_DIR OUT_DIR` writes the C bindings of the world
//!   `resmux:provider/plugin` (a header, its implementation, and the object
//!   that carries the component type into the linked module);
//! - `component MODULE OUT` turns a wasm32-wasi (preview 1) reactor module
//!   into a WASI 0.2 component through the preview-1 adapter that matches
//!   resmux's wasmtime.

use std::path::Path;

use anyhow::{Context, Result, bail};
use wit_bindgen_core::Files;
use wit_bindgen_core::wit_parser::Resolve;
use wit_component::ComponentEncoder;

const WORLD: &str = "resmux:provider/plugin";

fn main() -> Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    match arguments.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["bindings", wit, out] => bindings(Path::new(wit), Path::new(out)),
        ["component", module, out] => component(Path::new(module), Path::new(out)),
        _ => bail!("usage: resmux-plugin-build bindings WIT_DIR OUT_DIR | component MODULE OUT"),
    }
}

fn bindings(wit: &Path, out: &Path) -> Result<()> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("cannot read the WIT in {}", wit.display()))?;
    let world = resolve.select_world(&[package], Some(WORLD))?;
    let mut files = Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)?;
    std::fs::create_dir_all(out)?;
    for (name, contents) in files.iter() {
        let path = out.join(name);
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn component(module: &Path, out: &Path) -> Result<()> {
    let bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
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
