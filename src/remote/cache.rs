//! The local cache of remote tapes: `$MCPTAPE_CACHE_DIR`, else `$XDG_CACHE_HOME/mcptape`, else
//! `~/.cache/mcptape` (when the home folder is there; else under the temp folder). A tape fetched is kept at `objects/<URL hash>-<version hash>/<file name>`,
//! the version being the object's ETag and size: a play of an unchanged object asks the store
//! only for its ETag (a HEAD) and reads the copy; a changed object is downloaded again and the
//! older copy of the same URL removed. Everything in the cache may be deleted at any time.

use super::{Bucket, Object, RemoteError, S3Url};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The cache folder (not created).
pub fn dir() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("MCPTAPE_CACHE_DIR") {
        return d;
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return d.join("mcptape");
    }
    // A HOME that is not there is not made for a cache.
    match var("HOME").filter(|h| h.is_dir()) {
        Some(h) => h.join(".cache").join("mcptape"),
        None => std::env::temp_dir().join("mcptape-cache"),
    }
}

/// A tape fetched into the cache.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The local copy.
    pub path: PathBuf,
    /// The object it is a copy of.
    pub object: Object,
    /// Whether it was downloaded now (else it was in the cache).
    pub downloaded: bool,
}

fn hex(bytes: &[u8], n: usize) -> String {
    bytes.iter().take(n).map(|b| format!("{b:02x}")).collect()
}

/// A short hash of the URL, the start of its files' names.
pub(crate) fn url_hash(url: &S3Url) -> String {
    hex(&Sha256::digest(url.to_string().as_bytes()), 8)
}

/// The cache entry's folder name for a version of `url`.
fn entry_name(url: &S3Url, object: &Object) -> (String, String) {
    let u = url_hash(url);
    let version = match &object.etag {
        Some(e) => format!("etag:{e}\0size:{}", object.size),
        None => format!("modified:{}\0size:{}", object.modified, object.size),
    };
    let v = hex(&Sha256::digest(version.as_bytes()), 8);
    (u.clone(), format!("{u}-{v}"))
}

/// The file name a copy is kept under: the key's last part, made safe.
pub(crate) fn file_name(url: &S3Url) -> String {
    let name: String = url
        .file_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = name.trim_start_matches('.').to_string();
    if name.is_empty() {
        "tape.jsonl".into()
    } else {
        name
    }
}

/// The tape at `url`, from the cache when its ETag and size are those of the copy there, else
/// downloaded into it. `None` when there is no such object.
pub async fn fetch(bucket: &Bucket, url: &S3Url) -> Result<Option<Fetched>, RemoteError> {
    let Some(object) = bucket.head(&url.key).await? else {
        return Ok(None);
    };
    let root = dir().join("objects");
    let (url_hash, entry) = entry_name(url, &object);
    let folder = root.join(&entry);
    let path = folder.join(file_name(url));
    if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == object.size) {
        return Ok(Some(Fetched {
            path,
            object,
            downloaded: false,
        }));
    }
    let local = |what, path: &Path, source| RemoteError::Local {
        url: url.to_string(),
        what,
        path: path.to_path_buf(),
        source,
    };
    create_private_dir(&folder).map_err(|e| local("creating the cache folder", &folder, e))?;
    // Written beside, then renamed: a reader never sees half a copy, two fetches at once
    // both end with a whole one.
    let mut tmp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempfile_in(&folder)
        .map_err(|e| local("creating a file in the cache folder", &folder, e))?;
    let n = bucket
        .download(&url.key, object.etag.as_deref(), tmp.as_file_mut())
        .await
        .map_err(|e| match e {
            RemoteError::Local {
                url, what, source, ..
            } => RemoteError::Local {
                url,
                what,
                path: tmp.path().to_path_buf(),
                source,
            },
            other => other,
        })?;
    if n != object.size {
        return Err(local(
            "downloading into",
            tmp.path(),
            std::io::Error::other(format!(
                "got {n} bytes of the {} the store announced",
                object.size
            )),
        ));
    }
    tmp.persist(&path)
        .map_err(|e| local("keeping the download at", &path, e.error))?;
    forget_older(&root, &url_hash, &entry);
    Ok(Some(Fetched {
        path,
        object,
        downloaded: true,
    }))
}

/// Keeps a tape just uploaded to `url` as the cache's copy of that version (moved there from
/// `path`, on the same file system), so that reading it back on this machine downloads nothing.
/// Without an ETag the file is left where it is and `false` returned.
pub fn adopt(url: &S3Url, path: &Path, etag: Option<&str>) -> bool {
    let (Some(etag), Ok(meta)) = (etag, std::fs::metadata(path)) else {
        return false;
    };
    let object = Object {
        key: url.key.clone(),
        size: meta.len(),
        modified: 0,
        etag: Some(etag.to_string()),
    };
    let root = dir().join("objects");
    let (url_hash, entry) = entry_name(url, &object);
    let folder = root.join(&entry);
    if create_private_dir(&folder).is_err()
        || std::fs::rename(path, folder.join(file_name(url))).is_err()
    {
        return false;
    }
    forget_older(&root, &url_hash, &entry);
    true
}

/// Removes the cache's other versions of the same URL (a play still reading one keeps its open
/// file).
fn forget_older(root: &Path, url_hash: &str, keep: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&format!("{url_hash}-")) && name != keep {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Creates a folder (and parents) owner-only: tapes hold whatever crossed the wire.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_object_is_another_entry_of_the_same_url() {
        let url = S3Url {
            bucket: "b-1".into(),
            key: "t/x.jsonl".into(),
        };
        let o = |etag: &str, size| Object {
            key: url.key.clone(),
            size,
            modified: 0,
            etag: Some(etag.into()),
        };
        let (u1, a) = entry_name(&url, &o("\"1\"", 10));
        let (u2, b) = entry_name(&url, &o("\"2\"", 10));
        let (_, c) = entry_name(&url, &o("\"1\"", 11));
        assert_eq!(u1, u2);
        assert!(a != b && a != c && b != c);
        assert_eq!(entry_name(&url, &o("\"1\"", 10)).1, a);
        assert_eq!(file_name(&url), "x.jsonl");
    }
}
