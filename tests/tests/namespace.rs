//! One namespace from many plugins, seen by a real MCP client (rmcp) over
//! stdio in both protocol eras: merged pagination, templates, reads,
//! completion, cursors and not-found errors.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use resmux_tests::{Era, Folder, McpClient, client, mcp_error};
use rmcp::model::{PaginatedRequestParams, ReadResourceRequestParams, ResourceContents};

const NOTE_IDS: [&str; 5] = ["welcome", "paths", "errors", "pagination", "groceries"];
const DATA_FILES: [&str; 7] = [
    "a.txt",
    "b.md",
    "deep/er/c.json",
    "deep/d.txt",
    "e f.txt",
    "image.png",
    "z.bin",
];

/// Four mounts from three components, each paginating on its own with small
/// pages: `files` (7 files, 2 a page), `notes` (5 notes, 2 a page), `memo`
/// (the notes component again, 3 a page) and `test` (3 fixtures, 1 page).
fn three_plugin_folder() -> Folder {
    let folder = Folder::new();
    folder
        .plugin("files", "files")
        .manifest(
            "files",
            "[[files]]\nhost = \"data\"\nguest = \"/data\"\n[config]\npage_size = 2\n",
        )
        .plugin("notes", "notes")
        .manifest("notes", "[config]\npage_size = 2\n")
        .manifest(
            "memo",
            "component = \"notes.wasm\"\n[config]\npage_size = 3\n",
        )
        .plugin("conformance", "conformance")
        .manifest("conformance", "scheme = \"test\"\n");
    for file in DATA_FILES {
        folder.file(
            &format!("data/{file}"),
            format!("contents of {file}").as_bytes(),
        );
    }
    folder
}

fn expected_uris() -> BTreeSet<String> {
    let mut uris = BTreeSet::new();
    for file in DATA_FILES {
        uris.insert(format!("files://{}", file.replace(' ', "%20")));
    }
    for id in NOTE_IDS {
        uris.insert(format!("notes://notes/{id}"));
        uris.insert(format!("memo://notes/{id}"));
    }
    for fixture in ["static-text", "static-binary", "watched-resource"] {
        uris.insert(format!("test://{fixture}"));
    }
    uris
}

async fn every_page(client: &McpClient) -> (Vec<String>, usize) {
    let mut uris = Vec::new();
    let mut pages = 0;
    let mut cursor = None;
    loop {
        let page = client
            .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .expect("a page lists");
        pages += 1;
        assert!(
            page.resources.len() <= 3,
            "page of {} entries",
            page.resources.len()
        );
        uris.extend(page.resources.into_iter().map(|resource| resource.uri));
        cursor = page.next_cursor;
        if cursor.is_none() {
            return (uris, pages);
        }
        assert!(pages < 100, "pagination does not end");
    }
}

