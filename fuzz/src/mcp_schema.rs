//! What MCP's schema (every revision resmux speaks, 2024-11-05 to
//! 2026-07-28) requires of the answers resmux sends, checked on the JSON a
//! client reads: the JSON-RPC envelope, and the results of `resources/list`,
//! `resources/templates/list`, `resources/read` and `completion/complete`.
//! Each check returns why the value breaks the schema.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use iri_string::spec::UriSpec;
use iri_string::template::UriTemplateStr;
use iri_string::template::context::{Context, Visitor};
use serde_json::{Map, Value};

type Checked = Result<(), String>;

/// The first revision with `ttlMs` and `cacheScope` on results.
const CACHE_FIELDS_SINCE: &str = "2026-07-28";

/// A response to the request with `id`: its result, or none for an error.
pub fn response<'a>(
    message: &'a Value,
    id: &Value,
) -> Result<Option<&'a Map<String, Value>>, String> {
    let object = message.as_object().ok_or("a response must be an object")?;
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Err("`jsonrpc` must be \"2.0\"".into());
    }
    if object.get("id") != Some(id) {
        return Err(format!("the response's id must be the request's {id}"));
    }
    match (object.get("result"), object.get("error")) {
        (Some(result), None) => Ok(Some(
            result.as_object().ok_or("`result` must be an object")?,
        )),
        (None, Some(error)) => {
            let error = error.as_object().ok_or("`error` must be an object")?;
            if !error.get("code").is_some_and(Value::is_i64) {
                return Err("an error's `code` must be an integer".into());
            }
            string(error, "message", true)?;
            Ok(None)
        }
        _ => Err("a response holds exactly one of `result` and `error`".into()),
    }
}

/// A `resources/list` result, for a client of `version`.
pub fn resources(result: &Map<String, Value>, version: &str) -> Checked {
    paginated(result, version)?;
    for resource in array(result, "resources", true)? {
        let resource = object(resource, "a resource")?;
        uri(resource, "uri")?;
        described(resource)?;
        if let Some(size) = resource.get("size") {
            size.as_u64()
                .ok_or("a resource's `size` must be a non-negative integer")?;
        }
    }
    Ok(())
}

/// A `resources/templates/list` result.
pub fn templates(result: &Map<String, Value>, version: &str) -> Checked {
    paginated(result, version)?;
    for template in array(result, "resourceTemplates", true)? {
        let template = object(template, "a resource template")?;
        string(template, "uriTemplate", true)?;
        let text = template["uriTemplate"].as_str().unwrap_or_default();
        rfc6570(text)
            .map_err(|why| format!("`uriTemplate` {text:?} is not a URI template: {why}"))?;
        described(template)?;
    }
    Ok(())
}

/// A `resources/read` result.
pub fn read(result: &Map<String, Value>, version: &str) -> Checked {
    cached(result, version)?;
    meta(result)?;
    for contents in array(result, "contents", true)? {
        let contents = object(contents, "a resource's contents")?;
        uri(contents, "uri")?;
        string(contents, "mimeType", false)?;
        meta(contents)?;
        match (contents.get("text"), contents.get("blob")) {
            (Some(text), None) => {
                text.as_str().ok_or("`text` must be a string")?;
            }
            (None, Some(blob)) => {
                let blob = blob.as_str().ok_or("`blob` must be a string")?;
                STANDARD
                    .decode(blob)
                    .map_err(|error| format!("`blob` must be base64: {error}"))?;
            }
            _ => return Err("contents hold exactly one of `text` and `blob`".into()),
        }
    }
    Ok(())
}

/// A `completion/complete` result.
pub fn completion(result: &Map<String, Value>) -> Checked {
    let completion = object(
        result.get("completion").ok_or("`completion` is required")?,
        "`completion`",
    )?;
    let values = array(completion, "values", true)?;
    if values.len() > 100 {
        return Err(format!(
            "{} completion values, over MCP's 100",
            values.len()
        ));
    }
    if values.iter().any(|value| !value.is_string()) {
        return Err("completion values must be strings".into());
    }
    if let Some(total) = completion.get("total") {
        total.as_u64().ok_or("`total` must be an integer")?;
    }
    if let Some(more) = completion.get("hasMore") {
        more.as_bool().ok_or("`hasMore` must be a boolean")?;
    }
    Ok(())
}

fn paginated(result: &Map<String, Value>, version: &str) -> Checked {
    string(result, "nextCursor", false)?;
    cached(result, version)?;
    meta(result)
}

