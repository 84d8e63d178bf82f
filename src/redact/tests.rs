use super::*;
use proptest::strategy::Strategy as _;
use serde_json::json;

fn redactor() -> Redactor {
    Redactor::new(&RedactConfig::defaults()).unwrap()
}

fn red(msg: Value) -> (Value, Vec<String>) {
    let r = redactor();
    match r.redact_json(msg.to_string().as_bytes()) {
        Some((bytes, rules)) => (serde_json::from_slice(&bytes).unwrap(), rules),
        None => (msg, vec![]),
    }
}

fn red_str(raw: &str) -> String {
    match redactor().redact_json(raw.as_bytes()) {
        Some((bytes, _)) => String::from_utf8(bytes).unwrap(),
        None => raw.to_string(),
    }
}

/// `raw` with every marker replaced by `M` (the hashes are random per redactor).
fn masked(raw: &str) -> String {
    marker_re().replace_all(raw, "M").into_owned()
}

#[test]
fn secrets_are_replaced_and_ordinary_content_kept() {
    let (v, rules) = red(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "name":"deploy",
        "arguments":{"apiKey":"hunter2","config":{"Authorization":"Bearer abcdefghijk1"},
            "note":"use sk-ant-api03-abcdefghijklmnopqrstuvwxyz please",
            "url":"https://x.test/a?token=s3cr3tvalue&page=2",
            "hash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "uuid":"123e4567-e89b-12d3-a456-426614174000",
            "opaque":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA",
            "image":{"type":"image","data":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA","mimeType":"image/png"},
            "embedded":"{\"password\":\"pw\",\"x\":1}",
            "_meta":{"progressToken":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA"}
        }}}),
    );
    let a = &v["params"]["arguments"];
    let s = |v: &Value| v.as_str().unwrap().to_string();
    assert!(s(&a["apiKey"]).starts_with("[REDACTED:key:apikey:"), "{a}");
    assert!(s(&a["config"]["Authorization"]).starts_with("[REDACTED:key:authorization:"));
    assert!(
        s(&a["note"]).starts_with("use [REDACTED:anthropic-key:"),
        "{a}"
    );
    assert!(s(&a["note"]).ends_with("] please"), "{a}");
    assert!(
        s(&a["url"]).starts_with("https://x.test/a?token=[REDACTED:url-param:"),
        "{a}"
    );
    assert!(s(&a["url"]).ends_with("&page=2"));
    assert_eq!(
        a["hash"],
        json!("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    );
    assert_eq!(a["uuid"], json!("123e4567-e89b-12d3-a456-426614174000"));
    assert!(s(&a["opaque"]).starts_with("[REDACTED:high-entropy:"));
    assert_eq!(
        a["image"]["data"],
        json!("Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA")
    );
    assert_eq!(
        masked(&s(&a["embedded"])),
        r#"{"password":"M","x":1}"#,
        "{a}"
    );
    assert_eq!(
        a["_meta"]["progressToken"],
        json!("Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA")
    );
    assert_eq!(v["id"], json!(1));
    assert!(rules.contains(&"high-entropy".to_string()));
}

#[test]
fn only_the_secrets_bytes_change() {
    // Odd key order, whitespace, `2.50`, escapes and non-ASCII all stay as they were.
    let raw = "{ \"params\" : {\"z\":2.50, \"token\" :\t\"hunter22\",\"a\":\"caf\\u00e9 \\\"q\\\"\",\"n\":1e3 ,\"note\":\"key sk-proj-abcdefghijklmnopqrstuv1234 end\"},\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\"}";
    let out = red_str(raw);
    assert_eq!(
        masked(&out),
        "{ \"params\" : {\"z\":2.50, \"token\" :\t\"M\",\"a\":\"caf\\u00e9 \\\"q\\\"\",\"n\":1e3 ,\"note\":\"key M end\"},\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\"}"
    );
}

#[test]
fn json_inside_a_string_keeps_its_form() {
    let raw = r#"{"jsonrpc":"2.0","id":1,"result":{"text":"{ \"b\": 1,  \"password\" : \"pw\\\"x\", \"a\":[2.50] }"}}"#;
    let out = red_str(raw);
    assert_eq!(
        masked(&out),
        r#"{"jsonrpc":"2.0","id":1,"result":{"text":"{ \"b\": 1,  \"password\" : \"M\", \"a\":[2.50] }"}}"#
    );
    // A number under a sensitive key inside JSON in a string becomes a quoted marker, escaped.
    let raw = r#"{"result":{"text":"{\"pin\":1, \"password\":123456}"}}"#;
    let out = red_str(raw);
    assert_eq!(
        masked(&out),
        r#"{"result":{"text":"{\"pin\":1, \"password\":\"M\"}"}}"#
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    let inner: Value = serde_json::from_str(v["result"]["text"].as_str().unwrap()).unwrap();
    assert!(is_marker(inner["password"].as_str().unwrap()));
}

#[test]
fn escaped_secrets_are_caught_in_their_decoded_form() {
    for raw in [
        r#"{"params":{"note":"\u0067hp_abcdefghijklmnopqrstuvwxyz0123456789"}}"#,
        r#"{"params":{"db":"postgres:\/\/app:S3cret99@db\/x"}}"#,
        r#"{"params":{"note":"sk\u002dproj-abcdefghijklmnopqrstuvwxyz12"}}"#,
        r#"{"params":{"p\u0061ssword":"hunter22"}}"#,
    ] {
        let out = red_str(raw);
        assert!(out.contains("[REDACTED:"), "{raw} -> {out}");
        for secret in ["hp_abcdef", "S3cret99", "proj-abcdef", "hunter22"] {
            assert!(!out.contains(secret), "{raw} -> {out}");
        }
    }
    // The marker replaces exactly the escaped span.
    assert_eq!(
        masked(&red_str(
            r#"{"params":{"db":"postgres:\/\/app:S3cret99@db\/x"}}"#
        )),
        r#"{"params":{"db":"postgres:\/\/app:M@db\/x"}}"#
    );
}

#[test]
fn schemas_are_never_redacted() {
    let raw = r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"deploy","inputSchema":{"type":"object","properties":{"api_key":{"title":"Api Key","type":"string","description":"Your API key"},"token":{"type":"string","minLength":20},"password":{"type":"string","format":"password","writeOnly":true,"default":""}},"required":["api_key","token"]}}]}}"#;
    assert_eq!(redactor().redact_json(raw.as_bytes()), None);
    // A sensitive key holding an object is walked, not replaced: its own keys decide.
    let raw = r#"{"params":{"credentials":{"username":"ann","password":"hunter22"},"token":{"token_type":"Bearer","expires_in":3600,"access_token":"abc123xyz"}}}"#;
    assert_eq!(
        masked(&red_str(raw)),
        r#"{"params":{"credentials":{"username":"ann","password":"M"},"token":{"token_type":"Bearer","expires_in":3600,"access_token":"M"}}}"#
    );
    // A default that has a credential's shape is still taken out.
    let raw = r#"{"result":{"inputSchema":{"properties":{"key":{"type":"string","default":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}}}}"#;
    assert_eq!(
        masked(&red_str(raw)),
        r#"{"result":{"inputSchema":{"properties":{"key":{"type":"string","default":"M"}}}}}"#
    );
}

