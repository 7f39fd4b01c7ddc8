//! Kubernetes objects as Calico v3 resources, the way Calico's Kubernetes datastore driver
//! makes them (see the parent module for the list).

use std::net::IpAddr;

use crate::calico::v3::{k8s_cluster_policy, k8s_policy};

use super::*;

/// A Calico kind's resource id: namespaced or global as the kind is.
fn resource_id(kind: Kind, namespace: &str, name: &str) -> ResourceId {
    if kind.is_namespaced() {
        ResourceId::namespaced(kind, namespace.to_owned(), name.to_owned())
    } else {
        ResourceId::global(kind, name.to_owned())
    }
}

/// A Calico kind's resource id and the start of its v3 metadata: name, the namespace of a
/// namespaced kind, labels.
fn id_and_metadata(
    kind: Kind,
    namespace: &str,
    name: &str,
    labels: Map<String, Value>,
) -> (ResourceId, Value) {
    let metadata = if kind.is_namespaced() {
        json!({"name": name, "namespace": namespace, "labels": labels})
    } else {
        json!({"name": name, "labels": labels})
    };
    (resource_id(kind, namespace, name), metadata)
}

/// What an object is, and the resource it becomes (`None`: nothing to serve).
pub(super) fn convert(c: Conversion, o: &DynamicObject) -> (Option<ResourceId>, Option<Item>) {
    let meta = o.meta();
    let Some(name) = meta.name.clone() else {
        let item = Err(Invalid {
            id: None,
            reason: "object without a name".into(),
        });
        return (None, Some(item));
    };
    let namespace = meta.namespace.clone().unwrap_or_default();
    let labels: Map<String, Value> = meta
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let (id, doc) = match c {
        Conversion::Crd(kind, CalicoGroup::V3) => {
            // The object is the v3 resource, stored as Calico's v3 API writes it: Calico's
            // driver takes it as it is (it converts only `crd.projectcalico.org/v1` objects),
            // so its name, labels, uid and annotations are the object's own.
            let (id, mut metadata) = id_and_metadata(kind, &namespace, &name, labels);
            if let Some(m) = metadata.as_object_mut() {
                v3_crd_metadata(o, kind, m);
            }
            let spec = o.data.get("spec").cloned().unwrap_or(Value::Null);
            (id, v3_doc(kind, metadata, spec))
        }
        Conversion::Crd(kind, CalicoGroup::V1) => {
            // What Calico's own writers (calicoctl, Calico's API server) store: the v3 name,
            // labels and annotations in one annotation, the CRD's labels cleared but for
            // Calico's own (libcalico-go's ConvertCalicoResourceToK8sResource).
            let (name, labels, stored) = match calico_metadata(o, kind, &name, labels) {
                Ok(v) => v,
                Err(reason) => {
                    let id = resource_id(kind, &namespace, &name);
                    let item = Err(Invalid {
                        id: Some(id.clone()),
                        reason,
                    });
                    return (Some(id), Some(item));
                }
            };
            let (id, mut metadata) = id_and_metadata(kind, &namespace, &name, labels);
            if let Some(m) = metadata.as_object_mut() {
                crd_metadata(o, stored.as_ref(), m);
                // Raised by the API server on every change of the spec; Calico's clients
                // compare it (the node status reporter tells a changed request from its own
                // write by it). Calico's driver loses it when the metadata annotation is there
                // (and the reporter then takes no spec change); we keep it.
                if let Some(g) = o.metadata.generation {
                    m.insert("generation".into(), g.into());
                }
            }
            // Felix honours `config.projectcalico.org/<Name>` annotations on these.
            if kind == Kind::FelixConfiguration
                && let Some(m) = metadata.as_object_mut()
            {
                m.insert("annotations".into(), crd_annotations(o));
            }
            let spec = o.data.get("spec").cloned().unwrap_or(Value::Null);
            (id, v3_doc(kind, metadata, spec))
        }
        Conversion::Namespace => {
            let mut apply: Map<String, Value> = labels
                .into_iter()
                .map(|(k, v)| (format!("pcns.{k}"), v))
                .collect();
            apply.insert("pcns.projectcalico.org/name".into(), name.clone().into());
            let profile = format!("kns.{name}");
            let spec = json!({
                "ingress": [{"action": "Allow"}],
                "egress": [{"action": "Allow"}],
                "labelsToApply": apply,
            });
            let id = ResourceId::global(Kind::Profile, profile.clone());
            (
                id,
                v3_doc(Kind::Profile, profile_metadata(o, profile), spec),
            )
        }
        Conversion::ServiceAccount => {
            let mut apply: Map<String, Value> = labels
                .into_iter()
                .map(|(k, v)| (format!("pcsa.{k}"), v))
                .collect();
            apply.insert("pcsa.projectcalico.org/name".into(), name.clone().into());
            let profile = format!("ksa.{namespace}.{name}");
            let id = ResourceId::global(Kind::Profile, profile.clone());
            let spec = json!({"labelsToApply": apply});
            (
                id,
                v3_doc(Kind::Profile, profile_metadata(o, profile), spec),
            )
        }
        Conversion::Pod(prefix) => {
            let node = at(&o.data, "/spec/nodeName").as_str().unwrap_or_default();
            let id = ResourceId::namespaced(
                Kind::WorkloadEndpoint,
                namespace.clone(),
                workload_endpoint_name(node, &name),
            );
            match pod_spec(o, &namespace, &name, labels, prefix) {
                Ok(Some((metadata, spec))) => (id, v3_doc(Kind::WorkloadEndpoint, metadata, spec)),
                // Not networked by Calico (yet, or any more): nothing to serve.
                Ok(None) => return (Some(id), None),
                Err(reason) => {
                    let invalid = Invalid {
                        id: Some(id.clone()),
                        reason,
                    };
                    return (Some(id), Some(Err(invalid)));
                }
            }
        }
        Conversion::Node { pod_cidr } => {
            let id = ResourceId::global(Kind::Node, name.clone());
            let spec = node_spec(o, pod_cidr);
            let metadata = node_metadata(o, &name);
            let mut doc = v3_doc(Kind::Node, metadata, spec);
            if let Some(d) = doc.as_object_mut() {
                d.insert("status".into(), node_status(o));
            }
            (id, doc)
        }
        Conversion::Service => {
            // Felix reads a Service's name, namespace and spec; the rest (status, annotations,
            // managed fields) is not carried.
            let kind = Kind::KubernetesService;
            let id = ResourceId::namespaced(kind, namespace.clone(), name.clone());
            let metadata = k8s_metadata(
                o,
                json!({"name": name, "namespace": namespace, "labels": labels}),
            );
            let spec = match o.data.get("spec") {
                Some(v @ Value::Object(_)) => v.clone(),
                _ => Value::Object(Map::new()),
            };
            (id, v3_doc(kind, metadata, spec))
        }
        Conversion::EndpointSlice => {
            let kind = Kind::KubernetesEndpointSlice;
            let id = ResourceId::namespaced(kind, namespace.clone(), name.clone());
            let metadata = k8s_metadata(
                o,
                json!({"name": name, "namespace": namespace, "labels": labels}),
            );
            let mut fields = Map::new();
            for f in ["addressType", "endpoints", "ports"] {
                fields.insert(f.into(), o.data.get(f).cloned().unwrap_or(Value::Null));
            }
            (id, v3_doc(kind, metadata, Value::Object(fields)))
        }
        Conversion::LiveMigration => {
            let id = ResourceId::namespaced(Kind::LiveMigration, namespace.clone(), name.clone());
            match live_migration(o, &namespace, &name, labels) {
                Some((metadata, spec)) => (id, v3_doc(Kind::LiveMigration, metadata, spec)),
                // Not (or no longer) under way: no LiveMigration.
                None => return (Some(id), None),
            }
        }
        Conversion::ClusterNetworkPolicy => {
            let kind = Kind::KubernetesClusterNetworkPolicy;
            let id = ResourceId::global(kind, name.clone());
            match k8s_cluster_policy::calico_spec(at(&o.data, "/spec")) {
                Some(spec) => (id, v3_doc(kind, json!({"name": name}), spec)),
                // Calico's tombstone (a tier it does not know, no subject): nothing to serve.
                None => return (Some(id), None),
            }
        }
        Conversion::NetworkPolicy => {
            let full = format!("knp.default.{name}");
            let kind = Kind::KubernetesNetworkPolicy;
            let id = ResourceId::namespaced(kind, namespace.clone(), full.clone());
            let metadata = json!({"name": full, "namespace": namespace});
            (
                id,
                v3_doc(
                    kind,
                    metadata,
                    k8s_policy::calico_spec(at(&o.data, "/spec")),
                ),
            )
        }
    };
    // The object's own version: what Calico's driver gives its KVs as their revision.
    let mut doc = doc;
    if let (Some(rv), Some(m)) = (
        meta.resource_version.as_ref(),
        doc.pointer_mut("/metadata").and_then(Value::as_object_mut),
    ) {
        m.insert("resourceVersion".into(), rv.clone().into());
    }
    let mut item = Resource::from_json(doc).map_err(|e| Invalid {
        id: Some(id.clone()),
        reason: e.to_string(),
    });
    if let (Conversion::Node { pod_cidr: true }, Ok(r)) = (c, item.as_mut())
        && let crate::calico::v3::Spec::Node(n) = &mut r.spec
    {
        n.status.pod_cidr_blocks = true;
    }
    (Some(id), Some(item.map(std::sync::Arc::new)))
}

