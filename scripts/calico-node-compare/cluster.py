"""The seeded cluster and its churn, for both datastores.

Everything here is data: Calico v3 resources (applied with calicoctl), raw etcd
key/values (IPAM, a GlobalNetworkSet with an invalid CIDR that calicoctl would
refuse), and Kubernetes objects (written with curl to the API server).

The node under test is NODE ("node-a"); its Felix runs in a network namespace
per side, and the interfaces of its local workload endpoints are created there.
"""
import hashlib
import json

NODE = "node-a"
NODES = {
    # name: (ipv4/24, ipv6/64, vxlan tunnel v4, vxlan MAC, ipip tunnel, vxlan v6, vxlan MAC v6, labels)
    "node-a": ("172.30.0.1/24", "fd00:30::1/64", "10.65.0.1", "66:11:22:33:44:0a", "10.64.0.1",
               "fd00:65::1", "66:11:22:33:44:1a", {"zone": "z1", "rack": "r1", "node-role": "worker"}),
    "node-b": ("172.30.0.2/24", "fd00:30::2/64", "10.65.0.65", "66:11:22:33:44:0b", "10.64.0.65",
               "fd00:65::41", "66:11:22:33:44:1b", {"zone": "z1", "rack": "r2", "node-role": "worker"}),
    "node-c": ("172.30.0.3/24", "fd00:30::3/64", "10.65.0.129", "66:11:22:33:44:0c", "10.64.0.129",
               "fd00:65::81", "66:11:22:33:44:1c",
               {"zone": "z2", "rack": "r3", "node-role": "infra", "route-reflector": "true"}),
}

V3 = "projectcalico.org/v3"


def r(kind, name, spec, namespace=None, labels=None, annotations=None):
    md = {"name": name}
    if namespace:
        md["namespace"] = namespace
    if labels:
        md["labels"] = labels
    if annotations:
        md["annotations"] = annotations
    return {"apiVersion": V3, "kind": kind, "metadata": md, "spec": spec}


def esc(s):
    return s.replace("-", "--")


def wep_name(node, pod, endpoint="eth0"):
    return f"{esc(node)}-k8s-{esc(pod)}-{esc(endpoint)}"


def k8s_veth(namespace, pod):
    return "cali" + hashlib.sha1(f"{namespace}.{pod}".encode()).hexdigest()[:11]


