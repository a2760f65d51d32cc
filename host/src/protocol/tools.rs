//! The tool bridge, for MCP clients that show tools to the model but never
//! resources: `search_resources` finds resources by name, title, description
//! or URI across the merged namespace, and `read_resource` returns a
//! resource's contents as embedded resources. Both go through the namespace
//! within the client's scope, and reads through its rate limit and the audit
//! log, so they see exactly what a direct list or read would, and no more.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::{ReadRefusal, ResmuxServer};
use crate::access::Client;

/// The most matches `search_resources` returns.
const MAX_MATCHES: u64 = 100;
/// Listing pages `search_resources` reads at most.
const MAX_PAGES: usize = 100;

/// The bridge's tools, as `tools/list` shows them.
pub fn tools() -> Vec<Tool> {
    let search = schema(json!({
        "type": "object",
        "properties": {
            "query": { "type": "string", "description": "Words to look for, case-insensitive" },
            "limit": { "type": "integer", "minimum": 1, "maximum": MAX_MATCHES, "default": 20 }
        },
        "required": ["query"]
    }));
    let read = schema(json!({
        "type": "object",
        "properties": {
            "uri": { "type": "string", "description": "The resource's URI, e.g. notes://notes/welcome" }
        },
        "required": ["uri"]
    }));
    let read_only = ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .open_world(false);
    vec![
        Tool::new(
            "search_resources",
            "Search the resources this server offers by name, title, description or URI. \
             Returns one line per match: the URI, then its title and description. \
             Pass a URI to read_resource to get its contents.",
            search,
        )
        .with_annotations(read_only.clone()),
        Tool::new(
            "read_resource",
            "Read one resource by URI and return its contents (text, or binary as base64).",
            read,
        )
        .with_annotations(read_only),
    ]
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(serde_json::from_value(value).expect("the schemas above are JSON objects"))
}

/// Runs one bridge tool for `client`, with its scope, rate limit and audit
/// like any read; a failure is a tool error the model can read.
pub async fn call(
    server: &ResmuxServer,
    client: &Client,
    name: &str,
    arguments: &JsonObject,
) -> Option<CallToolResult> {
    let outcome = match name {
        "search_resources" => search(server, client, arguments).await,
        "read_resource" => read(server, client, arguments).await,
        _ => return None,
    };
    Some(outcome.unwrap_or_else(|message| CallToolResult::error(vec![ContentBlock::text(message)])))
}

async fn search(
    server: &ResmuxServer,
    client: &Client,
    arguments: &JsonObject,
) -> Result<CallToolResult, String> {
    let query = arguments
        .get("query")
        .and_then(Value::as_str)
        .ok_or("search_resources needs a string `query`")?
        .to_lowercase();
    let limit = match arguments.get("limit") {
        None => 20,
        Some(limit) => limit
            .as_u64()
            .filter(|limit| (1..=MAX_MATCHES).contains(limit))
            .ok_or(format!(
                "`limit` must be a whole number from 1 to {MAX_MATCHES}"
            ))?,
    };
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut lines = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let page = server
            .page(
                client,
                cursor.as_deref(),
                server.namespace.list(cursor.as_deref(), &client.scope),
            )
            .await
            .map_err(|error| error.to_string())?;
        for resource in page.items {
            let metadata = &resource.metadata;
            let haystack = [
                Some(resource.uri.as_str()),
                Some(metadata.name.as_str()),
                metadata.title.as_deref(),
                metadata.description.as_deref(),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
            if words.iter().all(|word| haystack.contains(word)) {
                let title = metadata.title.as_deref().unwrap_or(&metadata.name);
                let description = metadata.description.as_deref().unwrap_or("");
                lines.push(format!("{} | {title} | {description}", resource.uri));
            }
            if lines.len() as u64 == limit {
                break;
            }
        }
        cursor = page.next_cursor;
        if cursor.is_none() || lines.len() as u64 == limit {
            break;
        }
    }
    let text = if lines.is_empty() {
        format!("No resource matches {query:?}.")
    } else {
        lines.join("\n")
    };
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

async fn read(
    server: &ResmuxServer,
    client: &Client,
    arguments: &JsonObject,
) -> Result<CallToolResult, String> {
    let uri = arguments
        .get("uri")
        .and_then(Value::as_str)
        .ok_or("read_resource needs a string `uri`")?;
    let read = server
        .read(client, uri, "tools/call")
        .await
        .map_err(|refusal| match refusal {
            ReadRefusal::RateLimited(message) | ReadRefusal::Unaudited(message) => message,
            ReadRefusal::Namespace(error) => error.to_string(),
        })?;
    Ok(CallToolResult::success(
        read.contents
            .into_iter()
            .map(|item| ContentBlock::resource(super::contents(item)))
            .collect(),
    ))
}