/// The VirtualMachineInstanceMigration phases in which Calico's driver makes a LiveMigration:
/// from Scheduling, so that Felix knows the target pod is one before or as its endpoint
/// arrives, until the migration succeeds; a failed one stays, keeping the target pod's routes
/// as they were until KubeVirt removes the pod.
const MIGRATION_PHASES: [&str; 6] = [
    "Scheduling",
    "Scheduled",
    "PreparingTarget",
    "TargetReady",
    "Running",
    "Failed",
];

/// KubeVirt's labels on a target virt-launcher pod: the VMI's name (KubeVirt 1.7 and later),
/// the same in KubeVirt's older label (the VM's hostname, truncated without a hash, which is
/// the VMI name in practice), and the uid of the migration that made the pod.
const VMI_ID_LABEL: &str = "vmi.kubevirt.io/id";
const VM_NAME_LABEL: &str = "vm.kubevirt.io/name";
const MIGRATION_JOB_LABEL: &str = "kubevirt.io/migrationJobUID";

/// A VirtualMachineInstanceMigration's LiveMigration (metadata, spec), as Calico v3.32's
/// Kubernetes driver makes it, or `None` when there is none: a phase not in
/// [`MIGRATION_PHASES`], no `spec.vmiName`, or no uid. The target selects the target pod by
/// either VMI name label and the migration's uid; the source is
/// `<namespace>/<status.migrationState.sourcePod>` once KubeVirt has set it (not yet while
/// scheduling). Metadata: name, namespace, uid, creation time, labels and annotations.
pub(super) fn live_migration(
    o: &DynamicObject,
    namespace: &str,
    name: &str,
    labels: Map<String, Value>,
) -> Option<(Value, Value)> {
    let phase = at(&o.data, "/status/phase").as_str().unwrap_or_default();
    if !MIGRATION_PHASES.contains(&phase) {
        return None;
    }
    let vmi = at(&o.data, "/spec/vmiName")
        .as_str()
        .filter(|v| !v.is_empty())?;
    let meta = o.meta();
    let uid = meta.uid.as_deref().filter(|u| !u.is_empty())?;
    let selector = format!(
        "({VMI_ID_LABEL} == '{vmi}' || {VM_NAME_LABEL} == '{vmi}') && {MIGRATION_JOB_LABEL} == '{uid}'"
    );
    let mut spec = json!({"target": {"selector": selector}});
    if let Some(pod) = at(&o.data, "/status/migrationState/sourcePod")
        .as_str()
        .filter(|p| !p.is_empty())
        && let Some(s) = spec.as_object_mut()
    {
        s.insert(
            "source".into(),
            json!({"workload": {"orchestratorID": "k8s", "workloadID": format!("{namespace}/{pod}")}}),
        );
    }
    let mut metadata = json!({"name": name, "namespace": namespace, "uid": uid, "labels": labels});
    if let Some(m) = metadata.as_object_mut() {
        if let Some(t) = &meta.creation_timestamp {
            // k8s-openapi writes it as Go does: UTC, whole seconds.
            m.insert("creationTimestamp".into(), json!(t));
        }
        if let Some(a) = &meta.annotations {
            m.insert("annotations".into(), json!(a));
        }
    }
    Some((metadata, spec))
}

