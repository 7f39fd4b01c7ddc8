//! The Kubernetes datastore: Calico's CRDs and Kubernetes' own objects, read through the API
//! server with kube's [`Client`].
//!
//! Each source (one resource type) is listed with [`Api::list`] and watched with
//! [`Api::watch`], with bookmarks. What is read becomes Calico v3 [`Resource`]s, as Calico's
//! Kubernetes datastore driver makes them:
//!
//! - Calico's kinds ([`CRD_KINDS`]) are CRDs in one of two API groups (below): in
//!   `crd.projectcalico.org/v1` an object carries the v3 spec as it is, and the metadata
//!   Calico's driver gives it (the uid converted by Calico's `ConvertUID`, the creation time
//!   and annotations of Calico's metadata annotation over the CR's); in `projectcalico.org/v3`
//!   the object is the v3 resource, its metadata as stored (uid, labels, annotations as they
//!   are: Calico's driver converts nothing there);
//! - a namespace becomes profile `kns.<ns>` (labels `pcns.`-prefixed, rules allow all; the
//!   namespace's uid converted and its creation time);
//! - a service account becomes profile `ksa.<ns>.<sa>` (labels `pcsa.`-prefixed; uid and
//!   creation time as for namespaces);
//! - a pod becomes a workload endpoint `<node>-k8s-<pod>-eth0` (addresses from Calico's
//!   `cni.projectcalico.org/podIPs` annotation, else `status.podIPs`; interface `cali`, or the
//!   first prefix of `FELIX_INTERFACEPREFIX` ([`InterfacePrefix`]), + 11 hex digits of SHA-1 of
//!   `<ns>.<pod>`; profiles `kns.<ns>`, `ksa.<ns>.<sa>`); a pod that is
//!   host-networked, unscheduled, finished or without an address is not one (and an update
//!   that makes it so deletes the endpoint);
//! - a node becomes a Calico node: calico-node's `projectcalico.org/*` annotations (BGP
//!   addresses, AS number, tunnel addresses) and its InternalIP/ExternalIP addresses; its uid,
//!   creation time, the labels of `projectcalico.org/labels` under its own, the annotations of
//!   `projectcalico.org/annotations` and `projectcalico.org/kube-labels` (its labels as JSON);
//! - a `networking.k8s.io/v1` NetworkPolicy becomes KubernetesNetworkPolicy
//!   `knp.default.<name>`: order 1000, one Allow rule per (port, peer);
//! - a `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy becomes
//!   KubernetesClusterNetworkPolicy `<name>`, a global policy in tier `kube-admin` or
//!   `kube-baseline` (`calico::v3::k8s_cluster_policy`); one Calico gives no policy (another
//!   tier, no subject) is nothing to serve. Calico reads them in this datastore only (the etcd
//!   backend leaves the kind alone). Its CRD, from Kubernetes' network-policy-api project, is
//!   missing from most clusters and is treated as Calico's missing CRDs are (below);
//! - a Service becomes a KubernetesService (name, namespace, labels and spec: what Felix
//!   reads), an EndpointSlice a KubernetesEndpointSlice (labels, address type, endpoints,
//!   ports), both as Calico's felix syncer passes them on, with their uid, creation time and
//!   generation (not their annotations, owner references or managed fields);
//! - a KubeVirt `kubevirt.io/v1` VirtualMachineInstanceMigration becomes a LiveMigration of the
//!   same namespace and name while its phase is one Felix needs it in (Scheduling, Scheduled,
//!   PreparingTarget, TargetReady, Running, Failed) and it names its VMI and has a uid; in any
//!   other phase it is no LiveMigration (an update into one deletes it). Its target selects
//!   the target pod by KubeVirt's labels, its source is the source pod once KubeVirt reports
//!   it (`convert.rs`, `live_migration`).
//!
//! # CRDs that are not installed
//!
//! A cluster may lack some of Calico's CRDs (older Calico releases have no tiers CRD, releases
//! before 3.26 no bgpfilters CRD), most have no ClusterNetworkPolicy CRD (Kubernetes'
//! network-policy-api) and no KubeVirt, so no virtualmachineinstancemigrations. A list that
//! answers 404 for one of these means no objects of that kind: it is logged once at warn,
//! does not hold readiness back, and the kind is asked for again every
//! [`MISSING_CRD_POLL`]; once it answers, its objects arrive as ordinary watch events and its
//! watch starts, without a relist. A kind is missing when its mark is `MISSING` (`u64::MAX`).
//!
//! # Calico's two API groups
//!
//! Calico's kinds are CRDs in `crd.projectcalico.org/v1` (Calico's classic CRDs, also what its
//! aggregated API server keeps `projectcalico.org/v3` in) or, since Calico 3.32 without the
//! aggregated API server, in `projectcalico.org/v3` itself ([`CalicoGroup`]). As Calico v3.32
//! decides (libcalico-go's `UsingV3CRDs`): `CALICO_API_GROUP` names the group; unset, the
//! groups the API server serves decide, `projectcalico.org/v3` when only it is served,
//! `crd.projectcalico.org/v1` otherwise ([`CalicoGroup::discover`]). Calico decides once, when
//! its client starts; this backend decides at every full listing, so a cluster whose CRDs
//! arrive after the server started, or whose v1 CRDs are removed after a migration to v3, is
//! read from the group that holds them, by a relist.
//!
//! While none of the [`CORE_KINDS`] (IP pools, network policies, global network policies:
//! every Calico release installs them) is served in the group read, a listing fails with
//! [`DatastoreError::Unusable`], saying why and what to do: the server stays not ready instead
//! of serving an empty network policy state as the cluster's (Calico's Typha, reading a group
//! that holds nothing, reports itself in sync). Checked with one discovery request
//! (`GET /apis/<group>/<version>`) before anything is listed, so a cluster without Calico's
//! CRDs is not listed whole every few seconds while it waits.
//!
//! An object that does not convert is an [`Invalid`] item, never an error.
//!
//! # One revision for every type
//!
//! Each resource carries its object's resourceVersion (`metadata.resourceVersion`): the
//! revision Calico's clients are sent with what it becomes
//! ([`crate::calico::libcalico::Driver::Kubernetes`]); the revision below is the datastore's.
//!
//! The [`Datastore`] trait has one revision, Kubernetes has a resourceVersion per object and
//! per list. resourceVersions are documented as opaque, but every API server in use stores in
//! etcd and uses etcd's revision, shared by all types it serves; this backend relies on that
//! and parses them as `u64` (one that does not parse makes the operation fail as
//! [`DatastoreError::Unavailable`]). Types are listed one after the other, so their lists are
//! at different revisions, and their watches deliver independently: a listing's revision is the
//! *lowest* of its lists', and every watch event carries the lowest revision that every type's
//! watch has reached (the highest it has delivered, or a bookmark). Everything at or below
//! that revision has been delivered for every type, so resuming after it loses nothing. The
//! backend also remembers how far each type got, so a resume from exactly that point restarts
//! each type where it stopped instead of replaying what a faster type already delivered.
//!
//! 410 Gone (a watch error event or response, or the reason `Expired`/`Gone`) is
//! [`DatastoreError::TooOld`]; any other failure is [`DatastoreError::Unavailable`].
//!
//! Build the client from a `kube::Config` (`Config::infer().await`: in-cluster service
//! account, else `$KUBECONFIG` / `~/.kube/config`; or `Config::new(url)`) with
//! `default_retry = false`: kube's own retries of 429/503/504 (up to 15) would hold a listing
//! for minutes while the API server is down, where the syncer should see `Unavailable` and
//! back off itself. `cli.rs` does this.
//!
//! Lists are paged ([`PAGE_SIZE`]), and each page is converted as it arrives, so a listing
//! holds one page of whole objects at a time; an expired continue token fails the listing,
//! which the syncer retries.
//!
//! Calico's CRDs as Calico's own writers store them: the v3 name and labels in the
//! `projectcalico.org/metadata` annotation, read as Calico's driver reads them (`convert.rs`).
//!
//! Staged policies: StagedNetworkPolicy, StagedGlobalNetworkPolicy and
//! StagedKubernetesNetworkPolicy are CRD kinds like the others (missing CRDs tolerated as
//! above).
//!
//! Not done yet: a NetworkPolicy's named ports are passed on as names, as Calico does, but its rules are not
//! merged by protocol as Calico's are (same effect, more rules).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{self, BoxFuture};
use futures_util::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy as K8sNetworkPolicy;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchParams};
use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{GroupVersionKind, WatchEvent as KubeEvent};
use kube::{Client, Resource as _};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};
use typha_protocol::model::Revision;