# ---------------------------------------------------------------- workloads
# (pod, namespace, node, ipv4 list, ipv6 list, labels, ports, serviceaccount, extra)
WORKLOADS = [
    ("web-1", "prod", "node-a", ["10.65.0.2"], ["fd00:65::2"], {"app": "web", "tier": "frontend"},
     [("http", "TCP", 8080), ("metrics", "TCP", 9090)], "web", {}),
    ("web-2", "prod", "node-a", ["10.65.0.3"], [], {"app": "web", "tier": "frontend"},
     [("http", "TCP", 8080), ("metrics", "TCP", 9090)], "web", {}),
    ("db-1", "prod", "node-a", ["10.65.0.4"], [], {"app": "db", "tier": "backend"},
     [("pg", "TCP", 5432), ("sctp-sig", "SCTP", 3868)], "db", {}),
    # borrowed: 10.65.0.70 is in node-b's block 10.65.0.64/26, allocated to node-a.
    ("borrow-1", "dev", "node-a", ["10.65.0.70"], [], {"app": "tools"},
     [("dns", "UDP", 53), ("dnstcp", "TCP", 53)], "default", {}),
    ("nat-1", "dev", "node-a", ["10.64.0.2"], [], {"app": "nat"}, [], "default",
     {"ipNATs": [{"internalIP": "10.64.0.2", "externalIP": "172.30.9.9"}]}),
    ("api-1", "prod", "node-b", ["10.65.0.66"], ["fd00:65::42"], {"app": "api", "tier": "backend"},
     [("http", "TCP", 8000)], "api", {}),
    ("api-2", "prod", "node-b", ["10.65.0.67"], [], {"app": "api", "tier": "backend"},
     [("http", "TCP", 8000)], "api", {}),
    ("cache-1", "prod", "node-b", ["10.66.0.2"], [], {"app": "cache"}, [("redis", "TCP", 6379)],
     "default", {}),
    ("frontend-1", "dev", "node-b", ["10.65.0.68"], [], {"app": "frontend"},
     [("http", "TCP", 80)], "default", {}),
    ("web-3", "dev", "node-b", ["10.64.0.66"], [], {"app": "web"}, [("http", "TCP", 8080)],
     "default", {}),
    # borrowed: 10.65.0.10 is in node-a's block, allocated to node-c.
    ("mon-1", "monitoring", "node-c", ["10.65.0.10"], [], {"app": "prometheus"},
     [("metrics", "TCP", 9090)], "prometheus", {}),
    ("mon-2", "monitoring", "node-c", ["10.65.0.130"], ["fd00:65::82"], {"app": "grafana"},
     [("http", "TCP", 3000)], "default", {}),
    ("dns-1", "kube-system", "node-c", ["10.65.0.131"], [], {"k8s-app": "kube-dns"},
     [("dns", "UDP", 53), ("dns-tcp", "TCP", 53), ("metrics", "TCP", 9153)], "coredns", {}),
    ("dns-2", "kube-system", "node-c", ["10.65.0.132"], [], {"k8s-app": "kube-dns"},
     [("dns", "UDP", 53), ("dns-tcp", "TCP", 53)], "coredns", {}),
]
NAMESPACES = {
    "prod": {"env": "prod", "team": "shop"},
    "dev": {"env": "dev", "team": "shop"},
    "monitoring": {"env": "infra", "purpose": "monitoring"},
    "kube-system": {"env": "infra"},
}
SERVICEACCOUNTS = {("prod", "web"): {"role": "web"}, ("prod", "db"): {"role": "db"},
                   ("prod", "api"): {"role": "api"}, ("monitoring", "prometheus"): {"role": "scraper"},
                   ("kube-system", "coredns"): {"role": "dns"}}
# Churn adds this workload on node-a:
NEW_LOCAL = ("web-4", "prod", "node-a", ["10.65.0.5"], [], {"app": "web", "tier": "frontend"},
             [("http", "TCP", 8080)], "web", {})


def etcd_iface(pod):
    return "cali" + pod.replace("-", "")[:11]


def local_ifaces(datastore):
    """Interfaces of node-a's workloads (they are created in each Felix's namespace)."""
    out = []
    for w in WORKLOADS + [NEW_LOCAL]:
        if w[2] == NODE:
            out.append(etcd_iface(w[0]) if datastore == "etcd" else k8s_veth(w[1], w[0]))
    return out


def wep(w, datastore="etcd"):
    pod, ns, node, v4, v6, labels, ports, sa, extra = w
    spec = {
        "orchestrator": "k8s", "node": node, "pod": pod, "endpoint": "eth0",
        "containerID": hashlib.sha1(pod.encode()).hexdigest()[:16],
        "ipNetworks": [a + "/32" for a in v4] + [a + "/128" for a in v6],
        "profiles": [f"kns.{ns}", f"ksa.{ns}.{sa}"],
        "interfaceName": etcd_iface(pod),
        "serviceAccountName": sa,
        "ports": [{"name": n, "protocol": p, "port": port} for (n, p, port) in ports],
    }
    spec.update(extra)
    lab = dict(labels)
    return r("WorkloadEndpoint", wep_name(node, pod), spec, namespace=ns, labels=lab)


