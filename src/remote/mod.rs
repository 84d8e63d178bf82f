//! Tapes in object storage: `s3://BUCKET/KEY` (and `file://PATH`) wherever a tape is named.
//!
//! The S3 client is the `object_store` crate's (SigV4 signing, retries, multipart uploads,
//! listing). Nothing here streams a tape over the network while it is read or written: a tape
//! to read is fetched once into a local cache ([`cache::fetch`]), keyed by the object's URL, ETag and
//! size, so that an unchanged object is never downloaded twice and a changed one is; a tape to
//! write is written to a local spool ([`spool`]) and uploaded when it is closed ([`Bucket::upload`]),
//! in one PUT or, past [`MULTIPART_OVER`], as a multipart upload. A spool that was not uploaded
//! (the process was killed, the endpoint was down) stays, with a small sidecar naming its
//! target, for `mcptape push`.
//!
//! Credentials come from the environment and the shared AWS files ([`credentials`]); they are
//! handed to the client and never written anywhere.

pub mod cache;
pub mod credentials;
pub mod spool;

use object_store::aws::AmazonS3;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore as _, ObjectStoreExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Tapes bigger than this (8 MiB) are uploaded in parts of this size, as a multipart upload.
pub const MULTIPART_OVER: u64 = 8 * 1024 * 1024;
/// The size of one part of a multipart upload (S3 wants at least 5 MiB but for the last).
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// Where a tape argument that is a URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An object in an S3 bucket (or any S3-compatible store, through `AWS_ENDPOINT_URL`).
    S3(S3Url),
    /// `file://PATH`: a local file, as if the path had been given.
    File(PathBuf),
}

/// `s3://BUCKET/KEY`, checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct S3Url {
    /// The bucket.
    pub bucket: String,
    /// The object's key (for a listing, a prefix; may be empty there).
    pub key: String,
}

impl std::fmt::Display for S3Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

impl S3Url {
    /// The last part of the key (`t.jsonl` of `s3://b/a/t.jsonl`), for local file names.
    pub fn file_name(&self) -> &str {
        self.key.rsplit('/').next().unwrap_or_default()
    }
}

/// Something that went wrong with a tape in object storage. Every message names the URL.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The URL cannot be used (exit 64).
    #[error("{url}: {why}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// No such object (exit 66).
    #[error("{url}: no such tape (no object at that key{hint})")]
    NotFound {
        /// The URL.
        url: String,
        /// A hint, e.g. ", and no bucket of that name".
        hint: String,
    },
    /// No such bucket (exit 66).
    #[error("{url}: no such bucket {bucket:?} at {endpoint}")]
    NoBucket {
        /// The URL.
        url: String,
        /// The bucket.
        bucket: String,
        /// The endpoint asked.
        endpoint: String,
    },
    /// The store refused the credentials, or the operation (exit 69).
    #[error("{url}: {what} was refused: {why} ({advice})")]
    Denied {
        /// The URL.
        url: String,
        /// What was tried.
        what: &'static str,
        /// The store's reason, shortened.
        why: String,
        /// What to check.
        advice: &'static str,
    },
    /// The store could not be reached, or failed (exit 69).
    #[error("{url}: {what} failed: {why}")]
    Store {
        /// The URL.
        url: String,
        /// What was tried ("fetching the tape", "uploading", …).
        what: &'static str,
        /// The client's error, its innermost cause first said.
        why: String,
    },
    /// A local file (the cache, the spool) could not be read or written (exit 74).
    #[error("{url}: {what} {}: {source}", .path.display())]
    Local {
        /// The URL.
        url: String,
        /// What was done to the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl crate::exit::Coded for RemoteError {
    fn exit_code(&self) -> i32 {
        match self {
            RemoteError::BadUrl { .. } => crate::exit::USAGE,
            RemoteError::NotFound { .. } | RemoteError::NoBucket { .. } => crate::exit::NO_INPUT,
            RemoteError::Denied { .. } | RemoteError::Store { .. } => crate::exit::UNAVAILABLE,
            RemoteError::Local { .. } => crate::exit::IO_ERR,
        }
    }
}