use super::{Datastore, DatastoreError, Invalid, Item, Listing, WatchEvent, WatchStream};
use crate::calico::v3::{Kind, Resource, ResourceId};

mod convert;
mod group;
mod interface;
mod missing;
use convert::*;
use group::Chosen;
pub use group::{CALICO_API_GROUP, CORE_KINDS, CalicoGroup};
pub use interface::{FELIX_INTERFACEPREFIX, InterfacePrefix, interface_name};
use missing::*;

/// The API group of Calico's classic CRDs (`crd.projectcalico.org/v1`).
pub const CRD_GROUP: &str = "crd.projectcalico.org";

/// The API group of Calico's v3 API, whose kinds Calico 3.32 also installs as CRDs of their
/// own (`projectcalico.org/v3`).
pub const V3_GROUP: &str = "projectcalico.org";

/// The API group of Kubernetes' ClusterNetworkPolicy (sigs.k8s.io network-policy-api), read at
/// `v1alpha2` as Calico v3.32 reads it.
pub const CLUSTER_NETWORK_POLICY_GROUP: &str = "policy.networking.k8s.io";

/// The Calico kinds stored as CRDs, in [`CRD_GROUP`]`/v1` or [`V3_GROUP`]`/v3`.
pub const CRD_KINDS: [Kind; 18] = [
    Kind::NetworkPolicy,
    Kind::GlobalNetworkPolicy,
    Kind::StagedNetworkPolicy,
    Kind::StagedKubernetesNetworkPolicy,
    Kind::StagedGlobalNetworkPolicy,
    Kind::NetworkSet,
    Kind::GlobalNetworkSet,
    Kind::HostEndpoint,
    Kind::IpPool,
    Kind::IpamBlock,
    Kind::BlockAffinity,
    Kind::FelixConfiguration,
    Kind::ClusterInformation,
    Kind::Tier,
    Kind::BgpConfiguration,
    Kind::BgpPeer,
    Kind::BgpFilter,
    Kind::CalicoNodeStatus,
];

