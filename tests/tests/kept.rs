//! What an instance kept between calls may carry, tried as an attacker
//! would: the hostile `liar` plugin stashes a handle in a static (a
//! directory below its grant, a stream reading a file, an HTTP response's
//! trailers), the operator moves what it names out of the grant, and the
//! next call tries to act through it. Each such instance must be gone by
//! then: the next call runs on a fresh instance, which holds nothing, and
//! nothing outside the grant is read or written.

use std::path::Path;

use resmux_tests::{Folder, HttpStub, RawServer, Reply, liar_granted_data, notes_still_answer};

/// The liar with `data` granted read-write at `/data`, beside `notes`.
fn liar_with_data() -> Folder {
    let folder = liar_granted_data("access = \"read-write\"\n");
    folder
        .file("data/sub/inside.txt", b"inside")
        .file("data/log.txt", b"");
    folder
}

/// Moves `data/NAME` out of the grant, to `outside/NAME`.
fn move_out(folder: &Path, name: &str) -> std::path::PathBuf {
    let outside = folder.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let moved = outside.join(name);
    std::fs::rename(folder.join("data").join(name), &moved).unwrap();
    moved
}

#[tokio::test]
async fn a_directory_moved_out_of_the_grant_is_not_reached_through_a_kept_handle() {
    let folder = liar_with_data();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("liar://stash/dir//data/sub").await,
        "stashed"
    );
    // The operator moves the directory out of the grant; files appear there
    // afterwards.
    let moved = move_out(folder.path(), "sub");
    std::fs::write(moved.join("secret.txt"), b"the operator's secret").unwrap();

    assert_eq!(
        server
            .read_text("liar://through-stash/read/secret.txt")
            .await,
        "nothing stashed"
    );
    assert_eq!(
        server
            .read_text("liar://through-stash/write/planted.txt/owned")
            .await,
        "nothing stashed"
    );
    assert!(
        !moved.join("planted.txt").exists(),
        "no file was created outside the grant"
    );
    assert_eq!(
        std::fs::read(moved.join("secret.txt")).unwrap(),
        b"the operator's secret"
    );
    notes_still_answer(&mut server).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_file_moved_out_of_the_grant_is_not_read_through_a_kept_stream() {
    let folder = liar_with_data();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("liar://stash/stream//data/log.txt").await,
        "stashed"
    );
    let moved = move_out(folder.path(), "log.txt");
    std::fs::write(&moved, b"written after the move").unwrap();

    assert_eq!(
        server.read_text("liar://through-stash/read").await,
        "nothing stashed"
    );
    notes_still_answer(&mut server).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn http_trailers_still_to_come_are_not_kept_between_calls() {
    let stub = HttpStub::start(|_| Reply::new("200 OK", "a body"));
    let folder = Folder::new();
    folder.plugin("liar", "liar").manifest(
        "liar",
        &format!(
            "[config]\nfetch = \"{}\"\n[network]\nallow = [\"{}\"]\n",
            stub.url("127.0.0.1", "/trailers"),
            stub.url("127.0.0.1", ""),
        ),
    );
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(server.read_text("liar://stash/trailers").await, "stashed");
    assert_eq!(
        server.read_text("liar://through-stash/trailers").await,
        "nothing stashed"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_instance_holding_only_its_grant_is_still_kept() {
    let folder = liar_with_data();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // A directory listing ends with the call; the grant's own directory
    // stays, so the instance serves the next call.
    assert_eq!(
        server.read_text("liar://open//data/sub/inside.txt").await,
        "ok: 6 bytes"
    );
    assert_eq!(
        server.read_text("liar://count").await,
        "read 2 of this instance"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_read_only_grant_reached_through_a_read_write_one_is_not_kept_writable() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[[files]]\nhost = \"data\"\nguest = \"/data\"\naccess = \"read-write\"\n\
             [[files]]\nhost = \"data/ref\"\nguest = \"/ref\"\n",
        )
        .file("data/ref/fact.txt", b"fact");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // The read-only grant's own directory, opened through the read-write
    // grant above it: the same inode, with write access.
    assert_eq!(
        server.read_text("liar://stash/dir//data/ref").await,
        "stashed"
    );
    let moved = move_out(folder.path(), "ref");
    assert_eq!(
        server
            .read_text("liar://through-stash/write/planted.txt/owned")
            .await,
        "nothing stashed"
    );
    assert!(!moved.join("planted.txt").exists());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_link_a_plugin_makes_beside_a_granted_file_is_gone_before_its_next_call() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[[files]]\nhost = \"etc/app.toml\"\nguest = \"/config/app.toml\"\naccess = \"read-write\"\n",
        )
        .file("etc/app.toml", b"port = 1");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server
            .read_text("liar://link//config/app.toml,/config/keep")
            .await,
        "ok"
    );
    // The operator rotates the file: the old version moves aside.
    let etc = folder.path().join("etc");
    std::fs::rename(etc.join("app.toml"), etc.join("app.toml.1")).unwrap();
    std::fs::write(etc.join("app.toml"), b"port = 22").unwrap();

    assert_eq!(
        server.read_text("liar://open//config/keep").await,
        "error: NotFound"
    );
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 9 bytes"
    );
    assert_eq!(
        server.read_text("liar://write//config/keep").await,
        "ok",
        "the plugin may write beside the file during a call"
    );
    assert_eq!(
        server.read_text("liar://open//config/keep").await,
        "error: NotFound",
        "and what it wrote is gone by its next call"
    );
    assert_eq!(
        std::fs::read(etc.join("app.toml.1")).unwrap(),
        b"port = 1",
        "the old version is untouched"
    );
    server.stop().await.unwrap();
}
