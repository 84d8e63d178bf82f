//! The tape: line types and version, the streaming writer and reader, the exchange index, and
//! the named-tape store.

pub mod format;
pub mod index;
pub mod reader;
pub mod store;
pub mod writer;

pub use format::{End, ExitInfo, Header, ServerDecl, DEFAULT_SERVER};
pub use index::TapeIndex;
pub use reader::{Entry, Item, TapeError, TapeReader, Warning};
pub use writer::TapeWriter;
