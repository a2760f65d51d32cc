//! The example plugins written in languages other than Rust, loaded by the
//! real host from `target/plugins` (with their manifests and sample data)
//! and used through MCP over stdio.

use resmux_tests::{RawServer, workspace};
use serde_json::{Value, json};

fn texts(response: &Value) -> Vec<String> {
    response["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{response}"))
        .iter()
        .map(|resource| resource["uri"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_python_dataset_plugin_lists_reads_and_completes() {
    let plugins = workspace().join("target/plugins");
    let mut server = RawServer::start(&plugins, &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let mut uris = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let params = match &cursor {
            Value::Null => json!({}),
            cursor => json!({ "cursor": cursor }),
        };
        let page = server.request("resources/list", params).await.unwrap();
        uris.extend(texts(&page));
        cursor = page["result"]["nextCursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    for uri in ["dataset://datasets/cities", "dataset://datasets/rivers"] {
        assert!(uris.contains(&uri.to_owned()), "{uri} not in {uris:?}");
    }

    let table = server.read_text("dataset://datasets/rivers").await;
    assert!(table.starts_with("river,length_km,mouth\n"), "{table}");
    let spain = server
        .read_text("dataset://datasets/cities/where/country/Spain")
        .await;
    let rows: Vec<Value> = serde_json::from_str(&spain).unwrap();
    let cities: Vec<&str> = rows
        .iter()
        .map(|row| row["city"].as_str().unwrap())
        .collect();
    assert_eq!(cities, ["Madrid", "Seville"]);
    let row = server.read_text("dataset://datasets/rivers/rows/3").await;
    assert_eq!(
        serde_json::from_str::<Value>(&row).unwrap()["river"],
        "Rhone"
    );
    let missing = server
        .read("dataset://datasets/rivers/rows/9")
        .await
        .unwrap();
    assert_eq!(missing["error"]["code"], -32002, "{missing}");

    let completion = server
        .request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/resource", "uri": "dataset://datasets/{name}/where/{column}/{value}" },
                "argument": { "name": "value", "value": "P" },
                "context": { "arguments": { "name": "cities", "column": "country" } }
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["Portugal"]),
        "{completion}"
    );
    server.stop().await.unwrap();
}
