//! typha-agent: the node agent.

pub mod dataplane;
