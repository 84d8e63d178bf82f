//! The one integration-test binary: real processes over real pipes, real MCP peers.
//! Peers are installed by `./scripts/test` (tests/peers); a missing peer is a failure that says
//! how to install it, never a silent skip.

mod harness;

mod agent_runs;
mod agents;
mod bad_lines;
mod bounds;
mod check_diff;
mod cli;
mod conformance;
mod corpus;
mod corpus_e2e;
mod dist;
mod embed;
mod exact_values;
mod export;
mod http;
mod http_leaks;
mod http_sessions;
mod import;
mod inspector;
mod llm_cli;
mod load;
mod model_proxy;
mod peers;
mod play;
mod play_faults;
mod play_http_warnings;
mod play_live;
mod play_policy;
mod properties;
mod record;
mod reliability;
mod remote;
mod report;
mod run_http;
mod secret_args;
mod security;
