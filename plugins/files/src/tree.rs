//! The granted directory: walking it, reading its files and directories,
//! resolving paths inside it, and noticing what changed (the listing's pages
//! are [`crate::listing`]'s). The host's sandbox already keeps every access
//! inside the grant; this module refuses `..` and empty segments so that
//! requests for them get a clear error instead of a sandbox denial.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, UNIX_EPOCH};

use wasi::filesystem::preopens::get_directories;
use wasi::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode,
    OpenFlags, PathFlags,
};

use crate::encoding::encode;
use resmux_sdk::{ChangeReport, Error};

/// A regular file below the root.
pub struct File {
    /// Its URI path (percent-encoded).
    pub path: String,
    /// Its path relative to the root.
    pub relative: String,
    pub size: u64,
    /// Its modification time, ISO 8601.
    pub modified: Option<String>,
    modified_nanos: u128,
}

impl File {
    /// The file at URI path `path` (`relative` to the root), last modified
    /// `modified` after the epoch, if known.
    fn new(path: String, relative: String, size: u64, modified: Option<Duration>) -> Self {
        Self {
            path,
            relative,
            size,
            modified: modified.map(|since| iso8601(since.as_secs())),
            modified_nanos: modified.map_or(0, |since| since.as_nanos()),
        }
    }
}

/// An entry of one directory.
pub struct Entry {
    pub name: String,
    pub path: String,
    pub is_dir: bool,
    pub size: u64,
    /// Time since 1970 of its last modification, when the host tells it.
    modified: Option<std::time::Duration>,
}

impl Entry {
    /// The entry as a small JSON object.
    pub fn to_json(&self) -> String {
        let kind = if self.is_dir { "directory" } else { "file" };
        format!(
            "{{\"name\":{},\"type\":\"{kind}\",\"size\":{}}}",
            json_string(&self.name),
            self.size
        )
    }
}

fn json_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for character in text.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if (c as u32) < 0x20 => quoted.push_str(&format!("\\u{:04x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// Maps an I/O failure on `path` to the contract's errors.
pub fn io_error(path: &str, error: std::io::Error) -> Error {
    match error.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound(format!("{path:?} does not exist")),
        std::io::ErrorKind::PermissionDenied => Error::Denied(format!("{path:?}: {error}")),
        _ => Error::Internal(format!("{path:?}: {error}")),
    }
}

/// The guest path of `relative` below `root`.
pub fn resolve(root: &str, relative: &str) -> Result<String, Error> {
    let relative = relative.trim_end_matches('/');
    if relative.is_empty() {
        return Ok(root.into());
    }
    if relative
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(Error::InvalidInput(format!(
            "{relative:?} has an empty, '.' or '..' segment"
        )));
    }
    Ok(format!("{}/{relative}", root.trim_end_matches('/')))
}