def profiles():
    out = []
    for ns, labels in NAMESPACES.items():
        out.append(r("Profile", f"kns.{ns}", {
            "ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
            "labelsToApply": {"pcns.projectcalico.org/name": ns,
                              **{f"pcns.{k}": v for k, v in labels.items()}}}))
    sas = set((w[1], w[7]) for w in WORKLOADS + [NEW_LOCAL])
    for (ns, sa) in sorted(sas):
        labels = SERVICEACCOUNTS.get((ns, sa), {})
        out.append(r("Profile", f"ksa.{ns}.{sa}", {
            "labelsToApply": {"pcsa.projectcalico.org/name": sa,
                              **{f"pcsa.{k}": v for k, v in labels.items()}}}))
    out.append(r("Profile", "allow-all-host", {"ingress": [{"action": "Allow"}],
                                               "egress": [{"action": "Allow"}]}))
    return out


# ---------------------------------------------------------------- nodes / IPAM
def calico_nodes():
    out = []
    for name, (v4, v6, vx, mac, ipip, vx6, mac6, labels) in NODES.items():
        bgp = {"ipv4Address": v4, "ipv6Address": v6, "ipv4IPIPTunnelAddr": ipip}
        if name == "node-c":
            bgp["asNumber"] = 64513
            bgp["routeReflectorClusterID"] = "224.0.0.1"
        out.append(r("Node", name, {
            "bgp": bgp, "ipv4VXLANTunnelAddr": vx, "vxlanTunnelMACAddr": mac,
            "ipv6VXLANTunnelAddr": vx6, "vxlanTunnelMACAddrV6": mac6,
            "addresses": [{"address": v4, "type": "CalicoNodeIP"},
                          {"address": v4.split("/")[0], "type": "InternalIP"}],
            "orchRefs": [{"nodeName": name, "orchestrator": "k8s"}],
        }, labels=dict(labels, **{"kubernetes.io/hostname": name})))
    return out


def ippools():
    return [
        r("IPPool", "pool-ipip", {"cidr": "10.64.0.0/16", "ipipMode": "Always", "vxlanMode": "Never",
                                  "natOutgoing": True, "blockSize": 26, "nodeSelector": "all()"}),
        r("IPPool", "pool-vxlan", {"cidr": "10.65.0.0/16", "ipipMode": "Never", "vxlanMode": "Always",
                                   "natOutgoing": True, "blockSize": 26, "nodeSelector": "all()"}),
        r("IPPool", "pool-plain", {"cidr": "10.66.0.0/16", "ipipMode": "Never", "vxlanMode": "Never",
                                   "natOutgoing": False, "blockSize": 26,
                                   "nodeSelector": "zone == 'z1'"}),
        r("IPPool", "pool-v6", {"cidr": "fd00:65::/48", "ipipMode": "Never", "vxlanMode": "CrossSubnet",
                                "natOutgoing": True, "blockSize": 122}),
        r("IPPool", "pool-disabled", {"cidr": "10.67.0.0/16", "ipipMode": "Never", "vxlanMode": "Always",
                                      "natOutgoing": True, "blockSize": 26, "disabled": True}),
    ]


# blocks: cidr -> (affine node, {ip: (owner node, pod/tunnel attrs)})
def blocks(include_new=False):
    b = {
        "10.65.0.0/26": ("node-a", {}), "10.65.0.64/26": ("node-b", {}),
        "10.65.0.128/26": ("node-c", {}), "10.64.0.0/26": ("node-a", {}),
        "10.64.0.64/26": ("node-b", {}), "10.64.0.128/26": ("node-c", {}),
        "10.66.0.0/26": ("node-b", {}),
        "fd00:65::/122": ("node-a", {}), "fd00:65::40/122": ("node-b", {}),
        "fd00:65::80/122": ("node-c", {}),
    }

    def add(ip, node, attrs):
        import ipaddress
        a = ipaddress.ip_address(ip)
        for cidr in b:
            if a in ipaddress.ip_network(cidr):
                b[cidr][1][ip] = (node, attrs)
                return
        raise ValueError(ip)

    for name, (v4, v6, vx, mac, ipip, vx6, mac6, labels) in NODES.items():
        add(vx, name, {"type": "vxlanTunnelAddress", "node": name})
        add(ipip, name, {"type": "ipipTunnelAddress", "node": name})
        add(vx6, name, {"type": "vxlanV6TunnelAddress", "node": name})
    for w in WORKLOADS + ([NEW_LOCAL] if include_new else []):
        for ip in w[3] + w[4]:
            add(ip, w[2], {"namespace": w[1], "pod": w[0], "node": w[2]})
    return b


