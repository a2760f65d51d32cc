//! The example plugins written in languages other than Rust, loaded by the
//! real host from `target/plugins` (with their manifests and sample data)
//! and used through MCP over stdio.

use resmux_tests::{
    Folder, HttpStub, RawServer, Reply, component, first_change_report, free_address, workspace,
};
use serde_json::{Value, json};

fn uris_of(response: &Value) -> Vec<String> {
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
        uris.extend(uris_of(&page));
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

/// A loopback JSON API: `/items` and `/items/ID`; anything else is 404.
fn items_api() -> u16 {
    let api = HttpStub::start(|path| {
        let (status, body) = match path {
            "/items" => (
                "200 OK",
                json!([
                    { "id": "apples", "title": "Apples", "updated": "2026-11-01T00:00:00Z" },
                    { "id": "apricots", "title": "Apricots" },
                    { "id": "bread", "title": "Bread", "description": "Sourdough" }
                ]),
            ),
            "/items/apples" => ("200 OK", json!({ "id": "apples", "stock": 12 })),
            _ => ("404 Not Found", json!({ "error": "no such item" })),
        };
        Reply::new(status, body.to_string()).header("Content-Type", "application/json")
    });
    api.port
}

#[tokio::test]
async fn the_javascript_catalog_plugin_proxies_a_granted_api() {
    let port = items_api();
    let folder = Folder::new();
    std::fs::copy(component("catalog"), folder.path().join("catalog.wasm")).unwrap();
    folder.manifest(
        "catalog",
        &format!(
            "[config]\napi = \"http://127.0.0.1:{port}\"\n[network]\nallow = [\"http://127.0.0.1:{port}\"]\n"
        ),
    );
    folder.manifest(
        "ungranted",
        &format!("component = \"catalog.wasm\"\n[config]\napi = \"http://127.0.0.1:{port}\"\n"),
    );
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let listed = server.request("resources/list", json!({})).await.unwrap();
    assert_eq!(
        uris_of(&listed),
        [
            "catalog://items/apples",
            "catalog://items/apricots",
            "catalog://items/bread"
        ],
        "the ungranted mount lists nothing: {listed}"
    );
    let apples = server.read_text("catalog://items/apples").await;
    assert_eq!(serde_json::from_str::<Value>(&apples).unwrap()["stock"], 12);
    let missing = server.read("catalog://items/pears").await.unwrap();
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    let denied = server.read("ungranted://items/apples").await.unwrap();
    assert_eq!(denied["error"]["code"], -32603, "{denied}");
    let completion = server
        .request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/resource", "uri": "catalog://items/{id}" },
                "argument": { "name": "id", "value": "ap" }
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["apples", "apricots"]),
        "{completion}"
    );
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("the plugin has no http or https grant, so wasi:http is not linked"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_c_kv_plugin_serves_its_single_granted_file_and_reports_changes() {
    let folder = Folder::new();
    std::fs::copy(component("kv"), folder.path().join("kv.wasm")).unwrap();
    folder
        .manifest(
            "kv",
            "[config]\nstore = \"/data/store.kv\"\n[[files]]\nhost = \"private/store.kv\"\nguest = \"/data/store.kv\"\n[changes]\ninterval_ms = 200\n",
        )
        .file("private/store.kv", b"# sample\nmotd = hello\nowner = ops\nbad key = skipped\n")
        .file("private/neighbour.kv", b"secret = yes\n");
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let listed = server.request("resources/list", json!({})).await.unwrap();
    assert_eq!(uris_of(&listed), ["kv://keys/motd", "kv://keys/owner"]);
    assert_eq!(listed["result"]["resources"][0]["size"], 5);
    assert_eq!(server.read_text("kv://keys/owner").await, "ops");
    let missing = server.read("kv://keys/secret").await.unwrap();
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    let completion = server
        .request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/resource", "uri": "kv://keys/{key}" },
                "argument": { "name": "key", "value": "m" }
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["motd"])
    );

    let subscribed = server
        .request("resources/subscribe", json!({ "uri": "kv://keys/motd" }))
        .await
        .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    first_change_report(&metrics, "kv").await;
    folder.file("private/store.kv", b"motd = changed\nowner = ops\n");
    let updated = server
        .notification("notifications/resources/updated", |_| true)
        .await
        .unwrap();
    assert_eq!(updated["params"]["uri"], "kv://keys/motd");
    assert_eq!(server.read_text("kv://keys/motd").await, "changed");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_go_units_plugin_converts_and_completes_by_dimension() {
    let folder = Folder::new();
    folder.plugin("units", "units");
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let listed = server.request("resources/list", json!({})).await.unwrap();
    let uris = uris_of(&listed);
    assert_eq!(uris.len(), 17, "{uris:?}");
    assert!(uris.contains(&"units://units/fahrenheit".to_owned()));
    assert_eq!(
        server
            .read_text("units://convert/100/celsius/fahrenheit")
            .await,
        "212"
    );
    assert_eq!(
        server.read_text("units://convert/1/mile/foot").await,
        "5280"
    );
    let mixed = server
        .read("units://convert/1/mile/kilogram")
        .await
        .unwrap();
    assert_eq!(mixed["error"]["code"], -32002, "{mixed}");
    let completion = server
        .request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/resource", "uri": "units://convert/{value}/{from}/{to}" },
                "argument": { "name": "to", "value": "" },
                "context": { "arguments": { "value": "3", "from": "pound" } }
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["gram", "kilogram", "ounce", "pound"]),
        "{completion}"
    );
    server.stop().await.unwrap();
}
