//! Watches what each plugin was granted, so that the live folder can poke a
//! plugin's change report when something there changes; a watch never leaves
//! a grant, and what it costs follows the change, not the grant.
//!
//! The watch starts from what resmux holds for each grant, never from its
//! path: the granted directory, opened once when the plugin loaded, or a
//! granted file's folder, opened then too ([`WatchedGrant`]). A grant renamed
//! away, or another directory put at its path, changes nothing: the watch
//! stays on the directory the plugin still reaches. Every directory below a
//! grant is opened beneath its parent without following a symlink (`openat2`
//! with `RESOLVE_BENEATH` and `RESOLVE_NO_SYMLINKS`, so a link inside a
//! grant, to anywhere, is never walked), and the watch is put on the
//! directory that was opened, through its descriptor's `/proc/self/fd` name,
//! never on a path that could be swapped for a link meanwhile. A granted
//! file is watched through its folder, where only what names it counts, and
//! as itself, so that a write through another link to it counts too.
//!
//! What one plugin watches is a tree: where each watched directory was found
//! (a grant, or an entry of a watched directory), kept by watch and by device
//! and inode. A change is credited to the plugins holding the watch that
//! reported it, found by lookup, never matched by path. When a directory
//! comes, goes or moves, only that entry is looked at again: its parent is
//! opened by its place in the tree (and checked to be that very directory
//! still), and what the entry holds now is a directory watched already
//! (moved: it moves in the tree, and nothing is read), a new one (it and the
//! directories below it are watched, and only their entries are read), or
//! none (what was watched there is dropped when the settle ends, unless it
//! was found elsewhere meanwhile; a directory moved out of a grant stops
//! being watched). No entry of a directory already watched is read again, so
//! a directory made in a grant of 300 000 files costs what it costs in a
//! grant of 30. Only when the kernel dropped events, or more changed between
//! two settles than [`MOST_NOTED`] entries, are grants walked again whole.
//!
//! One plugin gets at most [`MAX_WATCHES_PER_PLUGIN`] watches; beyond them
//! its changes are found when its change report is polled. Which plugins have
//! every grant watched is known ([`GrantWatch::wholly_watched`]): each change
//! of their files is reported.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use tokio::sync::Notify;

use crate::grants::WatchedGrant;
use crate::grants::files::on_local_filesystem;

/// The most directories (and granted files, two watches each) watched for
/// one plugin.
const MAX_WATCHES_PER_PLUGIN: usize = 1024;

/// The most entries where a directory came, went or moved, and the most names
/// changed in one granted file's folder, kept between two settles. Beyond
/// the first, every grant is walked again; beyond the second, anything in
/// that folder counts as changed.
const MOST_NOTED: usize = 16 * 1024;

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

/// Events that, on a directory in a watched directory, change which
/// directories lie below it.
const ENTRY_MOVED: ReadFlags = ReadFlags::CREATE
    .union(ReadFlags::DELETE)
    .union(ReadFlags::MOVED_FROM)
    .union(ReadFlags::MOVED_TO);

/// An inotify watch descriptor.
type Watch = i32;

/// A directory as the file system knows it: device and inode.
type Identity = (u64, u64);

/// An entry of a watched directory: the directory's watch, and the name.
type Entry = (Watch, OsString);

/// The plugins (by scheme) that hold each watch.
type Holders = BTreeMap<Watch, BTreeSet<String>>;

/// The watches of every plugin, in one inotify instance.
#[derive(Clone)]
pub struct GrantWatch(Arc<Shared>);

struct Shared {
    inotify: Arc<OwnedFd>,
    reported: Arc<Reported>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    plugins: BTreeMap<String, Plugin>,
    /// Who holds each watch, so that a change finds its plugins by lookup.
    holders: Holders,
}

/// What is watched for one plugin.
#[derive(Default)]
struct Plugin {
    granted: Vec<WatchedGrant>,
    /// The directories watched for it, each where it was found.
    nodes: BTreeMap<Watch, Node>,
    /// The same directories, by identity.
    by_identity: BTreeMap<Identity, Watch>,
    /// Its granted files.
    files: Vec<FileWatch>,
    /// Entries that changed but could not be looked at yet (their directory
    /// moved again since): looked at by the next settle.
    unsettled: BTreeSet<Entry>,
    /// What its walks had to say (the bound reached, a grant that cannot be
    /// watched), so that each is logged once, not at every walk; nothing if
    /// it watches every directory of its grants.
    said: BTreeSet<String>,
}

/// One watched directory.
struct Node {
    place: Place,
    identity: Identity,
    /// The watched directories in it, by name.
    children: BTreeMap<OsString, Watch>,
}