#[test]
fn a_servers_own_prose_gets_the_shape_rules_only() {
    let prose = "Pass the token as-is: it is a hex string, e.g. dGVzdDEyMzQ1Njc4OTA";
    let instructions = "Ask for a token; the password is tk93ndQ2x";
    let listing = json!({"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"deploy",
        "title":"Deploy (the token is tk93ndQ2x)","description":prose,
        "inputSchema":{"type":"object","properties":{"token":{"type":"string",
            "description":"the password is tk93ndQ2x"}}}}]}});
    let (v, rules) = red(listing.clone());
    assert_eq!(
        v, listing,
        "a listing's descriptions and titles are kept: {rules:?}"
    );
    let init = json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18",
        "capabilities":{},"serverInfo":{"name":"x","version":"1","title":"Token vault (OAuth2)",
        "description":"the password is tk93ndQ2x"},"instructions":instructions}});
    assert_eq!(red(init.clone()).0, init);
    // A real credential's shape is taken out of prose all the same.
    let key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz";
    let (v, _) = red(
        json!({"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"x",
        "description":format!("uses {key}")}]}}),
    );
    assert!(!v.to_string().contains(key), "{v}");
    // The same words elsewhere (a call's arguments, a result's text) get every rule.
    let (v, _) = red(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
        "name":"note","arguments":{"description":"the password is tk93ndQ2x",
        "title":"the token is tk93ndQ2x"}}}),
    );
    assert!(!v.to_string().contains("tk93ndQ2x"), "{v}");
    let (v, _) = red(
        json!({"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text",
        "text":"the password is tk93ndQ2x"}],"description":"the password is tk93ndQ2x"}}),
    );
    assert!(!v.to_string().contains("tk93ndQ2x"), "{v}");
}

