//! resmux: an MCP server whose resources come from sandboxed WebAssembly
//! components.
//!
//! Layers, each depending only on those below it:
//! - [`transport`]: stdio and Streamable HTTP, and the checks of the wire;
//!   beside it, [`console`]: the operator's web page on the metrics listener;
//! - [`protocol`]: MCP requests in, MCP results out (rmcp), era by era, with
//!   subscriptions and change notifications;
//! - [`access`]: clients, their tokens and scopes, OAuth access tokens, rate
//!   limits, the audit log;
//! - [`namespace`]: schemes to providers, merged pagination, routing, and the
//!   validation of every answer;
//! - [`catalog`]: the plugin folder and its manifests, loaded into a namespace
//!   and kept in step with the folder while serving;
//! - [`runtime`]: the wasmtime engine that runs plugin components;
//! - [`grants`]: what one plugin is granted and the limits it runs under, and
//!   the ceiling on what any plugin may be granted;
//! - [`contract`]: the provider trait and data, shared by namespace and runtime;
//! - [`operator_file`]: reading every file from outside, bounded and never
//!   waiting, for every layer
//!   that has one;
//! - `fuzzing`: what the fuzz targets in `fuzz/` reach that is otherwise
//!   private;
//! - [`telemetry`]: metrics, traces and logs, which every layer records into.

pub mod access;
pub mod catalog;
pub mod console;
pub mod contract;
pub mod file_identity;
#[doc(hidden)]
pub mod fuzzing;
pub mod grants;
pub mod namespace;
pub mod operator_file;
pub mod owner_file;
pub mod platform;
pub mod protocol;
pub mod runtime;
pub mod telemetry;
pub mod transport;
pub mod under_way;
