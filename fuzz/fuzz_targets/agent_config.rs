//! Agent config files as `mcptape run` rewrites them: arbitrary bytes as a JSON MCP config
//! (`mcpServers` / VS Code's `servers`), as Claude Code's state file (user and local scope,
//! pointed and given back), as Codex's TOML config, and each line as a Codex `-c` override.
//! Nothing panics; a rewritten config is still a valid config that reads back the same; only
//! the server entries' command, args and URL change, also when a rewritten config is rewritten
//! again; Claude Code's state file given back is the original (plus what the agent wrote).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcptape::fuzz_api::{self as api, toml, Rewritten, Through};
use serde_json::{json, Value};
use std::path::Path;

/// The keys of a server entry a rewrite may change.
const CHANGED: &[&str] = &["command", "args", "url", "httpUrl", "serverUrl"];

fn record() -> Through {
    Through::Record {
        exe: "/bin/mcptape".into(),
        socket: "/tmp/run.sock".into(),
    }
}

fn play() -> Through {
    Through::Play {
        exe: "/bin/mcptape".into(),
        tape: "/tmp/run.jsonl".into(),
    }
}

/// HTTP servers with a name of even length go through mcptape.
fn hook(name: &str, _url: &str) -> Option<String> {
    (name.len() % 2 == 0).then(|| format!("http://127.0.0.1:9/{}", name.len()))
}

/// `after` is `before` with at most the entries' command, args and URL changed.
fn only_entries_changed(before: &Value, after: &Value) {
    let (Value::Object(b), Value::Object(a)) = (before, after) else {
        assert_eq!(before, after, "a config that is not an object changed");
        return;
    };
    assert_eq!(
        b.keys().collect::<Vec<_>>(),
        a.keys().collect::<Vec<_>>(),
        "top-level keys changed"
    );
    for (key, bv) in b {
        let av = &a[key];
        let (true, Value::Object(bs), Value::Object(as_)) =
            (key == "mcpServers" || key == "servers", bv, av)
        else {
            assert_eq!(bv, av, "{key} changed");
            continue;
        };
        assert_eq!(
            bs.keys().collect::<Vec<_>>(),
            as_.keys().collect::<Vec<_>>(),
            "{key}: names changed"
        );
        for (name, be) in bs {
            let ae = &as_[name];
            let (Value::Object(be), Value::Object(ae)) = (be, ae) else {
                assert_eq!(be, ae, "{key}.{name} changed");
                continue;
            };
            for k in be.keys().chain(ae.keys()) {
                if !CHANGED.contains(&k.as_str()) {
                    assert_eq!(be.get(k), ae.get(k), "{key}.{name}.{k} changed");
                }
            }
        }
    }
}

fn stdio_entries(v: &Value) -> usize {
    ["mcpServers", "servers"]
        .iter()
        .filter_map(|k| v.get(k)?.as_object())
        .flat_map(|m| m.values())
        .filter(|e| e.get("command").is_some_and(Value::is_string))
        .count()
}

fn json_config(v: &Value) {
    let mut once = v.clone();
    let r: Rewritten = mcptape::run::config::rewrite_json(
        &mut once,
        &record(),
        &hook,
        mcptape::run::config::KEEP_NONE,
    );
    assert_eq!(r.stdio.len(), stdio_entries(v), "stdio servers missed");
    // What `run` writes reads back as what it meant to write.
    let text = serde_json::to_vec_pretty(&once).expect("JSON serializes");
    let back: Value = serde_json::from_slice(&text).expect("a rewritten config is JSON");
    assert_eq!(back, once, "the rewritten config reads back otherwise");
    only_entries_changed(v, &once);
    for name in &r.stdio {
        let e = ["mcpServers", "servers"]
            .iter()
            .filter_map(|k| once.get(k)?.get(name))
            .find(|e| e.get("command") == Some(&json!("/bin/mcptape")));
        assert!(e.is_some(), "{name} not pointed at mcptape");
    }
    // Rewritten again (a config a crashed run left behind): still only the entries.
    let mut twice = once.clone();
    let r2 = mcptape::run::config::rewrite_json(
        &mut twice,
        &play(),
        &hook,
        mcptape::run::config::KEEP_NONE,
    );
    assert_eq!(r2.stdio.len(), r.stdio.len());
    only_entries_changed(&once, &twice);
}

fn claude_state(v: &Value) {
    let cwd = Path::new("/home/u/work/proj");
    let mut pointed = v.clone();
    let (entries, _servers) = api::claude_point(&mut pointed, &[cwd, cwd], &record(), &hook);
    if entries.is_empty() {
        return;
    }
    // The copy the agent gets, as `borrow` writes it; given back untouched, the real file is
    // the original (the user's servers never left pointed at mcptape).
    let written = serde_json::to_vec_pretty(&pointed).expect("JSON serializes");
    let back = api::claude_unpoint(&entries, written.clone());
    let back: Value = serde_json::from_slice(&back).expect("given back as JSON");
    assert_eq!(&back, v, "the state file given back is not the original");
    // The agent wrote a key of its own: that comes back too, nothing else changes.
    if let Value::Object(mut m) = pointed {
        m.insert("mcptapeFuzzStartups".into(), json!(7));
        let written = serde_json::to_vec(&Value::Object(m)).unwrap();
        let back: Value = serde_json::from_slice(&api::claude_unpoint(&entries, written)).unwrap();
        let mut want = v.clone();
        want["mcptapeFuzzStartups"] = json!(7);
        assert_eq!(back, want, "the agent's write did not come back alone");
    }
}

fn toml_config(t: &toml::Table) {
    let mut once = t.clone();
    let _ = mcptape::run::config::rewrite_toml(&mut once, &record(), &hook);
    // What `run` writes for Codex reads back as the table it meant to write.
    if let Ok(text) = toml::to_string(&once) {
        let back: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("the rewritten Codex config does not parse: {e}\n{text}"));
        assert_eq!(
            back, once,
            "the rewritten Codex config reads back otherwise:\n{text}"
        );
    }
    // Only the servers' command, args and url changed.
    for (k, v) in t {
        if k != "mcp_servers" {
            assert_eq!(once.get(k), Some(v), "{k} changed");
        }
    }
    if let (Some(toml::Value::Table(b)), Some(toml::Value::Table(a))) =
        (t.get("mcp_servers"), once.get("mcp_servers"))
    {
        assert_eq!(b.keys().collect::<Vec<_>>(), a.keys().collect::<Vec<_>>());
        for (name, be) in b {
            if let (toml::Value::Table(be), Some(toml::Value::Table(ae))) = (be, a.get(name)) {
                for k in be.keys().chain(ae.keys()) {
                    if !["command", "args", "url"].contains(&k.as_str()) {
                        assert_eq!(be.get(k), ae.get(k), "mcp_servers.{name}.{k} changed");
                    }
                }
            } else {
                assert_eq!(Some(be), a.get(name));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        json_config(&v);
        claude_state(&v);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = text.parse::<toml::Table>() {
        toml_config(&t);
    }
    // Each line a `-c key=value` override, onto an empty config: then the config is rewritten.
    let mut t = toml::Table::new();
    for line in text.lines().take(16) {
        // A key path of 100-odd dots makes tables the `toml` crate writes but will not read
        // again (its recursion limit): the user's own `-c`, and Codex would refuse it too.
        let depth = line.split('=').next().unwrap_or("").matches('.').count();
        if depth > 32 {
            continue;
        }
        let _ = mcptape::run::config::apply_override(&mut t, line);
    }
    toml_config(&t);
});
