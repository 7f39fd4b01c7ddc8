//! typha-agent, the node agent: from the synced stream to the node's routes, iptables and
//! ipsets, the way Felix does it.
//!
//! ```text
//! SyncClient ─▶ run::Feeder ─(queue)─▶ run::run: validate ─▶ calc::CalcGraph ─▶ flush
//!                                                  ─▶ dataplane::Dataplane::apply (Linux or Recording)
//! ```
//!
//! - [`validate`]: an invalid value is applied as a deletion of its key (logged, counted).
//! - [`calc`]: local endpoint filter, label index (policies × local endpoints, with labels
//!   inherited from profiles), rule ipsets over every endpoint of the cluster, routes.
//! - [`dataplane`]: [`dataplane::Desired`] and the managers that make the kernel match it.
//! - [`run`]: the loop: nothing applied before InSync; batching; retries; periodic resync.
//! - [`http`], [`metrics`]: `/liveness`, `/readiness`, `/status`, `/metrics`.
//! - [`cli`]: the `typha-agent` program.

pub mod calc;
pub mod cli;
pub mod dataplane;
pub mod http;
pub mod metrics;
pub mod run;
pub mod validate;
