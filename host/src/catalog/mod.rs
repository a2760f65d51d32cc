//! The plugin folder: which plugins it holds, under which schemes, and loading
//! them into running plugins.
//!
//! Every `NAME.wasm` is a plugin, configured by `NAME.toml` beside it when
//! present. A `NAME.toml` without a `NAME.wasm` mounts the component its
//! `component` key names, so one component can serve under two schemes. A
//! plugin that cannot be loaded is reported and skipped; two plugins claiming
//! one scheme are both refused, so neither wins silently. Under [`Rules`] an
//! operator can cap what any manifest may grant and, in locked mode, demand a
//! digest pin on every plugin and refuse to start on any error. At start,
//! [`startup`] brings the folder in while resmux already serves; from then
//! on, [`live`] keeps the namespace in step with the folder.

pub mod folder_watch;
#[cfg(target_os = "linux")]
mod grant_watch;
#[cfg(not(target_os = "linux"))]
#[path = "grant_watch_portable.rs"]
mod grant_watch;
pub mod live;
pub mod manifest;
pub mod registry;
pub mod startup;

use std::collections::BTreeMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use futures::StreamExt;
use sha2::{Digest, Sha256};

pub use manifest::Manifest;
pub use registry::{Provenance, Registries, Remote};

use crate::grants::signers::SignatureRules;
use crate::grants::{Ceiling, Grants, files};
use crate::namespace::{MountSettings, Namespace, uri};
use crate::operator_file::{self, MOST_COMPONENT_BYTES};
use crate::runtime::{self, Compiled, Runtime, Tier, ToOptimize, WasmPlugin};
use crate::telemetry::board::{self, board};

/// How strictly a folder is loaded.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Every plugin must pin its `sha256`, and any failure stops the load.
    pub locked: bool,
    /// What any manifest may grant at most.
    pub ceiling: Option<Ceiling>,
    /// How registries are reached, for components pulled from one.
    pub registries: Registries,
}

/// Where a plugin's component comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file: `NAME.wasm`, or the one a manifest's `component` names.
    File(PathBuf),
    /// A registry reference, a manifest's `oci`.
    Registry(Remote),
}

impl std::fmt::Display for Source {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(formatter, "{}", path.display()),
            Self::Registry(remote) => write!(formatter, "oci {remote}"),
        }
    }
}

/// A plugin the folder declares, before it is loaded.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The file that declares it: its `.wasm`, or its `.toml` if it has no
    /// `.wasm` of its own.
    pub declared_by: PathBuf,
    pub component: Source,
    pub manifest_path: Option<PathBuf>,
    pub manifest: Manifest,
    pub scheme: String,
}

impl Entry {
    /// The entry of one component outside a folder (for `inspect` and
    /// `check`): its manifest is `manifest`, else the `.toml` beside it. Its
    /// scheme is not checked, since it only names the plugin in reports.
    /// A `.toml` given as the component is the manifest of a component
    /// that its `oci` names.
    pub fn for_component(component: &Path, manifest: Option<PathBuf>) -> Result<Self> {
        let is_manifest = component
            .extension()
            .is_some_and(|extension| extension == "toml");
        let manifest_path = manifest.or_else(|| {
            let beside = component.with_extension("toml");
            beside.exists().then_some(beside)
        });
        let manifest = read_manifest(manifest_path.as_deref())?;
        let stem = component.file_stem().unwrap_or_default().to_string_lossy();
        let source = match &manifest.oci {
            Some(oci) => Source::Registry(Remote::parse(oci)?),
            None if is_manifest => bail!(
                "{} names no `oci` component; give the component's .wasm instead",
                component.display()
            ),
            None => Source::File(component.to_owned()),
        };
        Ok(Self {
            declared_by: component.to_owned(),
            component: source,
            scheme: manifest
                .scheme
                .clone()
                .unwrap_or_else(|| default_scheme(&stem)),
            manifest_path,
            manifest,
        })
    }

    /// The component's file, if it is one.
    pub fn file(&self) -> Option<&Path> {
        match &self.component {
            Source::File(path) => Some(path),
            Source::Registry(_) => None,
        }
    }

