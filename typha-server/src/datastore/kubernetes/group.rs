//! Which API group Calico's kinds are read from, and whether any of them can be read at all
//! (see the parent module, "Calico's two API groups").

use std::collections::BTreeSet;

use super::*;

/// The API group (and version) that holds Calico's kinds as CRDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalicoGroup {
    /// `crd.projectcalico.org/v1`: Calico's classic CRDs, the v3 resource's metadata kept in
    /// an annotation, uids converted (Calico's manifests, and the operator, before 3.32; still
    /// under Calico's aggregated API server, which serves `projectcalico.org/v3` from them).
    V1,
    /// `projectcalico.org/v3`: Calico 3.32's v3 CRDs (`manifests/calico-v3-crds.yaml`, the
    /// install without the aggregated API server): the objects are the v3 resources.
    V3,
}

/// The variable Calico's clients (and its Typha) read the API group from.
pub const CALICO_API_GROUP: &str = "CALICO_API_GROUP";

impl CalicoGroup {
    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            CalicoGroup::V1 => CRD_GROUP,
            CalicoGroup::V3 => V3_GROUP,
        }
    }

    /// The version Calico's kinds are served at in [`CalicoGroup::group`].
    pub fn version(self) -> &'static str {
        match self {
            CalicoGroup::V1 => "v1",
            CalicoGroup::V3 => "v3",
        }
    }

    /// `group/version`, as `CALICO_API_GROUP` names it.
    pub fn api_version(self) -> &'static str {
        match self {
            CalicoGroup::V1 => "crd.projectcalico.org/v1",
            CalicoGroup::V3 => "projectcalico.org/v3",
        }
    }

    /// The value of `CALICO_API_GROUP`: empty (or unset) is `None`, discover at each listing
    /// ([`CalicoGroup::discover`]); `projectcalico.org/v3` or `crd.projectcalico.org/v1`, in
    /// any case, is that group. Calico v3.32 takes any other non-empty value for
    /// `crd.projectcalico.org/v1`; here it is refused, so that a typo does not silently read
    /// the other group.
    pub fn from_setting(value: &str) -> Result<Option<CalicoGroup>, String> {
        let v = value.trim();
        if v.is_empty() {
            Ok(None)
        } else if v.eq_ignore_ascii_case(CalicoGroup::V3.api_version()) {
            Ok(Some(CalicoGroup::V3))
        } else if v.eq_ignore_ascii_case(CalicoGroup::V1.api_version()) {
            Ok(Some(CalicoGroup::V1))
        } else {
            Err(format!(
                "{value:?} is not an API group of Calico's (projectcalico.org/v3, crd.projectcalico.org/v1, or unset to discover it)"
            ))
        }
    }

    /// Calico v3.32's choice when `CALICO_API_GROUP` is unset, from the API groups the API
    /// server serves: `projectcalico.org/v3` when that group is served and
    /// `crd.projectcalico.org` is not (the v3 CRDs alone); otherwise, both served (the v1 CRDs
    /// behind Calico's aggregated API server, or a migration under way) or neither,
    /// `crd.projectcalico.org/v1`.
    pub fn discover(v1_served: bool, v3_served: bool) -> CalicoGroup {
        if v3_served && !v1_served {
            CalicoGroup::V3
        } else {
            CalicoGroup::V1
        }
    }
}

impl std::fmt::Display for CalicoGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.api_version())
    }
}

/// The kinds every Calico release with a Kubernetes datastore installs, and without which
/// nothing about policy or pools can be known: while none of them is served in the group read,
/// the backend does not list (the server stays not ready) rather than serve an empty network
/// policy state as if it were the cluster's.
pub const CORE_KINDS: [Kind; 3] = [Kind::IpPool, Kind::NetworkPolicy, Kind::GlobalNetworkPolicy];

/// How the group read was chosen, for the log and the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chosen {
    /// `CALICO_API_GROUP` names it.
    Setting,
    /// Discovered: whether each group is served.
    Discovered { v1: bool, v3: bool },
}

