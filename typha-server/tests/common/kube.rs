//! A real Kubernetes API server for tests: etcd 3.6 and kube-apiserver built by `peers/build`
//! (`typha_test_support::control_plane`), Calico's CRDs applied, and helpers to write objects
//! through the real API (so defaulting and validation are the API server's), to give
//! typha-server exactly the RBAC rules the README lists, and to mint ServiceAccount tokens.
//!
//! Every test that converges on an exact state gets its own control plane: the Kubernetes
//! backend reads the whole cluster, so another test's objects would be in its state.
//!
//! Without the peers a test fails, naming `peers/build`, unless `TYPHA_TEST_ALLOW_SKIP` is set
//! (then it says it skipped and passes). CI never sets it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use typha_server::calico::v3::Resource;
use typha_server::datastore::kubernetes::{CRD_GROUP, CRD_KINDS};
use typha_test_support::control_plane::{ControlPlane, ControlPlaneError, Options};

/// Set (to anything) to let tests that cannot run here skip instead of failing.
pub const ALLOW_SKIP: &str = "TYPHA_TEST_ALLOW_SKIP";

/// The ServiceAccount typha-server runs as, as in Calico's manifests.
pub const TYPHA_NAMESPACE: &str = "kube-system";
pub const TYPHA_ACCOUNT: &str = "calico-typha";

/// A control plane with these options, or `None` (after saying so) when the peers are not
/// built and skipping is allowed. Any other failure to start panics with the reason.
pub async fn start(opts: Options) -> Option<ControlPlane> {
    match ControlPlane::start(opts).await {
        Ok(cp) => Some(cp),
        Err(e @ ControlPlaneError::PeerMissing { .. }) => {
            if std::env::var_os(ALLOW_SKIP).is_some() {
                eprintln!("skipped: {e}");
                None
            } else {
                panic!("{e}. Or set {ALLOW_SKIP}=1 to skip the tests that need them.")
            }
        }
        Err(e) => panic!("starting etcd and kube-apiserver: {e}"),
    }
}

/// A control plane as clusters run it (watch cache on).
pub async fn default() -> Option<ControlPlane> {
    start(Options::default()).await
}

/// The API resource of `kind` in `api_version` (`v1`, `networking.k8s.io/v1`, ...).
pub fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The plural of a kind this suite writes.
pub fn plural_of(kind: &str) -> String {
    match kind {
        "NetworkPolicy" => "networkpolicies".into(),
        "GlobalNetworkPolicy" => "globalnetworkpolicies".into(),
        "StagedNetworkPolicy" => "stagednetworkpolicies".into(),
        "StagedGlobalNetworkPolicy" => "stagedglobalnetworkpolicies".into(),
        "StagedKubernetesNetworkPolicy" => "stagedkubernetesnetworkpolicies".into(),
        "ClusterNetworkPolicy" => "clusternetworkpolicies".into(),
        "IPPool" => "ippools".into(),
        "IPAMBlock" => "ipamblocks".into(),
        "BlockAffinity" => "blockaffinities".into(),
        "CalicoNodeStatus" => "caliconodestatuses".into(),
        "EndpointSlice" => "endpointslices".into(),
        "CustomResourceDefinition" => "customresourcedefinitions".into(),
        "BGPPeer" => "bgppeers".into(),
        "BGPFilter" => "bgpfilters".into(),
        "BGPConfiguration" => "bgpconfigurations".into(),
        "Tier" => "tiers".into(),
        other => format!("{}s", other.to_lowercase()),
    }
}

fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let res = resource(api_version, kind, &plural_of(kind));
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &res),
        None => Api::all_with(client.clone(), &res),
    }
}