/// Where a watched directory was found.
#[derive(Clone)]
enum Place {
    /// It is the granted directory of this index in [`Plugin::granted`].
    Grant(usize),
    /// It is this entry of a watched directory.
    Entry(Watch, OsString),
    /// It is no longer where it was found: unless it is found elsewhere
    /// before the settle ends, it is dropped, with what lies below it.
    Detached,
}

/// The watches of one granted file.
struct FileWatch {
    /// Its index in [`Plugin::granted`].
    grant: usize,
    /// Its name in its folder.
    name: OsString,
    /// The watch on its folder (none once the folder is gone), where only
    /// what names it counts.
    folder: Option<Watch>,
    /// The watch on the file itself, if its name leads to a regular file.
    file: Option<Watch>,
}

/// What the kernel reported and nobody has looked at yet.
struct Reported {
    pending: Mutex<Pending>,
    arrived: Notify,
    /// Reading the instance failed: nothing more will be reported.
    stopped: AtomicBool,
}

#[derive(Default)]
struct Pending {
    batch: Batch,
    /// The watches on granted files' folders, whose events' names are kept.
    named: BTreeSet<Watch>,
}

#[derive(Default)]
struct Batch {
    /// Watches that reported any change.
    changed: BTreeSet<Watch>,
    /// Entries of watched directories where a directory came, went or
    /// moved, at most [`MOST_NOTED`] (but in granted files' folders).
    entries: BTreeSet<Entry>,
    /// What changed in granted files' folders, by name, whatever it is.
    names: BTreeMap<Watch, Names>,
    /// Watches the kernel removed, with what they watched.
    gone: BTreeSet<Watch>,
    /// The kernel dropped events, or more entries changed than are kept:
    /// anything may have changed.
    overflowed: bool,
}

/// The names that changed in a granted file's folder.
enum Names {
    Listed(BTreeSet<OsString>),
    /// More than [`MOST_NOTED`]: any.
    Any,
}

