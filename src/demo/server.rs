//! The bundled demo MCP server: a tiny "weather desk" over stdio.
//!
//! It speaks newline-delimited JSON-RPC 2.0 with the initialize handshake (protocol versions
//! 2024-11-05 … 2025-11-25) and is hand-written on `serde_json` so the `mcptape` binary can run it
//! as a hidden subcommand without any external runtime.
//!
//! Everything it writes is a pure function of what it reads (no clock, no randomness, a fixed
//! key order), so two recordings of the same session are byte-identical. The [`Variant::Drifted`]
//! twin carries two deliberate regressions for `mcptape check` to catch, while its `tools/list`
//! answer stays byte-identical to the healthy one: the drift is only visible in behaviour.

use std::io::{BufRead, Write};

use serde_json::{json, Map, Value};

/// Which twin of the demo server to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The reference behaviour.
    Healthy,
    /// A regressed twin: `convert_temperature` computes `1.8 * c + 31` (one degree low) and
    /// `lookup_city` renames `coordinates` to `coords` in its structured result.
    Drifted,
}

/// Protocol versions using the initialize handshake that this server can speak.
pub(crate) const SUPPORTED_PROTOCOL_VERSIONS: [&str; 4] =
    ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The version offered when the client asks for one we do not know.
pub(crate) const FALLBACK_PROTOCOL_VERSION: &str = "2025-06-18";
/// `serverInfo.name` in the initialize answer.
pub(crate) const SERVER_NAME: &str = "mcptape-demo";
/// `serverInfo.version` in the initialize answer.
pub(crate) const SERVER_VERSION: &str = "1.0.0";

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// MCP's code for `resources/read` of an unknown URI.
const RESOURCE_NOT_FOUND: i64 = -32002;

/// Logging levels of `logging/setLevel`, least severe first (RFC 5424 order).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Serves until EOF on input. Unknown methods get -32601; bad JSON gets -32700 with id null.
///
/// Every message is written as one line and flushed at once, so a peer reading line by line never
/// waits on a buffered answer. Blank lines are skipped; notifications and responses from the
/// client are never answered.
pub fn serve<R: BufRead, W: Write>(
    variant: Variant,
    input: R,
    mut output: W,
) -> std::io::Result<()> {
    let mut server = Server {
        variant,
        min_log_level: 0,
    };
    for line in input.lines() {
        let line = line?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        for message in server.handle_line(line) {
            serde_json::to_writer(&mut output, &message)?;
            output.write_all(b"\n")?;
            output.flush()?;
        }
    }
    Ok(())
}

/// A JSON-RPC error on its way to becoming an error response.
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(INVALID_PARAMS, message)
    }
}

type RpcResult = Result<Value, RpcError>;

struct Server {
    variant: Variant,
    /// Index into [`LOG_LEVELS`]; log notifications below it are not sent.
    min_log_level: usize,
}

