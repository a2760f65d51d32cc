//! The plugins refused for a reason that passes (the engine's instance pool
//! has no room for their share yet), each with why and when it is tried
//! again, for `/readyz` to tell while the rest of the folder serves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

static RETRYING: Mutex<BTreeMap<PathBuf, String>> = Mutex::new(BTreeMap::new());

/// The plugin declared by `file` is to be tried again: `why` says why it
/// was refused and when.
pub fn retrying(file: &Path, why: String) {
    lock().insert(file.to_owned(), why);
}

/// The plugin declared by `file` loaded, or its files are gone.
pub fn settled(file: &Path) {
    lock().remove(file);
}

/// Each plugin being retried, a line each: its file and why.
pub fn lines() -> Vec<String> {
    lock()
        .iter()
        .map(|(file, why)| format!("{}: {why}", file.display()))
        .collect()
}

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, String>> {
    RETRYING.lock().unwrap_or_else(PoisonError::into_inner)
}