    /// Where it comes from, as the operator's board shows it.
    pub fn origin(&self) -> board::Origin {
        board::Origin {
            file: self.declared_by.clone(),
            scheme: self.scheme.clone(),
            manifest: self.manifest_path.clone(),
            component: self.component.to_string(),
        }
    }

    /// The folder the manifest's relative paths are taken from.
    pub fn manifest_dir(&self) -> &Path {
        self.manifest_path
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."))
    }
}

fn read_manifest(path: Option<&Path>) -> Result<Manifest> {
    Ok(path.map(Manifest::read).transpose()?.unwrap_or_default())
}

/// The scheme of a plugin whose manifest names none: its file's stem.
fn default_scheme(stem: &str) -> String {
    stem.to_ascii_lowercase()
}

/// A plugin that loaded and started.
pub struct Loaded {
    pub entry: Entry,
    pub plugin: Arc<WasmPlugin>,
    /// What it was loaded from, to tell a real change from a touch.
    pub fingerprint: Fingerprint,
    /// What the operator's board shows of it.
    pub card: board::Loaded,
    /// The tier of the code it runs, and how long that took to compile
    /// (or to load from the cache).
    tier: Tier,
    compile_time: Duration,
    /// For a plugin on its baseline code: what optimizing it takes, once
    /// it serves.
    to_optimize: Option<ToOptimize>,
}

/// The bytes a plugin was loaded from: its component's digest and its
/// manifest's text; and what the component's file looked like when it was
/// hashed, so that it is read and hashed again only when that changed.
#[derive(Debug, Clone)]
pub struct Fingerprint {
    component_sha256: String,
    manifest: Option<String>,
    /// The manifest digest a pulled component was resolved from.
    pub remote_digest: Option<String>,
    /// None when the file had changed too recently to vouch for its bytes.
    hashed_as: Option<FileStamp>,
}

/// How long after a file last changed a look at it may still miss a write:
/// a write within the same tick of the file system's clock leaves its times
/// as they were, and the coarsest clock (FAT's) ticks every 2 s.
const SETTLED_AFTER: Duration = Duration::from_secs(2);

/// What a file looked like: a file with the same stamp holds the same bytes,
/// since any write moves its change time on. Only a file that has not
/// changed for [`SETTLED_AFTER`] gets a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileStamp {
    /// The stamp of a file whose metadata is `metadata`, looked at `now`;
    /// none if it changed less than [`SETTLED_AFTER`] before (or after) `now`.
    fn of(metadata: &Metadata, now: SystemTime) -> Option<Self> {
        let stamp = Self::read(metadata)?;
        let changed_at = u64::try_from(stamp.changed.0)
            .ok()
            .zip(u32::try_from(stamp.changed.1).ok())
            .and_then(|(seconds, nanos)| UNIX_EPOCH.checked_add(Duration::new(seconds, nanos)))?;
        let settled = now
            .duration_since(changed_at)
            .is_ok_and(|age| age >= SETTLED_AFTER);
        settled.then_some(stamp)
    }

    /// Device, inode, size, modification and change times.
    #[cfg(unix)]
    fn read(metadata: &Metadata) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        Some(Self {
            device: metadata.dev(),
            inode: metadata.ino(),
            size: metadata.size(),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        })
    }

    /// Windows keeps no change time that std reads, and no inode in a
    /// path's metadata: the size, the last write, and the creation (a file
    /// copied or renamed over the old one was created anew).
    #[cfg(windows)]
    fn read(metadata: &Metadata) -> Option<Self> {
        let since_epoch = |time: SystemTime| -> Option<(i64, i64)> {
            let age = time.duration_since(UNIX_EPOCH).ok()?;
            Some((
                i64::try_from(age.as_secs()).ok()?,
                i64::from(age.subsec_nanos()),
            ))
        };
        let modified = since_epoch(metadata.modified().ok()?)?;
        let created = since_epoch(metadata.created().ok()?)?;
        Some(Self {
            device: 0,
            inode: 0,
            size: metadata.len(),
            modified,
            changed: modified.max(created),
        })
    }
}

