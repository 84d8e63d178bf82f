//! Transports: each turns its traffic into the same framed messages (with transport facts kept
//! beside them), so record, play, check and diff never care how a message travelled. One file
//! per transport: the stdio child process, Streamable HTTP (server pieces), the SSE codec, the
//! client the HTTP proxies forward with (and the model proxy's own HTTP/1.1 client), an MCP
//! client's POST, the content codings a client may compress a request body with, and the CORS
//! headers a recorded server gave browsers.

pub(crate) mod coding;
pub mod cors;
pub(crate) mod h1_client;
pub mod http;
pub(crate) mod post;
pub mod sse;
pub mod stdio;
#[cfg(test)]
mod test_upstream;
pub mod upstream;

/// The port a URL names, if it names one, is a port (1 to 65535). `http::Uri` takes
/// `http://host:99999` and then has no port, which the clients read as the scheme's default:
/// the traffic went to port 80 while mcptape reported :99999.
pub(crate) fn check_port(uri: &hyper::Uri) -> Result<(), String> {
    let Some(authority) = uri.authority() else {
        return Ok(());
    };
    let a = authority.as_str();
    let host = a.rsplit_once('@').map_or(a, |(_, h)| h);
    // An IPv6 host is bracketed, its colons inside the brackets.
    let after = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, r)| r),
        None => host,
    };
    match after.rsplit_once(':') {
        None | Some((_, "")) => Ok(()),
        Some((_, port)) => match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(()),
            _ => Err(format!("port {port} is not a port (1 to 65535)")),
        },
    }
}

#[cfg(test)]
mod port_tests {
    #[test]
    fn a_port_out_of_range_is_refused() {
        let check = |u: &str| super::check_port(&u.parse().unwrap());
        for ok in [
            "http://127.0.0.1/mcp",
            "http://127.0.0.1:8080/mcp",
            "http://127.0.0.1:65535",
            "https://u:p@example.com:443/",
            "http://[::1]:8080/",
            "http://[::1]/",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:99999",
            "http://127.0.0.1:99999/mcp",
            "http://127.0.0.1:0/",
            "http://[::1]:70000/",
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.contains("is not a port"), "{bad}: {e}");
        }
    }
}
