//! Locked-down deployments: digest pins, `--locked`, and the ceiling
//! that caps what any manifest may grant.

use resmux_tests::{Folder, digest_of, resmux};

fn listing(args: &[&str]) -> (bool, String, String) {
    let output = resmux(args);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Mounts the `files` example in `plugins` as `name`, with `manifest`.
fn mount_files(plugins: &std::path::Path, name: &str, manifest: &str) {
    std::fs::copy(
        resmux_tests::component("files"),
        plugins.join(format!("{name}.wasm")),
    )
    .unwrap();
    std::fs::write(plugins.join(format!("{name}.toml")), manifest).unwrap();
}

#[test]
fn a_wrong_pin_is_refused_even_when_not_locked() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .manifest("notes", &format!("sha256 = \"{}\"\n", "0".repeat(64)))
        .plugin("conformance", "conformance");
    let (ok, stdout, stderr) = listing(&["list", "--plugins", folder.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(
        !stdout.contains("notes://") && stdout.contains("conformance://"),
        "{stdout}"
    );
    assert!(stderr.contains("but the manifest pins 0000"), "{stderr}");
}

#[test]
fn locked_mode_demands_pins_and_refuses_to_start_on_any_error() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("conformance", "conformance");
    let plugins = folder.path().to_str().unwrap();
    let (ok, _, stderr) = listing(&["list", "--plugins", plugins, "--locked"]);
    assert!(!ok);
    assert!(
        stderr.contains("locked mode requires a sha256 pin"),
        "{stderr}"
    );
    assert!(
        stderr.contains("locked mode refuses to start: 2 plugin(s)"),
        "{stderr}"
    );

    for name in ["notes", "conformance"] {
        let digest = digest_of(&folder.path().join(format!("{name}.wasm")));
        folder.manifest(name, &format!("sha256 = \"{digest}\"\n"));
    }
    let (ok, stdout, stderr) = listing(&["list", "--plugins", plugins, "--locked"]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.lines().count(), 8, "{stdout}");

    folder.file("broken.wasm", b"not wasm");
    let (ok, _, stderr) = listing(&["list", "--plugins", plugins, "--locked"]);
    assert!(
        !ok && stderr.contains("locked mode refuses to start: 1 plugin(s)"),
        "{stderr}"
    );

    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(policy.path(), "locked = true\n").unwrap();
    let policy = policy.path().to_str().unwrap();
    // `--policy`, the flag's old name, still names the ceiling.
    let (ok, _, stderr) = listing(&["list", "--plugins", plugins, "--policy", policy]);
    assert!(
        !ok && stderr.contains("locked mode refuses to start: 1 plugin(s)"),
        "the ceiling's locked = true was not applied: {stderr}"
    );
}

#[test]
fn the_ceiling_caps_every_grant() {
    let folder = Folder::new();
    folder
        .file("allowed/a.txt", b"a")
        .file("forbidden/b.txt", b"b")
        .file("secrets/token", b"t")
        .file(
            "policy.toml",
            b"directories = [\"allowed\"]\nvariables = [\"RESMUX_OK\"]\nsecret_files = [\"secrets/token\"]\nnetwork = [\"https://*.example.com\", \"http://*:*\"]\n",
        )
        .file("plugins/.keep", b"");
    let plugins = folder.path().join("plugins");
    let policy = folder.path().join("policy.toml");
    let grant = |name: &str, manifest: &str| mount_files(&plugins, name, manifest);
    grant(
        "good",
        "[[files]]\nhost = \"../allowed\"\nguest = \"/data\"\n[env]\nT = { from_file = \"../secrets/token\" }\n[network]\nallow = [\"https://api.example.com\"]\n",
    );
    grant(
        "sneaky",
        "[[files]]\nhost = \"../allowed/../forbidden\"\nguest = \"/data\"\n",
    );
    grant("greedy", "[[files]]\nhost = \"..\"\nguest = \"/data\"\n");
    grant(
        "metadata",
        "[network]\nallow = [\"http://169.254.169.254\"]\n",
    );
    grant(
        "nosy",
        "[[files]]\nhost = \"../allowed\"\nguest = \"/data\"\n[env]\nH = { from_env = \"HOME\" }\n",
    );

    let (ok, stdout, stderr) = listing(&[
        "list",
        "--plugins",
        plugins.to_str().unwrap(),
        "--ceiling",
        policy.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "good://a.txt\ta.txt\ttext/plain\t1\n");
    // The same ceiling named by RESMUX_CEILING, and by the variable it once
    // was: a deployment that still sets RESMUX_POLICY keeps its ceiling.
    for (variable, warned) in [("RESMUX_CEILING", false), ("RESMUX_POLICY", true)] {
        let output = std::process::Command::new(resmux_tests::resmux_bin())
            .args(["list", "--plugins", plugins.to_str().unwrap()])
            .env("RESMUX_CACHE_DIR", resmux_tests::cache_dir())
            .env("RUST_LOG", "warn")
            .env(variable, &policy)
            .output()
            .unwrap();
        let by_variable = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            stdout,
            "{variable}: {by_variable}"
        );
        assert!(
            by_variable.contains("the ceiling allows no grant of host variable HOME"),
            "{variable}: {by_variable}"
        );
        assert_eq!(
            by_variable.contains("RESMUX_POLICY names the ceiling file; it is RESMUX_CEILING now"),
            warned,
            "{variable}: {by_variable}"
        );
    }
    let forbidden = folder.path().join("forbidden").canonicalize().unwrap();
    for refusal in [
        format!("the ceiling allows no grant of {}", forbidden.display()),
        format!(
            "the ceiling allows no grant of {}",
            folder.path().canonicalize().unwrap().display()
        ),
        "the ceiling allows no grant of host variable HOME".to_owned(),
        "the ceiling allows no network grant of http://169.254.169.254:80".to_owned(),
    ] {
        assert!(
            stderr.contains(&refusal),
            "stderr lacks {refusal:?}:\n{stderr}"
        );
    }

    let report = resmux(&[
        "inspect",
        plugins.join("greedy.wasm").to_str().unwrap(),
        "--ceiling",
        policy.to_str().unwrap(),
    ]);
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("ceiling    REFUSED by"), "{report}");
}