/// Whether a tape argument is a URL (`scheme://…`) rather than a name or a path.
pub fn is_url(arg: &str) -> bool {
    match arg.split_once("://") {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// Parses a tape URL. `s3://BUCKET/KEY` needs a bucket that S3 accepts and a key; with
/// `listing`, the key is a prefix and may be empty. `file://` URLs are absolute paths.
pub fn parse(arg: &str, listing: bool) -> Result<Target, RemoteError> {
    let bad = |why: String| RemoteError::BadUrl {
        url: arg.to_string(),
        why,
    };
    let (scheme, rest) = arg
        .split_once("://")
        .ok_or_else(|| bad("not a URL".into()))?;
    match scheme.to_ascii_lowercase().as_str() {
        "s3" => {}
        "file" => {
            let url = url::Url::parse(arg).map_err(|e| bad(format!("not a file URL: {e}")))?;
            if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                return Err(bad(
                    "a file URL names a path on this machine: file:///abs/path (no host)".into(),
                ));
            }
            let path = url
                .to_file_path()
                .map_err(|()| bad("a file URL needs an absolute path: file:///abs/path".into()))?;
            return Ok(Target::File(path));
        }
        other => {
            return Err(bad(format!(
                "the scheme {other}:// is not supported: tapes are named s3://BUCKET/KEY, file:///PATH, a path or a name"
            )))
        }
    }
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    check_bucket(bucket).map_err(|why| bad(format!("the bucket name {bucket:?} {why}")))?;
    if key.contains("//") || key.starts_with('/') {
        return Err(bad("the key has an empty part ('//')".into()));
    }
    if key.contains('?') || key.contains('#') {
        return Err(bad(
            "the key has '?' or '#' (a query or fragment is not part of a tape URL)".into(),
        ));
    }
    if key.split('/').any(|p| p == "." || p == "..") {
        return Err(bad("the key has a '.' or '..' part".into()));
    }
    if !listing {
        if key.is_empty() {
            return Err(bad(format!(
                "no key: a tape is s3://{bucket}/KEY, e.g. s3://{bucket}/tapes/NAME.jsonl (`mcptape ls s3://{bucket}/` lists them)"
            )));
        }
        if key.ends_with('/') {
            return Err(bad(format!(
                "the key ends with '/', a prefix, not a tape (`mcptape ls {arg}` lists the tapes under it)"
            )));
        }
    }
    ObjectPath::parse(key).map_err(|e| bad(format!("the key cannot be used: {e}")))?;
    Ok(Target::S3(S3Url {
        bucket: bucket.to_string(),
        key: key.to_string(),
    }))
}

/// S3's rules for a bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and
/// ending with a letter or digit.
fn check_bucket(b: &str) -> Result<(), &'static str> {
    if b.is_empty() {
        return Err("is empty (s3://BUCKET/KEY)");
    }
    if !(3..=63).contains(&b.len()) {
        return Err("must be 3 to 63 characters");
    }
    if !b
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
    {
        return Err("may hold only lowercase letters, digits, '.' and '-'");
    }
    if !b.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !b.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return Err("must start and end with a letter or a digit");
    }
    Ok(())
}

/// An object found by [`Bucket::list`] or [`Bucket::head`].
#[derive(Debug, Clone)]
pub struct Object {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, in seconds since the Unix epoch.
    pub modified: i64,
    /// Its ETag, if the store gave one.
    pub etag: Option<String>,
}

impl From<object_store::ObjectMeta> for Object {
    fn from(m: object_store::ObjectMeta) -> Object {
        Object {
            key: m.location.to_string(),
            size: m.size,
            modified: m.last_modified.timestamp(),
            etag: m.e_tag,
        }
    }
}

/// How an upload went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// Bytes uploaded.
    pub bytes: u64,
    /// Parts of a multipart upload; 0 for a single PUT.
    pub parts: usize,
    /// The new object's ETag, if the store gave one.
    pub etag: Option<String>,
}

/// A client for one bucket.
pub struct Bucket {
    store: Arc<AmazonS3>,
    bucket: String,
    endpoint: String,
}

impl Bucket {
    /// A client for the URL's bucket, with the credentials of [`credentials::builder`]. Makes no
    /// request.
    pub fn connect(url: &S3Url) -> Result<Bucket, RemoteError> {
        let (builder, endpoint) =
            credentials::builder(&url.bucket).map_err(|why| RemoteError::BadUrl {
                url: url.to_string(),
                why,
            })?;
        let store = builder.build().map_err(|e| RemoteError::BadUrl {
            url: url.to_string(),
            why: format!("the S3 client cannot be set up: {e}"),
        })?;
        Ok(Bucket {
            store: Arc::new(store),
            bucket: url.bucket.clone(),
            endpoint,
        })
    }

    fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// The object at `key`, or `None` when there is none. A missing bucket is an error.
    pub async fn head(&self, key: &str) -> Result<Option<Object>, RemoteError> {
        match self.store.head(&ObjectPath::from(key)).await {
            Ok(m) => Ok(Some(m.into())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.classify(key, "looking the tape up", e)),
        }
    }

