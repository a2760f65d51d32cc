//! The operator's board: what each plugin of the folder is now (loading,
//! serving, failed to load, quarantined), where it came from and what it is
//! granted, and the recent events of the folder and the audit log. The
//! catalog, the runtime and the audit log write to it as things happen; the
//! console reads it. It holds one card per plugin file the folder declares,
//! and the last [`EVENTS_KEPT`] plugin events and as many access decisions
//! in rings of their own, so a flood of reads cannot push out a quarantine.
//! Every text it keeps is cut to [`TEXT_KEPT`] bytes. It does nothing on its
//! own; what only the console shows (what a plugin says it is, access
//! decisions) is gathered only once the console is on ([`Board::enable`]).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

/// Plugin events kept, and access decisions kept; the oldest go first.
pub const EVENTS_KEPT: usize = 200;
/// The most of one text from a plugin or an error a card or an event keeps.
pub const TEXT_KEPT: usize = 2048;

/// The board of this process.
pub fn board() -> &'static Board {
    static BOARD: LazyLock<Board> = LazyLock::new(Board::default);
    &BOARD
}

/// Every plugin's card, and the recent events.
#[derive(Default)]
pub struct Board {
    inner: Mutex<Inner>,
    /// Whether the console is on: only then is a plugin asked what it is
    /// as it loads, and an access decision posted.
    enabled: AtomicBool,
}

#[derive(Default)]
struct Inner {
    /// By the file that declares the plugin.
    cards: BTreeMap<PathBuf, Card>,
    /// Plugin events, and access decisions.
    events: VecDeque<Event>,
    decisions: VecDeque<Event>,
    next_event: u64,
}

/// Where a plugin comes from, as the folder declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Its `.wasm`, or its `.toml` when it has no `.wasm` of its own.
    pub file: PathBuf,
    pub scheme: String,
    pub manifest: Option<PathBuf>,
    /// Its component: a file's path, or `oci` and a registry reference.
    pub component: String,
}

/// What a loaded plugin is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The runtime's id of the plugin (`WasmPlugin::id`), which tells it
    /// from the version it replaced.
    pub plugin: u64,
    /// The SHA-256 of its component's bytes.
    pub sha256: String,
    /// For a component pulled from a registry: the digest of its OCI
    /// manifest, who signed it, and whether the signature has a checked
    /// transparency-log entry.
    pub pulled: Option<Pulled>,
    /// What the plugin says of itself: name, version, description; asked
    /// once it serves ([`Board::described`]).
    pub about: Option<(String, String, String)>,
    /// Its grants and limits, by section, as `resmux inspect` prints them
    /// (never a secret's value).
    pub grants: Vec<(String, Vec<String>)>,
    pub code: Code,
}

/// Which compiled code a plugin runs, and how long each tier took to
/// compile (or to load from the compile cache).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Code {
    /// `baseline`, `optimizing` or `optimized`.
    pub tier: &'static str,
    /// By tier compiled (`baseline`, `optimized`), in the order compiled.
    pub compiled: Vec<(&'static str, Duration)>,
}

impl Code {
    /// Notes that the plugin runs on `tier`'s code now, and that the tier
    /// named in `compiled` took its time.
    pub fn moved(&mut self, tier: &'static str, compiled: Option<(&'static str, Duration)>) {
        self.tier = tier;
        if let Some((code, elapsed)) = compiled {
            self.compiled.retain(|(each, _)| *each != code);
            self.compiled.push((code, elapsed));
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    pub manifest_digest: String,
    pub signed_by: String,
    pub logged: bool,
}

/// What a plugin is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Expected, its component being compiled or pulled.
    Loading,
    Serving,
    /// It did not load, for this reason (which names its file).
    Failed(String),
}

/// One quarantine: of the whole plugin, or of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    pub path: Option<String>,
    pub until: SystemTime,
    /// The fault that started it.
    pub reason: String,
}