/// The annotation in which Calico's writers keep a resource's v3 metadata.
const METADATA_ANNOTATION: &str = "projectcalico.org/metadata";

/// What [`calico_metadata`] reads: the v3 name, the labels, and the metadata annotation's
/// contents when there is one.
type CalicoMetadata = (String, Map<String, Value>, Option<Value>);

/// A Calico CRD's v3 name and labels, as Calico's Kubernetes driver reads them
/// (`ConvertK8sResourceToCalicoResource`): without a `projectcalico.org/metadata` annotation,
/// the CRD's own; with one, the labels it holds merged over the CRD's (which Calico's writers
/// clear but for `projectcalico.org/` ones), and the name it holds, or, when it holds none, the
/// CRD's name, without a `default.` prefix for the four policy kinds in tier `default` (the
/// name pre-3.30 Calico stored them under); and the annotation's contents, for the rest of the
/// metadata ([`crd_metadata`]). An annotation that is not JSON makes the resource invalid, as
/// in Calico.
fn calico_metadata(
    o: &DynamicObject,
    kind: Kind,
    name: &str,
    mut labels: Map<String, Value>,
) -> Result<CalicoMetadata, String> {
    let Some(text) = o
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(METADATA_ANNOTATION))
    else {
        return Ok((name.to_owned(), labels, None));
    };
    let meta: Value = serde_json::from_str(text)
        .map_err(|e| format!("annotation {METADATA_ANNOTATION} is not JSON: {e}"))?;
    for (k, v) in at(&meta, "/labels").as_object().into_iter().flatten() {
        labels.insert(k.clone(), v.clone());
    }
    let name = match at(&meta, "/name").as_str().filter(|n| !n.is_empty()) {
        Some(n) => n.to_owned(),
        None if matches!(
            kind,
            Kind::NetworkPolicy
                | Kind::GlobalNetworkPolicy
                | Kind::StagedNetworkPolicy
                | Kind::StagedGlobalNetworkPolicy
        ) && matches!(
            at(&o.data, "/spec/tier").as_str(),
            None | Some("" | "default")
        ) =>
        {
            name.strip_prefix("default.").unwrap_or(name).to_owned()
        }
        None => name.to_owned(),
    };
    Ok((name, labels, Some(meta)))
}