impl Names {
    fn include(&self, name: &OsStr) -> bool {
        match self {
            Self::Listed(names) => names.contains(name),
            Self::Any => true,
        }
    }
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
            pending: Mutex::default(),
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
            state: Mutex::default(),
        })))
    }

    /// Returns once the kernel has reported something since the last
    /// [`Self::settle`], or watching stopped.
    pub async fn arrival(&self) {
        self.0.reported.arrived.notified().await;
    }

    /// Watches the directories held for each plugin's grants (by scheme),
    /// and nothing else: a plugin no longer listed loses its watches, a
    /// plugin whose grants are other directories than before is walked
    /// again. Blocks on the file system.
    pub fn follow(&self, granted: BTreeMap<String, Vec<WatchedGrant>>) {
        let granted: BTreeMap<String, Vec<WatchedGrant>> = granted
            .into_iter()
            .filter(|(_, grants)| !grants.is_empty())
            .collect();
        let mut state = lock(&self.0.state);
        let gone: Vec<String> = state
            .plugins
            .keys()
            .filter(|scheme| !granted.contains_key(*scheme))
            .cloned()
            .collect();
        for scheme in gone {
            self.forget(&mut state, &scheme);
        }
        for (scheme, grants) in granted {
            if let Some(plugin) = state.plugins.get_mut(&scheme)
                && same_grants(&plugin.granted, &grants)
            {
                // The same directories, held anew by a plugin loaded again.
                plugin.granted = grants;
                continue;
            }
            state.plugins.entry(scheme.clone()).or_default().granted = grants;
            self.walk_plugin(&mut state, &scheme);
        }
        self.share_named(&state);
    }

    /// Takes what the kernel reported since the last call, looks again at
    /// the entries where a directory came, went or moved (every grant if
    /// the kernel dropped events), and returns the plugins whose change
    /// report to poke: those holding a watch that reported a change. Blocks
    /// on the file system, for what changed only.
    pub fn settle(&self) -> BTreeSet<String> {
        let batch = std::mem::take(&mut lock(&self.0.reported.pending).batch);
        let mut state = lock(&self.0.state);
        if batch.overflowed {
            let schemes: Vec<String> = state.plugins.keys().cloned().collect();
            for scheme in &schemes {
                self.walk_plugin(&mut state, scheme);
            }
            self.share_named(&state);
            return schemes.into_iter().collect();
        }
        // Something came, went or moved in these plugins' grants while they
        // watched it: that is news to them, wherever it went.
        let mut poked: BTreeSet<String> = batch
            .entries
            .iter()
            .map(|(watch, _)| *watch)
            .chain(batch.gone.iter().copied())
            .flat_map(|watch| state.owners(watch))
            .collect();
        for &watch in &batch.gone {
            self.lose(&mut state, watch);
        }
        for (&watch, names) in &batch.names {
            self.refresh_files(&mut state, watch, names);
        }
        let mut entries: BTreeMap<String, BTreeSet<Entry>> = BTreeMap::new();
        for (scheme, plugin) in &mut state.plugins {
            if !plugin.unsettled.is_empty() {
                entries
                    .entry(scheme.clone())
                    .or_default()
                    .append(&mut plugin.unsettled);
            }
        }
        for entry in &batch.entries {
            for scheme in state.holders.get(&entry.0).into_iter().flatten() {
                entries
                    .entry(scheme.clone())
                    .or_default()
                    .insert(entry.clone());
            }
        }
        // A granted file's folder that is a watched directory too: what
        // changed there is named among all its names.
        let mut rewalk = BTreeSet::new();
        for (&watch, names) in &batch.names {
            for scheme in state.holders.get(&watch).into_iter().flatten() {
                if !state
                    .plugins
                    .get(scheme)
                    .is_some_and(|plugin| plugin.nodes.contains_key(&watch))
                {
                    continue;
                }
                match names {
                    Names::Listed(names) => entries
                        .entry(scheme.clone())
                        .or_default()
                        .extend(names.iter().map(|name| (watch, name.clone()))),
                    Names::Any => {
                        rewalk.insert(scheme.clone());
                    }
                }
            }
        }
        for (scheme, entries) in entries {
            if !rewalk.contains(&scheme) {
                self.settle_plugin(&mut state, &scheme, entries);
            }
        }
        for scheme in &rewalk {
            self.walk_plugin(&mut state, scheme);
        }
        // Other changes count only where the grants reach now, so that a
        // directory moved out of a grant pokes nobody.
        for &watch in &batch.changed {
            poked.extend(state.owners(watch));
        }
        for (&watch, names) in &batch.names {
            poked.extend(state.file_owners(watch, names));
        }
        self.share_named(&state);
        poked
    }

    /// The plugins whose every grant is watched whole, all the way down,
    /// while the kernel's reports are still read: every change of their
    /// files is reported by [`Self::settle`].
    pub fn wholly_watched(&self) -> BTreeSet<String> {
        if self.0.reported.stopped.load(Ordering::Relaxed) {
            return BTreeSet::new();
        }
        lock(&self.0.state)
            .plugins
            .iter()
            .filter(|(_, plugin)| plugin.said.is_empty() && plugin.unsettled.is_empty())
            .map(|(scheme, _)| scheme.clone())
            .collect()
    }

    /// What changes the watches of `scheme`, if it is followed.
    fn walker<'a>(&'a self, state: &'a mut State, scheme: &'a str) -> Option<Walker<'a>> {
        let State { plugins, holders } = state;
        Some(Walker {
            inotify: self.0.inotify.as_fd(),
            reported: &self.0.reported,
            scheme,
            plugin: plugins.get_mut(scheme)?,
            holders,
            said: BTreeSet::new(),
            detached: BTreeSet::new(),
        })
    }

    /// Walks every grant of `scheme` again, within the plugin's bound, and
    /// drops the watches it no longer reaches.
    fn walk_plugin(&self, state: &mut State, scheme: &str) {
        if let Some(mut walker) = self.walker(state, scheme) {
            walker.rewalk();
            walker.finish(true);
        }
    }

    /// Looks at `entries` of the directories `scheme` watches; walks the
    /// plugin again if too many cannot be looked at.
    fn settle_plugin(&self, state: &mut State, scheme: &str, entries: BTreeSet<Entry>) {
        let Some(mut walker) = self.walker(state, scheme) else {
            return;
        };
        let later = walker.settle(entries);
        let lost = later.len() > MAX_WATCHES_PER_PLUGIN;
        walker.plugin.unsettled = later;
        walker.finish(false);
        if lost {
            self.walk_plugin(state, scheme);
        }
    }

    /// Stops watching for `scheme`.
    fn forget(&self, state: &mut State, scheme: &str) {
        let Some(plugin) = state.plugins.remove(scheme) else {
            return;
        };
        for watch in plugin.held() {
            release(self.0.inotify.as_fd(), &mut state.holders, scheme, watch);
        }
    }

    /// Forgets `watch`, which the kernel removed (its directory or file is
    /// gone, or its filesystem unmounted), in every plugin that held it.
    fn lose(&self, state: &mut State, watch: Watch) {
        let schemes: Vec<String> = state.holding(watch).cloned().collect();
        for scheme in &schemes {
            if let Some(mut walker) = self.walker(state, scheme) {
                walker.lose(watch);
                walker.finish(false);
            }
        }
        state.holders.remove(&watch);
    }

    /// Watches again the granted files named in `names`, changed in the
    /// folder `watch` watches: one may be another file now.
    fn refresh_files(&self, state: &mut State, watch: Watch, names: &Names) {
        let schemes: Vec<String> = state.holding(watch).cloned().collect();
        for scheme in &schemes {
            let Some(mut walker) = self.walker(state, scheme) else {
                continue;
            };
            let touched: Vec<usize> = walker
                .plugin
                .files
                .iter()
                .enumerate()
                .filter(|(_, file)| file.folder == Some(watch) && names.include(&file.name))
                .map(|(index, _)| index)
                .collect();
            for index in touched {
                walker.refresh_file(index);
            }
            walker.finish(false);
        }
    }

    /// Tells the thread that reads the kernel's reports which watches are
    /// on granted files' folders.
    fn share_named(&self, state: &State) {
        let named: BTreeSet<Watch> = state
            .plugins
            .values()
            .flat_map(|plugin| plugin.files.iter().filter_map(|file| file.folder))
            .collect();
        lock(&self.0.reported.pending).named = named;
    }
}

