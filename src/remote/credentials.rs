//! Where the S3 client's settings come from, in this order:
//!
//! 1. The environment, as `object_store` reads it: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!    `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` (or
//!    `AWS_ENDPOINT_URL_S3`), `AWS_ALLOW_HTTP`, and the web-identity (`AWS_WEB_IDENTITY_TOKEN_FILE`,
//!    `AWS_ROLE_ARN`) and container (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, …) credentials.
//! 2. When the environment has no access key: the profile `AWS_PROFILE` (else `default`) of the
//!    shared files, `~/.aws/credentials` (or `AWS_SHARED_CREDENTIALS_FILE`) and `~/.aws/config`
//!    (or `AWS_CONFIG_FILE`): its static keys (`aws_access_key_id`, `aws_secret_access_key`,
//!    `aws_session_token`), `region` and `endpoint_url`. A profile of SSO, `role_arn` or
//!    `credential_process` is refused with a message (mcptape does not run those flows).
//! 3. Neither: `object_store`'s own chain goes on to the instance metadata service (EC2), for
//!    AWS itself; with another endpoint (`AWS_ENDPOINT_URL`) that is an error instead, unless
//!    `AWS_SKIP_SIGNATURE=true` (a public bucket).
//!
//! The keys are handed to the client and kept nowhere else: not on the tape, not in the
//! spool's sidecar, not in any message (an error names the profile and the file, never a key).

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// The builder for `bucket`'s client and the endpoint it talks to (for messages). An error is a
/// sentence saying what to fix.
pub fn builder(bucket: &str) -> Result<(AmazonS3Builder, String), String> {
    // The S3 client's TLS (reqwest, built without a crypto provider of its own) takes the
    // process's default: ring, as everywhere else in mcptape. An error here only says one is
    // installed already (an embedding program's), which is then used.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    let env_has_key = b
        .get_config_value(&AmazonS3ConfigKey::AccessKeyId)
        .is_some();
    let profile = if env_has_key { None } else { profile()? };
    if let Some(p) = &profile {
        b = b
            .with_access_key_id(&p.access_key_id)
            .with_secret_access_key(&p.secret_access_key);
        if let Some(t) = &p.session_token {
            b = b.with_token(t);
        }
    }
    let region = b
        .get_config_value(&AmazonS3ConfigKey::Region)
        .or_else(|| b.get_config_value(&AmazonS3ConfigKey::DefaultRegion))
        .or_else(|| profile.as_ref().and_then(|p| p.region.clone()));
    if let Some(r) = &region {
        b = b.with_region(r);
    }
    let mut endpoint = b
        .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
        .or_else(|| b.get_config_value(&AmazonS3ConfigKey::Endpoint));
    if endpoint.is_none() {
        if let Some(e) = profile.as_ref().and_then(|p| p.endpoint_url.clone()) {
            b = b.with_endpoint(&e);
            endpoint = Some(e);
        }
    }
    let has = |k: AmazonS3ConfigKey| b.get_config_value(&k).is_some_and(|v| !v.is_empty());
    let some_credentials = env_has_key
        || profile.is_some()
        || has(AmazonS3ConfigKey::WebIdentityTokenFile)
        || has(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
        || has(AmazonS3ConfigKey::ContainerCredentialsFullUri)
        || b.get_config_value(&AmazonS3ConfigKey::SkipSignature)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if let (Some(e), false) = (&endpoint, some_credentials) {
        // Without credentials the client would ask the EC2 instance metadata service, which
        // has nothing to give for another store.
        return Err(format!(
            "no credentials for the endpoint {e}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (AWS_SKIP_SIGNATURE=true for a public bucket)"
        ));
    }
    let shown = match &endpoint {
        Some(e) => {
            let allowed =
                std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
            if e.starts_with("http://") && !allowed {
                if !loopback(e) {
                    return Err(format!(
                        "the endpoint {e} is plain HTTP and not on this machine: set AWS_ALLOW_HTTP=true to use it anyway, or use https://"
                    ));
                }
                // An endpoint on this machine (moto, MinIO in a test) needs no TLS.
                b = b.with_allow_http(true);
            }
            e.trim_end_matches('/').to_string()
        }
        None => format!(
            "https://s3.{}.amazonaws.com",
            region.as_deref().unwrap_or("us-east-1")
        ),
    };
    b = b
        .with_retry(object_store::RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: Duration::from_secs(60),
        })
        .with_config("aws_connect_timeout".parse().expect("a known key"), "5s");
    Ok((b, shown))
}

