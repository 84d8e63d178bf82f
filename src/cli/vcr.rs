use anyhow::Result;

/// One command line for a client's config that records or plays, as the tape and the mode say.
///
///   "command": "mcptape",
///   "args": ["vcr", "--tape", "my-server", "--", "npx", "-y", "some-mcp-server"]
///
/// --mode once (the default): record when the tape is not there, else play it strictly (the
/// server is never started). new: record when it is not there, else play it and send what it
/// does not hold to the server, appended to the tape. all: always record (the old tape kept as
/// TAPE.bak). none: play strictly, never start the server. With $CI set and no --mode, the mode
/// is none. The first line on stderr says which mode ran and why.
#[derive(clap::Args)]
#[command(visible_alias = "tape", after_help = EXIT_VCR, verbatim_doc_comment)]
pub struct Args {
    /// once, new, all or none (default: once; none when $CI is set).
    #[arg(long, value_enum, value_name = "MODE")]
    mode: Option<Mode>,
    /// Tape name (stored as .mcptape/tapes/NAME.jsonl) or path.
    #[arg(long, short = 't', value_name = "NAME|PATH")]
    tape: String,
    /// The server command and its arguments (`--` before it is optional).
    #[arg(
        trailing_var_arg = true,
        required = true,
        value_name = "SERVER COMMAND"
    )]
    command: Vec<String>,
}

const EXIT_VCR: &str = "\
Exit codes: recording, the server's own (as `record`); playing, as `play` (1 a miss or drift);
64 usage error; 66 --mode none (or $CI set) and no tape to play.";

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Once,
    New,
    All,
    None,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Once => "once",
            Mode::New => "new",
            Mode::All => "all",
            Mode::None => "none",
        }
    }
}

/// Whether $CI says this is a CI run (set, and not empty, `0` or `false`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE" | "False"))
}

/// What a mode does with a tape that is there or not.
enum Action {
    Record,
    Play { live: bool },
    Refuse,
}

pub fn run(a: Args) -> Result<i32> {
    let (mode, why) = match a.mode {
        Some(m) => (m, "--mode"),
        None if in_ci() => (Mode::None, "$CI is set and no --mode was named"),
        None => (Mode::Once, "the default"),
    };
    let path = super::remote::resolve_for_write(&a.tape)?;
    let there = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() > 0);
    let (action, what) = match (mode, there) {
        (Mode::Once | Mode::New, false) => (Action::Record, "no tape there yet: recording it"),
        (Mode::Once, true) => (
            Action::Play { live: false },
            "the tape is there: playing it strictly, the server is not started",
        ),
        (Mode::New, true) => (
            Action::Play { live: true },
            "the tape is there: playing it, what it does not hold goes to the server and is appended",
        ),
        (Mode::All, false) => (Action::Record, "recording"),
        (Mode::All, true) => (Action::Record, "recording it again, the old one kept as .bak"),
        (Mode::None, true) => (
            Action::Play { live: false },
            "playing strictly, the server is never started",
        ),
        (Mode::None, false) => (Action::Refuse, "no tape there, and this mode never records"),
    };
    crate::diag!(
        "mcptape vcr: mode {} ({why}), {}: {what}",
        mode.name(),
        path.display()
    );
    let tape = path.display().to_string();
    match action {
        Action::Refuse => {
            let hint = if a.mode.is_none() {
                " (unset $CI or name a --mode to record)"
            } else {
                ""
            };
            crate::diag!(
                "mcptape vcr: refusing to record {tape} in mode none{hint}: record it first, e.g. `mcptape vcr --mode once --tape {} -- …`",
                a.tape
            );
            Ok(mcptape::exit::NO_INPUT)
        }
        // Parsed by the commands' own parsers: each keeps its defaults and checks in one place.
        // The tape goes where no parser takes it for an option, whatever it starts with (a tape
        // `-x.jsonl`): `--tape=TAPE` for record, after `--` for play.
        Action::Record => {
            let mut argv = vec!["record".to_string(), format!("--tape={tape}"), "--".into()];
            argv.extend(a.command);
            super::record::run(parse::<super::record::Args>(argv)?)
        }
        Action::Play { live } => {
            let mut argv = vec!["play".to_string()];
            if live {
                argv.extend(["--on-miss".into(), "live".into()]);
            }
            argv.extend(["--".into(), tape]);
            if live {
                argv.extend(a.command);
            }
            super::play::run_as(parse::<super::play::Args>(argv)?, super::play::Caller::Vcr)
        }
    }
}

/// A command's arguments from an argument list, by its own parser. Its error is clap's first
/// line without clap's `error: ` (main prints `mcptape: error: ` before it); clap's usage and
/// tips after it are of the command line built here, not the one the user typed.
fn parse<A: clap::Args>(argv: Vec<String>) -> Result<A> {
    #[derive(clap::Parser)]
    struct One<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    use clap::Parser as _;
    let one = One::<A>::try_parse_from(argv).map_err(|e| super::UsageError(clap_message(&e)))?;
    Ok(one.args)
}

/// What a clap error says, as one line without clap's own `error: ` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    first
        .strip_prefix("error: ")
        .unwrap_or(first)
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clap_error_is_said_once_without_its_prefix_or_usage() {
        let argv = ["record", "--tape", "-x.jsonl", "--", "server"];
        let Err(e) = super::parse::<super::super::record::Args>(argv.map(String::from).to_vec())
        else {
            panic!("parsed");
        };
        let message = e.to_string();
        assert_eq!(message, "unexpected argument '-x' found");
    }
}
