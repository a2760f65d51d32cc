//! Listing snapshots, seen from outside: a client walking a merged listing
//! page by page costs each plugin each of its own pages once per walk,
//! however small the client's pages; a walk is never served stale entries of
//! a plugin that gave no cache hint; and a cursor into a snapshot dropped
//! since still finishes its walk, in order and without repeats, asking the
//! plugin again for one page only. The plugin (`liar`, listing
//! `pages/TOTAL/5`) says on stderr each time it is asked for a page.
//!
//! And the `files` example on a flat folder, whose listing follows its
//! files: every file listed once and in order, a walk with nothing changed
//! served from the last one's snapshot without asking the plugin (counted
//! in the metrics), a walk after the operator adds and removes files
//! listing exactly what is there, and a walk under way across such a change
//! finishing in order.

use std::collections::BTreeSet;
use std::path::Path;

use resmux_tests::{EXCHANGE_TIMEOUT, Folder, RawServer, free_address, http_get};
use serde_json::json;

const ASKED: &str = "liar lists from";

fn folder(total: usize) -> Folder {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", &format!("[config]\nlist = \"pages/{total}/5\"\n"))
        .plugin("notes", "notes");
    folder
}

/// The `total` entries of the liar, then the 5 notes, in listing order.
fn expected(total: usize) -> Vec<String> {
    let liar = (0..total).map(|index| format!("liar://p{index:04}"));
    let notes = ["welcome", "paths", "errors", "pagination", "groceries"]
        .map(|id| format!("notes://notes/{id}"));
    liar.chain(notes).collect()
}

/// One page: its URIs and its cursor.
async fn page(server: &mut RawServer, cursor: Option<&str>) -> (Vec<String>, Option<String>) {
    let params = match cursor {
        Some(cursor) => json!({ "cursor": cursor }),
        None => json!({}),
    };
    let response = server
        .modern_request("resources/list", params)
        .await
        .unwrap();
    let result = &response["result"];
    let uris = result["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{response}"))
        .iter()
        .map(|resource| resource["uri"].as_str().unwrap().to_owned())
        .collect();
    (uris, result["nextCursor"].as_str().map(str::to_owned))
}

/// Walks on from `cursor` to the end.
async fn walk_from(server: &mut RawServer, mut cursor: Option<String>) -> Vec<String> {
    let mut uris = Vec::new();
    loop {
        let (more, next) = page(server, cursor.as_deref()).await;
        uris.extend(more);
        match next {
            Some(next) => cursor = Some(next),
            None => return uris,
        }
    }
}

#[tokio::test]
async fn a_walk_asks_the_plugin_for_each_of_its_pages_once() {
    let folder = folder(50);
    let mut server = RawServer::start(folder.path(), &["--page-size", "3"]).unwrap();
    // 55 entries on 19 client pages of 3; the liar has 10 pages of 5.
    assert_eq!(walk_from(&mut server, None).await, expected(50));
    // No cache hint: a new walk asks the plugin afresh, once per page again.
    assert_eq!(walk_from(&mut server, None).await, expected(50));
    let stderr = server.stop().await.unwrap();
    assert_eq!(stderr.matches(ASKED).count(), 20, "{stderr}");
    assert_eq!(stderr.matches(&format!("{ASKED} None")).count(), 2);
    assert_eq!(stderr.matches(&format!("{ASKED} Some(\"45\")")).count(), 2);
}

#[tokio::test]
async fn a_cursor_into_a_dropped_snapshot_finishes_its_walk() {
    let folder = folder(400);
    let mut server = RawServer::start(folder.path(), &["--page-size", "3"]).unwrap();
    // 67 pages of 3 take the walk 201 entries in: 41 pages of the plugin.
    let mut walked = Vec::new();
    let mut cursor = None;
    for _ in 0..67 {
        let (uris, next) = page(&mut server, cursor.as_deref()).await;
        walked.extend(uris);
        cursor = next;
    }
    // Ten more walks start, and the first walk's snapshot is dropped.
    for _ in 0..10 {
        let (started, _) = page(&mut server, None).await;
        assert_eq!(started, expected(400)[..3]);
    }
    walked.extend(walk_from(&mut server, cursor).await);
    assert_eq!(walked, expected(400));
    let stderr = server.stop().await.unwrap();
    // 41 pages, one for each new walk, then the page the walk stood in
    // (entries 200 to 204) again and the 39 after it.
    assert_eq!(stderr.matches(ASKED).count(), 41 + 10 + 40, "{stderr}");
    assert_eq!(stderr.matches(&format!("{ASKED} Some(\"200\")")).count(), 2);
}