impl State {
    /// The schemes of the plugins that hold `watch`, whatever for.
    fn holding(&self, watch: Watch) -> impl Iterator<Item = &String> {
        self.holders.get(&watch).into_iter().flatten()
    }

    /// The plugins that hold `watch` on a directory of their grants or on a
    /// granted file itself: any change it reports is theirs.
    fn owners(&self, watch: Watch) -> Vec<String> {
        self.holding(watch)
            .filter(|scheme| {
                self.plugins.get(*scheme).is_some_and(|plugin| {
                    plugin.nodes.contains_key(&watch)
                        || plugin.files.iter().any(|file| file.file == Some(watch))
                })
            })
            .cloned()
            .collect()
    }

    /// The plugins that hold `watch` on the folder of a granted file among
    /// `names`.
    fn file_owners(&self, watch: Watch, names: &Names) -> Vec<String> {
        self.holding(watch)
            .filter(|scheme| {
                self.plugins.get(*scheme).is_some_and(|plugin| {
                    plugin
                        .files
                        .iter()
                        .any(|file| file.folder == Some(watch) && names.include(&file.name))
                })
            })
            .cloned()
            .collect()
    }
}

impl Plugin {
    /// Every watch it holds.
    fn held(&self) -> Vec<Watch> {
        self.nodes
            .keys()
            .copied()
            .chain(
                self.files
                    .iter()
                    .flat_map(|file| [file.folder, file.file])
                    .flatten(),
            )
            .collect()
    }

    fn holds(&self, watch: Watch) -> bool {
        self.nodes.contains_key(&watch)
            || self
                .files
                .iter()
                .any(|file| file.folder == Some(watch) || file.file == Some(watch))
    }

    /// The watches counted against [`MAX_WATCHES_PER_PLUGIN`].
    fn watches(&self) -> usize {
        self.nodes.len() + 2 * self.files.len()
    }
}

/// Changes what one plugin watches.
struct Walker<'a> {
    inotify: BorrowedFd<'a>,
    reported: &'a Reported,
    scheme: &'a str,
    plugin: &'a mut Plugin,
    holders: &'a mut Holders,
    /// What this walk found to say.
    said: BTreeSet<String>,
    /// Directories no longer where they were found.
    detached: BTreeSet<Watch>,
}

