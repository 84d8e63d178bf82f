//! `verify`, `redact` and `lint`: what a tape holds, whether it is still what was written, and
//! taking secrets out of a tape written without (enough) redaction.

use crate::redact::{Finding, Redactor};
use crate::tape::chain;
use crate::tape::format::{End, OwnedLine};
use crate::tape::{Chain, Entry, ReadOptions, TapeError, TapeReader, Warning};
use crate::wire::rewrite::RawObject;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `verify` concludes about a tape's lines.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Every line is as written, and the tape is closed.
    Intact,
    /// Something changed after writing: the first line that does not hold.
    Tampered {
        /// 1-based number of that line.
        line: u64,
        /// What does not hold there, in words.
        reason: String,
    },
    /// The tape ends early (a crash, a full disk, or its end was cut off): intact as far as it
    /// goes.
    Cut {
        /// Lines read, header included (the report's `lines` in `--json`: not printed twice).
        #[serde(skip_serializing)]
        lines: u64,
        /// The first line that is missing or torn (the closing line, when the recorder could
        /// not write everything and said so there).
        at: u64,
        /// How it ends, in words.
        reason: String,
    },
    /// Written before the hash chain existed (format 1.0): nothing to check.
    Unchained,
}

/// What `verify` found (also its `--json` output).
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The tape's path.
    pub tape: String,
    /// Whether the lines are as written.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Lines read (header included).
    pub lines: u64,
    /// The chain's head as the closing line states it; None without a closing line or a chain.
    pub head: Option<String>,
    /// `signed-valid`, `signed-unchecked` (no key given), `signed-invalid`, `unsigned`, or
    /// `unsigned-with-key` (a key was given, so a signature was expected: a failure).
    pub signature: &'static str,
    /// Malformed lines read past (`--skip-bad-lines`); the verdict is tampered at the first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines: Vec<crate::tape::BadLine>,
}

impl VerifyReport {
    /// Intact, and the signature neither invalid nor missing where a key was given (exit 0).
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Intact
            && !matches!(self.signature, "signed-invalid" | "unsigned-with-key")
    }
}

