//! The listing's pages: the regular files below the root in URI path order,
//! a page at a time after a cursor. A cursor names its walk (a random number
//! drawn for the walk's first page) and the URI path of the last file sent,
//! so it stays good whatever comes and goes.
//!
//! A page reads only the directories on its way and looks only at the files
//! it returns. Each directory's sorted entries are kept for the rest of its
//! walk, while this instance is kept and the directory's stat says it is
//! unchanged; an instance without them reads the directory again, so nothing
//! relies on them. The page after a cursor in a directory of n entries is
//! then a binary search away: a walk reads a flat directory once, not once a
//! page. A new walk reads every directory afresh.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use wasi::filesystem::types::{Datetime, DescriptorStat, DescriptorType, ErrorCode};
use wasi::random::random::get_random_u64;

use crate::encoding::{decode, encode};
use crate::tree::{File, Root, wasi_error};
use resmux_sdk::Error;

/// Directories whose entries one instance keeps, the one used longest ago
/// going first.
const KEPT_DIRECTORIES: usize = 64;

/// Entries those directories hold at most in all; a directory with more is
/// read again for each page.
const KEPT_ENTRIES: usize = 1_000_000;

/// Where a walk stands.
pub struct Cursor {
    walk: u64,
    /// The URI path of the last file sent; none before the first page.
    after: Option<String>,
}

impl Cursor {
    /// The cursor this plugin handed out as `text`, or, for none, the start
    /// of a new walk.
    pub fn parse(text: Option<&str>) -> Result<Self, Error> {
        let Some(text) = text else {
            return Ok(Self {
                walk: get_random_u64(),
                after: None,
            });
        };
        // A URI path has no ':' (it is percent-encoded): a cursor without one
        // is a bare path, from a version of this plugin that named no walk.
        let Some((walk, after)) = text.split_once(':') else {
            return Ok(Self {
                walk: get_random_u64(),
                after: Some(text.to_owned()),
            });
        };
        let walk = u64::from_str_radix(walk, 16)
            .map_err(|_| Error::InvalidInput(format!("unknown cursor {text:?}")))?;
        Ok(Self {
            walk,
            after: Some(after.to_owned()),
        })
    }

    /// The cursor of the page after the file at `path`.
    pub fn after(&self, path: &str) -> String {
        format!("{:016x}:{path}", self.walk)
    }
}

/// One page of the listing.
pub struct Page {
    pub files: Vec<File>,
    /// The URI path of the last file the page looked at, if more follow (a
    /// file gone before it was looked at is left out, and the walk goes on
    /// after it).
    pub last: Option<String>,
}

/// The sorted entries of the directories this instance read lately.
#[derive(Default)]
pub struct Listings {
    kept: Mutex<VecDeque<Listed>>,
}

/// One directory's entries, as one walk read them.
struct Listed {
    walk: u64,
    /// The directory's URI path and a '/'; empty for the root.
    prefix: String,
    stamp: Stamp,
    /// Its entries' URI names, a '/' after a directory's, sorted: the order
    /// of the URI paths below them.
    names: Arc<[String]>,
}

/// What a directory's stat says that changes when its entries do.
#[derive(PartialEq)]
struct Stamp {
    size: u64,
    modified: Option<(u64, u32)>,
    changed: Option<(u64, u32)>,
}

impl Stamp {
    fn of(stat: &DescriptorStat) -> Self {
        let time = |time: Option<Datetime>| time.map(|time| (time.seconds, time.nanoseconds));
        Self {
            size: stat.size,
            modified: time(stat.data_modification_timestamp),
            changed: time(stat.status_change_timestamp),
        }
    }
}

impl Listings {
    /// At most `limit` regular files below `root` after `cursor`, in URI path
    /// order. Directories wholly before the cursor are never read, and only
    /// the files returned are looked at (`stat`), so a page costs about what
    /// it returns, plus a binary search in each directory on its way.
    pub fn page(&self, root: &Root, cursor: &Cursor, limit: usize) -> Result<Page, Error> {
        let mut gathering = Gathering {
            root,
            listings: self,
            cursor,
            wanted: limit.saturating_add(1),
            found: Vec::new(),
        };
        gathering.below("")?;
        let mut found = gathering.found;
        let more = found.len() > limit;
        found.truncate(limit);
        let last = found.last().filter(|_| more).cloned();
        let mut files = Vec::with_capacity(found.len());
        for path in found {
            let relative = decode(&path)?;
            files.extend(root.file(path, relative));
        }
        Ok(Page { files, last })
    }

