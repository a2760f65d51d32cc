//! What a plugin author does, with the real binary and each language's own
//! tools: `resmux new` in a folder outside the repository, the project's
//! own build.sh, `resmux check` exercising every export; the SDKs turning an
//! uncaught exception into an `internal` error (no fault, no quarantine);
//! `check` flagging a plugin that breaks its listing's promises or fails to
//! complete; `resmux complete`, `resmux wit`; and `resmux dev` rebuilding
//! and reloading a project on save.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use resmux_tests::{Folder, RawServer, cache_dir, resmux, resmux_bin, workspace};
use serde_json::json;

/// PATH with the tools scripts/build installed first (componentize-py and
/// Go in target/plugin-tools), and before them a `resmux` that only fails:
/// a project's build.sh must call the resmux that wrote it, not one on PATH.
fn path_with_tools() -> std::ffi::OsString {
    let decoy = workspace().join("target/decoy-resmux");
    std::fs::create_dir_all(&decoy).unwrap();
    let script = decoy.join("resmux");
    if !script.exists() {
        // Written aside and renamed in, as tests run side by side.
        let thread = std::thread::current().id();
        let aside = decoy.join(format!("resmux.{}.{thread:?}", std::process::id()));
        std::fs::write(
            &aside,
            "#!/bin/sh\necho 'the resmux on PATH ran, not the one that wrote the project' >&2\nexit 1\n",
        )
        .unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&aside, executable).unwrap();
        std::fs::rename(&aside, &script).unwrap();
    }
    let tools = workspace().join("target/plugin-tools/bin");
    let path = std::env::var_os("PATH").unwrap();
    let first = [decoy, tools];
    std::env::join_paths(first.into_iter().chain(std::env::split_paths(&path))).unwrap()
}

/// What build scripts need: the tools scripts/build installed, with RESMUX
/// unset, as for an author who ran README's first command.
fn author_env(command: &mut Command) -> &mut Command {
    command
        .env("PATH", path_with_tools())
        .env_remove("RESMUX")
        .env("RESMUX_CACHE_DIR", cache_dir())
        // Rust projects share one target folder, so the SDK's dependencies
        // build once.
        .env("CARGO_TARGET_DIR", workspace().join("target/scaffolds"))
        .env("RUST_LOG", "warn")
}

