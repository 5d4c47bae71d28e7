//! Where `serve` sends its traces, if anywhere: the config's `[tracing]` table, else the
//! OpenTelemetry environment variables (docs/operations.md#tracing).

use crate::common::Failure;
use serde::Deserialize;

/// The `service.name` when neither `OTEL_SERVICE_NAME` nor the config gives one.
const DEFAULT_SERVICE_NAME: &str = "clusterlimit";

/// The config's `[tracing]` table.
///
/// ```toml
/// [tracing]
/// otlp_endpoint = "http://127.0.0.1:4317"   # OTLP over gRPC; absent: no traces
/// service_name = "clusterlimit"             # OTEL_SERVICE_NAME wins
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingFile {
    otlp_endpoint: Option<String>,
    service_name: Option<String>,
}

/// The trace export in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingSettings {
    /// The collector, and the setting that named it; `None`: nothing is exported.
    pub endpoint: Option<Endpoint>,
    /// The `service.name` of the exported spans.
    pub service_name: String,
}

/// An OTLP/gRPC endpoint and where it was given (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: String,
    pub from: &'static str,
}

impl TracingSettings {
    /// From `[tracing]` (`None`: no such table) and the environment (`env`: a variable's
    /// value): the config's endpoint, else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; none when `OTEL_SDK_DISABLED=true`. The service name:
    /// `OTEL_SERVICE_NAME`, else the config's, else `clusterlimit`. A bad endpoint exits 64.
    pub fn resolve(
        file: Option<&TracingFile>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<TracingSettings, Failure> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true");
        let configured = file.and_then(|f| f.otlp_endpoint.clone());
        let endpoint = [
            (configured, "config [tracing] otlp_endpoint"),
            (
                set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
            (
                set("OTEL_EXPORTER_OTLP_ENDPOINT"),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
        ]
        .into_iter()
        .find_map(|(url, from)| Some(Endpoint { url: url?, from }))
        .filter(|_| !disabled);
        if let Some(e) = &endpoint {
            check_endpoint(e)?;
        }
        let service_name = set("OTEL_SERVICE_NAME")
            .or_else(|| file.and_then(|f| f.service_name.clone()))
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        Ok(TracingSettings {
            endpoint,
            service_name,
        })
    }

    /// One line for `serve --check-config`.
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Some(e) => format!(
                "OTLP to {} (from {}), service {}",
                e.url, e.from, self.service_name
            ),
            None => "off (no OTLP endpoint)".to_string(),
        }
    }
}

/// An endpoint is an `http://` or `https://` URL with a host (the collector's OTLP/gRPC
/// port, 4317 by convention).
fn check_endpoint(e: &Endpoint) -> Result<(), Failure> {
    let why = match e.url.trim().parse::<axum::http::Uri>() {
        Err(err) => Some(format!("not a URL ({err})")),
        Ok(uri) => match (uri.scheme_str(), uri.host()) {
            (Some("http" | "https"), Some(host)) if !host.is_empty() => None,
            (Some("http" | "https"), _) => Some("no host".to_string()),
            _ => Some("the scheme must be http:// or https://".to_string()),
        },
    };
    match why {
        None => Ok(()),
        Some(why) => Err(Failure::usage(format!(
            "{} = {:?}: {why} (expected the collector's OTLP/gRPC address, like \
             http://127.0.0.1:4317)",
            e.from, e.url
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn file(endpoint: Option<&str>, service: Option<&str>) -> TracingFile {
        TracingFile {
            otlp_endpoint: endpoint.map(str::to_string),
            service_name: service.map(str::to_string),
        }
    }

    #[test]
    fn nothing_configured_exports_nothing() {
        let s = TracingSettings::resolve(None, env(&[])).expect("resolve");
        assert_eq!(s.endpoint, None);
        assert_eq!(s.service_name, "clusterlimit");
        assert_eq!(s.describe(), "off (no OTLP endpoint)");
    }

    #[test]
    fn the_config_wins_over_the_environment_and_the_service_name_env_over_the_config() {
        let f = file(Some("http://collector:4317"), Some("edge"));
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4317"),
            ("OTEL_SERVICE_NAME", "from-env"),
        ]);
        let s = TracingSettings::resolve(Some(&f), e).expect("resolve");
        let endpoint = s.endpoint.expect("an endpoint");
        assert_eq!(endpoint.url, "http://collector:4317");
        assert_eq!(endpoint.from, "config [tracing] otlp_endpoint");
        assert_eq!(s.service_name, "from-env");
        let s = TracingSettings::resolve(Some(&f), env(&[])).expect("resolve");
        assert_eq!(s.service_name, "edge");
    }

    #[test]
    fn the_environment_names_the_endpoint_when_the_config_does_not() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:4317"),
        ]);
        let s = TracingSettings::resolve(None, e).expect("resolve");
        assert_eq!(
            s.endpoint.map(|e| e.url).as_deref(),
            Some("https://traces:4317")
        );
        let s = TracingSettings::resolve(
            None,
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317")]),
        )
        .expect("resolve");
        assert_eq!(
            s.endpoint.map(|e| e.from),
            Some("OTEL_EXPORTER_OTLP_ENDPOINT")
        );
    }

    #[test]
    fn otel_sdk_disabled_turns_the_export_off() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        let s = TracingSettings::resolve(None, e).expect("resolve");
        assert_eq!(s.endpoint, None);
    }

    #[test]
    fn a_bad_endpoint_is_refused_naming_the_setting() {
        for (url, why) in [
            ("collector:4317", "scheme"),
            ("grpc://collector:4317", "scheme"),
            ("http://", "not a URL"),
            ("http://exa mple:4317", "not a URL"),
        ] {
            let f = file(Some(url), None);
            let err = TracingSettings::resolve(Some(&f), env(&[]))
                .err()
                .unwrap_or_else(|| panic!("{url:?} was accepted"));
            let text = err.message;
            assert!(
                text.contains("config [tracing] otlp_endpoint") && text.contains(why),
                "{url:?}: {text}"
            );
        }
        let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")]);
        let err = TracingSettings::resolve(None, e).expect_err("refused");
        assert!(err.message.contains("OTEL_EXPORTER_OTLP_ENDPOINT"));
    }
}
