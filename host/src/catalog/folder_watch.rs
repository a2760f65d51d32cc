//! Watches the plugin folder for changes, and the folder's own path: a
//! folder removed, moved away, put back, or replaced by another (a symlink
//! flipped to a new target) is noticed, and the watch moves to whatever the
//! path names now. The folder's parent is watched for entries of the
//! folder's name alone; while the path names no folder, the plugins loaded
//! keep serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

use crate::file_identity::{self, Identity};

pub struct FolderWatch {
    folder: PathBuf,
    watcher: RecommendedWatcher,
    /// The folder watched now (its device and inode); none while the path
    /// names none, or it cannot be watched.
    watched: Option<Identity>,
    _parent: RecommendedWatcher,
}

impl FolderWatch {
    /// Notifies `changed` of every change in `folder`, and of every change
    /// to the path `folder` itself, which must name a folder now.
    pub fn start(folder: &Path, changed: Arc<Notify>) -> Result<Self> {
        let parent = match folder.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
            _ => PathBuf::from("."),
        };
        let name = folder.file_name().map(ToOwned::to_owned);
        let mut parent_watch = watcher(changed.clone(), move |path| {
            path.file_name() == name.as_deref()
        })?;
        parent_watch
            .watch(&parent, RecursiveMode::NonRecursive)
            .with_context(|| {
                format!(
                    "cannot watch {}, the plugin folder's parent",
                    parent.display()
                )
            })?;
        let mut watch = Self {
            folder: folder.to_owned(),
            watcher: watcher(changed, |_| true)?,
            watched: None,
            _parent: parent_watch,
        };
        watch.rearm();
        watch
            .watched
            .with_context(|| format!("cannot watch plugin folder {}", folder.display()))?;
        Ok(watch)
    }

    /// Moves the watch to the folder the path names now, if that is
    /// another than the one watched; says so when the folder went or came.
    pub fn rearm(&mut self) {
        let named = std::fs::metadata(&self.folder)
            .ok()
            .filter(std::fs::Metadata::is_dir)
            .and_then(|_| file_identity::of_path(&self.folder).ok());
        if named == self.watched {
            return;
        }
        if self.watched.take().is_some() {
            // The old folder's watch, wherever it is now (or a gone one).
            let _ = self.watcher.unwatch(&self.folder);
        }
        let Some(named) = named else {
            tracing::warn!(
                "the plugin folder {} is gone; the plugins loaded keep serving until it is back",
                self.folder.display()
            );
            return;
        };
        match self
            .watcher
            .watch(&self.folder, RecursiveMode::NonRecursive)
        {
            Ok(()) => {
                tracing::info!("watching the plugin folder {}", self.folder.display());
                self.watched = Some(named);
            }
            Err(error) => tracing::error!(
                "cannot watch the plugin folder {}: {error}",
                self.folder.display()
            ),
        }
    }
}

/// A watcher notifying `changed` of every change to a path `concerns`, but
/// not of reads: opening, reading and closing a file change nothing (and
/// reading the folder again would otherwise make the next change).
fn watcher(
    changed: Arc<Notify>,
    concerns: impl Fn(&Path) -> bool + Send + 'static,
) -> Result<RecommendedWatcher> {
    notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event) if !is_change(&event) => {}
        Ok(event) if event.paths.iter().any(|path| concerns(path)) || event.paths.is_empty() => {
            changed.notify_one()
        }
        Ok(_) => {}
        Err(error) => {
            // Something may have been missed: read the folder again.
            tracing::warn!("watching the plugin folder: {error}");
            changed.notify_one();
        }
    })
    .context("cannot start watching files")
}

/// Whether `event` may mean the folder holds something else now: anything
/// but an access (an open, a read, a close), including an event the backend
/// cannot name, such as a lost queue.
pub fn is_change(event: &notify::Event) -> bool {
    !matches!(event.kind, EventKind::Access(_))
}

#[cfg(test)]
mod tests {
    use notify::Event;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind,
        RenameMode,
    };

    use super::*;

    #[test]
    fn reads_are_no_change_and_everything_else_is() {
        for read in [
            AccessKind::Open(AccessMode::Any),
            AccessKind::Read,
            AccessKind::Close(AccessMode::Read),
            AccessKind::Close(AccessMode::Write),
        ] {
            assert!(!is_change(&Event::new(EventKind::Access(read))), "{read:?}");
        }
        for change in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Other,
            EventKind::Any,
        ] {
            assert!(is_change(&Event::new(change)), "{change:?}");
        }
    }
}
