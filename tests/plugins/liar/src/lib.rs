//! `liar`: a test plugin that breaks the contract on purpose. It lists some
//! entries that are fine and some that are not, and answers reads with URIs in
//! another plugin's scheme, malformed MIME types or no contents at all, and
//! prints to stdout and stderr, fetches URLs (following redirects), opens TCP
//! connections, resolves names, reaches for files and environment variables
//! it may not have, floods its output, spins (in reads, or in every listing
//! when configured so), hands out endless cursors, sleeps, hoards memory and
//! open files, returns
//! endless error text, recurses without end, panics, and poisons its own
//! instance before it traps (and, for benches, answers `bytes/N` honestly
//! with N bytes of text it makes). It describes itself with markup that
//! holds script, and its entries with whatever text it is configured to. It locates resources in files it was not
//! granted, behind symlinks, in FIFOs and in files too large for it. The
//! host must pass on only what is valid, keep what it prints out of the
//! protocol stream, let it reach only what it was granted, and never call an
//! instance again after it trapped.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "resmux:provider/locating-plugin",
});

use exports::resmux::provider::locate::{Guest as Locate, Located};
use exports::resmux::provider::provider::Guest;
use resmux::provider::types::{
    Body, CacheHint, CacheScope, ChangeReport, Completion, CompletionRequest, Content, Error,
    PluginInfo, ReadResult, Resource, ResourcePage, Template, TemplatePage,
};

struct Liar;

/// Where `liar://fetch` sends its request: config key `fetch`, a URL.
static FETCH_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// Where `liar://connect` opens a TCP connection and what `liar://lookup`
/// resolves: config key `connect`, `host:port`.
static CONNECT_TO: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// How listing misbehaves: config key `list`, `spin` (for ever) or
/// `long-cursor` (a 100 000-byte cursor); or behaves, and tells on stderr
/// each time it is asked for a page: `pages/TOTAL/SIZE` lists `p0000` and
/// on, `SIZE` to a page. `hostile/KIND` answers honestly but for one kind
/// of answer, which breaks the contract ([`hostile`]).
static LIST_MODE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// What the plugin says it is (`about` runs before `init`, so this is no
/// config key): markup with script, which a console must show as text.
const ABOUT: &str = "Breaks the contract on purpose, for tests \
    <script>window.pwned = 1; document.title = \"pwned\"</script><img src=x onerror=\"window.pwned = 2\">";
/// What its listed entries say they are: config key `describe`.
static DESCRIBE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// The path template `list = "hostile/template"` lists beside an honest
/// one: config key `template`.
static TEMPLATE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// Reads this instance has served, which `liar://count` tells.
static READS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Files `liar://keep-open/N/PATH` opened and keeps open between calls.
static KEPT_OPEN: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
/// Handles `liar://stash/...` keeps for later calls on this instance, to act
/// through them once the operator moved what they name out of the grant.
static STASHED: std::sync::Mutex<Option<Stashed>> = std::sync::Mutex::new(None);
/// Set by `liar://poison` just before it traps; `liar://count` tells it.
static POISONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Locate for Liar {
    /// `liar://located/FILE` is located at the guest path `/FILE` as written
    /// (`~` stands for `..`, which a URI would resolve away), whatever it
    /// is; `liar://locate-spin` spins in `locate`, and
    /// `liar://locate-open/FILE` opens `/FILE` there (a FIFO nobody writes
    /// stalls it); the rest goes to `read`.
    fn locate(path: String) -> Result<Option<Located>, Error> {
        if path == "locate-spin" {
            loop {
                std::hint::black_box(());
            }
        }
        if let Some(file) = path.strip_prefix("locate-open/") {
            let opened = std::fs::File::open(format!("/{file}"));
            return Err(Error::Internal(format!("opened: {}", opened.is_ok())));
        }
        Ok(path.strip_prefix("located/").map(|file| Located {
            file: format!("/{}", file.replace('~', "..")),
            mime_type: Some("text/plain".into()),
            text: true,
            cache: None,
        }))
    }
}

