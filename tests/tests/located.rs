//! Reads the host serves from a file the plugin located (`locate`), tried as
//! an attacker would: the liar locates files outside its grants, behind a
//! symlink that leaves them, through `..`, in a FIFO nobody writes, in a
//! directory, and in a file larger than its memory limit, and it spins in
//! `locate`. The host reads only regular files inside the grant; for anything
//! else the plugin's own `read` answers, under its own sandbox. Each case
//! checks what came back, and the last that another plugin keeps answering.

use resmux_tests::{Folder, RawServer, error_message, mkfifo};

/// What the liar's `read` answers for `liar://located/FILE`: proof that the
/// host did not read FILE itself.
fn read_by_the_plugin(file: &str) -> String {
    format!("read by the plugin, not the host: {file}")
}

#[tokio::test]
async fn the_host_reads_only_regular_files_inside_the_grant_a_plugin_locates() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .plugin("notes", "notes")
        .manifest(
            "liar",
            "[[files]]\nhost = \"data\"\nguest = \"/data\"\n[limits]\nmemory_mib = 8\ncpu_ms = 300\n",
        )
        .file("data/inside.txt", b"granted words")
        .file("data/sub/nested.txt", b"nested words")
        .file("secret.txt", b"outside the grant");
    let data = folder.path().join("data");
    std::os::unix::fs::symlink("../secret.txt", data.join("leave")).unwrap();
    std::os::unix::fs::symlink("sub/nested.txt", data.join("stay")).unwrap();
    mkfifo(&data.join("pipe"));
    let big = std::fs::File::create(data.join("big.txt")).unwrap();
    big.set_len(9 << 20).unwrap();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();

    // Inside the grant, the host reads the file: the plugin never sees it.
    assert_eq!(
        server.read_text("liar://located/data/inside.txt").await,
        "granted words"
    );
    // A symlink that stays inside the grant is followed, as WASI would.
    assert_eq!(
        server.read_text("liar://located/data/stay").await,
        "nested words"
    );
    for refused in [
        // a symlink out of the grant
        "data/leave",
        // `..` out of the grant
        "data/~/secret.txt",
        "data/sub/~/~/secret.txt",
        // no grant at all
        "etc/passwd",
        // a FIFO nobody writes: opening it must not wait for a writer
        "data/pipe",
        // a directory
        "data/sub",
        // 9 MiB, over the plugin's memory limit of 8 MiB
        "data/big.txt",
        // missing
        "data/nothing.txt",
    ] {
        let uri = format!("liar://located/{refused}");
        assert_eq!(
            server.read_text(&uri).await,
            read_by_the_plugin(refused),
            "{uri}"
        );
    }

    // `locate` runs on the host's own threads; spinning there is stopped by
    // the plugin's CPU limit like any other call.
    let spun = server.read("liar://locate-spin").await.unwrap();
    assert!(
        error_message(&spun)
            .ends_with("plugin liar exceeded its CPU time limit of 300 ms in locate"),
        "{spun}"
    );
    assert_eq!(
        server.read_text("notes://notes/welcome").await,
        "# Welcome\n\nThese notes are served by a WebAssembly plugin through resmux.\n"
    );
    assert_eq!(
        server.read_text("liar://located/data/inside.txt").await,
        "granted words"
    );
    server.stop().await.unwrap();
}
