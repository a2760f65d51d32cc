//! Traces: OTLP export of resmux's spans (one per MCP request, with the
//! namespace step and each plugin call beneath it), switched on by the
//! standard `OTEL_EXPORTER_OTLP_*` variables, and W3C trace context taken
//! from the client, so that a trace it started continues here.
//!
//! Export speaks OTLP over HTTP with protobuf bodies (`http/protobuf`, the
//! default of the OpenTelemetry specification) through a batch processor
//! that honours `OTEL_BSP_*`; `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES` describe the service (`resmux` unless set).

use anyhow::{Context as _, Result, bail};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};

/// The variables that switch export on: either endpoint.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];
/// The variables that choose the protocol; only `http/protobuf` is built in.
const PROTOCOL_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// The tracer provider, when the environment asks for export; `None` when
/// no OTLP endpoint is set, or `OTEL_TRACES_EXPORTER` or `OTEL_SDK_DISABLED`
/// switch traces off.
pub fn exporter_from_env() -> Result<Option<(SdkTracerProvider, Tracer)>> {
    let set = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    if !ENDPOINT_VARIABLES.iter().any(|name| set(name).is_some())
        || set("OTEL_TRACES_EXPORTER").is_some_and(|value| value == "none")
        || set("OTEL_SDK_DISABLED").is_some_and(|value| value == "true")
    {
        return Ok(None);
    }
    if let Some((name, protocol)) = PROTOCOL_VARIABLES
        .iter()
        .find_map(|name| Some((name, set(name)?)))
        && protocol != "http/protobuf"
    {
        bail!("{name}={protocol}: resmux exports traces over OTLP http/protobuf only");
    }
    for name in ENDPOINT_VARIABLES {
        if let Some(endpoint) = set(name)
            && !endpoint.starts_with("http://")
        {
            bail!(
                "{name}={endpoint}: resmux exports traces over plain http:// (to a local collector or agent)"
            );
        }
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .context("cannot set up OTLP trace export")?;
    let mut resource = Resource::builder();
    if set("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("resmux");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("resmux");
    Ok(Some((provider, tracer)))
}

/// The trace context a client sent: `traceparent` (and `tracestate`) from
/// the request's `_meta` if it carries one, else from its HTTP headers.
pub fn client_context<'a>(
    meta: &'a serde_json::Map<String, serde_json::Value>,
    headers: Option<&'a http::HeaderMap>,
) -> Option<Context> {
    let propagator = TraceContextPropagator::new();
    let from_meta = MetaFields(meta);
    let carrier: &dyn Extractor = match headers {
        _ if from_meta.get("traceparent").is_some() => &from_meta,
        Some(headers) if headers.contains_key("traceparent") => &HeaderFields(headers),
        _ => return None,
    };
    Some(propagator.extract(carrier))
}

/// `_meta` fields that hold strings.
struct MetaFields<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for MetaFields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// HTTP headers readable as text.
struct HeaderFields<'a>(&'a http::HeaderMap);

impl Extractor for HeaderFields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