impl Walker<'_> {
    /// Walks every grant afresh, breadth first, within the plugin's bound,
    /// and releases what it no longer reaches.
    fn rewalk(&mut self) {
        let before = self.plugin.held();
        self.plugin.nodes.clear();
        self.plugin.by_identity.clear();
        self.plugin.files.clear();
        self.plugin.unsettled.clear();
        let grants = self.plugin.granted.clone();
        let mut below = VecDeque::new();
        // Every grant first, so that a grant inside another is watched as
        // itself, not as a directory of the other.
        for (index, grant) in grants.iter().enumerate() {
            if let Err(error) = self.watch_grant(index, grant, &mut below) {
                self.note_cannot(Some(index), &error);
            }
        }
        self.plugin.unsettled = self.work(VecDeque::new(), below).into_iter().collect();
        for watch in before {
            if !self.plugin.holds(watch) {
                self.release(watch);
            }
        }
    }

    /// Looks at `entries`, again while that helps (an entry whose directory
    /// moved is looked at once the move is known); returns those it could
    /// not look at.
    fn settle(&mut self, entries: BTreeSet<Entry>) -> BTreeSet<Entry> {
        let mut todo: VecDeque<Entry> = entries.into_iter().collect();
        loop {
            let count = todo.len();
            let later = self.work(todo, VecDeque::new());
            if later.is_empty() || later.len() >= count {
                return later.into_iter().collect();
            }
            todo = later.into();
        }
    }

    /// Looks at each entry of `below` (found by walks, first) and `todo`;
    /// returns those whose directory could not be opened where the tree
    /// puts it.
    fn work(&mut self, mut todo: VecDeque<Entry>, mut below: VecDeque<Entry>) -> Vec<Entry> {
        let mut later = Vec::new();
        // Entries of one directory come together: it is opened once for all.
        let mut opened: Option<(Watch, OwnedFd)> = None;
        while let Some((parent, name)) = below.pop_front().or_else(|| todo.pop_front()) {
            if !self.plugin.nodes.contains_key(&parent) {
                continue;
            }
            if opened.as_ref().is_none_or(|(watch, _)| *watch != parent) {
                opened = self.open_node(parent).map(|dir| (parent, dir));
            }
            let Some((_, dir)) = &opened else {
                later.push((parent, name));
                continue;
            };
            self.look(parent, dir.as_fd(), &name, &mut below);
        }
        later
    }

    /// Brings the tree in line with what entry `name` of `parent` (opened
    /// as `dir`) holds now.
    fn look(
        &mut self,
        parent: Watch,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        below: &mut VecDeque<Entry>,
    ) {
        let occupant = self
            .plugin
            .nodes
            .get(&parent)
            .and_then(|node| node.children.get(name))
            .copied();
        let found = rustix::fs::openat2(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )
        .and_then(|child| Ok((identity(&child)?, child)));
        let (id, child) = match found {
            Ok(found) => found,
            Err(error) => {
                // No directory there now (or one resmux may not read).
                if let Some(occupant) = occupant {
                    self.detach(occupant);
                }
                if !vanished(error) {
                    let grant = self.grant_of(parent);
                    self.note_cannot(grant, &io::Error::from(error));
                }
                return;
            }
        };
        let known = self.plugin.by_identity.get(&id).copied();
        if known.is_some() && known == occupant {
            return;
        }
        if let Some(occupant) = occupant {
            self.detach(occupant);
        }
        match known {
            // Moved here: nothing of it is read again. A grant stays a
            // grant, and a directory that shows inside itself (through a
            // mount) stays where it was found first.
            Some(known) => {
                let movable = self
                    .plugin
                    .nodes
                    .get(&known)
                    .is_some_and(|node| !matches!(node.place, Place::Grant(_)));
                if movable && !self.is_at_or_above(known, parent) {
                    self.place(known, Place::Entry(parent, name.to_owned()));
                }
            }
            None => {
                self.watch_dir(Place::Entry(parent, name.to_owned()), child, id, below);
            }
        }
    }

    /// Watches `grant`, the one at `index`: a directory (its entries that
    /// may be directories go to `below`), or a file and its folder.
    fn watch_grant(
        &mut self,
        index: usize,
        grant: &WatchedGrant,
        below: &mut VecDeque<Entry>,
    ) -> io::Result<()> {
        let Some(name) = &grant.file else {
            let dir = rustix::fs::openat2(
                grant.dir.as_fd(),
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
            )?;
            let id = identity(&dir)?;
            // One directory granted twice is watched once.
            if !self.plugin.by_identity.contains_key(&id) {
                self.watch_dir(Place::Grant(index), dir, id, below);
            }
            return Ok(());
        };
        if self.plugin.watches() + 2 > MAX_WATCHES_PER_PLUGIN {
            self.note_bounded(Some(index));
            return Ok(());
        }
        let reported = self.reported;
        let folder = {
            // Named before the reader can take the watch's first event, so
            // that no change of the file goes unnamed.
            let mut pending = lock(&reported.pending);
            let folder = self.add(grant.dir.as_fd(), CHANGES | WatchFlags::ONLYDIR)?;
            pending.named.insert(folder);
            folder
        };
        let file = self.watch_file(grant.dir.as_fd(), name);
        self.plugin.files.push(FileWatch {
            grant: index,
            name: name.clone(),
            folder: Some(folder),
            file,
        });
        if !on_local_filesystem(grant.dir.as_fd()) {
            self.note_remote(Some(index));
        }
        Ok(())
    }

    /// Watches `dir`, a directory not watched yet, found at `place`, within
    /// the plugin's bound; its entries that may be directories go to
    /// `below`. Its entries are the only ones read.
    fn watch_dir(
        &mut self,
        place: Place,
        dir: OwnedFd,
        identity: Identity,
        below: &mut VecDeque<Entry>,
    ) -> Option<Watch> {
        let grant = self.grant_at(&place);
        if self.plugin.watches() >= MAX_WATCHES_PER_PLUGIN {
            self.note_bounded(grant);
            return None;
        }
        let watch = match self.add(dir.as_fd(), CHANGES | WatchFlags::ONLYDIR) {
            Ok(watch) => watch,
            Err(error) => {
                self.note_cannot(grant, &error);
                return None;
            }
        };
        if self.plugin.nodes.contains_key(&watch) {
            // Watched already, under another identity: nothing to add.
            return None;
        }
        if let Place::Entry(parent, name) = &place
            && let Some(node) = self.plugin.nodes.get_mut(parent)
        {
            node.children.insert(name.clone(), watch);
        }
        self.plugin.nodes.insert(
            watch,
            Node {
                place,
                identity,
                children: BTreeMap::new(),
            },
        );
        self.plugin.by_identity.insert(identity, watch);
        if !on_local_filesystem(&dir) {
            self.note_remote(grant);
        }
        let Ok(entries) = rustix::fs::Dir::new(dir) else {
            return Some(watch);
        };
        for entry in entries.map_while(Result::ok) {
            let name = entry.file_name().to_bytes();
            let maybe_directory =
                matches!(entry.file_type(), FileType::Directory | FileType::Unknown);
            if !maybe_directory || name == b"." || name == b".." {
                continue;
            }
            if self.plugin.watches() + below.len() >= MAX_WATCHES_PER_PLUGIN {
                self.note_bounded(grant);
                break;
            }
            below.push_back((watch, OsStr::from_bytes(name).to_owned()));
        }
        Some(watch)
    }

    /// Watches the regular file `name` in `folder`, if that is what it is.
    fn watch_file(&mut self, folder: BorrowedFd<'_>, name: &OsStr) -> Option<Watch> {
        let file = rustix::fs::openat2(
            folder,
            name,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )
        .ok()?;
        let stat = rustix::fs::fstat(&file).ok()?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return None;
        }
        self.add(file.as_fd(), CHANGES).ok()
    }

    /// Watches the granted file at `index` in [`Plugin::files`] as it is now.
    fn refresh_file(&mut self, index: usize) {
        let Some(watched) = self.plugin.files.get(index) else {
            return;
        };
        let (grant, name, before) = (watched.grant, watched.name.clone(), watched.file);
        let Some(folder) = self
            .plugin
            .granted
            .get(grant)
            .map(|grant| grant.dir.clone())
        else {
            return;
        };
        let now = self.watch_file(folder.as_fd(), &name);
        self.plugin.files[index].file = now;
        if let Some(before) = before
            && Some(before) != now
            && !self.plugin.holds(before)
        {
            self.release(before);
        }
    }

    /// Forgets `watch`, which the kernel removed.
    fn lose(&mut self, watch: Watch) {
        if let Some(place) = self.plugin.nodes.get(&watch).map(|node| node.place.clone()) {
            if let Place::Grant(grant) = place {
                self.note_gone(Some(grant));
            }
            self.drop_tree(watch);
        }
        let mut folders_gone = Vec::new();
        for file in &mut self.plugin.files {
            if file.file == Some(watch) {
                file.file = None;
            }
            if file.folder == Some(watch) {
                file.folder = None;
                folders_gone.push(file.grant);
            }
        }
        for grant in folders_gone {
            self.note_gone(Some(grant));
        }
    }

    /// Ends the change: drops what was detached and not found elsewhere,
    /// and logs what is new to say. A whole walk says all there is to say;
    /// a settle only adds to it.
    fn finish(mut self, whole: bool) {
        for watch in std::mem::take(&mut self.detached) {
            self.drop_tree(watch);
        }
        let Walker {
            scheme,
            plugin,
            said,
            ..
        } = self;
        let said: BTreeSet<String> = if whole {
            said
        } else {
            plugin.said.union(&said).cloned().collect()
        };
        for news in said.difference(&plugin.said) {
            tracing::warn!(plugin = scheme, "{news}");
        }
        plugin.said = said;
    }

    /// Opens the directory `watch` watches by its place in the tree, if it
    /// is still that directory.
    fn open_node(&self, watch: Watch) -> Option<OwnedFd> {
        let (grant, path) = self.path_of(watch)?;
        let root = &self.plugin.granted.get(grant)?.dir;
        let path = if path.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            path
        };
        let dir = rustix::fs::openat2(
            root.as_fd(),
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )
        .ok()?;
        let expected = self.plugin.nodes.get(&watch)?.identity;
        (identity(&dir).ok()? == expected).then_some(dir)
    }

    /// The grant `watch` lies in and its path there, if it is in the tree.
    fn path_of(&self, watch: Watch) -> Option<(usize, PathBuf)> {
        let mut names: Vec<&OsStr> = Vec::new();
        let mut at = watch;
        for _ in 0..=self.plugin.nodes.len() {
            match &self.plugin.nodes.get(&at)?.place {
                Place::Grant(grant) => {
                    let path: PathBuf = names.iter().rev().copied().collect();
                    return Some((*grant, path));
                }
                Place::Entry(parent, name) => {
                    names.push(name);
                    at = *parent;
                }
                Place::Detached => return None,
            }
        }
        None
    }

    fn grant_of(&self, watch: Watch) -> Option<usize> {
        self.path_of(watch).map(|(grant, _)| grant)
    }

    fn grant_at(&self, place: &Place) -> Option<usize> {
        match place {
            Place::Grant(grant) => Some(*grant),
            Place::Entry(parent, _) => self.grant_of(*parent),
            Place::Detached => None,
        }
    }

    /// Whether `watch` is `below` or one of the directories above it.
    fn is_at_or_above(&self, watch: Watch, below: Watch) -> bool {
        let mut at = below;
        for _ in 0..=self.plugin.nodes.len() {
            if at == watch {
                return true;
            }
            match self.plugin.nodes.get(&at).map(|node| &node.place) {
                Some(Place::Entry(parent, _)) => at = *parent,
                _ => return false,
            }
        }
        // A loop, which the tree never holds: refuse.
        true
    }

    /// Puts the directory `watch` watches at `place`.
    fn place(&mut self, watch: Watch, place: Place) {
        self.unlink(watch);
        if let Place::Entry(parent, name) = &place
            && let Some(node) = self.plugin.nodes.get_mut(parent)
        {
            node.children.insert(name.clone(), watch);
        }
        if matches!(place, Place::Detached) {
            self.detached.insert(watch);
        } else {
            self.detached.remove(&watch);
        }
        if let Some(node) = self.plugin.nodes.get_mut(&watch) {
            node.place = place;
        }
    }

    fn detach(&mut self, watch: Watch) {
        self.place(watch, Place::Detached);
    }

    /// Takes `watch` out of its parent's children.
    fn unlink(&mut self, watch: Watch) {
        let Some(Place::Entry(parent, name)) =
            self.plugin.nodes.get(&watch).map(|node| node.place.clone())
        else {
            return;
        };
        if let Some(node) = self.plugin.nodes.get_mut(&parent)
            && node.children.get(&name) == Some(&watch)
        {
            node.children.remove(&name);
        }
    }

    /// Stops watching the directory `watch` watches and every directory
    /// below it.
    fn drop_tree(&mut self, watch: Watch) {
        self.unlink(watch);
        let mut stack = vec![watch];
        while let Some(watch) = stack.pop() {
            let Some(node) = self.plugin.nodes.remove(&watch) else {
                continue;
            };
            if self.plugin.by_identity.get(&node.identity) == Some(&watch) {
                self.plugin.by_identity.remove(&node.identity);
            }
            self.detached.remove(&watch);
            stack.extend(node.children.into_values());
            if !self.plugin.holds(watch) {
                self.release(watch);
            }
        }
    }

    /// Watches what `opened` holds, for this plugin.
    fn add(&mut self, opened: BorrowedFd<'_>, flags: WatchFlags) -> io::Result<Watch> {
        let watch = add_watch(self.inotify, opened, flags)?;
        self.holders
            .entry(watch)
            .or_default()
            .insert(self.scheme.to_owned());
        Ok(watch)
    }

    fn release(&mut self, watch: Watch) {
        release(self.inotify, self.holders, self.scheme, watch);
    }

    fn label(&self, grant: Option<usize>) -> String {
        grant
            .and_then(|grant| self.plugin.granted.get(grant))
            .or_else(|| self.plugin.granted.first())
            .map(|grant| grant.label.display().to_string())
            .unwrap_or_default()
    }

    fn note_bounded(&mut self, grant: Option<usize>) {
        let label = self.label(grant);
        self.said.insert(format!(
            "watches stop at {MAX_WATCHES_PER_PLUGIN} directories for one plugin, \
             reached in granted path {label}: changes beyond them are found by polling \
             the plugin's change report (every [changes] interval_ms while someone \
             is subscribed)"
        ));
    }

    fn note_remote(&mut self, grant: Option<usize>) {
        let label = self.label(grant);
        self.said.insert(format!(
            "granted path {label} reaches a network or FUSE filesystem: changes made \
             there from elsewhere are found by polling the plugin's change report only"
        ));
    }

    fn note_cannot(&mut self, grant: Option<usize>, error: &io::Error) {
        let label = self.label(grant);
        self.said.insert(format!(
            "cannot watch granted path {label}: {error}; its changes are found by polling only"
        ));
    }

    fn note_gone(&mut self, grant: Option<usize>) {
        let label = self.label(grant);
        self.said.insert(format!(
            "granted path {label} is watched no longer (it was removed, or its filesystem \
             unmounted): its changes are found by polling only"
        ));
    }
}

