//! The live namespace over stdio: plugins added, replaced and removed while a
//! client is connected (opening no component but the one that changed), and
//! subscriptions in both eras, fed by the `files` plugin's change reports and
//! by the watch on granted directories, which never follows a link out of a
//! grant, stops at its bound, stays on the directory resmux holds whatever
//! becomes of its path, and costs what the change costs, not the grant.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use resmux_tests::{
    EXCHANGE_TIMEOUT, Folder, RawServer, component, first_change_report, free_address, liar_with,
    mkfifo, release_fifo, sample, until_stuck_on_a_fifo, wait_for_sample,
};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use serde_json::{Value, json};

async fn listed_uris(server: &mut RawServer) -> Vec<String> {
    let listed = server.request("resources/list", json!({})).await.unwrap();
    listed["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|resource| resource["uri"].as_str().unwrap().to_owned())
        .collect()
}

async fn list_changed(server: &mut RawServer) {
    server
        .notification("notifications/resources/list_changed", |_| true)
        .await
        .unwrap();
}

/// What resmux logs when a changed component fails to load.
const NOT_REPLACED: &str = "plugin not replaced, the previous version keeps serving";

#[tokio::test]
async fn plugins_come_change_and_go_while_a_client_listens() {
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert!(
        !listed_uris(&mut server)
            .await
            .iter()
            .any(|uri| uri.starts_with("extra://"))
    );

    folder.plugin("extra", "notes");
    list_changed(&mut server).await;
    let uris = listed_uris(&mut server).await;
    assert!(
        uris.contains(&"extra://notes/welcome".to_owned()),
        "{uris:?}"
    );

    // A half-copied component never replaces the one serving.
    let fixtures = std::fs::read(component("conformance")).unwrap();
    folder.file("extra.wasm", &fixtures[..fixtures.len() / 2]);
    server.wait_for_log(NOT_REPLACED, 1, EXCHANGE_TIMEOUT).await;
    let welcome = server.read_text("extra://notes/welcome").await;
    assert!(welcome.contains("Welcome"), "{welcome}");

    folder.file("extra.wasm", &fixtures);
    list_changed(&mut server).await;
    assert_eq!(
        server.read_text("extra://static-text").await,
        "This is the content of the static text resource."
    );
    let gone = server.read("extra://notes/welcome").await.unwrap();
    assert_eq!(gone["error"]["code"], -32002, "{gone}");

    std::fs::remove_file(folder.path().join("extra.wasm")).unwrap();
    list_changed(&mut server).await;
    let uris = listed_uris(&mut server).await;
    assert!(
        !uris.iter().any(|uri| uri.starts_with("extra://")),
        "{uris:?}"
    );
    assert!(uris.contains(&"notes://notes/welcome".to_owned()));

    let stderr = server.stop().await.unwrap();
    for expected in [
        "plugin added scheme=\"extra\"",
        NOT_REPLACED,
        "plugin replaced scheme=\"extra\"",
        "plugin removed scheme=\"extra\"",
    ] {
        assert!(
            stderr.contains(expected),
            "stderr lacks {expected:?}:\n{stderr}"
        );
    }
}

/// The files opened in one folder, as an inotify watch on it reports them.
struct Opens(OwnedFd);

impl Opens {
    fn watch(folder: &Path) -> Self {
        let watch = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).unwrap();
        inotify::add_watch(&watch, folder, WatchFlags::OPEN).unwrap();
        Self(watch)
    }

    /// How often each file was opened since the last look (the folder
    /// itself is ""), whoever opened it.
    fn since_last(&self) -> BTreeMap<String, usize> {
        let mut buffer = [MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut events = inotify::Reader::new(&self.0, &mut buffer);
        let mut opened = BTreeMap::new();
        loop {
            match events.next() {
                Ok(event) => {
                    assert!(
                        !event.events().contains(ReadFlags::QUEUE_OVERFLOW),
                        "the watch lost opens"
                    );
                    let name = event
                        .file_name()
                        .map(|name| name.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    *opened.entry(name).or_default() += 1;
                }
                Err(Errno::AGAIN) => return opened,
                Err(Errno::INTR) => {}
                Err(error) => panic!("reading the watch: {error}"),
            }
        }
    }
}

#[tokio::test]
async fn a_change_in_the_folder_opens_no_component_but_the_changed_one() {
    let folder = files_folder(60_000);
    folder
        .plugin("notes", "notes")
        .plugin("fixtures", "conformance");
    // A component that changed less than 2 s ago is read again at the next
    // change, since a write within the same clock tick would leave its
    // times as they were: these have all settled when resmux loads them.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let opens = Opens::watch(folder.path());

    // Two changes, each waited for: whatever the first set off (the
    // folder read again, the watches renewed) is over once the second has
    // landed.
    folder.plugin("extra", "notes");
    server
        .wait_for_log("plugin added scheme=\"extra\"", 1, EXCHANGE_TIMEOUT)
        .await;
    folder.plugin("extra", "conformance");
    server
        .wait_for_log("plugin replaced scheme=\"extra\"", 1, EXCHANGE_TIMEOUT)
        .await;
    assert_eq!(
        server.read_text("extra://static-text").await,
        "This is the content of the static text resource."
    );

    // Stopped first: whatever the second change set off has ended by then.
    server.stop().await.unwrap();
    let opened = opens.since_last();
    for unchanged in ["files.wasm", "fixtures.wasm", "notes.wasm"] {
        assert_eq!(
            opened.get(unchanged),
            None,
            "{unchanged} was opened, though it did not change: {opened:?}"
        );
    }
    // The watch sees what resmux opens: each change read the folder's
    // manifests again.
    assert!(
        opened.get("files.toml").is_some_and(|opens| *opens >= 2),
        "{opened:?}"
    );
    // The test's own two copies open it twice; resmux read it as well.
    assert!(opened.contains_key("extra.wasm"), "{opened:?}");
    assert!(
        opened.get("extra.wasm").is_some_and(|opens| *opens >= 3),
        "{opened:?}"
    );
}

#[tokio::test]
async fn a_call_in_flight_finishes_on_the_version_it_started_with() {
    // The read in flight opens a FIFO, so it lasts until the test opens the
    // other end: the replacement lands while it runs, however slow either.
    let folder = liar_with("timeout_ms = 600000");
    let fifo = folder.path().join("data/fifo");
    mkfifo(&fifo);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let id = server
        .send("resources/read", json!({ "uri": "liar://open//data/fifo" }))
        .await
        .unwrap();
    until_stuck_on_a_fifo(server.pid(), 1).await;
    std::fs::copy(component("notes"), folder.path().join("liar.wasm")).unwrap();
    list_changed(&mut server).await;
    let _writer = release_fifo(&fifo).unwrap();
    let read = server.response(id).await.unwrap();
    assert_eq!(
        read["result"]["contents"][0]["uri"], "liar://open//data/fifo",
        "the read in flight failed: {read}"
    );
    let after = server.read("liar://open//data/fifo").await.unwrap();
    assert_eq!(after["error"]["code"], -32002, "{after}");
    server.stop().await.unwrap();
}

fn files_folder(interval_ms: u64) -> Folder {
    let folder = files_plugin(interval_ms, "read-only");
    folder
        .file("data/a.txt", b"first")
        .file("data/b.txt", b"other");
    folder
}

/// The `files` example serving its folder's `data`, granted with `access`,
/// and asked for its change report every `interval_ms` while someone is
/// subscribed.
fn files_plugin(interval_ms: u64, access: &str) -> Folder {
    let folder = Folder::new();
    folder.plugin("files", "files").manifest(
        "files",
        &format!(
            "[config]\nroot = \"/data\"\n[[files]]\nhost = \"data\"\nguest = \"/data\"\naccess = \"{access}\"\n[changes]\ninterval_ms = {interval_ms}\n"
        ),
    );
    folder
}

/// Rewrites a file so that its modification time surely moves on.
fn rewrite(folder: &Folder, relative: &str, text: &str) {
    std::thread::sleep(Duration::from_millis(20));
    folder.file(relative, text.as_bytes());
}

#[tokio::test]
async fn a_legacy_subscriber_hears_of_its_resource_and_no_other() {
    // A one-minute interval: the watch on the granted directory must prompt
    // the change report.
    let folder = files_folder(60_000);
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    // A scheme is case-insensitive: this is the resource the client later
    // unsubscribes from as `files://a.txt`, and hears of under that name.
    let subscribed = server
        .request("resources/subscribe", json!({ "uri": "FILES://a.txt" }))
        .await
        .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    let unknown = server
        .request("resources/subscribe", json!({ "uri": "nobody://x" }))
        .await
        .unwrap();
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");

    first_change_report(&metrics, "files").await;
    rewrite(&folder, "data/b.txt", "changed, but nobody listens");
    rewrite(&folder, "data/a.txt", "second");
    let updated = server
        .notification("notifications/resources/updated", |_| true)
        .await
        .unwrap();
    assert_eq!(updated["params"]["uri"], "files://a.txt", "{updated}");
    assert_eq!(server.read_text("files://a.txt").await, "second");

    // `b.txt`, followed from here on and changed after `a.txt`, is the
    // barrier: once the news of it has come, so would have any of `a.txt`.
    let barrier = server
        .request("resources/subscribe", json!({ "uri": "files://b.txt" }))
        .await
        .unwrap();
    assert_eq!(barrier["result"], json!({}), "{barrier}");
    let unsubscribed = server
        .request("resources/unsubscribe", json!({ "uri": "files://a.txt" }))
        .await
        .unwrap();
    assert_eq!(unsubscribed["result"], json!({}));
    rewrite(&folder, "data/a.txt", "third");
    rewrite(&folder, "data/b.txt", "changed after a.txt");
    server
        .notification("notifications/resources/updated", |message| {
            message["params"]["uri"] == "files://b.txt"
        })
        .await
        .unwrap();
    assert_eq!(server.read_text("files://a.txt").await, "third");
    let heard: Vec<&Value> = server
        .notifications
        .iter()
        .filter(|message| {
            message["method"] == "notifications/resources/updated"
                && message["params"]["uri"] != "files://b.txt"
        })
        .collect();
    assert!(heard.is_empty(), "heard after unsubscribing: {heard:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_listen_stream_is_acknowledged_tagged_and_cancelled() {
    let folder = files_folder(200);
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    let listen = server
        .modern_send(
            "subscriptions/listen",
            json!({ "notifications": {
                "resourcesListChanged": true,
                "resourceSubscriptions": ["files://a.txt"]
            }}),
        )
        .await
        .unwrap();
    let acknowledged = server
        .notification("notifications/subscriptions/acknowledged", |_| true)
        .await
        .unwrap();
    let tag = |message: &Value| {
        message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone()
    };
    assert_eq!(tag(&acknowledged), json!(listen), "{acknowledged}");

    // rmcp acknowledges a stream before resmux follows its resources.
    first_change_report(&metrics, "files").await;
    rewrite(&folder, "data/a.txt", "second");
    let updated = server
        .notification("notifications/resources/updated", |_| true)
        .await
        .unwrap();
    assert_eq!(updated["params"]["uri"], "files://a.txt");
    assert_eq!(tag(&updated), json!(listen), "{updated}");

    rewrite(&folder, "data/new.txt", "a new file");
    let changed = server
        .notification("notifications/resources/list_changed", |_| true)
        .await
        .unwrap();
    assert_eq!(tag(&changed), json!(listen), "{changed}");

    // A second stream, following `b.txt`, is the barrier: `b.txt` changes
    // after `a.txt`, so once the second stream has heard of it, and a read
    // has been answered since, the first, were it still open, would have
    // heard of `a.txt`. Nothing changes before both streams' resources are
    // counted.
    let barrier = server
        .modern_send(
            "subscriptions/listen",
            json!({ "notifications": { "resourceSubscriptions": ["files://b.txt"] }}),
        )
        .await
        .unwrap();
    server
        .notification("notifications/subscriptions/acknowledged", |message| {
            tag(message) == json!(barrier)
        })
        .await
        .unwrap();
    wait_for_sample(
        &metrics,
        "resmux_subscriptions",
        "the second stream did not follow b.txt",
        |followed| followed >= 2.0,
    )
    .await;

    server
        .send_line(
            &json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": { "requestId": listen } })
            .to_string(),
        )
        .await
        .unwrap();
    // The first stream has ended once it is no longer counted open.
    wait_for_sample(
        &metrics,
        "resmux_listen_streams",
        "the cancelled stream did not end",
        |open| open == 1.0,
    )
    .await;
    server.notifications.clear();
    rewrite(&folder, "data/a.txt", "third");
    rewrite(&folder, "data/b.txt", "changed after a.txt");
    let heard = server
        .notification("notifications/resources/updated", |message| {
            tag(message) == json!(barrier)
        })
        .await
        .unwrap();
    assert_eq!(heard["params"]["uri"], "files://b.txt", "{heard}");
    let read = server
        .modern_request("resources/read", json!({ "uri": "files://a.txt" }))
        .await
        .unwrap();
    assert_eq!(read["result"]["contents"][0]["text"], "third");
    let after_cancelling: Vec<&Value> = server
        .notifications
        .iter()
        .filter(|message| tag(message) != json!(barrier))
        .collect();
    assert!(
        after_cancelling.is_empty(),
        "heard after cancelling: {after_cancelling:?}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn answers_are_cached_within_their_ttl_and_dropped_on_change() {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    let read_as = async |server: &mut RawServer, uri: &str| {
        let response = server
            .modern_request("resources/read", json!({ "uri": uri }))
            .await
            .unwrap();
        let result = &response["result"];
        (
            result["contents"][0]["text"].as_str().unwrap().to_owned(),
            result["ttlMs"].as_u64().unwrap(),
        )
    };
    let read = async |server: &mut RawServer| read_as(server, "liar://random/public").await;
    let (first, first_ttl) = read(&mut server).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (again, ttl_left) = read(&mut server).await;
    assert_eq!(first, again, "the second read reached the plugin");
    assert_eq!(first_ttl, 60_000);
    assert!(ttl_left < first_ttl, "{ttl_left}");
    let (shouted, _) = read_as(&mut server, "LIAR://random/public").await;
    assert_eq!(
        shouted, first,
        "one resource was cached under two spellings"
    );

    let mut unlimited = RawServer::start(folder.path(), &["--response-cache-mib", "0"]).unwrap();
    let (one, _) = read(&mut unlimited).await;
    let (two, _) = read(&mut unlimited).await;
    assert_ne!(one, two, "with no cache every read reaches the plugin");
    unlimited.stop().await.unwrap();

    server
        .modern_send(
            "subscriptions/listen",
            json!({ "notifications": { "resourcesListChanged": true } }),
        )
        .await
        .unwrap();
    server
        .notification("notifications/subscriptions/acknowledged", |_| true)
        .await
        .unwrap();
    folder.manifest("liar", "[limits]\ntimeout_ms = 9000\n");
    list_changed(&mut server).await;
    let (after_change, ttl) = read(&mut server).await;
    assert_ne!(
        after_change, first,
        "a replaced plugin's cached answers were served"
    );
    assert_eq!(ttl, 60_000);
    let (shouted, _) = read_as(&mut server, "LIAR://random/public").await;
    assert_eq!(
        shouted, after_change,
        "a spelling of the URI kept a stale answer"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_quarantined_plugin_comes_back_at_once_when_its_file_is_replaced() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\ntimeout_ms = 100\n");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    for _ in 0..3 {
        let spin = server.read("liar://spin").await.unwrap();
        assert_eq!(spin["error"]["code"], -32603, "{spin}");
    }
    let (refused, _) = server
        .read_until_quarantined("liar://spin", "exceeded its time limit of 100 ms")
        .await;
    assert!(refused.contains("is quarantined"), "{refused}");
    folder.manifest("liar", "[limits]\ntimeout_ms = 200\n");
    list_changed(&mut server).await;
    let again = server.read("liar://spin").await.unwrap();
    assert!(
        again["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("exceeded its time limit of 200 ms")),
        "the replaced plugin starts with a clean record: {again}"
    );
    assert_eq!(server.read_text("liar://honest").await, "a lie");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn subscriptions_and_listen_streams_are_capped() {
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    let mut legacy = RawServer::legacy(folder.path()).await.unwrap();
    for n in 0..256 {
        let uri = format!("notes://notes/welcome-{n}");
        let answer = legacy
            .request("resources/subscribe", json!({ "uri": uri }))
            .await
            .unwrap();
        assert!(answer["result"].is_object(), "{answer}");
    }
    let refused = legacy
        .request(
            "resources/subscribe",
            json!({ "uri": "notes://notes/one-too-many" }),
        )
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this session follows 256 resources, the most allowed"),
        "{refused}"
    );
    legacy.stop().await.unwrap();

    let metrics = free_address();
    let mut modern = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    let many: Vec<String> = (0..300)
        .map(|n| format!("notes://notes/welcome-{n}"))
        .collect();
    let mut listening = Vec::new();
    for _ in 0..16 {
        let id = modern
            .modern_send(
                "subscriptions/listen",
                json!({ "notifications": { "resourceSubscriptions": many } }),
            )
            .await
            .unwrap();
        let acknowledged = modern
            .notification("notifications/subscriptions/acknowledged", |message| {
                message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == json!(id)
            })
            .await
            .unwrap();
        let accepted = &acknowledged["params"]["notifications"]["resourceSubscriptions"];
        assert_eq!(accepted.as_array().unwrap().len(), 256, "{acknowledged}");
        listening.push(id);
    }
    // rmcp acknowledges a stream before resmux counts it: the seventeenth
    // goes once all sixteen are counted, or it could be let in and one of
    // them refused.
    wait_for_sample(
        &metrics,
        "resmux_listen_streams",
        "the sixteen streams were not all counted",
        |open| open == 16.0,
    )
    .await;
    let seventeenth = modern
        .modern_send(
            "subscriptions/listen",
            json!({ "notifications": { "resourcesListChanged": true } }),
        )
        .await
        .unwrap();
    let refused = modern.response(seventeenth).await.unwrap();
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("client local has 16 listen streams open, the most allowed"),
        "{refused}"
    );
    modern.stop().await.unwrap();
}

/// The inode of each watch that process `pid` holds in its inotify
/// instances (one `inotify wd:` line each in the instance's fdinfo), sorted.
fn watched_inodes(pid: u32) -> Vec<u64> {
    let mut inodes = Vec::new();
    for descriptor in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let descriptor = descriptor.unwrap();
        let is_inotify = std::fs::read_link(descriptor.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:inotify");
        if !is_inotify {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            descriptor.file_name().to_string_lossy()
        ))
        .unwrap();
        for watch in info.lines().filter(|line| line.starts_with("inotify wd:")) {
            let inode = watch
                .split_whitespace()
                .find_map(|field| field.strip_prefix("ino:"))
                .unwrap_or_else(|| panic!("no inode in {watch:?}"));
            inodes.push(u64::from_str_radix(inode, 16).unwrap());
        }
    }
    inodes.sort_unstable();
    inodes
}

/// The inodes of `directories`, sorted.
fn inodes_of(directories: &[&Path]) -> Vec<u64> {
    let mut inodes: Vec<u64> = directories
        .iter()
        .map(|directory| std::fs::metadata(directory).unwrap().ino())
        .collect();
    inodes.sort_unstable();
    inodes
}

#[tokio::test]
async fn the_grant_watch_follows_no_link_out_of_the_grant() {
    // Outside every grant: a folder with directories below it.
    let outside_dir = tempfile::tempdir().unwrap();
    let outside = outside_dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(outside.join("a/b/c")).unwrap();
    let folder = files_plugin(60_000, "read-write");
    folder
        .file("data/a.txt", b"first")
        .file("data/sub/b.txt", b"other");
    let plugins = folder.path().canonicalize().unwrap();
    let data = plugins.join("data");
    // What an operator might do before start: `granted/etc -> /etc`.
    std::os::unix::fs::symlink(&outside, data.join("etc")).unwrap();
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();

    // What the plugin can do through its read-write grant while resmux
    // serves: a relative link up and out, in a new directory that is then
    // renamed, so that the watcher meets the directory whole.
    std::fs::create_dir(data.join("p")).unwrap();
    let up = "../".repeat(data.join("p").components().count() - 1);
    let target = format!("{up}{}", outside.strip_prefix("/").unwrap().display());
    std::os::unix::fs::symlink(target, data.join("p/up")).unwrap();
    std::fs::rename(data.join("p"), data.join("q")).unwrap();
    assert!(data.join("q/up/a/b/c").is_dir(), "the link reaches out");
    assert!(data.join("etc/a/b/c").is_dir(), "the link reaches out");

    let subscribed = server
        .request("resources/subscribe", json!({ "uri": "files://a.txt" }))
        .await
        .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    first_change_report(&metrics, "files").await;
    // A change outside first, then one inside: the first news a subscriber
    // hears is of the one inside, and it hears nothing else.
    std::fs::write(outside.join("new.txt"), "outside").unwrap();
    std::fs::write(outside.join("a/b/c/new.txt"), "outside").unwrap();
    rewrite(&folder, "data/a.txt", "second");
    let updated = server
        .notification("notifications/resources/updated", |_| true)
        .await
        .unwrap();
    assert_eq!(updated["params"]["uri"], "files://a.txt", "{updated}");
    assert!(
        server.notifications.is_empty(),
        "heard more than the change inside: {:?}",
        server.notifications
    );

    // The watches held now (the rename and the change inside were both
    // handled before that news went out): the plugin folder and its parent
    // (for the folder's own name), and the three directories inside the
    // grant; nothing the links lead to.
    let parent = plugins.parent().unwrap();
    let expected = inodes_of(&[&plugins, parent, &data, &data.join("sub"), &data.join("q")]);
    assert_eq!(
        watched_inodes(server.pid()),
        expected,
        "resmux watches something beyond the plugin folder and the granted directories"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn grant_watches_stop_at_their_bound_and_polling_finds_changes_beyond() {
    const BOUND: usize = 1024;
    let folder = files_plugin(500, "read-only");
    folder
        .file("data/a.txt", b"first")
        .file("data/many/d0000/inner/deep.txt", b"first");
    for n in 1..1100 {
        std::fs::create_dir(folder.path().join(format!("data/many/d{n:04}"))).unwrap();
    }
    let data = folder.path().canonicalize().unwrap().join("data");
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();

    let needle = format!("watches stop at {BOUND} directories for one plugin");
    let log = server.wait_for_log(&needle, 1, EXCHANGE_TIMEOUT).await;
    let line = log.lines().find(|line| line.contains(&needle)).unwrap();
    for named in [
        "plugin=\"files\"".to_owned(),
        format!("granted path {}", data.display()),
        "found by polling".to_owned(),
    ] {
        assert!(line.contains(&named), "the line lacks {named:?}: {line}");
    }
    // `data`, `many` and 1022 of the directories in `many`; and the plugin
    // folder and its parent.
    assert_eq!(watched_inodes(server.pid()).len(), BOUND + 2);

    // Three levels down, beyond every watch: polling finds the change.
    let deep = "files://many/d0000/inner/deep.txt";
    let subscribed = server
        .request("resources/subscribe", json!({ "uri": deep }))
        .await
        .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    first_change_report(&metrics, "files").await;
    rewrite(&folder, "data/many/d0000/inner/deep.txt", "second");
    let updated = server
        .notification("notifications/resources/updated", |_| true)
        .await
        .unwrap();
    assert_eq!(updated["params"]["uri"], deep, "{updated}");
    server.stop().await.unwrap();
}

/// Waits until process `pid` watches `directory`.
async fn until_watched(pid: u32, directory: &Path) {
    let inode = std::fs::metadata(directory).unwrap().ino();
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    while !watched_inodes(pid).contains(&inode) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} was not watched within {EXCHANGE_TIMEOUT:?}",
            directory.display()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The CPU time process `pid` has spent so far, all its threads together,
/// to the nanosecond: its process CPU clock (`clock_getcpuclockid`).
fn cpu_time(pid: u32) -> Duration {
    let mut clock: libc::clockid_t = 0;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both pointers are valid for the calls, which only write them.
    unsafe {
        assert_eq!(
            libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock),
            0,
            "no CPU clock for process {pid}"
        );
        assert_eq!(
            libc::clock_gettime(clock, &mut now),
            0,
            "{}",
            std::io::Error::last_os_error()
        );
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The middle of `costs`.
fn median(mut costs: Vec<Duration>) -> Duration {
    costs.sort();
    costs[costs.len() / 2]
}

#[tokio::test]
async fn a_directory_made_in_a_large_grant_costs_the_host_what_it_costs_in_a_small_one() {
    const FILES: usize = 50_000;
    const SHELVES: usize = 50;
    const DIRECTORIES: u32 = 25;
    // `files` granted all of `data`, 50 000 files below its `live`, and on
    // a server of its own for comparison, `files` granted a `data` of one
    // file. Each lists its `live` only, so that its change reports stay
    // small, while its grant (and the watch) is all of `data`.
    let manifest = "[config]\nroot = \"/data/live\"\n[[files]]\nhost = \"data\"\nguest = \"/data\"\n[changes]\ninterval_ms = 60000\n";
    let granted = || {
        let folder = Folder::new();
        folder.plugin("files", "files").manifest("files", manifest);
        folder.file("data/live/a.txt", b"first");
        folder
    };
    let (folder, small_folder) = (granted(), granted());
    let data = folder.path().canonicalize().unwrap().join("data");
    let small_data = small_folder.path().canonicalize().unwrap().join("data");
    for shelf in 0..SHELVES {
        let shelf = data.join(format!("bulk/{shelf:02}"));
        std::fs::create_dir_all(&shelf).unwrap();
        for file in 0..FILES / SHELVES {
            std::fs::File::create(shelf.join(format!("{file:04}"))).unwrap();
        }
    }
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let mut small_server = RawServer::start(small_folder.path(), &[]).unwrap();
    small_server.initialize("2025-11-25").await.unwrap();
    let pid = server.pid();
    let small_pid = small_server.pid();
    // The first walk, the only one to read the entries of the whole grant,
    // is over.
    for shelf in 0..SHELVES {
        until_watched(pid, &data.join(format!("bulk/{shelf:02}"))).await;
    }
    until_watched(small_pid, &small_data.join("live")).await;

    // One directory at a time, each seen before the next is made, as a
    // plugin churning directories would make them: each is a change of its
    // own, made in the large grant and the small one in turn, so that
    // whatever else the machine does weighs on both alike. Nobody is
    // subscribed, so no change report runs meanwhile.
    let mut large = Vec::new();
    let mut small = Vec::new();
    for made in 0..DIRECTORIES {
        for (pid, data, costs) in [
            (pid, &data, &mut large),
            (small_pid, &small_data, &mut small),
        ] {
            let directory = data.join(format!("live/d{made:02}"));
            let before = cpu_time(pid);
            std::fs::create_dir(&directory).unwrap();
            until_watched(pid, &directory).await;
            costs.push(cpu_time(pid) - before);
        }
    }
    small_server.stop().await.unwrap();
    let (large, small) = (median(large), median(small));
    eprintln!(
        "a directory made cost resmux {large:?} of CPU time in a grant of {FILES} files, \
         {small:?} in a grant of one (medians of {DIRECTORIES})"
    );
    // On the 2-core machine each costs about 0.5 ms; a build that walked
    // the grants again at each change spent 8.8 ms in the large one, 0.6 ms
    // in the small one.
    assert!(
        large < small + Duration::from_millis(3),
        "a directory made in a grant of {FILES} files cost resmux {large:?} of CPU time, \
         {small:?} in a grant of one (medians of {DIRECTORIES}): its watch reads more than \
         the new directory"
    );

    let live = data.join("live");
    // A file in a new directory is news: the directory is watched (its own
    // poke goes before anyone subscribes), then the file changes.
    let fresh = live.join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    std::fs::write(fresh.join("new.txt"), "first").unwrap();
    until_watched(pid, &fresh).await;
    let subscribed = server
        .request(
            "resources/subscribe",
            json!({ "uri": "files://fresh/new.txt" }),
        )
        .await
        .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    first_change_report(&metrics, "files").await;
    rewrite(&folder, "data/live/fresh/new.txt", "second");
    let updated = server
        .notification("notifications/resources/updated", |_| true)
        .await
        .unwrap();
    assert_eq!(
        updated["params"]["uri"], "files://fresh/new.txt",
        "{updated}"
    );
    // And a file made there.
    rewrite(&folder, "data/live/fresh/other.txt", "a new file");
    server
        .notification("notifications/resources/list_changed", |_| true)
        .await
        .unwrap();
    server.stop().await.unwrap();
}

/// The change reports of `plugin` taken so far.
fn change_reports(metrics: &str, plugin: &str) -> f64 {
    let series = format!(
        r#"resmux_plugin_calls_total{{plugin="{plugin}",operation="changes",outcome="ok"}}"#
    );
    sample(metrics, &series).unwrap_or(0.0)
}

/// Changes `other/a.txt`, served by the `gate` plugin, and waits until its
/// subscriber hears of it. The change reports of one poke are taken one
/// plugin at a time, in the order of their schemes, and `gate` comes after
/// `files`: once this is heard, every poke of `files` made before the change
/// has had its report taken.
async fn through_the_gate(server: &mut RawServer, folder: &Folder, text: &str) {
    rewrite(folder, "other/a.txt", text);
    server
        .notification("notifications/resources/updated", |message| {
            message["params"]["uri"] == "gate://a.txt"
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn the_grant_watch_stays_on_the_directory_resmux_holds_when_its_path_names_another() {
    let folder = files_plugin(60_000, "read-only");
    folder
        .file("data/a.txt", b"first")
        .plugin("gate", "files")
        .manifest(
            "gate",
            "[config]\nroot = \"/other\"\n[[files]]\nhost = \"other\"\nguest = \"/other\"\n[changes]\ninterval_ms = 60000\n",
        )
        .file("other/a.txt", b"first");
    let plugins = folder.path().canonicalize().unwrap();
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    for uri in ["files://a.txt", "gate://a.txt"] {
        let subscribed = server
            .request("resources/subscribe", json!({ "uri": uri }))
            .await
            .unwrap();
        assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    }
    first_change_report(&metrics, "files").await;
    first_change_report(&metrics, "gate").await;

    // The granted directory moves away, and another takes its path.
    std::fs::rename(plugins.join("data"), plugins.join("held")).unwrap();
    std::fs::create_dir(plugins.join("data")).unwrap();
    through_the_gate(&mut server, &folder, "second").await;
    let before = change_reports(&metrics, "files");

    // A change in the directory now at the granted path is nothing to the
    // plugin, which still reads the one it was granted.
    rewrite(&folder, "data/a.txt", "a decoy at the granted path");
    through_the_gate(&mut server, &folder, "third").await;
    assert_eq!(
        change_reports(&metrics, "files"),
        before,
        "a change in the directory now at the granted path poked the plugin"
    );

    // A change in the directory resmux holds is news.
    rewrite(&folder, "held/a.txt", "second");
    let updated = server
        .notification("notifications/resources/updated", |message| {
            message["params"]["uri"] == "files://a.txt"
        })
        .await
        .unwrap();
    assert_eq!(updated["params"]["uri"], "files://a.txt", "{updated}");
    assert_eq!(server.read_text("files://a.txt").await, "second");
    through_the_gate(&mut server, &folder, "fourth").await;
    assert_eq!(
        change_reports(&metrics, "files"),
        before + 1.0,
        "the plugin was poked for more than the change in the directory resmux holds"
    );
    server.stop().await.unwrap();
}
