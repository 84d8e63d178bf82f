"""Reads mcptape's OTLP exports with the official OpenTelemetry protobuf definitions (PyPI
opentelemetry-proto): a file parsed into ExportTraceServiceRequest (protobuf, or OTLP/JSON through
protobuf's own json_format, which refuses unknown fields), or an OTLP/HTTP receiver on 127.0.0.1
that parses what it is sent. Prints (or appends, one JSON line per export) a plain summary the
tests compare.

    python otlp_peer.py parse FILE json|protobuf
    python otlp_peer.py receive PORT_FILE OUT_FILE
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status


def parse(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    if encoding == "protobuf":
        req.ParseFromString(body)
    else:
        # OTLP/JSON puts ids in hex where protobuf's JSON mapping has base64: turned back first,
        # as the OTLP specification tells receivers to.
        doc = json.loads(body)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in sp:
                            import base64

                            sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
        json_format.ParseDict(doc, req, ignore_unknown_fields=False)
    return req


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def summary(req: ExportTraceServiceRequest):
    out = []
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            out.append(
                {
                    "resource": attrs(rs.resource.attributes),
                    "scope": {"name": ss.scope.name, "version": ss.scope.version},
                    "spans": [
                        {
                            "trace_id": sp.trace_id.hex(),
                            "span_id": sp.span_id.hex(),
                            "parent": sp.parent_span_id.hex(),
                            "name": sp.name,
                            "kind": Span.SpanKind.Name(sp.kind),
                            "start": sp.start_time_unix_nano,
                            "end": sp.end_time_unix_nano,
                            "attributes": attrs(sp.attributes),
                            "events": [
                                {"name": e.name, "time": e.time_unix_nano, "attributes": attrs(e.attributes)}
                                for e in sp.events
                            ],
                            "status": {
                                "code": Status.StatusCode.Name(sp.status.code),
                                "message": sp.status.message,
                            },
                        }
                        for sp in ss.spans
                    ],
                }
            )
    return out


def receive(port_file: str, out_file: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            ctype = self.headers.get("content-type", "")
            encoding = "protobuf" if "protobuf" in ctype else "json"
            try:
                got = {
                    "path": self.path,
                    "content_type": ctype,
                    "authorization": self.headers.get("authorization"),
                    "summary": summary(parse(body, encoding)),
                }
            except Exception as e:  # a body that does not parse is the test's failure
                got = {"path": self.path, "content_type": ctype, "error": repr(e)}
            with open(out_file, "a") as f:
                f.write(json.dumps(got) + "\n")
            answer = ExportTraceServiceResponse()
            if encoding == "protobuf":
                payload = answer.SerializeToString()
            else:
                payload = json_format.MessageToJson(answer).encode()
            self.send_response(200)
            self.send_header("content-type", ctype or "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "parse":
        with open(sys.argv[2], "rb") as f:
            print(json.dumps(summary(parse(f.read(), sys.argv[3]))))
    else:
        receive(sys.argv[2], sys.argv[3])
