//! Bodies a client compressed (`Content-Encoding`), decoded for the tape and for matching. The
//! upstream always gets the bytes the client sent; only what is taped, redacted and compared
//! is the decoded body. Codex CLI compresses its model requests with zstd when signed in to
//! ChatGPT (its `enable_request_compression`, on by default); a tape of the compressed bytes
//! would hide every secret in them from the redactor and never match a request again.
//!
//! zstd through `ruzstd` (pure Rust) and gzip/deflate through `flate2`
//! on its pure-Rust backend: no C library for a path that runs once per model request.

use hyper::header::{HeaderMap, CONTENT_ENCODING};
use std::io::Read;

/// A body decoded from the codings its `Content-Encoding` names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The body as it was before the client encoded it.
    pub body: Vec<u8>,
    /// The codings, as the header listed them (`zstd`, `gzip, br`…), lower-cased.
    pub coding: String,
}

/// `body` decoded from the codings `headers` name, at most `max` bytes of it. `Ok(None)`: the
/// body is not encoded (no header, or only `identity`). An error says which coding failed or
/// is not known; the caller keeps the bytes as they came.
pub(crate) fn decode(
    headers: &HeaderMap,
    body: &[u8],
    max: usize,
) -> Result<Option<Decoded>, String> {
    let mut codings = Vec::new();
    for value in headers.get_all(CONTENT_ENCODING) {
        let value = value
            .to_str()
            .map_err(|_| "a Content-Encoding that is not text".to_string())?;
        codings.extend(
            value
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .filter(|c| !c.is_empty() && c != "identity"),
        );
    }
    if codings.is_empty() {
        return Ok(None);
    }
    // Applied in the order listed: undone last first.
    let mut out = body.to_vec();
    for coding in codings.iter().rev() {
        out = decode_one(coding, &out, max)?;
    }
    Ok(Some(Decoded {
        body: out,
        coding: codings.join(", "),
    }))
}

/// The codings `headers` name, as one list (for a fact when they do not decode).
pub(crate) fn listed(headers: &HeaderMap) -> String {
    headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

fn decode_one(coding: &str, body: &[u8], max: usize) -> Result<Vec<u8>, String> {
    let out = match coding {
        "zstd" => zstd(body, max),
        "gzip" | "x-gzip" => bounded(flate2::read::MultiGzDecoder::new(body), max),
        // RFC 9110's `deflate` is zlib-wrapped; some clients send the raw stream.
        "deflate" => match bounded(flate2::read::ZlibDecoder::new(body), max) {
            Err(Bound::Over(n)) => Err(Bound::Over(n)),
            Ok(out) => Ok(out),
            Err(Bound::Bad(_)) => bounded(flate2::read::DeflateDecoder::new(body), max),
        },
        other => {
            return Err(format!(
                "the content coding {other:?} is not one mcptape decodes"
            ))
        }
    };
    out.map_err(|why| match why {
        Bound::Over(max) => format!("the {coding} body decodes to more than {max} bytes"),
        Bound::Bad(why) => format!("the {coding} body does not decode: {why}"),
    })
}

/// Why a body did not decode.
enum Bound {
    /// It decodes to more than this many bytes.
    Over(usize),
    /// It is not what its coding says.
    Bad(String),
}

/// Every frame of a zstd body, in turn (a body may hold several, RFC 8878 §3).
fn zstd(mut body: &[u8], max: usize) -> Result<Vec<u8>, Bound> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let frame = ruzstd::decoding::StreamingDecoder::new(&mut body)
            .map_err(|e| Bound::Bad(e.to_string()))?;
        let room = max.saturating_sub(out.len());
        out.extend(bounded(frame, room).map_err(|e| match e {
            Bound::Over(_) => Bound::Over(max),
            bad => bad,
        })?);
    }
    Ok(out)
}

/// Reads `r` to its end, refusing more than `max` bytes: a small body may decode to a very
/// large one.
fn bounded(r: impl Read, max: usize) -> Result<Vec<u8>, Bound> {
    let mut out = Vec::new();
    r.take((max as u64).saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Bound::Bad(e.to_string()))?;
    if out.len() > max {
        return Err(Bound::Over(max));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;
    use std::io::Write;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CONTENT_ENCODING, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const BODY: &[u8] = br#"{"model":"gpt-5","input":[{"role":"user","content":"api_key=sk-live-0123456789abcdef"}],"stream":true}"#;

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn zstd_of(b: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(b, ruzstd::encoding::CompressionLevel::Fastest)
    }

    #[test]
    fn an_unencoded_body_is_left_alone() {
        assert_eq!(decode(&HeaderMap::new(), BODY, 1 << 20), Ok(None));
        assert_eq!(decode(&headers(&["identity"]), BODY, 1 << 20), Ok(None));
    }

    #[test]
    fn zstd_gzip_and_deflate_bodies_decode_to_what_was_sent() {
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(BODY).unwrap();
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(BODY).unwrap();
        let cases = [
            ("zstd", zstd_of(BODY)),
            ("gzip", gzip(BODY)),
            ("X-Gzip", gzip(BODY)),
            ("deflate", zlib.finish().unwrap()),
            ("deflate", raw.finish().unwrap()),
        ];
        for (coding, encoded) in cases {
            let got = decode(&headers(&[coding]), &encoded, 1 << 20)
                .unwrap()
                .unwrap();
            assert_eq!(got.body, BODY, "{coding}");
            assert_eq!(got.coding, coding.to_ascii_lowercase());
        }
    }

    /// Two codings are undone in reverse order, whether in one header or two; two zstd frames
    /// back to back are one body.
    #[test]
    fn stacked_codings_and_several_frames_decode() {
        let both = zstd_of(&gzip(BODY));
        for h in [headers(&["gzip, zstd"]), headers(&["gzip", "zstd"])] {
            let got = decode(&h, &both, 1 << 20).unwrap().unwrap();
            assert_eq!(got.body, BODY);
            assert_eq!(got.coding, "gzip, zstd");
        }
        let mut two = zstd_of(&BODY[..40]);
        two.extend(zstd_of(&BODY[40..]));
        assert_eq!(
            decode(&headers(&["zstd"]), &two, 1 << 20)
                .unwrap()
                .unwrap()
                .body,
            BODY
        );
    }

    #[test]
    fn bad_unknown_and_oversized_bodies_are_errors_that_say_so() {
        let why = decode(&headers(&["zstd"]), b"not zstd at all", 1 << 20).unwrap_err();
        assert!(why.starts_with("the zstd body does not decode"), "{why}");
        let why = decode(&headers(&["br"]), BODY, 1 << 20).unwrap_err();
        assert_eq!(why, r#"the content coding "br" is not one mcptape decodes"#);
        let big = vec![b'a'; 100_000];
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(&big).unwrap();
        let zlib = zlib.finish().unwrap();
        for (coding, encoded) in [
            ("zstd", zstd_of(&big)),
            ("gzip", gzip(&big)),
            ("deflate", zlib),
        ] {
            let why = decode(&headers(&[coding]), &encoded, 99_999).unwrap_err();
            assert_eq!(
                why,
                format!("the {coding} body decodes to more than 99999 bytes")
            );
            assert_eq!(
                decode(&headers(&[coding]), &encoded, 100_000)
                    .unwrap()
                    .unwrap()
                    .body,
                big
            );
        }
        let mut cut = zstd_of(BODY);
        cut.truncate(cut.len() - 3);
        assert!(decode(&headers(&["zstd"]), &cut, 1 << 20).is_err());
    }
}
