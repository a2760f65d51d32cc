//! Reads the host serves from a file the plugin located (`locate` in
//! `wit/provider.wit`): the export's type, finding it in a component, and
//! reading the located file through the plugin's own grants into the answer
//! its `read` would have given, so the bytes never pass through the plugin.
//!
//! Whenever the host cannot read the file for the plugin (outside every
//! grant, missing, not a regular file, on a filesystem that could hang,
//! growing past the answer limit while read, or failing to read), the
//! plugin's `read` answers instead: it stays the one place that answers
//! errors and directories. A file larger than the answer limit when opened
//! is refused with the error its answer would get, none of it read. The
//! file is opened and read under a call slot of the plugin's, never in the
//! loop that reads stdin ([`super::plugin`]).

use std::fs::File;

use wasmtime::component::{Component, ComponentExportIndex, ComponentType, Lift, TypedFunc};

use super::bindings::resmux::provider::types as wit;
use crate::contract::{Body, Content, ProviderError, ReadResult};
use crate::grants::{Grants, LocatedFile};

/// The interface a locating plugin exports beside the contract.
const INTERFACE: &str = "resmux:provider/locate@0.1.0";

/// Where the bytes of one resource are, as the plugin says.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct Located {
    file: String,
    #[component(name = "mime-type")]
    mime_type: Option<String>,
    text: bool,
    cache: Option<wit::CacheHint>,
}

/// The `locate` function of one instance.
pub type LocateFunc = TypedFunc<(String,), (Result<Option<Located>, wit::Error>,)>;

/// The `locate` function `component` exports, if it exports one.
pub fn export_of(component: &Component) -> Option<ComponentExportIndex> {
    let interface = component.get_export_index(None, INTERFACE)?;
    component.get_export_index(Some(&interface), "locate")
}

/// The file `located` names, opened through `grants` for the
/// host to read, or none if the plugin's `read` must answer. A file larger
/// than the plugin's `max_read_bytes` is refused before any of it is read,
/// as its answer would be.
pub fn open(
    plugin: &str,
    grants: &Grants,
    path: &str,
    located: &Located,
) -> Result<Option<LocatedFile>, ProviderError> {
    let Some(opened) = grants.open_located(&located.file) else {
        return Ok(None);
    };
    let limit = grants.max_read_bytes;
    if opened.size > limit {
        return Err(ProviderError::Fault(format!(
            "plugin {plugin}: the file {:?} it located for {path:?} holds {} bytes, over its max_read_bytes of {limit}",
            located.file, opened.size
        )));
    }
    Ok(Some(opened))
}

/// The answer for `path`, read from `opened`, the file `located` names; none
/// if it grew past the plugin's limits while read, or could not be read.
pub fn read(
    grants: &Grants,
    path: &str,
    opened: &LocatedFile,
    located: Located,
) -> Option<ReadResult> {
    let most = grants
        .limits
        .memory_bytes()
        .min(usize::try_from(grants.max_read_bytes).unwrap_or(usize::MAX));
    let bytes = read_at_most(&opened.file, opened.size, most)?;
    let (mime_type, body) = answer(located.mime_type, located.text, bytes);
    Some(ReadResult {
        contents: vec![Content {
            path: path.to_owned(),
            mime_type: Some(mime_type),
            body,
            meta: None,
        }],
        cache: located.cache.map(Into::into),
    })
}