/// KubeVirt's API group, whose VirtualMachineInstanceMigrations become LiveMigrations.
pub const KUBEVIRT_GROUP: &str = "kubevirt.io";

/// How often a CRD kind that is not installed (404) is asked for again.
pub const MISSING_CRD_POLL: Duration = Duration::from_secs(30);

/// The mark of a source whose CRD is not installed: it holds no revision back.
const MISSING: u64 = u64::MAX;

/// Objects per list page (what Calico's Kubernetes driver asks for too).
pub const PAGE_SIZE: u32 = 500;

/// The longest one request (a list page, the start of a watch) may take: an API server whose
/// etcd is gone holds a request for its own timeout (a minute) before it answers 504, and the
/// view should be known unconfirmed well before that. The etcd backend's deadline too.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Server-side watch timeout: the API server ends a watch after this long, and the syncer
/// resumes it.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// How an object of one source becomes a resource.
#[derive(Debug, Clone, Copy)]
enum Conversion {
    /// A Calico CRD of this kind, in this group.
    Crd(Kind, CalicoGroup),
    /// A namespace: profile `kns.<ns>`.
    Namespace,
    /// A service account: profile `ksa.<ns>.<sa>`.
    ServiceAccount,
    /// A pod: its workload endpoint, its interface name with this prefix.
    Pod(InterfacePrefix),
    /// A node: Calico's node (addresses, and what calico-node annotated); with `pod_cidr`
    /// (`USE_POD_CIDR`, host-local IPAM) its IPIP tunnel address from its pod CIDR and its pod
    /// CIDRs as its IPAM blocks.
    Node {
        /// Host-local IPAM.
        pod_cidr: bool,
    },
    /// A `networking.k8s.io/v1` NetworkPolicy: Calico's `knp.default.<name>`.
    NetworkPolicy,
    /// A `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy (a CRD of its own project):
    /// Calico's KubernetesClusterNetworkPolicy.
    ClusterNetworkPolicy,
    /// A Service: carried for Felix.
    Service,
    /// An EndpointSlice: carried for Felix.
    EndpointSlice,
    /// A KubeVirt VirtualMachineInstanceMigration: a LiveMigration while it is under way.
    LiveMigration,
}

impl Conversion {
    /// Whether the source is a CRD that a cluster may not have installed: Calico's own,
    /// network-policy-api's and KubeVirt's (see "CRDs that are not installed").
    fn optional(self) -> bool {
        matches!(
            self,
            Conversion::Crd(..) | Conversion::ClusterNetworkPolicy | Conversion::LiveMigration
        )
    }
}

/// One resource type read from the API server.
#[derive(Debug, Clone)]
struct Source {
    resource: ApiResource,
    conversion: Conversion,
}