def block_json(cidr, node, allocs):
    import ipaddress
    net = ipaddress.ip_network(cidr)
    n = net.num_addresses
    allocations = [None] * n
    attributes = []
    seq = {}
    for ip, (owner, attrs) in sorted(allocs.items(), key=lambda kv: ipaddress.ip_address(kv[0])):
        ordinal = int(ipaddress.ip_address(ip)) - int(net.network_address)
        allocations[ordinal] = len(attributes)
        handle = ("k8s-pod-network." + hashlib.sha1(attrs.get("pod", ip).encode()).hexdigest()
                  if "pod" in attrs else f"{attrs['type']}-{owner}")
        attributes.append({"handle_id": handle, "secondary": dict(attrs)})
        seq[str(ordinal)] = 0
    return {
        "cidr": cidr, "affinity": f"host:{node}", "allocations": allocations,
        "unallocated": [i for i in range(n) if allocations[i] is None],
        "attributes": attributes, "sequenceNumber": 0,
        "sequenceNumberForAllocation": seq, "deleted": False,
    }


def block_key(cidr):
    v = 6 if ":" in cidr else 4
    return f"/calico/ipam/v2/assignment/ipv{v}/block/{cidr.replace('/', '-')}"


def affinity_key(node, cidr):
    v = 6 if ":" in cidr else 4
    return f"/calico/ipam/v2/host/{node}/ipv{v}/block/{cidr.replace('/', '-')}"


# ---------------------------------------------------------------- policy
def tiers():
    return [r("Tier", "security", {"order": 100, "defaultAction": "Deny"}),
            r("Tier", "platform", {"order": 200, "defaultAction": "Pass"})]


def networksets():
    return [
        r("GlobalNetworkSet", "gns-corp", {"nets": ["198.18.0.0/15", "203.0.113.0/24", "2001:db8:1::/48"]},
          labels={"netset": "corp"}),
        r("GlobalNetworkSet", "gns-scanners", {"nets": ["100.64.7.0/24", "100.64.9.9/32"]},
          labels={"blocklist": "true", "kind": "scanners"}),
        r("NetworkSet", "ns-partners", {"nets": ["192.0.2.0/24", "198.51.100.0/25"]},
          namespace="prod", labels={"netset": "partners"}),
        r("NetworkSet", "ns-devtools", {"nets": ["100.70.0.0/16"]}, namespace="dev",
          labels={"netset": "devtools"}),
    ]


# The one with a bad CIDR: written raw (calicoctl's validation refuses it).
BAD_GNS_NAME = "gns-bad-cidr"
BAD_GNS_NETS = ["10.1.0.0/16", "not-a-cidr", "192.168.5.0/24"]
BAD_GNS_LABELS = {"blocklist": "true", "kind": "bad"}


