//! `/metrics`: a Prometheus registry as an HTTP response.

use http::{Response, StatusCode, header};
use prometheus_client::registry::Registry;

/// The registry in the OpenMetrics text format; 500 with the reason if it cannot be encoded.
/// An `http::Response`, so any HTTP server (axum's handlers among them) can return it.
pub fn metrics_response(registry: &Registry) -> Response<String> {
    let mut body = String::new();
    let (status, content_type) =
        match prometheus_client::encoding::text::encode(&mut body, registry) {
            Ok(()) => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            ),
            Err(e) => {
                body = e.to_string();
                (StatusCode::INTERNAL_SERVER_ERROR, "text/plain")
            }
        };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}
