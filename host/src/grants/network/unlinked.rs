//! `wasi:http` for a plugin without an `http` or `https` entry: not linked.
//! Many language toolchains import it whether the plugin uses it or not, so
//! in its place every function the component imports from it traps, failing
//! that plugin's call with a message that names the missing grant.

use anyhow::Result;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceType};

use crate::grants::Sandbox;

/// Links a trap in place of every `wasi:http` function `component` imports,
/// for a plugin without an HTTP grant: it may import `wasi:http` (many
/// language toolchains always do) but gets no implementation of it; a call
/// fails that plugin's call. Resources `wasi:http` defines get an empty host
/// type; those it takes from other interfaces (streams, pollables) keep
/// theirs.
pub fn stub_http(linker: &mut Linker<Sandbox>, component: &Component) -> Result<()> {
    let engine = component.engine();
    let is_http = |name: &str| name.starts_with("wasi:http/");
    let imports: Vec<(String, ComponentItem)> = component
        .component_type()
        .imports(engine)
        .map(|(name, item)| (name.to_owned(), item.ty))
        .collect();
    let mut known: Vec<ResourceType> = Vec::new();
    for (_, item) in imports.iter().filter(|(name, _)| !is_http(name)) {
        if let ComponentItem::ComponentInstance(instance) = item {
            for (_, export) in instance.exports(engine) {
                if let ComponentItem::Resource(resource) = export.ty {
                    known.push(resource);
                }
            }
        }
    }
    for (name, item) in imports.iter().filter(|(name, _)| is_http(name)) {
        let ComponentItem::ComponentInstance(instance) = item else {
            continue;
        };
        let mut stub = linker.instance(name)?;
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => {
                    let function = format!("{name}#{export}");
                    stub.func_new(export, move |_, _, _, _| {
                        Err(wasmtime::Error::msg(format!(
                            "{function}: the plugin has no http or https grant, so wasi:http is not linked"
                        )))
                    })?;
                }
                ComponentItem::Resource(resource) if !known.contains(&resource) => {
                    stub.resource(export, ResourceType::host::<NoHttp>(), |_, _| Ok(()))?;
                    known.push(resource);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The host type of every `wasi:http` resource of a plugin without an HTTP
/// grant; no value of it is ever made.
struct NoHttp;