impl Guest for Liar {
    fn about() -> PluginInfo {
        PluginInfo {
            name: "liar".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: ABOUT.into(),
        }
    }

    fn init(config: Vec<(String, String)>) -> Result<(), Error> {
        for (key, value) in config {
            match key.as_str() {
                "fetch" => drop(FETCH_URL.set(value)),
                "connect" => drop(CONNECT_TO.set(value)),
                "list" => drop(LIST_MODE.set(value)),
                "describe" => drop(DESCRIBE.set(value)),
                "template" => drop(TEMPLATE.set(value)),
                _ => {}
            }
        }
        Ok(())
    }

    fn list(cursor: Option<String>) -> Result<ResourcePage, Error> {
        if let Some(kind) = hostile() {
            let mut resources = vec![resource("honest", Some("text/plain"))];
            if kind == "page" {
                resources.push(resource("with space", None));
            }
            return Ok(ResourcePage {
                resources,
                next_cursor: None,
                cache: None,
            });
        }
        match LIST_MODE.get().map(String::as_str) {
            Some("spin") => loop {
                std::hint::black_box(());
            },
            Some("long-cursor") => {
                return Ok(ResourcePage {
                    resources: vec![resource("honest", None)],
                    next_cursor: Some("c".repeat(100_000)),
                    cache: None,
                });
            }
            Some(mode) if mode.starts_with("pages/") => return pages(mode, cursor),
            // A valid listing whose reads then break what it promised.
            Some("promises") => {
                return Ok(ResourcePage {
                    resources: vec![
                        resource("honest", Some("text/plain")),
                        Resource {
                            size: Some(5),
                            ..resource("grows", Some("text/plain"))
                        },
                    ],
                    next_cursor: None,
                    cache: None,
                });
            }
            _ => {}
        }
        // After the first page, every page is the same and hands back the
        // cursor it was given: a listing that never ends.
        if cursor.is_some() {
            return Ok(ResourcePage {
                resources: vec![resource("again", None)],
                next_cursor: cursor,
                cache: None,
            });
        }
        Ok(ResourcePage {
            resources: vec![
                resource("honest", None),
                resource("test://static-text", None),
                resource("bad-mime", Some("not a mime type")),
                resource("with space", None),
                Resource {
                    size: Some(5),
                    ..resource("grows", Some("text/plain"))
                },
                resource("retyped", Some("text/plain")),
                Resource {
                    description: Some("blah ".repeat(20_000)),
                    ..resource("wordy", None)
                },
            ],
            next_cursor: Some("forever".into()),
            // The listing vouches for sizes and types for a minute.
            cache: Some(CacheHint {
                ttl_ms: 60_000,
                scope: CacheScope::Public,
            }),
        })
    }

    fn templates(_cursor: Option<String>) -> Result<TemplatePage, Error> {
        if hostile().is_some() || LIST_MODE.get().is_some_and(|mode| mode == "promises") {
            let mut templates = vec![template("item/{id}")];
            if hostile() == Some("template") {
                templates.extend(TEMPLATE.get().map(|path| template(path)));
            }
            return Ok(TemplatePage {
                templates,
                next_cursor: None,
                cache: None,
            });
        }
        Ok(TemplatePage {
            templates: vec![
                template("item/{id}"),
                template("broken/{id"),
                template("x/{a b}"),
            ],
            next_cursor: None,
            cache: None,
        })
    }