/// What the server makes of `object` (JSON, as the API server sends it) read by a watched
/// source (the fuzz target `kube_object`): the `which`-th (modulo their count) of the sources
/// of the object's kind, with and without host-local IPAM, or of all sources if none is of
/// that kind.
#[cfg(feature = "fuzzing")]
pub fn fuzz_convert(which: u8, object: &[u8]) -> Option<Item> {
    let o: DynamicObject = serde_json::from_slice(object).ok()?;
    let prefix = InterfacePrefix::CALI;
    let all: Vec<Source> = [CalicoGroup::V1, CalicoGroup::V3]
        .into_iter()
        .flat_map(|g| {
            Kubernetes::sources(false, g, prefix)
                .into_iter()
                .chain(Kubernetes::sources(true, g, prefix))
        })
        .collect();
    let kind = o.types.as_ref().map(|t| t.kind.as_str());
    let same: Vec<&Source> = all
        .iter()
        .filter(|s| Some(s.resource.kind.as_str()) == kind)
        .collect();
    let pick: Vec<&Source> = if same.is_empty() {
        all.iter().collect()
    } else {
        same
    };
    let s = pick.get(usize::from(which) % pick.len().max(1))?;
    convert(s.conversion, &o).1
}

impl Source {
    /// Its name as RBAC rules and the API server's messages say it: `pods`,
    /// `networkpolicies.networking.k8s.io`.
    fn name(&self) -> String {
        if self.resource.group.is_empty() {
            self.resource.plural.clone()
        } else {
            format!("{}.{}", self.resource.plural, self.resource.group)
        }
    }
}

/// The Kubernetes backend.
pub struct Kubernetes {
    client: Client,
    /// What is read when Calico's kinds are in `crd.projectcalico.org/v1`...
    v1: Arc<[Source]>,
    /// ... and in `projectcalico.org/v3`: the same sources in the same order, but for the
    /// group of Calico's kinds, so that the marks below are per source in either.
    v3: Arc<[Source]>,
    /// `CALICO_API_GROUP`: `None`, discovered at each listing.
    api_group: Option<CalicoGroup>,
    /// The group the last listing read, and how it was chosen.
    active: Mutex<Option<(CalicoGroup, Chosen)>>,
    /// Why no Calico kind can be read, when that was said (once).
    unusable: Mutex<Option<String>>,
    interface_prefix: InterfacePrefix,
    /// How far each source's watch (or list) got: its revision, per source.
    marks: Arc<Mutex<Vec<u64>>>,
    /// Per source: whether its CRD was found missing (and said so, once).
    missing: Arc<Mutex<Vec<bool>>>,
    page_size: u32,
    crd_poll: Duration,
    use_pod_cidr: bool,
}

impl std::fmt::Debug for Kubernetes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubernetes")
            .field("sources", &self.v1.len())
            .field("api_group", &self.api_group)
            .field("interface_prefix", &self.interface_prefix)
            .finish()
    }
}

impl Kubernetes {
    /// A backend reading through `client`. Nothing is requested until the first listing.
    pub async fn new(client: Client) -> Self {
        Self::with_pod_cidr(client, false)
    }

    /// A backend for a cluster that uses host-local IPAM from the nodes' pod CIDRs (Calico's
    /// `USE_POD_CIDR`, `K8sUsePodCIDR`), when `use_pod_cidr`: as Calico's syncers then do, IPAM
    /// blocks and block affinities are not read; each node's pod CIDRs are its blocks, and
    /// its IPIP tunnel address is the first address of its pod CIDR.
    pub fn with_pod_cidr(client: Client, use_pod_cidr: bool) -> Self {
        let prefix = InterfacePrefix::CALI;
        let v1 = Self::sources(use_pod_cidr, CalicoGroup::V1, prefix);
        let marks = Arc::new(Mutex::new(vec![0; v1.len()]));
        let missing = Arc::new(Mutex::new(vec![false; v1.len()]));
        Self {
            client,
            v1: v1.into(),
            v3: Self::sources(use_pod_cidr, CalicoGroup::V3, prefix).into(),
            api_group: None,
            active: Mutex::new(None),
            unusable: Mutex::new(None),
            interface_prefix: prefix,
            marks,
            missing,
            page_size: PAGE_SIZE,
            crd_poll: MISSING_CRD_POLL,
            use_pod_cidr,
        }
    }