/// Creates or replaces `object` (apiVersion, kind, metadata, and the rest) through the API,
/// as `kubectl create` / `kubectl replace` would: fields a CRD's schema does not declare are
/// pruned, as for any client. What the API server stored.
pub async fn apply(client: &kube::Client, object: Value) -> DynamicObject {
    let api = api_for(client, &object);
    let mut obj: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let name = obj.metadata.name.clone().expect("a name");
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => return o,
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating {object}: {e}"),
    }
    loop {
        let current = api.get(&name).await.unwrap();
        obj.metadata.resource_version = current.metadata.resource_version;
        match api.replace(&name, &PostParams::default(), &obj).await {
            Ok(o) => return o,
            // Someone else (a controller in the API server) wrote it in between: again.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("replacing {object}: {e}"),
        }
    }
}

/// Sets `status` of `object` (which names apiVersion, kind and metadata) through its status
/// subresource, as a kubelet or controller would.
pub async fn set_status(client: &kube::Client, object: &Value, status: Value) {
    let name = object["metadata"]["name"].as_str().expect("a name");
    let api = api_for(client, object);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("setting the status of {name}: {e}"));
}

/// Deletes an object at once (no grace period: there is no kubelet to finish a pod).
pub async fn delete(client: &kube::Client, api_version: &str, kind: &str, ns: &str, name: &str) {
    let object = if ns.is_empty() {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})
    } else {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}})
    };
    api_for(client, &object)
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|e| panic!("deleting {kind} {ns}/{name}: {e}"));
}

/// Creates namespace `name` (and nothing else: there is no controller-manager to add a
/// `default` ServiceAccount).
pub async fn namespace(client: &kube::Client, name: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await;
}

/// Writes a Calico v3 resource as Calico's Kubernetes datastore stores it (its CRD object,
/// `typha_test_support::control_plane::crd_object`).
pub async fn put_crd(client: &kube::Client, r: &Resource) -> DynamicObject {
    apply(client, typha_test_support::control_plane::crd_object(r)).await
}

/// Calico's `ConvertUID`, written again for the tests' own expectations: the uid Calico gives
/// what it makes of a Kubernetes object (a CRD's v3 resource, a namespace's or a service
/// account's profile): every byte's bits in reverse order, but the 7th's and the 9th's.
pub fn calico_uid(uid: &str) -> String {
    let hex: Vec<u8> = uid.bytes().filter(|c| *c != b'-').collect();
    let mut out = String::new();
    for (i, pair) in hex.chunks(2).enumerate() {
        let b = u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap();
        let b = if i == 6 || i == 8 {
            b
        } else {
            (0..8).fold(0u8, |acc, bit| acc | (((b >> bit) & 1) << (7 - bit)))
        };
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// An object's creation time as the API server wrote it.
pub fn created(meta: &ObjectMeta) -> Option<String> {
    meta.creation_timestamp.as_ref().map(|t| {
        serde_json::to_value(t)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    })
}

/// The metadata Calico's driver gives the v3 resource a Calico CRD object (`stored`, without
/// Calico's metadata annotation) holds, set on `r`: the API server's generation, the uid
/// converted, the creation time and the annotations.
pub fn crd_metadata(r: &mut Resource, stored: &DynamicObject) {
    let m = &stored.metadata;
    r.metadata.generation = m.generation;
    r.metadata.uid = calico_uid(m.uid.as_deref().unwrap());
    r.metadata.creation_timestamp = created(m);
    let annotations: BTreeMap<String, String> = m
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k != "projectcalico.org/metadata")
        .collect();
    r.metadata.annotations = serde_json::from_value(json!(annotations)).unwrap();
}

/// Every Calico CRD object stored, as the v3 resource it holds (name, namespace, labels,
/// generation, uid, creation time, annotations and spec), read through the API as the admin:
/// the test's own reading, not the backend's.
pub async fn calico_resources(client: &kube::Client) -> Vec<Resource> {
    let mut out = Vec::new();
    for kind in CRD_KINDS {
        let res = resource(&format!("{CRD_GROUP}/v1"), kind.as_str(), kind.plural());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &res);
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            // A CRD that is not installed (tiers, in the Calico release linked) holds nothing.
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => panic!("listing {}: {e}", kind.plural()),
        };
        for o in list.items {
            let mut metadata = json!({"name": o.metadata.name});
            if let Some(ns) = &o.metadata.namespace {
                metadata["namespace"] = ns.clone().into();
            }
            if let Some(labels) = &o.metadata.labels {
                metadata["labels"] = json!(labels);
            }
            if let Some(g) = o.metadata.generation {
                metadata["generation"] = g.into();
            }
            let doc = json!({"apiVersion": "projectcalico.org/v3", "kind": kind.as_str(),
                             "metadata": metadata, "spec": o.data["spec"]});
            let mut r = Resource::from_json(doc).unwrap();
            crd_metadata(&mut r, &o);
            out.push(r);
        }
    }
    out
}

