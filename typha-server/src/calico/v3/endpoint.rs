//! Workload and host endpoint specs.

use serde::{Deserialize, Serialize};

use super::policy::ProtocolSpec;

/// A named port on an endpoint. A field left out is Go's zero value, as Calico reads it (an
/// unnamed port, protocol `""`, port 0), for the conversion to judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPortSpec {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Protocol.
    #[serde(default = "no_protocol")]
    pub protocol: ProtocolSpec,
    /// Port.
    #[serde(default)]
    pub port: u16,
}

fn no_protocol() -> ProtocolSpec {
    ProtocolSpec::Name(String::new())
}

/// A 1:1 NAT of a workload address. An address left out is `""` (the conversion skips the NAT,
/// as Calico's processor does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpNatSpec {
    /// Inside address.
    #[serde(rename = "internalIP", default)]
    pub internal_ip: String,
    /// Outside address.
    #[serde(rename = "externalIP", default)]
    pub external_ip: String,
}

/// WorkloadEndpoint spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadEndpointSpec {
    /// Orchestrator (`k8s`).
    pub orchestrator: String,
    /// Workload name (non-Kubernetes orchestrators).
    pub workload: String,
    /// Node.
    pub node: String,
    /// Container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Pod name (Kubernetes).
    pub pod: String,
    /// Endpoint name (`eth0`).
    pub endpoint: String,
    /// Service account.
    pub service_account_name: String,
    /// Addresses.
    pub ip_networks: Vec<String>,
    /// 1:1 NATs.
    #[serde(rename = "ipNATs")]
    pub ip_nats: Vec<IpNatSpec>,
    /// IPv4 gateway.
    #[serde(rename = "ipv4Gateway")]
    pub ipv4_gateway: String,
    /// IPv6 gateway.
    #[serde(rename = "ipv6Gateway")]
    pub ipv6_gateway: String,
    /// Profiles.
    pub profiles: Vec<String>,
    /// Host-side interface.
    pub interface_name: String,
    /// MAC address.
    pub mac: String,
    /// Named ports.
    pub ports: Vec<EndpointPortSpec>,
    /// Source prefixes the workload may spoof.
    pub allow_spoofed_source_prefixes: Vec<String>,
}

/// HostEndpoint spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostEndpointSpec {
    /// Node.
    pub node: String,
    /// Interface (empty: by address; `*`: all).
    pub interface_name: String,
    /// Expected addresses.
    #[serde(rename = "expectedIPs")]
    pub expected_ips: Vec<String>,
    /// Profiles.
    pub profiles: Vec<String>,
    /// Named ports.
    pub ports: Vec<EndpointPortSpec>,
}
