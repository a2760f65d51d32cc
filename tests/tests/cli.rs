//! The operator's commands: `resmux list`, `templates`, `read`, `changes` and
//! `inspect`, run as a person would, on real plugins.

use std::fs::File;
use std::time::{Duration, SystemTime};

use resmux_tests::{Folder, resmux};

fn folder() -> Folder {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("files", "files")
        .manifest("files", "[[files]]\nhost = \"data\"\nguest = \"/data\"\n")
        .file("data/hello.txt", b"hello\n")
        .file(
            "data/pixel.png",
            &std::fs::read(resmux_tests::workspace().join("plugins/files/files-sample/pixel.png"))
                .unwrap(),
        );
    folder
}

fn stdout_of(args: &[&str]) -> String {
    let output = resmux(args);
    assert!(
        output.status.success(),
        "resmux {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("stdout is UTF-8")
}

#[test]
fn list_and_templates_print_the_merged_namespace() {
    let folder = folder();
    let plugins = folder.path().to_str().unwrap();
    let listing = stdout_of(&["list", "--plugins", plugins, "--page-size", "2"]);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 7, "{listing}");
    assert_eq!(lines[0], "files://hello.txt\thello.txt\ttext/plain\t6");
    assert_eq!(lines[1], "files://pixel.png\tpixel.png\timage/png\t70");
    assert_eq!(lines[2], "notes://notes/welcome\twelcome\ttext/markdown\t-");
    let templates = stdout_of(&["templates", "--plugins", plugins]);
    assert!(
        templates.starts_with("files://{+path}\tfile\t"),
        "{templates}"
    );
    assert!(
        templates.contains("notes://tags/{tag}\ttag\t"),
        "{templates}"
    );
}

#[test]
fn read_prints_text_previews_binary_and_saves_bytes() {
    let folder = folder();
    let plugins = folder.path().to_str().unwrap();
    assert_eq!(
        stdout_of(&["read", "--plugins", plugins, "files://hello.txt"]),
        "hello\n"
    );
    let preview = stdout_of(&["read", "--plugins", plugins, "files://pixel.png"]);
    assert!(
        preview.starts_with("--- files://pixel.png (image/png, 70 bytes of binary"),
        "{preview}"
    );
    assert!(
        preview.contains("00000000  89 50 4e 47 0d 0a 1a 0a"),
        "{preview}"
    );
    let saved = folder.path().join("saved.png");
    stdout_of(&[
        "read",
        "--plugins",
        plugins,
        "files://pixel.png",
        "-o",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(saved).unwrap(),
        std::fs::read(folder.path().join("data/pixel.png")).unwrap()
    );

    let missing = resmux(&["read", "--plugins", plugins, "notes://notes/nope"]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("resource notes://notes/nope not found"),
        "{stderr}"
    );
    let invalid = resmux(&["read", "--plugins", plugins, "files://../etc/passwd#x"]);
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("invalid URI"));
}

#[test]
fn changes_reports_modified_and_added_files() {
    let folder = folder();
    let plugins = folder.path().to_str().unwrap();
    let first = stdout_of(&["changes", "--plugins", plugins, "files"]);
    let token = first
        .lines()
        .find_map(|line| line.strip_prefix("token    "))
        .expect("a token")
        .to_owned();
    assert_eq!(
        stdout_of(&["changes", "--plugins", plugins, "files", "--since", &token]),
        format!("token    {token}\nlisting  unchanged\n")
    );

    let later = SystemTime::now() + Duration::from_secs(10);
    let hello = File::options()
        .write(true)
        .open(folder.path().join("data/hello.txt"))
        .unwrap();
    hello.set_modified(later).unwrap();
    folder.file("data/new.txt", b"new");
    File::options()
        .write(true)
        .open(folder.path().join("data/new.txt"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    let report = stdout_of(&["changes", "--plugins", plugins, "files", "--since", &token]);
    let lines: Vec<&str> = report.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "listing  changed",
            "changed  files://hello.txt",
            "changed  files://new.txt"
        ]
    );

    let unknown = resmux(&["changes", "--plugins", plugins, "nobody"]);
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no plugin serves scheme \"nobody\"")
    );
}

