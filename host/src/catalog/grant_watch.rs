//! Watches what each plugin was granted, so that the live folder can poke a
//! plugin's change report when something there changes; a watch never leaves
//! a grant.
//!
//! resmux walks each granted directory itself, breadth first: every
//! directory below it is opened relative to the granted path without
//! following a symlink anywhere on the way (`openat2` with `RESOLVE_BENEATH`
//! and `RESOLVE_NO_SYMLINKS`, so a link inside a grant, to anywhere, is
//! never walked), and the watch is put on the directory that was opened,
//! through its descriptor's `/proc/self/fd` name, never on a path that could
//! be swapped for a link meanwhile. A change is credited to the plugins whose
//! walk reached the watched directory, never matched by path. When
//! directories come, go or move, the plugins concerned are walked again, so
//! a directory moved out of a grant stops being watched. One plugin gets at
//! most [`MAX_WATCHES_PER_PLUGIN`] watches; beyond them its changes are found
//! when its change report is polled. Which plugins have every grant watched
//! is known ([`GrantWatch::wholly_watched`]): each change of their files is
//! reported.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{CWD, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use tokio::sync::Notify;

use crate::grants::files::on_local_filesystem;

/// The most directories (and granted files) watched for one plugin.
const MAX_WATCHES_PER_PLUGIN: usize = 1024;

/// What a watch reports: every change but reads (an open, or a close after
/// reading, is no change; the plugin's own reads would otherwise poke its
/// change report without end).
const CHANGES: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF);

/// Events after which a watched directory or file may be gone or elsewhere.
const GONE: ReadFlags = ReadFlags::DELETE_SELF
    .union(ReadFlags::MOVE_SELF)
    .union(ReadFlags::IGNORED)
    .union(ReadFlags::UNMOUNT);

/// Events that, on a directory in a watched directory, change which
/// directories lie below it.
const ENTRY_MOVED: ReadFlags = ReadFlags::CREATE
    .union(ReadFlags::DELETE)
    .union(ReadFlags::MOVED_FROM)
    .union(ReadFlags::MOVED_TO);

/// An inotify watch descriptor.
type Watch = i32;

/// The watches of every plugin, in one inotify instance.
#[derive(Clone)]
pub struct GrantWatch(Arc<Shared>);

struct Shared {
    inotify: Arc<OwnedFd>,
    reported: Arc<Reported>,
    plugins: Mutex<BTreeMap<String, Plugin>>,
}

/// What is watched for one plugin.
#[derive(Default)]
struct Plugin {
    granted: Vec<PathBuf>,
    watches: BTreeSet<Watch>,
    /// What its last walk had to say (the bound reached, a grant that
    /// cannot be watched), so that each is logged once, not at every walk;
    /// nothing if it watches every directory of its grants.
    said: BTreeSet<String>,
}

/// What the kernel reported and nobody has looked at yet.
struct Reported {
    batch: Mutex<Batch>,
    arrived: Notify,
    /// Reading the instance failed: nothing more will be reported.
    stopped: AtomicBool,
}

#[derive(Default)]
struct Batch {
    /// Watches that reported any change.
    changed: BTreeSet<Watch>,
    /// Watches whose directory or file went or moved, or in whose directory
    /// a directory came, went or moved.
    reshaped: BTreeSet<Watch>,
    /// The kernel dropped events: anything may have changed.
    overflowed: bool,
}

/// How far a walk of one grant went.
enum Walked {
    Whole,
    /// It stopped at [`MAX_WATCHES_PER_PLUGIN`].
    Bounded,
    /// It reached a network or FUSE filesystem, where the kernel reports
    /// only the changes made on this machine.
    Remote,
}

impl GrantWatch {
    /// An inotify instance with nothing watched yet, and the thread that
    /// reads it for as long as the process runs.
    pub fn start() -> Result<Self> {
        let instance = inotify::init(CreateFlags::CLOEXEC)
            .map_err(io::Error::from)
            .context("cannot start watching granted paths")?;
        let instance = Arc::new(instance);
        let reported = Arc::new(Reported {
            batch: Mutex::default(),
            arrived: Notify::new(),
            stopped: AtomicBool::new(false),
        });
        std::thread::Builder::new()
            .name("grant-watch".into())
            .spawn({
                let instance = instance.clone();
                let reported = reported.clone();
                move || read_events(&instance, &reported)
            })
            .context("cannot start watching granted paths")?;
        Ok(Self(Arc::new(Shared {
            inotify: instance,
            reported,
            plugins: Mutex::default(),
        })))
    }

    /// Returns once the kernel has reported something since the last
    /// [`Self::settle`], or watching stopped.
    pub async fn arrival(&self) {
        self.0.reported.arrived.notified().await;
    }

