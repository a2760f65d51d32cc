//! A single granted file, tried as an attacker would: grown (sparse, in an
//! instant) far past the plugin's memory limit where resmux must copy it
//! rather than link it, and the private folders a resmux killed with SIGKILL
//! leaves in the temporary folder. Each test checks the host's temporary
//! folder itself, what the plugin sees, and that another plugin keeps
//! answering.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use resmux_tests::{EXCHANGE_TIMEOUT, Folder, RawServer};

/// The plugin's memory limit in the copy test, which bounds a copy.
const MEMORY_MIB: u64 = 32;

/// The grant folders (`resmux-grant-*`) in `temporary`.
fn grant_folders(temporary: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(temporary)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("resmux-grant-"))
        })
        .collect()
}

/// Every file below `folder`, with its length and the bytes it takes on
/// disk.
fn files_below(folder: &Path) -> Vec<(PathBuf, u64, u64)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        if metadata.is_dir() {
            files.extend(files_below(&path));
        } else {
            files.push((path, metadata.len(), metadata.blocks() * 512));
        }
    }
    files
}

/// `resmux serve` on `plugins` with `temporary` as its temporary folder,
/// past the handshake.
async fn serving(plugins: &Path, temporary: &Path) -> RawServer {
    let temporary = temporary.to_str().unwrap();
    let mut server = RawServer::start_with_env(plugins, &[], &[("TMPDIR", temporary)]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    server
}

#[tokio::test]
async fn a_granted_file_grown_past_the_memory_limit_is_never_copied() {
    // The granted file lies on another filesystem than resmux's temporary
    // folder, so resmux cannot link it and copies it.
    let elsewhere = tempfile::tempdir_in("/dev/shm").expect("a folder in /dev/shm");
    let folder = Folder::new();
    folder.file("tmp/.keep", b"");
    let temporary = folder.path().join("tmp");
    assert_ne!(
        std::fs::metadata(elsewhere.path()).unwrap().dev(),
        std::fs::metadata(&temporary).unwrap().dev(),
        "the test needs /dev/shm and {} on two filesystems",
        temporary.display()
    );
    let app = elsewhere.path().join("app.toml");
    std::fs::write(&app, "port = 1").unwrap();
    folder
        .plugin("liar", "liar")
        .plugin("notes", "notes")
        .manifest(
            "liar",
            &format!(
                "[[files]]\nhost = {:?}\nguest = \"/config/app.toml\"\n[limits]\nmemory_mib = {MEMORY_MIB}\n",
                app.to_str().unwrap()
            ),
        );
    let mut server = serving(folder.path(), &temporary).await;
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 8 bytes"
    );
    let grants = grant_folders(&temporary);
    assert_eq!(grants.len(), 1, "{grants:?}");
    let grant = grants.first().unwrap();
    let copy = grant.join("shown/app.toml");
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), 8, "not a copy");

    // Sparse, within the limit: copied, holes and all.
    let four_mib = 4 << 20;
    let file = std::fs::OpenOptions::new().write(true).open(&app).unwrap();
    file.write_all_at(b"end", four_mib - 3).unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        format!("ok: {four_mib} bytes")
    );
    let copied = std::fs::metadata(&copy).unwrap();
    assert_eq!(copied.len(), four_mib);
    assert!(
        copied.blocks() * 512 < 1 << 20,
        "the copy of a sparse file takes {} bytes on disk",
        copied.blocks() * 512
    );

    // Grown to 1 GiB in an instant, as a plugin with a read-write grant of
    // the folder could: never copied, and the plugin keeps the last good
    // version.
    file.set_len(1 << 30).unwrap();
    for _ in 0..2 {
        assert_eq!(
            server.read_text("liar://open//config/app.toml").await,
            format!("ok: {four_mib} bytes"),
            "the last good version"
        );
    }
    for (path, len, on_disk) in files_below(grant) {
        assert!(
            len <= MEMORY_MIB << 20 && on_disk <= MEMORY_MIB << 20,
            "{} holds {len} bytes ({on_disk} on disk)",
            path.display()
        );
    }
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), four_mib);
    server
        .wait_for_log(
            &format!(
                "plugin liar: granted file {} is {} bytes, more than its memory limit of {MEMORY_MIB} MiB",
                app.canonicalize().unwrap().display(),
                1u64 << 30
            ),
            1,
            EXCHANGE_TIMEOUT,
        )
        .await;
    let notes = server.read("notes://notes/welcome").await.unwrap();
    assert!(
        notes["result"]["contents"][0]["text"].is_string(),
        "{notes}"
    );

    // Back within the limit: copied again.
    std::fs::write(&app, "port = 2").unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 8 bytes"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_grant_folders_of_a_killed_resmux_are_removed_at_the_next_start() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[[files]]\nhost = \"etc/app.toml\"\nguest = \"/config/app.toml\"\n",
        )
        .file("etc/app.toml", b"port = 1")
        .file("tmp/.keep", b"")
        .file("victim/lock", b"");
    let temporary = folder.path().join("tmp");

    let killed = serving(folder.path(), &temporary).await;
    let stale = grant_folders(&temporary);
    assert_eq!(stale.len(), 1, "{stale:?}");
    let mut living = serving(folder.path(), &temporary).await;
    let kept: BTreeSet<PathBuf> = grant_folders(&temporary)
        .difference(&stale)
        .cloned()
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    killed.kill().await.unwrap();
    assert!(
        stale.iter().all(|path| path.is_dir()),
        "SIGKILL left nothing behind: {stale:?}"
    );
    // Named like grant folders, but none: a link to a folder holding a lock
    // file nobody holds, and a folder without a lock file.
    let link = temporary.join("resmux-grant-link");
    std::os::unix::fs::symlink(folder.path().join("victim"), &link).unwrap();
    let lockless = temporary.join("resmux-grant-lockless");
    std::fs::create_dir(&lockless).unwrap();

    let mut next = serving(folder.path(), &temporary).await;
    let now = grant_folders(&temporary);
    assert!(stale.is_disjoint(&now), "the stale folder is still there");
    assert!(kept.is_subset(&now), "a living resmux's folder was removed");
    assert!(
        link.is_symlink() && folder.path().join("victim/lock").exists(),
        "the link was followed"
    );
    assert!(lockless.is_dir(), "a folder without a lock was removed");
    assert_eq!(
        std::fs::read(folder.path().join("etc/app.toml")).unwrap(),
        b"port = 1",
        "removing the stale folder's link touched the granted file"
    );
    for server in [&mut living, &mut next] {
        assert_eq!(
            server.read_text("liar://open//config/app.toml").await,
            "ok: 8 bytes"
        );
    }
    living.stop().await.unwrap();
    let log = next.stop().await.unwrap();
    let removed = stale.first().unwrap().display().to_string();
    assert!(log.contains(&format!("removed {removed}")), "{log}");
}
