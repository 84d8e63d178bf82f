//! Which model API a request is for, told from its path (a base URL's path prefix kept in
//! front), and what each API says in its own words: the model asked for, whether the answer
//! streams, the token usage, the tools the model called, and an error in its format.

use serde_json::{json, Value};

/// A model API mcptape knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`).
    Anthropic,
    /// OpenAI Chat Completions (`/v1/chat/completions`), and every OpenAI-compatible provider.
    OpenAiChat,
    /// OpenAI Responses (`/v1/responses`).
    OpenAiResponses,
    /// Gemini (`…/models/M:generateContent`, `:streamGenerateContent`).
    Gemini,
    /// Any other path: forwarded and taped as it is, matched by path and body.
    Other,
}

impl Provider {
    /// The provider's name on the tape.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAiChat => "openai-chat",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Gemini => "gemini",
            Provider::Other => "other",
        }
    }

    /// The provider named `name` on a tape.
    pub fn from_name(name: &str) -> Provider {
        match name {
            "anthropic" => Provider::Anthropic,
            "openai-chat" => Provider::OpenAiChat,
            "openai-responses" => Provider::OpenAiResponses,
            "gemini" => Provider::Gemini,
            _ => Provider::Other,
        }
    }
}

/// What a request's path says: the provider and the endpoint (the path without the base URL's
/// prefix and without the query: `/v1/messages`, `:streamGenerateContent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The API.
    pub provider: Provider,
    /// The endpoint, as matching compares it (`messages`, `messages/count_tokens`,
    /// `chat/completions`, `responses`, `generateContent`, `streamGenerateContent`, or the path).
    pub endpoint: String,
    /// Gemini, and Anthropic on Vertex AI, name the model in the path.
    pub path_model: Option<String>,
}

/// The route of `path` (its query left out).
pub fn route(path_and_query: &str) -> Route {
    let path = path_and_query
        .split_once('?')
        .map_or(path_and_query, |(p, _)| p);
    let ends = |suffix: &str| path.ends_with(suffix);
    let (provider, endpoint) = if ends("/messages/count_tokens") {
        (Provider::Anthropic, "messages/count_tokens")
    } else if ends("/messages") {
        (Provider::Anthropic, "messages")
    } else if ends("/chat/completions") {
        (Provider::OpenAiChat, "chat/completions")
    } else if ends("/responses") {
        (Provider::OpenAiResponses, "responses")
    } else if ends(":streamGenerateContent") {
        (Provider::Gemini, "streamGenerateContent")
    } else if ends(":generateContent") {
        (Provider::Gemini, "generateContent")
    } else if ends(":countTokens") {
        (Provider::Gemini, "countTokens")
    } else if path.contains("/publishers/anthropic/models/")
        && (ends(":streamRawPredict") || ends(":rawPredict"))
    {
        // Anthropic on Vertex AI (Claude Code with `CLAUDE_CODE_USE_VERTEX`): the Messages
        // API with the model in the path (`…/models/M:streamRawPredict`), and count_tokens as
        // the model `count-tokens`.
        let counts = path.contains("/models/count-tokens:");
        let endpoint = if counts {
            "messages/count_tokens"
        } else {
            "messages"
        };
        let path_model = (!counts)
            .then(|| {
                let last = path.rsplit('/').next()?;
                Some(last.split_once(':')?.0.to_string())
            })
            .flatten();
        return Route {
            provider: Provider::Anthropic,
            endpoint: endpoint.to_string(),
            path_model,
        };
    } else {
        return Route {
            provider: Provider::Other,
            endpoint: path.to_string(),
            path_model: None,
        };
    };
    // `…/models/M:method`; Code Assist's `…/v1internal:method` names it in the body.
    let path_model = (provider == Provider::Gemini)
        .then(|| {
            let (before, last) = path.rsplit_once('/')?;
            before.ends_with("/models").then_some(())?;
            Some(last.split_once(':')?.0.to_string())
        })
        .flatten();
    Route {
        provider,
        endpoint: endpoint.to_string(),
        path_model,
    }
}