/// The rest of a Calico CRD's v3 metadata, as Calico's driver makes it
/// (`ConvertK8sResourceToCalicoResource`), into `m`: the CRD's uid converted ([`calico_uid`]);
/// the creation time the metadata annotation (`stored`) holds, else the CRD's; the CRD's
/// annotations but that one, with the annotation's own merged over them. Not carried:
/// `ownerReferences`, `finalizers` and `managedFields`, which Calico also passes on.
fn crd_metadata(o: &DynamicObject, stored: Option<&Value>, m: &mut Map<String, Value>) {
    if let Some(uid) = o.metadata.uid.as_deref().and_then(calico_uid) {
        m.insert("uid".into(), uid.into());
    }
    let stored_time = stored
        .and_then(|s| at(s, "/creationTimestamp").as_str())
        .filter(|t| !t.is_empty());
    match (stored_time, &o.metadata.creation_timestamp) {
        (Some(t), _) => {
            m.insert("creationTimestamp".into(), t.into());
        }
        // k8s-openapi writes it as Go does: UTC, whole seconds.
        (None, Some(t)) => {
            m.insert("creationTimestamp".into(), json!(t));
        }
        (None, None) => {}
    }
    let mut annotations: Map<String, Value> = o
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| *k != METADATA_ANNOTATION)
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let stored_annotations = stored.and_then(|s| at(s, "/annotations").as_object());
    for (k, v) in stored_annotations.into_iter().flatten() {
        if v.is_string() {
            annotations.insert(k.clone(), v.clone());
        }
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
}

/// The metadata of a `projectcalico.org/v3` CRD object, as Calico's driver passes it on, into
/// `m`: uid, creation time, generation and annotations as stored (a FelixConfiguration always
/// has annotations, as from the v1 group: Felix reads overrides there). Not carried, as from
/// the v1 group: `ownerReferences`, `finalizers` and `managedFields`.
fn v3_crd_metadata(o: &DynamicObject, kind: Kind, m: &mut Map<String, Value>) {
    let meta = &o.metadata;
    if let Some(uid) = meta.uid.as_deref().filter(|u| !u.is_empty()) {
        m.insert("uid".into(), uid.into());
    }
    if let Some(t) = &meta.creation_timestamp {
        // k8s-openapi writes it as Go does: UTC, whole seconds.
        m.insert("creationTimestamp".into(), json!(t));
    }
    if let Some(g) = meta.generation {
        m.insert("generation".into(), g.into());
    }
    let annotations: Map<String, Value> = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if !annotations.is_empty() || kind == Kind::FelixConfiguration {
        m.insert("annotations".into(), Value::Object(annotations));
    }
}

/// Calico's `ConvertUID`: the uid Calico gives a resource derived from a Kubernetes object
/// (a `crd.projectcalico.org/v1` resource, a profile made from a namespace or a service
/// account), so that the two never share one. Each byte of the UUID has its bits reversed,
/// but the 7th and 9th (version and variant); lower case. `None` for a uid that is not a
/// UUID in its usual form (the API server makes no other; Calico's driver would fail the
/// object, we leave the uid out).
pub(super) fn calico_uid(uid: &str) -> Option<String> {
    let b = uid.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b.get(i) != Some(&b'-')) {
        return None;
    }
    let hex: Vec<u8> = b.iter().copied().filter(|c| *c != b'-').collect();
    let mut bytes = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        let v = u8::from_str_radix(text, 16).ok()?;
        *bytes.get_mut(i)? = if i == 6 || i == 8 {
            v
        } else {
            v.reverse_bits()
        };
    }
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}",
        h.get(0..8)?,
        h.get(8..12)?,
        h.get(12..16)?,
        h.get(16..20)?,
        h.get(20..32)?
    ))
}

/// The metadata of the profile `name` Calico's driver makes of a namespace or a service
/// account (`NamespaceToProfile`, `ServiceAccountToProfile`): the object's uid converted
/// ([`calico_uid`]) and its creation time; no labels, no annotations.
fn profile_metadata(o: &DynamicObject, name: String) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), name.into());
    if let Some(uid) = o.metadata.uid.as_deref().and_then(calico_uid) {
        m.insert("uid".into(), uid.into());
    }
    if let Some(t) = &o.metadata.creation_timestamp {
        m.insert("creationTimestamp".into(), json!(t));
    }
    Value::Object(m)
}