/// Whether two lists of grants hold the same directories, in order.
fn same_grants(before: &[WatchedGrant], now: &[WatchedGrant]) -> bool {
    before.len() == now.len()
        && before.iter().zip(now).all(|(before, now)| {
            before.label == now.label
                && before.file == now.file
                && (Arc::ptr_eq(&before.dir, &now.dir)
                    || matches!(
                        (identity(before.dir.as_fd()), identity(now.dir.as_fd())),
                        (Ok(before), Ok(now)) if before == now
                    ))
        })
}

fn identity(opened: impl AsFd) -> rustix::io::Result<Identity> {
    let stat = rustix::fs::fstat(opened)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// Whether an entry could not be opened because no directory resmux may
/// read is there: nothing to watch, nothing to say.
fn vanished(error: Errno) -> bool {
    matches!(
        error,
        Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV | Errno::ACCESS | Errno::PERM
    )
}

/// Watches what `opened` holds: its `/proc/self/fd` name leads to that very
/// directory or file, whatever its path has become.
fn add_watch(
    inotify: BorrowedFd<'_>,
    opened: BorrowedFd<'_>,
    flags: WatchFlags,
) -> io::Result<Watch> {
    let name = format!("/proc/self/fd/{}", opened.as_raw_fd());
    inotify::add_watch(inotify, name.as_str(), flags).map_err(|error| {
        if error == Errno::NOSPC {
            io::Error::other(
                "the user's inotify watch limit (fs.inotify.max_user_watches) is reached",
            )
        } else {
            error.into()
        }
    })
}

/// Lets go of `watch` for `scheme`, and removes it once nobody holds it.
fn release(inotify: BorrowedFd<'_>, holders: &mut Holders, scheme: &str, watch: Watch) {
    let Some(schemes) = holders.get_mut(&watch) else {
        return;
    };
    schemes.remove(scheme);
    if schemes.is_empty() {
        holders.remove(&watch);
        // The kernel may have removed it already, with its directory.
        let _ = inotify::remove_watch(inotify, watch);
    }
}

/// Reads the inotify instance until the process ends, gathering what it
/// reports for [`GrantWatch::settle`].
fn read_events(instance: &OwnedFd, reported: &Reported) {
    let mut buffer = [MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut events = inotify::Reader::new(instance, &mut buffer);
    loop {
        let mut fresh = false;
        loop {
            match events.next() {
                Ok(event) => {
                    let name = event
                        .file_name()
                        .map(|name| OsStr::from_bytes(name.to_bytes()));
                    lock(&reported.pending).note(event.wd(), event.events(), name);
                    fresh = true;
                }
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
        if fresh {
            reported.arrived.notify_one();
        }
    }
}

impl Pending {
    /// Notes one event: what `watch` reported (`flags`), naming `name` in
    /// it if it is a directory.
    fn note(&mut self, watch: Watch, flags: ReadFlags, name: Option<&OsStr>) {
        let batch = &mut self.batch;
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            batch.overflowed = true;
            return;
        }
        batch.changed.insert(watch);
        if flags.contains(ReadFlags::IGNORED) {
            batch.gone.insert(watch);
        }
        let Some(name) = name else {
            return;
        };
        if self.named.contains(&watch) {
            // Every name, a directory's too: a granted file's folder may be
            // busy with what is no grant's, which never overflows the batch.
            let names = batch
                .names
                .entry(watch)
                .or_insert_with(|| Names::Listed(BTreeSet::new()));
            let full = matches!(names, Names::Listed(kept) if kept.len() >= MOST_NOTED);
            if full {
                *names = Names::Any;
            } else if let Names::Listed(kept) = names {
                kept.insert(name.to_owned());
            }
        } else if flags.contains(ReadFlags::ISDIR) && flags.intersects(ENTRY_MOVED) {
            let entry = (watch, name.to_owned());
            if batch.entries.len() < MOST_NOTED {
                batch.entries.insert(entry);
            } else if !batch.entries.contains(&entry) {
                batch.overflowed = true;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