#[tokio::test]
async fn walks_side_by_side_each_see_a_whole_listing() {
    let folder = folder(50);
    let mut server = RawServer::start(folder.path(), &["--page-size", "4"]).unwrap();
    let mut cursors: Vec<Option<String>> = vec![None, None, None];
    let mut walked: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut started = [false; 3];
    while started.iter().any(|started| !started) || cursors.iter().any(Option::is_some) {
        for walk in 0..3 {
            if started[walk] && cursors[walk].is_none() {
                continue;
            }
            started[walk] = true;
            let (uris, next) = page(&mut server, cursors[walk].as_deref()).await;
            walked[walk].extend(uris);
            cursors[walk] = next;
        }
    }
    for uris in &walked {
        assert_eq!(uris, &expected(50));
    }
    let stderr = server.stop().await.unwrap();
    // Each walk asked for its own snapshot of 10 pages; none asked twice.
    assert_eq!(stderr.matches(ASKED).count(), 30, "{stderr}");
}

/// A `files` mount of `data/` on plugin pages of 1000, whose listing follows
/// its files. `data/` holds `count` files side by side and, beside them,
/// files whose names need percent-encoding and a directory whose files sort
/// between theirs.
fn flat_folder(count: usize) -> Folder {
    let folder = Folder::new();
    folder.plugin("files", "files").manifest(
        "files",
        "[config]\nroot = \"/data\"\npage_size = 1000\n\
         [[files]]\nhost = \"data\"\nguest = \"/data\"\n\
         [changes]\nlisting_follows_files = true\n",
    );
    let data = folder.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for index in 0..count {
        std::fs::write(data.join(format!("f{index:05}.txt")), "x").unwrap();
    }
    for relative in [
        "m-a.txt",
        "m/a.txt",
        "m/sub/b.txt",
        "m0.txt",
        "a b.txt",
        "\u{fc}.txt",
        "x+y",
    ] {
        folder.file(&format!("data/{relative}"), b"x");
    }
    folder
}

/// The URIs of the files below `data/` now, in URI order: their paths
/// percent-encoded as the `files` example encodes them.
fn files_now(folder: &Folder) -> Vec<String> {
    fn below(directory: &Path, prefix: &str, uris: &mut Vec<String>) {
        for entry in std::fs::read_dir(directory).unwrap() {
            let entry = entry.unwrap();
            let mut path = prefix.to_owned();
            for byte in entry.file_name().to_str().unwrap().bytes() {
                if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                    path.push(byte as char);
                } else {
                    path.push_str(&format!("%{byte:02X}"));
                }
            }
            if entry.file_type().unwrap().is_dir() {
                below(&entry.path(), &format!("{path}/"), uris);
            } else {
                uris.push(path);
            }
        }
    }
    let mut uris = Vec::new();
    below(&folder.path().join("data"), "files://", &mut uris);
    uris.sort();
    uris
}

/// Panics, naming the first difference, unless `walked` is `expected`.
fn assert_listed(walked: &[String], expected: &[String]) {
    if walked == expected {
        return;
    }
    let at = walked
        .iter()
        .zip(expected)
        .position(|(listed, wanted)| listed != wanted)
        .unwrap_or(walked.len().min(expected.len()));
    panic!(
        "the walk listed {} resources where {} are expected; at {at} it has {:?} where {:?} is expected",
        walked.len(),
        expected.len(),
        walked.get(at),
        expected.get(at)
    );
}

/// How many listing pages `files` has served, as the server's metrics at
/// `metrics` count them.
fn pages_served(metrics: &str) -> u64 {
    let series = r#"resmux_plugin_calls_total{plugin="files",operation="list",outcome="ok"}"#;
    let (_, exposition) = http_get(metrics, "/metrics", &[]).unwrap();
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map_or(0, |served| served as u64)
}

/// A whole walk, and how many pages `files` served during it, given how
/// many it had served before.
async fn counted_walk(
    server: &mut RawServer,
    metrics: &str,
    served: &mut u64,
) -> (Vec<String>, u64) {
    let walked = walk_from(server, None).await;
    let before = std::mem::replace(served, pages_served(metrics));
    (walked, *served - before)
}