#[test]
fn inspect_shows_the_network_allowlist_and_what_each_import_gets() {
    let folder = Folder::new();
    folder.plugin("liar", "liar").manifest(
        "liar",
        "[network]\nallow = [\"http://127.0.0.1:8080\", \"https://*.example.com:*\"]\n",
    );
    let report = stdout_of(&["inspect", folder.path().join("liar.wasm").to_str().unwrap()]);
    let import = |name: &str| {
        report
            .lines()
            .find(|line| line.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{report}"))
            .to_owned()
    };
    assert!(
        import("wasi:http/outgoing-handler@").ends_with("allowlisted http and https requests only")
    );
    assert!(import("wasi:sockets/tcp@").ends_with("every use denied (no tcp or udp entry)"));
    for expected in [
        "network    http://127.0.0.1:8080\n",
        "network    https://*.example.com:*\n",
    ] {
        assert!(
            report.contains(expected),
            "inspect lacks {expected:?}:\n{report}"
        );
    }
}

#[test]
fn inspect_shows_interface_grants_and_self_description() {
    let folder = folder();
    let report = stdout_of(&[
        "inspect",
        folder.path().join("files.wasm").to_str().unwrap(),
    ]);
    let data = folder.path().join("data").canonicalize().unwrap();
    for expected in [
        "exports\n  resmux:provider/locate@0.1.0                  asked before each read which granted file to read\n  resmux:provider/provider@0.1.0\n".to_owned(),
        "wasi:filesystem/preopens@0.2.".to_owned(),
        format!(
            "files      directory {} -> /data (ReadOnly)",
            data.display()
        ),
        "network    none granted".to_owned(),
        "about      files 0.1.0: Files of a directory the operator grants, read-only".to_owned(),
        "start      ok".to_owned(),
    ] {
        assert!(
            report.contains(&expected),
            "inspect lacks {expected:?}:\n{report}"
        );
    }
    let preopens = report
        .lines()
        .find(|line| line.contains("wasi:filesystem/preopens@"))
        .unwrap();
    assert!(preopens.ends_with("granted paths only"), "{preopens}");

    let not_wasm = folder.path().join("data/hello.txt");
    let refused = resmux(&["inspect", not_wasm.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a loadable component"));
}

#[test]
fn check_passes_a_good_plugin_and_names_what_a_bad_one_breaks() {
    let folder = folder();
    let good = resmux(&["check", folder.path().join("notes.wasm").to_str().unwrap()]);
    let report = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "{report}");
    assert!(
        report.contains("ok    list: 5 valid resources on 1 page(s)"),
        "{report}"
    );
    assert!(
        report.contains("ok    read notes://notes/welcome: 74 bytes\n"),
        "{report}"
    );
    assert!(
        report.contains(
            "ok    complete notes://tags/{tag} tag from \"c\": 1 value(s) \"contract\"\n"
        ),
        "{report}"
    );
    assert!(
        report.contains(
            "ok    changes since \"static\": token \"static\", listing unchanged, 0 changed path(s)\n"
        ),
        "{report}"
    );
    assert!(
        report.ends_with("17 passed, 0 warnings, 0 failed\n"),
        "{report}"
    );

    folder.plugin("liar", "liar");
    let bad = resmux(&["check", folder.path().join("liar.wasm").to_str().unwrap()]);
    let report = String::from_utf8_lossy(&bad.stdout);
    assert!(!bad.status.success());
    assert!(
        report.contains(
            "FAIL  resource page 1: resource path \"test://static-text\" names a scheme of its own"
        ),
        "{report}"
    );
    assert!(
        report.contains("FAIL  template page 1: path template \"broken/{id\""),
        "{report}"
    );
    assert!(
        report.ends_with("4 passed, 0 warnings, 2 failed\n"),
        "{report}"
    );

    let garbage = folder.path().join("data/hello.txt");
    let refused = resmux(&["check", garbage.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&refused.stdout);
    assert!(!refused.status.success());
    assert!(
        report.starts_with("FAIL  not a loadable component"),
        "{report}"
    );
}
