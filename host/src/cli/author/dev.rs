//! `resmux dev DIR`: the loop of a plugin author at work. It builds the
//! project with its own build script ([`BUILD_SCRIPT`]), serves the project folder as a plugin
//! folder (so the catalog's watcher reloads `NAME.wasm` live when a build
//! replaces it), and rebuilds and checks the project whenever one of its
//! sources is saved. Build output and check results go to stderr, so that
//! stdout stays the protocol's when serving stdio.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::cli::serve::Serve;
use crate::cli::{CacheArgs, DEFAULT_READS, check};
use resmux::runtime::{Runtime, Tiers};

/// Quiet time after the last save before a build starts.
const SETTLE: Duration = Duration::from_millis(300);

/// What a build writes or fetches; a change there is no edit of a source.
const NOT_SOURCES: &[&str] = &[
    "build",
    "wit",
    "target",
    "node_modules",
    "__pycache__",
    "Cargo.lock",
    "package-lock.json",
    "go.sum",
];

/// The build script `resmux dev` runs: `build.ps1` (by PowerShell) on
/// Windows, `build.sh` elsewhere.
const BUILD_SCRIPT: &str = if cfg!(windows) {
    "build.ps1"
} else {
    "build.sh"
};

pub async fn dev(dir: &Path, http: Option<std::net::SocketAddr>, cache: CacheArgs) -> Result<()> {
    let dir = dunce::canonicalize(dir)
        .with_context(|| format!("cannot open the project folder {}", dir.display()))?;
    let script = dir.join(BUILD_SCRIPT);
    if !script.is_file() {
        bail!(
            "{} has no {BUILD_SCRIPT}: run resmux dev in a project that resmux new wrote",
            dir.display()
        );
    }
    // One runtime for the server and the checks: a build is compiled
    // once, and shared.
    let runtime = cache.runtime(Tiers::Both)?;
    build_and_check(&dir, &script, &runtime).await;

    let (saved, mut saves) = mpsc::unbounded_channel();
    let watched = dir.clone();
    // Reads are no edit: the build itself reads every source.
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && resmux::catalog::folder_watch::is_change(&event)
            && event.paths.iter().any(|path| is_source(&watched, path))
        {
            // The receiver only goes away when the process ends.
            let _ = saved.send(());
        }
    })
    .context("cannot start watching the project")?;
    watcher
        .watch(&dir, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    let builder_runtime = runtime.clone();
    let (project, builder_script) = (dir.clone(), script.clone());
    tokio::spawn(async move {
        let _watcher = watcher;
        while saves.recv().await.is_some() {
            // An editor's save is several writes; saves made during a build
            // are covered by the next one.
            tokio::time::sleep(SETTLE).await;
            while saves.try_recv().is_ok() {}
            build_and_check(&project, &builder_script, &builder_runtime).await;
        }
    });

    Serve::for_project(&dir, http)?
        .serve_on(Some(runtime))
        .await
}

/// Whether a change at `path` is an edit of the project's sources.
fn is_source(dir: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(dir) else {
        return false;
    };
    let hidden_or_built = relative.components().any(|component| {
        let name = component.as_os_str().to_string_lossy();
        name.starts_with('.') || NOT_SOURCES.contains(&name.as_ref())
    });
    let name = relative.to_string_lossy();
    !hidden_or_built && !name.ends_with(".wasm") && !name.ends_with('~') && !name.is_empty()
}

/// Runs the build script (its output to stderr), then checks every
/// component the project folder holds.
async fn build_and_check(dir: &Path, script: &Path, runtime: &Runtime) {
    eprintln!("resmux dev: building {}", dir.display());
    if let Err(error) = build(dir, script).await {
        eprintln!("resmux dev: {error:#}; still serving the last build");
        return;
    }
    for component in components(dir) {
        eprintln!("resmux dev: checking {}", component.display());
        let stderr = Box::new(std::io::stderr());
        if let Err(error) = check::check(&component, None, runtime, DEFAULT_READS, stderr).await {
            eprintln!(
                "resmux dev: {}: {error:#}; it is served all the same, until the next build",
                component.display()
            );
        }
    }
}

async fn build(dir: &Path, script: &Path) -> Result<()> {
    let resmux = std::env::current_exe().context("cannot find the resmux binary")?;
    let stdout = stderr_for_child().context("cannot pass stderr to the build")?;
    let status = script_command(script)
        .current_dir(dir)
        .env("RESMUX", resmux)
        .stdin(Stdio::null())
        .stdout(stdout)
        .status()
        .await
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

/// The components directly in `dir`, in name order.
fn components(dir: &Path) -> Vec<PathBuf> {
    let mut components: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "wasm")
        })
        .collect();
    components.sort();
    components
}

/// A copy of resmux's stderr, to be a child's stdout.
fn stderr_for_child() -> std::io::Result<Stdio> {
    #[cfg(unix)]
    let owned = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned()?;
    #[cfg(windows)]
    let owned =
        std::os::windows::io::AsHandle::as_handle(&std::io::stderr()).try_clone_to_owned()?;
    Ok(Stdio::from(owned))
}

/// The command that runs `script` ([`BUILD_SCRIPT`]) in its own folder:
/// through PowerShell on Windows, itself elsewhere.
fn script_command(script: &Path) -> tokio::process::Command {
    if cfg!(windows) {
        let name = script.file_name().unwrap_or(script.as_os_str());
        let mut command = tokio::process::Command::new("powershell");
        command
            .args(["-NoProfile", "-ExecutionPolicy", "Bypass", "-File"])
            .arg(name);
        command
    } else {
        tokio::process::Command::new(script)
    }
}
