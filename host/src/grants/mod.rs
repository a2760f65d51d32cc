//! The grants and limits of one plugin, built once from its manifest, and the
//! sandbox each of its instances runs in.
//!
//! Everything is denied unless a grant says otherwise. Each capability (files,
//! environment, network with its name lookup, limits) is one module behind
//! the same two traits, with the stages of a grant's life:
//! - [`Capability`]: its manifest section, checked against the operator's
//!   ceiling before anything is resolved, then resolved once, at load,
//!   against the manifest's folder into held resources;
//! - [`Grant`]: what it adds to the plugin's linker, what it gives each new
//!   instance ([`Sandbox`], with any state of its own as an
//!   [`InstanceState`] its module defines), what it renews before each call
//!   ([`Renewal`]), and how `inspect` describes it.
//!
//! The catalog, the ceiling and `inspect` loop over the capabilities a
//! manifest lists; a new capability is one module here and one entry in
//! `Manifest::capabilities`.

pub mod ceiling;
pub mod environment;
pub mod files;
pub mod limits;
pub mod network;
mod output;
mod sandbox;
pub mod signers;
mod standard;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use wasmtime::component::{Component, Linker};

pub use ceiling::Ceiling;
pub use environment::Source as EnvSource;
pub use files::FileGrant;
pub use limits::{Limits, LimitsSection};
pub use network::NetworkGrant;
pub use sandbox::{InstanceState, Sandbox, SandboxBuilder};

/// One capability's section of a manifest, before it is resolved.
pub trait Capability {
    /// The manifest section it is read from.
    fn section(&self) -> &'static str;
    /// Refuses what the operator's ceiling does not allow. Nothing is
    /// resolved yet: no file is opened or staged, no secret read.
    fn check(&self, ceiling: &Ceiling, manifest_dir: &Path) -> Result<()>;
    /// Resolves the section once, when the plugin loads, against the
    /// manifest's folder: paths opened, values read, addresses vetted.
    fn resolve(&self, manifest_dir: &Path) -> Result<Arc<dyn Grant>>;
}

/// A capability resolved for one plugin, shared by all its instances.
pub trait Grant: Send + Sync {
    /// Adds to the plugin's linker what only this grant brings (and what
    /// stands in for it when not granted).
    fn link(&self, _linker: &mut Linker<Sandbox>, _component: &Component) -> Result<()> {
        Ok(())
    }
    /// Gives one new instance its share: held handles, values, caps.
    fn prepare(&self, _plugin: &Arc<str>, _sandbox: &mut SandboxBuilder) -> Result<()> {
        Ok(())
    }
    /// Brings what changed since the plugin's instances were prepared (a
    /// granted file the operator replaced) before a call, within `renewal`.
    fn renew(&self, _renewal: &Renewal<'_>) -> Result<()> {
        Ok(())
    }
    /// Host descriptors each instance holds outside its resource table
    /// (preopened directories).
    fn descriptors_per_instance(&self) -> u32 {
        0
    }
    /// Whether a call may block its thread in a host operation (a file
    /// operation on a FIFO or a hung mount).
    fn may_block(&self) -> bool {
        false
    }
    /// Whether a call may run on the caller's thread with this grant's
    /// operations that may block on blocking threads: nothing is renewed
    /// before it, and the handles it leaves can be checked and closed there
    /// without waiting on a remote or user-space file system.
    fn may_run_inline(&self) -> bool {
        true
    }
    /// Opens `guest_path` (as the plugin sees it) for reading if this grant
    /// reaches it and it is a regular file, without waiting on a FIFO or
    /// device; the host then reads it on the plugin's behalf.
    fn open_located(&self, _guest_path: &str) -> Option<LocatedFile> {
        None
    }
    /// The directories held for it whose changes may change the plugin's
    /// answers.
    fn watched_dirs(&self) -> Vec<WatchedGrant> {
        Vec::new()
    }
    /// What `inspect` prints about it: a section name and one line each.
    fn describe(&self) -> (&'static str, Vec<String>);
    /// What the plugin gets when it imports `interface` (without its
    /// version), if this grant decides it.
    fn import_status(&self, _interface: &str) -> Option<String> {
        None
    }
}

/// A directory a grant holds open, for the watch on what a plugin was
/// granted: the granted directory itself, or a granted file's folder. The
/// watch starts from it, not from the path, so that what is watched is what
/// the plugin reaches whatever happens to the path.
#[derive(Clone)]
pub struct WatchedGrant {
    /// The granted path when the plugin loaded, to name in the log.
    pub label: PathBuf,
    /// The directory, held open since the plugin loaded.
    pub dir: Arc<cap_std::fs::Dir>,
    /// For a granted file, its name in `dir`: only what names it counts.
    pub file: Option<OsString>,
}

/// A regular file a grant opened for the host to read on a plugin's
/// behalf, and its size when it was opened.
pub struct LocatedFile {
    pub file: std::fs::File,
    pub size: u64,
}

/// Where an instance's operations that may block its thread (on files) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    /// On the thread that runs the call, which must then be one of the
    /// call's own.
    OnCallingThread,
    /// On the blocking threads of the tokio runtime the call is polled in.
    OnBlockingThreads,
    /// Nowhere: the instance gets none of the grants whose operations may
    /// block (`locate`'s, which runs on the caller's thread and can only
    /// compute).
    Denied,
}

