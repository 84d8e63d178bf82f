//! What a model request is compared by on replay: its body with the fields that change from one
//! identical run to the next left out. Each rule names the client measured sending it
//! (`../docs/agents.md` has the measurements); the tape keeps every byte, only the comparison
//! leaves them out.

use regex::Regex;
use serde_json::Value;
use std::sync::OnceLock;

/// Object keys left out wherever they appear in a request body, and who sends them.
const VOLATILE_KEYS: &[(&str, &str)] = &[
    // Codex CLI: a per-session cache key and per-run metadata.
    ("prompt_cache_key", "Codex CLI"),
    ("client_metadata", "Codex CLI"),
];

/// Paths (JSON Pointer) left out, and who sends them.
const VOLATILE_POINTERS: &[(&str, &str)] = &[
    // Claude Code: its session id (`user_<hash>_account__session_<uuid>`).
    ("/metadata/user_id", "Claude Code"),
];

/// The per-item metadata Codex CLI sends its built-in `openai` provider in Responses `input`.
const CODEX_ITEM_META: &str = "internal_chat_message_metadata_passthrough";

/// Text that changes run to run inside prompts and tool output, replaced by a placeholder.
fn volatile_text() -> &'static [(Regex, &'static str)] {
    static RULES: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    RULES.get_or_init(|| {
        let r = |p: &str| Regex::new(p).expect("a valid built-in pattern");
        vec![
            // Claude Code: the date line of its system reminder.
            (r(r"Today's date is [^\n]*"), "Today's date is <date>"),
            // Codex CLI: how long a tool ran, inside `function_call_output`.
            (r(r"Wall time: [0-9.]+ seconds"), "Wall time: <n> seconds"),
        ]
    })
}

/// The body as matching sees it (`None` for a body that is not JSON: compared as bytes).
pub fn canonical(body: &[u8]) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    for (ptr, _) in VOLATILE_POINTERS {
        remove_pointer(&mut v, ptr);
    }
    scrub(&mut v, false);
    Some(v)
}

/// Leaves out volatile keys and ids, and replaces volatile text. `in_items` is true inside
/// Responses `input` items, whose `id` (a fresh UUIDv7 each run, Codex) is not content.
fn scrub(v: &mut Value, in_items: bool) {
    match v {
        Value::Object(map) => {
            for (key, _) in VOLATILE_KEYS {
                map.remove(*key);
            }
            if in_items {
                map.remove("id");
            }
            // Gemini CLI: function call and response ids carry a millisecond timestamp.
            for part in ["functionCall", "functionResponse"] {
                if let Some(Value::Object(call)) = map.get_mut(part) {
                    call.remove("id");
                }
            }
            for (key, child) in map.iter_mut() {
                scrub(child, key == "input" && child.is_array());
            }
        }
        Value::Array(items) => {
            for item in items {
                if in_items {
                    if let Value::Object(m) = item {
                        m.remove("id");
                        // Codex CLI, to a provider named "OpenAI" (its built-in): each item's
                        // turn and the moment it was made (its kinds of content stay).
                        if let Some(Value::Object(meta)) = m.get_mut(CODEX_ITEM_META) {
                            meta.remove("turn_id");
                            meta.remove("create_time");
                        }
                    }
                }
                scrub(item, false);
            }
        }
        Value::String(s) => {
            for (re, with) in volatile_text() {
                if re.is_match(s) {
                    *s = re.replace_all(s, *with).into_owned();
                }
            }
        }
        _ => {}
    }
}

fn remove_pointer(v: &mut Value, ptr: &str) {
    let Some((parent, last)) = ptr.rsplit_once('/') else {
        return;
    };
    let parent = if parent.is_empty() {
        Some(v)
    } else {
        v.pointer_mut(parent)
    };
    if let Some(Value::Object(m)) = parent {
        m.remove(last);
    }
}

/// The volatile fields, for the documentation and `--help`: (what, who sends it).
pub fn documented() -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = VOLATILE_POINTERS
        .iter()
        .map(|(p, who)| (p.to_string(), *who))
        .collect();
    out.extend(
        VOLATILE_KEYS
            .iter()
            .map(|(k, who)| (format!("any `{k}`"), *who)),
    );
    out.push(("`input[].id` (Responses)".into(), "Codex CLI"));
    out.push((
        format!("`input[].{CODEX_ITEM_META}.turn_id`, `.create_time` (Responses)"),
        "Codex CLI",
    ));
    out.push((
        "`functionCall.id`, `functionResponse.id`".into(),
        "Gemini CLI",
    ));
    out.extend(
        volatile_text()
            .iter()
            .map(|(re, _)| (format!("text /{}/", re.as_str()), "")),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: Value) -> Value {
        canonical(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn two_runs_of_claude_code_compare_equal() {
        let a = json!({"model":"m","metadata":{"user_id":"user_1_session_a"},
            "system":[{"type":"text","text":"x\nToday's date is 2026-12-01.\ny"}]});
        let b = json!({"model":"m","metadata":{"user_id":"user_1_session_b"},
            "system":[{"type":"text","text":"x\nToday's date is 2026-12-02.\ny"}]});
        assert_eq!(canon(a), canon(b));
    }

    #[test]
    fn two_runs_of_codex_compare_equal_and_content_still_counts() {
        let run = |id: &str, key: &str, secs: &str, text: &str| {
            json!({"model":"m","prompt_cache_key":key,"client_metadata":{"x":key},
                "input":[{"type":"message","id":id,"role":"user","content":[{"type":"input_text","text":text}]},
                         {"type":"function_call_output","call_id":"c1","output":format!("Wall time: {secs} seconds\nok")}]})
        };
        assert_eq!(
            canon(run("0192-a", "k1", "0.1", "hi")),
            canon(run("0192-b", "k2", "2.5", "hi"))
        );
        assert_ne!(
            canon(run("0192-a", "k1", "0.1", "hi")),
            canon(run("0192-a", "k1", "0.1", "bye"))
        );
    }

    /// Codex CLI's built-in provider gets each input item's turn and creation time (measured
    /// with 0.171.0): two runs differ there and nowhere else; the kinds of content still count.
    #[test]
    fn codex_item_metadata_times_and_turns_are_left_out() {
        let run = |turn: &str, at: f64, kinds: &str| {
            json!({"model":"m","input":[{"type":"message","id":"msg_1","role":"user",
                "content":[{"type":"input_text","text":"hi"}],
                "internal_chat_message_metadata_passthrough":
                    {"turn_id":turn,"create_time":at,"content_item_kinds":[kinds]}}]})
        };
        assert_eq!(
            canon(run("01a2-a", 1796561446.9023483, "user.text")),
            canon(run("01a2-b", 1796561447.5151365, "user.text"))
        );
        assert_ne!(
            canon(run("01a2-a", 1.0, "user.text")),
            canon(run("01a2-a", 1.0, "environments.environment_context"))
        );
    }

    #[test]
    fn gemini_call_ids_are_left_out() {
        let a =
            json!({"contents":[{"parts":[{"functionCall":{"id":"1733-1","name":"t","args":{}}}]}]});
        let b =
            json!({"contents":[{"parts":[{"functionCall":{"id":"1733-2","name":"t","args":{}}}]}]});
        assert_eq!(canon(a), canon(b));
    }
}
