//! Built-in regexes compiled on first use. The redactor holds some sixty of them; compiling them
//! all took ~250 million instructions (tens of milliseconds) and most of a recorder's memory at
//! every start, while a session whose messages the prefilter clears never runs most of them.
//! Only built-in patterns are deferred: they are tested to compile; a user's regex is compiled
//! up front, so that its error is reported before anything starts.

use std::sync::OnceLock;

/// A value built from `source` by `build` the first time it is used.
pub(crate) struct Lazy<S, T> {
    source: S,
    build: fn(&S) -> T,
    cell: OnceLock<T>,
}

impl<S, T> Lazy<S, T> {
    pub(crate) fn new(source: S, build: fn(&S) -> T) -> Self {
        Lazy {
            source,
            build,
            cell: OnceLock::new(),
        }
    }

    /// Whether the value is built yet.
    #[cfg(test)]
    pub(crate) fn is_built(&self) -> bool {
        self.cell.get().is_some()
    }
}

impl<T> Lazy<String, T> {
    /// A value built already (a user's regex, compiled up front to report its error); `build`
    /// would make it again from `source`, and is never called.
    pub(crate) fn ready(source: String, build: fn(&String) -> T, value: T) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(value);
        Lazy {
            source,
            build,
            cell,
        }
    }
}

impl<S, T> std::ops::Deref for Lazy<S, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.cell.get_or_init(|| (self.build)(&self.source))
    }
}

/// A built-in regex over text.
pub(crate) type LazyRegex = Lazy<String, regex::Regex>;

/// A built-in regex over text, from its pattern as `rules` writes it.
pub(crate) fn builtin(pattern: &str) -> LazyRegex {
    Lazy::new(super::rules::ascii_words(pattern), |p| {
        regex::Regex::new(p).expect("built-in regex")
    })
}

/// A built-in regex over bytes.
pub(crate) fn builtin_bytes(pattern: String) -> Lazy<String, regex::bytes::Regex> {
    Lazy::new(pattern, |p| {
        regex::bytes::Regex::new(p).expect("built-in regex")
    })
}

/// A set of built-in regexes over bytes.
pub(crate) fn builtin_set(patterns: Vec<String>) -> Lazy<Vec<String>, regex::bytes::RegexSet> {
    Lazy::new(patterns, |p| {
        regex::bytes::RegexSet::new(p).expect("built-in regex set")
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_built_in_rule_compiles() {
        let r = crate::redact::Redactor::new(&crate::redact::RedactConfig::defaults()).unwrap();
        r.force_all();
    }
}