impl Fingerprint {
    /// The fingerprint `entry` has on disk now, where `known` is the one it
    /// had: its component is read and hashed again only if its file's
    /// stamp (device, inode, size, modification and change times) is not
    /// the one `known` was hashed with.
    pub fn now(entry: &Entry, known: &Self) -> Result<Self> {
        Self::at(entry, known, SystemTime::now())
    }

    /// [`Self::now`], with the clock read at `now`.
    /// A pulled component is taken to be as it was: only a poll of its
    /// registry tells otherwise.
    fn at(entry: &Entry, known: &Self, now: SystemTime) -> Result<Self> {
        let path = match &entry.component {
            Source::File(path) => path,
            Source::Registry(_) => {
                let mut same = Self::with_digest(entry, known.component_sha256.clone(), None)?;
                same.remote_digest.clone_from(&known.remote_digest);
                return Ok(same);
            }
        };
        let metadata =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        let stamp = FileStamp::of(&metadata, now);
        if stamp.is_some() && stamp == known.hashed_as {
            return Self::with_digest(entry, known.component_sha256.clone(), stamp);
        }
        let (bytes, stamp) = read_component(path, now)?;
        Self::with_digest(entry, hex::encode(Sha256::digest(bytes)), stamp)
    }

    /// Whether both are of the same component and manifest bytes.
    pub fn same_bytes(&self, other: &Self) -> bool {
        self.component_sha256 == other.component_sha256 && self.manifest == other.manifest
    }

    fn with_digest(
        entry: &Entry,
        component_sha256: String,
        hashed_as: Option<FileStamp>,
    ) -> Result<Self> {
        let manifest = entry
            .manifest_path
            .as_deref()
            .map(|path| operator_file::read_text(path, "manifest"))
            .transpose()?;
        Ok(Self {
            component_sha256,
            manifest,
            remote_digest: None,
            hashed_as,
        })
    }
}

/// The bytes of the component at `path`, and its file's stamp as it was
/// read at `now` (taken from the open file, so both are of one file).
fn read_component(path: &Path, now: SystemTime) -> Result<(Vec<u8>, Option<FileStamp>)> {
    let (bytes, metadata) = operator_file::read_bytes(path, MOST_COMPONENT_BYTES, "component")?;
    Ok((bytes, FileStamp::of(&metadata, now)))
}

impl Loaded {
    /// How the namespace serves this plugin.
    pub fn settings(&self) -> MountSettings {
        self.entry.manifest.mount_settings()
    }

    /// Tells the operator's board that it serves now, starts compiling
    /// its optimized code if it runs on its baseline code, and, when the
    /// console is on, asks the plugin what it is, beside serving: a plugin
    /// that spins there delays nothing, and one that cannot say still
    /// serves.
    pub fn post(&mut self) {
        board().serving(self.entry.origin(), self.card.clone());
        runtime::now_on(
            &self.entry.scheme,
            self.plugin.id(),
            self.tier,
            Some(self.compile_time),
        );
        if let Some(job) = self.to_optimize.take() {
            runtime::optimize(&self.plugin, &self.entry.scheme, job);
        }
        if board().is_enabled() {
            let plugin = self.plugin.clone();
            tokio::spawn(async move {
                if let Ok(about) = plugin.about().await {
                    board().described(plugin.id(), (about.name, about.version, about.description));
                }
            });
        }
    }
}

/// A plugin that did not load, and why.
#[derive(Debug)]
pub struct Failure {
    pub declared_by: PathBuf,
    pub error: anyhow::Error,
}

impl Failure {
    /// Says on stderr, and on the operator's board, which plugin did not
    /// load, and why.
    fn report(&self, scheme: Option<&str>) {
        tracing::error!(
            plugin = %self.declared_by.display(),
            "plugin not loaded: {:#}",
            self.error
        );
        board().failed(&self.declared_by, scheme, &format!("{:#}", self.error));
    }