impl Server {
    /// Handles one input line and returns the messages to write, in order.
    fn handle_line(&mut self, line: &str) -> Vec<Value> {
        let message: Value = match serde_json::from_str(line) {
            Ok(message) => message,
            Err(err) => {
                return vec![error_response(
                    Value::Null,
                    RpcError::new(PARSE_ERROR, format!("Parse error: {err}")),
                )]
            }
        };
        // Batches were removed in 2025-06-18; answer like rmcp does rather than dropping silently.
        let Value::Object(message) = message else {
            return vec![error_response(
                Value::Null,
                RpcError::new(INVALID_REQUEST, "Invalid Request: expected a JSON object"),
            )];
        };
        let id = message.get("id").cloned();
        let method = message.get("method").and_then(Value::as_str);
        let Some(method) = method else {
            if message.contains_key("result") || message.contains_key("error") {
                // A response to a server request; this server sends none, so there is nothing
                // to match it with.
                return Vec::new();
            }
            return vec![error_response(
                id.unwrap_or(Value::Null),
                RpcError::new(INVALID_REQUEST, "Invalid Request: missing method"),
            )];
        };
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return vec![error_response(
                id.unwrap_or(Value::Null),
                RpcError::new(INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\""),
            )];
        }
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id else {
            // Notifications (`notifications/initialized`, `notifications/cancelled`, …) need no
            // answer, and unknown ones must be ignored.
            return Vec::new();
        };
        if !(id.is_string() || id.is_i64() || id.is_u64()) {
            return vec![error_response(
                Value::Null,
                RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: id must be a string or integer",
                ),
            )];
        }
        if !(params.is_null() || params.is_object()) {
            return vec![error_response(
                id,
                RpcError::invalid_params("params must be an object"),
            )];
        }

        let mut out = Vec::new();
        let result = self.dispatch(method, &params, &mut out);
        out.push(match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(err) => error_response(id, err),
        });
        out
    }

    /// Runs one request; notifications sent while it runs are pushed onto `out`.
    fn dispatch(&mut self, method: &str, params: &Value, out: &mut Vec<Value>) -> RpcResult {
        match method {
            "initialize" => Ok(initialize(params)),
            "ping" => Ok(json!({})),
            "logging/setLevel" => self.set_level(params),
            "tools/list" => Ok(json!({"tools": tool_definitions()})),
            "tools/call" => self.call_tool(params, out),
            "resources/list" => Ok(json!({"resources": resource_definitions()})),
            "resources/templates/list" => Ok(json!({"resourceTemplates": []})),
            "resources/read" => read_resource(params),
            "prompts/list" => Ok(json!({"prompts": prompt_definitions()})),
            "prompts/get" => get_prompt(params),
            _ => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            )),
        }
    }

    fn set_level(&mut self, params: &Value) -> RpcResult {
        let level = params.get("level").and_then(Value::as_str).unwrap_or("");
        let index = LOG_LEVELS
            .iter()
            .position(|l| *l == level)
            .ok_or_else(|| RpcError::invalid_params(format!("unknown log level: {level:?}")))?;
        self.min_log_level = index;
        Ok(json!({}))
    }

    fn call_tool(&mut self, params: &Value, out: &mut Vec<Value>) -> RpcResult {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("tools/call needs a string \"name\""))?;
        let empty = Map::new();
        let args = match params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(args)) => args,
            Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
        };
        // Unknown tools are a protocol error; bad arguments and failures are tool results with
        // isError so that a model can read them and correct itself (the 2025-11-25 convention).
        let outcome = match name {
            "add" => add(args),
            "convert_temperature" => convert_temperature(self.variant, args),
            "lookup_city" => lookup_city(self.variant, args),
            "forecast" => {
                let token = params.get("_meta").and_then(|m| m.get("progressToken"));
                self.forecast(args, token, out)
            }
            _ => return Err(RpcError::invalid_params(format!("Unknown tool: {name}"))),
        };
        Ok(outcome.unwrap_or_else(
            |message| json!({"content": [text_content(&message)], "isError": true}),
        ))
    }

    fn forecast(
        &mut self,
        args: &Map<String, Value>,
        progress_token: Option<&Value>,
        out: &mut Vec<Value>,
    ) -> Result<Value, String> {
        let name = string_arg(args, "city")?;
        let days = args
            .get("days")
            .and_then(Value::as_u64)
            .filter(|d| (1..=7).contains(d))
            .ok_or("invalid arguments: \"days\" must be an integer from 1 to 7")?;
        let city = find_city(name).ok_or_else(|| format!("unknown city: {name}"))?;

        if let Some(token) = progress_token {
            for day in 1..=days {
                out.push(notification(
                    "notifications/progress",
                    json!({
                        "progressToken": token,
                        "progress": day,
                        "total": days,
                        "message": format!("day {day} of {days}"),
                    }),
                ));
            }
        }
        self.log(
            out,
            "info",
            json!(format!("forecast for {}: {days} days", city.name)),
        );

        let lines: Vec<String> = (1..=days)
            .map(|day| {
                // Deterministic "weather": a fixed cycle shifted per city.
                let slot = (day as usize + city.name.len()) % CONDITIONS.len();
                let swing = (day % 3) as i64 - 1;
                format!(
                    "day {day}: {}, high {} °C, low {} °C",
                    CONDITIONS[slot],
                    city.high_c + swing,
                    city.low_c + swing
                )
            })
            .collect();
        let text = format!("{} forecast\n{}", city.name, lines.join("\n"));
        Ok(json!({"content": [text_content(&text)], "isError": false}))
    }

    /// Queues a `notifications/message` unless `logging/setLevel` filtered its level out.
    fn log(&self, out: &mut Vec<Value>, level: &str, data: Value) {
        let index = LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(0);
        if index >= self.min_log_level {
            out.push(notification(
                "notifications/message",
                json!({"level": level, "logger": "weather-desk", "data": data}),
            ));
        }
    }
}

