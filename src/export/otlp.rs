//! Spans in the two OTLP encodings: OTLP/JSON (the protobuf JSON mapping: lowerCamelCase
//! names, ids in hex, 64-bit integers as strings, enums as numbers) and OTLP protobuf
//! (`ExportTraceServiceRequest` of opentelemetry-proto's trace/v1 and collector/trace/v1,
//! the fields this export uses, by their numbers).

use super::spans::{hex, Attr, AttrValue, Resource, Span, SpanKind, SpanStatus};
use serde_json::{json, Value};

/// The instrumentation scope the spans come from.
const SCOPE: &str = "mcptape";

/// OTLP's `SPAN_KIND_CLIENT`.
const KIND_CLIENT: i32 = 3;
/// OTLP's `STATUS_CODE_ERROR`.
const STATUS_ERROR: i32 = 2;

fn kind(k: SpanKind) -> i32 {
    match k {
        SpanKind::Client => KIND_CLIENT,
    }
}

/// An `ExportTraceServiceRequest` as OTLP/JSON.
pub fn to_json(resources: &[Resource]) -> Value {
    let rs: Vec<Value> = resources
        .iter()
        .map(|r| {
            json!({
                "resource": {"attributes": json_attrs(&r.attrs)},
                "scopeSpans": [{
                    "scope": {"name": SCOPE, "version": env!("CARGO_PKG_VERSION")},
                    "spans": r.spans.iter().map(json_span).collect::<Vec<_>>(),
                }],
            })
        })
        .collect();
    json!({ "resourceSpans": rs })
}

fn json_span(s: &Span) -> Value {
    let mut v = json!({
        "traceId": hex(&s.trace_id),
        "spanId": hex(&s.span_id),
        "name": s.name,
        "kind": kind(s.kind),
        "startTimeUnixNano": s.start_ns.to_string(),
        "endTimeUnixNano": s.end_ns.to_string(),
        "attributes": json_attrs(&s.attrs),
        "events": s.events.iter().map(|e| json!({
            "timeUnixNano": e.time_ns.to_string(),
            "name": e.name,
            "attributes": json_attrs(&e.attrs),
        })).collect::<Vec<_>>(),
        "status": match &s.status {
            SpanStatus::Unset => json!({}),
            SpanStatus::Error(m) => json!({"code": STATUS_ERROR, "message": m}),
        },
    });
    if let Some(p) = &s.parent {
        v["parentSpanId"] = json!(hex(p));
    }
    v
}

fn json_attrs(attrs: &[Attr]) -> Vec<Value> {
    attrs
        .iter()
        .map(|(k, v)| json!({"key": k, "value": json_value(v)}))
        .collect()
}

fn json_value(v: &AttrValue) -> Value {
    match v {
        AttrValue::Str(s) => json!({ "stringValue": s }),
        AttrValue::Int(n) => json!({ "intValue": n.to_string() }),
        AttrValue::Bool(b) => json!({ "boolValue": b }),
        AttrValue::StrList(l) => {
            json!({"arrayValue": {"values": l.iter().map(|s| json!({"stringValue": s})).collect::<Vec<_>>()}})
        }
    }
}

/// An `ExportTraceServiceRequest` as OTLP protobuf bytes.
pub fn to_protobuf(resources: &[Resource]) -> Vec<u8> {
    use prost::Message;
    let req = pb::ExportTraceServiceRequest {
        resource_spans: resources
            .iter()
            .map(|r| pb::ResourceSpans {
                resource: Some(pb::Resource {
                    attributes: pb_attrs(&r.attrs),
                }),
                scope_spans: vec![pb::ScopeSpans {
                    scope: Some(pb::InstrumentationScope {
                        name: SCOPE.into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
                    spans: r.spans.iter().map(pb_span).collect(),
                }],
            })
            .collect(),
    };
    req.encode_to_vec()
}

fn pb_span(s: &Span) -> pb::Span {
    pb::Span {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: s.name.clone(),
        kind: kind(s.kind),
        start_time_unix_nano: s.start_ns,
        end_time_unix_nano: s.end_ns,
        attributes: pb_attrs(&s.attrs),
        events: s
            .events
            .iter()
            .map(|e| pb::Event {
                time_unix_nano: e.time_ns,
                name: e.name.clone(),
                attributes: pb_attrs(&e.attrs),
            })
            .collect(),
        status: Some(match &s.status {
            SpanStatus::Unset => pb::Status::default(),
            SpanStatus::Error(m) => pb::Status {
                message: m.clone(),
                code: STATUS_ERROR,
            },
        }),
    }
}

fn pb_attrs(attrs: &[Attr]) -> Vec<pb::KeyValue> {
    attrs
        .iter()
        .map(|(k, v)| pb::KeyValue {
            key: (*k).into(),
            value: Some(pb_value(v)),
        })
        .collect()
}

fn pb_value(v: &AttrValue) -> pb::AnyValue {
    use pb::any_value::Value as V;
    let value = match v {
        AttrValue::Str(s) => V::StringValue(s.clone()),
        AttrValue::Int(n) => V::IntValue(*n),
        AttrValue::Bool(b) => V::BoolValue(*b),
        AttrValue::StrList(l) => V::ArrayValue(pb::ArrayValue {
            values: l
                .iter()
                .map(|s| pb::AnyValue {
                    value: Some(V::StringValue(s.clone())),
                })
                .collect(),
        }),
    };
    pb::AnyValue { value: Some(value) }
}

/// The OTLP messages this export writes, with opentelemetry-proto's field numbers (fields it
/// does not use are left out: protobuf readers skip what is absent). Written out rather than
/// generated: the opentelemetry-proto crate would bring tonic and a build of its own.
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportTraceServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_spans: Vec<ResourceSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceSpans {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_spans: Vec<ScopeSpans>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Span {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "4")]
        pub parent_span_id: Vec<u8>,
        #[prost(string, tag = "5")]
        pub name: String,
        #[prost(int32, tag = "6")]
        pub kind: i32,
        #[prost(fixed64, tag = "7")]
        pub start_time_unix_nano: u64,
        #[prost(fixed64, tag = "8")]
        pub end_time_unix_nano: u64,
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(message, repeated, tag = "11")]
        pub events: Vec<Event>,
        #[prost(message, optional, tag = "15")]
        pub status: Option<Status>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(fixed64, tag = "1")]
        pub time_unix_nano: u64,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(int32, tag = "3")]
        pub code: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 5")]
        pub value: Option<any_value::Value>,
    }

    pub mod any_value {
        /// Named as in the .proto (`string_value`…), which the variant names follow.
        #[allow(clippy::enum_variant_names)]
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(string, tag = "1")]
            StringValue(String),
            #[prost(bool, tag = "2")]
            BoolValue(bool),
            #[prost(int64, tag = "3")]
            IntValue(i64),
            #[prost(message, tag = "5")]
            ArrayValue(super::ArrayValue),
        }
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ArrayValue {
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<AnyValue>,
    }
}
