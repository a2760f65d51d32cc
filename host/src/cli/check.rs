//! `resmux check`: the first command a plugin author runs. It checks a
//! component against the contract and calls every export the way the host
//! will: load, start with the manifest's config, every page of its listing
//! and its templates, reads of the resources listed (all of them, or an
//! even sample), completion of every template argument (with nothing typed,
//! then with a prefix), and two change reports, the second since the
//! first. Every answer goes through the checks the namespace applies
//! ([`resmux::namespace::answers`]), and each read is held to what the
//! listing said of it. A fault's line carries the plugin's last line on
//! stderr (an uncaught exception, a panic message). A plugin that honestly
//! answers `unavailable` (its upstream is down) gets a warning, not a
//! failure: it keeps the contract.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use resmux::catalog::{Entry, Rules, locate};
use resmux::contract::{
    AnswerLimits, CompletionRequest, Provider, ProviderError, ResourceEntry, TemplateEntry,
};
use resmux::namespace::answers::{self, Listable};
use resmux::namespace::cursor::Listing;
use resmux::namespace::promises::Promises;
use resmux::namespace::{Resource, Template};
use resmux::operator_file::{self, MOST_COMPONENT_BYTES};
use resmux::runtime::{Runtime, WasmPlugin};

/// Pages of a listing walked before the check gives up on it ending.
const MAX_PAGES: usize = 1_000;

/// How long what a listing says holds, for the reads the check makes just
/// after it, whatever the listing's own cache hint.
const PROMISED_FOR: Duration = Duration::from_secs(3600);