/// Whether an `http://` URL's host is this machine.
fn loopback(endpoint: &str) -> bool {
    let Ok(u) = url::Url::parse(endpoint) else {
        return false;
    };
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// What a profile of the shared files gives.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Profile {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    region: Option<String>,
    endpoint_url: Option<String>,
}

/// The profile to use: `AWS_PROFILE`'s (an error when it is named but not there, or has no
/// static keys), else `default` if the files have one, else none.
fn profile() -> Result<Option<Profile>, String> {
    let named = std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty());
    let name = named.clone().unwrap_or_else(|| "default".into());
    let (creds_path, config_path) = (
        shared_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
        shared_file("AWS_CONFIG_FILE", "config"),
    );
    let read = |p: &Option<PathBuf>| {
        p.as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    let creds = ini(&read(&creds_path));
    let config = ini(&read(&config_path));
    let from_creds = creds.get(&name);
    let config_section = if name == "default" {
        config
            .get("default")
            .or_else(|| config.get("profile default"))
    } else {
        config.get(&format!("profile {name}"))
    };
    let shown = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "~/.aws/…".into())
    };
    if from_creds.is_none() && config_section.is_none() {
        return match named {
            Some(n) => Err(format!(
                "AWS_PROFILE={n}: no such profile in {} or {}",
                shown(&creds_path),
                shown(&config_path)
            )),
            None => Ok(None),
        };
    }
    let get = |k: &str| {
        from_creds
            .and_then(|s| s.get(k))
            .or_else(|| config_section.and_then(|s| s.get(k)))
            .cloned()
            .filter(|v| !v.is_empty())
    };
    let (Some(access_key_id), Some(secret_access_key)) =
        (get("aws_access_key_id"), get("aws_secret_access_key"))
    else {
        let flow = [
            "sso_session",
            "sso_start_url",
            "role_arn",
            "credential_process",
            "source_profile",
        ]
        .into_iter()
        .find(|k| get(k).is_some());
        let why = match flow {
            Some(k) => format!("it uses {k}, which mcptape does not run"),
            None => "it has no aws_access_key_id and aws_secret_access_key".into(),
        };
        return Err(format!(
            "the AWS profile {name:?} ({}) cannot be used: {why}; give mcptape static keys (e.g. `eval \"$(aws configure export-credentials --profile {name} --format env)\"`)",
            shown(&creds_path)
        ));
    };
    Ok(Some(Profile {
        access_key_id,
        secret_access_key,
        session_token: get("aws_session_token"),
        region: get("region"),
        endpoint_url: get("endpoint_url"),
    }))
}

/// `$VAR`, else `~/.aws/NAME`.
fn shared_file(var: &str, name: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".aws").join(name)),
    }
}

/// The sections of an INI file as the AWS tools write them: `[name]`, `key = value`, `#` and
/// `;` comments. Keys are lowercased; nested (indented) settings are left out.
fn ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            section = Some(name);
            continue;
        }
        if let (Some(s), Some((k, v))) = (&section, t.split_once('=')) {
            out.get_mut(s)
                .expect("the section was entered")
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_files_read_as_the_aws_tools_write_them() {
        let s = ini("# c\n[default]\naws_access_key_id = AK\nAWS_Secret_Access_Key=SK\n\n[profile  ci ]\nregion = eu-west-1\ns3 =\n  addressing_style = path\n");
        assert_eq!(s["default"]["aws_access_key_id"], "AK");
        assert_eq!(s["default"]["aws_secret_access_key"], "SK");
        assert_eq!(s["profile ci"]["region"], "eu-west-1");
        assert!(!s["profile ci"].contains_key("addressing_style"));
    }

    #[test]
    fn only_endpoints_on_this_machine_go_without_tls() {
        assert!(loopback("http://127.0.0.1:9000"));
        assert!(loopback("http://localhost:9000/"));
        assert!(loopback("http://[::1]:9000"));
        assert!(!loopback("http://10.0.0.1:9000"));
        assert!(!loopback("http://minio.internal"));
    }
}