fn succeeded(output: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `resmux new --lang LANG hello` in a fresh temporary folder.
fn scaffold(lang: &str) -> (tempfile::TempDir, PathBuf) {
    let outside = tempfile::tempdir().unwrap();
    let output = author_env(&mut Command::new(resmux_bin()))
        .args(["new", "--lang", lang, "hello"])
        .current_dir(outside.path())
        .output()
        .unwrap();
    let said = succeeded(output, "resmux new");
    assert_eq!(
        said,
        "wrote hello: build it with hello/build.sh, check it with resmux check hello/hello.wasm, \
         or serve it and rebuild on every save with resmux dev hello\n"
    );
    let project = outside.path().join("hello");
    // Windows' build script beside build.sh, with this resmux named as
    // PowerShell quotes a string.
    let helpers = std::fs::read_to_string(project.join("build-helpers.ps1")).unwrap();
    let written_by = std::fs::canonicalize(resmux_bin()).unwrap();
    assert!(
        helpers.contains(&format!("    $resmux = '{}'\n", written_by.display())),
        "{helpers}"
    );
    let script = std::fs::read_to_string(project.join("build.ps1")).unwrap();
    assert!(
        script.contains("\n. \"$PSScriptRoot/build-helpers.ps1\"\n"),
        "{script}"
    );
    (outside, project)
}

/// Runs the project's build.sh from another folder.
fn build(project: &Path) {
    let output = author_env(&mut Command::new(project.join("build.sh")))
        .current_dir("/")
        .output()
        .unwrap();
    let said = succeeded(output, "build.sh");
    assert_eq!(said, "built hello.wasm\n");
}

fn check(project: &Path) -> String {
    let component = project.join("hello.wasm");
    succeeded(
        resmux(&["check", component.to_str().unwrap()]),
        "resmux check",
    )
}

/// A new project builds with its own script and passes `check` as it is,
/// every export exercised.
fn scaffold_passes_check(lang: &str) -> (tempfile::TempDir, PathBuf) {
    let (outside, project) = scaffold(lang);
    build(&project);
    let report = check(&project);
    for line in [
        "ok    about: hello 0.1.0: ",
        "ok    init accepts the manifest's config\n",
        "ok    list: 1 valid resources on 1 page(s)\n",
        "ok    templates: 1 valid templates on 1 page(s)\n",
        "ok    read hello://hello: 13 bytes\n",
        "ok    complete hello://hello/{who} who from \"\": 4 value(s) \"ada\", \"alan\", \"grace\", \"linus\"\n",
        "ok    complete hello://hello/{who} who from \"a\": 2 value(s) \"ada\", \"alan\"\n",
        "ok    changes: token \"0\"\n",
        "ok    changes since \"0\": token \"0\", listing unchanged, 0 changed path(s)\n",
    ] {
        assert!(report.contains(line), "{lang}: no {line:?} in\n{report}");
    }
    assert!(
        report.ends_with("11 passed, 0 warnings, 0 failed\n"),
        "{report}"
    );
    (outside, project)
}

/// The project's read edited, as an author would, to raise an uncaught
/// exception for `boom`: `source` is the file, `read` the line that opens
/// the read function, and `raise` what goes right after it. Every read of
/// `boom` answers `internal` with the exception's message, the plugin is
/// never quarantined, and its other resources keep answering.
async fn uncaught_exception_is_an_internal_error(
    lang: &str,
    source: &str,
    read: &str,
    raise: &str,
) {
    let (_outside, project) = scaffold_passes_check(lang);
    let source = project.join(source);
    let text = std::fs::read_to_string(&source).unwrap();
    assert_eq!(text.matches(read).count(), 1, "{lang}: {read:?} in\n{text}");
    std::fs::write(&source, text.replace(read, &format!("{read}\n{raise}"))).unwrap();
    build(&project);
    // Compiled ahead, as the operator's `resmux pull` does: a start that
    // finds the plugin still compiling announces it with list_changed.
    let component = project.join("hello.wasm");
    succeeded(
        resmux(&["compile", component.to_str().unwrap()]),
        "resmux compile",
    );

    let mut server = RawServer::start(&project, &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    for attempt in 1..=6 {
        let response = server.read("hello://boom").await.unwrap();
        let error = &response["error"];
        assert_eq!(error["code"], -32603, "attempt {attempt}: {response}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("internal error: ") && message.contains("the boom resource exploded"),
            "attempt {attempt}: {message}"
        );
    }
    assert_eq!(server.read_text("hello://hello").await, "Hello, world!");
    let log = server.stop().await.unwrap();
    assert!(log.contains("the boom resource exploded"), "{log}");
    assert!(!log.contains("quarantined"), "{log}");
    assert!(!log.contains("trapped"), "{log}");
}

#[test]
fn a_new_rust_project_builds_and_passes_check() {
    scaffold_passes_check("rust");
}

#[test]
fn a_new_c_project_builds_and_passes_check() {
    scaffold_passes_check("c");
}

#[tokio::test]
async fn a_python_exception_is_an_internal_error() {
    uncaught_exception_is_an_internal_error(
        "python",
        "app.py",
        "    def read(self, path: str):",
        "        if path == \"boom\":\n            raise ValueError(\"the boom resource exploded\")",
    )
    .await;
}

#[tokio::test]
async fn a_javascript_exception_is_an_internal_error() {
    uncaught_exception_is_an_internal_error(
        "js",
        "app.js",
        "  read({ greeting }, path) {",
        "    if (path === 'boom') throw new TypeError('the boom resource exploded');",
    )
    .await;
}

#[tokio::test]
async fn a_go_panic_is_an_internal_error() {
    uncaught_exception_is_an_internal_error(
        "go",
        "export_resmux_provider_provider/hello.go",
        "\treturn resmux.Guard(func() (types.ReadResult, error) {",
        "\t\tif path == \"boom\" {\n\t\t\tpanic(\"the boom resource exploded\")\n\t\t}",
    )
    .await;
}

#[test]
fn check_flags_broken_promises_and_a_failing_completion() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[config]\nlist = \"promises\"\n");
    let output = resmux(&["check", folder.path().join("liar.wasm").to_str().unwrap()]);
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{report}");
    assert!(
        report.contains("ok    read liar://honest: 5 bytes\n"),
        "{report}"
    );
    assert!(
        report.contains(
            "FAIL  read liar://grows: its listing said liar://grows has 5 bytes, but the read returned 15\n"
        ),
        "{report}"
    );
    // The panic message, the plugin's last line on stderr, names the cause.
    assert!(
        report.contains(
            "FAIL  complete liar://item/{id} id from \"\": plugin fault: plugin liar trapped in \
             complete: wasm trap: wasm `unreachable` instruction executed; its last line on \
             stderr: \"the liar cannot complete id\"\n"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "note  changes: unavailable: the liar never reports changes (subscribers will hear of no updates)\n"
        ),
        "{report}"
    );
    assert!(
        report.ends_with("7 passed, 0 warnings, 2 failed\n"),
        "{report}"
    );
}