/// Checks a tape's hash chain from the header to the closing line and, with `key`, the
/// closing line's signature. An error only when the tape cannot be opened or is not a tape.
pub fn verify(
    path: &Path,
    key: Option<&[u8]>,
    read: ReadOptions,
) -> Result<VerifyReport, TapeError> {
    let mut r = TapeReader::open_with(path, read)?;
    let mut lines = 1u64;
    let mut end: Option<(End, String, u64)> = None; // the end line, the chain head before it, its line
    let mut verdict = None;
    loop {
        let before = match r.chain() {
            Chain::Linked(h) => Some(h.clone()),
            _ => None,
        };
        match r.next_item() {
            Ok(Some(item)) => {
                lines = item.line;
                if let Entry::End(e) = item.entry {
                    end = Some((e, before.unwrap_or_default(), item.line));
                } else if end.is_some() {
                    verdict = Some(Verdict::Tampered {
                        line: item.line,
                        reason: "a line after the closing line".into(),
                    });
                    break;
                }
            }
            Ok(None) => break,
            Err(TapeError::Malformed { line, message, .. }) => {
                verdict = Some(Verdict::Tampered {
                    line,
                    reason: format!("not a valid tape line: {message}"),
                });
                break;
            }
            Err(e) => return Err(e),
        }
    }
    let torn = r.warnings().iter().find_map(|w| match w {
        Warning::TornLastLine { line, bytes } => Some((*line, *bytes)),
        _ => None,
    });
    // A cut an append recorded (`append` event with `cut`): the recording before it stopped
    // short, though the tape was closed again after the lines appended.
    let earlier_cut = r.warnings().iter().find_map(|w| match w {
        Warning::CutBeforeAppend { line, reason } => Some((*line, reason.clone())),
        _ => None,
    });
    let earlier = |text: String| match &earlier_cut {
        Some((line, reason)) => format!(
            "{text}; and before that, the recording was cut off before line {line}: {reason}"
        ),
        None => text,
    };
    let torn_at = r.line_offset();
    let chain_state = r.chain().clone();
    let skipped = crate::tape::reader::skipped_lines(r.warnings());
    // A line skipped is a line changed: tampered there, unless the chain broke before it.
    if let Some(first) = skipped.first() {
        let earlier = matches!(chain_state, Chain::Broken(at) if at < first.line);
        if verdict.is_none() && !earlier {
            verdict = Some(Verdict::Tampered {
                line: first.line,
                reason: format!(
                    "not a valid tape line: {} (read past with --skip-bad-lines: {})",
                    first.why,
                    crate::tape::reader::skipped_summary(&skipped)
                ),
            });
        }
    }
    let verdict = verdict.unwrap_or_else(|| match (&chain_state, &end) {
        (Chain::Broken(line), _) => Verdict::Tampered { line: *line, reason: "the hash chain breaks here: this line, or one before it, was edited, removed, inserted or moved".into() },
        (Chain::Absent, _) => Verdict::Unchained,
        (Chain::Linked(_), None) => Verdict::Cut {
            lines,
            at: lines + 1,
            reason: earlier(match torn {
                Some((t, _)) => format!("line {t} is torn and there is no closing line (or the tape was truncated)"),
                None => "there is no closing line (or the tape was truncated)".into(),
            }),
        },
        (Chain::Linked(_), Some((e, before, line))) => {
            if e.head.as_deref() != Some(before.as_str()) {
                Verdict::Tampered { line: *line, reason: "the closing line's head does not match the chain".into() }
            } else if let Some((line, bytes)) = torn {
                // A torn line is how a crash ends a tape, before any closing line: after one, it
                // is bytes added later (the reader skips them, so the chain never sees them).
                let to = torn_at + bytes as u64;
                let after = if std::fs::metadata(path).is_ok_and(|m| m.len() > to) {
                    "then only newlines"
                } else {
                    "no newline"
                };
                Verdict::Tampered { line, reason: format!("{bytes} bytes after the closing line, from byte {torn_at} to the end of the file ({after}): added after the tape was closed") }
            } else if let (true, Some((at, reason))) = (e.incomplete, &earlier_cut) {
                Verdict::Cut {
                    lines,
                    at: *at,
                    reason: format!("{reason}; mcptape play appended to it from line {at} on (the `append` event there keeps how it ended), and the hash chain holds over every line, old and appended"),
                }
            } else if e.incomplete {
                // The chain holds: the recorder lost lines (a write failed) and said so.
                Verdict::Cut {
                    lines,
                    at: *line,
                    reason: format!("the recorder could not write what came after line {}; its closing line says so (`incomplete`) and counts everything that crossed the wire", line - 1),
                }
            } else {
                Verdict::Intact
            }
        }
    });
    let head = end.as_ref().and_then(|(e, _, _)| e.head.clone());
    let signature = match (end.as_ref().map(|(e, _, _)| e), key) {
        (Some(e), None) if e.sig.is_some() => "signed-unchecked",
        (Some(e), Some(k)) if e.sig.is_some() => {
            let expected = head.as_deref().map(|h| chain::sign(k, h, e));
            if e.sig == expected {
                "signed-valid"
            } else {
                "signed-invalid"
            }
        }
        (_, Some(_)) => "unsigned-with-key",
        (_, None) => "unsigned",
    };
    Ok(VerifyReport {
        tape: path.display().to_string(),
        verdict,
        lines,
        head,
        signature,
        skipped_lines: skipped,
    })
}