def policies():
    P = []
    P.append(r("GlobalNetworkPolicy", "deny-blocklist", {
        "tier": "security", "order": 10, "selector": "all()", "types": ["Ingress", "Egress"],
        "ingress": [{"action": "Deny", "source": {"selector": "blocklist == 'true'"}}],
        "egress": [{"action": "Deny", "destination": {"selector": "blocklist == 'true'"}},
                   {"action": "Pass"}]}))
    P.append(r("GlobalNetworkPolicy", "sctp-and-numeric", {
        "tier": "security", "order": 20, "selector": "app == 'db'", "types": ["Ingress"],
        "ingress": [
            {"action": "Allow", "protocol": 132, "source": {"nets": ["10.65.0.0/16"]},
             "destination": {"ports": [3868]}},
            {"action": "Allow", "protocol": 6, "destination": {"ports": [5432, "6000:6010"]},
             "source": {"selector": "app == 'api'"}},
            {"action": "Allow", "protocol": "UDPLite"},
            {"action": "Allow", "protocol": 47},
            {"action": "Deny", "protocol": "ICMP", "icmp": {"type": 8, "code": 0}},
            {"action": "Allow", "notProtocol": 17, "source": {"notNets": ["10.66.0.0/16"]}},
            {"action": "Pass"}]}))
    P.append(r("GlobalNetworkPolicy", "named-ports", {
        "tier": "platform", "order": 100, "selector": "tier == 'frontend' || tier == 'backend'",
        "types": ["Ingress"],
        "ingress": [
            {"action": "Allow", "protocol": "TCP", "destination": {"ports": ["http", "metrics"]},
             "source": {"selector": "app == 'prometheus' || app == 'frontend'"}},
            {"action": "Allow", "protocol": "TCP", "source": {"namespaceSelector": "env == 'infra'",
                                                              "serviceAccounts": {"names": ["prometheus"]}},
             "destination": {"ports": ["metrics", 9100]}},
            {"action": "Log", "protocol": "UDP", "destination": {"ports": ["dns"]}},
            {"action": "Pass"}]}))
    P.append(r("GlobalNetworkPolicy", "prednat-gw", {
        "tier": "default", "order": 5, "selector": "role == 'gateway'", "preDNAT": True,
        "applyOnForward": True, "types": ["Ingress"],
        "ingress": [{"action": "Deny", "source": {"nets": ["100.64.0.0/10"]}},
                    {"action": "Deny", "protocol": "TCP", "destination": {"ports": [23, "2000:2100"]}}]}))
    P.append(r("GlobalNetworkPolicy", "untracked-gw", {
        "tier": "default", "order": 6, "selector": "role == 'gateway'", "doNotTrack": True,
        "applyOnForward": True, "types": ["Ingress", "Egress"],
        "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": [22, "ssh"]}},
                    {"action": "Allow", "protocol": "UDP", "source": {"ports": [123]}}],
        "egress": [{"action": "Allow", "protocol": "UDP", "destination": {"ports": [123]}}]}))
    P.append(r("GlobalNetworkPolicy", "host-baseline", {
        "tier": "default", "order": 500, "selector": "has(host-endpoint)", "types": ["Ingress", "Egress"],
        "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": ["ssh", 179]}},
                    {"action": "Allow", "source": {"selector": "netset == 'corp'"}}],
        "egress": [{"action": "Allow"}]}))
    P.append(r("GlobalNetworkPolicy", "default-ns-isolation", {
        "tier": "default", "order": 1000, "namespaceSelector": "team == 'shop'",
        "types": ["Ingress"],
        "ingress": [{"action": "Allow", "source": {"namespaceSelector": "team == 'shop'"}},
                    {"action": "Allow", "source": {"selector": "netset == 'partners'"}},
                    {"action": "Allow", "source": {"nets": ["172.30.0.0/24"]}, "ipVersion": 4},
                    {"action": "Allow", "source": {"nets": ["fd00:30::/64"]}, "ipVersion": 6}]}))
    P.append(r("NetworkPolicy", "web-allow", {
        "tier": "default", "order": 100, "selector": "app == 'web'", "types": ["Ingress", "Egress"],
        "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": ["http"]},
                     "source": {"selector": "app == 'frontend'"}},
                    {"action": "Allow", "protocol": "TCP", "source": {"selector": "netset == 'partners'"},
                     "destination": {"ports": [443, "http"]}}],
        "egress": [{"action": "Allow", "protocol": "TCP", "destination": {"selector": "app == 'db'",
                                                                          "ports": ["pg"]}},
                   {"action": "Allow", "protocol": "UDP", "destination": {
                       "namespaceSelector": "projectcalico.org/name == 'kube-system'",
                       "selector": "k8s-app == 'kube-dns'", "ports": ["dns"]}},
                   {"action": "Deny", "destination": {"notNets": ["10.0.0.0/8"]}}]},
        namespace="prod"))
    P.append(r("NetworkPolicy", "db-strict", {
        "tier": "security", "order": 50, "selector": "app == 'db'", "types": ["Ingress"],
        "ingress": [{"action": "Allow", "protocol": "TCP",
                     "source": {"serviceAccounts": {"selector": "role == 'web'"}},
                     "destination": {"ports": ["pg"]}},
                    {"action": "Deny"}]}, namespace="prod"))
    P.append(r("NetworkPolicy", "dev-open", {
        "tier": "platform", "order": 10, "selector": "all()", "types": ["Ingress", "Egress"],
        "ingress": [{"action": "Allow", "protocol": 132}, {"action": "Allow", "protocol": "TCP",
                                                           "destination": {"ports": ["dns", "dnstcp"]}}],
        "egress": [{"action": "Allow", "destination": {"selector": "netset == 'devtools'"}},
                   {"action": "Pass"}]}, namespace="dev"))
    P.append(r("StagedGlobalNetworkPolicy", "staged-lockdown", {
        "tier": "security", "order": 30, "selector": "all()", "stagedAction": "Set",
        "types": ["Ingress"], "ingress": [{"action": "Deny", "source": {"nets": ["0.0.0.0/0"]}}]}))
    P.append(r("StagedNetworkPolicy", "staged-web", {
        "tier": "default", "order": 200, "selector": "app == 'web'", "stagedAction": "Set",
        "types": ["Egress"], "egress": [{"action": "Deny"}]}, namespace="prod"))
    return P


