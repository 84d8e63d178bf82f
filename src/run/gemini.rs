//! Gemini CLI's sign-in, as it reads it: its settings name one, or its environment (and its
//! `.env` file) gives one. `run` points Gemini CLI with `GOOGLE_GEMINI_BASE_URL`, which Gemini
//! CLI also takes for the sign-in "gateway" when its settings name none: the sign-in its
//! environment gave it is written into its settings for the run instead.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The sign-in "Sign in with Google", which asks Code Assist.
pub(super) const CODE_ASSIST_SIGN_IN: &str = "oauth-personal";

/// Code Assist's endpoint when `CODE_ASSIST_ENDPOINT` names none (Gemini CLI 0.61's
/// `code_assist/server.ts`; the API version, `v1internal`, is in the path).
pub(super) const CODE_ASSIST_DEFAULT: &str = "https://cloudcode-pa.googleapis.com";

/// The token the model player's run gives Gemini CLI signed in with Google. Its cached login
/// (`~/.gemini/oauth_creds.json`) is checked with Google before use (`oauth2.googleapis.com/
/// tokeninfo`, or a refresh), which offline fails, and it then asks for a new login (exit 41
/// without a terminal); given `GOOGLE_GENAI_USE_GCA` and `GOOGLE_CLOUD_ACCESS_TOKEN` it takes
/// that token as it is (0.61's `initOauthClient`). Nothing goes upstream in playback, so the
/// token is a placeholder; the variables the user set are kept.
pub(super) fn gemini_playback_token(env: &dyn Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if env("GOOGLE_GENAI_USE_GCA").is_none() {
        out.push(("GOOGLE_GENAI_USE_GCA".into(), "true".into()));
    }
    if env("GOOGLE_CLOUD_ACCESS_TOKEN").is_none() {
        out.push((
            "GOOGLE_CLOUD_ACCESS_TOKEN".into(),
            "mcptape-playback-no-token".into(),
        ));
    }
    out
}

/// The sign-in Gemini CLI takes from its environment when its settings name none, as it
/// decides it (0.61's `getAuthTypeFromEnv`) with `GOOGLE_GEMINI_BASE_URL` unset.
pub(super) fn gemini_env_auth_type(env: &dyn Fn(&str) -> Option<String>) -> Option<&'static str> {
    let on = |k: &str| env(k).is_some_and(|v| v == "true");
    if on("GOOGLE_GENAI_USE_GCA") {
        Some("oauth-personal")
    } else if on("GOOGLE_GENAI_USE_VERTEXAI") {
        Some("vertex-ai")
    } else if env("GEMINI_API_KEY").is_some_and(|k| !k.is_empty()) {
        Some("gemini-api-key")
    } else if on("CLOUD_SHELL") || on("GEMINI_CLI_USE_COMPUTE_ADC") {
        Some("compute-default-credentials")
    } else {
        None
    }
}

/// The sign-in Gemini CLI's settings name: the first of `files` (the project's, then the
/// user's) that names one.
pub(super) fn gemini_settings_sign_in(files: &[PathBuf]) -> Option<String> {
    let named = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    };
    files.iter().find_map(|f| {
        let v = super::config::read_json(f)?;
        // `selectedAuthType`: the key before settings had sections, still migrated.
        named(v.pointer("/security/auth/selectedType")).or_else(|| named(v.get("selectedAuthType")))
    })
}

/// Vertex AI's base URL as Gemini CLI's client makes it: the region's endpoint for a project
/// and a location other than `global`, else the global one (an API key, express mode).
pub(super) fn gemini_vertex_base(env: &dyn Fn(&str) -> Option<String>) -> String {
    match (env("GOOGLE_CLOUD_PROJECT"), env("GOOGLE_CLOUD_LOCATION")) {
        (Some(_), Some(loc)) if loc != "global" => {
            format!("https://{loc}-aiplatform.googleapis.com")
        }
        _ => "https://aiplatform.googleapis.com".to_string(),
    }
}