/// `ttlMs` and `cacheScope` appear for the revisions that have them only.
fn cached(result: &Map<String, Value>, version: &str) -> Checked {
    let has_fields = version >= CACHE_FIELDS_SINCE;
    for field in ["ttlMs", "cacheScope"] {
        match result.get(field) {
            Some(_) if !has_fields => {
                return Err(format!("`{field}` is not in the {version} schema"));
            }
            Some(value) if field == "ttlMs" && !value.is_u64() => {
                return Err("`ttlMs` must be a non-negative integer".into());
            }
            Some(value)
                if field == "cacheScope"
                    && !matches!(value.as_str(), Some("public" | "private")) =>
            {
                return Err("`cacheScope` must be \"public\" or \"private\"".into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// The fields a resource and a template share.
fn described(entry: &Map<String, Value>) -> Checked {
    string(entry, "name", true)?;
    for field in ["title", "description", "mimeType"] {
        string(entry, field, false)?;
    }
    meta(entry)?;
    if let Some(annotations) = entry.get("annotations") {
        let annotations = object(annotations, "`annotations`")?;
        for role in array(annotations, "audience", false)? {
            if !matches!(role.as_str(), Some("user" | "assistant")) {
                return Err(format!("{role} is not a role"));
            }
        }
        if let Some(priority) = annotations.get("priority") {
            let priority = priority.as_f64().ok_or("`priority` must be a number")?;
            if !(0.0..=1.0).contains(&priority) {
                return Err(format!("`priority` {priority} is outside 0 to 1"));
            }
        }
        string(annotations, "lastModified", false)?;
    }
    for icon in array(entry, "icons", false)? {
        let icon = object(icon, "an icon")?;
        uri(icon, "src")?;
        string(icon, "mimeType", false)?;
        for size in array(icon, "sizes", false)? {
            size.as_str().ok_or("an icon's sizes must be strings")?;
        }
        if let Some(theme) = icon.get("theme")
            && !matches!(theme.as_str(), Some("light" | "dark"))
        {
            return Err(format!("{theme} is not an icon theme"));
        }
    }
    Ok(())
}

fn meta(entry: &Map<String, Value>) -> Checked {
    match entry.get("_meta") {
        Some(meta) if !meta.is_object() => Err("`_meta` must be an object".into()),
        _ => Ok(()),
    }
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what} must be an object"))
}

/// The items of the array `field`; none if it is absent and optional.
fn array<'a>(
    entry: &'a Map<String, Value>,
    field: &str,
    required: bool,
) -> Result<&'a [Value], String> {
    match entry.get(field) {
        Some(value) => value
            .as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| format!("`{field}` must be an array")),
        None if required => Err(format!("`{field}` is required")),
        None => Ok(&[]),
    }
}

fn string(entry: &Map<String, Value>, field: &str, required: bool) -> Checked {
    match entry.get(field) {
        Some(value) if !value.is_string() => Err(format!("`{field}` must be a string")),
        None if required => Err(format!("`{field}` is required")),
        _ => Ok(()),
    }
}

/// A field whose schema format is `uri` (RFC 3986).
fn uri(entry: &Map<String, Value>, field: &str) -> Checked {
    string(entry, field, true)?;
    let text = entry[field].as_str().unwrap_or_default();
    rfc3986(text).map_err(|why| format!("`{field}` {text:?} is not a URI: {why}"))
}

/// Whether `text` is an RFC 6570 template, by a parser that is not
/// resmux's (iri-string's), whose expansion with every variable defined is
/// an RFC 3986 URI with no query inside its fragment: a template a client
/// can use.
pub fn rfc6570(text: &str) -> Result<(), String> {
    let template = UriTemplateStr::new(text).map_err(|why| format!("not RFC 6570: {why}"))?;
    let expanded = template
        .expand::<UriSpec, _>(&EveryVariable)
        .map_err(|why| format!("cannot be expanded: {why}"))?
        .to_string();
    rfc3986(&expanded).map_err(|why| format!("expands to {expanded:?}, which has {why}"))?;
    if expanded
        .split_once('#')
        .is_some_and(|(_, fragment)| fragment.contains('?'))
    {
        return Err(format!(
            "expands to {expanded:?}, a query inside its fragment"
        ));
    }
    Ok(())
}

/// A template's context in which every variable is `v`.
struct EveryVariable;

impl Context for EveryVariable {
    fn visit<V: Visitor>(&self, visitor: V) -> V::Result {
        visitor.visit_string("v")
    }
}

/// Whether `text` is an absolute URI by RFC 3986's grammar, checked to the
/// characters each part may hold.
pub fn rfc3986(text: &str) -> Result<(), &'static str> {
    let (scheme, rest) = text.split_once(':').ok_or("no scheme")?;
    let mut letters = scheme.chars();
    if !letters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        || !letters.all(|letter| letter.is_ascii_alphanumeric() || "+-.".contains(letter))
    {
        return Err("the scheme is not letters, digits, + - .");
    }
    let (before_fragment, fragment) = match rest.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (rest, None),
    };
    if fragment.is_some_and(|fragment| fragment.contains('#')) {
        return Err("more than one #");
    }
    let mut bytes = before_fragment
        .bytes()
        .chain(fragment.into_iter().flat_map(str::bytes));
    while let Some(byte) = bytes.next() {
        match byte {
            b'%' => {
                let high = bytes.next().filter(u8::is_ascii_hexdigit);
                let low = bytes.next().filter(u8::is_ascii_hexdigit);
                if high.is_none() || low.is_none() {
                    return Err("a % not followed by two hex digits");
                }
            }
            _ if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?[]".contains(&byte) => {}
            _ => return Err("a character RFC 3986 does not allow unescaped"),
        }
    }
    Ok(())
}
