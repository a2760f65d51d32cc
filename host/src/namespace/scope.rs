//! The schemes one client may use. Outside its scope a scheme does not exist
//! for the client: it is left out of listings, and reads, completions and
//! subscriptions find nothing there.

use std::collections::BTreeSet;
use std::sync::Arc;

/// Which schemes a request may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every scheme: stdio, and HTTP without access control.
    #[default]
    All,
    /// Only these.
    Schemes(Arc<BTreeSet<String>>),
}

impl Scope {
    pub fn allows(&self, scheme: &str) -> bool {
        match self {
            Self::All => true,
            Self::Schemes(schemes) => schemes.contains(scheme),
        }
    }
}