/// Prints one line per check to `out`; fails when any check fails. Reads
/// at most `reads` of the listed resources.
pub async fn check(
    component: &Path,
    manifest: Option<PathBuf>,
    runtime: &Runtime,
    reads: usize,
    out: Box<dyn Write + Send>,
) -> Result<()> {
    let mut report = Report::new(out);
    let entry = match Entry::for_component(component, manifest) {
        Ok(entry) => entry,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    let (manifest, scheme) = (&entry.manifest, entry.scheme.as_str());
    // A manifest naming an `oci` component is checked on the component
    // pulled and verified as `serve` would, without a ceiling.
    let located = match locate(runtime, &entry, &Rules::default()).await {
        Ok(located) => located,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    let bytes = match operator_file::read_bytes(&located.path, MOST_COMPONENT_BYTES, "component") {
        Ok((bytes, _)) => bytes,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    let (grants, config) = match (
        manifest.grants(entry.manifest_dir()),
        manifest.config_pairs(),
    ) {
        (Ok(grants), Ok(config)) => (grants, config),
        (Err(error), _) | (_, Err(error)) => return report.fail(format!("manifest: {error:#}")),
    };
    let runtime = runtime.with_stack(grants.limits.stack_kib)?;
    let compiled = match runtime.compile(&bytes, located.pin.as_deref()) {
        Ok(compiled) => compiled,
        Err(error) => return report.fail(format!("{error:#}")),
    };
    report.pass(format!(
        "a component of {} bytes, sha256 {}",
        bytes.len(),
        compiled.digest
    ));
    let plugin = match runtime.plugin(scheme, &compiled, grants, config) {
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
        // The runtime says why the plugin cannot serve; the author needs
        // what init answered.
        Err(ProviderError::Unavailable(why)) => return report.fail(format!("init: {why}")),
        Err(error) => return report.fail(format!("init: {error}")),
    }
    let limits = manifest.limits.answers;
    let promises = Promises::default();
    let listed = match walk::<ResourceEntry>(&plugin, scheme, &limits, &promises).await {
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
    let templates = match walk::<TemplateEntry>(&plugin, scheme, &limits, &promises).await {
        Ok((templates, pages)) => {
            report.pass(format!(
                "templates: {} valid templates on {pages} page(s)",
                templates.len()
            ));
            templates
        }
        Err(problem) => {
            report.problem(problem);
            Vec::new()
        }
    };
    read_sample(
        &plugin,
        scheme,
        &listed,
        reads,
        &limits,
        &promises,
        &mut report,
    )
    .await;
    for template in &templates {
        complete_arguments(&plugin, template, &limits, &mut report).await;
    }
    report_changes(&plugin, scheme, &limits, &mut report).await;
    report.finish()
}

/// Reads `reads` of the `listed` resources (all of them when there are no
/// more), spread evenly over the listing.
async fn read_sample(
    plugin: &WasmPlugin,
    scheme: &str,
    listed: &[Resource],
    reads: usize,
    limits: &AnswerLimits,
    promises: &Promises,
    report: &mut Report,
) {
    let sample = listed.len().min(reads);
    if sample < listed.len() {
        report.note(format!(
            "reading {sample} of the {} resources listed (--reads)",
            listed.len()
        ));
    }
    for index in 0..sample {
        let resource = &listed[index * listed.len() / sample];
        let read = match plugin.read(resource.uri.path()).await {
            Ok(read) => answers::admit_read(scheme, read, limits, promises)
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
}

/// Completes each argument of `template` with nothing typed, then with the
/// first letter of the first value offered (or `a`).
async fn complete_arguments(
    plugin: &WasmPlugin,
    template: &Template,
    limits: &AnswerLimits,
    report: &mut Report,
) {
    let uri_template = &template.uri_template;
    for argument in uri_template.variables() {
        let request = |typed: &str| CompletionRequest {
            path_template: uri_template.path().to_owned(),
            argument: argument.to_owned(),
            value: typed.to_owned(),
            context: Vec::new(),
        };
        let Some(offered) = complete_once(plugin, template, request(""), limits, report).await
        else {
            continue;
        };
        let first = offered.first().and_then(|value| value.chars().next());
        let prefix = first.unwrap_or('a').to_string();
        complete_once(plugin, template, request(&prefix), limits, report).await;
    }
}

/// One completion, reported; returns the values offered. A plugin may
/// decline an argument with `invalid-input`; any other error fails.
async fn complete_once(
    plugin: &WasmPlugin,
    template: &Template,
    request: CompletionRequest,
    limits: &AnswerLimits,
    report: &mut Report,
) -> Option<Vec<String>> {
    let what = format!(
        "complete {} {} from {:?}",
        template.uri_template, request.argument, request.value
    );
    let admitted = match plugin.complete(request).await {
        Ok(completion) => answers::admit_completion(completion, limits),
        Err(ProviderError::InvalidInput(reason)) => {
            report.pass(format!("{what}: declined ({reason})"));
            return None;
        }
        Err(error) => {
            report.problem(Problem::of(what, error));
            return None;
        }
    };
    let values = admitted.value.values;
    match admitted.refused.first() {
        Some(reason) => report.problem(Problem::Broken(format!("{what}: {reason}"))),
        None => report.pass(format!("{what}: {}", shown(&values))),
    }
    Some(values)
}

/// Up to five values, quoted.
fn shown(values: &[String]) -> String {
    let mut text = values
        .iter()
        .take(5)
        .map(|value| format!("{value:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if values.len() > 5 {
        text.push_str(&format!(" and {} more", values.len() - 5));
    }
    format!("{} value(s) {text}", values.len())
}

/// Asks for a first change report, then for what changed since it. A
/// plugin that reports no changes (`unavailable`, the SDKs' default) keeps
/// the contract: its subscribers just hear of no updates.
async fn report_changes(
    plugin: &WasmPlugin,
    scheme: &str,
    limits: &AnswerLimits,
    report: &mut Report,
) {
    let admit = |answer| {
        answers::admit_changes(scheme, answer, limits).and_then(|admitted| {
            match admitted.refused.into_iter().next() {
                Some(reason) => Err(reason),
                None => Ok(admitted.value),
            }
        })
    };
    let first = match plugin.changes(None).await.map(admit) {
        Ok(Ok(first)) => first,
        Ok(Err(reason)) => return report.problem(Problem::Broken(format!("changes: {reason}"))),
        Err(error @ ProviderError::Unavailable(_)) => {
            return report.note(format!(
                "changes: {error} (subscribers will hear of no updates)"
            ));
        }
        Err(error) => return report.problem(Problem::of("changes".into(), error)),
    };
    report.pass(format!("changes: token {:?}", first.token));
    let what = format!("changes since {:?}", first.token);
    match plugin.changes(Some(first.token)).await.map(admit) {
        Ok(Err(reason)) => report.problem(Problem::Broken(format!("{what}: {reason}"))),
        Ok(Ok(since)) => report.pass(format!(
            "{what}: token {:?}, listing {}, {} changed path(s)",
            since.token,
            if since.listing_changed {
                "changed"
            } else {
                "unchanged"
            },
            since.changed_uris.len()
        )),
        Err(error) => report.problem(Problem::of(what, error)),
    }
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

/// What the check found so far, and where it prints it.
struct Report {
    out: Box<dyn Write + Send>,
    passed: usize,
    warned: usize,
    failed: usize,
}

impl Report {
    fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out,
            passed: 0,
            warned: 0,
            failed: 0,
        }
    }

    fn line(&mut self, tag: &str, line: &str) {
        let _ = writeln!(self.out, "{tag:<5} {line}");
    }

    fn record(&mut self, outcome: Result<String, String>) {
        match outcome {
            Ok(line) => {
                self.passed += 1;
                self.line("ok", &line);
            }
            Err(line) => {
                self.failed += 1;
                self.line("FAIL", &line);
            }
        }
    }

    fn pass(&mut self, line: impl Into<String>) {
        self.record(Ok(line.into()));
    }

    /// A line that is neither a pass nor a failure.
    fn note(&mut self, line: String) {
        self.line("note", &line);
    }

    fn problem(&mut self, problem: Problem) {
        match problem {
            Problem::Broken(line) => self.record(Err(line)),
            Problem::Unavailable(line) => {
                self.warned += 1;
                self.line(
                    "WARN",
                    &format!("{line} (not a contract failure: it cannot serve until that is back)"),
                );
            }
        }
    }

    /// Records a failure that ends the check.
    fn fail(mut self, line: String) -> Result<()> {
        self.record(Err(line));
        self.finish()
    }

    fn finish(mut self) -> Result<()> {
        let summary = format!(
            "{} passed, {} warnings, {} failed",
            self.passed, self.warned, self.failed
        );
        let _ = writeln!(self.out, "{summary}");
        let _ = self.out.flush();
        if self.failed > 0 {
            anyhow::bail!("the component does not meet the contract");
        }
        Ok(())
    }
}
