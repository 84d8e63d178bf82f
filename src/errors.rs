//! Which exit code any error of the library means: the one place that knows every error type,
//! so it sits above all of them (the binary's only way from an error to a code).

use crate::exit::Coded as _;

/// The exit code an error means: the first cause along its chain that is one of the library's
/// errors decides; an I/O error means 74; anything else is a bug (70).
pub fn exit_code(err: &(dyn std::error::Error + 'static)) -> i32 {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(code) = coded(e) {
            return code;
        }
        if e.downcast_ref::<std::io::Error>().is_some() {
            return crate::exit::IO_ERR;
        }
        cause = e.source();
    }
    crate::exit::SOFTWARE
}

/// The library's error types, each asked for its code.
fn coded(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    macro_rules! try_types {
        ($($t:ty),* $(,)?) => {
            $(if let Some(x) = e.downcast_ref::<$t>() {
                return Some(x.exit_code());
            })*
        };
    }
    try_types!(
        crate::tape::TapeError,
        crate::tape::store::NameError,
        crate::tape::store::ResolveError,
        crate::redact::RuleError,
        crate::compare::normalize::PathError,
        crate::record::RecordError,
        crate::check::CheckError,
        crate::diff::DiffError,
        crate::check::driver::DriveError,
        crate::check::fill::FillError,
        crate::integrity::RedactError,
        crate::config::ConfigError,
        crate::play::PlayError,
        crate::play::usage::UsageError,
        crate::tape::prune::PruneError,
        crate::model::serve::PlayModelError,
        crate::transport::upstream::UpstreamError,
        crate::run::RunError,
        crate::run::agent::PrepareError,
        crate::export::spans::SpansError,
        crate::export::send::SendError,
        crate::report::html::ReportError,
        crate::import::ImportError,
        crate::remote::RemoteError,
    );
    None
}