    /// Reads Calico's kinds from `group` only (`CALICO_API_GROUP`), or, with `None` (the
    /// default), from the group Calico's discovery picks at each listing
    /// ([`CalicoGroup::discover`]).
    pub fn with_api_group(mut self, group: Option<CalicoGroup>) -> Self {
        self.api_group = group;
        self
    }

    /// Names workload interfaces with `prefix` (`FELIX_INTERFACEPREFIX`) instead of `cali`.
    pub fn with_interface_prefix(mut self, prefix: InterfacePrefix) -> Self {
        self.interface_prefix = prefix;
        self.v1 = Self::sources(self.use_pod_cidr, CalicoGroup::V1, prefix).into();
        self.v3 = Self::sources(self.use_pod_cidr, CalicoGroup::V3, prefix).into();
        self
    }

    /// The sources of the group the last listing read (`crd.projectcalico.org/v1` before the
    /// first).
    fn sources_now(&self) -> Arc<[Source]> {
        let active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        self.sources_of(active.map_or(CalicoGroup::V1, |(g, _)| g))
    }

    fn sources_of(&self, group: CalicoGroup) -> Arc<[Source]> {
        match group {
            CalicoGroup::V1 => self.v1.clone(),
            CalicoGroup::V3 => self.v3.clone(),
        }
    }

    /// Whether the nodes' pod CIDRs are the IPAM blocks ([`Kubernetes::with_pod_cidr`]).
    pub fn uses_pod_cidr(&self) -> bool {
        self.use_pod_cidr
    }

