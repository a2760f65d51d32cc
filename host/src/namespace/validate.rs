//! Checks on what a plugin returns, before any of it reaches a client. Each
//! check returns the reason a value was refused; the namespace turns that into
//! a logged, client-facing error naming the plugin.

use serde_json::{Map, Value};

use super::uri;
use crate::contract::{Annotations, Icon, Metadata};

/// A JSON object, as MCP `_meta` carries.
pub type JsonObject = Map<String, Value>;

/// Checks that `text`, the `field` of an answer, is at most `max` bytes long.
pub fn length(field: &str, text: &str, max: u32) -> Result<(), String> {
    if text.len() > max as usize {
        return Err(format!(
            "its {field} is {} bytes long, over the limit of {max}",
            text.len()
        ));
    }
    Ok(())
}

/// Checks a MIME type such as `text/plain; charset=utf-8`.
pub fn mime_type(mime_type: &str) -> Result<(), String> {
    let parsed: mime::Mime = mime_type
        .parse()
        .map_err(|_| format!("MIME type {mime_type:?} is malformed"))?;
    if parsed.type_().as_str().is_empty() || parsed.subtype().as_str().is_empty() {
        return Err(format!("MIME type {mime_type:?} lacks a type or subtype"));
    }
    if parsed.type_() == mime::STAR || parsed.subtype() == mime::STAR {
        return Err(format!("MIME type {mime_type:?} is a wildcard"));
    }
    Ok(())
}

/// Parses `_meta` text, which must be a JSON object.
pub fn meta(text: &str) -> Result<JsonObject, String> {
    match serde_json::from_str(text) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(format!("_meta {text:?} is not a JSON object")),
    }
}

/// Checks the descriptive fields of a resource or template, none longer than
/// `max_string` bytes, and takes out its `_meta`, parsed.
pub fn metadata(metadata: &mut Metadata, max_string: u32) -> Result<Option<JsonObject>, String> {
    if metadata.name.trim().is_empty() {
        return Err("the name is empty".into());
    }
    let optional = [
        ("title", &metadata.title),
        ("description", &metadata.description),
        ("MIME type", &metadata.mime_type),
        ("_meta", &metadata.meta),
    ];
    length("name", &metadata.name, max_string)?;
    for (field, text) in optional {
        if let Some(text) = text {
            length(field, text, max_string)?;
        }
    }
    for icon in &metadata.icons {
        length("icon source", &icon.src, max_string)?;
        if let Some(mime) = &icon.mime_type {
            length("icon MIME type", mime, max_string)?;
        }
        for size in &icon.sizes {
            length("icon size", size, max_string)?;
        }
    }
    if let Some(mime) = &metadata.mime_type {
        mime_type(mime)?;
    }
    if let Some(annotations) = &metadata.annotations {
        self::annotations(annotations)?;
    }
    for icon in &metadata.icons {
        self::icon(icon)?;
    }
    metadata.meta.take().map(|text| meta(&text)).transpose()
}

fn annotations(annotations: &Annotations) -> Result<(), String> {
    if let Some(priority) = annotations.priority
        && !(0.0..=1.0).contains(&priority)
    {
        return Err(format!("priority {priority} is outside 0.0 to 1.0"));
    }
    if let Some(stamp) = &annotations.last_modified {
        chrono::DateTime::parse_from_rfc3339(stamp)
            .map_err(|_| format!("lastModified {stamp:?} is not an ISO 8601 timestamp"))?;
    }
    Ok(())
}

fn icon(icon: &Icon) -> Result<(), String> {
    let scheme_ok = ["https:", "http:", "data:"]
        .iter()
        .any(|scheme| icon.src.starts_with(scheme));
    // The schema's `uri` format: RFC 3986 characters only (found by fuzzing).
    if !scheme_ok || uri::check_characters(&icon.src).is_err() {
        return Err(format!(
            "icon source {:?} is not an http(s) or data URI",
            icon.src
        ));
    }
    if let Some(mime) = &icon.mime_type {
        mime_type(mime)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_mime_types() {
        assert!(mime_type("text/plain").is_ok());
        assert!(mime_type("text/plain; charset=utf-8").is_ok());
        assert!(mime_type("application/vnd.api+json").is_ok());
        assert!(mime_type("text").is_err());
        assert!(mime_type("text/").is_err());
        assert!(mime_type("*/*").is_err());
        assert!(mime_type("text/plain\n").is_err());
    }

    #[test]
    fn checks_meta() {
        assert_eq!(meta(r#"{"a":1}"#).unwrap()["a"], 1);
        assert!(meta("[1]").is_err());
        assert!(meta("{").is_err());
    }

    #[test]
    fn checks_metadata() {
        let mut good = Metadata {
            name: "n".into(),
            annotations: Some(Annotations {
                priority: Some(0.5),
                last_modified: Some("2026-11-30T12:00:00Z".into()),
                ..Annotations::default()
            }),
            meta: Some(r#"{"k":"v"}"#.into()),
            ..Metadata::default()
        };
        assert!(metadata(&mut good, 1024).unwrap().is_some());
        assert_eq!(good.meta, None);
        let mut unnamed = Metadata::default();
        assert!(metadata(&mut unnamed, 1024).is_err());
        let mut bad_priority = Metadata {
            name: "n".into(),
            annotations: Some(Annotations {
                priority: Some(2.0),
                ..Annotations::default()
            }),
            ..Metadata::default()
        };
        assert!(metadata(&mut bad_priority, 1024).is_err());
        let mut wordy = Metadata {
            name: "n".into(),
            description: Some("word ".repeat(300)),
            ..Metadata::default()
        };
        assert_eq!(
            metadata(&mut wordy, 1024).unwrap_err(),
            "its description is 1500 bytes long, over the limit of 1024"
        );
    }
}