fn error_response(id: Value, err: RpcError) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": err.code, "message": err.message},
    })
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

fn text_content(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn initialize(params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = requested
        .filter(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(v))
        .unwrap_or(FALLBACK_PROTOCOL_VERSION);
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": false},
            "resources": {"subscribe": false, "listChanged": false},
            "prompts": {"listChanged": false},
            "logging": {},
        },
        "serverInfo": {"name": SERVER_NAME, "version": SERVER_VERSION},
        "instructions": "A tiny weather desk: arithmetic, temperature conversion, city facts \
                         and short forecasts for a handful of cities.",
    })
}

fn tool_definitions() -> Value {
    let read_only = json!({"readOnlyHint": true, "openWorldHint": false});
    json!([
        {
            "name": "add",
            "title": "Add two numbers",
            "description": "Adds two numbers and returns the sum as text.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First addend"},
                    "b": {"type": "number", "description": "Second addend"},
                },
                "required": ["a", "b"],
            },
            "annotations": read_only,
        },
        {
            "name": "convert_temperature",
            "title": "Celsius to Fahrenheit",
            "description": "Converts a temperature from degrees Celsius to degrees Fahrenheit.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "celsius": {"type": "number", "description": "Temperature in °C"},
                },
                "required": ["celsius"],
            },
            "annotations": read_only,
        },
        {
            "name": "lookup_city",
            "title": "Look up a city",
            "description": "Returns the country, population and coordinates of a known city.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "City name, e.g. Lisbon"},
                },
                "required": ["name"],
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "country": {"type": "string"},
                    "population": {"type": "integer"},
                    "coordinates": {
                        "type": "object",
                        "properties": {
                            "lat": {"type": "number"},
                            "lon": {"type": "number"},
                        },
                        "required": ["lat", "lon"],
                    },
                },
                "required": ["name", "country", "population", "coordinates"],
            },
            "annotations": read_only,
        },
        {
            "name": "forecast",
            "title": "Weather forecast",
            "description": "A short daily forecast for a known city; reports progress per day \
                            when the request carries a progress token.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Lisbon"},
                    "days": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 7,
                        "description": "Number of days to forecast",
                    },
                },
                "required": ["city", "days"],
            },
            "annotations": read_only,
        },
    ])
}

fn number_arg(args: &Map<String, Value>, key: &str) -> Result<f64, String> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("invalid arguments: {key:?} must be a number"))
}

fn string_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("invalid arguments: {key:?} must be a string"))
}

/// Formats whole numbers without a fractional part (`5`, not `5.0`).
fn format_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn add(args: &Map<String, Value>) -> Result<Value, String> {
    let sum = number_arg(args, "a")? + number_arg(args, "b")?;
    Ok(json!({"content": [text_content(&format_number(sum))], "isError": false}))
}

fn convert_temperature(variant: Variant, args: &Map<String, Value>) -> Result<Value, String> {
    let celsius = number_arg(args, "celsius")?;
    if celsius < -273.15 {
        return Err(format!(
            "{} °C is below absolute zero",
            format_number(celsius)
        ));
    }
    let fahrenheit = match variant {
        Variant::Healthy => celsius * 1.8 + 32.0,
        // The regression: an off-by-one offset.
        Variant::Drifted => celsius * 1.8 + 31.0,
    };
    let text = format!("{} °C is {fahrenheit:.1} °F", format_number(celsius));
    Ok(json!({"content": [text_content(&text)], "isError": false}))
}

fn lookup_city(variant: Variant, args: &Map<String, Value>) -> Result<Value, String> {
    let name = string_arg(args, "name")?;
    let city = find_city(name).ok_or_else(|| format!("unknown city: {name}"))?;
    // The regression renames a field, breaking the advertised outputSchema.
    let coordinates_key = match variant {
        Variant::Healthy => "coordinates",
        Variant::Drifted => "coords",
    };
    let mut structured = json!({
        "name": city.name,
        "country": city.country,
        "population": city.population,
    });
    structured[coordinates_key] = json!({"lat": city.lat, "lon": city.lon});
    let text = structured.to_string();
    Ok(json!({
        "content": [text_content(&text)],
        "structuredContent": structured,
        "isError": false,
    }))
}

