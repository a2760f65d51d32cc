//! Reads the host serves from a file the plugin located (`locate`), tried as
//! an attacker would: the liar locates files outside its grants, behind a
//! symlink that leaves them, through `..`, under a guest path that only
//! starts like its grant's, in a FIFO nobody writes, in a directory, in a
//! single granted file and in a file larger than its memory limit; it spins
//! in `locate`, stalls there on a FIFO, and faults in `read` behind a
//! `locate` that answers. The host reads only regular files inside the grant
//! the plugin would reach them through; for anything else the plugin's own
//! `read` answers, under its own sandbox. Each test checks what came back,
//! the error that names the limit, and that another plugin keeps answering.

use resmux_tests::{
    Folder, RawServer, error_message, liar_granted_data, mkfifo, notes_still_answer,
};

/// A file inside the grant every test gives the liar, located by the URI.
const INSIDE_URI: &str = "liar://located/data/inside.txt";
const INSIDE_TEXT: &str = "granted words";

/// The liar granted `data` (`more` of its manifest follows the grant),
/// which holds `data/inside.txt`.
fn liar_granted_inside(more: &str) -> Folder {
    let folder = liar_granted_data(more);
    folder.file("data/inside.txt", INSIDE_TEXT.as_bytes());
    folder
}

/// What the liar's `read` answers for `liar://located/FILE`: proof that the
/// host did not read FILE itself.
fn read_by_the_plugin(file: &str) -> String {
    format!("read by the plugin, not the host: {file}")
}

#[tokio::test]
async fn the_host_reads_only_regular_files_inside_the_grant_a_plugin_locates() {
    let folder = liar_granted_inside(
        "[[files]]\nhost = \"trusted\"\nguest = \"/data/deeper\"\n\
         [[files]]\nhost = \"app.toml\"\nguest = \"/etc/app.toml\"\n\
         [limits]\nmemory_mib = 8\ncpu_ms = 300\n",
    );
    folder
        .file("data/sub/nested.txt", b"nested words")
        .file("data/b/inside.txt", b"granted under b")
        .file("data/deeper/shadow.txt", b"the wider grant's file")
        .file("trusted/shadow.txt", b"the deeper grant's file")
        .file("app.toml", b"port = 1")
        .file("secret.txt", b"outside the grant");
    let data = folder.path().join("data");
    std::os::unix::fs::symlink("../secret.txt", data.join("leave")).unwrap();
    std::os::unix::fs::symlink("sub/nested.txt", data.join("stay")).unwrap();
    mkfifo(&data.join("pipe"));
    let big = std::fs::File::create(data.join("big.txt")).unwrap();
    big.set_len(9 << 20).unwrap();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();

    // Inside the grant, the host reads the file: the plugin never sees it.
    assert_eq!(server.read_text(INSIDE_URI).await, INSIDE_TEXT);
    // A symlink that stays inside the grant is followed, as WASI would.
    assert_eq!(
        server.read_text("liar://located/data/stay").await,
        "nested words"
    );
    // Of two grants above a path, the deeper one holds it, as WASI resolves.
    assert_eq!(
        server
            .read_text("liar://located/data/deeper/shadow.txt")
            .await,
        "the deeper grant's file"
    );
    for refused in [
        // a symlink out of the grant
        "data/leave",
        // `..` out of the grant
        "data/~/secret.txt",
        "data/sub/~/~/secret.txt",
        // no grant at all
        "etc/passwd",
        // a guest path that only starts like the grant's (`/data`)
        "datab/inside.txt",
        // a single granted file, left to the plugin
        "etc/app.toml",
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
    notes_still_answer(&mut server).await;
    assert_eq!(server.read_text(INSIDE_URI).await, INSIDE_TEXT);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn locate_has_no_files_so_a_fifo_cannot_stall_it_nor_switch_it_off() {
    let folder = liar_granted_inside("[limits]\ntimeout_ms = 1000\n");
    mkfifo(&folder.path().join("data/pipe"));
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(server.read_text(INSIDE_URI).await, INSIDE_TEXT);
    // `locate` opens the FIFO: on an instance without file grants there is
    // nothing to open, so it answers at once instead of waiting for a
    // writer on a thread nothing could free.
    let refused = server.read("liar://locate-open/data/pipe").await.unwrap();
    assert!(
        error_message(&refused).ends_with("opened: false"),
        "{refused}"
    );
    // The plugin is still asked where its files are, and the host reads them.
    assert_eq!(server.read_text(INSIDE_URI).await, INSIDE_TEXT);
    notes_still_answer(&mut server).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_path_whose_read_keeps_faulting_is_quarantined_behind_locate() {
    let folder = liar_granted_inside("");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // `locate` answers none for `panic`, and `read` traps: each time, the
    // answer of `locate` must not count as the path's recovery.
    let trap = "plugin liar trapped in read";
    for _ in 0..3 {
        let trapped = server.read_error("liar://panic").await;
        assert!(trapped.contains(trap), "{trapped}");
    }
    let (quarantined, _) = server.read_until_quarantined("liar://panic", trap).await;
    assert!(
        quarantined.contains("path \"panic\" of plugin liar is quarantined"),
        "{quarantined}"
    );
    assert_eq!(server.read_text(INSIDE_URI).await, INSIDE_TEXT);
    server.stop().await.unwrap();
}