/// `metadata` with what Calico's driver passes on of a Service's or an EndpointSlice's own
/// metadata (it passes the whole object) that is cheap to carry: uid, creation time and
/// generation. Left out: annotations (a Service's `kubectl.kubernetes.io/last-applied-
/// configuration` can be kilobytes), `ownerReferences` and `managedFields`.
fn k8s_metadata(o: &DynamicObject, mut metadata: Value) -> Value {
    if let Some(m) = metadata.as_object_mut() {
        if let Some(uid) = &o.metadata.uid {
            m.insert("uid".into(), uid.clone().into());
        }
        if let Some(t) = &o.metadata.creation_timestamp {
            m.insert("creationTimestamp".into(), json!(t));
        }
        if let Some(g) = o.metadata.generation {
            m.insert("generation".into(), g.into());
        }
    }
    metadata
}

/// The annotations in which calico-node keeps a Kubernetes node's Calico labels and
/// annotations (JSON maps).
const NODE_LABELS_ANNOTATION: &str = "projectcalico.org/labels";
const NODE_ANNOTATIONS_ANNOTATION: &str = "projectcalico.org/annotations";

/// A Kubernetes node's v3 Node metadata, as Calico's driver makes it (`K8sNodeToCalico`):
/// the node's uid (not converted) and creation time; the labels in its
/// `projectcalico.org/labels` annotation with the node's own over them; the annotations in its
/// `projectcalico.org/annotations` annotation, and `projectcalico.org/kube-labels`, the node's
/// own labels as libcalico-go's `json.Marshal` writes them. An annotation that is not a JSON
/// map of strings is ignored, as Calico ignores it (with a warning).
fn node_metadata(o: &DynamicObject, name: &str) -> Value {
    let meta = &o.metadata;
    let stored = |annotation: &str| -> Map<String, Value> {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(annotation))
            .and_then(|text| {
                serde_json::from_str::<std::collections::BTreeMap<String, String>>(text).ok()
            })
            .into_iter()
            .flatten()
            .map(|(k, v)| (k, Value::String(v)))
            .collect()
    };
    let mut labels = stored(NODE_LABELS_ANNOTATION);
    for (k, v) in meta.labels.iter().flatten() {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    let mut annotations = stored(NODE_ANNOTATIONS_ANNOTATION);
    annotations.insert(
        crate::calico::libcalico::KUBE_LABELS.into(),
        crate::calico::libcalico::go_string_map(meta.labels.as_ref()).into(),
    );
    let mut m = Map::new();
    m.insert("name".into(), name.into());
    if let Some(uid) = &meta.uid {
        m.insert("uid".into(), uid.clone().into());
    }
    if let Some(t) = &meta.creation_timestamp {
        m.insert("creationTimestamp".into(), json!(t));
    }
    m.insert("labels".into(), Value::Object(labels));
    m.insert("annotations".into(), Value::Object(annotations));
    Value::Object(m)
}