    /// Every source read with Calico's kinds in `group`, in order.
    fn sources(use_pod_cidr: bool, group: CalicoGroup, prefix: InterfacePrefix) -> Vec<Source> {
        let mut sources: Vec<Source> = CRD_KINDS
            .into_iter()
            .filter(|k| !(use_pod_cidr && matches!(k, Kind::IpamBlock | Kind::BlockAffinity)))
            .map(|kind| Source {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(group.group(), group.version(), kind.as_str()),
                    kind.plural(),
                ),
                conversion: Conversion::Crd(kind, group),
            })
            .collect();
        sources.extend(
            [
                (ApiResource::erase::<Namespace>(&()), Conversion::Namespace),
                (
                    ApiResource::erase::<ServiceAccount>(&()),
                    Conversion::ServiceAccount,
                ),
                (ApiResource::erase::<Pod>(&()), Conversion::Pod(prefix)),
                (
                    ApiResource::erase::<Node>(&()),
                    Conversion::Node {
                        pod_cidr: use_pod_cidr,
                    },
                ),
                (
                    ApiResource::erase::<K8sNetworkPolicy>(&()),
                    Conversion::NetworkPolicy,
                ),
                (
                    ApiResource::from_gvk_with_plural(
                        &GroupVersionKind::gvk(
                            CLUSTER_NETWORK_POLICY_GROUP,
                            "v1alpha2",
                            "ClusterNetworkPolicy",
                        ),
                        "clusternetworkpolicies",
                    ),
                    Conversion::ClusterNetworkPolicy,
                ),
                (ApiResource::erase::<Service>(&()), Conversion::Service),
                (
                    ApiResource::erase::<EndpointSlice>(&()),
                    Conversion::EndpointSlice,
                ),
            ]
            .map(|(resource, conversion)| Source {
                resource,
                conversion,
            }),
        );
        sources.push(Source {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(KUBEVIRT_GROUP, "v1", "VirtualMachineInstanceMigration"),
                "virtualmachineinstancemigrations",
            ),
            conversion: Conversion::LiveMigration,
        });
        sources
    }

    /// What this backend reads, as (API group, plural) pairs (`""` for the core group): the
    /// resources its ServiceAccount needs get, list and watch on. Calico's kinds in both of
    /// their groups: which one is read depends on the cluster ([`CalicoGroup`]).
    pub fn resources() -> Vec<(String, String)> {
        // With Calico IPAM: the most it reads (host-local IPAM reads less).
        let mut out: Vec<(String, String)> =
            Self::sources(false, CalicoGroup::V1, InterfacePrefix::CALI)
                .into_iter()
                .map(|s| (s.resource.group, s.resource.plural))
                .collect();
        out.extend(
            CRD_KINDS
                .iter()
                .map(|k| (V3_GROUP.to_owned(), k.plural().to_owned())),
        );
        out
    }

    /// The collection path of each resource this backend reads with Calico's kinds in
    /// `crd.projectcalico.org/v1` (`/api/v1/pods`, `/apis/crd.projectcalico.org/v1/ippools`):
    /// what a client that lists and watches for itself, as Felix does without Typha, asks
    /// for.
    pub fn collection_paths() -> Vec<String> {
        Self::sources(false, CalicoGroup::V1, InterfacePrefix::CALI)
            .into_iter()
            .map(|s| {
                if s.resource.group.is_empty() {
                    format!("/api/{}/{}", s.resource.version, s.resource.plural)
                } else {
                    format!(
                        "/apis/{}/{}/{}",
                        s.resource.group, s.resource.version, s.resource.plural
                    )
                }
            })
            .collect()
    }

    /// Lists in pages of `n` objects instead of [`PAGE_SIZE`].
    pub fn with_page_size(mut self, n: u32) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// Asks for a CRD kind that is not installed every `poll` instead of [`MISSING_CRD_POLL`].
    pub fn with_crd_poll(mut self, poll: Duration) -> Self {
        self.crd_poll = poll;
        self
    }

    fn api(&self, s: &Source) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &s.resource)
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        // A poisoned lock only means a panic elsewhere; the marks are still plain numbers.
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One source's complete list: its objects as items, and its resourceVersion
    /// ([`MISSING`] for a CRD that is not installed).
    async fn list_one(&self, i: usize, s: &Source) -> Result<(Vec<Item>, u64), DatastoreError> {
        let api = self.api(s);
        match list_objects(&api, s, self.page_size, |o| convert(s.conversion, &o).1).await {
            Ok((items, rv)) => {
                found(&self.missing, i, s);
                Ok((items, rv))
            }
            Err(Listed::NotInstalled) => {
                not_installed(&self.missing, i, s, self.crd_poll);
                Ok((Vec::new(), MISSING))
            }
            Err(Listed::Failed(e)) => Err(e),
        }
    }

    async fn list_all(&self) -> Result<Listing, DatastoreError> {
        // Where Calico's kinds are, and whether any that matters is there: one or two
        // discovery requests, before anything is listed.
        let (group, chosen) = self.choose_group().await?;
        let served = self.served(group).await?;
        let usable = CORE_KINDS.iter().any(|k| served.contains(k.plural()));
        self.say_usable(group, chosen, usable);
        if !usable {
            return Err(DatastoreError::Unusable {
                what: group::no_calico_kinds(group, chosen),
            });
        }
        self.read_group(group, chosen);
        let sources = self.sources_of(group);
        // Every type at once: a restarted API server builds each type's watch cache when it is
        // first asked for it (answering 429 "storage is (re)initializing" meanwhile), so asking
        // one type after the other costs a back-off per type; at once, one for all.
        let lists =
            future::try_join_all(sources.iter().enumerate().map(|(i, s)| self.list_one(i, s)))
                .await?;
        let mut items = Vec::new();
        let mut revs = Vec::with_capacity(lists.len());
        for (its, rv) in lists {
            items.extend(its);
            revs.push(rv);
        }
        let revision = revs
            .iter()
            .copied()
            .filter(|r| *r != MISSING)
            .min()
            .unwrap_or(0);
        *self.marks() = revs;
        Ok(Listing {
            revision: Revision(revision),
            items: items.into(),
        })
    }

    async fn open_watch(&self, from: Revision) -> Result<WatchStream, DatastoreError> {
        let after = from.0.saturating_sub(1);
        let marks: Vec<u64> = {
            let m = self.marks();
            // Resuming exactly where the last watch (or list) left off: each source from its
            // own point. Otherwise every source from `after`. A missing CRD stays missing (it
            // is asked for again, and listed whole when it answers).
            if m.iter().copied().filter(|r| *r != MISSING).min() == Some(after) {
                m.clone()
            } else {
                m.iter()
                    .map(|r| if *r == MISSING { MISSING } else { after })
                    .collect()
            }
        };
        // Bookmarks are on by default.
        let wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        let sources = self.sources_now();
        // Every type's watch at once, for the reason `list_all` gives.
        let opened = future::try_join_all(sources.iter().zip(&marks).enumerate().map(
            |(i, (s, mark))| {
                let wp = &wp;
                async move {
                    if *mark == MISSING {
                        return Ok(self.poll_missing(i, s));
                    }
                    match deadline("watch", s, self.api(s).watch(wp, &mark.to_string())).await? {
                        Ok(events) => Ok(events.boxed()),
                        // The CRD was removed since it was listed: list again, which finds it
                        // missing and drops its objects.
                        Err(kube::Error::Api(st)) if st.code == 404 && s.conversion.optional() => {
                            Err(DatastoreError::TooOld {
                                requested: from,
                                oldest: from,
                            })
                        }
                        Err(e) => Err(error(e, from, "watch", s)),
                    }
                }
            },
        ))
        .await?;
        let streams: Vec<Tagged> = opened
            .into_iter()
            .enumerate()
            .map(|(i, events)| {
                // Tagged with the source, and ended with `None` so that the end of one watch
                // ends the merged stream (the syncer then resumes all of them).
                events
                    .map(move |e| (i, Some(e)))
                    .chain(stream::once(async move { (i, None) }))
                    .boxed()
            })
            .collect();
        let merge = Merge {
            events: stream::select_all(streams),
            sources,
            marks,
            shared: self.marks.clone(),
            reported: after,
            from,
            done: false,
        };
        Ok(stream::unfold(merge, |mut m| async move {
            let ev = m.next().await?;
            Some((ev, m))
        })
        .boxed())
    }
}

