//! `mcptape export`: a tape as OpenTelemetry traces — spans with the recorded times and the
//! semantic conventions' attributes ([`spans`]), encoded as OTLP/JSON or protobuf ([`otlp`]),
//! written to a file or sent to an OTLP/HTTP endpoint ([`send`]).

pub mod otlp;
pub mod send;
pub mod spans;