    /// Says on stderr, and on the operator's board, that a change of a
    /// plugin's files was not put in place, and why: its previous version
    /// keeps serving.
    fn report_not_replaced(&self, scheme: &str) {
        tracing::error!(
            plugin = %self.declared_by.display(),
            "plugin not replaced, the previous version keeps serving: {:#}",
            self.error
        );
        board().not_replaced(&self.declared_by, scheme, &format!("{:#}", self.error));
    }
}

/// Everything a plugin folder held.
pub struct Loading {
    pub loaded: Vec<Loaded>,
    pub failures: Vec<Failure>,
}

impl Loading {
    /// Mounts every loaded plugin in `namespace`.
    pub fn mount_into(&mut self, namespace: &Namespace) -> Result<()> {
        for loaded in &mut self.loaded {
            namespace
                .mount(
                    &loaded.entry.scheme,
                    loaded.plugin.clone(),
                    loaded.settings(),
                )
                .with_context(|| format!("cannot mount {}", loaded.entry.declared_by.display()))?;
            loaded.post();
        }
        Ok(())
    }
}

/// Reads the folder's entries; what cannot be read becomes a failure.
pub fn scan(folder: &Path) -> Result<(Vec<Entry>, Vec<Failure>)> {
    let dir = Dir::open_ambient_dir(folder, ambient_authority())
        .with_context(|| format!("cannot open plugin folder {}", folder.display()))?;
    let mut stems: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for dir_entry in dir
        .entries()
        .with_context(|| format!("cannot list plugin folder {}", folder.display()))?
    {
        let name = dir_entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".wasm") {
            stems.entry(stem.to_owned()).or_default().0 = true;
        } else if let Some(stem) = name.strip_suffix(".toml") {
            stems.entry(stem.to_owned()).or_default().1 = true;
        }
    }
    let mut entries = Vec::new();
    let mut failures = Vec::new();
    for (stem, (has_wasm, has_manifest)) in stems {
        let wasm = folder.join(format!("{stem}.wasm"));
        let manifest_path = has_manifest.then(|| folder.join(format!("{stem}.toml")));
        let declared_by = if has_wasm {
            wasm.clone()
        } else {
            folder.join(format!("{stem}.toml"))
        };
        let wasm = has_wasm.then_some(wasm);
        match entry(&stem, declared_by.clone(), wasm, manifest_path, folder) {
            Ok(entry) => entries.push(entry),
            Err(error) => failures.push(Failure { declared_by, error }),
        }
    }
    refuse_shared_schemes(&mut entries, &mut failures);
    Ok((entries, failures))
}

fn entry(
    stem: &str,
    declared_by: PathBuf,
    wasm: Option<PathBuf>,
    manifest_path: Option<PathBuf>,
    folder: &Path,
) -> Result<Entry> {
    let manifest = read_manifest(manifest_path.as_deref())?;
    let component = match (&manifest.oci, &manifest.component, wasm) {
        (Some(oci), None, None) => Source::Registry(Remote::parse(oci)?),
        (Some(_), _, _) => bail!(
            "it names an `oci` component but also has {stem}.wasm beside it or names a              `component`; give one of them"
        ),
        (None, Some(component), _) => Source::File(inside_folder(folder, component)?),
        (None, None, Some(wasm)) => Source::File(wasm),
        (None, None, None) => bail!("it has no {stem}.wasm beside it and names no `component`"),
    };
    if manifest.oci.is_none()
        && (manifest.signed_by.is_some() || manifest.pull != Default::default())
    {
        bail!("`signed_by` and [pull] apply to `oci` components only; this one is a file");
    }
    let scheme = manifest
        .scheme
        .clone()
        .unwrap_or_else(|| default_scheme(stem));
    uri::check_scheme(&scheme).map_err(|reason| anyhow::anyhow!("scheme {scheme:?} {reason}"))?;
    Ok(Entry {
        declared_by,
        component,
        manifest_path,
        manifest,
        scheme,
    })
}

/// The component a manifest's `component` key names, which must be a file
/// inside the plugin folder.
fn inside_folder(folder: &Path, component: &Path) -> Result<PathBuf> {
    let plain = component
        .components()
        .all(|part| matches!(part, std::path::Component::Normal(_)));
    let joined = folder.join(component);
    let inside = plain
        && match (dunce::canonicalize(&joined), dunce::canonicalize(folder)) {
            (Ok(target), Ok(folder)) => target.starts_with(folder),
            (Err(_), _) | (_, Err(_)) => true,
        };
    if !inside {
        bail!(
            "its component {} lies outside the plugin folder {}",
            component.display(),
            folder.display()
        );
    }
    Ok(joined)
}