/// One tape line (without its `h`) with the redactor applied to everything in it that can hold
/// a secret, as `record` would have written it: a message's body, its HTTP facts, a text or
/// base64 line, an oversize line's head, a server's command line and URL, an event's details.
/// The new line (`None`: unchanged) and what was found.
fn redact_line(
    redactor: &Redactor,
    line: &[u8],
    entry: &Entry<'_>,
) -> (Option<Vec<u8>>, Vec<Finding>) {
    let Ok(text) = std::str::from_utf8(line) else {
        return (None, Vec::new());
    };
    let Ok(obj) = serde_json::from_str::<RawObject<'_>>(text) else {
        return (None, Vec::new());
    };
    let mut found: Vec<Finding> = Vec::new();
    // Field → its new raw JSON text.
    let mut changes: Vec<(&str, String)> = Vec::new();
    let json_str = |s: &str| serde_json::to_string(s).expect("strings serialize");
    match entry {
        Entry::Server(decl) => {
            if let Some(argv) = &decl.command {
                let out = redactor.redact_argv(argv);
                if &out != argv {
                    for (i, (a, b)) in argv.iter().zip(&out).enumerate() {
                        if a != b {
                            found.push(Finding {
                                rule: "argument".into(),
                                path: format!("$.command[{i}]"),
                            });
                        }
                    }
                    changes.push((
                        "command",
                        serde_json::to_string(&out).expect("strings serialize"),
                    ));
                }
            }
            if let Some(url) = &decl.url {
                let out = redactor.redact_url(url);
                if &out != url {
                    found.push(Finding {
                        rule: "url".into(),
                        path: "$.url".into(),
                    });
                    changes.push(("url", json_str(&out)));
                }
            }
        }
        Entry::Unknown => match obj.get("type").map(|t| t.get()) {
            Some("\"event\"") => {
                if let Some((out, f)) = crate::tape::writer::redact_event(redactor, line) {
                    return (Some(out), f);
                }
            }
            Some("\"model\"") => {
                // A model call's body (request, answer, stream event) and HTTP facts, as a
                // message's.
                let text_field: Option<String> = obj
                    .get("text")
                    .and_then(|t| serde_json::from_str::<String>(t.get()).ok());
                let b64_field: Option<String> = obj
                    .get("b64")
                    .and_then(|t| serde_json::from_str::<String>(t.get()).ok());
                let body = Body {
                    msg: obj.get("msg"),
                    text: text_field.as_deref(),
                    b64: b64_field.as_deref(),
                    oversize: false,
                };
                redact_body(redactor, &obj, &body, &mut found, &mut changes);
            }
            _ => {}
        },
        Entry::Msg(m) => {
            let body = Body {
                msg: m.msg,
                text: m.text.as_deref(),
                b64: m.b64.as_deref(),
                oversize: m.kind == crate::wire::Kind::Oversize,
            };
            redact_body(redactor, &obj, &body, &mut found, &mut changes);
        }
        Entry::End(_) => {}
    }
    if changes.is_empty() {
        return (None, found);
    }
    // One field at a time, each keeping every other field's bytes (a new `redacted` is
    // appended: readers take fields in any order).
    let mut out = text.to_string();
    for (field, value) in changes {
        let o: RawObject<'_> = serde_json::from_str(&out).expect("our own JSON");
        out = o.to_string_with(field, &value);
    }
    (Some(out.into_bytes()), found)
}

/// A line's body fields: `msg`, `text` or `b64`.
struct Body<'a> {
    msg: Option<&'a serde_json::value::RawValue>,
    text: Option<&'a str>,
    b64: Option<&'a str>,
    oversize: bool,
}

