//! `mcptape check`: replay the recorded client side against a live server and grade how its
//! answers differ from the recording.

pub mod grade;
pub mod report;

pub use report::{CheckReport, CheckedExchange, Grade, Status};
