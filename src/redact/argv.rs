//! A server's command line and URL redacted for the tape's `server` line and for `show`: each
//! argument as text, and the values of flags that carry secrets.

use super::{is_marker, rules, squash, text, Redactor};

impl Redactor {
    /// A command line with its secrets out: each argument as text (shapes, assignments such as
    /// `TOKEN=…` or `--api-key=…`), the argument after a flag named like a sensitive key
    /// (`--password hunter2`) or one of `rules::SECRET_FLAGS` (`-p`, `--auth`, `--pat`, …), and
    /// the password of `-u user:pass`.
    pub fn redact_argv(&self, argv: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(argv.len());
        let mut next: Option<&str> = None; // the flag whose value comes next
        for arg in argv {
            // A flag is `-x` or `--name`; anything else starting with `-` is a value (a PEM
            // block starts with `-----BEGIN`).
            let flag = is_flag(arg);
            if let Some(name) = next.take() {
                if !flag {
                    out.push(self.flag_value(name, arg));
                    continue;
                }
            }
            if flag {
                let stripped = arg.trim_start_matches('-');
                if self.defaults && self.is_secret_flag(stripped) {
                    next = Some(stripped);
                }
                out.push(arg.clone());
                continue;
            }
            // `--name=value`, `NAME=value`.
            if let Some((k, v)) = arg.split_once('=') {
                let name = k.trim_start_matches('-');
                if !v.is_empty()
                    && self.defaults
                    && is_flag(&format!("--{name}"))
                    && (self.is_secret_flag(name) || self.is_sensitive_key(name))
                    && !(squash(name) == "pwd" && text::looks_like_path(v))
                {
                    out.push(format!("{k}={}", self.flag_value(name, v)));
                    continue;
                }
            }
            out.push(
                self.redact_text(arg)
                    .map(|(t, _)| t)
                    .unwrap_or_else(|| arg.clone()),
            );
        }
        out
    }

    fn is_secret_flag(&self, flag: &str) -> bool {
        self.is_sensitive_key(flag)
            || rules::SECRET_FLAGS.contains(&flag)
            || rules::USER_PASS_FLAGS.contains(&flag)
    }

    /// The value after a secret flag, redacted (a port after `-p`, a user name without a
    /// password after `-u`, stay).
    fn flag_value(&self, flag: &str, v: &str) -> String {
        // Already taken out (a tape redacted again): as it is.
        if is_marker(v) {
            return v.to_string();
        }
        if rules::USER_PASS_FLAGS.contains(&flag) {
            return match v.split_once(':') {
                Some((user, pass)) if !pass.is_empty() && !is_marker(pass) => {
                    format!("{user}:{}", self.marker("argument", pass))
                }
                _ => v.to_string(),
            };
        }
        let numeric = !v.is_empty() && v.len() <= 5 && v.bytes().all(|b| b.is_ascii_digit());
        if matches!(flag, "p" | "k") && numeric {
            return v.to_string();
        }
        self.marker("argument", v)
    }

    /// A URL with its credentials and secret parameters out (the server line, `show`).
    pub fn redact_url(&self, url: &str) -> String {
        self.redact_text(url)
            .map(|(t, _)| t)
            .unwrap_or_else(|| url.to_string())
    }
}

/// `-x`, `--name`, `-name`: a command-line flag (letters, digits, `-`, `_`, `.`), not a value
/// that happens to start with `-`.
fn is_flag(arg: &str) -> bool {
    let name = arg
        .strip_prefix("--")
        .or_else(|| arg.strip_prefix('-'))
        .unwrap_or("");
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
