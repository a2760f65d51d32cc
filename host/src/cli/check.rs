//! `resmux check`: the first command a plugin author runs. It checks a
//! component against the contract and runs it the way the host will: load,
//! start with the manifest's config, then every page of its listing and its
//! templates, and reads of the first resources listed, through the checks
//! the namespace applies to every answer ([`resmux::namespace::answers`]).
//! A plugin that honestly answers `unavailable` (its upstream is down) gets
//! a warning, not a failure: it keeps the contract.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use super::CacheArgs;
use resmux::catalog::Entry;
use resmux::contract::{AnswerLimits, Provider, ProviderError, ResourceEntry, TemplateEntry};
use resmux::namespace::answers::{self, Listable};
use resmux::namespace::cursor::Listing;
use resmux::namespace::promises::Promises;
use resmux::runtime::WasmPlugin;

/// Pages of a listing walked before the check gives up on it ending.
const MAX_PAGES: usize = 1_000;

/// Listed resources the check reads.
const READS: usize = 20;

/// How long what a listing says holds, for the reads the check makes just
/// after it, whatever the listing's own cache hint.
const PROMISED_FOR: Duration = Duration::from_secs(3600);

/// Prints one line per check; fails when any check fails.
pub async fn check(component: &Path, manifest: Option<PathBuf>, cache: CacheArgs) -> Result<()> {
    let mut report = Report::default();
    let entry = match Entry::for_component(component, manifest) {
        Ok(entry) => entry,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    let (manifest, scheme) = (&entry.manifest, entry.scheme.as_str());
    let bytes = match std::fs::read(component) {
        Ok(bytes) => bytes,
        Err(error) => return report.fail(format!("cannot read {}: {error}", component.display())),
    };
    let (policy, config) = match (
        manifest.policy(entry.manifest_dir()),
        manifest.config_pairs(),
    ) {
        (Ok(policy), Ok(config)) => (policy, config),
        (Err(error), _) | (_, Err(error)) => return report.fail(format!("manifest: {error:#}")),
    };
    let runtime = cache.runtime()?.with_stack(policy.limits.stack_kib)?;
    let compiled = match runtime.compile(&bytes, manifest.sha256.as_deref()) {
        Ok(compiled) => compiled,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    report.pass(format!(
        "a component of {} bytes, sha256 {}",
        bytes.len(),
        compiled.digest
    ));
    let plugin = match runtime.plugin(scheme, &compiled.component, policy, config) {
        Ok(plugin) => plugin,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    report.pass("exports resmux:provider/provider@0.1.0 and imports only what resmux provides");
    match plugin.about().await {
        Ok(info) => report.pass(format!(
            "about: {} {}: {}",
            info.name, info.version, info.description
        )),
        Err(error) => report.record(Err(format!("about: {error}"))),
    }
    match plugin.start().await {
        Ok(()) => report.pass("init accepts the manifest's config"),
        Err(error) => return report.fail(format!("init: {error}")),
    }
    let limits = manifest.limits.answers;
    let promises = Promises::default();
    let resources = walk::<ResourceEntry>(&plugin, scheme, &limits, &promises).await;
    let listed = match resources {
        Ok((resources, pages)) => {
            report.pass(format!(
                "list: {} valid resources on {pages} page(s)",
                resources.len()
            ));
            resources
        }
        Err(problem) => {
            report.problem(problem);
            Vec::new()
        }
    };
    match walk::<TemplateEntry>(&plugin, scheme, &limits, &promises).await {
        Ok((templates, pages)) => report.pass(format!(
            "templates: {} valid templates on {pages} page(s)",
            templates.len()
        )),
        Err(problem) => report.problem(problem),
    }
    for resource in listed.iter().take(READS) {
        let path = &resource.uri[scheme.len() + "://".len()..];
        let read = match plugin.read(path).await {
            Ok(read) => answers::check_read(scheme, read, &limits, &promises)
                .map_err(|reason| Problem::Broken(format!("read {}: {reason}", resource.uri))),
            Err(error) => Err(Problem::of(format!("read {}", resource.uri), error)),
        };
        match read {
            Ok(read) => report.pass(format!(
                "read {}: {} bytes",
                resource.uri,
                read.byte_count()
            )),
            Err(problem) => report.problem(problem),
        }
    }
    report.finish()
}

/// What a check found wrong.
enum Problem {
    /// The plugin answered that something it needs is unavailable: it keeps
    /// the contract, but cannot serve now.
    Unavailable(String),
    /// The plugin broke the contract, or failed.
    Broken(String),
}

impl Problem {
    /// The problem of a call about `what` that answered `error`.
    fn of(what: String, error: ProviderError) -> Self {
        match error {
            ProviderError::Unavailable(_) => Self::Unavailable(format!("{what}: {error}")),
            error => Self::Broken(format!("{what}: {error}")),
        }
    }
}

/// Walks every page of one listing, admitting each page and entry as the
/// namespace would under `limits`, and holding the listing to what it says
/// of each resource for [`PROMISED_FOR`]; returns the entries and pages seen,
/// or what was wrong.
async fn walk<T: Listable>(
    plugin: &WasmPlugin,
    scheme: &str,
    limits: &AnswerLimits,
    promises: &Promises,
) -> Result<(Vec<T::Admitted>, usize), Problem> {
    let kind = match T::LISTING {
        Listing::Resources => "resource",
        Listing::Templates => "template",
    };
    let mut cursor = None;
    let mut entries = Vec::new();
    for pages in 1..=MAX_PAGES {
        let page = T::fetch(plugin as &dyn Provider, cursor.clone())
            .await
            .map_err(|error| Problem::of(format!("{kind} page {pages}"), error))?;
        let admitted = answers::admit_page(scheme, page, cursor.as_deref(), limits, promises)
            .map_err(|reason| Problem::Broken(format!("{kind} page {pages}: {reason}")))?;
        if let Some(reason) = admitted
            .refused
            .first()
            .map(String::as_str)
            .or(admitted.stopped)
        {
            return Err(Problem::Broken(format!("{kind} page {pages}: {reason}")));
        }
        for entry in admitted.page.items {
            T::promise(&entry, promises, PROMISED_FOR);
            entries.push(entry);
        }
        match admitted.page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok((entries, pages)),
        }
    }
    Err(Problem::Broken(format!(
        "{kind} listing did not end within {MAX_PAGES} pages"
    )))
}

#[derive(Default)]
struct Report {
    passed: usize,
    warned: usize,
    failed: usize,
}

impl Report {
    fn record(&mut self, outcome: Result<String, String>) {
        let mut out = std::io::stdout().lock();
        let _ = match outcome {
            Ok(line) => {
                self.passed += 1;
                writeln!(out, "ok    {line}")
            }
            Err(line) => {
                self.failed += 1;
                writeln!(out, "FAIL  {line}")
            }
        };
    }

    fn pass(&mut self, line: impl Into<String>) {
        self.record(Ok(line.into()));
    }

    fn problem(&mut self, problem: Problem) {
        match problem {
            Problem::Broken(line) => self.record(Err(line)),
            Problem::Unavailable(line) => {
                self.warned += 1;
                println!(
                    "WARN  {line} (not a contract failure: it cannot serve until that is back)"
                );
            }
        }
    }

    /// Records a failure that ends the check.
    fn fail(mut self, line: String) -> Result<()> {
        self.record(Err(line));
        self.finish()
    }

    fn finish(self) -> Result<()> {
        println!(
            "{} passed, {} warnings, {} failed",
            self.passed, self.warned, self.failed
        );
        if self.failed > 0 {
            anyhow::bail!("the component does not meet the contract");
        }
        Ok(())
    }
}