/// Moves every entry whose scheme another entry also claims to the failures.
fn refuse_shared_schemes(entries: &mut Vec<Entry>, failures: &mut Vec<Failure>) {
    let mut claims: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in entries.iter() {
        claims
            .entry(entry.scheme.clone())
            .or_default()
            .push(entry.declared_by.clone());
    }
    entries.retain(|entry| {
        let claimants = &claims[&entry.scheme];
        if claimants.len() == 1 {
            return true;
        }
        let names: Vec<String> = claimants.iter().map(|p| p.display().to_string()).collect();
        failures.push(Failure {
            declared_by: entry.declared_by.clone(),
            error: anyhow::anyhow!(
                "scheme {:?} is claimed by {}; none of them is served",
                entry.scheme,
                names.join(" and ")
            ),
        });
        false
    });
}

/// A component's bytes on this host, ready to compile: its file, or a
/// pulled component once its signature passed.
pub struct Located {
    pub path: PathBuf,
    /// The SHA-256 its bytes must have.
    pub pin: Option<String>,
    pub provenance: Option<Provenance>,
    /// Keeps a pulled component's folder while it is compiled.
    _store: Option<registry::Store>,
}

/// Finds `entry`'s component: its file, or, for one in a registry, pulls and
/// verifies it under the signature rules its manifest and `rules` settle.
pub async fn locate(runtime: &Runtime, entry: &Entry, rules: &Rules) -> Result<Located> {
    let manifest = &entry.manifest;
    let remote = match &entry.component {
        Source::File(path) => {
            return Ok(Located {
                path: path.clone(),
                pin: manifest.sha256.clone(),
                provenance: None,
                _store: None,
            });
        }
        Source::Registry(remote) => remote,
    };
    let signature_rules = SignatureRules::settle(
        manifest.signed_by.as_ref(),
        &manifest.pull,
        entry.manifest_dir(),
        rules.ceiling.as_ref().and_then(Ceiling::signatures),
        rules.locked,
    )?;
    let store = registry::Store::open(runtime.cache())?;
    let pulled = registry::pull(remote, &signature_rules, &rules.registries, &store).await?;
    if let Some(pin) = &manifest.sha256
        && !pin.eq_ignore_ascii_case(&pulled.component_sha256)
    {
        bail!(
            "oci {remote} refused: its component has sha256 {}, not the manifest's pin {pin}",
            pulled.component_sha256
        );
    }
    Ok(Located {
        path: pulled.component,
        pin: Some(pulled.component_sha256),
        provenance: Some(pulled.provenance),
        _store: Some(store),
    })
}

/// Compiles the component at `located` for `entry` on the engine its stack
/// limit selects, or finds it compiled already (in the compile cache, or
/// for another mount). The pin is checked before anything is compiled.
/// Blocks while it compiles.
fn compile(
    runtime: &Runtime,
    entry: &Entry,
    located: &Located,
) -> Result<(Compiled, Option<FileStamp>)> {
    let limits = &entry.manifest.limits;
    limits.validate().context("invalid limits")?;
    let (bytes, stamp) = read_component(&located.path, SystemTime::now())?;
    let compiled = runtime
        .with_stack(limits.sandbox.stack_kib)?
        .compile(&bytes, located.pin.as_deref())
        .with_context(|| format!("cannot load {}", entry.component))?;
    Ok((compiled, stamp))
}

/// [`compile`], on tokio's blocking pool.
async fn compile_off_runtime(
    runtime: &Runtime,
    entry: &Entry,
    located: Located,
) -> Result<(Compiled, Option<FileStamp>, Located)> {
    let (runtime, entry) = (runtime.clone(), entry.clone());
    tokio::task::spawn_blocking(move || {
        compile(&runtime, &entry, &located).map(|(compiled, stamp)| (compiled, stamp, located))
    })
    .await?
}

