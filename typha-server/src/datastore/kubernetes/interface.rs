//! The host-side interface name of a pod's workload endpoint, and the prefix it starts with
//! (`FELIX_INTERFACEPREFIX`).

/// The variable Calico's Kubernetes conversion reads the prefix from (in Typha, as in Felix).
pub const FELIX_INTERFACEPREFIX: &str = "FELIX_INTERFACEPREFIX";

/// The most characters a prefix may have: Felix refuses a longer one.
const MAX_LEN: usize = 15;

/// The prefix of workload interface names: `cali` unless `FELIX_INTERFACEPREFIX` says
/// otherwise (the Tigera operator sets it where another CNI makes the pods' interfaces, on EKS,
/// GKE and AKS: `eni`, `gke`, `azv`).
/// At most 15 ASCII letters, digits, `_` or `-` (what Felix accepts), held inline so that the
/// conversion that carries it stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct InterfacePrefix {
    bytes: [u8; MAX_LEN],
    len: u8,
}

impl InterfacePrefix {
    /// Calico's default, `cali`.
    pub const CALI: InterfacePrefix = InterfacePrefix {
        bytes: *b"cali\0\0\0\0\0\0\0\0\0\0\0",
        len: 4,
    };

    /// The prefix `FELIX_INTERFACEPREFIX` gives, as Calico's conversion takes it: unset or
    /// empty is `cali`; otherwise the first of its comma-separated prefixes (`eni,cali` is
    /// `eni`). Each prefix must be what Felix accepts (1 to 15 ASCII letters, digits, `_`, `-`):
    /// Felix refuses any other value and exits, so no working cluster has one.
    pub fn from_setting(value: &str) -> Result<InterfacePrefix, String> {
        if value.is_empty() {
            return Ok(InterfacePrefix::CALI);
        }
        for p in value.split(',') {
            let ok = (1..=MAX_LEN).contains(&p.len())
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(format!(
                    "{value:?}: {p:?} is not an interface prefix (1 to {MAX_LEN} ASCII letters, digits, '_' or '-', comma-separated, as Felix takes them)"
                ));
            }
        }
        let first = value.split(',').next().unwrap_or_default();
        let mut bytes = [0u8; MAX_LEN];
        for (to, from) in bytes.iter_mut().zip(first.bytes()) {
            *to = from;
        }
        Ok(InterfacePrefix {
            bytes,
            // At most MAX_LEN (15), checked above.
            len: u8::try_from(first.len()).unwrap_or(0),
        })
    }

    /// The prefix.
    pub fn as_str(&self) -> &str {
        let b = self.bytes.get(..usize::from(self.len)).unwrap_or_default();
        // Only ASCII is ever stored.
        std::str::from_utf8(b).unwrap_or_default()
    }
}

impl Default for InterfacePrefix {
    fn default() -> Self {
        InterfacePrefix::CALI
    }
}

impl std::fmt::Debug for InterfacePrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for InterfacePrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Calico's host-side interface name for a pod: the prefix and the first 11 hex digits of the
/// SHA-1 of `<namespace>.<pod>`.
pub fn interface_name(prefix: InterfacePrefix, namespace: &str, pod: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{namespace}.{pod}").as_bytes(),
    );
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{}", hex.get(..11).unwrap_or_default())
}
