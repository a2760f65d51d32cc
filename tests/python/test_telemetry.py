"""Traces over OTLP: `resmux serve --http` exports its spans to an OTLP/HTTP
receiver started here, which decodes them with the official OpenTelemetry
protobuf definitions (`opentelemetry-proto`). A client's W3C `traceparent`,
sent in an HTTP header or in a request's `_meta`, is continued: the request
span is its child, the namespace step the request's, the plugin call the
namespace step's."""

import json
import os
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from conftest import eventually

HEADER_TRACE = "0af7651916cd43dd8448eb211c80319c"
HEADER_PARENT = "b7ad6b7169203331"
META_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
META_PARENT = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP trace receiver on a loopback port."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.path == "/v1/traces", self.path
                assert self.headers["Content-Type"] == "application/x-protobuf"
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        service = {
                            attribute.key: attribute.value.string_value
                            for attribute in resource_spans.resource.attributes
                        }["service.name"]
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans += [(service, span) for span in scope_spans.spans]
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.http.server_address[1]}"

    def trace(self, trace_id, names, within=30):
        """The spans of `trace_id` once every name in `names` has arrived."""

        def of_trace():
            with self.lock:
                found = [span for _, span in self.spans if span.trace_id.hex() == trace_id]
                services = {service for service, span in self.spans if span.trace_id.hex() == trace_id}
            return found, services

        def arrived(observed):
            found, _ = observed
            return set(names) <= {span.name for span in found}

        observed = eventually(of_trace, within, until=arrived)
        assert arrived(observed), f"spans {names} of {trace_id} never arrived; got {[s.name for s in observed[0]]}"
        return observed

    def close(self):
        self.http.shutdown()


def post(url, message, headers=None):
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
            **(headers or {}),
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers, response.read().decode()


def attributes(span):
    return {attribute.key: attribute.value.string_value for attribute in span.attributes}


def session(url):
    headers, _ = post(
        url,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        },
    )
    session_id = headers["Mcp-Session-Id"]
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"Mcp-Session-Id": session_id})
    return session_id


def read(url, session_id, request_id, meta=None, headers=None):
    params = {"uri": "notes://notes/welcome"}
    if meta:
        params["_meta"] = meta
    _, body = post(
        url,
        {"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": params},
        {"Mcp-Session-Id": session_id, **(headers or {})},
    )
    assert "# Welcome" in body, body


def test_spans_continue_the_clients_trace_from_headers_and_meta(serve):
    receiver = Receiver()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        server = serve(args=["--trace-uris", "--response-cache-mib", "0"], env=env)
        session_id = session(server.url)
        read(server.url, session_id, 7, headers={"traceparent": f"00-{HEADER_TRACE}-{HEADER_PARENT}-01"})
        read(server.url, session_id, 8, meta={"traceparent": f"00-{META_TRACE}-{META_PARENT}-01"})

        spans, services = receiver.trace(HEADER_TRACE, ["resources/read", "namespace.read", "read notes"])
        assert services == {"resmux"}
        by_name = {span.name: span for span in spans}
        request, step, call = by_name["resources/read"], by_name["namespace.read"], by_name["read notes"]
        assert request.parent_span_id.hex() == HEADER_PARENT
        assert step.parent_span_id == request.span_id
        assert call.parent_span_id == step.span_id
        assert request.kind == Span.SPAN_KIND_SERVER
        assert attributes(request) == {
            "mcp.method.name": "resources/read",
            "mcp.protocol.version": "2025-11-25",
            "mcp.resource.uri": '"notes://notes/welcome"',
            "jsonrpc.request.id": "7",
            "network.transport": "tcp",
        }
        assert attributes(call)["resmux.plugin"] == "notes"
        assert attributes(call)["resmux.plugin.operation"] == "read"
        assert attributes(step)["resmux.scheme"] == "notes"

        spans, _ = receiver.trace(META_TRACE, ["resources/read", "namespace.read", "read notes"])
        request = next(span for span in spans if span.name == "resources/read")
        assert request.parent_span_id.hex() == META_PARENT
        assert attributes(request)["jsonrpc.request.id"] == "8"
        assert server.stop() == 0
    finally:
        receiver.close()


def test_uris_stay_out_of_spans_unless_asked_and_errors_are_marked(serve):
    receiver = Receiver()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        server = serve(env=env)
        session_id = session(server.url)
        read(server.url, session_id, 2, headers={"traceparent": f"00-{HEADER_TRACE}-{HEADER_PARENT}-01"})
        _, body = post(
            server.url,
            {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "notes://notes/missing"}},
            {"Mcp-Session-Id": session_id, "traceparent": f"00-{META_TRACE}-{META_PARENT}-01"},
        )
        assert "-32002" in body, body

        spans, _ = receiver.trace(HEADER_TRACE, ["resources/read"])
        request = next(span for span in spans if span.name == "resources/read")
        assert attributes(request)["mcp.method.name"] == "resources/read"
        assert "mcp.resource.uri" not in attributes(request)
        spans, _ = receiver.trace(META_TRACE, ["resources/read", "read notes"])
        by_name = {span.name: span for span in spans}
        failed = by_name["resources/read"]
        assert attributes(failed)["error.type"] == "-32002"
        assert attributes(failed)["rpc.response.status_code"] == "-32002"
        assert failed.status.code == failed.status.STATUS_CODE_ERROR
        assert attributes(by_name["read notes"])["error.type"] == "not-found"
        assert server.stop() == 0
    finally:
        receiver.close()