/// One source's watch events.
type Events = BoxStream<'static, Result<KubeEvent<DynamicObject>, kube::Error>>;

/// One source's watch, its events tagged with the source's index; `None` when it ends.
type Tagged = BoxStream<'static, (usize, Option<Result<KubeEvent<DynamicObject>, kube::Error>>)>;

/// The watches of every source, merged into one stream of events at a safe revision.
struct Merge {
    events: stream::SelectAll<Tagged>,
    sources: Arc<[Source]>,
    marks: Vec<u64>,
    shared: Arc<Mutex<Vec<u64>>>,
    reported: u64,
    from: Revision,
    done: bool,
}

impl Merge {
    /// The revision every source has reached.
    fn safe(&self) -> Revision {
        let safe = self.marks.iter().copied().filter(|m| *m != MISSING).min();
        Revision(safe.unwrap_or(self.reported))
    }

    fn advance(&mut self, i: usize, rv: u64) {
        if let Some(m) = self.marks.get_mut(i) {
            *m = (*m).max(rv);
        }
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = self.marks.clone();
    }

    /// A bookmark of source `i`. For a source whose CRD was missing, its first bookmark ends
    /// the listing of its objects: from here it counts in the safe revision, from no earlier
    /// than the others have reached (its list was at the API server's newest revision, so no
    /// later than that in practice).
    fn bookmark(&mut self, i: usize, rv: u64) {
        if self.marks.get(i) == Some(&MISSING) {
            let others = self
                .marks
                .iter()
                .copied()
                .filter(|m| *m != MISSING)
                .min()
                .unwrap_or(0);
            if let Some(m) = self.marks.get_mut(i) {
                *m = rv.max(others);
            }
        } else if let Some(m) = self.marks.get_mut(i) {
            *m = (*m).max(rv);
        }
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = self.marks.clone();
    }

    fn fail(&mut self, e: DatastoreError) -> Option<Result<WatchEvent, DatastoreError>> {
        self.done = true;
        Some(Err(e))
    }

    async fn next(&mut self) -> Option<Result<WatchEvent, DatastoreError>> {
        loop {
            if self.done {
                return None;
            }
            let (i, ev) = self.events.next().await?;
            let Some(source) = self.sources.get(i) else {
                continue;
            };
            let conversion = source.conversion;
            let ev = match ev {
                None => {
                    debug!(source = i, "kubernetes watch ended");
                    self.done = true;
                    return None;
                }
                Some(Err(e)) => {
                    let e = error(e, self.from, "watch", source);
                    return self.fail(e);
                }
                Some(Ok(ev)) => ev,
            };
            match ev {
                KubeEvent::Added(o) | KubeEvent::Modified(o) => {
                    let rv = match object_rv(&o) {
                        Ok(rv) => rv,
                        Err(e) => return self.fail(e),
                    };
                    self.advance(i, rv);
                    let revision = self.safe();
                    self.reported = revision.0;
                    match convert(conversion, &o) {
                        (_, Some(item)) => return Some(Ok(WatchEvent::Put { revision, item })),
                        (Some(id), None) => return Some(Ok(WatchEvent::Delete { revision, id })),
                        (None, None) => continue,
                    }
                }
                KubeEvent::Deleted(o) => {
                    let rv = match object_rv(&o) {
                        Ok(rv) => rv,
                        Err(e) => return self.fail(e),
                    };
                    self.advance(i, rv);
                    let revision = self.safe();
                    self.reported = revision.0;
                    match convert(conversion, &o).0 {
                        Some(id) => return Some(Ok(WatchEvent::Delete { revision, id })),
                        None => continue,
                    }
                }
                KubeEvent::Bookmark(b) => {
                    let rv = match parse_rv(&b.metadata.resource_version) {
                        Ok(rv) => rv,
                        Err(e) => return self.fail(e),
                    };
                    self.bookmark(i, rv);
                    let safe = self.safe();
                    if safe.0 > self.reported {
                        self.reported = safe.0;
                        return Some(Ok(WatchEvent::Progress(safe)));
                    }
                }
                KubeEvent::Error(status) => {
                    let e = status_error(
                        status.code,
                        &status.reason,
                        &status.message,
                        self.from,
                        "watch",
                        source,
                    );
                    return self.fail(e);
                }
            }
        }
    }
}

