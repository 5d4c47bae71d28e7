//! etcd-client's errors in words: what failed and why, without tonic's type names and debug
//! dumps (`tonic::transport::Error(Transport, ConnectError(…))`), which reach users through
//! `Error::Store`'s text.

use tonic::Code;

/// `e` as a sentence about etcd: "etcd is unavailable: Connection refused (os error 111)".
pub(super) fn failure(e: &etcd_client::Error) -> String {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => status(s),
        E::TransportError(t) => format!("cannot reach etcd: {}", innermost(t)),
        E::IoError(io) => format!("connection to etcd failed: {io}"),
        E::InvalidUri(u) => format!("bad etcd address: {u}"),
        other => other.to_string(),
    }
}

fn status(s: &tonic::Status) -> String {
    // A transport failure tonic wrapped in a status: its innermost cause says it best.
    let cause = std::error::Error::source(s).map(innermost);
    let why = cause.unwrap_or_else(|| s.message().to_string());
    match s.code() {
        Code::DeadlineExceeded => "etcd did not answer in time".to_string(),
        Code::Cancelled if s.message().contains("Timeout expired") => {
            "etcd did not answer in time".to_string()
        }
        Code::Unavailable => format!("etcd is unavailable: {why}"),
        code => format!(
            "etcd answered an error ({}): {why}",
            code.description().to_lowercase()
        ),
    }
}

/// The text of the deepest source of `e`: "Connection refused (os error 111)" rather than
/// each wrapper's name for it.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest = e;
    while let Some(s) = deepest.source() {
        deepest = s;
    }
    deepest.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_sentences() {
        let e = etcd_client::Error::GRpcStatus(tonic::Status::unavailable("no leader"));
        assert_eq!(failure(&e), "etcd is unavailable: no leader");
        let e = etcd_client::Error::GRpcStatus(tonic::Status::cancelled("Timeout expired"));
        assert_eq!(failure(&e), "etcd did not answer in time");
        let e = etcd_client::Error::GRpcStatus(tonic::Status::permission_denied("no access"));
        let text = failure(&e);
        assert!(text.starts_with("etcd answered an error ("), "{text}");
        assert!(text.ends_with("): no access"), "{text}");
    }
}
