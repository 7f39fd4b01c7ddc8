//! iptables: placeholder, being written.
