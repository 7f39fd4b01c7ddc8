//! typha-client: the library node agents use to consume a typha server. Not implemented yet:
//! this crate is a placeholder so the workspace has its final shape. The planned parts: the
//! `SyncerCallbacks` interface, the dedupe store, connection, discovery and resume, and the
//! bundled agent.
