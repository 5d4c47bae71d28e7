//! The trace export of `serve`, when an OTLP endpoint is configured (`otel_settings.rs`): the
//! library's and the sidecar's `tracing` spans, through `tracing-opentelemetry`, batched by the
//! SDK and sent over OTLP/gRPC. Without an endpoint none of this exists: no layer is installed
//! and the spans, at DEBUG, are never created at the default log level.

use super::flags::ServeArgs;
use super::otel_settings::TracingSettings;
use crate::common::Failure;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::{Layer, Registry};

/// How long the last spans get to reach the collector at shutdown.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// The subscriber layer that exports spans, boxed: `cli/logging.rs` stacks it under the log lines.
pub type ExportLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// A running export: its layer for the subscriber, and what flushes it at shutdown.
pub struct TraceExport {
    provider: SdkTracerProvider,
    endpoint: String,
}

/// The export `args` configure (their config's `[tracing]`, the OTEL_* environment), or
/// `None`. Call inside the runtime: the gRPC channel lives on it. Errors exit 64.
pub fn start(args: &ServeArgs) -> Result<Option<TraceExport>, Failure> {
    if args.check_config {
        return Ok(None); // checked with the rest of the settings, nothing sent
    }
    let settings = super::settings::tracing_of(args)?;
    start_with(&settings)
}

fn start_with(settings: &TracingSettings) -> Result<Option<TraceExport>, Failure> {
    let Some(endpoint) = &settings.endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.url.clone())
        .build()
        .map_err(|e| {
            Failure::usage(format!(
                "{} = {:?}: cannot export traces there: {e}",
                endpoint.from, endpoint.url
            ))
        })?;
    let exporter = Reported {
        inner: exporter,
        endpoint: endpoint.url.clone(),
        failing: AtomicBool::new(false),
    };
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    Ok(Some(TraceExport {
        provider,
        endpoint: endpoint.url.clone(),
    }))
}

impl TraceExport {
    /// The layer to install: clusterlimit's own spans (not the transports', nor the
    /// exporter's own gRPC calls, which would trace themselves), and its INFO and above events
    /// inside them as span events.
    pub fn layer(&self) -> ExportLayer {
        let tracer = self.provider.tracer("clusterlimit");
        let ours = filter_fn(|meta| {
            let target = meta.target();
            (target == "clusterlimit" || target.starts_with("clusterlimit::"))
                && (meta.is_span() || *meta.level() <= tracing::Level::INFO)
        });
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // The span names say where; the attributes stay what docs/operations.md lists.
            .with_threads(false)
            .with_location(false)
            .with_filter(ours);
        Box::new(layer)
    }

    /// Sends the spans still queued (bounded by [`FLUSH_TIMEOUT`]) and stops the export. Call
    /// off the runtime's threads while the runtime still runs: the last batch goes over it.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            tracing::warn!(
                "could not send the last traces to the collector at {} at shutdown ({}); \
                 they are lost",
                self.endpoint,
                reason(&e)
            );
        }
    }
}

/// The OTLP exporter, logging when the collector stops answering (once, until it answers
/// again): spans are dropped meanwhile, requests are never held up or failed by it.
#[derive(Debug)]
struct Reported<E> {
    inner: E,
    endpoint: String,
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for Reported<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        match &result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                "cannot send traces to the collector at {} ({}): {spans} spans dropped, and \
                 more until it answers; requests are served as usual",
                self.endpoint,
                reason(e)
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => tracing::info!(
                "the trace collector at {} answers again; traces are sent",
                self.endpoint
            ),
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An export error in words: the exporter's text without its client's type name.
fn reason(e: &OTelSdkError) -> String {
    match e {
        OTelSdkError::Timeout(d) => format!("no answer within {}", humantime::format_duration(*d)),
        OTelSdkError::AlreadyShutdown => "the export had already stopped".to_string(),
        OTelSdkError::InternalFailure(text) => match text.split_once("gRPC code: ") {
            Some((_, rest)) => format!("gRPC {rest}"),
            None => text.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_errors_read_without_type_names() {
        let e = OTelSdkError::InternalFailure(
            "TonicTracesClient export failed with gRPC code: Unavailable: tcp connect error"
                .to_string(),
        );
        assert_eq!(reason(&e), "gRPC Unavailable: tcp connect error");
        assert_eq!(
            reason(&OTelSdkError::Timeout(Duration::from_secs(10))),
            "no answer within 10s"
        );
    }
}
