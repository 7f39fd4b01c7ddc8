//! routes: placeholder, being written.
