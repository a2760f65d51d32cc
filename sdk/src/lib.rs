//! Write a resmux plugin in Rust without touching the raw bindings.
//!
//! Implement [`Plugin`] for a type that holds what `init` made of the
//! operator's configuration, and name it in [`export!`]. resmux calls
//! `init` once on each instance before anything else, then the calls it
//! serves; the SDK keeps the value `init` returned for them. An instance is
//! fresh or an idle one reused, so keep nothing else between calls.
//!
//! ```no_run
//! use resmux_sdk::{Config, Content, Error, Plugin, PluginInfo, ReadResult, Resource, ResourcePage};
//!
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn about() -> PluginInfo {
//!         PluginInfo::new("hello", env!("CARGO_PKG_VERSION"), "Says hello")
//!     }
//!     fn init(config: Config) -> Result<Self, Error> {
//!         config.finish()?;
//!         Ok(Hello)
//!     }
//!     fn list(&self, cursor: Option<String>) -> Result<ResourcePage, Error> {
//!         resmux_sdk::no_cursor(cursor)?;
//!         Ok(ResourcePage::last(vec![Resource::new("greeting", "Greeting")]))
//!     }
//!     fn read(&self, path: String) -> Result<ReadResult, Error> {
//!         match path.as_str() {
//!             "greeting" => Ok(ReadResult::one(Content::text(path, "text/plain", "Hello!"))),
//!             _ => Err(Error::NotFound(format!("no {path:?}"))),
//!         }
//!     }
//! }
//!
//! resmux_sdk::export!(Hello);
//! ```
//!
//! A plugin whose resources are files it was granted also implements
//! [`Plugin::locate`]: it names the file that holds a resource, and resmux
//! reads the file itself, so the bytes never pass through the plugin.

mod config;
mod helpers;

/// The raw bindings of `wit/provider.wit` (the world with `locate`), for
/// what the SDK does not wrap.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "resmux:provider/locating-plugin",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "resmux_sdk::bindings",
    });
}

pub use bindings::exports::resmux::provider::locate::Located;
pub use bindings::resmux::provider::types::{
    Annotations, Body, CacheHint, CacheScope, ChangeReport, Completion, CompletionRequest, Content,
    Error, Icon, IconTheme, PluginInfo, ReadResult, Resource, ResourcePage, Role, Template,
    TemplatePage,
};
pub use config::Config;
pub use helpers::{no_cursor, page_after, paginate};

/// A plugin. Only `about`, `init`, `list` and `read` are required; a plugin
/// without templates lists none, one without completion or change reports
/// says so with a typed error.
pub trait Plugin: Sized + Send + Sync + 'static {
    /// Name, version and one line of description.
    fn about() -> PluginInfo;

    /// Builds the plugin from the operator's `[config]`; an error here keeps
    /// the plugin from loading, with the message shown to the operator.
    fn init(config: Config) -> Result<Self, Error>;

    /// One page of resources; `cursor` is whatever the previous page handed out.
    fn list(&self, cursor: Option<String>) -> Result<ResourcePage, Error>;

    /// One page of URI templates (paths with `{variables}`).
    fn templates(&self, cursor: Option<String>) -> Result<TemplatePage, Error> {
        no_cursor(cursor)?;
        Ok(TemplatePage::last(Vec::new()))
    }

    /// The contents at `path` (scheme-relative, like `notes/welcome`).
    fn read(&self, path: String) -> Result<ReadResult, Error>;

    /// Values for one argument of a template.
    fn complete(&self, request: CompletionRequest) -> Result<Completion, Error> {
        Err(Error::InvalidInput(format!(
            "{:?} has no completion for {:?}",
            request.path_template, request.argument
        )))
    }

    /// What changed since the report that handed out `since`.
    fn changes(&self, _since: Option<String>) -> Result<ChangeReport, Error> {
        Err(Error::Unavailable("this plugin reports no changes".into()))
    }

    /// The granted file that holds the resource at `path`, as the plugin
    /// sees it (`/data/docs/guide.md`), for resmux to read itself; none to
    /// answer with [`Plugin::read`]. resmux asks only plugins with file
    /// grants, and calls `read` as well when the file is not a regular file
    /// inside them (a directory, missing, elsewhere), so `read` still
    /// answers errors and directories. Only compute the name here: each
    /// file operation in `locate` is sent to a thread pool, which makes it
    /// far slower than in the other calls.
    fn locate(&self, _path: String) -> Result<Option<Located>, Error> {
        Ok(None)
    }
}

/// Exports a [`Plugin`] as the component's `resmux:provider/provider` and
/// `resmux:provider/locate`.
#[macro_export]
macro_rules! export {
    ($plugin:ty) => {
        const _: () = {
            use $crate::bindings::exports::resmux::provider::locate::Guest as Locate;
            use $crate::bindings::exports::resmux::provider::provider::Guest;
            use $crate::{
                ChangeReport, Completion, CompletionRequest, Error, Located, Plugin, PluginInfo,
                ReadResult, ResourcePage, TemplatePage,
            };

            static INSTANCE: ::std::sync::OnceLock<$plugin> = ::std::sync::OnceLock::new();

            fn instance() -> Result<&'static $plugin, Error> {
                INSTANCE
                    .get()
                    .ok_or_else(|| Error::Internal("called before init".into()))
            }

            struct Exported;

            impl Guest for Exported {
                fn about() -> PluginInfo {
                    <$plugin as Plugin>::about()
                }
                fn init(config: Vec<(String, String)>) -> Result<(), Error> {
                    let plugin = <$plugin as Plugin>::init($crate::Config::new(config))?;
                    // `init` runs once per instance: the cell is empty here.
                    let _ = INSTANCE.set(plugin);
                    Ok(())
                }
                fn list(cursor: Option<String>) -> Result<ResourcePage, Error> {
                    instance()?.list(cursor)
                }
                fn templates(cursor: Option<String>) -> Result<TemplatePage, Error> {
                    instance()?.templates(cursor)
                }
                fn read(path: String) -> Result<ReadResult, Error> {
                    instance()?.read(path)
                }
                fn complete(request: CompletionRequest) -> Result<Completion, Error> {
                    instance()?.complete(request)
                }
                fn changes(since: Option<String>) -> Result<ChangeReport, Error> {
                    instance()?.changes(since)
                }
            }

            impl Locate for Exported {
                fn locate(path: String) -> Result<Option<Located>, Error> {
                    instance()?.locate(path)
                }
            }

    $crate::bindings::export_bindings!(Exported with_types_in $crate::bindings);
        };
    };
}
