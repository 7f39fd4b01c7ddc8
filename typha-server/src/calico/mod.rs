//! Calico's data model, in the forms the server handles.
//!
//! - [`v3`]: the `projectcalico.org/v3` resources the datastores hold (what `calicoctl` and
//!   Calico's CRDs speak), parsed and checked.
//! - [`convert`]: the one conversion from v3 resources to the felix syncer's KV model, the way
//!   Calico's update processors do it.
//! - [`libcalico`]: the model's KVs as Calico's own clients receive them over Calico's Typha
//!   protocol (libcalico-go's key paths and JSON), per syncer type.
//!
//! Every datastore backend produces [`v3::Resource`]s; the cache's pipeline converts them once.
//! Nothing here does I/O.

pub mod convert;
pub mod libcalico;
pub mod v3;