def host_endpoints(datastore="etcd"):
    return [
        r("HostEndpoint", "node-a-ext0", {"node": "node-a", "interfaceName": "ext0",
                                          "expectedIPs": ["172.30.5.1"],
                                          "ports": [{"name": "ssh", "protocol": "TCP", "port": 22},
                                                    {"name": "bgp", "protocol": "TCP", "port": 179}]},
          labels={"role": "gateway", "host-endpoint": "true"}),
        r("HostEndpoint", "node-a-all", {"node": "node-a", "interfaceName": "*",
                                         "expectedIPs": ["172.30.0.1"],
                                         "profiles": ["allow-all-host" if datastore == "etcd" else "projectcalico-default-allow"]},
          labels={"host-endpoint": "true", "all-ifaces": "true"}),
        r("HostEndpoint", "node-b-eth0", {"node": "node-b", "interfaceName": "eth0",
                                          "expectedIPs": ["172.30.0.2", "fd00:30::2"],
                                          "ports": [{"name": "ssh", "protocol": "TCP", "port": 2222}]},
          labels={"role": "gateway", "host-endpoint": "true"}),
    ]


def felix_bgp_config():
    return [
        r("FelixConfiguration", "default", {
            "logSeverityScreen": "Info", "reportingInterval": "0s", "usageReportingEnabled": False,
            "vxlanEnabled": True, "ipipEnabled": True, "defaultEndpointToHostAction": "Accept",
            "iptablesRefreshInterval": "90s", "routeRefreshInterval": "90s",
            "healthEnabled": True, "bpfEnabled": False, "nftablesMode": "Disabled",
            "floatingIPs": "Enabled", "xdpEnabled": False}),
        r("FelixConfiguration", "node.node-a", {"logSeverityScreen": "Info",
                                                "externalNodesList": ["198.19.0.0/16"]}),
        r("BGPConfiguration", "default", {
            "logSeverityScreen": "Info", "nodeToNodeMeshEnabled": True, "asNumber": 64512,
            "serviceClusterIPs": [{"cidr": "10.96.0.0/16"}],
            "serviceExternalIPs": [{"cidr": "198.18.100.0/24"}],
            "serviceLoadBalancerIPs": [{"cidr": "198.18.200.0/24"}],
            "communities": [{"name": "tag-a", "value": "64512:100"}],
            "prefixAdvertisements": [{"cidr": "10.65.0.0/16", "communities": ["tag-a", "64512:200"]}],
            "listenPort": 179}),
        r("BGPConfiguration", "node.node-a", {"logSeverityScreen": "Info", "listenPort": 1790}),
        r("BGPFilter", "filter-1", {
            "exportV4": [{"action": "Accept", "matchOperator": "In", "cidr": "10.65.0.0/16",
                          "prefixLength": {"min": 24, "max": 32}},
                         {"action": "Reject", "matchOperator": "NotIn", "cidr": "10.0.0.0/8"}],
            "importV4": [{"action": "Reject", "matchOperator": "Equal", "cidr": "0.0.0.0/0"},
                         {"action": "Accept", "source": "RemotePeers"}],
            "exportV6": [{"action": "Accept", "matchOperator": "In", "cidr": "fd00:65::/48",
                          "prefixLength": {"min": 64, "max": 128}}],
            "importV6": [{"action": "Reject", "interface": "eth*"}]}),
        r("BGPPeer", "peer-global-tor", {"peerIP": "172.30.0.254", "asNumber": 64600,
                                         "filters": ["filter-1"], "keepOriginalNextHop": True}),
        r("BGPPeer", "peer-node-a-v6", {"node": "node-a", "peerIP": "fd00:30::fe", "asNumber": 64601,
                                        "maxRestartTime": "5m0s", "sourceAddress": "None",
                                        "numAllowedLocalASNumbers": 2}),
        r("BGPPeer", "peer-to-rr", {"nodeSelector": "!has(route-reflector)",
                                    "peerSelector": "has(route-reflector)"}),
    ]