/// Walks until a walk asks `files` for no page, for at most
/// [`EXCHANGE_TIMEOUT`]: resmux watches the granted folder from its start
/// on, and a walk begun since that has seen no change serves the next.
/// Every walk lists `expected`.
async fn walk_until_served_from_a_snapshot(
    server: &mut RawServer,
    metrics: &str,
    served: &mut u64,
    expected: &[String],
) {
    let pages = expected.len().div_ceil(1000) as u64;
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        let (walked, asked) = counted_walk(server, metrics, served).await;
        assert_listed(&walked, expected);
        if asked == 0 {
            return;
        }
        assert_eq!(
            asked, pages,
            "a walk asked for a page twice, or for too few"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "with nothing changed, every walk for {EXCHANGE_TIMEOUT:?} asked `files` for its pages"
        );
    }
}

#[tokio::test]
async fn a_flat_folder_is_walked_whole_and_again_only_after_a_change() {
    let folder = flat_folder(20_000);
    let metrics = free_address();
    let mut server = RawServer::start(
        folder.path(),
        &["--page-size", "1000", "--metrics", &metrics],
    )
    .unwrap();
    let before = files_now(&folder);
    assert_eq!(before.len(), 20_007);
    let mut served = 0;
    let (walked, asked) = counted_walk(&mut server, &metrics, &mut served).await;
    assert_listed(&walked, &before);
    assert_eq!(asked, 21, "each of the 21 pages of `files` once");
    walk_until_served_from_a_snapshot(&mut server, &metrics, &mut served, &before).await;

    // The operator adds files (one inside the directory) and removes one.
    folder
        .file("data/f00007a.txt", b"new")
        .file("data/m/sub/c.txt", b"new");
    std::fs::remove_file(folder.path().join("data/f12345.txt")).unwrap();
    let after = files_now(&folder);
    assert_eq!(after.len(), 20_008);
    // Until the watch has seen the change, a walk lists the snapshot before
    // it whole; from then on, the folder as it is, asking `files` again.
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        let (walked, asked) = counted_walk(&mut server, &metrics, &mut served).await;
        if walked == after {
            assert_eq!(asked, 21, "each of the 21 pages of `files` once");
            break;
        }
        assert_listed(&walked, &before);
        assert!(
            tokio::time::Instant::now() < deadline,
            "no walk saw the change within {EXCHANGE_TIMEOUT:?}"
        );
    }
    walk_until_served_from_a_snapshot(&mut server, &metrics, &mut served, &after).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_walk_under_way_across_a_change_finishes_in_order() {
    let folder = flat_folder(5_000);
    let mut server = RawServer::start(folder.path(), &["--page-size", "1000"]).unwrap();
    let before = files_now(&folder);
    let (mut walked, cursor) = page(&mut server, None).await;
    assert_listed(&walked, &before[..1000]);
    // Between two pages, the operator removes the last file sent and one
    // not yet sent, and adds one on each side of where the walk stands.
    let last_sent = walked.last().unwrap().strip_prefix("files://").unwrap();
    std::fs::remove_file(folder.path().join("data").join(last_sent)).unwrap();
    std::fs::remove_file(folder.path().join("data/f04000.txt")).unwrap();
    folder
        .file("data/f00001a.txt", b"new")
        .file("data/f04000a.txt", b"new");
    let after = files_now(&folder);
    walked.extend(walk_from(&mut server, cursor).await);

    for pair in walked.windows(2) {
        assert!(pair[0] < pair[1], "{} came before {}", pair[0], pair[1]);
    }
    let listed: BTreeSet<&String> = walked.iter().collect();
    let (before, after): (BTreeSet<&String>, BTreeSet<&String>) =
        (before.iter().collect(), after.iter().collect());
    for uri in before.intersection(&after) {
        assert!(
            listed.contains(uri),
            "{uri}, there throughout, was not listed"
        );
    }
    for uri in &listed {
        assert!(
            before.contains(uri) || after.contains(uri),
            "{uri} was listed but never there"
        );
    }
    // Removed before the walk reached it: the plugin looks at each file it
    // lists, so a stale name of the directory is not served.
    assert!(
        !listed.contains(&"files://f04000.txt".to_owned()),
        "files://f04000.txt was listed after it was removed"
    );
    server.stop().await.unwrap();
}
