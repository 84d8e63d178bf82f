//! The model API beside the tools: a proxy that records an agent's model calls onto the tape
//! its MCP servers are recorded on, and a player that answers them from the tape. One more
//! transport feeding the same recorder (`docs/agent-runs.md`).
//!
//! - [`provider`]: which API a path is for, and each API's words (model, streaming, usage,
//!   tool calls, errors).
//! - [`volatile`]: the request body as replay compares it, volatile fields left out.
//! - [`proxy`]: record mode. [`player`]: playback. [`calls`]: the calls on a tape.
//! - [`serve`]: either one on a listener until told to stop.

pub mod calls;
pub mod player;
pub mod provider;
pub mod proxy;
pub mod serve;
pub mod volatile;
