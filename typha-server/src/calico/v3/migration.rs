//! LiveMigration (Calico v3.32's `internalapi.LiveMigration`): a workload moving from one host
//! to another, which Felix uses to route to the right copy while both exist. Carried whole for
//! Calico's felix syncer; our agent does not act on it.
//!
//! On Kubernetes it is not stored: Calico's driver makes one from each KubeVirt
//! VirtualMachineInstanceMigration in a phase that needs it (`datastore::kubernetes`). On etcd
//! it is stored under `livemigrations/<namespace>/<name>` (OpenStack's ML2 driver writes one
//! per migrating port).
//!
//! Every field is modelled in Go's order with Go's `omitempty`, so serializing a spec gives the
//! JSON Calico's own clients write.

use serde::{Deserialize, Serialize};

/// LiveMigration spec: where the workload moves from and to. Each side names the workload
/// whole (KubeVirt: one migration for all of a VM's interfaces) or one endpoint of it
/// (OpenStack: a migration per interface).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveMigrationSpec {
    /// What the migration moves from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<LiveMigrationSource>,
    /// What the migration moves to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<LiveMigrationTarget>,
}

/// The migration's source: a whole workload, or one of its endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveMigrationSource {
    /// The source pod or VM, all its interfaces (KubeVirt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadIdentifier>,
    /// One source endpoint (OpenStack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_endpoint: Option<WorkloadEndpointIdentifier>,
}

/// The migration's target: endpoints chosen by a selector over their labels, or one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LiveMigrationTarget {
    /// A label selector for the target pod (KubeVirt). Go's `*string`: an empty string set is
    /// written, only an absent one is left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// One target endpoint (OpenStack).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_endpoint: Option<WorkloadEndpointIdentifier>,
}

/// A workload (pod or VM) with all its interfaces. With orchestrator `k8s` the hostname is not
/// needed: `<namespace>/<pod>` names the pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadIdentifier {
    /// The host the workload is on.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// `k8s`, `openstack`, ...
    #[serde(rename = "orchestratorID", skip_serializing_if = "String::is_empty")]
    pub orchestrator_id: String,
    /// The workload's id in its orchestrator (`<namespace>/<pod>` for `k8s`).
    #[serde(rename = "workloadID", skip_serializing_if = "String::is_empty")]
    pub workload_id: String,
}

/// One interface of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadEndpointIdentifier {
    /// The host the workload is on.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// `k8s`, `openstack`, ...
    #[serde(rename = "orchestratorID", skip_serializing_if = "String::is_empty")]
    pub orchestrator_id: String,
    /// The workload's id in its orchestrator.
    #[serde(rename = "workloadID", skip_serializing_if = "String::is_empty")]
    pub workload_id: String,
    /// The endpoint's id within the workload.
    #[serde(rename = "endpointID", skip_serializing_if = "String::is_empty")]
    pub endpoint_id: String,
}
