use anyhow::Result;
use mcptape::integrity::{self, Verdict};
use std::path::PathBuf;

/// Check that a tape is what was written: its hash chain from the header to the closing line,
/// and with a key (--key-file or $MCPTAPE_SIGNING_KEY) its signature.
///
/// Tampered names the first line that does not hold; cut off is a tape whose recording stopped
/// short (no closing line, a torn last line, or a recorder that could not write everything).
#[derive(clap::Args)]
#[command(after_help = super::EXIT_VERIFY, verbatim_doc_comment)]
pub struct VerifyArgs {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// A file holding the signing key (else $MCPTAPE_SIGNING_KEY, if set).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    read: super::ReadArgs,
}

/// Take secrets out of an existing tape with the redaction rules (built-in, .mcptape/config.toml,
/// --redact), and write it anew with a fresh hash chain. In place by default (atomically, the
/// original kept as TAPE.bak), or to -o OUT. A signed tape is signed again with the key verify
/// takes (--key-file, else $MCPTAPE_SIGNING_KEY); with none, a warning says it is not.
#[derive(clap::Args)]
#[command(after_help = super::EXIT_REDACT, verbatim_doc_comment)]
pub struct RedactCmdArgs {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    /// Write the redacted tape here instead of replacing TAPE.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
    #[command(flatten)]
    rules: super::RedactArgs,
    #[command(flatten)]
    sign: super::SignArgs,
    #[command(flatten)]
    read: super::ReadArgs,
}

/// Look for secrets still in a tape (what the redaction rules would take out) and for format
/// problems (torn or unclosed tape, broken hash chain, malformed lines).
#[derive(clap::Args)]
#[command(after_help = super::EXIT_LINT, verbatim_doc_comment)]
pub struct LintArgs {
    /// Tape name, path, or s3://BUCKET/KEY.
    #[arg(value_name = "TAPE")]
    tape: String,
    #[command(flatten)]
    rules: super::RedactArgs,
    #[command(flatten)]
    read: super::ReadArgs,
}

pub fn verify(a: VerifyArgs) -> Result<i32> {
    // Read once, front to back: a FIFO or a pipe will do.
    let path = super::remote::resolve_stream(&a.tape)?;
    let sign = super::SignArgs::from_key_file(a.key_file);
    let key = sign.key(false)?;
    let report = integrity::verify(&path, key.as_deref(), a.read.options())?;
    for b in &report.skipped_lines {
        super::warn_tape(&path, &[mcptape::tape::Warning::SkippedLine(b.clone())]);
    }
    if a.json {
        super::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        let sig = match report.signature {
            "signed-valid" => "; signature valid",
            "signed-unchecked" => "; signed (give the key with --key-file or $MCPTAPE_SIGNING_KEY to check the signature)",
            "signed-invalid" => "; SIGNATURE DOES NOT MATCH (wrong key, or the tape was changed and re-chained)",
            "unsigned-with-key" => "; NOT SIGNED, though a key was given (a signed tape whose signature was removed?)",
            _ => "; not signed",
        };
        let text = match &report.verdict {
            Verdict::Intact => format!("intact: {} lines, hash chain holds to the closing line{sig}\n", report.lines),
            Verdict::Tampered { line, reason } => format!("TAMPERED at line {line}: {reason}\n"),
            Verdict::Cut { at, reason, .. } => format!("cut off at line {at} (disk full or crash): {reason}; the {} lines before are intact\n", at - 1),
            Verdict::Unchained => "cannot verify: the tape has no hash chain (format 1.0); `mcptape redact` rewrites it with one\n".into(),
        };
        super::stdout(&format!("{}: {text}", path.display()))?;
    }
    Ok(if report.ok() {
        mcptape::exit::OK
    } else {
        mcptape::exit::DRIFT
    })
}

pub fn redact(a: RedactCmdArgs) -> Result<i32> {
    let path = match &a.output {
        None => super::remote::resolve_to_modify(&a.tape)?,
        Some(_) => super::remote::resolve(&a.tape)?,
    };
    let cfg = a.rules.config()?;
    let redactor = mcptape::redact::Redactor::new(&cfg)?;
    // Without --sign, the key verify would take ($MCPTAPE_SIGNING_KEY, --key-file) signs a
    // signed tape again: the lint that suggested this command must not cost the signature.
    let key = a.sign.key(false)?;
    let signing = match key.as_deref() {
        Some(k) if a.sign.sign => integrity::Signing::Always(k),
        k => integrity::Signing::Keep(k),
    };
    let out = integrity::redact_tape(
        &path,
        a.output.as_deref(),
        &redactor,
        signing,
        a.read.options(),
    )?;
    if out.signature_dropped {
        crate::diag!("mcptape redact: warning: {} was signed; the redacted tape is not (set MCPTAPE_SIGNING_KEY or give --key-file to sign it again)", path.display());
    }
    for b in &out.skipped_lines {
        super::warn_tape(&path, &[mcptape::tape::Warning::SkippedLine(b.clone())]);
    }
    // A torn last line is left out (it is no tape line): said, not dropped without a word.
    if let Some(w) = &out.torn_last_line {
        super::warn_tape(&path, std::slice::from_ref(w));
    }
    let torn = match &out.torn_last_line {
        Some(mcptape::tape::Warning::TornLastLine { line, .. }) => {
            format!("; its torn last line {line} is not copied")
        }
        _ => String::new(),
    };
    let backup = out
        .backup
        .map(|b| format!("; the original is kept as {b}"))
        .unwrap_or_default();
    let skipped = if out.skipped_lines.is_empty() {
        String::new()
    } else {
        format!(
            "; {}, not copied",
            mcptape::tape::reader::skipped_summary(&out.skipped_lines)
        )
    };
    crate::diag!(
        "mcptape: redacted {} of {}; wrote {} with a fresh hash chain{skipped}{torn}{backup}",
        out.redacted,
        super::plural(out.messages as u64, "message"),
        out.output
    );
    Ok(mcptape::exit::OK)
}

pub fn lint(a: LintArgs) -> Result<i32> {
    // Read once, front to back: a FIFO or a pipe will do.
    let path = super::remote::resolve_stream(&a.tape)?;
    let cfg = a.rules.config()?;
    let redactor = mcptape::redact::Redactor::new(&cfg)?;
    let (findings, problems) = integrity::lint(&path, &redactor, a.read.options())?;
    let mut text = String::new();
    for f in &findings {
        text.push_str(&format!(
            "{}: line {}: suspected secret ({}) at {}\n",
            path.display(),
            f.line,
            f.rule,
            f.path
        ));
    }
    for p in &problems {
        text.push_str(&format!("{}: {p}\n", path.display()));
    }
    if findings.is_empty() && problems.is_empty() {
        text.push_str(&format!("{}: clean\n", path.display()));
    } else if !findings.is_empty() {
        // The same rules as this lint, or running the suggestion would find nothing to take out.
        let mut cmd = vec!["mcptape".to_string(), "redact".to_string(), a.tape.clone()];
        cmd.extend(a.rules.as_args());
        text.push_str(&format!(
            "{} suspected secrets: `{}` takes them out\n",
            findings.len(),
            mcptape::transport::stdio::shell_words(&cmd)
        ));
    }
    super::stdout(&text)?;
    Ok(if findings.is_empty() && problems.is_empty() {
        mcptape::exit::OK
    } else {
        mcptape::exit::DRIFT
    })
}