struct City {
    name: &'static str,
    country: &'static str,
    population: u64,
    lat: f64,
    lon: f64,
    /// Typical daily high and low, the base of the made-up forecast.
    high_c: i64,
    low_c: i64,
}

const CITIES: [City; 4] = [
    City {
        name: "Lisbon",
        country: "Portugal",
        population: 544_851,
        lat: 38.7223,
        lon: -9.1393,
        high_c: 22,
        low_c: 14,
    },
    City {
        name: "Oslo",
        country: "Norway",
        population: 709_037,
        lat: 59.9139,
        lon: 10.7522,
        high_c: 12,
        low_c: 4,
    },
    City {
        name: "Nairobi",
        country: "Kenya",
        population: 4_397_073,
        lat: -1.2921,
        lon: 36.8219,
        high_c: 25,
        low_c: 13,
    },
    City {
        name: "Montreal",
        country: "Canada",
        population: 1_762_949,
        lat: 45.5019,
        lon: -73.5674,
        high_c: 15,
        low_c: 5,
    },
];

const CONDITIONS: [&str; 4] = ["sunny", "partly cloudy", "light rain", "windy"];

fn find_city(name: &str) -> Option<&'static City> {
    CITIES
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(name.trim()))
}

fn resource_definitions() -> Value {
    json!([
        {
            "uri": "weather://stations",
            "name": "stations",
            "title": "Weather stations",
            "description": "The cities this desk knows, as JSON.",
            "mimeType": "application/json",
        },
        {
            "uri": "weather://readme",
            "name": "readme",
            "title": "About the weather desk",
            "description": "What this demo server is for.",
            "mimeType": "text/markdown",
        },
    ])
}

fn read_resource(params: &Value) -> RpcResult {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("resources/read needs a string \"uri\""))?;
    let (mime, text) = match uri {
        "weather://stations" => {
            let names: Vec<&str> = CITIES.iter().map(|c| c.name).collect();
            ("application/json", json!({"stations": names}).to_string())
        }
        "weather://readme" => (
            "text/markdown",
            "# Weather desk\n\nThe demo server bundled with mcptape. Its answers are \
             deterministic, so recordings of the same session are identical.\n"
                .to_string(),
        ),
        _ => {
            return Err(RpcError::new(
                RESOURCE_NOT_FOUND,
                format!("Resource not found: {uri}"),
            ))
        }
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]}))
}

fn prompt_definitions() -> Value {
    json!([
        {
            "name": "daily_briefing",
            "title": "Daily weather briefing",
            "description": "Asks for a short weather briefing for a city.",
            "arguments": [
                {"name": "city", "description": "City to brief on", "required": true},
            ],
        },
    ])
}