/// The metadata Calico gives the profile `name` it makes of a namespace or a service account
/// whose metadata is `meta`: the uid converted and the creation time.
fn profile_metadata(name: String, meta: &ObjectMeta) -> Value {
    json!({"name": name, "uid": calico_uid(meta.uid.as_deref().unwrap()),
           "creationTimestamp": created(meta)})
}

/// The profile Calico makes of a namespace as the API server stored it (its labels with
/// `kubernetes.io/metadata.name`, its uid and creation time).
pub fn namespace_profile(ns: &ObjectMeta) -> Resource {
    let name = ns.name.clone().unwrap();
    let mut apply = json!({"pcns.projectcalico.org/name": name});
    for (k, v) in ns.labels.iter().flatten() {
        apply[format!("pcns.{k}")] = v.clone().into();
    }
    Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "Profile",
        "metadata": profile_metadata(format!("kns.{name}"), ns),
        "spec": {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
                 "labelsToApply": apply}}))
    .unwrap()
}

/// The profiles of every namespace that exists now, read through the API as the admin.
pub async fn namespace_profiles(client: &kube::Client) -> Vec<Resource> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|ns| namespace_profile(&ns.metadata))
        .collect()
}

/// The profile Calico makes of a service account as the API server stored it.
pub fn service_account_profile(sa: &ObjectMeta) -> Resource {
    let (ns, name) = (sa.namespace.clone().unwrap(), sa.name.clone().unwrap());
    let mut apply = json!({"pcsa.projectcalico.org/name": name});
    for (k, v) in sa.labels.iter().flatten() {
        apply[format!("pcsa.{k}")] = v.clone().into();
    }
    Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "Profile",
        "metadata": profile_metadata(format!("ksa.{ns}.{name}"), sa),
        "spec": {"labelsToApply": apply}}))
    .unwrap()
}

/// The profiles of every namespace and service account that exist now (typha-server's own
/// account among them), read through the API as the admin.
pub async fn profiles(client: &kube::Client) -> Vec<Resource> {
    let mut out = namespace_profiles(client).await;
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::all(client.clone());
    for sa in api.list(&ListParams::default()).await.unwrap() {
        out.push(service_account_profile(&sa.metadata));
    }
    out
}

/// Every Service and EndpointSlice that exists now (the API server's own `default/kubernetes`
/// among them), read through the API as the admin, as the v3 resources Calico's felix syncer
/// carries: name, namespace, uid, creation time, generation, labels, and the Service's spec or
/// the slice's address type, endpoints and ports.
pub async fn services(client: &kube::Client) -> Vec<Resource> {
    // The API server makes its own Service (no EndpointSlice: it refuses our loopback
    // address) shortly after it is ready: wait for it, so that a test's expected state does
    // not miss it.
    let svcs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("v1", "Service", "services"),
    );
    for _ in 0..100 {
        if let Ok(Some(_)) = svcs.get_opt("kubernetes").await {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut out = Vec::new();
    let svc = resource("v1", "Service", "services");
    let slice = resource("discovery.k8s.io/v1", "EndpointSlice", "endpointslices");
    for (res, kind) in [
        (svc, "KubernetesService"),
        (slice, "KubernetesEndpointSlice"),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &res);
        for o in api.list(&ListParams::default()).await.unwrap().items {
            let spec = if kind == "KubernetesService" {
                o.data["spec"].clone()
            } else {
                json!({"addressType": o.data["addressType"], "endpoints": o.data["endpoints"],
                       "ports": o.data["ports"]})
            };
            out.push(
                Resource::from_json(json!({
                    "apiVersion": "projectcalico.org/v3", "kind": kind,
                    "metadata": {"name": o.metadata.name, "namespace": o.metadata.namespace,
                                 "uid": o.metadata.uid, "creationTimestamp": created(&o.metadata),
                                 "generation": o.metadata.generation,
                                 "labels": o.metadata.labels.clone().unwrap_or_default()},
                    "spec": spec}))
                .unwrap(),
            );
        }
    }
    out
}