    /// Watches the paths granted to each plugin (by scheme), and nothing
    /// else: a plugin no longer listed loses its watches, a plugin whose
    /// grants changed is walked again. Blocks on the file system.
    pub fn follow(&self, granted: BTreeMap<String, Vec<PathBuf>>) {
        let granted: BTreeMap<String, Vec<PathBuf>> = granted
            .into_iter()
            .filter(|(_, paths)| !paths.is_empty())
            .collect();
        let mut plugins = lock(&self.0.plugins);
        let gone: Vec<String> = plugins
            .keys()
            .filter(|scheme| !granted.contains_key(*scheme))
            .cloned()
            .collect();
        for scheme in gone {
            if let Some(plugin) = plugins.remove(&scheme) {
                self.release(&plugins, plugin.watches);
            }
        }
        for (scheme, paths) in granted {
            if plugins
                .get(&scheme)
                .is_some_and(|plugin| plugin.granted == paths)
            {
                continue;
            }
            plugins.entry(scheme.clone()).or_default().granted = paths;
            self.walk_plugin(&mut plugins, &scheme);
        }
    }

    /// Takes what the kernel reported since the last call, walks again the
    /// plugins in whose grants something went or moved (every plugin if the
    /// kernel dropped events), and returns the plugins whose change report
    /// to poke: those whose walk reached a watch that reported a change.
    /// Blocks on the file system.
    pub fn settle(&self) -> BTreeSet<String> {
        let batch = std::mem::take(&mut *lock(&self.0.reported.batch));
        let mut plugins = lock(&self.0.plugins);
        // Something went or moved in these plugins' grants while they
        // watched it: that is news to them, wherever it went.
        let mut poked = if batch.overflowed {
            plugins.keys().cloned().collect()
        } else {
            owners(&plugins, &batch.reshaped)
        };
        for scheme in &poked {
            self.walk_plugin(&mut plugins, scheme);
        }
        // Other changes count only where the grants reach now, so that a
        // directory moved out of a grant pokes nobody.
        poked.extend(owners(&plugins, &batch.changed));
        poked
    }

    /// The plugins whose every grant is watched whole, all the way down,
    /// while the kernel's reports are still read: every change of their
    /// files is reported by [`Self::settle`].
    pub fn wholly_watched(&self) -> BTreeSet<String> {
        if self.0.reported.stopped.load(Ordering::Relaxed) {
            return BTreeSet::new();
        }
        lock(&self.0.plugins)
            .iter()
            .filter(|(_, plugin)| plugin.said.is_empty())
            .map(|(scheme, _)| scheme.clone())
            .collect()
    }

    /// Walks every grant of `scheme` again, within the plugin's bound, and
    /// drops the watches it no longer reaches.
    fn walk_plugin(&self, plugins: &mut BTreeMap<String, Plugin>, scheme: &str) {
        let Some(plugin) = plugins.get_mut(scheme) else {
            return;
        };
        let mut reached = BTreeSet::new();
        let mut said = BTreeSet::new();
        for root in &plugin.granted {
            match self.walk(root, &mut reached) {
                Ok(Walked::Whole) => {}
                Ok(Walked::Remote) => {
                    said.insert(format!(
                        "granted path {} reaches a network or FUSE filesystem: changes made \
                         there from elsewhere are found by polling the plugin's change report only",
                        root.display()
                    ));
                }
                Ok(Walked::Bounded) => {
                    said.insert(format!(
                        "watches stop at {MAX_WATCHES_PER_PLUGIN} directories for one plugin, \
                         reached in granted path {}: changes beyond them are found by polling \
                         the plugin's change report (every [changes] interval_ms while someone \
                         is subscribed)",
                        root.display()
                    ));
                    break;
                }
                Err(error) => {
                    said.insert(format!(
                        "cannot watch granted path {}: {error}; its changes are found by polling only",
                        root.display()
                    ));
                }
            }
        }
        for news in said.difference(&plugin.said) {
            tracing::warn!(plugin = scheme, "{news}");
        }
        plugin.said = said;
        let dropped = std::mem::replace(&mut plugin.watches, reached);
        self.release(plugins, dropped);
    }