/// One plugin, as the board shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    pub origin: Origin,
    pub state: State,
    /// Since when it is in its state.
    pub since: SystemTime,
    /// What it is, once it loaded.
    pub loaded: Option<Loaded>,
    /// Why the last change of its files was not put in place, while the
    /// version before keeps serving.
    pub not_replaced: Option<String>,
    /// Its latest quarantine of the whole plugin, and of one path.
    pub quarantine: Option<Quarantine>,
    pub path_quarantine: Option<Quarantine>,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Replaced,
    Removed,
    /// A plugin that did not load, or a change of its files that was not
    /// put in place: the folder offered it and resmux refused it. Its card
    /// says `failed`, or keeps serving the version before.
    Refused,
    Quarantined,
    /// A call of the plugin is stuck past its time limit.
    Stuck,
    /// The plugin moved to its optimized code.
    Optimized,
    /// An access decision of the audit log: allowed.
    Allowed,
    /// An access decision of the audit log: denied.
    Denied,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Replaced => "replaced",
            Self::Removed => "removed",
            Self::Refused => "refused",
            Self::Quarantined => "quarantined",
            Self::Stuck => "stuck",
            Self::Optimized => "optimized",
            Self::Allowed => "allowed",
            Self::Denied => "denied",
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Rises by one each event.
    pub id: u64,
    pub at: SystemTime,
    pub kind: Kind,
    /// The plugin's scheme, when it is about one.
    pub scheme: Option<String>,
    pub text: String,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The console is on: from now on, plugins are asked what they are as
    /// they load, and access decisions are posted.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Whether the console is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The plugin `origin` is expected and loading.
    pub fn loading(&self, origin: Origin) {
        let mut inner = self.lock();
        let card = inner.card(origin);
        card.state = State::Loading;
        card.since = SystemTime::now();
    }

    /// The plugin `origin` serves, as `loaded`, in place of whatever
    /// served before.
    pub fn serving(&self, origin: Origin, loaded: Loaded) {
        let mut inner = self.lock();
        // A scheme is served by one plugin: one that moved to another file
        // leaves its old card.
        inner.cards.retain(|file, card| {
            *file == origin.file || card.origin.scheme != origin.scheme || card.loaded.is_none()
        });
        let scheme = origin.scheme.clone();
        let card = inner.card(origin);
        let kind = match card.loaded.is_some() {
            true => Kind::Replaced,
            false => Kind::Added,
        };
        let text = format!("{} serves {}://", card.origin.component, scheme);
        *card = Card {
            state: State::Serving,
            since: SystemTime::now(),
            loaded: Some(loaded),
            not_replaced: None,
            quarantine: None,
            path_quarantine: None,
            origin: card.origin.clone(),
        };
        inner.record(kind, Some(scheme), text);
    }

    /// The plugin declared by `file` did not load, for `reason`; its
    /// scheme, when it is not known, is taken to be the file's stem, as a
    /// manifest without `scheme` would have it.
    pub fn failed(&self, file: &Path, scheme: Option<&str>, reason: &str) {
        let mut inner = self.lock();
        let scheme = scheme
            .map(str::to_owned)
            .or_else(|| inner.cards.get(file).map(|card| card.origin.scheme.clone()))
            .unwrap_or_else(|| {
                file.file_stem()
                    .map_or_else(String::new, |stem| stem.to_string_lossy().to_lowercase())
            });
        let origin = match inner.cards.get(file) {
            Some(card) => Origin {
                scheme: scheme.clone(),
                ..card.origin.clone()
            },
            None => Origin {
                file: file.to_owned(),
                scheme: scheme.clone(),
                manifest: None,
                component: file.display().to_string(),
            },
        };
        let reason = kept(reason);
        let card = inner.card(origin);
        if card.state == State::Failed(reason.clone()) {
            // Refused again for the same reason: nothing new to tell.
            return;
        }
        // Nothing it loaded serves any more.
        *card = Card {
            state: State::Failed(reason.clone()),
            ..Card::blank(card.origin.clone())
        };
        inner.record(Kind::Refused, Some(scheme), reason);
    }

    /// The plugin whose runtime id is `plugin` says it is `about`: its name,
    /// version and description.
    pub fn described(&self, plugin: u64, about: (String, String, String)) {
        let (name, version, description) = about;
        let mut inner = self.lock();
        if let Some(loaded) = inner
            .cards
            .values_mut()
            .filter_map(|card| card.loaded.as_mut())
            .find(|loaded| loaded.plugin == plugin)
        {
            loaded.about = Some((kept(name), kept(version), kept(description)));
        }
    }

    /// The plugin whose runtime id is `plugin` runs on `tier`'s code now;
    /// `compiled` says which tier took how long, if it is new code. A move
    /// to the optimized tier is an event. False if no card shows that
    /// plugin (one replaced or removed).
    pub fn code(
        &self,
        plugin: u64,
        tier: &'static str,
        compiled: Option<(&'static str, Duration)>,
    ) -> bool {
        let mut inner = self.lock();
        let Some(card) = inner.cards.values_mut().find(|card| {
            card.loaded
                .as_ref()
                .is_some_and(|loaded| loaded.plugin == plugin)
        }) else {
            return false;
        };
        let scheme = card.origin.scheme.clone();
        let loaded = card.loaded.as_mut().expect("found by its loaded plugin");
        let moved_up = loaded.code.tier != tier && tier == "optimized";
        loaded.code.moved(tier, compiled);
        if moved_up && let Some((_, elapsed)) = compiled {
            let text = format!(
                "moved to optimized code, compiled in {} ms",
                elapsed.as_millis()
            );
            inner.record(Kind::Optimized, Some(scheme), text);
        }
        true
    }

    /// A change of the files of the plugin declared by `file`, under
    /// `scheme`, was not put in place, for `reason`; the version before
    /// keeps serving, and its card (that of another file, when the plugin
    /// moved to `file`) says why.
    pub fn not_replaced(&self, file: &Path, scheme: &str, reason: &str) {
        let mut inner = self.lock();
        let card = match inner.cards.contains_key(file) {
            true => inner.cards.get_mut(file),
            false => inner
                .cards
                .values_mut()
                .find(|card| card.origin.scheme == scheme && card.loaded.is_some()),
        };
        let reason = kept(reason);
        if let Some(card) = card {
            if card.not_replaced.as_ref() == Some(&reason) {
                // Refused again for the same reason: nothing new to tell.
                return;
            }
            card.not_replaced = Some(reason.clone());
        }
        inner.record(Kind::Refused, Some(scheme.to_owned()), reason);
    }

    /// The plugin declared by `file` serves the very files it was loaded
    /// from again (a refused change was undone): no change waits refused.
    pub fn unchanged(&self, file: &Path) {
        if let Some(card) = self.lock().cards.get_mut(file) {
            card.not_replaced = None;
        }
    }

    /// Only the plugins declared by `files` are left in the folder: every
    /// other card goes.
    pub fn keep_only(&self, files: &[&Path]) {
        let mut inner = self.lock();
        let gone: Vec<PathBuf> = inner
            .cards
            .keys()
            .filter(|file| !files.contains(&file.as_path()))
            .cloned()
            .collect();
        for file in gone {
            if let Some(card) = inner.cards.remove(&file) {
                let text = format!("{} is gone from the folder", file.display());
                inner.record(Kind::Removed, Some(card.origin.scheme), text);
            }
        }
    }

    /// The plugin whose runtime id is `plugin`, serving `scheme`, (or its
    /// `path`) is quarantined for `period` after the fault `reason`. A
    /// version replaced while its calls finish shows on no card.
    pub fn quarantined(
        &self,
        plugin: u64,
        scheme: &str,
        path: Option<&str>,
        period: Duration,
        reason: &str,
    ) {
        let mut inner = self.lock();
        let quarantine = Quarantine {
            path: path.map(kept),
            until: SystemTime::now() + period,
            reason: kept(reason),
        };
        let what = match path {
            Some(path) => format!("path {} of {scheme}://", kept(path)),
            None => format!("{scheme}://"),
        };
        let text = format!(
            "{what} quarantined for {} ms: {}",
            period.as_millis(),
            quarantine.reason
        );
        if let Some(card) = inner.cards.values_mut().find(|card| {
            card.loaded
                .as_ref()
                .is_some_and(|loaded| loaded.plugin == plugin)
        }) {
            match path {
                Some(_) => card.path_quarantine = Some(quarantine),
                None => card.quarantine = Some(quarantine),
            }
        }
        inner.record(Kind::Quarantined, Some(scheme.to_owned()), text);
    }

    /// A call of the plugin serving `scheme` is stuck past its time limit,
    /// as `text` says.
    pub fn stuck(&self, scheme: &str, text: &str) {
        self.lock()
            .record(Kind::Stuck, Some(scheme.to_owned()), kept(text));
    }

    /// An access decision the audit log recorded, once the console is on.
    pub fn audited(&self, allowed: bool, scheme: Option<&str>, text: impl FnOnce() -> String) {
        if !self.is_enabled() {
            return;
        }
        let kind = match allowed {
            true => Kind::Allowed,
            false => Kind::Denied,
        };
        self.lock()
            .record(kind, scheme.map(str::to_owned), kept(text()));
    }

    /// Every card, by file.
    pub fn cards(&self) -> Vec<Card> {
        self.lock().cards.values().cloned().collect()
    }

    /// The events kept, plugin events and access decisions, oldest first.
    pub fn events(&self) -> Vec<Event> {
        let inner = self.lock();
        let mut events: Vec<Event> = inner
            .events
            .iter()
            .chain(&inner.decisions)
            .cloned()
            .collect();
        events.sort_unstable_by_key(|event| event.id);
        events
    }
}