/// Redacts a line's body and HTTP facts: what was found, and each field's new raw text.
fn redact_body<'o>(
    redactor: &Redactor,
    obj: &RawObject<'o>,
    body: &Body<'_>,
    found: &mut Vec<Finding>,
    changes: &mut Vec<(&'static str, String)>,
) {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let json_str = |s: &str| serde_json::to_string(s).expect("strings serialize");
    let as_findings = |rules: Vec<String>, path: &str| -> Vec<Finding> {
        rules
            .into_iter()
            .map(|rule| Finding {
                rule,
                path: path.to_string(),
            })
            .collect()
    };
    let mut rules: Vec<String> = Vec::new();
    if let Some(raw) = body.msg {
        if let Some((out, f)) = redactor.redact_json_found(raw.get().as_bytes()) {
            rules.extend(f.iter().map(|x| x.rule.clone()));
            found.extend(f);
            changes.push(("msg", String::from_utf8(out).unwrap_or_default()));
        }
    } else if let Some(t) = &body.text {
        if let Some((out, r)) = redactor.redact_text(t) {
            found.extend(as_findings(r.clone(), "(text line)"));
            rules.extend(r);
            changes.push(("text", json_str(&out)));
        }
    } else if let Some(encoded) = &body.b64 {
        if let Ok(bytes) = b64.decode(encoded.as_bytes()) {
            let (out, r) = if body.oversize {
                let (cut, r) = redactor.redact_head(&bytes);
                (Some(cut).filter(|c| c != &bytes), r)
            } else {
                match redactor.redact_bytes(&bytes) {
                    Some((out, r)) => (Some(out), r),
                    None => (None, Vec::new()),
                }
            };
            found.extend(as_findings(r.clone(), "(raw line)"));
            rules.extend(r);
            if let Some(out) = out {
                changes.push(("b64", json_str(&b64.encode(out))));
            }
        }
    }
    if let Some(facts) = obj.get("http") {
        if let Some((out, f)) =
            crate::tape::writer::redact_http_facts(redactor, facts.get().as_bytes())
        {
            found.extend(f.into_iter().map(|x| Finding {
                rule: x.rule,
                path: format!("http{}", &x.path[1..]),
            }));
            changes.push(("http", String::from_utf8(out).unwrap_or_default()));
        }
    }
    if !rules.is_empty() {
        if let Some(prev) = obj
            .get("redacted")
            .and_then(|v| serde_json::from_str::<Vec<String>>(v.get()).ok())
        {
            rules.extend(prev);
        }
        rules.sort();
        rules.dedup();
        changes.push((
            "redacted",
            serde_json::to_string(&rules).expect("strings serialize"),
        ));
    }
}

/// A suspected secret still on a tape.
#[derive(Debug, Clone, Serialize)]
pub struct LintFinding {
    /// 1-based line of the tape.
    pub line: u64,
    /// The message's `seq`; 0 on a line that is not a message (a server or event line).
    pub seq: u64,
    /// The rule that matched.
    pub rule: String,
    /// JSONPath of the value: inside the message, or the line's own field (`$.command[0]`,
    /// `$.url`).
    pub path: String,
}

/// Suspected secrets still in the tape (the redactor run in find mode) and format problems.
pub fn lint(
    path: &Path,
    redactor: &Redactor,
    read: ReadOptions,
) -> Result<(Vec<LintFinding>, Vec<String>), TapeError> {
    let mut r = TapeReader::open_with(path, read)?;
    let mut findings = Vec::new();
    let mut problems = Vec::new();
    let mut shape = Shape::default();
    loop {
        let item = match r.next_item() {
            Ok(Some(i)) => i,
            Ok(None) => break,
            Err(TapeError::Malformed { line, message, .. }) => {
                problems.push(format!("line {line}: {message}"));
                break;
            }
            Err(e) => return Err(e),
        };
        let stored = item.stored();
        shape.check(item.line, &item.entry, &mut problems);
        let (_, found) = redact_line(redactor, stored, &item.entry);
        let seq = match &item.entry {
            Entry::Msg(m) => m.seq,
            _ => 0,
        };
        for f in found {
            findings.push(LintFinding {
                line: item.line,
                seq,
                rule: f.rule,
                path: f.path,
            });
        }
    }
    problems.extend(r.warnings().iter().map(|w| w.to_string()));
    if *r.chain() == Chain::Absent {
        problems.push(
            "no hash chain (written before format 1.1): `mcptape redact` rewrites it with one"
                .into(),
        );
    }
    Ok((findings, problems))
}

/// What `lint` checks of a tape's structure, line by line: what readers would silently trust
/// or leave out of a tape edited by hand (a fixture changed in a repository, say).
#[derive(Default)]
struct Shape {
    servers: std::collections::HashSet<String>,
    last_seq: u64,
}

