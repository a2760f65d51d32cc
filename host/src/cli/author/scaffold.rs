//! `resmux new --lang LANG NAME`: a plugin project that builds with its own
//! `build.sh` (or, on Windows, `build.ps1`) and passes `resmux check`
//! unchanged. It is what every project
//! has (`sdk/new/common/`: the manifest) and the template of its language
//! (`sdk/new/LANG/`), with `{{name}}` replaced in names and text, that
//! language's SDK beside them, and the contract in `wit/`. `{{resmux}}` is
//! the path of the resmux that writes it (`{{resmux-powershell}}` in
//! `build.ps1`): its build script calls that one
//! unless `RESMUX` names another, so it builds whether resmux is on PATH or
//! not.

use std::path::Path;

use anyhow::{Result, bail};
use clap::ValueEnum;

use super::embedded;

/// A language resmux writes projects in.
#[derive(Clone, Copy, ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
    C,
    Go,
}

impl Language {
    /// Where the SDK is embedded, and where it goes in the project.
    fn sdk(self) -> (&'static str, &'static str) {
        match self {
            Self::Rust => ("sdk/src/", "resmux-sdk/src"),
            Self::Python => ("sdk/python/", ""),
            Self::Js => ("sdk/js/", ""),
            Self::C => ("sdk/c/", ""),
            Self::Go => ("sdk/go/", ""),
        }
    }
}

/// Writes the project `name` into `dir` (which must not exist or be empty).
pub fn new_project(language: Language, name: &str, dir: &Path) -> Result<()> {
    check_name(name)?;
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        bail!(
            "{} already exists and is not empty; choose another name or --dir",
            dir.display()
        );
    }
    let resmux = this_resmux();
    let (in_shell, in_powershell) = (shell_quoted(&resmux), powershell_quoted(&resmux));
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{resmux}}", &in_shell)
            .replace("{{resmux-powershell}}", &in_powershell)
    };
    embedded::write_tree("sdk/new/common/", dir, fill)?;
    // Each template's folder is named as its --lang value.
    let lang = language
        .to_possible_value()
        .expect("no language is skipped");
    let template = format!("sdk/new/{}/", lang.get_name());
    embedded::write_tree(&template, dir, fill)?;
    let (sdk, sdk_dir) = language.sdk();
    embedded::write_tree(sdk, &dir.join(sdk_dir), str::to_owned)?;
    super::write_wit(&dir.join("wit"))?;
    make_executable(&dir.join("build.sh"))?;
    let dir = dir.display();
    // On Windows in a process of its own: the script's working folder and
    // variables stay its own, and the default execution policy lets it run.
    let build = if cfg!(windows) {
        format!("powershell -ExecutionPolicy Bypass -File {dir}/build.ps1")
    } else {
        format!("{dir}/build.sh")
    };
    println!(
        "wrote {dir}: build it with {build}, check it with resmux check {dir}/{name}.wasm, \
         or serve it and rebuild on every save with resmux dev {dir}"
    );
    Ok(())
}

/// The path of the running resmux, for `build.sh`; `resmux` (the one on
/// PATH) when it cannot be told or is not UTF-8.
fn this_resmux() -> String {
    std::env::current_exe()
        .and_then(dunce::canonicalize)
        .ok()
        .and_then(|path| path.into_os_string().into_string().ok())
        .unwrap_or_else(|| "resmux".to_owned())
}

/// `text` as one single-quoted PowerShell string.
fn powershell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `text` as one single-quoted shell word.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A name must work as a URI scheme, a file name, and a package name in
/// every language.
fn check_name(name: &str) -> Result<()> {
    let mut characters = name.chars();
    let valid = characters
        .next()
        .is_some_and(|first| first.is_ascii_lowercase())
        && characters.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.len() <= 63
        && !name.ends_with('-');
    if !valid {
        bail!(
            "{name:?} cannot name a plugin: use a lowercase letter, then lowercase letters, \
             digits or '-' (it becomes the URI scheme), at most 63 characters"
        );
    }
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use anyhow::Context;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> Result<()> {
    Ok(())
}