impl Card {
    /// The card of a plugin from `origin`, of which nothing is known yet.
    fn blank(origin: Origin) -> Self {
        Self {
            origin,
            state: State::Loading,
            since: SystemTime::now(),
            loaded: None,
            not_replaced: None,
            quarantine: None,
            path_quarantine: None,
        }
    }

    /// Its quarantine of the whole plugin, if it is in force now.
    pub fn quarantined_now(&self) -> Option<&Quarantine> {
        self.quarantine
            .as_ref()
            .filter(|quarantine| quarantine.until > SystemTime::now())
    }
}

impl Inner {
    /// The card of `origin`'s file, which now has `origin`: a blank one if
    /// it has none yet, or if the file loaded a plugin under another
    /// scheme, which is gone then.
    fn card(&mut self, origin: Origin) -> &mut Card {
        let other_scheme = self
            .cards
            .get(&origin.file)
            .filter(|card| card.origin.scheme != origin.scheme && card.loaded.is_some())
            .map(|card| card.origin.scheme.clone());
        if let Some(scheme) = other_scheme {
            let text = format!(
                "{} declares {}:// now, in place of {scheme}://",
                origin.file.display(),
                origin.scheme
            );
            self.cards.remove(&origin.file);
            self.record(Kind::Removed, Some(scheme), text);
        }
        let card = self
            .cards
            .entry(origin.file.clone())
            .or_insert_with(|| Card::blank(origin.clone()));
        card.origin = origin;
        card
    }