impl Shape {
    fn check(&mut self, line: u64, entry: &Entry<'_>, problems: &mut Vec<String>) {
        match entry {
            Entry::Server(s) => {
                self.servers.insert(s.server.clone());
            }
            Entry::Msg(m) => {
                // A tape without server lines (written by hand) is one conversation.
                if !self.servers.is_empty() && !self.servers.contains(m.server.as_ref()) {
                    let mut known: Vec<&str> = self.servers.iter().map(String::as_str).collect();
                    known.sort_unstable();
                    problems.push(format!(
                        "line {line}: a message of server {:?}, which no server line before it declares (declared: {}): readers go by one declared server's messages, so this one is left out",
                        m.server,
                        known.join(", ")
                    ));
                }
                if m.seq <= self.last_seq {
                    problems.push(format!(
                        "line {line}: seq {} after seq {}: message lines are numbered in the order they were written, so this one is out of order or repeated",
                        m.seq, self.last_seq
                    ));
                }
                self.last_seq = self.last_seq.max(m.seq);
                // The line's kind, id and method are read from its message when it is taped;
                // readers (play's matching, show, check) trust the fields.
                if let Some(body) = m.msg {
                    let c = crate::wire::classify(body.get().as_bytes());
                    let mut differ = Vec::new();
                    if c.kind != m.kind {
                        differ.push(format!(
                            "kind {:?}, the message is a {}",
                            m.kind.as_str(),
                            c.kind
                        ));
                    }
                    let id = m.id.map(|i| i.get());
                    if c.id.as_deref() != id {
                        differ.push(format!(
                            "id {}, the message's is {}",
                            id.unwrap_or("(none)"),
                            c.id.as_deref().unwrap_or("(none)")
                        ));
                    }
                    if c.method.as_deref() != m.method.as_deref() {
                        differ.push(format!(
                            "method {}, the message's is {}",
                            m.method
                                .as_deref()
                                .map_or("(none)".into(), |x| format!("{x:?}")),
                            c.method
                                .as_deref()
                                .map_or("(none)".into(), |x| format!("{x:?}"))
                        ));
                    }
                    if !differ.is_empty() {
                        problems.push(format!(
                            "line {line} (seq {}): the line says {}: edit the fields to agree with the message (readers go by the fields)",
                            m.seq,
                            differ.join("; ")
                        ));
                    }
                }
            }
            Entry::End(_) | Entry::Unknown => {}
        }
    }
}

/// Why `redact` could not rewrite a tape.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    /// The tape could not be read.
    #[error(transparent)]
    Tape(#[from] TapeError),
    /// The new tape could not be written (exit 74).
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        cause: std::io::Error,
    },
}

impl crate::exit::Coded for RedactError {
    fn exit_code(&self) -> i32 {
        match self {
            RedactError::Tape(t) => crate::exit::Coded::exit_code(t),
            RedactError::Write { .. } => crate::exit::IO_ERR,
        }
    }
}

/// What `redact` did.
#[derive(Debug, Clone, Serialize)]
pub struct RedactOutcome {
    /// Message lines read.
    pub messages: u64,
    /// Lines (of any type) in which something was redacted.
    pub redacted: u64,
    /// The tape written.
    pub output: String,
    /// Where the original was kept (`TAPE.bak`) when it was replaced in place; None with an
    /// output path.
    pub backup: Option<String>,
    /// Malformed lines left out of the new tape (`--skip-bad-lines`).
    pub skipped_lines: Vec<crate::tape::BadLine>,
    /// The tape was signed and the new one is not: there was no key to sign it again.
    pub signature_dropped: bool,
    /// The tape's last line was torn (a recording cut off mid-write): it is not copied, and
    /// the warning says so.
    pub torn_last_line: Option<crate::tape::Warning>,
}

