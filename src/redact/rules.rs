//! The default redaction rules: sensitive keys, credential shapes, and what counts as a long
//! high-entropy opaque string. Documented in docs/security.md; change both together.

/// Keys whose string values are secrets, compared lower-case with `-` and `_` removed
/// (`API_KEY`, `api-key` and `apiKey` are all `apikey`).
pub const SENSITIVE_KEYS: &[&str] = &[
    "authorization",
    "proxyauthorization",
    "apikey",
    "xapikey",
    "token",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "authtoken",
    "sessiontoken",
    "bearertoken",
    "secret",
    "clientsecret",
    "secretkey",
    "accesskey",
    "awssecretaccesskey",
    "password",
    "passwd",
    "passphrase",
    "privatekey",
    "cookie",
    "setcookie",
];

/// A key that *ends* in one of these (after squashing) is sensitive too: `db_password`,
/// `api_token`, `github_token`, `x-auth-token`, `stripe_secret_key`.
pub const SENSITIVE_SUFFIXES: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "secretkey",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
];

/// Keys never touched by the default rules: protocol fields that look like secrets but are not,
/// and whose change would break replay.
pub const PROTOCOL_KEYS: &[&str] = &[
    "progressToken",
    "maxTokens",
    "cursor",
    "nextCursor",
    "requestState",
];

/// Keys whose values are media (base64 images, audio, blobs): never taken for opaque secrets.
pub const MEDIA_KEYS: &[&str] = &["data", "blob", "image", "audio", "icon", "src"];

/// Credential shapes found anywhere inside strings: (rule name, regex).
pub const SHAPES: &[(&str, &str)] = &[
    (
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
    ),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    (
        "openai-key",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    (
        "github-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    (
        "jwt",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    ),
    (
        "stripe-key",
        r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    ),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("gitlab-token", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
];

/// Credentials inside URLs (`scheme://user:password@host`): the password goes.
pub const URL_CREDENTIALS: &str = r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]+:)([^@\s/]+)(@)";

/// `name = value` / `name: value` in prose or config text, for sensitive names.
pub const ASSIGNMENT: &str = r#"(?i)\b([a-z0-9_\-]*(?:password|passwd|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key))(["']?\s*[:=]\s*["']?)([^\s"',;]{6,})"#;

/// `Bearer x` / `Basic x` credentials: the scheme stays, the credential goes.
pub const AUTH_SCHEME: &str = r"(?i)\b(bearer|basic|token)\s+([A-Za-z0-9._~+/=\-]{8,})";

/// Secrets in URL query parameters: the name stays, the value goes.
pub const URL_PARAM: &str = r"(?i)([?&](?:token|access_token|api_key|apikey|key|secret|password|sig|signature|auth)=)([^&\s#]{6,})";

/// A whole string value is an opaque secret when it is this long…
pub const ENTROPY_MIN_LEN: usize = 24;
pub const ENTROPY_MAX_LEN: usize = 128;
/// …made of token characters, mixes upper case, lower case and digits, and has at least this
/// many bits of Shannon entropy per character. Hex (hashes, ids) tops out at 4.0 and UUIDs at
/// about 3.9, so they stay; random base64 of that length is around 4.5–5.5.
pub const ENTROPY_MIN_BITS: f64 = 4.2;
/// …with digits making up at least this share of it (random base62 is about 16 %; words and
/// identifiers such as `TheQuickBrownFox2Jumps` or `msg_01XFDUDYJgAACz…` have far fewer).
pub const ENTROPY_MIN_DIGITS: f64 = 0.08;
/// Prefixes of strings that look random but are not secrets: base64 of PNG, JPEG, GIF and WebP
/// data, and subresource-integrity hashes.
pub const NOT_SECRET_PREFIXES: &[&str] = &[
    "iVBORw0KGgo",
    "/9j/",
    "R0lGOD",
    "UklGR",
    "sha1-",
    "sha256-",
    "sha384-",
    "sha512-",
];
