//! `mcptape play`: serve a tape as the server.

pub mod explain;
pub mod http;
pub mod matcher;
pub mod serve;

pub use serve::{serve, Drift, PlayReport, ServeOptions, Unused};