    fn read(path: String) -> Result<ReadResult, Error> {
        let served = READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let content = |path: &str, mime_type: &str| Content {
            path: path.into(),
            mime_type: Some(mime_type.into()),
            body: Body::Text("a lie".into()),
            meta: None,
        };
        if hostile() == Some("read") {
            return Ok(ReadResult {
                contents: vec![content("other://x", "text/plain")],
                cache: None,
            });
        }
        if let Some(file) = path.strip_prefix("located/") {
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(format!("read by the plugin, not the host: {file}"));
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(outcome) = probe(&path) {
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(outcome);
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(count) = path
            .strip_prefix("bytes/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            // Honest, for benches: `count` bytes of text made in the plugin,
            // with the least work a plugin can make them with (one fill of
            // linear memory), so that the bench weighs the sandbox.
            let mut answer = content(&path, "text/plain");
            // SAFETY: every byte is b'a', which is ASCII.
            answer.body = Body::Text(unsafe { String::from_utf8_unchecked(vec![b'a'; count]) });
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(mib) = path
            .strip_prefix("huge/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            let mut answer = content(&path, "application/octet-stream");
            answer.body = Body::Blob(vec![7; mib << 20]);
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(bytes) = path
            .strip_prefix("long-error/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            return Err(Error::Internal("e".repeat(bytes)));
        }
        if let Some((count, target)) = path
            .strip_prefix("hoard/")
            .and_then(|rest| rest.split_once('/'))
        {
            // Opens one file again and again and keeps every handle.
            let count: usize = count.parse().unwrap_or(0);
            let mut hoard = Vec::new();
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(loop {
                if hoard.len() == count {
                    break format!("held {count} files");
                }
                match std::fs::File::open(target) {
                    Ok(file) => hoard.push(file),
                    Err(error) => break format!("error after {}: {:?}", hoard.len(), error.kind()),
                }
            });
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some((count, target)) = path
            .strip_prefix("keep-open/")
            .and_then(|rest| rest.split_once('/'))
        {
            // Opens one file N more times and keeps every handle for later
            // calls on this instance.
            let mut kept = KEPT_OPEN
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            for _ in 0..count.parse().unwrap_or(0) {
                match std::fs::File::open(target) {
                    Ok(file) => kept.push(file),
                    Err(error) => return Err(Error::Internal(format!("{:?}", error.kind()))),
                }
            }
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(format!("{} files kept open", kept.len()));
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(rest) = path.strip_prefix("stash/") {
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(stash(rest));
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(rest) = path.strip_prefix("through-stash/") {
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(through_stash(rest));
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(scope) = path.strip_prefix("random/") {
            // A fresh number on every call, cacheable for a minute: a cached
            // answer shows as a repeated number.
            let scope = match scope {
                "private" => CacheScope::Private,
                _ => CacheScope::Public,
            };
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(random_number().to_string());
            return Ok(ReadResult {
                contents: vec![answer],
                cache: Some(CacheHint {
                    ttl_ms: 60_000,
                    scope,
                }),
            });
        }
        if let Some(millis) = path.strip_prefix("sleep/").and_then(|n| n.parse().ok()) {
            std::thread::sleep(std::time::Duration::from_millis(millis));
            return Ok(ReadResult {
                contents: vec![content(&path, "text/plain")],
                cache: None,
            });
        }
        if let Some(bytes) = path
            .strip_prefix("random-bytes/")
            .and_then(|n| n.parse().ok())
        {
            // One draw of host randomness, as large as asked.
            let drawn = wasi::random::random::get_random_bytes(bytes);
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(format!("drew {}", drawn.len()));
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        if let Some(depth) = path.strip_prefix("recurse/").and_then(|n| n.parse().ok()) {
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(format!("depth {}", descend(depth)));
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
        let contents = match path.as_str() {
            "honest" => {
                // Output a plugin prints must end up in the host's log only.
                println!("liar says hello on stdout");
                eprintln!("liar says hello on stderr");
                vec![content("honest", "text/plain")]
            }
            "other-scheme" => vec![content("test://static-text", "text/plain")],
            "grows" => {
                let mut grown = content("grows", "text/plain");
                grown.body = Body::Text("a lie that grew".into());
                vec![grown]
            }
            "retyped" => vec![content("retyped", "image/png")],
            "bad-mime" => vec![content("bad-mime", "not a mime type")],
            "bad-meta" => vec![Content {
                meta: Some("[1, 2]".into()),
                ..content("bad-meta", "text/plain")
            }],
            "empty" => Vec::new(),
            "spin" => loop {
                std::hint::black_box(());
            },
            "panic" => panic!("the liar panics"),
            "count" => {
                let poisoned = POISONED.load(std::sync::atomic::Ordering::Relaxed);
                let mut answer = content("count", "text/plain");
                answer.body = Body::Text(format!(
                    "read {served} of this instance{}",
                    if poisoned { ", which is poisoned" } else { "" }
                ));
                vec![answer]
            }
            "poison" => {
                POISONED.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("the liar poisons its instance")
            }
            "hog" => {
                let hoard = vec![1u8; 1 << 30];
                vec![content(&format!("hog {}", hoard.len()), "text/plain")]
            }
            "recurse" => vec![content(&format!("depth {}", recurse(0)), "text/plain")],
            "random-loop" => loop {
                // Host randomness, as much as a call may draw at once,
                // until the call's time is up.
                std::hint::black_box(wasi::random::random::get_random_bytes(1 << 20));
            },
            "fill" => {
                // One `memory.fill` over 224 MiB of fresh memory: a single
                // instruction that no epoch tick interrupts.
                let size = 224 << 20;
                let mut fresh: Vec<u8> = Vec::with_capacity(size);
                unsafe {
                    std::ptr::write_bytes(fresh.as_mut_ptr(), 0xa5, size);
                    fresh.set_len(size);
                }
                let mut answer = content("fill", "text/plain");
                answer.body = Body::Text(format!("filled {}", std::hint::black_box(&fresh).len()));
                vec![answer]
            }
            "flood" => {
                let line = "x".repeat(1023);
                for _ in 0..10 * 1024 {
                    println!("{line}");
                    eprintln!("{line}");
                }
                vec![content("flood", "text/plain")]
            }
            "chatter" => {
                // Many short lines: 64 KiB of them is thousands of log lines.
                for line in 0..20_000 {
                    eprintln!("chatter {line}");
                }
                vec![content("chatter", "text/plain")]
            }
            "flood-streams" => {
                // The same flood, each line through a stream handle of its own.
                let line = format!("{}\n", "y".repeat(1023));
                for _ in 0..10 * 1024 {
                    let _ =
                        wasi::cli::stdout::get_stdout().blocking_write_and_flush(line.as_bytes());
                    let _ =
                        wasi::cli::stderr::get_stderr().blocking_write_and_flush(line.as_bytes());
                }
                vec![content("flood-streams", "text/plain")]
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                vec![content("sleep", "text/plain")]
            }
            "connect" | "lookup" => {
                let mut answer = content(&path, "text/plain");
                answer.body = Body::Text(socket_probe(&path));
                vec![answer]
            }
            "fetch" => {
                let mut answer = content("fetch", "text/plain");
                answer.body = Body::Text(fetch(
                    FETCH_URL
                        .get()
                        .map_or("http://127.0.0.1:9/", String::as_str),
                ));
                vec![answer]
            }
            _ => return Err(Error::NotFound(format!("no lie at {path:?}"))),
        };
        Ok(ReadResult {
            contents,
            cache: None,
        })
    }

    fn complete(request: CompletionRequest) -> Result<Completion, Error> {
        if let Some(kind) = hostile() {
            let mut values = vec!["ok".to_owned()];
            if kind == "completion" {
                values.push("x".repeat(70_000));
            }
            return Ok(Completion {
                total: Some(values.len() as u32),
                values,
                has_more: false,
            });
        }
        if LIST_MODE.get().is_some_and(|mode| mode == "promises") {
            panic!("the liar cannot complete {}", request.argument);
        }
        Ok(Completion {
            values: (0..150).map(|n| n.to_string()).collect(),
            total: Some(150),
            has_more: false,
        })
    }

    fn changes(_since: Option<String>) -> Result<ChangeReport, Error> {
        if let Some(kind) = hostile() {
            let token = if kind == "changes" {
                "t".repeat(70_000)
            } else {
                "static".into()
            };
            return Ok(ChangeReport {
                token,
                listing_changed: false,
                changed_paths: Vec::new(),
            });
        }
        Err(Error::Unavailable("the liar never reports changes".into()))
    }
}

/// The kind of answer config `list = "hostile/KIND"` breaks, past the
/// limits of a default manifest: `page` (an entry whose path has a space),
/// `template` (config key `template`, listed after an honest one), `read`
/// (content under another scheme), `completion` (a 70 000-byte value) or
/// `changes` (a 70 000-byte token).
fn hostile() -> Option<&'static str> {
    LIST_MODE.get()?.strip_prefix("hostile/")
}

/// Recurses until the stack runs out, long before `depth` could reach its end.
fn recurse(depth: u64) -> u64 {
    if depth == u64::MAX {
        return depth;
    }
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

/// A number from the host's randomness.
fn random_number() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

/// Recurses `depth` calls deep and back.
fn descend(depth: u64) -> u64 {
    if depth == 0 {
        return 0;
    }
    std::hint::black_box(descend(std::hint::black_box(depth - 1))) + 1
}

/// Tries to reach outside the sandbox, for `open/PATH`, `write/PATH`,
/// `link/FROM,TO` (a hard link) and `env/NAME`, and describes what
/// happened.
fn probe(path: &str) -> Option<String> {
    if let Some(target) = path.strip_prefix("open/") {
        return Some(match std::fs::read(target) {
            Ok(bytes) => format!("ok: {} bytes", bytes.len()),
            Err(error) => format!("error: {:?}", error.kind()),
        });
    }
    if let Some(target) = path.strip_prefix("write/") {
        return Some(match std::fs::write(target, "written by liar") {
            Ok(()) => "ok".into(),
            Err(error) => format!("error: {:?}", error.kind()),
        });
    }
    if let Some((from, to)) = path
        .strip_prefix("link/")
        .and_then(|rest| rest.split_once(','))
    {
        return Some(match std::fs::hard_link(from, to) {
            Ok(()) => "ok".into(),
            Err(error) => format!("error: {:?}", error.kind()),
        });
    }
    let name = path.strip_prefix("env/")?;
    Some(std::env::var(name).unwrap_or_else(|_| "unset".into()))
}

/// Fetches `url` over `wasi:http`, following up to five redirects, and
/// describes what happened.
fn fetch(url: &str) -> String {
    let mut url = url.to_owned();
    for redirects in 0..=5 {
        match fetch_once(&url) {
            Ok((status, Some(location))) if (300..400).contains(&status) => url = location,
            Ok((status, body)) => {
                return format!(
                    "status {status} after {redirects} redirects: {}",
                    body.unwrap_or_default()
                );
            }
            Err(failure) => return format!("after {redirects} redirects: {failure}"),
        }
    }
    "too many redirects".into()
}

/// One request: the status and either the `Location` of a redirect or the
/// body.
fn fetch_once(url: &str) -> Result<(u16, Option<String>), String> {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, OutgoingRequest, Scheme};

    let (scheme, rest) = url.split_once("://").ok_or("not a URL")?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    let request = OutgoingRequest::new(Fields::new());
    let scheme = if scheme == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    };
    let _ = request.set_scheme(Some(&scheme));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let response = match outgoing_handler::handle(request, None) {
        Err(code) => return Err(format!("refused: {code:?}")),
        Ok(response) => {
            response.subscribe().block();
            match response.get() {
                Some(Ok(Ok(response))) => response,
                Some(Ok(Err(code))) => return Err(format!("failed: {code:?}")),
                other => return Err(format!("unexpected: {other:?}")),
            }
        }
    };
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .first()
        .map(|value| String::from_utf8_lossy(value).into_owned());
    if location.is_some() {
        return Ok((status, location));
    }
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no body stream")?;
    let mut bytes = Vec::new();
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        bytes.extend(chunk);
    }
    Ok((status, Some(String::from_utf8_lossy(&bytes).into_owned())))
}

/// A handle kept between calls.
enum Stashed {
    /// A directory below a grant.
    Directory(wasi::filesystem::types::Descriptor),
    /// A stream reading a file, whose descriptor is gone.
    Reading(wasi::io::streams::InputStream),
    /// A response body's trailers, still to come from the network.
    Trailers(wasi::http::types::FutureTrailers),
}

/// `dir//GUEST/DIR` keeps a directory open, `stream//GUEST/FILE` a stream
/// reading a file (dropping the file's own descriptor), `trailers` the
/// trailers of a response of config key `fetch`.
fn stash(what: &str) -> String {
    let stashed = if let Some(dir) = what.strip_prefix("dir/") {
        open_guest(dir, true).map(Stashed::Directory)
    } else if let Some(file) = what.strip_prefix("stream/") {
        open_guest(file, false).and_then(|file| {
            file.read_via_stream(0)
                .map(Stashed::Reading)
                .map_err(|code| format!("{code:?}"))
        })
    } else if what == "trailers" {
        trailers().map(Stashed::Trailers)
    } else {
        Err(format!("no stash {what:?}"))
    };
    match stashed {
        Ok(stashed) => {
            *STASHED.lock().unwrap_or_else(|poison| poison.into_inner()) = Some(stashed);
            "stashed".into()
        }
        Err(error) => format!("not stashed: {error}"),
    }
}

/// Acts through what `stash` kept, if this instance kept anything:
/// `read/NAME` reads NAME in the directory kept (or what the stream kept
/// gives), `write/NAME/TEXT` writes TEXT to NAME in it, `trailers` polls
/// the trailers kept.
fn through_stash(what: &str) -> String {
    use wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};

    let stashed = STASHED.lock().unwrap_or_else(|poison| poison.into_inner());
    let Some(stashed) = stashed.as_ref() else {
        return "nothing stashed".into();
    };
    match (stashed, what.split_once('/')) {
        (Stashed::Directory(dir), Some(("read", name))) => dir
            .open_at(
                PathFlags::empty(),
                name,
                OpenFlags::empty(),
                DescriptorFlags::READ,
            )
            .map_err(|code| format!("{code:?}"))
            .and_then(|file| file.read(4096, 0).map_err(|code| format!("{code:?}")))
            .map_or_else(
                |error| format!("error: {error}"),
                |(bytes, _)| format!("read: {}", String::from_utf8_lossy(&bytes)),
            ),
        (Stashed::Directory(dir), Some(("write", rest))) => {
            let (name, text) = rest.split_once('/').unwrap_or((rest, ""));
            dir.open_at(
                PathFlags::empty(),
                name,
                OpenFlags::CREATE | OpenFlags::TRUNCATE,
                DescriptorFlags::WRITE,
            )
            .map_err(|code| format!("{code:?}"))
            .and_then(|file| {
                file.write(text.as_bytes(), 0)
                    .map_err(|code| format!("{code:?}"))
            })
            .map_or_else(
                |error| format!("error: {error}"),
                |written| format!("wrote {written} bytes"),
            )
        }
        (Stashed::Reading(stream), _) => match stream.blocking_read(4096) {
            Ok(bytes) => format!("read: {}", String::from_utf8_lossy(&bytes)),
            Err(error) => format!("error: {error:?}"),
        },
        (Stashed::Trailers(trailers), _) => format!("trailers: {:?}", trailers.get().is_some()),
        _ => format!("no way through the stash with {what:?}"),
    }
}

/// Opens GUEST (`/data/sub`, an absolute guest path) below the preopened
/// directory that holds it, read-write.
fn open_guest(guest: &str, directory: bool) -> Result<wasi::filesystem::types::Descriptor, String> {
    use wasi::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};

    for (root, at) in wasi::filesystem::preopens::get_directories() {
        let Some(below) = guest.strip_prefix(at.trim_end_matches('/')) else {
            continue;
        };
        let open = if directory {
            OpenFlags::DIRECTORY
        } else {
            OpenFlags::empty()
        };
        let flags = if directory {
            DescriptorFlags::READ | DescriptorFlags::MUTATE_DIRECTORY
        } else {
            DescriptorFlags::READ
        };
        return root
            .open_at(
                PathFlags::empty(),
                below.trim_start_matches('/'),
                open,
                flags,
            )
            .map_err(|code| format!("{code:?}"));
    }
    Err(format!("no grant holds {guest}"))
}

/// Fetches config key `fetch`, reads its body whole, and keeps its
/// trailers to come.
fn trailers() -> Result<wasi::http::types::FutureTrailers, String> {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, IncomingBody, OutgoingRequest, Scheme};

    let url = FETCH_URL.get().ok_or("no fetch URL configured")?;
    let rest = url.split_once("://").ok_or("not a URL")?.1;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let response = outgoing_handler::handle(request, None).map_err(|code| format!("{code:?}"))?;
    response.subscribe().block();
    let response = match response.get() {
        Some(Ok(Ok(response))) => response,
        other => return Err(format!("unexpected: {other:?}")),
    };
    let body = response.consume().map_err(|()| "no body")?;
    {
        let stream = body.stream().map_err(|()| "no body stream")?;
        while stream.blocking_read(64 * 1024).is_ok() {}
    }
    Ok(IncomingBody::finish(body))
}

/// Opens a TCP connection to, or resolves the name of, config key `connect`.
fn socket_probe(path: &str) -> String {
    use std::net::{TcpStream, ToSocketAddrs};

    let target = CONNECT_TO.get().map_or("127.0.0.1:9", String::as_str);
    if path == "lookup" {
        return match target.to_socket_addrs() {
            Ok(addresses) => format!("resolved {} addresses", addresses.count()),
            Err(error) => format!("error: {:?}", error.kind()),
        };
    }
    match TcpStream::connect(target) {
        Ok(_) => "connected".into(),
        Err(error) => format!("error: {:?}", error.kind()),
    }
}

fn resource(path: &str, mime_type: Option<&str>) -> Resource {
    Resource {
        path: path.into(),
        name: "lie".into(),
        title: None,
        description: DESCRIBE.get().cloned(),
        mime_type: mime_type.map(Into::into),
        size: None,
        annotations: None,
        icons: Vec::new(),
        meta: None,
    }
}

fn template(path_template: &str) -> Template {
    Template {
        path_template: path_template.into(),
        name: "lie".into(),
        title: None,
        description: None,
        mime_type: None,
        annotations: None,
        icons: Vec::new(),
        meta: None,
    }
}

/// A page of the honest listing `pages/TOTAL/SIZE`; the cursor is the offset
/// of the page.
fn pages(mode: &str, cursor: Option<String>) -> Result<ResourcePage, Error> {
    let numbers: Vec<usize> = mode
        .split('/')
        .skip(1)
        .filter_map(|number| number.parse().ok())
        .collect();
    let [total, size] = numbers[..] else {
        return Err(Error::InvalidInput(format!(
            "list mode {mode:?} is not pages/TOTAL/SIZE"
        )));
    };
    eprintln!("liar lists from {cursor:?}");
    let start = cursor.map_or(Ok(0), |cursor| {
        cursor
            .parse()
            .map_err(|_| Error::InvalidInput(format!("unknown cursor {cursor:?}")))
    })?;
    let end = (start + size).min(total);
    Ok(ResourcePage {
        resources: (start..end)
            .map(|index| resource(&format!("p{index:04}"), None))
            .collect(),
        next_cursor: (end < total).then(|| end.to_string()),
        cache: None,
    })
}

export!(Liar);
