//! `/metrics`: a Prometheus registry in the Prometheus text format, version 0.0.4, the format
//! Go's client (and so Calico's Typha and Felix) serves.
//!
//! Names are exposed exactly as registered: a counter registered as `typha_updates_skipped` is
//! the sample `typha_updates_skipped`, as in Typha (OpenMetrics would append `_total`). Our own
//! counters are registered with the `_total` suffix Prometheus' conventions ask for.
//!
//! The metric types are the `prometheus` crate's; it has no summary, so [`Summary`] is ours
//! (quantiles over a sliding window, as Go's). The helpers ([`counter`], [`gauge`],
//! [`histogram`], [`summary`], ...) create a metric and register it in one call.
//!
//! [`ProcessCollector`] adds the `process_*` metrics every exporter has (CPU, memory, file
//! descriptors, start time), read from `/proc/self` at scrape time.
//!
//! Files: `summary.rs` (the summary), `quantiles.rs` (the quantile stream it keeps per step
//! of its window), `process.rs` (the process metrics); this file: the response and the
//! helpers.

mod process;
mod quantiles;
mod summary;

use http::{Response, StatusCode, header};
use prometheus::core::Collector;
use prometheus::{Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge};
use prometheus::{GaugeVec, IntGaugeVec, Opts, Registry, TextEncoder};

pub use process::ProcessCollector;
pub use summary::{
    CALICO_OBJECTIVES, DEFAULT_AGE_BUCKETS, DEFAULT_MAX_AGE, Summary, SummaryError, SummaryOpts,
};

/// The content type of the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The registry in the Prometheus text format 0.0.4 (see [`CONTENT_TYPE`]); 500 with the
/// reason if it cannot be encoded. An `http::Response`, so any HTTP server (axum's handlers
/// among them) can return it.
pub fn metrics_response(registry: &Registry) -> Response<String> {
    let (status, content_type, body) = match encode(registry) {
        Ok(body) => (StatusCode::OK, CONTENT_TYPE, body),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            e.to_string(),
        ),
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

/// The registry's families in the text format 0.0.4, sorted by name.
pub fn encode(registry: &Registry) -> Result<String, prometheus::Error> {
    let families = registry.gather();
    let mut body = String::with_capacity(8 << 10);
    TextEncoder::new().encode_utf8(&families, &mut body)?;
    Ok(body)
}

// The helpers below create metrics from names and help texts that are literals in this
// workspace, and every registry that uses them is encoded by a test: a name the exposition
// format refuses is a bug those tests catch, not a run-time condition.

/// Registers `c` in `r`. A second metric of the same name (two clients given one registry) is
/// not exposed; that is logged, and the metric still counts.
pub fn register<C: Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        tracing::error!(error = %e, "a metric could not be registered; it is not exposed");
    }
    c
}

/// A counter, registered.
#[allow(clippy::expect_used)] // A literal name and help: see above.
pub fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    register(r, IntCounter::new(name, help).expect("valid counter name"))
}

/// A counter with labels, registered.
#[allow(clippy::expect_used)] // A literal name and help: see above.
pub fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(
        r,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter name"),
    )
}

/// An integer gauge, registered.
#[allow(clippy::expect_used)] // A literal name and help: see above.
pub fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    register(r, IntGauge::new(name, help).expect("valid gauge name"))
}

/// An integer gauge with labels, registered.
#[allow(clippy::expect_used)] // A literal name and help: see above.
pub fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(
        r,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge name"),
    )
}

/// A floating-point gauge, registered.
#[allow(clippy::expect_used)] // A literal name and help: see above.
pub fn float_gauge(r: &Registry, name: &str, help: &str) -> Gauge {
    register(r, Gauge::new(name, help).expect("valid gauge name"))
}

/// A floating-point gauge with labels, registered.
#[allow(clippy::expect_used)] // A literal name and help: see above.
pub fn float_gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    register(
        r,
        GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge name"),
    )
}

/// A histogram with these bucket upper bounds (`+Inf` is implied), registered.
#[allow(clippy::expect_used)] // A literal name and help, buckets made in code: see above.
pub fn histogram(r: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    register(
        r,
        Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
            .expect("valid histogram"),
    )
}

/// The process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...),
/// registered: read from `/proc/self` at each scrape.
pub fn register_process_metrics(r: &Registry) {
    register(r, ProcessCollector::new());
}

/// A summary, registered.
#[allow(clippy::expect_used)] // Literal names, help and objectives: see above.
pub fn summary(r: &Registry, opts: SummaryOpts) -> Summary {
    register(r, Summary::new(opts).expect("valid summary"))
}

/// `count` bucket bounds from `start`, each `factor` times the last.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    std::iter::successors(Some(start), |b| Some(b * factor))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests;