#[test]
fn the_ceiling_caps_writes_and_limits_before_anything_is_resolved() {
    let folder = Folder::new();
    folder
        .file("allowed/a.txt", b"a")
        .file("allowed/scratch/b.txt", b"b")
        .file("outside.wasm", b"")
        .file(
            "policy.toml",
            b"directories = [\"allowed\"]\nwritable = [\"allowed/scratch\"]\n[limits]\ntimeout_ms = 20000\n",
        )
        .file("plugins/.keep", b"")
        .file("staging/.keep", b"");
    let plugins = folder.path().join("plugins");
    let fifo = folder.path().join("allowed/pipe");
    resmux_tests::mkfifo(&fifo);
    let mount = |name: &str, manifest: &str| mount_files(&plugins, name, manifest);
    mount(
        "scratcher",
        "[[files]]\nhost = \"../allowed/scratch\"\nguest = \"/data\"\naccess = \"read-write\"\n",
    );
    mount(
        "writer",
        "[[files]]\nhost = \"../allowed\"\nguest = \"/data\"\naccess = \"read-write\"\n",
    );
    // Its grant (the FIFO, granted as a single file) would fail to resolve
    // with another message, and a single file would be staged in TMPDIR,
    // were it resolved before the ceiling refused the manifest.
    mount(
        "hungry",
        "[[files]]\nhost = \"../allowed/pipe\"\nguest = \"/data/pipe\"\n[limits]\ntimeout_ms = 60000\n",
    );
    // Refused by the ceiling before its secret (a FIFO nobody writes) is
    // ever opened.
    mount(
        "piped",
        "[env]\nSECRET = { from_file = \"../allowed/pipe\" }\n",
    );
    std::fs::write(
        plugins.join("outsider.toml"),
        "component = \"../outside.wasm\"\n",
    )
    .unwrap();

    let staging = folder.path().join("staging");
    let output = std::process::Command::new(resmux_tests::resmux_bin())
        .args(["list", "--plugins", plugins.to_str().unwrap(), "--ceiling"])
        .arg(folder.path().join("policy.toml"))
        .env("RESMUX_CACHE_DIR", resmux_tests::cache_dir())
        .env("TMPDIR", &staging)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stdout, "scratcher://b.txt\tb.txt\ttext/plain\t1\n",
        "{stderr}"
    );
    let allowed = folder.path().join("allowed").canonicalize().unwrap();
    for refusal in [
        format!(
            "the ceiling allows no read-write grant of {}",
            allowed.display()
        ),
        "the ceiling allows timeout_ms of at most 20000, not 60000".to_owned(),
        format!(
            "the ceiling allows no grant of secret file {}",
            fifo.canonicalize().unwrap().display()
        ),
        "its component ../outside.wasm lies outside the plugin folder".to_owned(),
    ] {
        assert!(
            stderr.contains(&refusal),
            "stderr lacks {refusal:?}:\n{stderr}"
        );
    }
    assert!(
        !stderr.contains("is neither a directory nor a file"),
        "a refused grant was resolved: {stderr}"
    );
    let staged: Vec<_> = std::fs::read_dir(&staging)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name != ".keep")
        .collect();
    assert!(
        staged.is_empty(),
        "the refused single-file grant was staged: {staged:?}"
    );

    std::fs::write(
        folder.path().join("policy.toml"),
        "[limits]\nmemroy_mib = 1\n",
    )
    .unwrap();
    let (ok, _, stderr) = listing(&[
        "list",
        "--plugins",
        plugins.to_str().unwrap(),
        "--ceiling",
        folder.path().join("policy.toml").to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("caps unknown limit \"memroy_mib\""),
        "{stderr}"
    );
}

#[test]
fn a_pin_is_checked_before_anything_is_compiled() {
    let folder = Folder::new();
    folder
        .file("broken.wasm", b"not a component at all")
        .manifest("broken", &format!("sha256 = \"{}\"\n", "0".repeat(64)))
        .plugin("notes", "notes");
    let (ok, _, stderr) = listing(&["list", "--plugins", folder.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("but the manifest pins 0000")
            && !stderr.contains("not a loadable component"),
        "{stderr}"
    );
}