/// A custom resource's annotations as Calico's driver gives them to the v3 resource: the CRD's
/// own (but the metadata annotation), then those the metadata annotation holds.
fn crd_annotations(o: &DynamicObject) -> Value {
    let own = o.metadata.annotations.clone().unwrap_or_default();
    let mut out: Map<String, Value> = own
        .iter()
        .filter(|(k, _)| *k != METADATA_ANNOTATION)
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let stored = own
        .get(METADATA_ANNOTATION)
        .and_then(|t| serde_json::from_str::<Value>(t).ok());
    if let Some(Value::Object(a)) = stored.as_ref().map(|m| at(m, "/annotations")) {
        for (k, v) in a {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// Calico's workload endpoint name: `<node>-k8s-<pod>-eth0`, with `-` doubled in each part.
pub(super) fn workload_endpoint_name(node: &str, pod: &str) -> String {
    format!(
        "{}-k8s-{}-eth0",
        node.replace('-', "--"),
        pod.replace('-', "--")
    )
}

/// The pod's addresses as CIDRs, from where Calico's Kubernetes driver takes them, the first
/// that has any: `status.podIPs`, `status.podIP`, Calico's CNI annotations
/// `cni.projectcalico.org/podIPs` and `podIP`, then AWS's `vpc.amazonaws.com/pod-ips`. An
/// address that does not parse makes the endpoint invalid, in the conversion.
pub(super) fn pod_networks(o: &DynamicObject) -> Vec<String> {
    let annotation = |k: &str| {
        o.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .filter(|v| !v.is_empty())
    };
    let split = |list: &str| -> Vec<String> { list.split(',').map(String::from).collect() };
    let status: Vec<String> = at(&o.data, "/status/podIPs")
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| at(p, "/ip").as_str())
        .map(String::from)
        .collect();
    let ips = if !status.is_empty() {
        status
    } else if let Some(ip) = at(&o.data, "/status/podIP")
        .as_str()
        .filter(|s| !s.is_empty())
    {
        vec![ip.to_owned()]
    } else if let Some(list) = annotation("cni.projectcalico.org/podIPs") {
        split(list)
    } else if let Some(ip) = annotation("cni.projectcalico.org/podIP") {
        vec![ip.clone()]
    } else if let Some(list) = annotation("vpc.amazonaws.com/pod-ips") {
        split(list)
    } else {
        Vec::new()
    };
    ips.into_iter()
        .map(|ip| {
            if ip.contains('/') {
                ip
            } else if ip.contains(':') {
                format!("{ip}/128")
            } else {
                format!("{ip}/32")
            }
        })
        .collect()
}

/// A pod's floating IPs (`cni.projectcalico.org/floatingIPs`, a JSON list of addresses) as the
/// workload endpoint's 1:1 NATs, each onto the pod's address of its family, as Calico's driver
/// makes them: an annotation that is not such a list, or a pod address that is not a single
/// address, makes the endpoint invalid; an entry that is not an address is left to the
/// conversion, which skips it.
fn floating_ips(o: &DynamicObject, nets: &[String]) -> Result<Vec<Value>, String> {
    const KEY: &str = "cni.projectcalico.org/floatingIPs";
    let Some(a) = o.meta().annotations.as_ref().and_then(|a| a.get(KEY)) else {
        return Ok(Vec::new());
    };
    if nets.is_empty() {
        return Ok(Vec::new());
    }
    let ips: Option<Vec<String>> = serde_json::from_str(a)
        .map_err(|e| format!("{KEY}: {a:?} is not a JSON list of strings: {e}"))?;
    let (mut v4, mut v6) = (None, None);
    for n in nets {
        let net: ipnet::IpNet = n
            .parse()
            .map_err(|_| format!("pod address {n:?} is not a CIDR"))?;
        if net.prefix_len() != net.max_prefix_len() {
            return Err(format!("{KEY}: pod address {n:?} is not a single address"));
        }
        match net.addr() {
            a @ IpAddr::V4(_) => v4 = Some(a),
            a @ IpAddr::V6(_) => v6 = Some(a),
        }
    }
    Ok(ips
        .unwrap_or_default()
        .into_iter()
        .filter_map(|ip| {
            let internal = if ip.contains(':') { v6 } else { v4 }?;
            Some(json!({"internalIP": internal.to_string(), "externalIP": ip}))
        })
        .collect())
}

/// The source prefixes a pod may send from (`cni.projectcalico.org/allowedSourcePrefixes`, a
/// JSON list of CIDRs), masked; as in Calico's driver, an annotation that is not such a list,
/// or holds anything but CIDRs, makes the endpoint invalid.
fn allowed_source_prefixes(o: &DynamicObject) -> Result<Vec<String>, String> {
    const KEY: &str = "cni.projectcalico.org/allowedSourcePrefixes";
    let Some(a) = o
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(KEY))
        .filter(|a| !a.is_empty())
    else {
        return Ok(Vec::new());
    };
    let prefixes: Option<Vec<String>> = serde_json::from_str(a)
        .map_err(|e| format!("{KEY}: {a:?} is not a JSON list of strings: {e}"))?;
    prefixes
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            p.parse::<ipnet::IpNet>()
                .map(|n| n.trunc().to_string())
                .map_err(|_| format!("{KEY}: {p:?} is not a CIDR"))
        })
        .collect()
}