    /// The sorted entries of the directory `relative`, whose URI path and a
    /// '/' are `prefix`: those walk `walk` read before if the directory is
    /// unchanged since, else read now (and kept).
    fn names(
        &self,
        root: &Root,
        walk: u64,
        prefix: &str,
        relative: &str,
    ) -> Result<Arc<[String]>, ErrorCode> {
        let stamp = Stamp::of(&root.stat(relative)?);
        {
            let mut kept = self.lock();
            let earlier = kept
                .iter()
                .position(|listed| listed.walk == walk && listed.prefix == prefix);
            if let Some(listed) = earlier.and_then(|index| kept.remove(index))
                && listed.stamp == stamp
            {
                let names = listed.names.clone();
                kept.push_back(listed);
                return Ok(names);
            }
        }
        let mut names: Vec<String> = root
            .read_directory(relative)?
            .into_iter()
            .map(|entry| {
                let mut name = encode(&entry.name);
                if entry.type_ == DescriptorType::Directory {
                    name.push('/');
                }
                name
            })
            .collect();
        names.sort_unstable();
        let names: Arc<[String]> = names.into();
        self.keep(Listed {
            walk,
            prefix: prefix.to_owned(),
            stamp,
            names: names.clone(),
        });
        Ok(names)
    }

    /// Keeps `listed` as the one used last, within the bounds.
    fn keep(&self, listed: Listed) {
        if listed.names.len() > KEPT_ENTRIES {
            return;
        }
        let mut kept = self.lock();
        kept.push_back(listed);
        let mut entries: usize = kept.iter().map(|listed| listed.names.len()).sum();
        while kept.len() > KEPT_DIRECTORIES || entries > KEPT_ENTRIES {
            let Some(dropped) = kept.pop_front() else {
                break;
            };
            entries -= dropped.names.len();
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Listed>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One page being gathered: the URI paths of the files found so far.
struct Gathering<'a> {
    root: &'a Root,
    listings: &'a Listings,
    cursor: &'a Cursor,
    wanted: usize,
    found: Vec<String>,
}

impl Gathering<'_> {
    /// Adds the files below the directory whose URI path and a '/' are
    /// `prefix` (empty for the root) that come after the cursor, in URI
    /// path order, until the page holds what it wants. A directory below the
    /// root that is gone, or no longer a directory, since its parent was
    /// read is passed over.
    fn below(&mut self, prefix: &str) -> Result<(), Error> {
        let relative = decode(prefix.trim_end_matches('/'))?;
        let names = match self
            .listings
            .names(self.root, self.cursor.walk, prefix, &relative)
        {
            Ok(names) => names,
            Err(ErrorCode::NoEntry | ErrorCode::NotDirectory) if !prefix.is_empty() => {
                return Ok(());
            }
            Err(error) => return Err(wasi_error(&relative, error)),
        };
        let start = self
            .cursor
            .after
            .as_deref()
            .map_or(0, |after| first_after(prefix, &names, after));
        for name in &names[start..] {
            if self.found.len() >= self.wanted {
                break;
            }
            let path = format!("{prefix}{name}");
            if name.ends_with('/') {
                self.below(&path)?;
            } else {
                self.found.push(path);
            }
        }
        Ok(())
    }
}

/// The index of the first of `names` (the sorted entries of the directory
/// whose URI path and a '/' are `prefix`) a walk that has passed `after`
/// still goes through: the directory `after` lies in, or else the first
/// entry after it. Only entries below that directory lie between it and
/// `after`, and none are entries of this one.
fn first_after(prefix: &str, names: &[String], after: &str) -> usize {
    let past = names.partition_point(|name| joined_cmp(prefix, name, after) != Ordering::Greater);
    match past.checked_sub(1) {
        Some(last)
            if names[last].ends_with('/')
                && after
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with(names[last].as_str())) =>
        {
            last
        }
        _ => past,
    }
}

/// `prefix` and `name` joined, compared with `path`, without joining them.
fn joined_cmp(prefix: &str, name: &str, path: &str) -> Ordering {
    prefix.bytes().chain(name.bytes()).cmp(path.bytes())
}