/// Whether `endpoint` is one of Code Assist's setup and bookkeeping calls (Gemini CLI signed
/// in with Google: `…/v1internal:loadCodeAssist`, `:onboardUser`, `:retrieveUserQuota`,
/// `:listExperiments`, `:fetchAdminControls`, `:recordCodeAssistMetrics`…), as opposed to its
/// model calls (`:streamGenerateContent`, `:generateContent`, `:countTokens`, routed as
/// Gemini). Played back by endpoint (see the model player).
pub fn is_code_assist_setup(endpoint: &str) -> bool {
    endpoint.rsplit_once("/v1internal:").is_some_and(|(_, m)| {
        !m.is_empty()
            && !m.contains('/')
            && !matches!(
                m,
                "streamGenerateContent" | "generateContent" | "countTokens"
            )
    })
}

/// What the proxy reads of a request's body: its top-level `model` and `stream`. An agent's
/// request holds its whole conversation and tool list (Claude Code's: ≈ 77 KB a call), which
/// is not built into a tree for two fields.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `model`, when it is a string.
    pub model: Option<String>,
    /// `stream` is `true`.
    pub stream: bool,
}

impl RequestHead {
    /// Reads `body` as a parse into a `Value` would (the last of a repeated key; nothing from a
    /// body that is not a JSON object, or that a `Value` refuses anywhere in it: a string that
    /// is not UTF-8 or holds a lone surrogate, a number out of range), without keeping the rest.
    pub fn of(body: &[u8]) -> RequestHead {
        serde_json::from_slice::<HeadProbe>(body)
            .map(|p| p.0)
            .unwrap_or_default()
    }
}

/// [`RequestHead::of`]'s reader. Not derived: a derived struct takes an array's items for its
/// fields, and skips the values of other keys without decoding their strings (bytes that are
/// not UTF-8, lone surrogates) or their numbers (`1e400`), which a `Value` refuses.
struct HeadProbe(RequestHead);

impl<'de> serde::Deserialize<'de> for HeadProbe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<HeadProbe, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = HeadProbe;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<HeadProbe, A::Error> {
                let mut head = RequestHead::default();
                while let Some(key) = map.next_key::<String>()? {
                    let keep = key == "model";
                    let seen = map.next_value_seed(Checked { keep })?;
                    match key.as_str() {
                        "model" => head.model = seen.string,
                        "stream" => head.stream = seen.is_true,
                        _ => {}
                    }
                }
                Ok(HeadProbe(head))
            }
        }
        d.deserialize_map(Object)
    }
}

/// What [`Checked`] kept of a value.
#[derive(Default)]
struct Seen {
    string: Option<String>,
    is_true: bool,
}