impl std::fmt::Display for Chosen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let served = |b: bool| if b { "served" } else { "not served" };
        match self {
            Chosen::Setting => write!(f, "as {CALICO_API_GROUP} says"),
            Chosen::Discovered { v1, v3 } => write!(
                f,
                "{CALICO_API_GROUP} unset; discovered {CRD_GROUP} {}, {V3_GROUP} {}",
                served(*v1),
                served(*v3)
            ),
        }
    }
}

/// Why nothing is listed: no core kind in `group`.
pub(super) fn no_calico_kinds(group: CalicoGroup, chosen: Chosen) -> String {
    let core: Vec<&str> = CORE_KINDS.iter().map(|k| k.plural()).collect();
    format!(
        "kubernetes API: none of Calico's kinds {} is served in {group} ({chosen}): not ready, rather than serve no policies and no IP pools as if the cluster had none. Install Calico's CRDs ({}, or {} from Calico's calico-v3-crds.yaml), or set {CALICO_API_GROUP} to the group that holds them",
        core.join(", "),
        CalicoGroup::V1,
        CalicoGroup::V3,
    )
}

impl Kubernetes {
    /// The group to read Calico's kinds from for a new listing, and how it was chosen: the
    /// setting, or discovery (`GET /apis`, allowed to every authenticated user by
    /// Kubernetes' `system:discovery` role).
    pub(super) async fn choose_group(&self) -> Result<(CalicoGroup, Chosen), DatastoreError> {
        if let Some(g) = self.api_group {
            return Ok((g, Chosen::Setting));
        }
        let what = "kubernetes API, discovery (GET /apis)";
        let groups = within(|| what.to_owned(), self.client.list_api_groups())
            .await?
            .map_err(|e| discovery_error(what, e))?;
        let served = |name: &str| groups.groups.iter().any(|g| g.name == name);
        let (v1, v3) = (served(CRD_GROUP), served(V3_GROUP));
        Ok((CalicoGroup::discover(v1, v3), Chosen::Discovered { v1, v3 }))
    }

    /// The plurals `group` serves (`GET /apis/<group>/<version>`); none when the API server
    /// does not serve that group version.
    pub(super) async fn served(
        &self,
        group: CalicoGroup,
    ) -> Result<BTreeSet<String>, DatastoreError> {
        let what = format!("kubernetes API, discovery (GET /apis/{group})");
        match within(
            || what.clone(),
            self.client.list_api_group_resources(group.api_version()),
        )
        .await?
        {
            Ok(list) => Ok(list.resources.into_iter().map(|r| r.name).collect()),
            Err(kube::Error::Api(st)) if st.code == 404 => Ok(BTreeSet::new()),
            Err(e) => Err(discovery_error(&what, e)),
        }
    }

    /// Whether Calico's kinds can be read in `group`: said once at warn when none of the
    /// [`CORE_KINDS`] is served (with what to do), once at info when they are again.
    pub(super) fn say_usable(&self, group: CalicoGroup, chosen: Chosen, usable: bool) {
        let mut said = self.unusable.lock().unwrap_or_else(|e| e.into_inner());
        if usable {
            if said.take().is_some() {
                info!(group = %group, "kubernetes API: Calico's kinds are served in {group} now; reading them");
            }
        } else {
            let why = no_calico_kinds(group, chosen);
            if said.as_deref() != Some(why.as_str()) {
                warn!(group = %group, "{why}");
                *said = Some(why);
            }
        }
    }

    /// Records the group a listing read: said at info when it is not the one read before.
    pub(super) fn read_group(&self, group: CalicoGroup, chosen: Chosen) {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if active.is_none_or(|(g, _)| g != group) {
            info!(group = %group, "kubernetes API: reading Calico's kinds from {group} ({chosen})");
            if active.is_some() {
                // Each kind is another CRD now: whether it is installed is said afresh.
                let mut m = self.missing.lock().unwrap_or_else(|e| e.into_inner());
                m.iter_mut().for_each(|f| *f = false);
            }
        }
        *active = Some((group, chosen));
    }
}

fn discovery_error(what: &str, e: kube::Error) -> DatastoreError {
    match e {
        kube::Error::Api(st) => DatastoreError::Refused {
            what: what.to_owned(),
            code: st.code,
            reason: st.reason,
            message: st.message,
        },
        other => DatastoreError::unavailable(what, other),
    }
}