/// Locates and compiles every entry's component (see [`locate`] and
/// [`compile`]), as many at once as there are cores, and hands each
/// outcome, with where a pulled component came from, to `compiled` as soon
/// as it is known.
pub async fn compile_each(
    runtime: &Runtime,
    entries: Vec<Entry>,
    rules: &Rules,
    mut compiled: impl FnMut(Entry, Result<(Compiled, Option<Provenance>)>),
) {
    let outcomes = futures::stream::iter(entries)
        .map(|entry| async move {
            let outcome = async {
                let located = locate(runtime, &entry, rules).await?;
                let (compiled, _, located) = compile_off_runtime(runtime, &entry, located).await?;
                Ok((compiled, located.provenance))
            }
            .await;
            (entry, outcome)
        })
        .buffer_unordered(at_once());
    let mut outcomes = std::pin::pin!(outcomes);
    while let Some((entry, outcome)) = outcomes.next().await {
        compiled(entry, outcome);
    }
}

/// Compiles, links and starts one entry's plugin. The ceiling is checked
/// before anything of the manifest is resolved (no file staged, no secret
/// read), and the pin before anything is compiled.
pub async fn load(runtime: &Runtime, entry: Entry, rules: &Rules) -> Result<Loaded> {
    if rules.locked && entry.manifest.sha256.is_none() && entry.file().is_some() {
        bail!("locked mode requires a sha256 pin in its manifest");
    }
    let manifest_dir = entry.manifest_dir();
    if let Some(ceiling) = &rules.ceiling {
        ceiling.check(&entry.manifest.capabilities(), manifest_dir)?;
    }
    let grants = entry.manifest.grants(manifest_dir)?;
    let located = locate(runtime, &entry, rules).await?;
    let (compiled, stamp, located) = compile_off_runtime(runtime, &entry, located).await?;
    let mut fingerprint = Fingerprint::with_digest(&entry, compiled.digest.clone(), stamp)?;
    fingerprint.remote_digest = located
        .provenance
        .as_ref()
        .map(|provenance| provenance.manifest_digest.clone());
    let config = entry.manifest.config_pairs()?;
    let shown_grants = described(&grants, &entry.manifest);
    // Linked on the engine that compiled it, which its stack limit chose.
    let plugin = runtime.plugin(&entry.scheme, &compiled, grants, config)?;
    plugin.start().await?;
    let card = board::Loaded {
        plugin: plugin.id(),
        sha256: compiled.digest.clone(),
        pulled: located.provenance.map(|provenance| board::Pulled {
            manifest_digest: provenance.manifest_digest,
            signed_by: provenance.signed_by,
            logged: provenance.logged,
        }),
        about: None,
        grants: shown_grants,
        code: board::Code::default(),
    };
    tracing::info!(
        scheme = entry.scheme,
        component = %entry.component,
        sha256 = compiled.digest,
        origin = ?compiled.origin,
        tier = compiled.tier.name(),
        elapsed_ms = compiled.elapsed.as_millis() as u64,
        "plugin loaded"
    );
    Ok(Loaded {
        entry,
        plugin: Arc::new(plugin),
        fingerprint,
        card,
        tier: compiled.tier,
        compile_time: compiled.elapsed,
        to_optimize: compiled.to_optimize,
    })
}

/// Each section of `grants` (limits among them) and the manifest's limits
/// on answers, as `resmux inspect` prints them.
fn described(grants: &Grants, manifest: &Manifest) -> Vec<(String, Vec<String>)> {
    grants
        .each()
        .iter()
        .map(|grant| {
            let (section, lines) = grant.describe();
            (section.to_owned(), lines)
        })
        .chain([(
            "answers".to_owned(),
            vec![manifest.limits.answers.describe()],
        )])
        .collect()
}