/// The entries of the directory at `host_path`, whose relative path is
/// `relative`, sorted by name.
pub fn entries(host_path: &str, relative: &str) -> Result<Vec<Entry>, Error> {
    let reader = std::fs::read_dir(host_path).map_err(|error| io_error(relative, error))?;
    let mut entries = Vec::new();
    for item in reader {
        let item = item.map_err(|error| io_error(relative, error))?;
        let Ok(name) = item.file_name().into_string() else {
            continue;
        };
        let Ok(metadata) = item.metadata() else {
            continue;
        };
        let child = if relative.is_empty() {
            name.clone()
        } else {
            format!("{}/{name}", relative.trim_end_matches('/'))
        };
        entries.push(Entry {
            path: encode(&child),
            name,
            is_dir: metadata.is_dir(),
            size: metadata.len(),
            modified: metadata
                .modified()
                .ok()
                .and_then(|time| time.duration_since(UNIX_EPOCH).ok()),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// Every regular file below `root`, sorted by URI path.
pub fn files(root: &str) -> Result<Vec<File>, Error> {
    let mut files = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(directory) = pending.pop() {
        let host_path = resolve(root, &directory)?;
        for entry in entries(&host_path, &directory)? {
            let relative = if directory.is_empty() {
                entry.name.clone()
            } else {
                format!("{directory}/{}", entry.name)
            };
            if entry.is_dir {
                pending.push(relative);
                continue;
            }
            files.push(File::new(entry.path, relative, entry.size, entry.modified));
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// What a read found at a path.
pub enum Found {
    Directory,
    File(Vec<u8>),
}

/// The most bytes the host hands over in one `read` call.
const READ_CHUNK: u64 = 64 * 1024;

/// Reads the file at `relative` below `root` (following links), or says it
/// is a directory: one open, one stat and reads of up to [`READ_CHUNK`]
/// through WASI itself (see [`Root`]).
pub fn read(root: &Root, relative: &str) -> Result<Found, Error> {
    let failed = |error| wasi_error(relative, error);
    let file = root
        .descriptor
        .open_at(
            PathFlags::SYMLINK_FOLLOW,
            &root.path(relative),
            OpenFlags::empty(),
            DescriptorFlags::READ,
        )
        .map_err(failed)?;
    let stat = file.stat().map_err(failed)?;
    if stat.type_ == DescriptorType::Directory {
        return Ok(Found::Directory);
    }
    let too_large = || Error::Unavailable(format!("{relative:?} is too large to read"));
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(usize::try_from(stat.size).unwrap_or(usize::MAX))
        .map_err(|_| too_large())?;
    loop {
        let (chunk, at_end) = file.read(READ_CHUNK, bytes.len() as u64).map_err(failed)?;
        bytes.try_reserve(chunk.len()).map_err(|_| too_large())?;
        bytes.extend_from_slice(&chunk);
        if at_end || chunk.is_empty() {
            return Ok(Found::File(bytes));
        }
    }
}

/// The root directory for listings and reads, reached through WASI itself
/// rather than `std::fs`: wasi-libc (under `std::fs`) asks the host for an
/// inode hash with every directory entry it reads and every file it stats
/// (an open, a stat and a close on the host), which resmux never needs.
/// That was about a quarter of a listing's time. It is opened once per
/// instance, by `init`.
pub struct Root {
    /// The preopened directory the root lies in.
    descriptor: Descriptor,
    /// The root's path inside it, empty if it is the preopen itself.
    base: String,
}

/// Whether this instance was given any directory: resmux gives none to the
/// instances it asks `locate` on.
pub fn has_files() -> bool {
    !get_directories().is_empty()
}

impl Root {
    /// The preopened directory `root` lies in, the deepest if several do.
    pub fn open(root: &str) -> Result<Self, Error> {
        let root = root.trim_end_matches('/');
        let mut best: Option<(Descriptor, String, usize)> = None;
        for (descriptor, preopen) in get_directories() {
            let preopen = preopen.trim_end_matches('/');
            let base = if root == preopen {
                Some("")
            } else {
                root.strip_prefix(preopen)
                    .and_then(|rest| rest.strip_prefix('/'))
            };
            if let Some(base) = base
                && best
                    .as_ref()
                    .is_none_or(|(_, _, length)| preopen.len() > *length)
            {
                best = Some((descriptor, base.to_owned(), preopen.len()));
            }
        }
        let (descriptor, base, _) = best.ok_or_else(|| {
            Error::Unavailable(format!("the root {root:?} is not in a granted directory"))
        })?;
        Ok(Self { descriptor, base })
    }

    /// What the host says of `relative` (below the root), without following
    /// a symlink at its end.
    pub fn stat(&self, relative: &str) -> Result<DescriptorStat, ErrorCode> {
        self.descriptor
            .stat_at(PathFlags::empty(), &self.path(relative))
    }

    /// The regular file at `relative`, whose URI path is `path`, as it is
    /// now; none if it is gone.
    pub fn file(&self, path: String, relative: String) -> Option<File> {
        let stat = self.stat(&relative).ok()?;
        let modified = stat
            .data_modification_timestamp
            .map(|time| Duration::new(time.seconds, time.nanoseconds));
        Some(File::new(path, relative, stat.size, modified))
    }

    /// The entries of the directory `relative`, in the order the host reads
    /// them; the directory is closed on return.
    pub fn read_directory(&self, relative: &str) -> Result<Vec<DirectoryEntry>, ErrorCode> {
        let opened = self.descriptor.open_at(
            PathFlags::empty(),
            &self.path(relative),
            OpenFlags::DIRECTORY,
            DescriptorFlags::READ,
        )?;
        let stream = opened.read_directory()?;
        let mut entries = Vec::new();
        while let Some(entry) = stream.read_directory_entry()? {
            entries.push(entry);
        }
        Ok(entries)
    }

    /// The path of `relative` (below the root) inside the preopen.
    fn path(&self, relative: &str) -> String {
        match (self.base.is_empty(), relative.is_empty()) {
            (true, true) => ".".into(),
            (true, false) => relative.into(),
            (false, true) => self.base.clone(),
            (false, false) => format!("{}/{relative}", self.base),
        }
    }
}

/// Maps a WASI file system error on `path` to the contract's errors.
pub fn wasi_error(path: &str, error: ErrorCode) -> Error {
    match error {
        ErrorCode::NoEntry => Error::NotFound(format!("{path:?} does not exist")),
        ErrorCode::Access | ErrorCode::NotPermitted => Error::Denied(format!("{path:?}: {error}")),
        _ => Error::Internal(format!("{path:?}: {error}")),
    }
}

/// Compares the tree with the state a token describes. The token holds the
/// newest modification time and a hash of all paths: files modified after
/// that time changed, and a different hash means the listing changed.
pub fn changes(root: &str, since: Option<&str>) -> Result<ChangeReport, Error> {
    let files = files(root)?;
    let newest = files
        .iter()
        .map(|file| file.modified_nanos)
        .max()
        .unwrap_or(0);
    let mut hasher = DefaultHasher::new();
    for file in &files {
        file.path.hash(&mut hasher);
    }
    let paths_hash = format!("{:016x}", hasher.finish());
    let token = format!("{newest}-{paths_hash}");
    let Some(since) = since else {
        return Ok(ChangeReport {
            token,
            listing_changed: false,
            changed_paths: Vec::new(),
        });
    };
    let (since_newest, since_hash) = since
        .split_once('-')
        .and_then(|(newest, hash)| Some((newest.parse::<u128>().ok()?, hash)))
        .ok_or_else(|| Error::InvalidInput(format!("unknown change token {since:?}")))?;
    let listing_changed = since_hash != paths_hash;
    let changed_paths = files
        .into_iter()
        .filter(|file| file.modified_nanos > since_newest)
        .map(|file| file.path)
        .collect();
    Ok(ChangeReport {
        token,
        listing_changed,
        changed_paths,
    })
}

/// Seconds since 1970 as `YYYY-MM-DDTHH:MM:SSZ`.
fn iso8601(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let time = seconds % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        time / 3_600,
        time % 3_600 / 60,
        time % 60
    )
}
