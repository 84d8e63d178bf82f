//! `verify`, `redact` and `lint`: what a tape holds, whether it is still what was written, and
//! taking secrets out of a tape written without (enough) redaction.

use crate::redact::{Finding, Redactor};
use crate::tape::chain;
use crate::tape::format::{End, OwnedLine};
use crate::tape::{Chain, Entry, TapeError, TapeReader, Warning};
use crate::wire::rewrite::RawObject;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Every line is as written, and the tape is closed.
    Intact,
    /// Something changed after writing: the first line that does not hold.
    Tampered { line: u64, reason: String },
    /// The tape ends early (a crash, or its end was cut off): intact as far as it goes.
    Cut { lines: u64, reason: String },
    /// Written before the hash chain existed (format 1.0): nothing to check.
    Unchained,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub tape: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Lines read (header included).
    pub lines: u64,
    pub head: Option<String>,
    /// `signed-valid`, `signed-unchecked` (no key given), `signed-invalid`, `unsigned`, or
    /// `unsigned-with-key` (a key was given, so a signature was expected: a failure).
    pub signature: &'static str,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Intact
            && !matches!(self.signature, "signed-invalid" | "unsigned-with-key")
    }
}

pub fn verify(path: &Path, key: Option<&[u8]>) -> Result<VerifyReport, TapeError> {
    let mut r = TapeReader::open(path)?;
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
        Warning::TornLastLine { line, .. } => Some(*line),
        _ => None,
    });
    let chain_state = r.chain().clone();
    let verdict = verdict.unwrap_or_else(|| match (&chain_state, &end) {
        (Chain::Broken(line), _) => Verdict::Tampered { line: *line, reason: "the hash chain breaks here: this line, or one before it, was edited, removed, inserted or moved".into() },
        (Chain::Absent, _) => Verdict::Unchained,
        (Chain::Linked(_), None) => Verdict::Cut {
            lines,
            reason: match torn {
                Some(t) => format!("line {t} is torn and there is no closing line: the recording was cut off (crash, kill) or the tape was truncated"),
                None => "no closing line: the recording was cut off (crash, kill) or the tape was truncated".into(),
            },
        },
        (Chain::Linked(_), Some((e, before, line))) => {
            if e.head.as_deref() != Some(before.as_str()) {
                Verdict::Tampered { line: *line, reason: "the closing line's head does not match the chain".into() }
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
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct LintFinding {
    pub line: u64,
    pub seq: u64,
    pub rule: String,
    pub path: String,
}

/// Suspected secrets still in the tape (the redactor run in find mode) and format problems.
pub fn lint(
    path: &Path,
    redactor: &Redactor,
) -> Result<(Vec<LintFinding>, Vec<String>), TapeError> {
    let mut r = TapeReader::open(path)?;
    let mut findings = Vec::new();
    let mut problems = Vec::new();
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
        let Entry::Msg(m) = &item.entry else { continue };
        let mut found: Vec<Finding> = Vec::new();
        if let Some(raw) = m.msg {
            if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(raw.get()) {
                redactor.redact_value(&mut v, &mut found);
            }
        } else if let Some(text) = &m.text {
            if let Some((_, rules)) = redactor.redact_text(text) {
                found.extend(rules.into_iter().map(|rule| Finding {
                    rule,
                    path: "(text line)".into(),
                }));
            }
        }
        for f in found {
            findings.push(LintFinding {
                line: item.line,
                seq: m.seq,
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

#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    #[error(transparent)]
    Tape(#[from] TapeError),
    #[error("writing {}: {cause}", path.display())]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// What `redact` did.
#[derive(Debug, Clone, Serialize)]
pub struct RedactOutcome {
    pub messages: u64,
    pub redacted: u64,
    pub output: String,
    pub backup: Option<String>,
}

/// Applies the redactor to every message of a tape and writes it anew with a fresh hash chain
/// (signed with `signing_key` if given). Without `out`, the tape is replaced atomically (written
/// beside it, then renamed) and the original kept as `TAPE.bak`.
pub fn redact_tape(
    path: &Path,
    out: Option<&Path>,
    redactor: &Redactor,
    signing_key: Option<&[u8]>,
) -> Result<RedactOutcome, RedactError> {
    let target = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| path.to_path_buf());
    let staging = {
        let mut s = target.as_os_str().to_owned();
        s.push(".redact-tmp");
        PathBuf::from(s)
    };
    let werr = |cause| RedactError::Write {
        path: staging.clone(),
        cause,
    };
    let mut r = TapeReader::open(path)?;
    let mut header = r.header().clone();
    header.minor = header.minor.max(crate::tape::format::MINOR);
    let mut file = crate::tape::writer::open_own(&staging).map_err(werr)?;
    let mut buf = serde_json::to_vec(&OwnedLine::Header(&header)).expect("tape records serialize");
    let mut head = chain::start(&buf);
    buf.push(b'\n');
    let (mut messages, mut redacted) = (0u64, 0u64);
    let seal = |line: &[u8], buf: &mut Vec<u8>, head: &mut String| {
        *head = chain::link(head, line);
        buf.extend_from_slice(&line[..line.len() - 1]);
        buf.extend_from_slice(format!(",\"h\":\"{head}\"}}\n").as_bytes());
    };
    while let Some(item) = r.next_item()? {
        let stored = item.raw.strip_suffix(b"\n").unwrap_or(item.raw);
        let without_h = chain::split_h(stored)
            .map(|(w, _)| w)
            .unwrap_or_else(|| stored.to_vec());
        let line: Vec<u8> = match &item.entry {
            Entry::End(e) => {
                let mut e = e.clone();
                e.head = Some(head.clone());
                e.sig = None;
                e.sig = signing_key.map(|k| chain::sign(k, &head, &e));
                serde_json::to_vec(&OwnedLine::End(&e)).expect("tape records serialize")
            }
            Entry::Msg(m) => {
                messages += 1;
                let text = String::from_utf8_lossy(&without_h).into_owned();
                let obj: RawObject<'_> = match serde_json::from_str(&text) {
                    Ok(o) => o,
                    Err(_) => {
                        seal(&without_h, &mut buf, &mut head);
                        continue;
                    }
                };
                let change = if let Some(raw) = m.msg {
                    redactor
                        .redact_json(raw.get().as_bytes())
                        .map(|(bytes, rules)| {
                            ("msg", String::from_utf8(bytes).unwrap_or_default(), rules)
                        })
                } else if let Some(t) = &m.text {
                    redactor.redact_text(t).map(|(t, rules)| {
                        ("text", serde_json::to_string(&t).unwrap_or_default(), rules)
                    })
                } else {
                    None
                };
                match change {
                    Some((field, value, mut rules)) => {
                        redacted += 1;
                        if let Some(prev) = obj
                            .get("redacted")
                            .and_then(|v| serde_json::from_str::<Vec<String>>(v.get()).ok())
                        {
                            rules.extend(prev);
                            rules.sort();
                            rules.dedup();
                        }
                        let updated = obj.to_string_with(field, &value);
                        let obj2: RawObject<'_> =
                            serde_json::from_str(&updated).expect("our own JSON");
                        obj2.to_string_with(
                            "redacted",
                            &serde_json::to_string(&rules).expect("strings serialize"),
                        )
                        .into_bytes()
                    }
                    None => without_h,
                }
            }
            _ => without_h,
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
        let mut b = path.as_os_str().to_owned();
        b.push(".bak");
        let b = PathBuf::from(b);
        crate::tape::writer::copy_own(path, &b).map_err(|cause| RedactError::Write {
            path: b.clone(),
            cause,
        })?;
        backup = Some(b.display().to_string());
    }
    std::fs::rename(&staging, &target).map_err(|cause| RedactError::Write {
        path: target.clone(),
        cause,
    })?;
    Ok(RedactOutcome {
        messages,
        redacted,
        output: target.display().to_string(),
        backup,
    })
}