/// The bytes of `file` if it holds at most `most`: read into a buffer of
/// `size`, the size it had when opened, with as few reads as that allows,
/// and never past `most` even if it grows meanwhile (a plugin with a
/// read-write grant may be appending to it).
fn read_at_most(file: &File, size: u64, most: usize) -> Option<Vec<u8>> {
    let size = usize::try_from(size).ok()?;
    if size > most {
        return None;
    }
    let mut bytes = Vec::new();
    // One byte more, to see the end without growing the buffer.
    bytes.try_reserve_exact(size + 1).ok()?;
    loop {
        if bytes.len() == bytes.capacity() {
            // Doubling, so that a file growing without end costs as many
            // copies as a vector growing does.
            let more = bytes.len().max(MIN_GROWTH).min(most + 1 - bytes.len());
            if more == 0 {
                return None;
            }
            bytes.try_reserve_exact(more).ok()?;
        }
        match read_more(file, &mut bytes) {
            Ok(0) => return Some(bytes),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Reads what follows `bytes` in `file` into `bytes`' spare capacity, at
/// the offset of its length (the file's own position is not used).
#[cfg(unix)]
fn read_more(file: &File, bytes: &mut Vec<u8>) -> std::io::Result<usize> {
    let offset = bytes.len() as u64;
    Ok(rustix::io::pread(
        file,
        rustix::buffer::spare_capacity(bytes),
        offset,
    )?)
}

/// Reads what follows `bytes` in `file` into `bytes`' spare capacity, at
/// the offset of its length.
#[cfg(windows)]
fn read_more(file: &File, bytes: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::os::windows::fs::FileExt;
    let filled = bytes.len();
    bytes.resize(bytes.capacity(), 0);
    let read = file.seek_read(&mut bytes[filled..], filled as u64);
    bytes.truncate(filled + *read.as_ref().unwrap_or(&0));
    read
}

/// The least more room a located file that grew while it was read gets.
const MIN_GROWTH: usize = 64 * 1024;

/// The MIME type and body of a located file's `bytes`: as the plugin said,
/// or told from the bytes when it named no type.
pub(crate) fn answer(mime_type: Option<String>, text: bool, bytes: Vec<u8>) -> (String, Body) {
    match mime_type {
        Some(mime_type) if text => (mime_type, text_or_blob(bytes)),
        Some(mime_type) => (mime_type, Body::Blob(bytes)),
        None if bytes.contains(&0) => ("application/octet-stream".into(), Body::Blob(bytes)),
        None => match text_or_blob(bytes) {
            text @ Body::Text(_) => ("text/plain".into(), text),
            blob => ("application/octet-stream".into(), blob),
        },
    }
}

/// Text if `bytes` are UTF-8, else a blob.
fn text_or_blob(bytes: Vec<u8>) -> Body {
    match String::from_utf8(bytes) {
        Ok(text) => Body::Text(text),
        Err(error) => Body::Blob(error.into_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_located_file_is_read_whole_only_within_the_bound() {
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &[7; 100_000]).unwrap();
        assert_eq!(
            read_at_most(&file, 100_000, 100_000),
            Some(vec![7; 100_000])
        );
        assert_eq!(read_at_most(&file, 100_000, 99_999), None);
        // Grown since it was measured: still read whole within the bound,
        // and refused past it.
        assert_eq!(read_at_most(&file, 10, 100_000), Some(vec![7; 100_000]));
        assert_eq!(read_at_most(&file, 10, 50_000), None);
        let empty = tempfile::tempfile().unwrap();
        assert_eq!(read_at_most(&empty, 0, 0), Some(Vec::new()));
    }

    #[test]
    fn a_located_file_without_a_type_is_told_from_its_bytes() {
        let text = answer(None, false, b"plain words".to_vec());
        assert_eq!(text.0, "text/plain");
        assert_eq!(text.1, Body::Text("plain words".into()));
        let nul = answer(None, true, b"a\0b".to_vec());
        assert_eq!(nul.0, "application/octet-stream");
        assert_eq!(nul.1, Body::Blob(b"a\0b".to_vec()));
        let latin1 = answer(None, true, vec![0xe9]);
        assert_eq!(latin1.0, "application/octet-stream");
    }

    #[test]
    fn a_located_file_with_a_type_is_text_only_if_asked_and_utf8() {
        let asked = answer(Some("text/markdown".into()), true, b"# hi".to_vec());
        assert_eq!(asked.1, Body::Text("# hi".into()));
        let not_utf8 = answer(Some("text/markdown".into()), true, vec![0xff]);
        assert_eq!(not_utf8.1, Body::Blob(vec![0xff]));
        let blob = answer(Some("image/png".into()), false, b"PNG".to_vec());
        assert_eq!(blob, ("image/png".into(), Body::Blob(b"PNG".to_vec())));
    }
}