    fn record(&mut self, kind: Kind, scheme: Option<String>, text: String) {
        let ring = match kind {
            Kind::Allowed | Kind::Denied => &mut self.decisions,
            _ => &mut self.events,
        };
        if ring.len() == EVENTS_KEPT {
            ring.pop_front();
        }
        self.next_event += 1;
        ring.push_back(Event {
            id: self.next_event,
            at: SystemTime::now(),
            kind,
            scheme,
            text,
        });
    }
}

/// At most [`TEXT_KEPT`] bytes of `text`, cut at a character's boundary.
fn kept(text: impl Into<String>) -> String {
    let mut text = text.into();
    if text.len() > TEXT_KEPT {
        text.truncate(text.floor_char_boundary(TEXT_KEPT));
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(file: &str, scheme: &str) -> Origin {
        Origin {
            file: PathBuf::from(file),
            scheme: scheme.into(),
            manifest: None,
            component: file.into(),
        }
    }

    #[test]
    fn a_card_follows_its_plugin_from_loading_to_replaced_to_gone() {
        let board = Board::default();
        board.loading(origin("/p/a.wasm", "a"));
        assert_eq!(board.cards()[0].state, State::Loading);
        let version = |plugin| Loaded {
            plugin,
            ..Loaded::default()
        };
        board.serving(origin("/p/a.wasm", "a"), version(1));
        board.not_replaced(Path::new("/p/a.wasm"), "a", "half copied");
        assert_eq!(
            board.cards()[0].not_replaced.as_deref(),
            Some("half copied")
        );
        board.serving(origin("/p/a.wasm", "a"), version(2));
        assert_eq!(board.cards()[0].not_replaced, None);
        // A fault of the version replaced, finishing a call, leaves the
        // card of the one serving as it is.
        board.quarantined(1, "a", None, Duration::from_secs(60), "trap");
        assert!(board.cards()[0].quarantine.is_none());
        board.quarantined(2, "a", None, Duration::from_secs(60), "trap");
        assert!(board.cards()[0].quarantined_now().is_some());
        board.keep_only(&[]);
        assert!(board.cards().is_empty());
        let kinds: Vec<_> = board.events().iter().map(|event| event.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Added,
                Kind::Refused,
                Kind::Replaced,
                Kind::Quarantined,
                Kind::Quarantined,
                Kind::Removed
            ]
        );
    }

    #[test]
    fn a_plugin_that_moved_to_another_file_has_one_card() {
        let board = Board::default();
        board.serving(origin("/p/notes.toml", "notes"), Loaded::default());
        board.serving(origin("/p/notes-v2.toml", "notes"), Loaded::default());
        let files: Vec<PathBuf> = board
            .cards()
            .into_iter()
            .map(|card| card.origin.file)
            .collect();
        assert_eq!(files, [PathBuf::from("/p/notes-v2.toml")]);
    }

    #[test]
    fn a_plugin_that_moved_to_a_file_that_fails_keeps_its_card_with_the_reason() {
        let board = Board::default();
        board.serving(origin("/p/a.wasm", "a"), Loaded::default());
        board.not_replaced(Path::new("/p/b.toml"), "a", "no component");
        assert_eq!(board.cards()[0].origin.file, PathBuf::from("/p/a.wasm"));
        assert_eq!(
            board.cards()[0].not_replaced.as_deref(),
            Some("no component")
        );
    }

    #[test]
    fn a_refused_change_undone_leaves_no_reason_and_a_refusal_repeated_is_told_once() {
        let board = Board::default();
        board.serving(origin("/p/a.wasm", "a"), Loaded::default());
        for _ in 0..3 {
            board.not_replaced(Path::new("/p/a.wasm"), "a", "half copied");
        }
        board.unchanged(Path::new("/p/a.wasm"));
        assert_eq!(board.cards()[0].not_replaced, None);
        for _ in 0..3 {
            board.failed(Path::new("/p/b.wasm"), None, "not a component");
        }
        let kinds: Vec<_> = board.events().iter().map(|event| event.kind).collect();
        assert_eq!(kinds, [Kind::Added, Kind::Refused, Kind::Refused]);
        board.failed(Path::new("/p/b.wasm"), None, "truncated");
        assert_eq!(board.events().len(), 4);
    }

    #[test]
    fn a_file_that_declares_another_scheme_starts_a_card_afresh() {
        let board = Board::default();
        let loaded = Loaded {
            plugin: 3,
            sha256: "old".into(),
            ..Loaded::default()
        };
        board.serving(origin("/p/a.toml", "x"), loaded);
        board.quarantined(3, "x", None, Duration::from_secs(60), "trap");
        board.not_replaced(Path::new("/p/a.toml"), "x", "half copied");
        board.loading(origin("/p/a.toml", "y"));
        let card = &board.cards()[0];
        assert_eq!(card.origin.scheme, "y");
        assert_eq!(
            (&card.loaded, &card.quarantine, &card.not_replaced),
            (&None, &None, &None)
        );
        let removed = board.events().pop().unwrap();
        assert_eq!(
            (removed.kind, removed.scheme.as_deref()),
            (Kind::Removed, Some("x"))
        );
        // A plugin that fails to load keeps nothing of what it was.
        board.serving(
            origin("/p/a.toml", "y"),
            Loaded {
                plugin: 4,
                ..Loaded::default()
            },
        );
        board.quarantined(4, "y", None, Duration::from_secs(60), "trap");
        board.failed(Path::new("/p/a.toml"), Some("y"), "no component");
        let card = &board.cards()[0];
        assert_eq!(card.state, State::Failed("no component".into()));
        assert_eq!((&card.loaded, &card.quarantine), (&None, &None));
    }

    #[test]
    fn a_scheme_guessed_for_a_file_that_never_loaded_is_replaced_without_a_removal() {
        let board = Board::default();
        board.failed(Path::new("/p/foo.toml"), None, "not TOML");
        assert_eq!(board.cards()[0].origin.scheme, "foo");
        board.loading(origin("/p/foo.toml", "bar"));
        assert_eq!(board.cards()[0].origin.scheme, "bar");
        let kinds: Vec<_> = board.events().iter().map(|event| event.kind).collect();
        assert_eq!(kinds, [Kind::Refused]);
    }

    #[test]
    fn events_and_texts_stay_bounded_and_decisions_push_out_no_plugin_event() {
        let board = Board::default();
        board.enable();
        board.loading(origin("/p/a.wasm", "a"));
        board.serving(
            origin("/p/a.wasm", "a"),
            Loaded {
                plugin: 7,
                ..Loaded::default()
            },
        );
        board.described(7, ("liar".repeat(TEXT_KEPT), "1".into(), "d".into()));
        let long = "é".repeat(TEXT_KEPT);
        for _ in 0..EVENTS_KEPT + 10 {
            board.audited(true, Some("a"), || long.clone());
        }
        let events = board.events();
        assert_eq!(events.len(), EVENTS_KEPT + 1);
        assert_eq!(events[0].kind, Kind::Added);
        assert_eq!(events[1].id, 12);
        assert!(events[1].text.len() <= TEXT_KEPT + '…'.len_utf8());
        let (name, _, _) = board.cards()[0].loaded.clone().unwrap().about.unwrap();
        assert!(name.len() <= TEXT_KEPT + '…'.len_utf8());
    }

    #[test]
    fn decisions_are_posted_only_once_the_console_is_on() {
        let board = Board::default();
        board.audited(false, None, || unreachable!("no text is made"));
        assert!(board.events().is_empty());
    }
}
