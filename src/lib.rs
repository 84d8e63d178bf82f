//! mcptape: a tape recorder for the Model Context Protocol.
//!
//! Layout: [`wire`] frames and classifies messages; [`tape`] writes, reads and indexes tapes;
//! [`record`] is the stdio recording proxy; [`play`] serves a tape as the server; [`inspect`]
//! lists and shows tapes; [`demo`] is the bundled demo. The binary (`main.rs`, `cli/`) only parses
//! arguments and maps results to exit codes ([`exit`]).

pub mod demo;
pub mod exit;
pub mod inspect;
pub mod play;
pub mod record;
pub mod tape;
pub mod wire;
