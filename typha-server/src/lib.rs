//! typha-server: the fan-out caching proxy. Not implemented yet: this crate is a placeholder
//! so the workspace has its final shape. The planned parts (see `docs/` and DESIGN.md):
//! `datastore` (backends behind one trait) → `cache` (single-writer snapshot cache of
//! breadcrumbs) → `fanout` (frames encoded once) → `conn` (one task per client) → `http`
//! (health and metrics).