#[tokio::test]
async fn merged_pagination_shows_every_resource_exactly_once() {
    let folder = three_plugin_folder();
    for era in Era::ALL {
        let client = client(folder.path(), &["--page-size", "3"], era)
            .await
            .unwrap();
        let (uris, pages) = every_page(&client).await;
        let unique: BTreeSet<String> = uris.iter().cloned().collect();
        assert_eq!(unique.len(), uris.len(), "{era:?}: duplicates in {uris:?}");
        let expected = expected_uris();
        assert_eq!(unique, expected, "{era:?}");
        // Every page but the last is full, even where it spans plugins.
        assert_eq!(pages, expected.len().div_ceil(3), "{era:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn templates_merge_with_schemes_and_unencoded_braces() {
    let folder = three_plugin_folder();
    for era in Era::ALL {
        let client = client(folder.path(), &["--page-size", "2"], era)
            .await
            .unwrap();
        let mut templates = Vec::new();
        let mut cursor = None;
        loop {
            let page = client
                .list_resource_templates(Some(
                    PaginatedRequestParams::default().with_cursor(cursor),
                ))
                .await
                .unwrap();
            templates.extend(page.resource_templates.into_iter().map(|t| t.uri_template));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(
            templates,
            [
                "files://{+path}",
                "memo://notes/{id}",
                "memo://tags/{tag}",
                "notes://notes/{id}",
                "notes://tags/{tag}",
                "test://template/{id}/data",
            ],
            "{era:?}"
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn reads_text_binary_directories_and_templates() {
    let folder = three_plugin_folder();
    let png = std::fs::read(resmux_tests::workspace().join("plugins/files/files-sample/pixel.png"))
        .unwrap();
    folder.file("data/image.png", &png);
    for era in Era::ALL {
        let client = client(folder.path(), &[], era).await.unwrap();
        let read = |uri: &str| client.read_resource(ReadResourceRequestParams::new(uri));

        let note = read("notes://notes/welcome").await.unwrap();
        match &note.contents[..] {
            [
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                },
            ] => {
                assert_eq!(uri, "notes://notes/welcome");
                assert_eq!(mime_type.as_deref(), Some("text/markdown"));
                assert!(text.starts_with("# Welcome\n"), "{text}");
            }
            other => panic!("{era:?}: {other:?}"),
        }

        let image = read("files://image.png").await.unwrap();
        match &image.contents[..] {
            [
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                },
            ] => {
                assert_eq!(uri, "files://image.png");
                assert_eq!(mime_type.as_deref(), Some("image/png"));
                assert_eq!(STANDARD.decode(blob).unwrap(), png);
            }
            other => panic!("{era:?}: {other:?}"),
        }

        let spaced = read("files://e%20f.txt").await.unwrap();
        assert!(matches!(&spaced.contents[..],
            [ResourceContents::TextResourceContents { text, .. }] if text == "contents of e f.txt"));
        // A trailing slash names the same file.
        let slashed = read("files://e%20f.txt/").await.unwrap();
        assert!(matches!(&slashed.contents[..],
            [ResourceContents::TextResourceContents { text, .. }] if text == "contents of e f.txt"));

        let directory = read("files://deep").await.unwrap();
        let entries: Vec<&str> = directory
            .contents
            .iter()
            .map(|content| match content {
                ResourceContents::TextResourceContents { uri, .. } => uri.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            entries,
            ["files://deep/d.txt", "files://deep/er"],
            "{era:?}"
        );

        let templated = read("test://template/123/data").await.unwrap();
        assert!(matches!(&templated.contents[..],
            [ResourceContents::TextResourceContents { text, .. }]
                if text == r#"{"id":"123","templateTest":true,"data":"Data for ID: 123"}"#));

        let memo = read("memo://tags/home").await.unwrap();
        assert!(matches!(&memo.contents[..],
            [ResourceContents::TextResourceContents { uri, text, .. }]
                if uri == "memo://tags/home" && text.contains("[Groceries](notes/groceries)")));
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn completes_template_arguments() {
    let folder = three_plugin_folder();
    for era in Era::ALL {
        let client = client(folder.path(), &[], era).await.unwrap();
        let ids = client
            .complete_resource_argument("notes://notes/{id}", "id", "p", None)
            .await
            .unwrap();
        assert_eq!(ids.values, ["pagination", "paths"]);
        assert_eq!(ids.total, Some(2));
        let paths = client
            .complete_resource_argument("files://{+path}", "path", "deep/", None)
            .await
            .unwrap();
        assert_eq!(paths.values, ["deep/d.txt", "deep/er/"]);
        let unknown = client
            .complete_resource_argument("notes://notes/{id}", "nope", "", None)
            .await;
        assert_eq!(mcp_error(unknown).code.0, -32602, "{era:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn forged_stale_and_foreign_cursors_are_invalid_params() {
    let folder = three_plugin_folder();
    for era in Era::ALL {
        let client = client(folder.path(), &["--page-size", "2"], era)
            .await
            .unwrap();
        let first = client.list_resources(None).await.unwrap();
        let cursor = first.next_cursor.expect("more than one page");
        let mut forged = cursor.clone().into_bytes();
        let last = forged.len() - 2;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        let template_cursor = client
            .list_resource_templates(None)
            .await
            .unwrap()
            .next_cursor
            .expect("more than one page of templates");
        // A cursor from another server process, as after a restart.
        let other = resmux_tests::client(folder.path(), &["--page-size", "2"], era)
            .await
            .unwrap();
        let stale = other
            .list_resources(None)
            .await
            .unwrap()
            .next_cursor
            .unwrap();
        other.cancel().await.unwrap();
        for bad in [
            forged.as_str(),
            stale.as_str(),
            "",
            "not-a-cursor",
            template_cursor.as_str(),
        ] {
            let result = client
                .list_resources(Some(
                    PaginatedRequestParams::default().with_cursor(Some(bad.into())),
                ))
                .await;
            let error = mcp_error(result);
            assert_eq!(error.code.0, -32602, "{era:?} cursor {bad:?}: {error:?}");
        }
        // The genuine cursor still works after the forged ones.
        let second = client
            .list_resources(Some(
                PaginatedRequestParams::default().with_cursor(Some(cursor)),
            ))
            .await
            .unwrap();
        assert_eq!(second.resources.len(), 2);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn not_found_uses_the_code_of_each_era_with_the_uri() {
    let folder = three_plugin_folder();
    for era in Era::ALL {
        let client = client(folder.path(), &[], era).await.unwrap();
        for uri in [
            "notes://notes/nope",
            "nobody://serves/this",
            "test://nonexistent-resource-for-conformance-testing",
        ] {
            let error = mcp_error(
                client
                    .read_resource(ReadResourceRequestParams::new(uri))
                    .await,
            );
            assert_eq!(
                error.code.0,
                era.not_found_code(),
                "{era:?} {uri}: {error:?}"
            );
            assert_eq!(error.data.as_ref().unwrap()["uri"], uri, "{era:?}");
        }
        let invalid = mcp_error(
            client
                .read_resource(ReadResourceRequestParams::new("notes://has space"))
                .await,
        );
        assert_eq!(invalid.code.0, -32602);
        assert!(invalid.message.contains("' '"), "{}", invalid.message);
        client.cancel().await.unwrap();
    }
}