# calicoctl has no CalicoNodeStatus: written raw (etcd) or through the CRD (Kubernetes).
def node_status():
    return r("CalicoNodeStatus", "status-node-a", {"node": "node-a", "classes": ["Agent", "BGP", "Routes"],
                                                  "updatePeriodSeconds": 3600})


def calico_resources(datastore):
    """Everything calicoctl applies, in order."""
    out = tiers() + ippools()
    if datastore == "etcd":
        out += calico_nodes() + profiles()
    out += felix_bgp_config() + networksets() + policies() + host_endpoints(datastore)
    if datastore == "etcd":
        out += [wep(w) for w in WORKLOADS]
    return out


# ---------------------------------------------------------------- Kubernetes objects
def k8s_node(name):
    v4, v6, vx, mac, ipip, vx6, mac6, labels = NODES[name]
    ann = {"projectcalico.org/IPv4Address": v4, "projectcalico.org/IPv6Address": v6,
           "projectcalico.org/IPv4VXLANTunnelAddr": vx, "projectcalico.org/VXLANTunnelMACAddr": mac,
           "projectcalico.org/IPv4IPIPTunnelAddr": ipip, "projectcalico.org/IPv6VXLANTunnelAddr": vx6,
           "projectcalico.org/VXLANTunnelMACAddrV6": mac6}
    if name == "node-c":
        ann["projectcalico.org/ASNumber"] = "64513"
        ann["projectcalico.org/RouteReflectorClusterID"] = "224.0.0.1"
    idx = list(NODES).index(name)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels, **{"kubernetes.io/hostname": name}),
                         "annotations": ann},
            "spec": {"podCIDR": f"10.244.{idx}.0/24", "podCIDRs": [f"10.244.{idx}.0/24"]},
            "status": {"addresses": [{"type": "InternalIP", "address": v4.split("/")[0]},
                                     {"type": "Hostname", "address": name}]}}