/// What a cluster holds that the backend serves without the test writing it: [`profiles`] and
/// [`services`].
pub async fn ambient(client: &kube::Client) -> Vec<Resource> {
    let mut out = profiles(client).await;
    out.extend(services(client).await);
    out
}

/// The RBAC rules the README says typha-server needs: (API group, resources), read from the
/// README's table, so the test and the README cannot drift apart.
pub fn readme_rules() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let start = readme
        .find("The service account needs get, list and watch on:")
        .expect("the README lists the RBAC rules");
    let mut rules = Vec::new();
    for line in readme[start..].lines().skip(1) {
        let line = line.trim();
        if line.is_empty() && !rules.is_empty() {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [group, resources] = cells.as_slice() else {
            continue;
        };
        if group.starts_with("API group") || group.starts_with("---") {
            continue;
        }
        // The core group is written `""`.
        let group = group
            .split('`')
            .nth(1)
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned();
        let resources: Vec<String> = resources
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        rules.push((group, resources));
    }
    assert!(rules.len() >= 3, "the README's RBAC table: {rules:?}");
    rules
}

/// Removes the ClusterRoleBinding `name` (the account loses what the role granted).
pub async fn revoke(client: &kube::Client, name: &str) {
    let rbac = "rbac.authorization.k8s.io/v1";
    let bindings = resource(rbac, "ClusterRoleBinding", "clusterrolebindings");
    Api::<DynamicObject>::all_with(client.clone(), &bindings)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// typha-server's identity: ServiceAccount `kube-system/calico-typha` with exactly the
/// README's rules; a client for it (a minted token, kube's retries off as typha-server has
/// them) and the token.
pub async fn typha_identity(cp: &ControlPlane) -> (kube::Client, String) {
    cp.grant(
        TYPHA_NAMESPACE,
        TYPHA_ACCOUNT,
        TYPHA_ACCOUNT,
        &readme_rules(),
    )
    .await
    .unwrap();
    let token = cp
        .service_account_token(TYPHA_NAMESPACE, TYPHA_ACCOUNT)
        .await
        .unwrap();
    (cp.client_with_token(&token).unwrap(), token)
}

/// Creates an object that is not in the suite's vocabulary (used rarely): through the API,
/// failing with the API server's answer.
pub async fn try_create(
    client: &kube::Client,
    object: Value,
) -> Result<DynamicObject, kube::Error> {
    api_for(client, &object)
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
}

/// Set to the path of Calico's `calico-v3-crds.yaml` (Calico v3.32's `manifests/`) to install
/// Calico's own `projectcalico.org/v3` CRDs where a test needs them, instead of the minimal
/// ones of ours ([`v3_crds`]). CI has no copy of Calico's source, so it runs with ours.
pub const CALICO_V3_CRDS: &str = "TYPHA_TEST_CALICO_V3_CRDS";

/// Installs Calico's kinds as CRDs of `projectcalico.org/v3` (Calico 3.32's install without
/// the aggregated API server) and waits until every kind the backend reads is served. With
/// [`CALICO_V3_CRDS`] set, Calico's own CRDs from that file (every `projectcalico.org` CRD in
/// it; a file that cannot be read fails the test, naming the variable); otherwise minimal CRDs
/// of ours, one per kind the backend reads, that keep whatever spec they are given (no
/// schema, so no pruning and no defaults: the tests write complete objects). Returns which.
pub async fn v3_crds(admin: &kube::Client) -> &'static str {
    let crds: Vec<Value> = match std::env::var_os(CALICO_V3_CRDS) {
        Some(path) => {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!("{CALICO_V3_CRDS}={}: cannot read it: {e}", path.to_string_lossy())
            });
            let mut out = Vec::new();
            for doc in serde_norway::Deserializer::from_str(&text) {
                let v: Value = serde::Deserialize::deserialize(doc).unwrap_or_else(|e| {
                    panic!("{CALICO_V3_CRDS}: {} is not YAML: {e}", path.to_string_lossy())
                });
                if v["kind"] == "CustomResourceDefinition" && v["spec"]["group"] == "projectcalico.org"
                {
                    out.push(v);
                }
            }
            assert!(
                !out.is_empty(),
                "{CALICO_V3_CRDS}: no projectcalico.org CRD in {}",
                path.to_string_lossy()
            );
            out
        }
        None => CRD_KINDS
            .iter()
            .map(|k| {
                let scope = if k.is_namespaced() { "Namespaced" } else { "Cluster" };
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                       "metadata": {"name": format!("{}.projectcalico.org", k.plural())},
                       "spec": {"group": "projectcalico.org", "scope": scope,
                                "names": {"kind": k.as_str(), "listKind": format!("{}List", k.as_str()),
                                          "plural": k.plural(),
                                          "singular": k.as_str().to_lowercase()},
                                "versions": [{"name": "v3", "served": true, "storage": true,
                                              "schema": {"openAPIV3Schema": {"type": "object",
                                                  "x-kubernetes-preserve-unknown-fields": true}}}]}})
            })
            .collect(),
    };
    for crd in crds {
        apply(admin, crd).await;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    for k in CRD_KINDS {
        let res = resource("projectcalico.org/v3", k.as_str(), k.plural());
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &res);
        while let Err(e) = api.list(&ListParams::default().limit(1)).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}.projectcalico.org is not served: {e}",
                k.plural()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    if std::env::var_os(CALICO_V3_CRDS).is_some() {
        "Calico's own v3 CRDs"
    } else {
        "minimal v3 CRDs of ours"
    }
}