#[test]
fn equal_secrets_get_equal_markers_within_a_redactor() {
    let r = redactor();
    let m1 = r.redact_json(br#"{"params":{"token":"abc1"}}"#).unwrap().0;
    let m2 = r
        .redact_json(br#"{"result":{"x":{"token":"abc1"}}}"#)
        .unwrap()
        .0;
    let v1: Value = serde_json::from_slice(&m1).unwrap();
    let v2: Value = serde_json::from_slice(&m2).unwrap();
    assert_eq!(v1["params"]["token"], v2["result"]["x"]["token"]);
    assert_eq!(
        marker_rule(v1["params"]["token"].as_str().unwrap()),
        Some("key:token")
    );
}

#[test]
fn plain_messages_are_left_verbatim() {
    let r = redactor();
    assert!(r.redact_json(br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"The sum of 2 and 3 is 5."}]}}"#).is_none());
    assert!(r.redact_json(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get","arguments":{"maxTokens":100}}}"#).is_none());
    assert!(r
        .redact_json(br#"{"result":{"nextPageToken":"CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA","nextCursor":"eyJwYWdlIjoyfQ=="}}"#)
        .is_none());
}

#[test]
fn a_secret_used_as_a_key_goes() {
    let out = red_str(r#"{"result":{"sk-ant-api03-abcdefghijklmnopqrstuvwxyz":{"n":1}}}"#);
    assert_eq!(masked(&out), r#"{"result":{"M":{"n":1}}}"#);
}

#[test]
fn base64_text_is_decoded_and_redacted_in_place() {
    use base64::Engine as _;
    let env =
        "APP=demo\nDATABASE_PASSWORD=hunter2222\nOPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuv12\n";
    let blob = base64::engine::general_purpose::STANDARD.encode(env);
    let raw = format!(
        r#"{{"jsonrpc":"2.0","id":3,"result":{{"contents":[{{"uri":"file:///app/.env","mimeType":"text/plain","blob":"{blob}"}}]}}}}"#
    );
    let out = red_str(&raw);
    let v: Value = serde_json::from_str(&out).unwrap();
    let got = v["result"]["contents"][0]["blob"].as_str().unwrap();
    let text = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(got)
            .unwrap(),
    )
    .unwrap();
    assert!(
        !text.contains("hunter2222") && !text.contains("sk-proj"),
        "{text}"
    );
    assert_eq!(
        masked(&text),
        "APP=demo\nDATABASE_PASSWORD=M\nOPENAI_API_KEY=M\n"
    );
    // A real image is left alone.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let raw = format!(
        r#"{{"result":{{"content":[{{"type":"image","data":"{png}","mimeType":"image/png"}}]}}}}"#
    );
    assert_eq!(red_str(&raw), raw);
}

#[test]
fn user_rules_and_defaults_off() {
    let mut cfg = RedactConfig {
        defaults: false,
        ..Default::default()
    };
    cfg.add_rule("x-internal");
    cfg.add_rule("re:corp-[0-9]{4}");
    cfg.add_rule("path:$.params.arguments.pin");
    let r = Redactor::new(&cfg).unwrap();
    let (bytes, rules) = r
        .redact_json(br#"{"params":{"arguments":{"X_Internal":"v","id":"corp-1234","pin":1234,"apiKey":"kept"}}}"#)
        .unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let a = &v["params"]["arguments"];
    assert!(a["X_Internal"]
        .as_str()
        .unwrap()
        .starts_with("[REDACTED:key:x_internal:"));
    assert!(a["id"]
        .as_str()
        .unwrap()
        .starts_with("[REDACTED:user-regex:"));
    assert!(a["pin"]
        .as_str()
        .unwrap()
        .starts_with("[REDACTED:user-path:"));
    assert_eq!(a["apiKey"], json!("kept"), "defaults are off");
    assert_eq!(rules, ["key:x_internal", "user-path", "user-regex"]);
    assert!(Redactor::new(&RedactConfig {
        patterns: vec!["(".into()],
        ..Default::default()
    })
    .is_err());
}

#[test]
fn a_value_under_a_sensitive_key_goes_whole_in_text() {
    // Found by fuzzing: in text (a line that is not valid JSON), the assignment rule took
    // `api_key":"sk-…` only up to a comma and left the rest of the secret behind.
    let r = redactor();
    let (t, _) = r
        .redact_text("{\"api_key\":\"sk-\u{10}defghijklmn,pqrstuvwxyz012345\"}")
        .unwrap();
    assert!(!t.contains("pqrstuvwxyz012345"), "{t}");
    assert!(t.contains("\"api_key\":\"[REDACTED:assignment:"), "{t}");
}

#[test]
fn what_redact_json_gives_is_json_even_for_a_message_that_was_not() {
    // Found by the `redact` fuzz target: the raw walker is lenient (a control character in a
    // string, a number such as `1-2`), so a line that is not JSON could be walked, spliced and
    // handed back as "JSON" that is not. mcptape's writer checks a line is JSON first; the
    // library's `redact_json` did not promise that, and now checks what it gives.
    let r = redactor();
    for line in [
        &b"{\"id\":1,\"\x01\":{\"text\":\"token ghp_abcdefghijklmnopqrstuvwxyz0123456789\"}}"[..],
        b"{\"n\":1-2,\"text\":\"token ghp_abcdefghijklmnopqrstuvwxyz0123456789\"}",
    ] {
        let (out, rules) = r.redact_json(line).expect("a secret in it");
        assert!(!rules.is_empty());
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(&out).is_ok(),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(!String::from_utf8_lossy(&out).contains("ghp_abc"));
    }
}

#[test]
fn text_lines_are_scrubbed_in_place() {
    let r = redactor();
    let (t, rules) = r
        .redact_text("starting with key AKIAABCDEFGHIJKLMNOP, ok")
        .unwrap();
    assert_eq!(masked(&t), "starting with key M, ok");
    assert_eq!(rules, ["aws-access-key"]);
}

#[test]
fn lines_that_are_not_utf8_keep_their_other_bytes() {
    let r = redactor();
    let line = b"\xff\xfe token=abcdef123456 \xc3(";
    let (out, rules) = r.redact_bytes(line).unwrap();
    assert!(out.starts_with(b"\xff\xfe token=[REDACTED:"));
    assert!(out.ends_with(b"] \xc3("));
    assert_eq!(rules, ["assignment"]);
}

#[test]
fn a_cut_head_ends_before_a_secret_could_start() {
    let r = redactor();
    let (h, _) =
        r.redact_head(br#"{"jsonrpc":"2.0","id":1,"params":{"note":"my key is sk-ant-api03-abc"#);
    assert_eq!(h, br#"{"jsonrpc":"2.0","id":1,"params":{"note":"#);
    let (h, _) = r.redact_head(br#"{"a":"b","key":sk-ant-api03-ab"#);
    assert_eq!(h, br#"{"a":"b","key":"#);
}

#[test]
fn command_lines() {
    let r = redactor();
    let argv: Vec<String> = [
        "srv",
        "-p",
        "hunter22",
        "--port",
        "8080",
        "-p",
        "3000",
        "--auth",
        "abc",
        "--pat",
        "x1",
        "--key",
        "k1",
        "-k",
        "k2",
        "-u",
        "ann:pw1",
        "-u",
        "bob",
        "--credentials",
        "c1",
        "--password=pw2",
        "API_TOKEN=tok1",
        "PWD=/home/me",
        "--api-key",
        "sk-x",
        "--verbose",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = r.redact_argv(&argv);
    // Redacting again changes nothing (a tape's command line redacted twice, or linted).
    assert_eq!(r.redact_argv(&out), out);
    let shown = masked(&out.join(" "));
    assert_eq!(
        shown,
        "srv -p M --port 8080 -p 3000 --auth M --pat M --key M -k M -u ann:M -u bob --credentials M --password=M API_TOKEN=M PWD=/home/me --api-key M --verbose"
    );
}

#[test]
fn a_pem_block_on_the_command_line_is_a_value_not_a_flag() {
    let r = redactor();
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----";
    for argv in [vec!["srv", "--api-key", pem], vec!["srv", pem]] {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let out = r.redact_argv(&argv).join(" ");
        assert!(!out.contains("MIIEowIBAAKCAQEAu1SU1"), "{out}");
    }
}

#[test]
fn the_json_walk_agrees_with_the_prefilter() {
    // Nothing the walk takes is missed by the cheap test in front of it.
    for raw in [
        r#"{"a":"\u0041KIAABCDEFGHIJKLMNOP"}"#,
        r#"{"a":"x","blob":"QVBJX0tFWT1zay1wcm9qLWFiY2RlZmdoaWprbG1ub3BxcnN0dXYxMg=="}"#,
        r#"{"a":"123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq"}"#,
        r#"{"u":"https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"}"#,
        r#"{"u":"redis://:pw123456@cache:6379"}"#,
        r#"{"q":"https://x.test/?x=1;sig=abcdef012"}"#,
    ] {
        let r = redactor();
        assert!(r.may_need(raw.as_bytes()), "{raw}");
        assert!(r.redact_json(raw.as_bytes()).is_some(), "{raw}");
    }
}

#[test]
fn non_ascii_text_is_redacted_as_ascii_text_is() {
    // Non-ASCII messages are prefiltered through their ASCII shadow (they went through the
    // regex set before): Unicode blanks, the Kelvin sign `(?i)` folds onto `k`, keys glued to
    // accented letters and arrows are all still found.
    let r = redactor();
    for (raw, rule) in [
        (
            "{\"text\":\"the key \u{e9}AKIAIOSFODNN7EXAMPLE is in use\"}",
            "aws-access-key",
        ),
        (
            "{\"text\":\"na\u{ef}ve sk-ant-api03-abcdefghijklmnopqrstuvwxyz\"}",
            "anthropic-key",
        ),
        (
            "{\"text\":\"\u{2014}sk-ant-api03-abcdefghijklmnopqrstuvwxyz\u{2014}\"}",
            "anthropic-key",
        ),
        ("{\"text\":\"caf\u{e9} password=hunter22\"}", "assignment"),
        (
            "{\"text\":\"Authorization: Bearer\u{a0}abcdefghijk12345\"}",
            "bearer",
        ),
        (
            "{\"text\":\"Bearer\u{2003}abcdefghijk12345 \u{1f600}\"}",
            "bearer",
        ),
        ("{\"TO\u{212a}EN\":\"abc\", \"\u{e9}\":1}", "key:to_en"),
        (
            "{\"\u{65e5}\u{672c}\":\"see https://me:pw123456@host/x\"}",
            "url-credentials",
        ),
        // The regex set that prefiltered non-ASCII text missed this one: to its `(?i)` the
        // Kelvin sign is a letter, so `Authorization` was no whole name; the rules take it.
        (
            "{\"text\":\"\u{212a}Authorization: hunter2hunter2\"}",
            "assignment",
        ),
    ] {
        let Some((out, rules)) = r.redact_json(raw.as_bytes()) else {
            panic!("nothing taken from {raw}");
        };
        assert!(
            rules.iter().any(|x| x == rule),
            "{raw}: {rules:?} (want {rule}) -> {}",
            String::from_utf8_lossy(&out)
        );
    }
    for plain in [
        "{\"text\":\"caf\u{e9} au lait \u{2014} na\u{ef}ve \u{1f600}, \u{65e5}\u{672c}\"}",
        "{\"text\":\"a token of appreciation \u{2192} basic idea\"}",
    ] {
        assert!(r.redact_json(plain.as_bytes()).is_none(), "{plain}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(2000))]
    /// For any message, the redacted bytes equal the original outside the redacted spans: each
    /// marker stands where some original bytes were, and everything between markers is the
    /// original's, in order.
    #[test]
    fn outside_the_markers_nothing_changes(
        parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::sample::select(vec![
                    r#""token":"hunter22""#, r#""api_key" : "sk-proj-abcdefghijklmnopqrstuv12""#,
                    r#""n":2.50"#, r#""e":1E+3"#, r#""pin":123456"#, r#""password":[1234,"x1",{"value":"v"}]"#,
                    r#""t":"Bearer abc.DEF123_xyz and more""#, r#""u":"https://a:b3c4@h\/p?token=zz1234&x=1""#,
                    r#""j":"{\"secret\": \"s3\", \"k\" :[1, 2.0]}""#, r#""s":"caf\u00e9 \"q\" \\ \n""#,
                    r#""k":"ghp_abcdefghijklmnopqrstuvwxyz0123456789""#, r#""o":"Zk9vQmFyMTIzNDU2Nzg5MEFCQ0RFRmdoaWprbA""#,
                    r#""inputSchema":{"type":"object","properties":{"token":{"type":"string"}}}"#,
                    r#""id":"r-1""#, r#""plain":"nothing here""#, r#""nested":{"deeper":{"pwd":"/home/x"}}"#,
                ]).prop_map(str::to_string),
                "\"[a-z]{1,6}\":\"[ -~]{0,20}\"".prop_map(|s| s.replace('\\', "").replace("\":\"\"", "\":\"x\"")),
            ],
            1..8,
        ),
        spaces in proptest::collection::vec(proptest::sample::select(vec!["", " ", "\t", "\n  "]), 8),
    ) {
        let mut raw = String::from("{");
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                raw.push(',');
            }
            raw.push_str(spaces[i % spaces.len()]);
            raw.push_str(p);
        }
        raw.push('}');
        // Only well-formed inputs (the generated strings may not be valid JSON).
        if serde_json::from_str::<Value>(&raw).is_err() {
            return Ok(());
        }
        static R: std::sync::OnceLock<Redactor> = std::sync::OnceLock::new();
        let r = R.get_or_init(redactor);
        if let Some((out, _)) = r.redact_json(raw.as_bytes()) {
            let out = String::from_utf8(out).unwrap();
            proptest::prop_assert!(serde_json::from_str::<Value>(&out).is_ok(), "{}", out);
            // Walk the output: each literal piece between markers must come next in the input.
            // A whole marker takes its string's quotes with it (a number becomes a quoted one).
            let markers = regex::Regex::new(r#""?\[REDACTED:[a-z0-9:_\-]+\]"?"#).unwrap();
            let mut at = 0;
            let mut last = 0;
            for m in markers.find_iter(&out) {
                let piece = &out[last..m.start()];
                let found = raw[at..].find(piece);
                proptest::prop_assert_eq!(found, Some(0), "piece {:?} of {} in {}", piece, out, raw);
                at += piece.len();
                // The marker replaced at least one original byte (or a quoted number).
                let rest = &raw[at..];
                let next_piece_start = markers.find_at(&out, m.end()).map_or(out.len(), |n| n.start());
                let next = &out[m.end()..next_piece_start];
                let skip = if next.is_empty() { rest.len() } else { rest.find(next).unwrap_or(0) };
                proptest::prop_assert!(skip > 0, "marker replaced nothing: {} / {}", out, raw);
                at += skip;
                last = m.end();
            }
            proptest::prop_assert_eq!(&raw[at..], &out[last..]);
        }
    }
}

proptest::proptest! {
    /// `squash` borrows or folds ASCII itself; any key squashes as the Unicode fold does.
    #[test]
    fn squash_is_the_unicode_fold(key in "[a-zA-Z0-9_\\-\u{e9}\u{c9}\u{212a}\u{17f}\u{130} ]{0,16}") {
        let want: String = key
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect();
        let got = squash(&key);
        // What is ASCII and squashed already is lent, not copied: most keys are.
        proptest::prop_assert_eq!(
            matches!(got, std::borrow::Cow::Borrowed(_)),
            key.is_ascii() && want == key
        );
        proptest::prop_assert_eq!(got, want);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(1000))]
    /// The XML rule's bound checked on each match finds what the bounded pattern found.
    #[test]
    fn the_xml_bound_in_code_is_the_bound_in_the_pattern(
        parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("<password>".to_string()),
                proptest::strategy::Just("</password>".to_string()),
                proptest::strategy::Just("<a>".to_string()),
                proptest::strategy::Just("</a>".to_string()),
                proptest::strategy::Just("<".to_string()),
                proptest::strategy::Just(">".to_string()),
                proptest::strategy::Just("/".to_string()),
                proptest::strategy::Just("\u{e9}".to_string()),
                "[a-z ]{1,8}",
                (4090usize..4100).prop_map(|n| "x".repeat(n)),
                (4094usize..4098).prop_map(|n| "\u{e9}".repeat(n)),
            ],
            0..10,
        )
    ) {
        // The pattern as it was, compiled once (26 ms).
        static BOUNDED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
            regex::Regex::new(
                r"<([A-Za-z][A-Za-z0-9_.:\-]*)>([^<]{1,4096})</([A-Za-z][A-Za-z0-9_.:\-]*)>",
            )
            .unwrap()
        });
        static UNBOUNDED: std::sync::LazyLock<regex::Regex> =
            std::sync::LazyLock::new(|| regex::Regex::new(rules::XML_ELEMENT).unwrap());
        let (bounded, unbounded) = (&*BOUNDED, &*UNBOUNDED);
        let text = parts.concat();
        let spans = |re: &regex::Regex, bound: bool| -> Vec<(usize, usize)> {
            re.captures_iter(&text)
                .filter(|c| !bound || c[2].chars().nth(rules::XML_CONTENT_MAX).is_none())
                .map(|c| (c.get(0).unwrap().start(), c.get(0).unwrap().end()))
                .collect()
        };
        proptest::prop_assert_eq!(spans(bounded, false), spans(unbounded, true));
    }
}

#[test]
fn xml_content_up_to_the_bound_is_taken_and_longer_is_not() {
    let r = redactor();
    let at = |n: usize| format!("<password>{}</password>", "\u{e9}".repeat(n));
    assert!(r.redact_str(&at(rules::XML_CONTENT_MAX)).is_some());
    assert!(r.redact_str(&at(rules::XML_CONTENT_MAX + 1)).is_none());
}

#[test]
fn the_background_compile_compiles_every_text_rule_where_there_are_two_cpus() {
    let r = std::sync::Arc::new(redactor());
    assert!(!r.text_rules_compiled(), "built lazily");
    let thread = r.compile_in_background();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(thread.is_some(), cpus > 1, "{cpus} CPUs");
    if let Some(t) = thread {
        t.join().unwrap();
        assert!(r.text_rules_compiled());
    }
}

/// A number under a built-in key naming a token or a key is a count or an id, and stays
/// a number (as a marker string it broke the tool's `outputSchema` for every client that checks
/// it: `"token": 31373`, a tokenizer's); under a password or a secret, or a key of the user's,
/// a number of four digits or more is still a secret.
#[test]
fn numbers_are_secrets_only_under_keys_that_name_one() {
    let raw = r#"{"result":{"structuredContent":{"word":"hello","token":31373,"api_key":98765,"password":123456,"db_secret":4242,"credentials":{"password":{"value":4321}},"pwd":12,"pass":1234,"passwords":[12345678],"client_secrets":[5555],"secret_key":987654}}}"#;
    assert_eq!(
        masked(&red_str(raw)),
        r#"{"result":{"structuredContent":{"word":"hello","token":31373,"api_key":98765,"password":"M","db_secret":"M","credentials":{"password":{"value":"M"}},"pwd":12,"pass":"M","passwords":["M"],"client_secrets":["M"],"secret_key":"M"}}}"#
    );
    let mut cfg = RedactConfig::defaults();
    cfg.add_rule("tally");
    let r = Redactor::new(&cfg).unwrap();
    let (bytes, rules) = r
        .redact_json(br#"{"tally":123456,"token":"tok-1234abcd"}"#)
        .unwrap();
    assert_eq!(
        masked(std::str::from_utf8(&bytes).unwrap()),
        r#"{"tally":"M","token":"M"}"#
    );
    assert_eq!(rules, ["key:tally", "key:token"]);
}

/// A model's token log-probabilities name each piece of its text `token` (OpenAI's chat and
/// Responses logprobs, Ollama's and vLLM's copies, Gemini's `logprobsResult`): taken for
/// secrets, they became markers, and play served the model's answer with its words replaced.
/// An object with a log-probability key beside `token` is such an entry; its `token` gets the
/// rules any text gets, whichever order the keys come in. A `token` elsewhere (an auth answer)
/// is still a secret, and so is one under a key the user named.
#[test]
fn a_logprob_entrys_token_is_the_models_text() {
    let openai = r#"{"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":{"content":[{"token":"Hello","logprob":-0.31, "bytes":[72,101,108,108,111],"top_logprobs":[{"token":" Hi","logprob":-1.25,"bytes":[32,72,105]}]}]}}]}"#;
    assert_eq!(red_str(openai), openai);
    let reordered = r#"{"logprobs":[{"logprob":-0.5,"token":"secretly"},{"bytes":null,"token":"Token123abc","logprob":0}]}"#;
    assert_eq!(red_str(reordered), reordered);
    let gemini = r#"{"candidates":[{"logprobsResult":{"topCandidates":[{"candidates":[{"token":"Hello","tokenId":9906,"logProbability":-0.1}]}],"chosenCandidates":[{"token":"Hello","tokenId":9906,"logProbability":-0.1}]}}]}"#;
    assert_eq!(red_str(gemini), gemini);
    // The shape rules still apply to the model's text.
    let leaked = r#"{"token":"sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123","logprob":-0.2}"#;
    assert_eq!(masked(&red_str(leaked)), r#"{"token":"M","logprob":-0.2}"#);
    // Not a log-probability entry: a token answered by an auth endpoint.
    let auth = r#"{"result":{"token":"Hello1234abc","expires_in":3600,"token_type":"bearer"}}"#;
    assert_eq!(
        masked(&red_str(auth)),
        r#"{"result":{"token":"M","expires_in":3600,"token_type":"bearer"}}"#
    );
    let mut cfg = RedactConfig::defaults();
    cfg.add_rule("token");
    let r = Redactor::new(&cfg).unwrap();
    let (bytes, rules) = r
        .redact_json(br#"{"token":"Hello","logprob":-0.31}"#)
        .unwrap();
    assert_eq!(
        masked(std::str::from_utf8(&bytes).unwrap()),
        r#"{"token":"M","logprob":-0.31}"#
    );
    assert_eq!(rules, ["key:token"]);
}

#[test]
fn the_tool_definitions_an_agent_sends_its_model_get_the_shape_rules_only() {
    // What the MCP servers said of their tools, as each model API carries them: read by the
    // model as they are, and by whoever reads the tape.
    let said = "Deploy with the OAuth token; the password is tk93ndQ2x";
    let schema = json!({"type":"object","properties":{"token":{"type":"string",
        "description":"the password is tk93ndQ2x"}}});
    let requests = [
        // Anthropic Messages
        json!({"model":"m","tools":[{"name":"deploy","description":said,"input_schema":schema}],
            "messages":[{"role":"user","content":"deploy it"}]}),
        // OpenAI Responses
        json!({"model":"m","tools":[{"type":"function","name":"deploy","description":said,
            "parameters":schema}],"input":[]}),
        // OpenAI Chat Completions
        json!({"model":"m","tools":[{"type":"function","function":{"name":"deploy",
            "description":said,"parameters":schema}}],"messages":[]}),
        // Gemini
        json!({"contents":[],"tools":[{"functionDeclarations":[{"name":"deploy",
            "description":said,"parametersJsonSchema":schema}]}]}),
        // Gemini through Code Assist (signed in with Google): the request is wrapped
        json!({"model":"m","project":"p","request":{"contents":[],"tools":[{
            "functionDeclarations":[{"name":"deploy","description":said,"parameters":schema}]}]}}),
    ];
    for req in requests {
        let (v, rules) = red(req.clone());
        assert_eq!(v, req, "the tool definitions are kept: {rules:?}");
    }
    // A credential's shape is taken out of them all the same.
    let key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz";
    let (v, _) =
        red(json!({"model":"m","tools":[{"name":"x","description":format!("uses {key}")}]}));
    assert!(!v.to_string().contains(key), "{v}");
    // The same words from the user, the system prompt or a tool's result get every rule.
    let (v, _) = red(json!({"model":"m","system":said,"tools":[],"messages":[
        {"role":"user","content":said},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":said}]}]}));
    assert!(!v.to_string().contains("tk93ndQ2x"), "{v}");
    // In an MCP message, `tools` is a listing only in a result.
    let (v, _) = red(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n",
        "arguments":{"tools":[{"description":said}]}}}),
    );
    assert!(!v.to_string().contains("tk93ndQ2x"), "{v}");
}