/// Reads one JSON value as a `Value` would (strings decoded, numbers converted, so what a
/// `Value` refuses is refused) and keeps only whether it is `true` and, with `keep`, the
/// string it is.
#[derive(Clone, Copy)]
struct Checked {
    keep: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for Checked {
    type Value = Seen;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Seen, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Checked {
    type Value = Seen;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Seen, E> {
        Ok(Seen {
            is_true: v,
            ..Seen::default()
        })
    }
    fn visit_i64<E>(self, _: i64) -> Result<Seen, E> {
        Ok(Seen::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Seen, E> {
        Ok(Seen::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Seen, E> {
        Ok(Seen::default())
    }
    fn visit_unit<E>(self) -> Result<Seen, E> {
        Ok(Seen::default())
    }
    fn visit_str<E>(self, v: &str) -> Result<Seen, E> {
        Ok(Seen {
            string: self.keep.then(|| v.to_string()),
            ..Seen::default()
        })
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
        let skip = Checked { keep: false };
        while seq.next_element_seed(skip)?.is_some() {}
        Ok(Seen::default())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        let skip = Checked { keep: false };
        while map.next_key_seed(skip)?.is_some() {
            map.next_value_seed(skip)?;
        }
        Ok(Seen::default())
    }
}

/// The model a request asks for: the body's `model`, or Gemini's path.
pub fn model_of<'a>(route: &'a Route, head: &'a RequestHead) -> Option<&'a str> {
    head.model.as_deref().or(route.path_model.as_deref())
}

/// Whether the answer to this request streams (SSE).
pub fn streams(route: &Route, head: &RequestHead) -> bool {
    route.endpoint == "streamGenerateContent" || head.stream
}

/// What a finished answer says about itself: token usage, the tools the model asked for, why it
/// stopped. Gathered from a JSON answer or from each event of a stream.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    /// Input tokens, as the provider counts them.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// The tool names the model called, in order.
    pub tool_calls: Vec<String>,
    /// Why the model stopped (`end_turn`, `tool_use`, `stop`, `tool_calls`, `STOP`…).
    pub stop: Option<String>,
}

impl Summary {
    /// Takes in one JSON answer or one stream event's data.
    pub fn add(&mut self, provider: Provider, v: &Value) {
        match provider {
            Provider::Anthropic => self.add_anthropic(v),
            Provider::OpenAiChat => self.add_chat(v),
            Provider::OpenAiResponses => self.add_responses(v),
            Provider::Gemini => self.add_gemini(v),
            Provider::Other => {}
        }
    }

    fn usage(&mut self, u: &Value, input: &str, output: &str) {
        if let Some(n) = u.get(input).and_then(Value::as_u64) {
            self.input_tokens = Some(n);
        }
        if let Some(n) = u.get(output).and_then(Value::as_u64) {
            self.output_tokens = Some(n);
        }
    }

    fn add_anthropic(&mut self, v: &Value) {
        // A whole message, or `message_start` (which holds one), or `message_delta`.
        let msg = v.get("message").unwrap_or(v);
        if let Some(u) = msg.get("usage").or_else(|| v.get("usage")) {
            self.usage(u, "input_tokens", "output_tokens");
        }
        if let Some(n) = v.get("input_tokens").and_then(Value::as_u64) {
            self.input_tokens = Some(n); // count_tokens
        }
        let stop = v
            .get("delta")
            .and_then(|d| d.get("stop_reason"))
            .or_else(|| msg.get("stop_reason"));
        if let Some(s) = stop.and_then(Value::as_str) {
            self.stop = Some(s.to_string());
        }
        let blocks = msg
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        let started = v.get("content_block").into_iter();
        for b in blocks.chain(started) {
            if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                if let Some(name) = b.get("name").and_then(Value::as_str) {
                    self.tool_calls.push(name.to_string());
                }
            }
        }
    }

    fn add_chat(&mut self, v: &Value) {
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage(u, "prompt_tokens", "completion_tokens");
        }
        for choice in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let part = choice.get("message").or_else(|| choice.get("delta"));
            let calls = part
                .and_then(|p| p.get("tool_calls"))
                .and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                    self.tool_calls.push(name.to_string());
                }
            }
            if let Some(s) = choice.get("finish_reason").and_then(Value::as_str) {
                self.stop = Some(s.to_string());
            }
        }
    }

    fn add_responses(&mut self, v: &Value) {
        // A whole response, or `response.completed` (which holds one); function calls are
        // counted once, from the finished response or from `response.output_item.done`.
        let resp = v.get("response").unwrap_or(v);
        if let Some(u) = resp.get("usage").filter(|u| u.is_object()) {
            self.usage(u, "input_tokens", "output_tokens");
        }
        if let Some(s) = resp.get("status").and_then(Value::as_str) {
            if resp.get("output").is_some() {
                self.stop = Some(s.to_string());
            }
        }
        let is_event = v.get("type").and_then(Value::as_str).map(str::to_string);
        let items: Vec<&Value> = match is_event.as_deref() {
            Some("response.output_item.done") => v.get("item").into_iter().collect(),
            Some(t) if t.starts_with("response.") => Vec::new(),
            _ => resp
                .get("output")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default(),
        };
        for item in items {
            if item.get("type").and_then(Value::as_str) == Some("function_call") {
                let name = item.get("name").and_then(Value::as_str).unwrap_or("");
                let name = match item.get("namespace").and_then(Value::as_str) {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name.to_string(),
                };
                self.tool_calls.push(name);
            }
        }
    }

    fn add_gemini(&mut self, v: &Value) {
        // Code Assist (Gemini CLI signed in with Google) wraps each answer as
        // `{"response": {…}, "traceId": …}`; the Gemini API's own answers have no `response`.
        let v = v.get("response").filter(|r| r.is_object()).unwrap_or(v);
        if let Some(u) = v.get("usageMetadata") {
            self.usage(u, "promptTokenCount", "candidatesTokenCount");
        }
        for cand in v
            .get("candidates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let parts = cand.pointer("/content/parts").and_then(Value::as_array);
            for part in parts.into_iter().flatten() {
                if let Some(name) = part.pointer("/functionCall/name").and_then(Value::as_str) {
                    self.tool_calls.push(name.to_string());
                }
            }
            if let Some(s) = cand.get("finishReason").and_then(Value::as_str) {
                self.stop = Some(s.to_string());
            }
        }
    }