/// How `redact` signs the tape it writes.
#[derive(Debug, Clone, Copy)]
pub enum Signing<'a> {
    /// Sign it with this key (`--sign`), whether the tape was signed or not.
    Always(&'a [u8]),
    /// Sign it again with this key (the one `verify` would take) only where the tape was
    /// signed: a signed tape stays signed, as `prune` and `play --on-miss live` keep it; with
    /// no key, its signature is dropped and the outcome says so.
    Keep(Option<&'a [u8]>),
}

/// Applies the redactor to every message of a tape and writes it anew with a fresh hash chain
/// (signed as `signing` says). Without `out`, the tape is replaced atomically (written
/// beside it, then renamed) and the original kept as `TAPE.bak`.
pub fn redact_tape(
    path: &Path,
    out: Option<&Path>,
    redactor: &Redactor,
    signing: Signing<'_>,
    read: ReadOptions,
) -> Result<RedactOutcome, RedactError> {
    // Rewritten in place through a symbolic link: the file it leads to is replaced, the link
    // kept. `--out` is not followed: a link planted at the output's path (in a shared /tmp)
    // must not make the new tape replace what it points at.
    let target = match out {
        Some(o) => o.to_path_buf(),
        None => crate::tape::place::behind_link(path).map_err(|cause| RedactError::Write {
            path: path.to_path_buf(),
            cause,
        })?,
    };
    let staging = {
        let mut s = target.as_os_str().to_owned();
        s.push(".redact-tmp");
        PathBuf::from(s)
    };
    let werr = |cause| RedactError::Write {
        path: staging.clone(),
        cause,
    };
    let mut r = TapeReader::open_with(path, read)?;
    let mut header = r.header().clone();
    header.minor = header.minor.max(crate::tape::format::MINOR);
    // The markers added here are made with the user's key, if any; a key the tape already
    // names stays (its markers were made with it, and play given another only falls back to
    // markers as wildcards for those that do not agree).
    if header.marker_key.is_none() {
        header.marker_key = redactor.marker_key_id().map(str::to_string);
    }
    // Removed on every way out but the rename at the end.
    let (staged, mut file) = crate::tape::writer::Staged::create(&staging).map_err(werr)?;
    let mut buf = serde_json::to_vec(&OwnedLine::Header(&header)).expect("tape records serialize");
    let mut head = chain::start(&buf);
    buf.push(b'\n');
    let (mut messages, mut redacted) = (0u64, 0u64);
    let mut signature_dropped = false;
    let seal = |line: &[u8], buf: &mut Vec<u8>, head: &mut String| {
        *head = chain::link(head, line);
        buf.extend_from_slice(&line[..line.len() - 1]);
        buf.extend_from_slice(format!(",\"h\":\"{head}\"}}\n").as_bytes());
    };
    while let Some(item) = r.next_item()? {
        let stored = item.stored();
        let without_h = chain::split_h(stored)
            .map(|(w, _)| w)
            .unwrap_or_else(|| stored.to_vec());
        let line: Vec<u8> = match &item.entry {
            Entry::End(e) => {
                let mut e = e.clone();
                e.head = Some(head.clone());
                let key = match signing {
                    Signing::Always(k) => Some(k),
                    Signing::Keep(k) => k.filter(|_| e.sig.is_some()),
                };
                signature_dropped = e.sig.is_some() && key.is_none();
                e.sig = None;
                e.sig = key.map(|k| chain::sign(k, &head, &e));
                serde_json::to_vec(&OwnedLine::End(&e)).expect("tape records serialize")
            }
            entry => {
                if matches!(entry, Entry::Msg(_)) {
                    messages += 1;
                }
                match redact_line(redactor, &without_h, entry) {
                    (Some(changed), found) => {
                        if !found.is_empty() {
                            redacted += 1;
                        }
                        changed
                    }
                    (None, _) => without_h,
                }
            }
        };
        seal(&line, &mut buf, &mut head);
        if buf.len() > 1 << 20 {
            file.write_all(&buf).map_err(werr)?;
            buf.clear();
        }
    }
    file.write_all(&buf).map_err(werr)?;
    file.sync_data().map_err(werr)?;
    drop(file);
    let mut backup = None;
    if out.is_none() {
        let mut b = target.as_os_str().to_owned();
        b.push(".bak");
        let b = PathBuf::from(b);
        crate::tape::writer::copy_own(path, &b).map_err(|cause| RedactError::Write {
            path: b.clone(),
            cause,
        })?;
        backup = Some(b.display().to_string());
    }
    staged.commit(&target).map_err(|cause| RedactError::Write {
        path: target.clone(),
        cause,
    })?;
    Ok(RedactOutcome {
        messages,
        redacted,
        output: target.display().to_string(),
        backup,
        skipped_lines: crate::tape::reader::skipped_lines(r.warnings()),
        signature_dropped,
        torn_last_line: r
            .warnings()
            .iter()
            .find(|w| matches!(w, crate::tape::Warning::TornLastLine { .. }))
            .cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::RedactConfig;
    use crate::tape::{ServerDecl, TapeWriter, WriteOptions};
    use crate::wire::{Dir, Frame};
    use std::time::Instant;

    const KEY: &str = "sk-proj-LineTypeT0kenAbcdefghijklmnop42";

    /// A tape written without redaction, with a secret in every kind of line: the server's
    /// command line and URL, a message body, HTTP facts, an event, a text line, a line that is
    /// not UTF-8, an oversize head.
    fn plain_tape(path: &Path) {
        let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
        w.declare_server(ServerDecl {
            command: Some(vec!["srv".into(), "--api-key".into(), KEY.into()]),
            ..ServerDecl::http("default", format!("http://127.0.0.1:1/mcp?token={KEY}"))
        })
        .unwrap();
        let line = Frame::whole;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"note":"use {KEY}"}}}}}}"#
        );
        let facts = serde_json::json!({"method": "POST", "mcp_params": {"note": KEY}});
        w.message_with(
            "default",
            Dir::C2S,
            &line(body.as_bytes()),
            Instant::now(),
            Some(&facts),
        );
        w.event(
            "default",
            "upstream-error",
            serde_json::json!({"error": format!("refused key {KEY}")}),
            Instant::now(),
        );
        let text = format!("log: OPENAI_API_KEY={KEY}");
        w.message("default", Dir::S2C, &line(text.as_bytes()), Instant::now());
        let mut bin = b"\xff\xfe token=".to_vec();
        bin.extend_from_slice(KEY.as_bytes());
        w.message("default", Dir::S2C, &line(&bin), Instant::now());
        let head = format!(r#"{{"result":{{"k":"{KEY}","more":"cut her"#).into_bytes();
        w.message(
            "default",
            Dir::S2C,
            &Frame::Oversize { len: 1 << 30, head },
            Instant::now(),
        );
        w.commit().unwrap();
        w.finish(None, None).unwrap();
    }

    #[test]
    fn lint_and_redact_cover_every_line_type() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        plain_tape(&path);
        let raw = std::fs::read_to_string(&path).unwrap();
        assert!(raw.contains(KEY), "written in clear: {raw}");
        let r = Redactor::new(&RedactConfig::defaults()).unwrap();
        let (found, _) = lint(&path, &r, ReadOptions::default()).unwrap();
        let lines: std::collections::BTreeSet<u64> = found.iter().map(|f| f.line).collect();
        // Header is line 1: the server line, the message (body and facts), the event, the text
        // line, the line that is not UTF-8, the oversize head.
        assert_eq!(lines, (2..=7).collect(), "{found:?}");
        assert!(
            found.iter().any(|f| f.path.starts_with("http")),
            "{found:?}"
        );
        assert!(found.iter().any(|f| f.path == "$.url"), "{found:?}");
        redact_tape(&path, None, &r, Signing::Keep(None), ReadOptions::default()).unwrap();
        let raw = std::fs::read_to_string(&path).unwrap();
        assert!(!raw.contains(KEY), "{raw}");
        for line in raw.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(b64) = v["b64"].as_str() {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains("LineTypeT0ken"),
                    "{line}"
                );
            }
        }
        let (found, problems) = lint(&path, &r, ReadOptions::default()).unwrap();
        assert!(found.is_empty(), "{found:?}");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            verify(&path, None, ReadOptions::default()).unwrap().verdict,
            Verdict::Intact
        );
    }
}