def k8s_pod(w):
    pod, ns, node, v4, v6, labels, ports, sa, extra = w
    ips = [a + "/32" for a in v4] + [a + "/128" for a in v6]
    ann = {"cni.projectcalico.org/podIP": ips[0], "cni.projectcalico.org/podIPs": ",".join(ips),
           "cni.projectcalico.org/containerID": hashlib.sha1(pod.encode()).hexdigest()}
    if "ipNATs" in extra:
        ann["cni.projectcalico.org/floatingIPs"] = json.dumps([n["externalIP"] for n in extra["ipNATs"]])
    spec = {"nodeName": node, "serviceAccountName": sa, "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                            "ports": [{"name": n, "containerPort": p, "protocol": pr}
                                      for (n, pr, p) in ports]}]}
    status = {"phase": "Running", "podIP": (v4 + v6)[0], "podIPs": [{"ip": a} for a in v4 + v6],
              "hostIP": NODES[node][0].split("/")[0]}
    return ({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": pod, "namespace": ns, "labels": labels, "annotations": ann},
             "spec": spec}, status)


def k8s_network_policies():
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "allow-web", "namespace": "prod"},
         "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": {"tier": "frontend"}}},
                                        {"namespaceSelector": {"matchLabels": {"env": "prod"}}}],
                               "ports": [{"protocol": "TCP", "port": "http"},
                                         {"protocol": "TCP", "port": 8000, "endPort": 8010}]}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "egress-ipblock", "namespace": "prod"},
         "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                  "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                                  "except": ["10.66.0.0/16", "10.65.0.64/26"]}},
                                     {"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:65::40/122"]}}],
                              "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "SCTP", "port": 3868},
                                        {"protocol": "TCP", "port": "pg"}]}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "deny-all-dev", "namespace": "dev"},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "allow-scrape", "namespace": "monitoring"},
         "spec": {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                        "values": ["prometheus", "grafana"]}]},
                  "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
                      {"key": "team", "operator": "In", "values": ["shop"]}]},
                      "podSelector": {"matchLabels": {"app": "web"}}}],
                      "ports": [{"protocol": "TCP", "port": "metrics"}, {"port": "http"}]}]}},
    ]


def k8s_np_new():
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "np-new", "namespace": "monitoring"},
            "spec": {"podSelector": {"matchLabels": {"app": "grafana"}}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [{"ipBlock": {"cidr": "192.0.2.0/24", "except": ["192.0.2.128/25"]}}],
                                  "ports": [{"protocol": "TCP", "port": 3000, "endPort": 3005}]}],
                     "egress": [{"to": [{"podSelector": {}}]}]}}


def _svc(ns, name, ip, ports, eps, node, extra=None):
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
           "spec": {"clusterIP": ip, "ports": [{"name": n, "port": p, "targetPort": t, "protocol": "TCP"}
                                                for (n, p, t) in ports]}}
    if extra:
        svc["spec"].update(extra)
    es = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
          "metadata": {"name": f"{name}-1", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
          "addressType": "IPv4",
          "endpoints": [{"addresses": [a], "nodeName": node, "conditions": {"ready": True}} for a in eps],
          "ports": [{"name": n, "port": p, "protocol": "TCP"} for (n, p, t) in ports]}
    return svc, [es]


def k8s_services():
    return [
        _svc("prod", "web", "10.96.0.50", [("http", 80, 8080)], ["10.65.0.2", "10.65.0.3"], "node-a"),
        _svc("dev", "frontend", "10.96.0.60", [("http", 80, 80)], ["10.65.0.68"], "node-b",
             {"externalIPs": ["198.18.100.5"], "type": "NodePort", "externalTrafficPolicy": "Local"}),
    ]


def k8s_service_new():
    return _svc("prod", "api", "10.96.0.70", [("http", 8000, 8000)], ["10.65.0.66", "10.65.0.67"], "node-b")
