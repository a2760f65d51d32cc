//! Locked-down deployments: digest pins, `--locked`, and the operator policy
//! that caps what any manifest may grant.

use resmux_tests::{Folder, resmux};

fn digest_of(component: &std::path::Path) -> String {
    let report = resmux(&["inspect", component.to_str().unwrap()]);
    String::from_utf8(report.stdout)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("sha256     "))
        .expect("inspect prints the digest")
        .to_owned()
}

fn listing(args: &[&str]) -> (bool, String, String) {
    let output = resmux(args);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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
    let (ok, _, stderr) = listing(&["list", "--plugins", plugins, "--policy", policy]);
    assert!(
        !ok && stderr.contains("locked mode refuses to start: 1 plugin(s)"),
        "the policy file's locked = true was not applied: {stderr}"
    );
}

#[test]
fn the_operator_policy_caps_every_grant() {
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
    let grant = |name: &str, manifest: &str| {
        std::fs::copy(
            resmux_tests::component("files"),
            plugins.join(format!("{name}.wasm")),
        )
        .unwrap();
        std::fs::write(plugins.join(format!("{name}.toml")), manifest).unwrap();
    };
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
        "--policy",
        policy.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "good://a.txt\ta.txt\ttext/plain\t1\n");
    let forbidden = folder.path().join("forbidden").canonicalize().unwrap();
    for refusal in [
        format!(
            "the operator policy allows no grant of {}",
            forbidden.display()
        ),
        format!(
            "the operator policy allows no grant of {}",
            folder.path().canonicalize().unwrap().display()
        ),
        "the operator policy allows no grant of host variable HOME".to_owned(),
        "the operator policy allows no network grant of http://169.254.169.254:80".to_owned(),
    ] {
        assert!(
            stderr.contains(&refusal),
            "stderr lacks {refusal:?}:\n{stderr}"
        );
    }

    let report = resmux(&[
        "inspect",
        plugins.join("greedy.wasm").to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ]);
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("ceiling    REFUSED by"), "{report}");
}
