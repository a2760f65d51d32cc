//! Listing snapshots, seen from outside: a client walking a merged listing
//! page by page costs each plugin each of its own pages once per walk,
//! however small the client's pages; a walk is never served stale entries of
//! a plugin that gave no cache hint; and a cursor into a snapshot dropped
//! since still finishes its walk, in order and without repeats, asking the
//! plugin again for one page only. The plugin (`liar`, listing
//! `pages/TOTAL/5`) says on stderr each time it is asked for a page.

use resmux_tests::{Folder, RawServer};
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
