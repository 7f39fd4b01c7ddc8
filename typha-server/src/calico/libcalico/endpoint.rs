//! Workload and host endpoints as libcalico-go's `model.WorkloadEndpoint` and
//! `model.HostEndpoint` (libcalico-go/lib/backend/model/workloadendpoint.go, hostendpoint.go).

use typha_protocol::model::{
    EndpointPort, HostEndpoint, HostEndpointKey, IpNat, WorkloadEndpoint, WorkloadEndpointKey,
};

use super::json::{Escape, Json};
use super::path::{CalicoKey, go_cidr, go_ip};
use super::rule::protocol;

pub(super) fn workload_endpoint_key(k: &WorkloadEndpointKey) -> CalicoKey {
    CalicoKey::WorkloadEndpoint {
        host: k.hostname.clone(),
        orchestrator: k.orchestrator.clone(),
        workload: k.workload.clone(),
        endpoint: k.endpoint.clone(),
    }
}

pub(super) fn host_endpoint_key(k: &HostEndpointKey) -> CalicoKey {
    CalicoKey::HostEndpoint {
        host: k.hostname.clone(),
        endpoint: k.endpoint.clone(),
    }
}

/// `model.WorkloadEndpoint`. Fields without `omitempty` (`mac`, `profile_ids`, `ipv4_nets`,
/// `ipv6_nets`) are written as `null` when unset or empty, as Go writes a nil pointer or
/// slice; `labels` is always an object, because Calico's processor always builds the map.
/// `annotations` and `qosControls` are not in our model and are left out (as Go leaves them
/// out when empty).
pub(super) fn workload_endpoint(v: &WorkloadEndpoint) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        o.str("state", &v.state);
        o.str("name", &v.name);
        o.str("active_instance_id", &v.active_instance_id);
        match &v.mac {
            Some(m) => o.field("mac").string(&m.to_string(), Escape::Std),
            None => o.field("mac").null(),
        }
        o.strings_or_null("profile_ids", &v.profile_ids);
        let nets = |j: &mut Json, nets: Vec<String>| {
            if nets.is_empty() {
                j.null();
            } else {
                j.strings(&nets, Escape::Std);
            }
        };
        nets(
            o.field("ipv4_nets"),
            v.ipv4_nets.iter().map(|n| go_cidr(&(*n).into())).collect(),
        );
        nets(
            o.field("ipv6_nets"),
            v.ipv6_nets.iter().map(|n| go_cidr(&(*n).into())).collect(),
        );
        if !v.ipv4_nat.is_empty() {
            ip_nats(o.field("ipv4_nat"), &v.ipv4_nat);
        }
        if !v.ipv6_nat.is_empty() {
            ip_nats(o.field("ipv6_nat"), &v.ipv6_nat);
        }
        // uniquelabels.Map marshals itself with encoding/json.
        o.field("labels").string_map(&v.labels, Escape::Std);
        if let Some(g) = v.ipv4_gateway {
            o.field("ipv4_gateway")
                .string(&go_ip(g.into()), Escape::Std);
        }
        if let Some(g) = v.ipv6_gateway {
            o.field("ipv6_gateway")
                .string(&go_ip(g.into()), Escape::Std);
        }
        if !v.ports.is_empty() {
            ports(o.field("ports"), &v.ports);
        }
        o.str_ne("generate_name", &v.generate_name);
        if !v.allow_spoofed_source_prefixes.is_empty() {
            let nets: Vec<String> = v
                .allow_spoofed_source_prefixes
                .iter()
                .map(go_cidr)
                .collect();
            o.field("allow_spoofed_source_ips")
                .strings(&nets, Escape::Std);
        }
    });
    j.into_bytes()
}

/// `model.HostEndpoint`. Calico builds its labels with `uniquelabels.Make` of the resource's
/// labels, which is `null` for a resource without labels; we write `null` for empty labels.
pub(super) fn host_endpoint(v: &HostEndpoint) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        o.str_ne("name", &v.name);
        if !v.expected_ipv4_addrs.is_empty() {
            let a: Vec<String> = v
                .expected_ipv4_addrs
                .iter()
                .map(|a| go_ip((*a).into()))
                .collect();
            o.field("expected_ipv4_addrs").strings(&a, Escape::Std);
        }
        if !v.expected_ipv6_addrs.is_empty() {
            let a: Vec<String> = v
                .expected_ipv6_addrs
                .iter()
                .map(|a| go_ip((*a).into()))
                .collect();
            o.field("expected_ipv6_addrs").strings(&a, Escape::Std);
        }
        labels_or_null(o.field("labels"), &v.labels);
        o.strings_ne("profile_ids", &v.profile_ids);
        if !v.ports.is_empty() {
            ports(o.field("ports"), &v.ports);
        }
    });
    j.into_bytes()
}

/// A `uniquelabels.Map` made from a map that is nil when empty.
pub(super) fn labels_or_null(j: &mut Json, labels: &typha_protocol::model::Labels) {
    if labels.is_empty() {
        j.null();
    } else {
        j.string_map(labels, Escape::Std);
    }
}

/// `[]model.IPNAT`: `{"int_ip", "ext_ip"}`.
fn ip_nats(j: &mut Json, nats: &[IpNat]) {
    j.array(nats, |j, n| {
        j.object(|o| {
            o.field("int_ip").string(&go_ip(n.int_ip), Escape::Std);
            o.field("ext_ip").string(&go_ip(n.ext_ip), Escape::Std);
        })
    });
}

/// `[]model.EndpointPort`: `{"name", "protocol", "port"}`, the protocol in Calico's v1 form
/// (lower case, or a number).
fn ports(j: &mut Json, ports: &[EndpointPort]) {
    j.array(ports, |j, p| {
        j.object(|o| {
            o.str("name", &p.name);
            protocol(o.field("protocol"), p.protocol);
            o.field("port").uint(u64::from(p.port));
        })
    });
}
