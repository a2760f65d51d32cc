//! What one client may reach. A client without access control reaches
//! everything; any other client is behind a [`Guard`], which decides each
//! action on each URI. Outside what the guard permits a resource does not
//! exist for the client: it is left out of listings, and reads, completions
//! and subscriptions find nothing there. The namespace knows how to ask, not
//! how the guard decides (that is the access layer's policy engine).

use std::sync::Arc;

use super::uri::Canonical;

/// What a client does with a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// See it in a listing (resources or templates).
    List,
    /// Read it, directly or through the tool bridge.
    Read,
    /// Hear of its changes.
    Subscribe,
    /// Complete an argument of its template.
    Complete,
}

impl Action {
    pub const ALL: [Self; 4] = [Self::List, Self::Read, Self::Subscribe, Self::Complete];

    pub fn name(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Read => "read",
            Self::Subscribe => "subscribe",
            Self::Complete => "complete",
        }
    }
}

/// A guard's answer for one action on one URI, and what made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub permitted: bool,
    /// The rules that decided: those that permitted it, or those that
    /// forbade it; empty when nothing permitted it.
    pub by: Vec<String>,
}

/// What a guard says of an action on a whole scheme, before any path is
/// known: every path is permitted, none is, or each must be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outlook {
    Everything,
    Nothing,
    EntryByEntry,
}

/// Decides what one client may do.
pub trait Guard: Send + Sync + std::fmt::Debug {
    /// The decision on `action` for `resource` (a template, for templates
    /// and completions), in the canonical form policies see.
    fn decide(&self, action: Action, resource: &Canonical) -> Verdict;

    /// What every decision on `action` within `scheme` will be, where that is
    /// known without a path. Must never say `Everything` or `Nothing` where
    /// [`Guard::decide`] could say otherwise for some path.
    fn outlook(&self, action: Action, scheme: &str) -> Outlook;

    /// A name for everything the guard's decisions depend on: two guards
    /// with one key decide alike, so what one is shown may be kept for the
    /// other.
    fn key(&self) -> Arc<str>;
}

/// Which resources a request may reach.
#[derive(Debug, Clone, Default)]
pub enum Scope {
    /// Everything: stdio, and HTTP without access control.
    #[default]
    All,
    /// What this guard permits.
    Guarded(Arc<dyn Guard>),
}

impl Scope {
    /// The decision on `action` for the resource `canonical` gives; it is
    /// made only when a guard decides (the canonical form costs a decoding
    /// and an allocation, which an unguarded read need not pay).
    pub fn decide(&self, action: Action, canonical: impl FnOnce() -> Canonical) -> Verdict {
        match self {
            Self::All => Verdict {
                permitted: true,
                by: Vec::new(),
            },
            Self::Guarded(guard) => guard.decide(action, &canonical()),
        }
    }

    pub fn outlook(&self, action: Action, scheme: &str) -> Outlook {
        match self {
            Self::All => Outlook::Everything,
            Self::Guarded(guard) => guard.outlook(action, scheme),
        }
    }

    /// Whether anything of `scheme` may show in this scope's listings: the
    /// client hears of the scheme's listing changes only then.
    pub fn may_list_any_of(&self, scheme: &str) -> bool {
        self.outlook(Action::List, scheme) != Outlook::Nothing
    }

    pub fn is_guarded(&self) -> bool {
        matches!(self, Self::Guarded(_))
    }
}