    /// The summary as tape facts (absent fields left out).
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        if let Some(n) = self.input_tokens {
            m.insert("input_tokens".into(), json!(n));
        }
        if let Some(n) = self.output_tokens {
            m.insert("output_tokens".into(), json!(n));
        }
        if !self.tool_calls.is_empty() {
            m.insert("tool_calls".into(), json!(self.tool_calls));
        }
        if let Some(s) = &self.stop {
            m.insert("stop".into(), json!(s));
        }
        Value::Object(m)
    }
}

/// An error answer in the provider's own format (what its SDKs parse), with `status`.
pub fn error_body(provider: Provider, status: u16, message: &str) -> Value {
    match provider {
        Provider::Anthropic => json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }),
        Provider::Gemini => json!({
            "error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"},
        }),
        Provider::OpenAiChat | Provider::OpenAiResponses | Provider::Other => json!({
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": null,
                "code": "mcptape_no_recorded_call",
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the proxy read before: the whole body parsed into a `Value`.
    fn by_value(body: &[u8]) -> RequestHead {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        RequestHead {
            model: v.get("model").and_then(Value::as_str).map(str::to_string),
            stream: v.get("stream").and_then(Value::as_bool) == Some(true),
        }
    }

    #[test]
    fn a_requests_head_is_what_a_parse_into_a_value_reads() {
        let big = format!(
            r#"{{"model":"claude-sonnet-4-5","max_tokens":32000,"messages":[{}],"tools":[],"stream":true}}"#,
            vec![r#"{"role":"user","content":"hi \u00e9 \"quoted\" {\"model\":\"no\"}"}"#; 200]
                .join(",")
        );
        let cases: &[&[u8]] = &[
            br#"{"model":"claude-3","stream":true}"#,
            br#"{"stream":false,"model":"gpt-4o"}"#,
            br#"{ "model" : "m" , "stream" : true }"#,
            br#"{"model":"a\u00e9\n","stream":"true"}"#,
            br#"{"model":null,"stream":null}"#,
            br#"{"model":7,"stream":1}"#,
            br#"{"model":["x"],"stream":{"a":true}}"#,
            br#"{"messages":[{"model":"nested","stream":true}]}"#,
            br#"{"model":"first","model":"last","stream":false,"stream":true}"#,
            br#"{"model":"m","stream":true"#,
            br#"[{"model":"m"}]"#,
            b"not json",
            b"",
            br#"{}"#,
            br#"{"model":"m","extra":2.50,"stream":true} "#,
            big.as_bytes(),
            // Not JSON to a `Value` in a part the head does not read (the http_request fuzz
            // target: a key that is not UTF-8), a lone surrogate, a number out of range, and
            // an array, whose items a derived probe takes for its fields in order.
            b"{\"stream\":true,\"\":[{\"\x97\":\"\"}]}",
            br#"{"model":"m","stream":true,"x":"\ud800"}"#,
            br#"{"model":"m","stream":true,"x":1e400}"#,
            br#"["m",true]"#,
        ];
        let differ: Vec<_> = cases
            .iter()
            .filter(|body| RequestHead::of(body) != by_value(body))
            .map(|body| String::from_utf8_lossy(body))
            .collect();
        assert!(
            differ.is_empty(),
            "read otherwise than a Value: {differ:#?}"
        );
        assert_eq!(
            RequestHead::of(big.as_bytes()),
            RequestHead {
                model: Some("claude-sonnet-4-5".into()),
                stream: true
            }
        );
    }

    #[test]
    fn routes_keep_a_prefix_and_ignore_the_query() {
        let r = route("/proxy/anthropic/v1/messages?beta=true");
        assert_eq!(
            (r.provider, r.endpoint.as_str()),
            (Provider::Anthropic, "messages")
        );
        let r = route("/v1/messages/count_tokens?beta=true");
        assert_eq!(r.endpoint, "messages/count_tokens");
        assert_eq!(
            route("/api/v1/chat/completions").provider,
            Provider::OpenAiChat
        );
        assert_eq!(route("/v1/responses").provider, Provider::OpenAiResponses);
        let r = route("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
        assert_eq!(r.provider, Provider::Gemini);
        assert_eq!(r.endpoint, "streamGenerateContent");
        assert_eq!(r.path_model.as_deref(), Some("gemini-2.5-flash"));
        assert!(streams(&r, &RequestHead::of(b"{}")));
        assert_eq!(
            model_of(&r, &RequestHead::default()),
            Some("gemini-2.5-flash")
        );
        assert_eq!(route("/v1/models").provider, Provider::Other);
        // Code Assist (`${CODE_ASSIST_ENDPOINT}/v1internal:M`): the model is in the body.
        let r = route("/v1internal:streamGenerateContent?alt=sse");
        assert_eq!(
            (r.provider, r.endpoint.as_str(), r.path_model.as_deref()),
            (Provider::Gemini, "streamGenerateContent", None)
        );
        assert_eq!(
            model_of(
                &r,
                &RequestHead::of(br#"{"model":"gemini-2.5-flash","request":{}}"#)
            ),
            Some("gemini-2.5-flash")
        );
        let r = route("/v1internal:loadCodeAssist");
        assert_eq!(
            (r.provider, r.endpoint.as_str()),
            (Provider::Other, "/v1internal:loadCodeAssist")
        );
        assert!(is_code_assist_setup(&r.endpoint));
        assert!(!is_code_assist_setup("/v1internal:streamGenerateContent"));
        assert!(!is_code_assist_setup("/v1/models"));
        // Anthropic on Vertex AI, as Claude Code 2.1 asks it.
        let vertex = "/v1/projects/p-1/locations/us-east5/publishers/anthropic/models";
        let r = route(&format!(
            "{vertex}/claude-sonnet-4-5@20250929:streamRawPredict"
        ));
        assert_eq!(
            (r.provider, r.endpoint.as_str()),
            (Provider::Anthropic, "messages")
        );
        assert_eq!(r.path_model.as_deref(), Some("claude-sonnet-4-5@20250929"));
        let r = route(&format!("{vertex}/claude-haiku-4-5@20251001:rawPredict"));
        assert_eq!(r.endpoint, "messages");
        let r = route(&format!("{vertex}/count-tokens:rawPredict"));
        assert_eq!(
            (r.endpoint.as_str(), r.path_model),
            ("messages/count_tokens", None)
        );
        assert_eq!(
            route("/v1/projects/p/locations/l/publishers/google/models/g:rawPredict").provider,
            Provider::Other
        );
    }

    #[test]
    fn summaries_read_each_providers_words() {
        let mut s = Summary::default();
        s.add(
            Provider::Anthropic,
            &json!({"type":"message_start","message":{"usage":{"input_tokens":12,"output_tokens":1}}}),
        );
        s.add(
            Provider::Anthropic,
            &json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"mcp__s__echo","input":{}}}),
        );
        s.add(
            Provider::Anthropic,
            &json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}),
        );
        assert_eq!(s.input_tokens, Some(12));
        assert_eq!(s.output_tokens, Some(7));
        assert_eq!(s.tool_calls, ["mcp__s__echo"]);
        assert_eq!(s.stop.as_deref(), Some("tool_use"));

        let mut s = Summary::default();
        s.add(
            Provider::OpenAiResponses,
            &json!({"type":"response.output_item.done","item":{"type":"function_call","namespace":"mcp__s","name":"echo"}}),
        );
        s.add(
            Provider::OpenAiResponses,
            &json!({"type":"response.completed","response":{"status":"completed","output":[{"type":"function_call","name":"echo"}],"usage":{"input_tokens":3,"output_tokens":4}}}),
        );
        assert_eq!(s.tool_calls, ["mcp__s/echo"], "counted once, from the item");
        assert_eq!((s.input_tokens, s.output_tokens), (Some(3), Some(4)));

        // Code Assist's stream: each Gemini answer wrapped in `response`.
        let mut s = Summary::default();
        s.add(
            Provider::Gemini,
            &json!({"response":{"candidates":[{"content":{"parts":[{"functionCall":{"name":"mcp_S_echo","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":12}},"traceId":"t"}),
        );
        assert_eq!(s.tool_calls, ["mcp_S_echo"]);
        assert_eq!((s.input_tokens, s.output_tokens), (Some(100), Some(12)));
        assert_eq!(s.stop.as_deref(), Some("STOP"));
    }
}