impl Datastore for Kubernetes {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn list(&self) -> BoxFuture<'_, Result<Listing, DatastoreError>> {
        Box::pin(self.list_all())
    }

    fn watch(&self, from: Revision) -> BoxFuture<'_, Result<WatchStream, DatastoreError>> {
        Box::pin(self.open_watch(from))
    }

    fn calico_driver(&self) -> crate::calico::libcalico::Driver {
        crate::calico::libcalico::Driver::Kubernetes
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), DatastoreError>> {
        Box::pin(async {
            // One object of the first type we read whose CRD is installed: proves the API
            // server answers and that we may still read (a 403 after an RBAC change shows
            // here).
            let sources = self.sources_now();
            let first = {
                let m = self.marks();
                sources
                    .iter()
                    .zip(m.iter())
                    .find(|(_, mark)| **mark != MISSING)
                    .map(|(s, _)| s.clone())
            };
            let Some(s) = first.as_ref().or(sources.last()) else {
                return Ok(());
            };
            deadline("list", s, self.api(s).list(&ListParams::default().limit(1)))
                .await?
                .map_err(|e| error(e, Revision(0), "list", s))?;
            Ok(())
        })
    }
}

/// `request` (`verb` on source `s`), or Unavailable if it takes longer than
/// [`REQUEST_TIMEOUT`].
async fn deadline<T>(
    verb: &str,
    s: &Source,
    request: impl std::future::Future<Output = T>,
) -> Result<T, DatastoreError> {
    within(|| format!("kubernetes API, {verb} {}", s.name()), request).await
}

/// A request within [`REQUEST_TIMEOUT`]; `what` names it in the error.
async fn within<T>(
    what: impl FnOnce() -> String,
    request: impl std::future::Future<Output = T>,
) -> Result<T, DatastoreError> {
    tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .map_err(|_| {
            DatastoreError::unavailable(
                what(),
                format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
            )
        })
}

fn parse_rv(rv: &str) -> Result<u64, DatastoreError> {
    rv.parse().map_err(|_| {
        DatastoreError::unavailable(
            "kubernetes API",
            format!(
                "resourceVersion {rv:?} is not a number: this backend needs an etcd-backed API server"
            ),
        )
    })
}

fn object_rv(o: &DynamicObject) -> Result<u64, DatastoreError> {
    parse_rv(o.meta().resource_version.as_deref().unwrap_or(""))
}

/// A status the API server answered `verb` on source `s` with. 410 is "too old"; 403 says
/// which permission is missing, in the words of an RBAC rule, since an operator can do nothing
/// with a bare "forbidden".
fn status_error(
    code: u16,
    reason: &str,
    message: &str,
    from: Revision,
    verb: &str,
    s: &Source,
) -> DatastoreError {
    if code == 410 || reason == "Expired" || reason == "Gone" {
        DatastoreError::TooOld {
            requested: from,
            oldest: from,
        }
    } else if code == 403 {
        DatastoreError::Refused {
            what: format!(
                "kubernetes API: may not {verb} {} (grant get, list and watch on it; the README lists the rules)",
                s.name()
            ),
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    } else {
        DatastoreError::Refused {
            what: format!("kubernetes API, {verb} {}", s.name()),
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }
}

fn error(e: kube::Error, from: Revision, verb: &str, s: &Source) -> DatastoreError {
    match e {
        kube::Error::Api(st) => status_error(st.code, &st.reason, &st.message, from, verb, s),
        other => DatastoreError::unavailable(format!("kubernetes API, {verb} {}", s.name()), other),
    }
}

#[cfg(test)]
mod tests;
