//! What resmux reads from outside, as an attacker who can write into the
//! plugin folder would plant it: a component or a manifest that is a FIFO
//! (nobody ever writes to it), a component that links to `/dev/zero`, and a
//! 2 GiB sparse component. Each is refused at once by one log line that
//! names the file and why; `serve` becomes ready, its other plugins serve,
//! one added later is mounted; `compile`, `check` and `inspect` end with the
//! same refusals; and the server's memory never grows by the files' size.
//! In the compile cache, an entry that is a FIFO or a link to `/dev/zero`
//! is compiled afresh, not waited on, and replaced; a key that is a FIFO is
//! refused at once.

use std::path::Path;
use std::time::Duration;

use resmux_tests::{
    Folder, RawServer, a_plugin_added_later_serves, cache_dir, mkfifo, notes_still_answer,
    resmux_bin,
};

const PATIENCE: Duration = Duration::from_secs(60);

/// The folder the attacker prepared, beside the `notes` example: what each
/// planted file is refused for.
fn planted() -> (Folder, Vec<(&'static str, String)>) {
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    let path = |name: &str| folder.path().join(name);
    mkfifo(&path("fifo.wasm"));
    // A manifest that is a FIFO, beside a real component.
    folder.plugin("piped", "notes");
    mkfifo(&path("piped.toml"));
    std::os::unix::fs::symlink("/dev/zero", path("zero.wasm")).unwrap();
    std::fs::File::create(path("sparse.wasm"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let shown = |name: &str| path(name).display().to_string();
    let refusals = vec![
        (
            "fifo.wasm",
            format!(
                "component {} is a FIFO, not a regular file",
                shown("fifo.wasm")
            ),
        ),
        (
            "piped.toml",
            format!(
                "manifest {} is a FIFO, not a regular file",
                shown("piped.toml")
            ),
        ),
        (
            "zero.wasm",
            format!(
                "component {} is a character device, not a regular file",
                shown("zero.wasm")
            ),
        ),
        (
            "sparse.wasm",
            format!(
                "component {} is larger than 256 MiB, the most resmux reads",
                shown("sparse.wasm")
            ),
        ),
    ];
    (folder, refusals)
}

/// The most memory the process `pid` ever held, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

#[tokio::test]
async fn planted_pipes_devices_and_huge_files_are_refused_at_once_and_the_folder_serves() {
    let (folder, refusals) = planted();
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    for (name, refusal) in &refusals {
        let log = server.wait_for_log(refusal, 1, PATIENCE).await;
        assert!(
            log.lines()
                .any(|line| line.contains("plugin not loaded") && line.contains(refusal)),
            "{name}: {log}"
        );
    }
    notes_still_answer(&mut server).await;
    a_plugin_added_later_serves(&mut server, &folder).await;
    let peak = peak_kib(server.pid());
    assert!(
        peak < 512 * 1024,
        "the server's memory peaked at {peak} KiB beside a 2 GiB file and /dev/zero"
    );
    server.stop().await.unwrap();
}

/// Runs `resmux ARGS` to its end, which must come within [`PATIENCE`].
async fn finished(args: &[&str]) -> std::process::Output {
    let run = tokio::process::Command::new(resmux_bin())
        .args(args)
        .env("RESMUX_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(PATIENCE, run)
        .await
        .unwrap_or_else(|_| panic!("resmux {args:?} did not end within {PATIENCE:?}"))
        .unwrap()
}

fn said(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test]
async fn compile_check_and_inspect_refuse_the_same_files_at_once() {
    let (folder, refusals) = planted();
    let shown = folder.path().to_str().unwrap();
    let compiled = finished(&["compile", shown]).await;
    assert!(!compiled.status.success(), "{}", said(&compiled));
    for (name, refusal) in &refusals {
        assert!(
            said(&compiled).contains(refusal),
            "compile, {name}: {}",
            said(&compiled)
        );
    }
    for (name, refusal) in &refusals {
        let planted = folder.path().join(name);
        let component = match name.strip_suffix(".toml") {
            // A manifest is read as the one beside its component.
            Some(stem) => folder.path().join(format!("{stem}.wasm")),
            None => planted,
        };
        let component = component.to_str().unwrap();
        for command in ["check", "inspect"] {
            let output = finished(&[command, component]).await;
            assert!(
                !output.status.success(),
                "{command} {name}: {}",
                said(&output)
            );
            assert!(
                said(&output).contains(refusal.as_str()),
                "{command} {name}: {}",
                said(&output)
            );
        }
    }
    assert!(Path::new(shown).join("notes.wasm").exists());
}

#[tokio::test]
async fn a_cache_entry_planted_as_a_fifo_or_a_link_to_a_device_is_compiled_afresh_and_replaced() {
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("cache");
    let key = scratch.path().join("state/cache-key");
    let notes = resmux_tests::component("notes");
    let args = [
        "inspect",
        notes.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-key",
        key.to_str().unwrap(),
    ];
    let inspect = || finished(&args);
    let first = inspect().await;
    assert!(
        said(&first).contains("compiled   Compiled"),
        "{}",
        said(&first)
    );
    let entry = std::fs::read_dir(&cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .expect("inspect stored the compiled component");
    let refusals = [
        "it is not a regular file",
        "cannot open it: it is a symbolic link, which resmux does not follow there",
    ];
    for refusal in refusals {
        std::fs::remove_file(&entry).unwrap();
        if refusal == refusals[0] {
            mkfifo(&entry);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &entry).unwrap();
        }
        let again = inspect().await;
        assert!(again.status.success(), "{refusal}: {}", said(&again));
        assert!(
            said(&again).contains("compiled   Compiled"),
            "{refusal}: {}",
            said(&again)
        );
        let warning = format!(
            "ignoring compile cache entry in {}: {refusal}; compiling afresh",
            cache.display()
        );
        assert!(said(&again).contains(&warning), "{}", said(&again));
        // The fresh code was stored in its place, and is used from then on.
        assert!(std::fs::symlink_metadata(&entry).unwrap().is_file());
        let cached = inspect().await;
        assert!(
            said(&cached).contains("compiled   Cached"),
            "{refusal}: {}",
            said(&cached)
        );
    }
    // The key that vouches for the entries, planted as a FIFO, is refused
    // at once by name.
    std::fs::remove_file(&key).unwrap();
    mkfifo(&key);
    let refused = inspect().await;
    assert!(!refused.status.success(), "{}", said(&refused));
    let refusal = format!(
        "refusing compile cache key {}: it is not a regular file",
        key.display()
    );
    assert!(said(&refused).contains(&refusal), "{}", said(&refused));
}