/// Writes a Calico v3 resource as an object of Calico 3.32's `projectcalico.org/v3` CRDs (the
/// resource itself); what the API server stored.
pub async fn put_v3(client: &kube::Client, r: &Resource) -> DynamicObject {
    apply(
        client,
        typha_test_support::control_plane::crd_object_in(
            r,
            typha_server::datastore::kubernetes::CalicoGroup::V3,
        ),
    )
    .await
}

/// The v3 resource a `projectcalico.org/v3` object (`stored`, as the API server returned it) is
/// to Calico's driver, read here independently of the backend: the object itself, its
/// metadata as stored (uid not converted, creation time, generation, labels, annotations) and
/// its spec as stored (with whatever defaults the CRD's schema added).
pub fn stored_v3(stored: &DynamicObject) -> Resource {
    let m = &stored.metadata;
    let mut metadata = json!({"name": m.name, "uid": m.uid, "creationTimestamp": created(m),
                              "generation": m.generation,
                              "labels": m.labels.clone().unwrap_or_default(),
                              "annotations": m.annotations.clone().unwrap_or_default()});
    if let Some(ns) = &m.namespace {
        metadata["namespace"] = ns.clone().into();
    }
    let kind = &stored.types.as_ref().expect("a kind").kind;
    Resource::from_json(json!({"apiVersion": "projectcalico.org/v3", "kind": kind,
                               "metadata": metadata, "spec": stored.data["spec"]}))
    .unwrap()
}