/// A pod's workload endpoint (metadata, spec), or `None` when Calico does not network it:
/// host-networked, not scheduled, finished, or without an address; an error when Calico's
/// driver cannot convert it (a bad floating IP or source prefix annotation).
pub(super) fn pod_spec(
    o: &DynamicObject,
    namespace: &str,
    name: &str,
    mut labels: Map<String, Value>,
    prefix: InterfacePrefix,
) -> Result<Option<(Value, Value)>, String> {
    let spec = at(&o.data, "/spec");
    if at(spec, "/hostNetwork").as_bool() == Some(true) {
        return Ok(None);
    }
    let Some(node) = at(spec, "/nodeName").as_str().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    if matches!(
        at(&o.data, "/status/phase").as_str(),
        Some("Succeeded" | "Failed")
    ) {
        return Ok(None);
    }
    let nets = pod_networks(o);
    if nets.is_empty() {
        return Ok(None);
    }
    let nats = floating_ips(o, &nets)?;
    let spoofable = allowed_source_prefixes(o)?;
    let sa = at(spec, "/serviceAccountName").as_str().unwrap_or_default();
    let mut profiles = vec![format!("kns.{namespace}")];
    labels.insert("projectcalico.org/namespace".into(), namespace.into());
    labels.insert("projectcalico.org/orchestrator".into(), "k8s".into());
    if !sa.is_empty() {
        profiles.push(format!("ksa.{namespace}.{sa}"));
        labels.insert("projectcalico.org/serviceaccount".into(), sa.into());
    }
    // Named ports of the containers and init containers, as Calico's driver maps them: TCP
    // (also when none is given), UDP and SCTP; a port of another protocol is left out.
    let ports: Vec<Value> = ["/containers", "/initContainers"]
        .iter()
        .flat_map(|list| at(spec, list).as_array().into_iter().flatten())
        .flat_map(|c| at(c, "/ports").as_array().into_iter().flatten())
        .filter_map(|p| {
            let name = at(p, "/name").as_str().filter(|n| !n.is_empty())?;
            let port = at(p, "/containerPort").as_u64().filter(|p| *p != 0)?;
            let protocol = match at(p, "/protocol").as_str().unwrap_or("") {
                "TCP" | "" => "tcp",
                "UDP" => "udp",
                "SCTP" => "sctp",
                _ => return None,
            };
            Some(json!({"name": name, "protocol": protocol, "port": port}))
        })
        .collect();
    let metadata = json!({
        "name": workload_endpoint_name(node, name),
        "namespace": namespace,
        "labels": labels,
    });
    let spec = json!({
        "orchestrator": "k8s",
        "node": node,
        "pod": name,
        "endpoint": "eth0",
        "serviceAccountName": sa,
        "interfaceName": interface_name(prefix, namespace, name),
        "ipNetworks": nets,
        "ipNATs": nats,
        "profiles": profiles,
        "ports": ports,
        "allowSpoofedSourcePrefixes": spoofable,
    });
    Ok(Some((metadata, spec)))
}

/// A Kubernetes node's Calico spec, as Calico's Kubernetes driver builds it from calico-node's
/// annotations and the node itself: BGP addresses, AS number and route reflector cluster,
/// tunnel addresses and MACs, WireGuard interface addresses, `orchRefs`, the addresses (the
/// BGP ones as `CalicoNodeIP`, then the node's internal and external ones) and interfaces.
/// An annotation whose value is not of its type is ignored, as Calico ignores it, rather than
/// making the node invalid.
///
/// With host-local IPAM (`pod_cidr`) and a pod CIDR, as Calico's driver then does: the IPIP
/// tunnel address is the pod CIDR's first address plus one (none for an IPv6 pod CIDR), and so
/// is the WireGuard IPv4 interface address when the node has a WireGuard public key; the
/// annotations for those are not read.
pub(super) fn node_spec(o: &DynamicObject, pod_cidr: bool) -> Value {
    let annotations = o.meta().annotations.clone().unwrap_or_default();
    let get = |k: &str| calico_annotation(o, k);
    let name = o.meta().name.clone().unwrap_or_default();
    let mut spec = Map::new();
    let (v4, v6) = (get("IPv4Address"), get("IPv6Address"));
    let host_local = at(&o.data, "/spec/podCIDR")
        .as_str()
        .filter(|c| pod_cidr && !c.is_empty())
        .map(static_tunnel_address);
    let mut bgp = Map::new();
    for (field, annotation) in [
        ("ipv4Address", "IPv4Address"),
        ("ipv6Address", "IPv6Address"),
        ("ipv4IPIPTunnelAddr", "IPv4IPIPTunnelAddr"),
        ("routeReflectorClusterID", "RouteReflectorClusterID"),
    ] {
        let v = match (field, &host_local) {
            ("ipv4IPIPTunnelAddr", Some(t)) => t.clone(),
            _ => get(annotation),
        };
        if !v.is_empty() {
            bgp.insert(field.into(), v.into());
        }
    }
    // A number, or the dotted form (`1.10`), as Calico's `numorstring.ASNumber` reads it.
    let asn = get("ASNumber");
    if serde_json::from_value::<crate::calico::v3::AsNumber>(Value::String(asn.clone())).is_ok() {
        bgp.insert("asNumber".into(), asn.into());
    }
    if !bgp.is_empty() {
        spec.insert("bgp".into(), Value::Object(bgp));
    }
    for (field, annotation) in [
        ("ipv4VXLANTunnelAddr", "IPv4VXLANTunnelAddr"),
        ("vxlanTunnelMACAddr", "VXLANTunnelMACAddr"),
        ("ipv6VXLANTunnelAddr", "IPv6VXLANTunnelAddr"),
        ("vxlanTunnelMACAddrV6", "VXLANTunnelMACAddrV6"),
    ] {
        let v = get(annotation);
        if !v.is_empty() {
            spec.insert(field.into(), v.into());
        }
    }
    spec.insert(
        "orchRefs".into(),
        json!([{"nodeName": name, "orchestrator": "k8s"}]),
    );
    let (wg4, wg6) = match &host_local {
        Some(t) if !get("WireguardPublicKey").is_empty() => (t.clone(), String::new()),
        Some(_) => (String::new(), String::new()),
        None => (
            get("IPv4WireguardInterfaceAddr"),
            get("IPv6WireguardInterfaceAddr"),
        ),
    };
    if !wg4.is_empty() || !wg6.is_empty() {
        spec.insert(
            "wireguard".into(),
            json!({"interfaceIPv4Address": wg4, "interfaceIPv6Address": wg6}),
        );
    }
    // Calico's order: the BGP addresses, then the Kubernetes internal and external ones.
    let mut addresses: Vec<Value> = [&v4, &v6]
        .into_iter()
        .filter(|a| !a.is_empty())
        .map(|a| json!({"address": a, "type": "CalicoNodeIP"}))
        .collect();
    addresses.extend(
        at(&o.data, "/status/addresses")
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| matches!(at(a, "/type").as_str(), Some("InternalIP" | "ExternalIP")))
            .map(|a| json!({"address": at(a, "/address"), "type": at(a, "/type")})),
    );
    spec.insert("addresses".into(), addresses.into());
    // `projectcalico.org/Interfaces`: a JSON list of {name, addresses}; Calico ignores it
    // when it does not parse, and drops addresses that are not IPs.
    if let Some(text) = annotations.get("projectcalico.org/Interfaces")
        && let Ok(Value::Array(list)) = serde_json::from_str::<Value>(text)
    {
        let interfaces: Vec<Value> = list
            .iter()
            .map(|i| {
                let addresses: Vec<&Value> = at(i, "/addresses")
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|a| a.as_str().is_some_and(|a| a.parse::<IpAddr>().is_ok()))
                    .collect();
                json!({"name": at(i, "/name"), "addresses": addresses})
            })
            .collect();
        spec.insert("interfaces".into(), interfaces.into());
    }
    Value::Object(spec)
}