/// What renewing a plugin's grants before a call may spend. It runs on a
/// thread of the call's own, never on one of the runtime's or the loop that
/// reads stdin.
pub struct Renewal<'a> {
    /// The plugin, to name in the log.
    pub plugin: &'a str,
    /// The plugin's limits, which bound what a renewal may copy.
    pub limits: &'a Limits,
    /// When the call's time is up.
    pub deadline: Instant,
}

/// Everything one plugin may do, resolved against the manifest's folder.
#[derive(Clone)]
pub struct Grants {
    pub limits: Limits,
    /// The most bytes one read may answer: a file the host reads for the
    /// plugin is refused past it before any of it is read.
    pub max_read_bytes: u64,
    grants: Vec<Arc<dyn Grant>>,
}

impl Grants {
    /// Resolves every capability a manifest lists, in order.
    pub fn resolve(
        capabilities: &[&dyn Capability],
        limits: &LimitsSection,
        manifest_dir: &Path,
    ) -> Result<Self> {
        let grants = capabilities
            .iter()
            .map(|capability| {
                capability
                    .resolve(manifest_dir)
                    .with_context(|| format!("[{}]", capability.section()))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            limits: limits.sandbox,
            max_read_bytes: limits.answers.max_read_bytes,
            grants,
        })
    }

    pub fn each(&self) -> &[Arc<dyn Grant>] {
        &self.grants
    }

    /// Adds what the grants bring to a plugin's linker for `component`.
    pub fn link(&self, linker: &mut Linker<Sandbox>, component: &Component) -> Result<()> {
        for grant in &self.grants {
            grant.link(linker, component)?;
        }
        Ok(())
    }

    /// The sandbox of one new instance of `plugin`, whose operations that
    /// may block (on files) run as `blocking` says.
    pub fn sandbox(&self, plugin: &Arc<str>, blocking: Blocking) -> Result<Sandbox> {
        let mut builder = SandboxBuilder::new(plugin.clone(), &self.limits);
        if blocking == Blocking::OnBlockingThreads {
            builder.wasi.allow_blocking_current_thread(false);
        }
        let grants = self
            .grants
            .iter()
            .filter(|grant| blocking != Blocking::Denied || !grant.may_block());
        for grant in grants {
            grant.prepare(plugin, &mut builder)?;
        }
        Ok(builder.build())
    }

    /// Renews every grant before a call of `plugin` that must be over by
    /// `deadline`.
    pub fn renew(&self, plugin: &str, deadline: Instant) -> Result<()> {
        let renewal = Renewal {
            plugin,
            limits: &self.limits,
            deadline,
        };
        self.grants
            .iter()
            .try_for_each(|grant| grant.renew(&renewal))
    }

    /// Host descriptors each instance holds outside its resource table.
    pub fn descriptors_per_instance(&self) -> u32 {
        self.grants
            .iter()
            .map(|grant| grant.descriptors_per_instance())
            .sum()
    }

    /// Opens `guest_path`, a file the plugin located, for the host to read
    /// on its behalf: only inside a grant, and only a regular file.
    pub fn open_located(&self, guest_path: &str) -> Option<LocatedFile> {
        self.grants
            .iter()
            .find_map(|grant| grant.open_located(guest_path))
    }

    /// Whether a call may block its thread in a host operation.
    pub fn may_block(&self) -> bool {
        self.grants.iter().any(|grant| grant.may_block())
    }

    /// Whether a call may run on the caller's thread, its operations that
    /// may block on blocking threads (see [`Grant::may_run_inline`]).
    pub fn may_run_inline(&self) -> bool {
        self.grants.iter().all(|grant| grant.may_run_inline())
    }

    /// The directories held for the grants whose changes may change the
    /// plugin's answers.
    pub fn watched_dirs(&self) -> Vec<WatchedGrant> {
        self.grants
            .iter()
            .flat_map(|grant| grant.watched_dirs())
            .collect()
    }
}

/// Links what every plugin's linker holds: WASI 0.2 without `wasi:http`,
/// with resmux's own name lookup in place of WASI's.
pub fn link_common(linker: &mut Linker<Sandbox>) -> Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    network::link_lookup(linker)?;
    Ok(())
}