fn get_prompt(params: &Value) -> RpcResult {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("prompts/get needs a string \"name\""))?;
    if name != "daily_briefing" {
        return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
    }
    let city = params
        .get("arguments")
        .and_then(|a| a.get("city"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("missing required argument: city"))?;
    let text = format!(
        "Give a three-line weather briefing for {city}: today's conditions, the outlook, \
         and one practical tip. Use the forecast tool."
    );
    Ok(json!({
        "description": format!("Daily weather briefing for {city}"),
        "messages": [{"role": "user", "content": text_content(&text)}],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` to a server and returns its raw output lines.
    fn raw(variant: Variant, input: &str) -> Vec<String> {
        let mut out = Vec::new();
        serve(variant, input.as_bytes(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'));
        text.lines().map(str::to_owned).collect()
    }

    fn run(variant: Variant, input: &str) -> Vec<Value> {
        raw(variant, input)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn one(variant: Variant, request: Value) -> Value {
        let mut out = run(variant, &format!("{request}\n"));
        assert_eq!(out.len(), 1, "{out:?}");
        out.remove(0)
    }

    fn call(variant: Variant, tool: &str, args: Value) -> Value {
        one(
            variant,
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}}),
        )
    }

    fn text_of(response: &Value) -> &str {
        response["result"]["content"][0]["text"].as_str().unwrap()
    }

    fn init(version: Value) -> Value {
        one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}),
        )
    }

    #[test]
    fn initialize_negotiates_version() {
        for v in SUPPORTED_PROTOCOL_VERSIONS {
            assert_eq!(init(json!(v))["result"]["protocolVersion"], v);
        }
        for v in [json!("2026-07-28"), json!("1999-01-01"), json!(3)] {
            assert_eq!(init(v)["result"]["protocolVersion"], "2025-06-18");
        }
        let r = init(json!("2025-03-26"));
        assert_eq!(r["id"], 1);
        assert_eq!(
            r["result"]["serverInfo"],
            json!({"name": "mcptape-demo", "version": "1.0.0"})
        );
        let caps = r["result"]["capabilities"].as_object().unwrap();
        for key in ["tools", "resources", "prompts", "logging"] {
            assert!(caps.contains_key(key), "{key}");
        }
    }

    #[test]
    fn notifications_and_blank_lines_get_no_answer() {
        let input = "\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n\r\n\
                     {\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\",\"params\":{}}\n\
                     {\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n";
        assert!(raw(Variant::Healthy, input).is_empty());
    }

    #[test]
    fn ping_and_string_ids() {
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": "abc", "method": "ping"}),
        );
        assert_eq!(r, json!({"jsonrpc": "2.0", "id": "abc", "result": {}}));
    }

    #[test]
    fn protocol_errors() {
        let out = run(
            Variant::Healthy,
            "{not json\n\
             {\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"nope/nothing\"}\n\
             [{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}]\n\
             {\"jsonrpc\":\"2.0\",\"id\":6}\n\
             {\"id\":8,\"method\":\"ping\"}\n\
             {\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":[1]}\n",
        );
        let codes: Vec<(Value, i64)> = out
            .iter()
            .map(|m| (m["id"].clone(), m["error"]["code"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            codes,
            vec![
                (Value::Null, -32700),
                (json!(4), -32601),
                (Value::Null, -32600),
                (json!(6), -32600),
                (json!(8), -32600),
                (json!(9), -32602),
            ]
        );
        assert!(out.iter().all(|m| m["jsonrpc"] == "2.0"));
    }

    #[test]
    fn tools_list_is_byte_identical_across_variants() {
        let input = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n";
        let healthy = raw(Variant::Healthy, input);
        assert_eq!(healthy, raw(Variant::Drifted, input));
        let list: Value = serde_json::from_str(&healthy[0]).unwrap();
        let names: Vec<&str> = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                assert_eq!(t["inputSchema"]["type"], "object");
                t["name"].as_str().unwrap()
            })
            .collect();
        assert_eq!(
            names,
            ["add", "convert_temperature", "lookup_city", "forecast"]
        );
    }

    #[test]
    fn add_tool() {
        let r = call(Variant::Healthy, "add", json!({"a": 2, "b": 3}));
        assert_eq!(text_of(&r), "5");
        assert_eq!(r["result"]["isError"], false);
        let r = call(Variant::Drifted, "add", json!({"a": 1.5, "b": -0.25}));
        assert_eq!(text_of(&r), "1.25");
    }

    #[test]
    fn convert_temperature_differs_by_variant() {
        let args = json!({"celsius": 21.5});
        let healthy = call(Variant::Healthy, "convert_temperature", args.clone());
        let drifted = call(Variant::Drifted, "convert_temperature", args);
        assert_eq!(text_of(&healthy), "21.5 °C is 70.7 °F");
        assert_eq!(text_of(&drifted), "21.5 °C is 69.7 °F");
        let r = call(
            Variant::Healthy,
            "convert_temperature",
            json!({"celsius": -300}),
        );
        assert_eq!(r["result"]["isError"], true);
    }

    #[test]
    fn lookup_city_structure_differs_by_variant() {
        let healthy = call(Variant::Healthy, "lookup_city", json!({"name": "Lisbon"}));
        let s = &healthy["result"]["structuredContent"];
        assert_eq!(
            *s,
            json!({"name": "Lisbon", "country": "Portugal", "population": 544851,
                   "coordinates": {"lat": 38.7223, "lon": -9.1393}})
        );
        let text: Value = serde_json::from_str(text_of(&healthy)).unwrap();
        assert_eq!(&text, s);

        let drifted = call(Variant::Drifted, "lookup_city", json!({"name": "lisbon"}));
        let d = &drifted["result"]["structuredContent"];
        assert!(d.get("coordinates").is_none());
        assert_eq!(d["coords"], s["coordinates"]);
        assert_eq!(d["population"], s["population"]);
    }

    #[test]
    fn tool_errors() {
        let r = call(Variant::Healthy, "lookup_city", json!({"name": "Atlantis"}));
        assert_eq!(r["result"]["isError"], true);
        assert_eq!(text_of(&r), "unknown city: Atlantis");
        let r = call(Variant::Healthy, "add", json!({"a": "2", "b": 3}));
        assert_eq!(r["result"]["isError"], true);
        assert!(text_of(&r).contains("\"a\""));
        let r = call(
            Variant::Healthy,
            "forecast",
            json!({"city": "Oslo", "days": 0}),
        );
        assert_eq!(r["result"]["isError"], true);
        let r = call(Variant::Healthy, "teleport", json!({}));
        assert_eq!(r["error"]["code"], -32602);
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}),
        );
        assert_eq!(r["error"]["code"], -32602);
    }

    #[test]
    fn forecast_reports_progress_only_with_a_token() {
        let with_token = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "forecast", "arguments": {"city": "Lisbon", "days": 3},
            "_meta": {"progressToken": "tok"}}});
        let out = run(Variant::Healthy, &format!("{with_token}\n"));
        assert_eq!(out.len(), 5);
        for (i, m) in out[..3].iter().enumerate() {
            assert_eq!(m["method"], "notifications/progress");
            assert!(m.get("id").is_none());
            assert_eq!(m["params"]["progressToken"], "tok");
            assert_eq!(m["params"]["progress"], i as u64 + 1);
            assert_eq!(m["params"]["total"], 3);
        }
        assert_eq!(out[3]["method"], "notifications/message");
        assert_eq!(out[3]["params"]["level"], "info");
        assert_eq!(out[4]["id"], 5);
        let text = text_of(&out[4]);
        assert!(text.starts_with("Lisbon forecast\nday 1: "), "{text}");
        assert_eq!(text.lines().count(), 4);

        // Without a token, only the log message precedes the answer.
        let out = run(
            Variant::Healthy,
            &format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
                    "name": "forecast", "arguments": {"city": "Oslo", "days": 2}}})
            ),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["method"], "notifications/message");

        // logging/setLevel above info silences it.
        let set = json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel",
                         "params": {"level": "warning"}});
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "forecast", "arguments": {"city": "Oslo", "days": 2}}});
        let out = run(Variant::Healthy, &format!("{set}\n{call}\n"));
        assert_eq!(out.len(), 2);
        assert_eq!(out[1]["id"], 2);
    }

    #[test]
    fn resources_and_prompts() {
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
        );
        assert_eq!(r["result"]["resources"].as_array().unwrap().len(), 2);
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                   "params": {"uri": "weather://stations"}}),
        );
        assert_eq!(r["result"]["contents"][0]["mimeType"], "application/json");
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                   "params": {"uri": "weather://nowhere"}}),
        );
        assert_eq!(r["error"]["code"], -32002);
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/list"}),
        );
        assert_eq!(r["result"]["prompts"][0]["name"], "daily_briefing");
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get",
                   "params": {"name": "daily_briefing", "arguments": {"city": "Oslo"}}}),
        );
        assert_eq!(r["result"]["messages"][0]["role"], "user");
        let r = one(
            Variant::Healthy,
            json!({"jsonrpc": "2.0", "id": 6, "method": "prompts/get",
                   "params": {"name": "daily_briefing"}}),
        );
        assert_eq!(r["error"]["code"], -32602);
    }

    #[test]
    fn output_is_deterministic() {
        let input = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "forecast", "arguments": {"city": "Nairobi", "days": 7},
                "_meta": {"progressToken": 1}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                   "params": {"uri": "weather://readme"}}),
        ]
        .iter()
        .map(|m| format!("{m}\n"))
        .collect::<String>();
        let first = raw(Variant::Healthy, &input);
        assert_eq!(first.len(), 11);
        assert_eq!(first, raw(Variant::Healthy, &input));
    }
}
