//! The tool bridge for clients that only use tools: `search_resources` and
//! `read_resource` over the same namespace, `tools/list` and `prompts/list`
//! always answering, and `--no-tools` to switch the bridge off.

use resmux_tests::{Era, McpClient, client, notes_and_fixtures};
use rmcp::model::{CallToolRequestParams, ContentBlock, ResourceContents};
use serde_json::json;

async fn call(
    client: &McpClient,
    name: &'static str,
    arguments: serde_json::Value,
) -> rmcp::model::CallToolResult {
    let arguments = arguments.as_object().unwrap().clone();
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .unwrap()
}

fn text_of(block: &ContentBlock) -> &str {
    match block {
        ContentBlock::Text(text) => &text.text,
        other => panic!("not text: {other:?}"),
    }
}

#[tokio::test]
async fn search_and_read_reach_resources_through_tools() {
    let folder = notes_and_fixtures();
    for era in Era::ALL {
        let client = client(folder.path(), &["--page-size", "2"], era)
            .await
            .unwrap();
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(names, ["search_resources", "read_resource"], "{era:?}");
        assert!(client.list_all_prompts().await.unwrap().is_empty());

        let found = call(
            &client,
            "search_resources",
            json!({ "query": "Tags: GUIDE" }),
        )
        .await;
        assert_eq!(found.is_error, Some(false));
        let lines: Vec<&str> = text_of(&found.content[0]).lines().collect();
        assert_eq!(
            lines,
            [
                "notes://notes/welcome | Welcome | Tags: guide",
                "notes://notes/paths | Paths, not URIs | Tags: guide, contract"
            ],
            "{era:?}"
        );
        let limited = call(
            &client,
            "search_resources",
            json!({ "query": "test://", "limit": 2 }),
        )
        .await;
        assert_eq!(text_of(&limited.content[0]).lines().count(), 2);

        let read = call(
            &client,
            "read_resource",
            json!({ "uri": "test://static-binary" }),
        )
        .await;
        match &read.content[0] {
            ContentBlock::Resource(embedded) => assert!(matches!(&embedded.resource,
                ResourceContents::BlobResourceContents { uri, mime_type, .. }
                    if uri == "test://static-binary" && mime_type.as_deref() == Some("image/png"))),
            other => panic!("{era:?}: {other:?}"),
        }
        let missing = call(
            &client,
            "read_resource",
            json!({ "uri": "notes://notes/nope" }),
        )
        .await;
        assert_eq!(missing.is_error, Some(true));
        assert!(text_of(&missing.content[0]).contains("resource notes://notes/nope not found"));
        let bad = call(&client, "search_resources", json!({ "limit": 500 })).await;
        assert_eq!(bad.is_error, Some(true));
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn the_bridge_can_be_switched_off() {
    let folder = notes_and_fixtures();
    let client = client(folder.path(), &["--no-tools"], Era::Legacy)
        .await
        .unwrap();
    assert!(client.list_all_tools().await.unwrap().is_empty());
    let refused = client
        .call_tool(CallToolRequestParams::new("read_resource"))
        .await;
    assert_eq!(resmux_tests::mcp_error(refused).code.0, -32602);
    client.cancel().await.unwrap();
}