/// Loads every plugin of `folder`, as many at once as there are cores, and
/// returns once all have loaded or failed. Plugins that fail are reported
/// and skipped, except in locked mode, where any failure is an error. The
/// private folders of single-file grants that a killed resmux left behind
/// are removed first.
pub async fn load_folder(runtime: &Runtime, folder: &Path, rules: &Rules) -> Result<Loading> {
    files::remove_stale_folders();
    let (entries, failures) = scan(folder)?;
    let mut loading = Loading {
        loaded: Vec::new(),
        failures,
    };
    load_each(runtime, entries, rules, |_, outcome| match outcome {
        Ok(loaded) => loading.loaded.push(loaded),
        Err(failure) => loading.failures.push(failure),
    })
    .await;
    for failure in &loading.failures {
        failure.report(None);
    }
    if rules.locked && !loading.failures.is_empty() {
        bail!(
            "locked mode refuses to start: {} plugin(s) of {} failed to load (see above)",
            loading.failures.len(),
            folder.display()
        );
    }
    Ok(loading)
}

/// Loads `entries`, as many at once as there are cores, and hands each
/// outcome, with the plugin's scheme, to `settled` as soon as it is known.
async fn load_each(
    runtime: &Runtime,
    entries: Vec<Entry>,
    rules: &Rules,
    mut settled: impl FnMut(&str, Result<Loaded, Failure>),
) {
    let outcomes = futures::stream::iter(entries)
        .map(|entry| async move {
            let scheme = entry.scheme.clone();
            let declared_by = entry.declared_by.clone();
            let outcome = load(runtime, entry, rules)
                .await
                .map_err(|error| Failure { declared_by, error });
            (scheme, outcome)
        })
        .buffer_unordered(at_once());
    let mut outcomes = std::pin::pin!(outcomes);
    while let Some((scheme, outcome)) = outcomes.next().await {
        settled(&scheme, outcome);
    }
}

/// Components compiled or plugins loaded at once: one per core.
fn at_once() -> usize {
    runtime::cores()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry of the component at `path`, without a manifest.
    fn entry(path: &Path) -> Entry {
        Entry {
            declared_by: path.to_owned(),
            component: Source::File(path.to_owned()),
            manifest_path: None,
            manifest: Manifest::default(),
            scheme: "x".into(),
        }
    }

    fn sha256(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[test]
    fn a_file_changed_just_now_gets_no_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wasm");
        std::fs::write(&path, b"first").unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!(FileStamp::of(&metadata, SystemTime::now()), None);
        let settled = SystemTime::now() + SETTLED_AFTER;
        assert!(FileStamp::of(&metadata, settled).is_some());
    }

    #[test]
    fn a_component_is_hashed_again_only_when_its_file_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wasm");
        let entry = entry(&path);
        std::fs::write(&path, b"first").unwrap();
        let mut now = SystemTime::now() + SETTLED_AFTER;
        let (_, stamp) = read_component(&path, now).unwrap();
        assert!(stamp.is_some());
        // Under the file's own stamp, a digest that is not its bytes' stands:
        // the file was not read.
        let known = Fingerprint::with_digest(&entry, "as hashed before".into(), stamp).unwrap();
        let unchanged = Fingerprint::at(&entry, &known, now).unwrap();
        assert_eq!(unchanged.component_sha256, "as hashed before");
        assert!(unchanged.same_bytes(&known));

        // Another size.
        std::fs::write(&path, b"second!").unwrap();
        now += SETTLED_AFTER;
        let grown = Fingerprint::at(&entry, &known, now).unwrap();
        assert_eq!(grown.component_sha256, sha256(b"second!"));
        assert!(!grown.same_bytes(&known));

        // The same size, in another file moved in place of it.
        let other = dir.path().join("x.new");
        std::fs::write(&other, b"third!!").unwrap();
        std::fs::rename(&other, &path).unwrap();
        now += SETTLED_AFTER;
        let replaced = Fingerprint::at(&entry, &grown, now).unwrap();
        assert_eq!(replaced.component_sha256, sha256(b"third!!"));

        // A stamp taken while the file was fresh vouches for nothing.
        let fresh = Fingerprint::with_digest(&entry, "as hashed before".into(), None).unwrap();
        let hashed = Fingerprint::at(&entry, &fresh, now).unwrap();
        assert_eq!(hashed.component_sha256, sha256(b"third!!"));
    }
}
