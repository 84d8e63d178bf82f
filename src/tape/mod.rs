//! The tape: line types and version, the streaming writer and reader, the exchange index, and
//! the named-tape store.

pub mod append;
pub(crate) mod chain;
pub mod format;
pub mod index;
mod index_cache;
pub(crate) mod open_ids;
pub mod place;
pub mod prune;
pub(crate) mod read_ahead;
pub mod reader;
pub(crate) mod refusals;
mod request_facts;
pub(crate) mod scan;
#[doc(hidden)]
pub mod sink;
pub mod store;
pub mod writer;

pub use format::{End, ExitInfo, Header, ServerDecl, DEFAULT_SERVER};
pub use index::TapeIndex;
pub use place::Placed;
pub use reader::{BadLine, Chain, Entry, Item, ReadOptions, TapeError, TapeReader, Warning};
pub use writer::{Finished, RawKinds, TapeWriter, WriteOptions};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Dir, Framer};
    use std::io::Write;
    use std::time::Instant;

    fn write_session(path: &std::path::Path, lines: &[(Dir, &[u8])]) -> End {
        let mut w = TapeWriter::create(path, WriteOptions::default()).unwrap();
        w.declare_server(ServerDecl::stdio(DEFAULT_SERVER, vec!["srv".into()]))
            .unwrap();
        for (dir, bytes) in lines {
            let mut f = Framer::new(1024);
            f.push(bytes, |fr| {
                w.message(DEFAULT_SERVER, *dir, &fr, Instant::now())
            });
            f.finish(|fr| w.message(DEFAULT_SERVER, *dir, &fr, Instant::now()));
            w.commit().unwrap();
        }
        w.finish(
            Some(ExitInfo {
                code: Some(0),
                signal: None,
            }),
            Some("test".into()),
        )
        .unwrap()
        .end
    }

    const SESSION: &[(Dir, &[u8])] = &[
        (Dir::C2S, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\"}}\n"),
        (Dir::S2C, b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n"),
        (Dir::S2C, b"banner: not json\n"),
        (Dir::S2C, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"x\": \"\xe2\x82\xac\"}}\r\n"),
        (Dir::C2S, b"{\"bad\":\"\xff\"}\n"),
    ];

    #[test]
    fn round_trip_keeps_every_message_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let end = write_session(&path, SESSION);
        assert_eq!((end.messages, end.exchanges, end.raw), (5, 1, 2));
        let index = TapeIndex::load(&path, None).unwrap();
        assert!(index.warnings.is_empty(), "{:?}", index.warnings);
        assert_eq!(index.msgs.len(), 5);
        for (m, (_, raw)) in index.msgs.iter().zip(SESSION) {
            let raw = raw.strip_suffix(b"\n").unwrap();
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            assert_eq!(index.read_bytes(m).unwrap(), raw, "line {}", m.line);
        }
        assert_eq!(index.exchanges.len(), 1);
        assert_eq!(
            index.exchanges[0].during.len(),
            2,
            "the notification and the banner"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }

    /// The closing line counts an exchange where the index pairs one, and so do the readers that
    /// count a tape's lines: an answer over the size limit (`oversize`) whose id is in
    /// its head is one; one whose id comes after its body pairs with nothing.
    #[test]
    fn writer_index_and_line_readers_count_an_oversize_answer_alike() {
        let big = "A".repeat(2000);
        let id_first = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"t\":\"{big}\"}}}}\n");
        let id_late = format!("{{\"result\":{{\"t\":\"{big}\"}},\"jsonrpc\":\"2.0\",\"id\":1}}\n");
        for (answer, counted) in [(id_first, 1), (id_late, 0)] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.jsonl");
            let session: &[(Dir, &[u8])] = &[
                (
                    Dir::C2S,
                    b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\"}\n",
                ),
                (Dir::S2C, answer.as_bytes()),
            ];
            let end = write_session(&path, session);
            assert_eq!((end.exchanges, end.raw), (counted, 1), "{answer:.40}");
            let index = TapeIndex::load(&path, None).unwrap();
            assert_eq!(index.msgs[1].kind, crate::wire::Kind::Oversize);
            let paired = index.exchanges.iter().filter(|e| e.response.is_some());
            assert_eq!(paired.count() as u64, counted, "{answer:.40}");

            // Counted from the lines read back (`ls` on a tape without its closing line, an
            // append to one), as the writer counted them.
            let mut r = TapeReader::open(&path).unwrap();
            let mut pairing = open_ids::Exchanges::default();
            let mut from_lines = 0;
            while let Some(item) = r.next_item().unwrap() {
                if let Entry::Msg(m) = item.entry {
                    from_lines += u64::from(pairing.line(&m));
                }
            }
            assert_eq!(from_lines, counted, "{answer:.40}");
        }
    }

    #[test]
    fn a_torn_last_line_and_a_missing_end_are_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, SESSION);
        let text = std::fs::read(&path).unwrap();
        // Drop the end line and cut the last message line in half.
        let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
        let mut cut = lines[..lines.len() - 2].concat();
        let last = lines[lines.len() - 2];
        cut.extend_from_slice(&last[..last.len() / 2]);
        std::fs::write(&path, &cut).unwrap();
        let index = TapeIndex::load(&path, None).unwrap();
        assert_eq!(index.msgs.len(), 4);
        assert!(
            matches!(index.warnings[0], Warning::TornLastLine { line: 7, .. }),
            "{:?}",
            index.warnings
        );
        assert!(index.warnings.contains(&Warning::NotClosed));
    }

    /// A recorder killed mid-session leaves newlines after its last line (sink.rs). The line
    /// before them is read when whole, and torn when its copy stopped part way (what was not
    /// copied is padding, so at least two newlines follow it): by the index, the line reader
    /// and the chain check alike. A bad last line with one newline after it stays an error.
    #[test]
    fn a_killed_recorders_padding_is_blank_and_the_line_before_it_whole_or_torn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, SESSION);
        let text = std::fs::read(&path).unwrap();
        let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
        let (before, last) = (lines[..lines.len() - 2].concat(), lines[lines.len() - 2]);
        let pad = vec![b'\n'; 5000];
        let read_all = |path: &std::path::Path| {
            let mut r = TapeReader::open(path).unwrap();
            while r.next_item().unwrap().is_some() {}
            (r.chain().clone(), r.warnings().to_vec())
        };
        let chain_holds = |path: &std::path::Path| {
            TapeReader::open(path)
                .unwrap()
                .check_chain()
                .unwrap()
                .is_none()
        };

        // Whole, then padding.
        std::fs::write(&path, [&before[..], last, &pad].concat()).unwrap();
        let index = TapeIndex::load(&path, None).unwrap();
        assert_eq!(index.msgs.len(), 5);
        assert_eq!(index.warnings, [Warning::NotClosed]);
        let (chain, warnings) = read_all(&path);
        assert!(matches!(chain, Chain::Linked(_)), "{chain:?}");
        assert_eq!(warnings, [Warning::NotClosed]);
        assert!(chain_holds(&path));

        // Cut mid-copy: the rest of the line's place is padding.
        let half = last.len() / 2;
        std::fs::write(&path, [&before[..], &last[..half], &pad].concat()).unwrap();
        let index = TapeIndex::load(&path, None).unwrap();
        assert_eq!(index.msgs.len(), 4);
        let torn = Warning::TornLastLine {
            line: 7,
            bytes: half,
        };
        assert_eq!(index.warnings, [torn.clone(), Warning::NotClosed]);
        let (chain, warnings) = read_all(&path);
        assert!(matches!(chain, Chain::Linked(_)), "{chain:?}");
        assert_eq!(warnings, [torn, Warning::NotClosed]);
        assert!(chain_holds(&path));

        // One newline after it: a complete line that is not a tape line.
        std::fs::write(&path, [&before[..], &last[..half], b"\n"].concat()).unwrap();
        let err = TapeIndex::load(&path, None).err().expect("malformed");
        assert!(matches!(err, TapeError::Malformed { line: 7, .. }), "{err}");
    }

    /// A killed recorder's tape cut to `reader::unpadded_len` reads as it did padded: the same
    /// lines, warnings and chain. A whole last line keeps one newline (its own, or the
    /// padding's when its own was not copied); a torn one keeps none, and stays torn. A tape
    /// that does not end in padding has nothing to cut, and one whose writer holds it is not cut.
    #[test]
    fn a_killed_recorders_tape_cut_at_its_padding_reads_as_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{{\"text\":\"{}\"}}}}\n",
            "x".repeat(10_000)
        );
        let mut session = SESSION.to_vec();
        session.push((Dir::C2S, big.as_bytes())); // a last line longer than a read back
        write_session(&path, &session);
        let text = std::fs::read(&path).unwrap();
        let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
        let (before, last) = (lines[..lines.len() - 2].concat(), lines[lines.len() - 2]);
        let header = lines[0];
        let pad = vec![b'\n'; 5000];
        let unpadded = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            reader::unpadded_len(&std::fs::File::open(&path).unwrap())
        };
        let read = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let index = TapeIndex::load(&path, None).map(|i| (i.msgs.len(), i.warnings.clone()));
            let mut r = TapeReader::open(&path).unwrap();
            let mut items = Vec::new();
            while let Some(item) = r.next_item().unwrap() {
                items.push((item.line, item.raw.to_vec()));
            }
            let chain = TapeReader::open(&path).unwrap().check_chain().unwrap();
            (
                index.map_err(|e| e.to_string()),
                items,
                r.chain().clone(),
                r.warnings().to_vec(),
                chain,
            )
        };
        let half = last.len() / 2;
        let no_newline = &last[..last.len() - 1];
        for (case, padded, kept) in [
            (
                "whole",
                [&before[..], last, &pad].concat(),
                [&before[..], last].concat(),
            ),
            (
                "whole, its newline not copied",
                [&before[..], no_newline, &pad].concat(),
                [&before[..], last].concat(),
            ),
            (
                "torn",
                [&before[..], &last[..half], &pad].concat(),
                [&before[..], &last[..half]].concat(),
            ),
            (
                "torn at one byte",
                [&before[..], &last[..1], &pad].concat(),
                [&before[..], &last[..1]].concat(),
            ),
        ] {
            let at = unpadded(&padded).unwrap_or_else(|| panic!("{case}: padding to cut"));
            assert_eq!(at, kept.len() as u64, "{case}");
            assert!(padded[..at as usize] == kept[..], "{case}");
            let (as_padded, as_kept) = (read(&padded), read(&kept));
            // Line numbers and offsets included: the padding comes after every line read.
            let (index, items, chain, warnings, breaks) = &as_kept;
            assert!(
                index.is_ok() && breaks.is_none(),
                "{case}: {index:?} {breaks:?}"
            );
            assert!(matches!(chain, Chain::Linked(_)), "{case}: {chain:?}");
            assert!(
                warnings.contains(&Warning::NotClosed),
                "{case}: {warnings:?}"
            );
            assert_eq!(
                warnings
                    .iter()
                    .any(|w| matches!(w, Warning::TornLastLine { .. })),
                case.starts_with("torn"),
                "{case}: {warnings:?}"
            );
            assert_eq!(
                items.len(),
                lines.len() - 2 - usize::from(case.starts_with("torn")),
                "{case}"
            );
            assert_eq!(as_kept, as_padded, "{case}");
            assert_eq!(
                unpadded(&kept),
                None,
                "{case}: cut once, nothing more to cut"
            );
        }

        // Killed after the header: kept with its newline; a header torn is no tape either way.
        assert_eq!(
            unpadded(&[header, &pad].concat()),
            Some(header.len() as u64)
        );
        let torn_header = [&header[..10], &pad].concat();
        assert_eq!(unpadded(&torn_header), Some(10));
        // Nothing to cut: a closed tape, a bad last line with one newline (an error, as it
        // was), a file of newlines alone, an empty one.
        assert_eq!(unpadded(&text), None);
        assert_eq!(
            unpadded(&[&before[..], &last[..half], b"\n"].concat()),
            None
        );
        assert_eq!(unpadded(&pad), None);
        assert_eq!(unpadded(b""), None);

        // `place::cut_padding` cuts the file there, unless a writer holds its lock.
        let padded = [&before[..], &last[..half], &pad].concat();
        std::fs::write(&path, &padded).unwrap();
        let writer = std::fs::File::open(&path).unwrap();
        sink::lock(&writer).unwrap();
        assert_eq!(place::cut_padding(&path).unwrap(), 0);
        assert!(
            std::fs::read(&path).unwrap() == padded,
            "left to its writer"
        );
        drop(writer);
        let cut = place::cut_padding(&path).unwrap();
        assert_eq!(cut, pad.len() as u64);
        assert!(std::fs::read(&path).unwrap() == [&before[..], &last[..half]].concat());
        assert_eq!(place::cut_padding(&path).unwrap(), 0, "nothing more");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(place::cut_padding(&path).unwrap(), 0, "a closed tape");
        assert!(std::fs::read(&path).unwrap() == text);
    }

    /// A tape read whole to be uploaded (`push TAPE s3://…`) holds a reader's share of its
    /// writer's lock while it is open: other readers share it; an append to it (`play --on-miss
    /// live`) and a first recording into the file are refused meanwhile, and say it is being
    /// read; a re-recording goes on (it writes `TAPE.new`, renamed over the tape at its end,
    /// which the reader's open file does not see); a tape whose lock a writer holds is not
    /// opened at all.
    #[test]
    fn a_tape_read_whole_shares_its_lock_with_readers_and_keeps_writers_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, SESSION);
        let a = place::open_unless_written(&path)
            .unwrap()
            .expect("no writer");
        let b = place::open_unless_written(&path)
            .unwrap()
            .expect("readers share the lock");
        let Err(refused) = append::append(&path, WriteOptions::default()) else {
            panic!("appended to a tape being read");
        };
        assert!(
            matches!(refused, append::AppendError::Busy { read: true, .. }),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains("is being read by another process (`mcptape push`"),
            "{refused}"
        );
        let (_, beside) = place::open(&path).expect("a re-recording goes on beside a read");
        assert!(beside.is_some(), "a re-recording, beside the tape");
        drop((a, b));
        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, b"").unwrap();
        let reading = place::open_unless_written(&empty)
            .unwrap()
            .expect("no writer");
        let refused = place::open(&empty).unwrap_err().to_string();
        assert!(
            refused.contains("is being read by another mcptape right now (`mcptape push`"),
            "{refused}"
        );
        drop(reading);
        let writer = std::fs::File::open(&path).unwrap();
        sink::lock(&writer).unwrap();
        assert!(place::open_unless_written(&path).unwrap().is_none());
        let refused = place::open(&path).unwrap_err().to_string();
        assert!(
            refused.contains("is being recorded by another mcptape right now"),
            "{refused}"
        );
    }

    /// A finished tape ends on its closing line and a writer dropped unfinished on its last
    /// whole line: the padding is the recording's own while it lasts.
    #[test]
    fn a_writer_leaves_no_padding_finished_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, SESSION);
        let text = std::fs::read(&path).unwrap();
        assert!(text.ends_with(b"}\n"), "{:?}", &text[text.len() - 4..]);

        let path = dir.path().join("u.jsonl");
        let mut w = TapeWriter::create(&path, WriteOptions::default()).unwrap();
        w.declare_server(ServerDecl::stdio(DEFAULT_SERVER, vec!["srv".into()]))
            .unwrap();
        let mut f = Framer::new(1024);
        f.push(SESSION[0].1, |fr| {
            w.message(DEFAULT_SERVER, Dir::C2S, &fr, Instant::now())
        });
        w.commit().unwrap();
        let index = TapeIndex::load(&path, None).unwrap();
        assert_eq!(
            (index.msgs.len(), &index.warnings[..]),
            (1, &[Warning::NotClosed][..])
        );
        drop(w);
        let text = std::fs::read(&path).unwrap();
        assert!(text.ends_with(b"}\n"), "{:?}", &text[text.len() - 4..]);
        assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), 3);
    }

    /// Makes tape line 4 (a message in the middle) invalid JSON: a `#` before it.
    fn corrupt_line_4(path: &std::path::Path) {
        let mut bytes = std::fs::read(path).unwrap();
        let third = bytes
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .nth(2)
            .unwrap()
            .0;
        bytes.insert(third + 1, b'#');
        std::fs::write(path, &bytes).unwrap();
    }

    #[test]
    fn a_malformed_middle_line_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, SESSION);
        corrupt_line_4(&path);
        let err = TapeIndex::load(&path, None).err().expect("malformed");
        assert!(matches!(err, TapeError::Malformed { line: 4, .. }), "{err}");
        assert!(err.to_string().contains("line 4"), "{err}");
    }

    /// With `--skip-bad-lines` the same line is skipped with a warning naming it, the lines
    /// after it are read, and the chain breaks at it (a skipped line is not an unread one).
    #[test]
    fn a_malformed_middle_line_is_skipped_when_asked_and_breaks_the_chain_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, SESSION);
        let whole = TapeIndex::load(&path, None).unwrap().msgs.len();
        corrupt_line_4(&path);
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..Default::default()
        };
        let index = TapeIndex::load_with(&path, None, skip).unwrap();
        assert_eq!(index.msgs.len(), whole - 1);
        assert_eq!(
            index
                .skipped_lines()
                .iter()
                .map(|b| b.line)
                .collect::<Vec<_>>(),
            [4]
        );
        assert!(index.warnings.contains(&Warning::ChainBroken { line: 4 }));
        assert!(index.end.is_some(), "read on past the bad line to the end");
        let mut r = TapeReader::open_with(&path, skip).unwrap();
        while r.next_item().unwrap().is_some() {}
        assert_eq!(r.chain(), &Chain::Broken(4));
    }

    /// `"msg":null` is a body (a peer printed `null`); no body at all is a bad line, to the
    /// line reader (`verify`, `lint`, `redact`) as to the index (`show`, `play`, `diff`).
    #[test]
    fn a_null_body_is_read_and_a_missing_body_refused_by_every_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        write_session(&path, &[(Dir::S2C, b"null\n"), (Dir::S2C, b"42\n")]);
        let index = TapeIndex::load(&path, None).unwrap();
        let bodies: Vec<Vec<u8>> = index
            .msgs
            .iter()
            .map(|m| index.read_bytes(m).unwrap())
            .collect();
        assert_eq!(bodies, [b"null".to_vec(), b"42".to_vec()]);
        let text = std::fs::read_to_string(&path).unwrap();
        let bare = text.replace(r#","msg":null"#, "");
        assert_ne!(bare, text);
        std::fs::write(&path, bare).unwrap();
        let by_index = TapeIndex::load(&path, None).err().expect("no body");
        let mut r = TapeReader::open(&path).unwrap();
        let by_reader = loop {
            match r.next_item() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the reader took a line without a body"),
                Err(e) => break e,
            }
        };
        assert_eq!(by_index.to_string(), by_reader.to_string());
        assert!(
            matches!(by_reader, TapeError::Malformed { line: 3, .. }),
            "{by_reader}"
        );
    }

    #[test]
    fn newer_major_versions_are_refused_and_unknown_line_types_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(
            f,
            r#"{{"type":"header","format":"mcptape","version":2,"created":"x","tool":"t"}}"#
        )
        .unwrap();
        let err = TapeReader::open(&path).err().expect("too new");
        assert!(matches!(err, TapeError::TooNew { version: 2, .. }));
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, r#"{{"type":"header","format":"mcptape","version":1,"minor":0,"created":"x","tool":"t"}}"#).unwrap();
        writeln!(f, r#"{{"type":"hologram","x":1}}"#).unwrap();
        writeln!(f, r#"{{"type":"end","t_us":1,"messages":0,"exchanges":0}}"#).unwrap();
        let index = TapeIndex::load(&path, None).unwrap();
        assert!(index.warnings.is_empty());
        assert!(index.end.is_some());
    }

    /// A body of 64 KiB or more is written from the caller's buffer in parts (with transport
    /// facts after it): the line reads back whole and the chain holds across it.
    #[test]
    fn big_bodies_written_in_parts_read_back_and_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{}"}}}}"#,
            "a".repeat(200 * 1024)
        );
        let small = br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
        let mut w = TapeWriter::create(&path, WriteOptions::default()).unwrap();
        let line = |bytes| {
            crate::wire::Frame::Line(crate::wire::Line {
                bytes,
                crlf: false,
                unterminated: false,
                bom: false,
            })
        };
        let facts = serde_json::json!({"status": 200});
        // Small before and after the big one, all in one commit, as a relay chunk would be.
        w.message("s", Dir::C2S, &line(small), Instant::now());
        w.message_with(
            "s",
            Dir::S2C,
            &line(big.as_bytes()),
            Instant::now(),
            Some(&facts),
        );
        w.message("s", Dir::C2S, &line(small), Instant::now());
        w.commit().unwrap();
        w.finish(None, None).unwrap();
        let mut r = TapeReader::open(&path).unwrap();
        while r.next_item().unwrap().is_some() {}
        assert!(matches!(r.chain(), Chain::Linked(_)), "{:?}", r.chain());
        let msgs: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["type"] == "msg")
            .collect();
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[1]["msg"]["result"]["text"].as_str().unwrap().len(),
            200 * 1024
        );
        assert_eq!(msgs[1]["http"]["status"], 200);
        assert_eq!(msgs[2]["msg"]["method"], "ping");
    }
}
