//! Calico's CRDs (`crd.projectcalico.org/v1`), applied to the API server as a Calico install
//! would (and Calico's resources as objects of either of its API groups). They are read at test time from the Calico module in the Go module cache, where
//! `peers/build` downloads it (`go mod download`) and links its `libcalico-go/config/crd/`
//! folder as `<peers>/calico-crds`; they are never part of this repository.

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::peers::{ControlPlaneError, peers_dir};
use typha_server::calico::v3::Spec;
use typha_server::datastore::kubernetes::{CRD_GROUP, CRD_KINDS, CalicoGroup};

/// The plurals of the CRDs `apply` installs that the Kubernetes backend reads: the kinds a
/// test may write. Others (tiers, in the Calico release linked) are not installed.
pub fn installed_kinds() -> Result<Vec<typha_server::calico::v3::Kind>, ControlPlaneError> {
    let dir = crd_dir()?;
    Ok(CRD_KINDS
        .into_iter()
        .filter(|k| {
            dir.join(format!("{CRD_GROUP}_{}.yaml", k.plural()))
                .is_file()
        })
        .collect())
}

/// The only version of Calico's module the Go module proxy serves (a commit of its
/// release-v3.28 line); `peers/build` downloads it.
pub const CALICO_MODULE: &str =
    "github.com/projectcalico/calico@v1.11.0-cni-plugin.0.20250813170300-a0db560f0520";

/// How long the CRDs may take to be established and served.
const ESTABLISH: Duration = Duration::from_secs(60);

/// The folder of Calico's CRD manifests (`<peers>/calico-crds`).
pub fn crd_dir() -> Result<PathBuf, ControlPlaneError> {
    let dir = peers_dir().join("calico-crds");
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(ControlPlaneError::PeerMissing {
            name: "calico-crds",
            path: dir,
        })
    }
}

/// A Calico v3 resource as Calico's Kubernetes datastore stores it: its CRD object in
/// `crd.projectcalico.org/v1` with the v3 spec. An IPAM block is stored as Calico's IPAM
/// writes it ([`IpamBlockSpec::as_written`](typha_server::calico::v3::IpamBlockSpec::as_written)), with `strictAffinity`, which the CRD requires.
pub fn crd_object(r: &typha_server::calico::v3::Resource) -> Value {
    crd_object_in(r, CalicoGroup::V1)
}

/// A Calico v3 resource as Calico's Kubernetes datastore stores it with its kinds in `group`:
/// in `crd.projectcalico.org/v1` as [`crd_object`] says; in `projectcalico.org/v3` (Calico
/// 3.32's v3 CRDs) the resource itself, an IPAM block as written there too.
pub fn crd_object_in(r: &typha_server::calico::v3::Resource, group: CalicoGroup) -> Value {
    let mut written = r.clone();
    if let Spec::IpamBlock(s) = &mut written.spec {
        *s = s.as_written();
    }
    let mut doc = written.to_json();
    if let Some(o) = doc.as_object_mut() {
        o.insert("apiVersion".into(), group.api_version().into());
        o.insert("kind".into(), r.kind().as_str().into());
    }
    if r.kind() == typha_server::calico::v3::Kind::IpamBlock
        && let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("strictAffinity".into(), false.into());
    }
    doc
}

fn crd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    )
}

/// Creates every CRD in [`crd_dir`] and waits until the ones the Kubernetes backend reads are
/// served. A CRD the backend does not read that the API server refuses is skipped, and said
/// so; one it reads is an error. A kind the backend reads whose CRD the folder lacks (the
/// tiers CRD, in the Calico release `peers/build` links) is left missing: the backend serves no
/// objects of it until one is installed.
pub(super) async fn apply(client: &kube::Client) -> Result<(), ControlPlaneError> {
    let dir = crd_dir()?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(ControlPlaneError::io(dir.display().to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ControlPlaneError::Crds(format!(
            "no CRD manifests in {}",
            dir.display()
        )));
    }
    let read: Vec<&str> = CRD_KINDS.iter().map(|k| k.plural()).collect();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crd_resource());
    let mut created: Vec<String> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .map_err(ControlPlaneError::io(file.display().to_string()))?;
        let doc: Value = serde_norway::from_str(&text)
            .map_err(|e| ControlPlaneError::Crds(format!("{}: {e}", file.display())))?;
        let plural = doc
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let obj: DynamicObject = serde_json::from_value(doc)
            .map_err(|e| ControlPlaneError::Crds(format!("{}: {e}", file.display())))?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => created.push(plural),
            Err(kube::Error::Api(s)) if s.code == 409 => created.push(plural),
            Err(e) if !read.contains(&plural.as_str()) => {
                // Test support: this goes to the test's output, where the reader needs it.
                eprintln!(
                    "control plane: skipped Calico CRD {} (typha-server does not read {plural}): the API server refused it: {e}",
                    file.display()
                );
            }
            Err(e) => {
                return Err(ControlPlaneError::Kube {
                    what: format!("creating the CRD in {}", file.display()),
                    source: e,
                });
            }
        }
    }
    // Established and served: a list of each kind the backend reads answers.
    let deadline = tokio::time::Instant::now() + ESTABLISH;
    for kind in CRD_KINDS {
        if !created.iter().any(|p| p == kind.plural()) {
            continue;
        }
        let res = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(CRD_GROUP, "v1", kind.as_str()),
            kind.plural(),
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &res);
        loop {
            match api.list(&ListParams::default().limit(1)).await {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() > deadline => {
                    return Err(ControlPlaneError::Kube {
                        what: format!("waiting for {} to be served", kind.plural()),
                        source: e,
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    Ok(())
}
