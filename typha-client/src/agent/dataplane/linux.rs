//! linux: placeholder.
