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
    // Gemini CLI signed in with Google (Code Assist): its session id, in the wrapper and in
    // the wrapped request.
    ("/user_prompt_id", "Gemini CLI (Code Assist)"),
    ("/request/session_id", "Gemini CLI (Code Assist)"),
];

/// The per-item metadata Codex CLI sends its built-in `openai` provider in Responses `input`.
const CODEX_ITEM_META: &str = "internal_chat_message_metadata_passthrough";

/// Gemini CLI's tool that activates one of its agent skills.
const GEMINI_SKILL_TOOL: &str = "activate_skill";

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
            if map.get("name").and_then(Value::as_str) == Some(GEMINI_SKILL_TOOL) {
                skill_tool_in_order(map);
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
            if let Some(sorted) = skills_in_order(s) {
                *s = sorted;
            }
        }
        _ => {}
    }
}

/// Gemini CLI (measured with 0.61) lists its agent skills in the order it happened to load them,
/// which changes from run to run: in its system prompt (`<available_skills>`, one `<skill>` each)
/// and in its `activate_skill` tool (the description's `(Available: 'a', 'b')` and the `name`
/// parameter's `enum`). Matching compares them sorted; which skills there are still counts.
fn skills_in_order(text: &str) -> Option<String> {
    const OPEN: &str = "<available_skills>";
    const CLOSE: &str = "</available_skills>";
    let start = text.find(OPEN)? + OPEN.len();
    let end = start + text[start..].find(CLOSE)?;
    let inner = &text[start..end];
    // The blocks and what stands between them; anything but blank space between two blocks, or
    // a block not closed, and the list is left as it is.
    let mut blocks = Vec::new();
    let mut gaps = Vec::new();
    let mut rest = inner;
    loop {
        let Some(at) = rest.find("<skill>") else {
            if !rest.trim().is_empty() {
                return None;
            }
            gaps.push(rest);
            break;
        };
        if !rest[..at].trim().is_empty() {
            return None;
        }
        gaps.push(&rest[..at]);
        let len = rest[at..].find("</skill>")? + "</skill>".len();
        blocks.push(&rest[at..at + len]);
        rest = &rest[at + len..];
    }
    if blocks.windows(2).all(|w| w[0] <= w[1]) {
        return None;
    }
    blocks.sort_unstable();
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    for (gap, block) in gaps.iter().zip(&blocks) {
        out.push_str(gap);
        out.push_str(block);
    }
    out.push_str(gaps.last().copied().unwrap_or(""));
    out.push_str(&text[end..]);
    Some(out)
}

/// `activate_skill`'s skill names in order: its `name` parameter's `enum` (under
/// `parametersJsonSchema` or `parameters`) and the `(Available: …)` list in its description.
fn skill_tool_in_order(tool: &mut serde_json::Map<String, Value>) {
    for schema in ["parametersJsonSchema", "parameters"] {
        if let Some(Value::Array(names)) = tool
            .get_mut(schema)
            .and_then(|s| s.pointer_mut("/properties/name/enum"))
        {
            names.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
    }
    static AVAILABLE: OnceLock<Regex> = OnceLock::new();
    let re = AVAILABLE.get_or_init(|| {
        Regex::new(r"\(Available: ('[^']*'(?:, '[^']*')*)\)").expect("a valid built-in pattern")
    });
    if let Some(Value::String(d)) = tool.get_mut("description") {
        let sorted = re.replace(d, |c: &regex::Captures<'_>| {
            let mut names: Vec<&str> = c[1].split(", ").collect();
            names.sort_unstable();
            format!("(Available: {})", names.join(", "))
        });
        if let std::borrow::Cow::Owned(s) = sorted {
            *d = s;
        }
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
    out.push((
        "the order of the agent skills (`<available_skills>`, `activate_skill`)".into(),
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

    /// Gemini CLI 0.61's request with its two built-in skills, listed in `order` in its system
    /// prompt and in its `activate_skill` tool (shapes as measured, text shortened).
    fn gemini_with_skills(order: &[&str]) -> Value {
        let blocks: String = order
            .iter()
            .map(|n| {
                format!(
                    "  <skill>\n    <name>{n}</name>\n    <description>Use {n}.</description>\n    <location>/x/builtin/{n}/SKILL.md</location>\n  </skill>\n"
                )
            })
            .collect();
        let quoted: Vec<String> = order.iter().map(|n| format!("'{n}'")).collect();
        json!({
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "systemInstruction": {"role": "user", "parts": [{"text": format!(
                "# Available Agent Skills\n\n<available_skills>\n{blocks}</available_skills>\n\n# Hook Context")}]},
            "tools": [{"functionDeclarations": [
                {"name": "echo", "description": "Echoes", "parametersJsonSchema": {"type": "object"}},
                {"name": "activate_skill",
                 "description": format!("Activates a specialized agent skill by name (Available: {}). Returns…", quoted.join(", ")),
                 "parametersJsonSchema": {"type": "object", "properties": {"name": {"type": "string", "enum": order,
                    "description": "The name of the skill to activate."}}, "required": ["name"]}}
            ]}]
        })
    }

    /// Two runs of Gemini CLI list its skills in two orders: they compare equal. A different
    /// set of skills, or the same words elsewhere, still counts.
    #[test]
    fn gemini_skills_compare_in_any_order_and_which_still_counts() {
        let a = gemini_with_skills(&["skill-creator", "antigravity-support"]);
        let b = gemini_with_skills(&["antigravity-support", "skill-creator"]);
        assert_ne!(a, b);
        assert_eq!(canon(a.clone()), canon(b));
        let fewer = gemini_with_skills(&["skill-creator"]);
        assert_ne!(canon(a.clone()), canon(fewer));
        let other = gemini_with_skills(&["antigravity-support", "code-review"]);
        assert_ne!(canon(a), canon(other));
        // Only the skill tool's list: another tool's enum keeps its order.
        let tool = |e: &[&str]| {
            json!({"tools": [{"functionDeclarations": [{"name": "pick",
                "parametersJsonSchema": {"properties": {"name": {"enum": e}}}}]}]})
        };
        assert_ne!(canon(tool(&["b", "a"])), canon(tool(&["a", "b"])));
    }

    /// A skills list with text between its blocks, or a block not closed, is left as it is.
    #[test]
    fn an_irregular_skills_list_is_left_as_it_is() {
        for text in [
            "<available_skills><skill>b</skill> note <skill>a</skill></available_skills>",
            "<available_skills><skill>b</skill><skill>a</available_skills>",
            "<available_skills><skill>b</skill><skill>a</skill>",
        ] {
            assert_eq!(skills_in_order(text), None, "{text}");
        }
        assert_eq!(
            skills_in_order(
                "x<available_skills>\n <skill>b</skill>\n <skill>a</skill>\n</available_skills>y"
            )
            .as_deref(),
            Some("x<available_skills>\n <skill>a</skill>\n <skill>b</skill>\n</available_skills>y")
        );
    }

    #[test]
    fn code_assist_session_ids_are_left_out_and_the_request_still_counts() {
        let wrapped = |session: &str, text: &str| {
            json!({"model":"gemini-2.5-flash","project":"p","user_prompt_id":session,
                "request":{"contents":[{"role":"user","parts":[{"text":text}]}],"session_id":session}})
        };
        assert_eq!(canon(wrapped("s-1", "hi")), canon(wrapped("s-2", "hi")));
        assert_ne!(canon(wrapped("s-1", "hi")), canon(wrapped("s-1", "ho")));
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