    /// Watches `root` and, if it is a directory, the directories below it,
    /// breadth first, adding each watch to `reached` until that holds
    /// [`MAX_WATCHES_PER_PLUGIN`]. No symlink is followed: not on the way to
    /// `root` (resolved when the plugin loaded, it has none), nor below it.
    fn walk(&self, root: &Path, reached: &mut BTreeSet<Watch>) -> io::Result<Walked> {
        if reached.len() >= MAX_WATCHES_PER_PLUGIN {
            return Ok(Walked::Bounded);
        }
        let held = rustix::fs::openat2(
            CWD,
            root,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS,
        )?;
        if FileType::from_raw_mode(rustix::fs::fstat(&held)?.st_mode) != FileType::Directory {
            reached.insert(self.add(&held, CHANGES)?);
            return Ok(if on_local_filesystem(&held) {
                Walked::Whole
            } else {
                Walked::Remote
            });
        }
        let mut bounded = false;
        let mut remote = false;
        let mut pending = VecDeque::from([PathBuf::from(".")]);
        while let Some(relative) = pending.pop_front() {
            let dir = match rustix::fs::openat2(
                &held,
                &relative,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
            ) {
                Ok(dir) => dir,
                Err(error) if relative.as_os_str() == "." => return Err(error.into()),
                // Gone, or no longer a directory, since it was listed.
                Err(_) => continue,
            };
            if !reached.insert(self.add(&dir, CHANGES | WatchFlags::ONLYDIR)?) {
                // Reached before: through another grant of the plugin, or
                // a mount that shows a directory twice.
                continue;
            }
            remote |= !on_local_filesystem(&dir);
            for entry in Dir::new(dir)?.map_while(Result::ok) {
                let name = entry.file_name().to_bytes();
                let maybe_directory =
                    matches!(entry.file_type(), FileType::Directory | FileType::Unknown);
                if !maybe_directory || name == b"." || name == b".." {
                    continue;
                }
                if reached.len() + pending.len() >= MAX_WATCHES_PER_PLUGIN {
                    bounded = true;
                    break;
                }
                pending.push_back(relative.join(OsStr::from_bytes(name)));
            }
        }
        Ok(if bounded {
            Walked::Bounded
        } else if remote {
            Walked::Remote
        } else {
            Walked::Whole
        })
    }

    /// Watches what `opened` holds: its `/proc/self/fd` name leads to that
    /// very directory or file, whatever its path has become.
    fn add(&self, opened: &OwnedFd, flags: WatchFlags) -> io::Result<Watch> {
        let name = format!("/proc/self/fd/{}", opened.as_raw_fd());
        inotify::add_watch(self.0.inotify.as_fd(), name.as_str(), flags).map_err(|error| {
            if error == Errno::NOSPC {
                io::Error::other(
                    "the user's inotify watch limit (fs.inotify.max_user_watches) is reached",
                )
            } else {
                error.into()
            }
        })
    }

    /// Removes those of `watches` that no plugin holds any more.
    fn release(&self, plugins: &BTreeMap<String, Plugin>, watches: BTreeSet<Watch>) {
        for watch in watches {
            if !plugins
                .values()
                .any(|plugin| plugin.watches.contains(&watch))
            {
                // The kernel may have removed it already, with its directory.
                let _ = inotify::remove_watch(self.0.inotify.as_fd(), watch);
            }
        }
    }
}

/// The plugins whose walk reached any of `watches`.
fn owners(plugins: &BTreeMap<String, Plugin>, watches: &BTreeSet<Watch>) -> BTreeSet<String> {
    plugins
        .iter()
        .filter(|(_, plugin)| !plugin.watches.is_disjoint(watches))
        .map(|(scheme, _)| scheme.clone())
        .collect()
}

/// Reads the inotify instance until the process ends, gathering what it
/// reports for [`GrantWatch::settle`].
fn read_events(instance: &OwnedFd, reported: &Reported) {
    let mut buffer = [MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut events = inotify::Reader::new(instance, &mut buffer);
    loop {
        let mut batch = Batch::default();
        loop {
            match events.next() {
                Ok(event) => batch.note(event.wd(), event.events()),
                Err(Errno::INTR) => {}
                Err(error) => {
                    tracing::error!(
                        "watching granted paths stopped: {error}; their changes are found by polling only"
                    );
                    reported.stopped.store(true, Ordering::Relaxed);
                    reported.arrived.notify_one();
                    return;
                }
            }
            if events.is_buffer_empty() {
                break;
            }
        }
        reported.add(batch);
    }
}

impl Batch {
    fn note(&mut self, watch: Watch, flags: ReadFlags) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.overflowed = true;
            return;
        }
        self.changed.insert(watch);
        if flags.intersects(GONE)
            || (flags.contains(ReadFlags::ISDIR) && flags.intersects(ENTRY_MOVED))
        {
            self.reshaped.insert(watch);
        }
    }

    fn is_empty(&self) -> bool {
        self.changed.is_empty() && !self.overflowed
    }
}

impl Reported {
    fn add(&self, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        let mut pending = lock(&self.batch);
        pending.changed.extend(batch.changed);
        pending.reshaped.extend(batch.reshaped);
        pending.overflowed |= batch.overflowed;
        drop(pending);
        self.arrived.notify_one();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
