//! Target `operator_files`: every file an operator gives resmux, read by the
//! function `resmux serve` reads it with: a plugin manifest (and the grants
//! it makes), the ceiling, the tokens file, the auth file and the Cedar
//! access policy. Any text gets a value or an error that names the file; an
//! error never comes as a panic, a hang or an allocation the text does not
//! justify, whatever the file points at (a secret `from_file` naming
//! `/dev/zero` included).

use std::path::Path;
use std::sync::LazyLock;

use anyhow::Result;
use resmux::access::AccessList;
use resmux::access::oauth::ResourceServer;
use resmux::access::policy::AccessPolicy;
use resmux::catalog::Manifest;
use resmux::grants::ceiling::Ceiling;
use tempfile::TempDir;

/// The folder the files are written to, with a secret file beside them
/// that a tokens or auth file may name.
static FOLDER: LazyLock<TempDir> = LazyLock::new(|| {
    let folder = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(
        folder.path().join("secret"),
        "a secret of thirty-two bytes or more\n",
    )
    .expect("the secret is written");
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    folder
});

/// Reads one kind of operator file as `resmux serve` does.
type Reader = fn(&Path) -> Result<()>;

/// Which file the rest of the input is, by its first byte.
const READERS: [(&str, Reader); 5] = [
    ("plugin.toml", manifest),
    ("ceiling.toml", ceiling),
    ("tokens.toml", tokens),
    ("auth.toml", auth),
    ("access.cedar", access_policy),
];

pub fn run(data: &[u8]) {
    let Some((first, text)) = data.split_first() else {
        return;
    };
    let (name, read) = READERS[usize::from(*first) % READERS.len()];
    let path = FOLDER.path().join(name);
    std::fs::write(&path, text).expect("the file is written");
    if let Err(error) = read(&path) {
        let message = format!("{error:#}");
        assert!(
            message.contains(name) || message.contains(&path.display().to_string()),
            "an error that does not name the file {name}: {message}"
        );
    }
}

/// A manifest, then what loading its plugin makes of it; those later errors
/// are named by the plugin that loads, not the file.
fn manifest(path: &Path) -> Result<()> {
    let manifest = Manifest::read(path)?;
    let _ = manifest.config_pairs();
    let _ = manifest.mount_settings();
    let _ = manifest.grants(FOLDER.path());
    Ok(())
}

fn ceiling(path: &Path) -> Result<()> {
    let ceiling = Ceiling::read(path)?;
    let _ = (ceiling.locked(), ceiling.signatures());
    Ok(())
}

fn tokens(path: &Path) -> Result<()> {
    AccessList::read(path, None).map(drop)
}

fn auth(path: &Path) -> Result<()> {
    ResourceServer::read(path).map(drop)
}

fn access_policy(path: &Path) -> Result<()> {
    AccessPolicy::build(Some(path), &[], None).map(drop)
}