#[test]
fn complete_inspect_and_wit_from_the_shell() {
    let examples = workspace().join("target/plugins");
    let completed = succeeded(
        resmux(&[
            "complete",
            "--plugins",
            examples.to_str().unwrap(),
            "dataset://datasets/{name}/rows/{row}",
            "name",
            "ri",
        ]),
        "resmux complete",
    );
    assert_eq!(completed, "rivers\n");
    let refused = resmux(&[
        "complete",
        "--plugins",
        examples.to_str().unwrap(),
        "dataset://datasets/{name}/rows/{row}",
        "colour",
        "",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("template dataset://datasets/{name}/rows/{row} has no argument \"colour\""),
        "{refused:?}"
    );

    // componentize-py's own export is named as what it is.
    let dataset = examples.join("dataset.wasm");
    let inspected = succeeded(
        resmux(&["inspect", dataset.to_str().unwrap()]),
        "resmux inspect",
    );
    assert!(
        inspected.contains(
            "exports\n  exports                                       not part of the contract; resmux never calls it\n  resmux:provider/provider@0.1.0\n"
        ),
        "{inspected}"
    );

    let out = tempfile::tempdir().unwrap();
    succeeded(resmux(&["wit", out.path().to_str().unwrap()]), "resmux wit");
    assert_eq!(
        std::fs::read_to_string(out.path().join("provider.wit")).unwrap(),
        std::fs::read_to_string(workspace().join("wit/provider.wit")).unwrap()
    );
}

#[test]
fn new_refuses_a_bad_name_and_a_folder_in_use() {
    let outside = tempfile::tempdir().unwrap();
    let in_outside = |args: &[&str]| {
        author_env(&mut Command::new(resmux_bin()))
            .args(args)
            .current_dir(outside.path())
            .output()
            .unwrap()
    };
    let bad = in_outside(&["new", "--lang", "go", "Hello_World"]);
    assert!(!bad.status.success());
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr),
        "resmux: \"Hello_World\" cannot name a plugin: use a lowercase letter, then lowercase \
         letters, digits or '-' (it becomes the URI scheme), at most 63 characters\n"
    );
    std::fs::create_dir(outside.path().join("taken")).unwrap();
    std::fs::write(outside.path().join("taken/notes.txt"), "mine").unwrap();
    let taken = in_outside(&["new", "--lang", "c", "taken"]);
    assert!(!taken.status.success());
    assert_eq!(
        String::from_utf8_lossy(&taken.stderr),
        "resmux: taken already exists and is not empty; choose another name or --dir\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("taken/notes.txt")).unwrap(),
        "mine"
    );
}

/// `resmux dev` serves the project, and a saved edit is rebuilt, reloaded
/// and checked while the same session keeps serving.
#[tokio::test]
async fn dev_rebuilds_and_reloads_on_save() {
    let (_outside, project) = scaffold("c");
    let path = path_with_tools();
    let mut server = RawServer::dev(&project, &[("PATH", path.to_str().unwrap())]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    assert_eq!(server.read_text("hello://hello").await, "Hello, world!");
    // Only a notice that comes after the edit counts below.
    server.notifications.clear();

    let source = project.join("hello.c");
    let edited = std::fs::read_to_string(&source)
        .unwrap()
        .replace("\"%s, world!\"", "\"%s, there!\"");
    std::fs::write(&source, edited).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let response = server.read("hello://hello").await.unwrap();
        let text = &response["result"]["contents"][0]["text"];
        if text == &json!("Hello, there!") {
            break;
        }
        assert_eq!(text, &json!("Hello, world!"), "{response}");
        assert!(Instant::now() < deadline, "the edit was not served in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Clients are told of the rebuild; the notice may come after the
    // first read that sees it, as it is sent beside the swap.
    server
        .notification("notifications/resources/list_changed", |_| true)
        .await
        .unwrap();
    // The rebuilt plugin is checked as well as served.
    let log = server
        .wait_for_log(
            "11 passed, 0 warnings, 0 failed",
            2,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(log.matches("resmux dev: building ").count(), 2, "{log}");
    server.stop().await.unwrap();
}
