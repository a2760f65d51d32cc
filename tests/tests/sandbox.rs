//! The sandbox from inside: a plugin reaching for files, directories and
//! environment variables it was not granted gets nothing, and what it was
//! granted works exactly as granted.

use resmux_tests::{Folder, RawServer};

#[tokio::test]
async fn files_stay_inside_their_grant_and_read_only_means_read_only() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[[files]]\nhost = \"data\"\nguest = \"/data\"\n")
        .manifest(
            "scribe",
            "component = \"liar.wasm\"\n[[files]]\nhost = \"scratch\"\nguest = \"/scratch\"\naccess = \"read-write\"\n",
        )
        .file("data/inside.txt", b"inside")
        .file("outside/secret.txt", b"secret")
        .file("scratch/.keep", b"");
    let secret = folder.path().join("outside/secret.txt");
    std::os::unix::fs::symlink(
        "../outside/secret.txt",
        folder.path().join("data/relative-link"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, folder.path().join("data/absolute-link")).unwrap();

    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("liar://open//data/inside.txt").await,
        "ok: 6 bytes"
    );
    for escape in [
        "liar://open//data/../outside/secret.txt",
        "liar://open//data/../../../../etc/passwd",
        "liar://open//etc/passwd",
        "liar://open/outside/secret.txt",
        "liar://open//data/relative-link",
        "liar://open//data/absolute-link",
        "liar://open//scratch/.keep",
    ] {
        let outcome = server.read_text(escape).await;
        assert!(
            outcome.starts_with("error: "),
            "{escape} escaped: {outcome}"
        );
    }

    let refused = server.read_text("liar://write//data/new.txt").await;
    assert!(refused.starts_with("error: "), "{refused}");
    let overwrite = server.read_text("liar://write//data/inside.txt").await;
    assert!(overwrite.starts_with("error: "), "{overwrite}");
    assert!(!folder.path().join("data/new.txt").exists());
    assert_eq!(
        std::fs::read(folder.path().join("data/inside.txt")).unwrap(),
        b"inside"
    );

    assert_eq!(
        server.read_text("scribe://write//scratch/note.txt").await,
        "ok"
    );
    assert_eq!(
        std::fs::read_to_string(folder.path().join("scratch/note.txt")).unwrap(),
        "written by liar"
    );
    let escape = server
        .read_text("scribe://write//scratch/../outside/secret.txt")
        .await;
    assert!(escape.starts_with("error: "), "{escape}");
    assert_eq!(std::fs::read(&secret).unwrap(), b"secret");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_single_file_grant_shows_that_file_and_nothing_beside_it() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[[files]]\nhost = \"etc/app.toml\"\nguest = \"/config/app.toml\"\n",
        )
        .manifest(
            "scribe",
            "component = \"liar.wasm\"\n[[files]]\nhost = \"state/log.txt\"\nguest = \"/state/log.txt\"\naccess = \"read-write\"\n",
        )
        .manifest(
            "crowded",
            "component = \"liar.wasm\"\n[[files]]\nhost = \"etc/app.toml\"\nguest = \"/config/app.toml\"\n[[files]]\nhost = \"etc/other.toml\"\nguest = \"/config/other.toml\"\n",
        )
        .file("etc/app.toml", b"port = 1")
        .file("etc/other.toml", b"secret = true")
        .file("state/log.txt", b"");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 8 bytes"
    );
    for escape in [
        "liar://open//config/other.toml",
        "liar://open//config/../etc/other.toml",
        "liar://write//config/app.toml",
        "liar://write//config/new.toml",
    ] {
        let outcome = server.read_text(escape).await;
        assert!(outcome.starts_with("error: "), "{escape}: {outcome}");
    }
    assert_eq!(
        std::fs::read(folder.path().join("etc/app.toml")).unwrap(),
        b"port = 1"
    );

    let app = folder.path().join("etc/app.toml");
    std::fs::write(&app, "port = 10").unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 9 bytes",
        "an edit in place is visible"
    );
    let replacement = folder.path().join("etc/app.toml.new");
    std::fs::write(&replacement, "port = 100").unwrap();
    std::fs::rename(&replacement, &app).unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 10 bytes",
        "a replaced file is visible"
    );

    assert_eq!(
        server.read_text("scribe://write//state/log.txt").await,
        "ok"
    );
    assert_eq!(
        std::fs::read_to_string(folder.path().join("state/log.txt")).unwrap(),
        "written by liar"
    );
    let crowded = server.read("crowded://honest").await.unwrap();
    assert_eq!(crowded["error"]["code"], -32002, "{crowded}");
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("both appear at guest directory \"/config\""),
        "{stderr}"
    );
}

#[tokio::test]
async fn only_granted_variables_are_visible_and_their_values_stay_out_of_logs() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[env]\nTOKEN = { from_env = \"RESMUX_TEST_TOKEN\" }\nKEY = { from_file = \"key.txt\" }\n",
        )
        .file("key.txt", b"key-from-file\n");
    let mut server = RawServer::start_with_env(
        folder.path(),
        &["--log-level", "debug"],
        &[
            ("RESMUX_TEST_TOKEN", "token-from-env"),
            ("RESMUX_TEST_OTHER", "other"),
        ],
    )
    .unwrap();
    server.initialize("2025-11-25").await.unwrap();
    assert_eq!(server.read_text("liar://env/TOKEN").await, "token-from-env");
    assert_eq!(server.read_text("liar://env/KEY").await, "key-from-file");
    for hidden in ["RESMUX_TEST_TOKEN", "RESMUX_TEST_OTHER", "PATH", "HOME"] {
        assert_eq!(
            server.read_text(&format!("liar://env/{hidden}")).await,
            "unset"
        );
    }
    let stderr = server.stop().await.unwrap();
    // At debug level rmcp logs every response, which here carries the values
    // back to the client as asked; nothing else may mention them.
    let leaks: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("token-from-env") || line.contains("key-from-file"))
        .filter(|line| !line.contains("rmcp::service: response message"))
        .collect();
    assert!(leaks.is_empty(), "{leaks:#?}");
}

#[tokio::test]
async fn a_grant_that_cannot_be_resolved_keeps_the_plugin_out() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[env]\nTOKEN = { from_env = \"RESMUX_TEST_SURELY_UNSET\" }\n",
        )
        .plugin("notes", "notes")
        .manifest(
            "notes",
            "[[files]]\nhost = \"missing\"\nguest = \"/data\"\n",
        )
        .plugin("memo", "notes")
        .manifest("memo", "[[files]]\nhost = \"memo.toml\"\nguest = \"/\"\n");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let read = server.read("liar://honest").await.unwrap();
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let stderr = server.stop().await.unwrap();
    for expected in [
        "variable TOKEN is granted from host variable RESMUX_TEST_SURELY_UNSET, which is not set",
        "missing cannot be opened",
        "guest path \"/\" of a file grant must name a file",
    ] {
        assert!(
            stderr.contains(expected),
            "stderr lacks {expected:?}:\n{stderr}"
        );
    }
}
