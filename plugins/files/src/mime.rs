//! MIME types from file names, and from contents when the name says nothing.

const BY_EXTENSION: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("markdown", "text/markdown"),
    ("csv", "text/csv"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("css", "text/css"),
    ("rs", "text/x-rust"),
    ("py", "text/x-python"),
    ("js", "text/javascript"),
    ("json", "application/json"),
    ("toml", "application/toml"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("xml", "application/xml"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("wasm", "application/wasm"),
];

const TEXT_APPLICATIONS: &[&str] = &[
    "application/json",
    "application/toml",
    "application/yaml",
    "application/xml",
    "image/svg+xml",
];

/// The MIME type a file's name implies, if its extension is known.
pub fn by_name(name: &str) -> Option<&'static str> {
    let (_, extension) = name.rsplit_once('.')?;
    let extension = extension.to_ascii_lowercase();
    BY_EXTENSION
        .iter()
        .find(|(known, _)| *known == extension)
        .map(|(_, mime)| *mime)
}

/// The MIME type of a file: by name, else `text/plain` for UTF-8 without NUL
/// bytes, else `application/octet-stream`.
pub fn guess(name: &str, bytes: &[u8]) -> &'static str {
    by_name(name).unwrap_or_else(|| {
        let is_text = std::str::from_utf8(bytes).is_ok() && !bytes.contains(&0);
        if is_text {
            "text/plain"
        } else {
            "application/octet-stream"
        }
    })
}

/// Whether contents of this type are sent as text.
pub fn is_text(mime: &str) -> bool {
    mime.starts_with("text/") || TEXT_APPLICATIONS.contains(&mime)
}