    /// Checks that the bucket is there (a HEAD of a missing key cannot tell): one listing
    /// request of at most a few keys.
    pub async fn check_bucket(&self, key: &str) -> Result<(), RemoteError> {
        use futures_util::StreamExt as _;
        let probe = ObjectPath::from(format!("{key}.mcptape-probe"));
        let mut list = self.store.list(Some(&probe));
        match list.next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(self.classify(key, "listing the bucket", e)),
        }
    }

    /// Downloads the object at `key` (exactly the version with `etag`, when given) to `to`.
    pub async fn download(
        &self,
        key: &str,
        etag: Option<&str>,
        to: &mut std::fs::File,
    ) -> Result<u64, RemoteError> {
        use std::io::Write as _;
        let url = self.url(key);
        let opts = object_store::GetOptions {
            if_match: etag.map(str::to_string),
            ..Default::default()
        };
        let got = self
            .store
            .get_opts(&ObjectPath::from(key), opts)
            .await
            .map_err(|e| self.classify(key, "fetching the tape", e))?;
        let mut stream = got.into_stream();
        let mut n = 0u64;
        use futures_util::StreamExt as _;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.classify(key, "fetching the tape", e))?;
            n += chunk.len() as u64;
            to.write_all(&chunk).map_err(|source| RemoteError::Local {
                url: url.clone(),
                what: "writing the cache file",
                path: PathBuf::from("(cache)"),
                source,
            })?;
        }
        Ok(n)
    }

    /// Uploads the file at `from` to `key`, whole: [`Bucket::upload_file`].
    pub async fn upload(&self, from: &Path, key: &str) -> Result<Uploaded, RemoteError> {
        let local = |source| RemoteError::Local {
            url: self.url(key),
            what: "reading",
            path: from.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(from).map_err(local)?;
        let size = file.metadata().map_err(local)?.len();
        self.upload_file(file, size, from, key).await
    }

    /// Uploads the first `len` bytes of `file` (opened at `from`, which errors name) to `key`:
    /// one PUT up to [`MULTIPART_OVER`], a multipart upload in [`PART_SIZE`] parts past it
    /// (aborted, so that no parts are left behind, if it fails). The object is those bytes: the
    /// client computes each request's length and every hash it sends (SigV4's payload hash, the
    /// checksum `AWS_CHECKSUM_ALGORITHM` asks for) from the bytes it is handed, never from the
    /// file. A file that holds fewer than `len` bytes by the time it is read is an error. `file`
    /// is closed once read: before the request of a single PUT, at the end of a multipart
    /// upload (a lock it holds is held that long).
    pub async fn upload_file(
        &self,
        file: std::fs::File,
        len: u64,
        from: &Path,
        key: &str,
    ) -> Result<Uploaded, RemoteError> {
        use std::io::Read as _;
        let url = self.url(key);
        let local = |what, source| RemoteError::Local {
            url: url.clone(),
            what,
            path: from.to_path_buf(),
            source,
        };
        let shorter = || {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("it holds fewer than the {len} bytes it held when the upload started"),
            )
        };
        let location = ObjectPath::from(key);
        if len <= MULTIPART_OVER {
            let mut bytes = Vec::with_capacity(len as usize);
            file.take(len)
                .read_to_end(&mut bytes)
                .map_err(|e| local("reading", e))?;
            if (bytes.len() as u64) < len {
                return Err(local("reading", shorter()));
            }
            let put = self
                .store
                .put(&location, bytes.into())
                .await
                .map_err(|e| self.classify(key, "uploading the tape", e))?;
            return Ok(Uploaded {
                bytes: len,
                parts: 0,
                etag: put.e_tag,
            });
        }
        let mut file = file.take(len);
        let upload = self
            .store
            .put_multipart(&location)
            .await
            .map_err(|e| self.classify(key, "starting the multipart upload", e))?;
        let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut buf = vec![0u8; PART_SIZE];
        let mut sent = 0u64;
        let result: Result<(), RemoteError> = async {
            loop {
                let n = read_full(&mut file, &mut buf).map_err(|e| local("reading", e))?;
                if n == 0 {
                    break;
                }
                // At most two parts in flight: memory stays at a few parts, whatever the size.
                writer
                    .wait_for_capacity(2)
                    .await
                    .map_err(|e| self.classify(key, "uploading a part", e))?;
                writer.write(&buf[..n]);
                sent += n as u64;
            }
            if sent < len {
                return Err(local("reading", shorter()));
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            let _ = writer.abort().await;
            return Err(e);
        }
        let put = writer
            .finish()
            .await
            .map_err(|e| self.classify(key, "completing the multipart upload", e))?;
        Ok(Uploaded {
            bytes: sent,
            parts: sent.div_ceil(PART_SIZE as u64) as usize,
            etag: put.e_tag,
        })
    }

    /// The objects under `prefix` (all of them, every level), sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Object>, RemoteError> {
        use futures_util::StreamExt as _;
        // object_store lists whole path segments: a prefix that ends inside a name
        // (`tapes/serv`) is listed from its folder and filtered here.
        let (folder, _) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let at = (!folder.is_empty()).then(|| ObjectPath::from(folder));
        let mut stream = self.store.list(at.as_ref());
        let mut out = Vec::new();
        while let Some(m) = stream.next().await {
            let m = m.map_err(|e| self.classify(prefix, "listing", e))?;
            let o = Object::from(m);
            if o.key.starts_with(prefix) {
                out.push(o);
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// The client's error, said for a person: a missing bucket, refused credentials, an
    /// endpoint that cannot be reached.
    fn classify(&self, key: &str, what: &'static str, e: object_store::Error) -> RemoteError {
        let url = self.url(key);
        let text = full_text(&e);
        if text.contains("NoSuchBucket") {
            return RemoteError::NoBucket {
                url,
                bucket: self.bucket.clone(),
                endpoint: self.endpoint.clone(),
            };
        }
        if let object_store::Error::NotFound { .. } = e {
            return RemoteError::NotFound {
                url,
                hint: String::new(),
            };
        }
        for (code, advice) in [
            ("InvalidAccessKeyId", CREDENTIALS),
            ("SignatureDoesNotMatch", CREDENTIALS),
            ("ExpiredToken", CREDENTIALS),
            ("InvalidToken", CREDENTIALS),
            (
                "AccessDenied",
                "check the credentials' permissions on this bucket and key",
            ),
        ] {
            if text.contains(code) {
                return RemoteError::Denied {
                    url,
                    what,
                    why: code.to_string(),
                    advice,
                };
            }
        }
        if matches!(
            e,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ) || text.contains("403 Forbidden")
        {
            return RemoteError::Denied {
                url,
                what,
                why: "403 Forbidden".into(),
                advice: CREDENTIALS,
            };
        }
        let inner = innermost(&e);
        let why = if text.contains("error sending request") {
            format!("cannot reach {}: {inner}", self.endpoint)
        } else if inner == e.to_string() {
            inner
        } else {
            format!("{inner} ({e})")
        };
        RemoteError::Store { url, what, why }
    }

    /// The endpoint this client talks to, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

const CREDENTIALS: &str =
    "check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or AWS_PROFILE";

/// An error and all its sources, in one line.
fn full_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The deepest cause of an error, said alone.
fn innermost(e: &dyn std::error::Error) -> String {
    let mut last = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !t.is_empty() {
            last = t;
        }
        cause = c.source();
    }
    last
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_names_and_paths() {
        for url in ["s3://b/k", "file:///tmp/t.jsonl", "gs://x/y", "S3://b/k"] {
            assert!(is_url(url), "{url}");
        }
        for not in ["demo", "./t.jsonl", "a/b.jsonl", "://x", "1s3://x", "C:/x"] {
            assert!(!is_url(not), "{not}");
        }
    }

    #[test]
    fn s3_urls_are_checked() {
        assert_eq!(
            parse("s3://my-tapes/ci/fs/t.jsonl", false).unwrap(),
            Target::S3(S3Url {
                bucket: "my-tapes".into(),
                key: "ci/fs/t.jsonl".into()
            })
        );
        assert_eq!(
            parse("s3://my-tapes/", true).unwrap(),
            Target::S3(S3Url {
                bucket: "my-tapes".into(),
                key: String::new()
            })
        );
        for (bad, says) in [
            ("s3://", "is empty"),
            ("s3:///k", "is empty"),
            ("s3://My_Bucket/k", "lowercase"),
            ("s3://ab/k", "3 to 63"),
            ("s3://bucket", "no key"),
            ("s3://bucket/", "no key"),
            ("s3://bucket/dir/", "ends with '/'"),
            ("s3://bucket/a//b", "empty part"),
            ("s3://bucket/a/../b", "'..'"),
            ("s3://bucket/k?x=1", "query"),
            ("gs://bucket/k", "not supported"),
            ("file://host/x", "no host"),
        ] {
            let e = parse(bad, false).unwrap_err().to_string();
            assert!(e.starts_with(bad) && e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            parse("file:///tmp/a%20b.jsonl", false).unwrap(),
            Target::File(PathBuf::from("/tmp/a b.jsonl"))
        );
    }
}