/// calico-node's annotation `projectcalico.org/<name>` on a Kubernetes node, empty when absent
/// or not of its type.
fn calico_annotation(o: &DynamicObject, name: &str) -> String {
    let v = o
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(&format!("projectcalico.org/{name}")))
        .cloned()
        .unwrap_or_default();
    if annotation_valid(name, &v) {
        v
    } else {
        String::new()
    }
}

/// Whether a node annotation's value has its type (Calico's validators: an IPv4 or IPv6
/// address or network, a MAC, an AS number).
fn annotation_valid(name: &str, v: &str) -> bool {
    let net = |v: &str| {
        v.parse::<ipnet::IpNet>()
            .map(|n| n.addr())
            .or_else(|_| v.parse::<IpAddr>())
            .ok()
    };
    match name {
        "IPv4Address"
        | "IPv4IPIPTunnelAddr"
        | "RouteReflectorClusterID"
        | "IPv4VXLANTunnelAddr"
        | "IPv4WireguardInterfaceAddr" => v.is_empty() || net(v).is_some_and(|a| a.is_ipv4()),
        "IPv6Address" | "IPv6VXLANTunnelAddr" | "IPv6WireguardInterfaceAddr" => {
            v.is_empty() || net(v).is_some_and(|a| a.is_ipv6())
        }
        "VXLANTunnelMACAddr" | "VXLANTunnelMACAddrV6" => {
            v.is_empty() || v.parse::<typha_protocol::model::Mac>().is_ok()
        }
        _ => true,
    }
}

/// Host-local IPAM's tunnel address for a pod CIDR: its first address plus one (`10.244.1.0/24`
/// → `10.244.1.1`); empty for an IPv6 CIDR or one that does not parse (Calico then fails the
/// node; here it just has no tunnel address).
fn static_tunnel_address(cidr: &str) -> String {
    match cidr.parse::<ipnet::IpNet>().map(|n| n.addr()) {
        Ok(IpAddr::V4(a)) => std::net::Ipv4Addr::from(u32::from(a).wrapping_add(1)).to_string(),
        _ => String::new(),
    }
}

/// A Kubernetes node's Calico status: its WireGuard public keys (annotations) and pod CIDRs.
pub(super) fn node_status(o: &DynamicObject) -> Value {
    let get = |k: &str| calico_annotation(o, k);
    json!({
        "wireguardPublicKey": get("WireguardPublicKey"),
        "wireguardPublicKeyV6": get("WireguardPublicKeyV6"),
        "podCIDRs": at(&o.data, "/spec/podCIDRs").as_array().cloned().unwrap_or_default(),
    })
}

/// The value at a JSON pointer, `null` when absent.
pub(super) fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or(&Value::Null)
}

pub(super) fn v3_doc(kind: Kind, metadata: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "projectcalico.org/v3",
        "kind": kind.as_str(),
        "metadata": metadata,
        "spec": spec,
    })
}
