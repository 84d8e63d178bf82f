//! Project settings in `.mcptape/config.toml` (or `$MCPTAPE_DIR/config.toml`):
//!
//! ```toml
//! [redact]
//! default = true                       # the built-in rules (false = only the rules below)
//! keys = ["x-internal-token"]          # more sensitive keys
//! patterns = ["corp-[0-9]{6}"]         # more regexes
//! paths = ["$.params.arguments.pin"]   # RFC 9535 JSONPath over each message
//!
//! [fill]                               # `check`: real values for redacted arguments
//! api_key = "env:API_KEY"              # (env:VAR or file:PATH, never the value itself)
//! ```

use crate::redact::RedactConfig;
use serde::Deserialize;
use std::path::PathBuf;

/// The whole config file; every section optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[redact]`: the project's redaction rules.
    #[serde(default)]
    pub redact: RedactSection,
    /// `check`'s fills: name → `env:VAR` or `file:PATH`.
    #[serde(default)]
    pub fill: std::collections::BTreeMap<String, String>,
}

/// The `[redact]` section: rules added to (or, with `default = false`, instead of) the built-in
/// ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactSection {
    /// Apply the built-in rules (true unless set false).
    #[serde(default = "yes")]
    pub default: bool,
    /// More sensitive keys: their values are redacted wherever they appear.
    #[serde(default)]
    pub keys: Vec<String>,
    /// More regexes: what they match inside strings is redacted.
    #[serde(default)]
    pub patterns: Vec<String>,
    /// RFC 9535 JSONPath queries over each message: the values they select are redacted.
    #[serde(default)]
    pub paths: Vec<String>,
}

impl Default for RedactSection {
    fn default() -> Self {
        RedactSection {
            default: true,
            keys: Vec::new(),
            patterns: Vec::new(),
            paths: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, thiserror::Error)]
/// The config file could not be read or parsed (exit 64).
#[error("{}: {message}", path.display())]
pub struct ConfigError {
    /// The config file.
    pub path: PathBuf,
    /// What went wrong (the I/O error or the TOML parser's complaint).
    pub message: String,
}

impl crate::exit::Coded for ConfigError {
    fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

/// Where the project config is.
pub fn path() -> PathBuf {
    crate::tape::store::root().join("config.toml")
}

/// The project config; the defaults when there is no file.
pub fn load() -> Result<Config, ConfigError> {
    let path = path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(e) => {
            return Err(ConfigError {
                path,
                message: e.to_string(),
            })
        }
    };
    toml::from_str(&text).map_err(|e| ConfigError {
        path,
        message: e.to_string(),
    })
}

impl Config {
    /// The redaction rules: the project's, then the command line's on top.
    pub fn redaction(&self, no_defaults: bool, rules: &[String]) -> RedactConfig {
        let mut cfg = RedactConfig {
            defaults: self.redact.default && !no_defaults,
            keys: self.redact.keys.clone(),
            patterns: self.redact.patterns.clone(),
            paths: self.redact.paths.clone(),
            literals: Vec::new(),
            marker_key: None,
        };
        for r in rules {
            cfg.add_rule(r);
        }
        cfg
    }
}
