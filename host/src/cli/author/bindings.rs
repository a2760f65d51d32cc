//! The build steps of plugins written in C and Go, which their own tools do
//! not cover: bindings of the world `resmux:provider/plugin` (`resmux
//! bindings c|go DIR`), and a wasm32-wasi (preview 1) reactor module turned
//! into a WASI 0.2 component through the preview-1 adapter that matches
//! resmux's wasmtime (`resmux componentize MODULE OUT`).

use std::path::Path;

use anyhow::{Context, Result};
use clap::ValueEnum;
use wit_bindgen_core::Files;
use wit_bindgen_core::wit_parser::{Resolve, WorldId};
use wit_component::ComponentEncoder;

use super::{embedded, write_file};

const WORLD: &str = "resmux:provider/plugin";

/// A language whose bindings resmux writes.
#[derive(Clone, Copy, ValueEnum)]
pub enum Language {
    /// `plugin.h`, `plugin.c` and `plugin_component_type.o`, the object that
    /// carries the component type into the linked module.
    C,
    /// A Go module `wit_component` whose exported package the author
    /// completes, with the bindings' runtime package inside it.
    Go,
}

/// The contract and its plugin world.
fn world() -> Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("provider.wit", embedded::contract())?;
    let world = resolve.select_world(&[package], Some(WORLD))?;
    Ok((resolve, world))
}

/// `resmux bindings c|go DIR`.
pub fn write_bindings(language: Language, out: &Path) -> Result<()> {
    let (mut resolve, world) = world()?;
    let mut files = Files::default();
    let mut generator = match language {
        Language::C => wit_bindgen_c::Opts::default().build(),
        Language::Go => wit_bindgen_go::Opts::default().build(),
    };
    generator.generate(&mut resolve, world, &mut files)?;
    for (name, contents) in files.iter() {
        write_file(&out.join(name), contents)?;
    }
    if let Language::Go = language {
        // The bindings import go.bytecodealliance.org/pkg, which no proxy
        // needs to serve: it is written beside them.
        embedded::write_tree("go-runtime/", &out.join("wit-runtime"), |text| {
            text.to_owned()
        })?;
        let go_mod = out.join("go.mod");
        let mut module = std::fs::read_to_string(&go_mod)
            .with_context(|| format!("cannot read {}", go_mod.display()))?;
        module.push_str("\nreplace go.bytecodealliance.org/pkg => ./wit-runtime\n");
        write_file(&go_mod, module.as_bytes())?;
    }
    Ok(())
}

/// `resmux componentize MODULE OUT`: the world's type is embedded first
/// when the module does not carry it (Go's does not).
pub fn componentize(module: &Path, out: &Path) -> Result<()> {
    let mut bytes =
        std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    if !carries_component_type(&bytes) {
        let (resolve, world) = world()?;
        wit_component::embed_component_metadata(
            &mut bytes,
            &resolve,
            world,
            wit_component::StringEncoding::UTF8,
            false,
        )?;
    }
    let component = ComponentEncoder::default()
        .module(&bytes)
        .with_context(|| format!("{} is not a core wasm module", module.display()))?
        .adapter(
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .validate(true)
        .encode()
        .with_context(|| format!("{} cannot become a component", module.display()))?;
    write_file(out, &component)
}

/// Whether a module has a `component-type` custom section, as C bindings
/// link in.
fn carries_component_type(module: &[u8]) -> bool {
    wasmparser::Parser::new(0).parse_all(module).any(|payload| {
        matches!(payload, Ok(wasmparser::Payload::CustomSection(section))
            if section.name().starts_with("component-type"))
    })
}