/// The folder Gemini CLI keeps `.gemini` in: `GEMINI_CLI_HOME`, else the home folder.
pub(super) fn gemini_home(home: Option<&Path>) -> Option<PathBuf> {
    std::env::var_os("GEMINI_CLI_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.map(Path::to_path_buf))
}

/// The variables of the `.env` file Gemini CLI loads (variables already set win over it): the
/// first of `.gemini/.env` and `.env` in the working folder and each folder above it, else
/// `~/.gemini/.env`, else `~/.env`.
pub(super) fn gemini_dotenv(cwd: &Path, home: Option<&Path>) -> Vec<(String, String)> {
    let mut candidates = Vec::new();
    for dir in cwd.ancestors() {
        candidates.push(dir.join(".gemini/.env"));
        candidates.push(dir.join(".env"));
    }
    if let Some(h) = home {
        candidates.push(h.join(".gemini/.env"));
        candidates.push(h.join(".env"));
    }
    let Some(text) = candidates
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok())
    else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            if line.starts_with('#') {
                return None;
            }
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// Gemini CLI settings `doc` with `security.auth.selectedType` set to `kind` (the rest kept; a
/// `security` or `auth` that is not an object is replaced, as Gemini CLI could not read it).
pub(super) fn gemini_auth(mut doc: Value, kind: &str) -> Value {
    if !doc.is_object() {
        doc = Value::Object(Default::default());
    }
    let mut at = &mut doc;
    for key in ["security", "auth"] {
        let map = at.as_object_mut().expect("an object");
        let entry = map
            .entry(key)
            .or_insert_with(|| Value::Object(Default::default()));
        if !entry.is_object() {
            *entry = Value::Object(Default::default());
        }
        at = entry;
    }
    at.as_object_mut()
        .expect("an object")
        .insert("selectedType".into(), Value::String(kind.into()));
    doc
}

/// Gemini CLI's system settings and system defaults, as it finds them: the settings at
/// `GEMINI_CLI_SYSTEM_SETTINGS_PATH`, else the platform's (`/etc/gemini-cli/settings.json`);
/// the defaults at `GEMINI_CLI_SYSTEM_DEFAULTS_PATH`, else `system-defaults.json` beside the
/// settings. The settings outrank the user's and the workspace's; the defaults rank under them.
pub(super) fn gemini_system_files() -> [(&'static str, PathBuf); 2] {
    let given = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let settings = given("GEMINI_CLI_SYSTEM_SETTINGS_PATH").unwrap_or_else(|| {
        PathBuf::from(if cfg!(target_os = "macos") {
            "/Library/Application Support/GeminiCli/settings.json"
        } else {
            "/etc/gemini-cli/settings.json"
        })
    });
    let defaults = given("GEMINI_CLI_SYSTEM_DEFAULTS_PATH").unwrap_or_else(|| {
        settings
            .parent()
            .unwrap_or(Path::new("/"))
            .join("system-defaults.json")
    });
    [
        ("GEMINI_CLI_SYSTEM_SETTINGS_PATH", settings),
        ("GEMINI_CLI_SYSTEM_DEFAULTS_PATH", defaults),
    ]
}

/// Whether Gemini CLI (0.61) would load a system settings or defaults file: root owns it and
/// every folder above it, and none of them is writable by group or others. It skips any
/// other with a "Security Warning".
pub(super) fn gemini_loads_system_file(file: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let safe = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    safe(&file) && file.ancestors().skip(1).all(safe)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sign-in the settings name (the project's first) and Vertex's base URL by its
    /// project and location.
    #[test]
    fn gemini_settings_sign_in_and_vertex_base() {
        let dir = tempfile::tempdir().unwrap();
        let (proj, user) = (dir.path().join("p.json"), dir.path().join("u.json"));
        let files = [proj.clone(), user.clone()];
        assert_eq!(gemini_settings_sign_in(&files), None);
        std::fs::write(
            &user,
            r#"{"security": {"auth": {"selectedType": "vertex-ai"}}}"#,
        )
        .unwrap();
        assert_eq!(
            gemini_settings_sign_in(&files).as_deref(),
            Some("vertex-ai")
        );
        std::fs::write(&proj, r#"{"selectedAuthType": "gemini-api-key"}"#).unwrap();
        assert_eq!(
            gemini_settings_sign_in(&files).as_deref(),
            Some("gemini-api-key")
        );
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            gemini_vertex_base(&env(&[])),
            "https://aiplatform.googleapis.com"
        );
        assert_eq!(
            gemini_vertex_base(&env(&[
                ("GOOGLE_CLOUD_PROJECT", "p"),
                ("GOOGLE_CLOUD_LOCATION", "europe-west4")
            ])),
            "https://europe-west4-aiplatform.googleapis.com"
        );
        assert_eq!(
            gemini_vertex_base(&env(&[
                ("GOOGLE_CLOUD_PROJECT", "p"),
                ("GOOGLE_CLOUD_LOCATION", "global")
            ])),
            "https://aiplatform.googleapis.com"
        );
    }

    /// Gemini CLI's sign-in from its environment, as it reads it with no base URL set.
    #[test]
    fn gemini_sign_in_is_read_from_the_environment_as_gemini_cli_reads_it() {
        let of = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            gemini_env_auth_type(&move |k: &str| {
                vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
        };
        assert_eq!(of(&[]), None);
        assert_eq!(of(&[("GEMINI_API_KEY", "k")]), Some("gemini-api-key"));
        assert_eq!(of(&[("GEMINI_API_KEY", "")]), None);
        assert_eq!(
            of(&[
                ("GEMINI_API_KEY", "k"),
                ("GOOGLE_GENAI_USE_VERTEXAI", "true")
            ]),
            Some("vertex-ai")
        );
        assert_eq!(
            of(&[("GOOGLE_GENAI_USE_GCA", "true")]),
            Some("oauth-personal")
        );
        assert_eq!(
            of(&[("CLOUD_SHELL", "true")]),
            Some("compute-default-credentials")
        );
    }

    /// Playback gives Gemini CLI signed in with Google a placeholder token, the user's own
    /// variables kept.
    #[test]
    fn gemini_playback_token_keeps_the_users_variables() {
        let none = |_: &str| None;
        assert_eq!(
            gemini_playback_token(&none),
            [
                ("GOOGLE_GENAI_USE_GCA".to_string(), "true".to_string()),
                (
                    "GOOGLE_CLOUD_ACCESS_TOKEN".to_string(),
                    "mcptape-playback-no-token".to_string()
                )
            ]
        );
        let own = |k: &str| (k == "GOOGLE_CLOUD_ACCESS_TOKEN").then(|| "ya29.own".to_string());
        assert_eq!(
            gemini_playback_token(&own),
            [("GOOGLE_GENAI_USE_GCA".to_string(), "true".to_string())]
        );
    }

    /// The sign-in goes into settings with everything else in them kept.
    #[test]
    fn gemini_sign_in_is_added_to_settings_keeping_the_rest() {
        let doc = serde_json::json!({"ui": {"theme": "X"}, "security": {"folderTrust": {"enabled": false}}});
        let got = gemini_auth(doc, "gemini-api-key");
        assert_eq!(got["ui"]["theme"], "X");
        assert_eq!(got["security"]["folderTrust"]["enabled"], false);
        assert_eq!(got["security"]["auth"]["selectedType"], "gemini-api-key");
        let got = gemini_auth(serde_json::json!({"security": 1}), "vertex-ai");
        assert_eq!(
            got,
            serde_json::json!({"security": {"auth": {"selectedType": "vertex-ai"}}})
        );
    }

    /// Gemini CLI's `.env`: the nearest one up from the working folder, else the home's.
    #[test]
    fn gemini_dotenv_is_the_file_gemini_cli_loads() {
        let dir = tempfile::tempdir().unwrap();
        let (cwd, home) = (dir.path().join("proj/sub"), dir.path().join("home"));
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
        std::fs::write(home.join(".gemini/.env"), "GEMINI_API_KEY=home-key\n").unwrap();
        assert_eq!(
            gemini_dotenv(&cwd, Some(&home)),
            [("GEMINI_API_KEY".to_string(), "home-key".to_string())]
        );
        std::fs::write(
            dir.path().join("proj/.env"),
            "# keys\nexport GEMINI_API_KEY=\"proj-key\"\nOTHER = 'x'\n",
        )
        .unwrap();
        assert_eq!(
            gemini_dotenv(&cwd, Some(&home)),
            [
                ("GEMINI_API_KEY".to_string(), "proj-key".to_string()),
                ("OTHER".to_string(), "x".to_string())
            ]
        );
    }
}
