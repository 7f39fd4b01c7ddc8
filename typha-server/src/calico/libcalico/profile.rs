//! The v3 `Profile` the felix syncer sends beside a profile's v1 rules and labels (Felix reads
//! it for the labels it applies: namespace and service account labels), written from the
//! profile's labels KV and its tail ([`ProfileDetail`](typha_protocol::model::ProfileDetail)):
//! metadata (uid, creation time, labels, annotations) and `spec` (`ingress`, `egress`,
//! `labelsToApply`, each `omitempty`). A value from a server that predates the tail has only
//! the labels: the v3 Profile then has no rules and no metadata beyond its name.

use typha_protocol::model::{ProfileLabels, ResourceDetail};

use super::json::Escape;
use super::resource::{json_text, v3_object_with};

/// The v3 Profile `name` for its labels KV `p`.
pub(super) fn v3_profile(name: &str, p: &ProfileLabels) -> Vec<u8> {
    let d = &p.detail;
    let meta = ResourceDetail {
        generation: 0,
        uid: d.uid.clone(),
        creation_timestamp: d.creation_timestamp.clone(),
        annotations: d.annotations.clone(),
    };
    v3_object_with("Profile", name, None, &d.labels, &meta, |o| {
        o.field("spec").object(|s| {
            if !d.ingress_json.is_empty() {
                json_text(s.field("ingress"), &d.ingress_json);
            }
            if !d.egress_json.is_empty() {
                json_text(s.field("egress"), &d.egress_json);
            }
            if !p.labels.is_empty() {
                s.field("labelsToApply")
                    .string_map(&p.labels, Escape::Jsoniter);
            }
        })
    })
}
