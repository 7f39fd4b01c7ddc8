//! The agent end to end, proven with packets: a typha server on the embedded datastore and the
//! `typha-agent` binary in a "node" network namespace, two or three "workload" namespaces
//! joined to it by veth pairs (as Calico's CNI plugin wires pods), resources written through
//! the server's write API, and real TCP connections between the workloads.
//!
//! Needs root, iptables, ipset, iproute2 and python3 (the listener and the client).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{Read, Write};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_typha-agent");
const SERVER_PORT: u16 = 5473;
const API_PORT: u16 = 5480;
const HEALTH_PORT: u16 = 9098;
const AGENT_HEALTH: u16 = 9099;

/// Not a test: the tests start this test binary with `TYPHA_TEST_RUN_SERVER=1` inside the node
/// namespace to get a typha-server process built from this workspace (typha-server is a
/// dev-dependency, so its binary's path is not visible to this package's tests).
#[test]
fn typha_server_process() {
    if std::env::var_os("TYPHA_TEST_RUN_SERVER").is_none() {
        return;
    }
    let code = typha_server::cli::main_from(["typha-server"]);
    std::process::exit(if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        1
    });
}

mod common;

use common::netns::Netns;

impl Netns {
    /// A namespace with its loopback up: `tan-…` for the node, `taw-…` for a workload.
    fn new(role: &str) -> Netns {
        Self::add(&format!("ta{role}")).with_lo_up()
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port` inside `ns`.
fn http(ns: &Netns, port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    ns.on_thread(move || {
        let mut s = match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => s,
            Err(e) => return (0, e.to_string()),
        };
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (code, body)
    })
}

/// Whether a TCP connection from `ns` to `ip:port` opens and the listener answers.
fn connects_from(ns: &Netns, ip: &str, port: u16) -> bool {
    ns.try_exec(&[
        "python3",
        "-c",
        &format!(
            "import socket,sys\n\
                 s = socket.create_connection(('{ip}', {port}), timeout=1.5)\n\
                 s.settimeout(1.5)\n\
                 sys.exit(0 if s.recv(2) == b'ok' else 1)\n"
        ),
    ])
}

fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A cluster on one machine: the node namespace with server and agent, workloads around it.
struct Cluster {
    node: Netns,
    /// The other end of the node's uplink (192.168.200.2, node-b's address).
    outside: Netns,
    workloads: Vec<(Netns, String)>,
    server: Child,
    agent: Option<Child>,
    listeners: std::cell::RefCell<Vec<Child>>,
}

impl Cluster {
    /// The node and a server; no agent yet.
    fn new() -> Cluster {
        let node = Netns::new("n");
        let outside = Netns::new("o");
        // The uplink: a subnet the remote nodes' addresses are on, its far end in a namespace
        // of its own (the "outside", holding node-b's address).
        node.ip(&[
            "link",
            "add",
            "ext0",
            "type",
            "veth",
            "peer",
            "name",
            "ext1",
            "netns",
            outside.name(),
        ]);
        node.ip(&["addr", "add", "192.168.200.1/24", "dev", "ext0"]);
        node.ip(&["link", "set", "ext0", "up"]);
        outside.ip(&["addr", "add", "192.168.200.2/24", "dev", "ext1"]);
        outside.ip(&["link", "set", "ext1", "up"]);
        // Like a real host, a default route: proxy ARP answers for 169.254.1.1 (the
        // workloads' gateway) only when the node routes that address out of another interface.
        node.ip(&[
            "route",
            "add",
            "default",
            "via",
            "192.168.200.254",
            "dev",
            "ext0",
        ]);
        let dir = std::env::temp_dir().join(format!("ta-manifests-{}", node.name()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let server = node.spawn(
            &[
                exe.to_str().unwrap(),
                "--exact",
                "typha_server_process",
                "--nocapture",
                "--test-threads",
                "1",
            ],
            &[
                ("TYPHA_TEST_RUN_SERVER", "1".into()),
                ("TYPHA_SERVERHOST", "127.0.0.1".into()),
                ("TYPHA_SERVERPORT", SERVER_PORT.to_string()),
                ("TYPHA_HEALTHHOST", "127.0.0.1".into()),
                ("TYPHA_HEALTHPORT", HEALTH_PORT.to_string()),
                ("TYPHA_EMBEDDEDDIR", dir.display().to_string()),
                ("TYPHA_EMBEDDEDAPIADDR", format!("127.0.0.1:{API_PORT}")),
                ("TYPHA_SHUTDOWNTIMEOUTSECS", "1".into()),
                ("RUST_LOG", "warn".into()),
            ],
        );
        let c = Cluster {
            node,
            outside,
            workloads: Vec::new(),
            server,
            agent: None,
            listeners: std::cell::RefCell::new(Vec::new()),
        };
        wait_for("the server", Duration::from_secs(30), || {
            http(&c.node, HEALTH_PORT, "GET", "/readiness", "").0 == 200
        });
        c
    }

    fn start_agent(&mut self, extra: &[&str]) {
        let port = SERVER_PORT.to_string();
        let health = format!("127.0.0.1:{AGENT_HEALTH}");
        let mut args = vec![
            AGENT,
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--nodename",
            "node-a",
            "--health-addr",
            &health,
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.agent = Some(
            self.node
                .spawn(&args, &[("RUST_LOG", "typha_client=info".into())]),
        );
    }

    fn agent_ready(&self) -> bool {
        http(&self.node, AGENT_HEALTH, "GET", "/readiness", "").0 == 200
    }

    /// A workload namespace wired like a Calico pod: `eth0` with a /32, a default route via
    /// 169.254.1.1, the host side `iface` in the node namespace.
    fn workload(&mut self, iface: &str, ip: &str) {
        let w = Netns::new("w");
        self.node.ip(&[
            "link",
            "add",
            iface,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            w.name(),
        ]);
        self.node.ip(&["link", "set", iface, "up"]);
        w.ip(&["addr", "add", &format!("{ip}/32"), "dev", "eth0"]);
        w.ip(&["link", "set", "eth0", "up"]);
        w.ip(&[
            "route",
            "add",
            "169.254.1.1",
            "dev",
            "eth0",
            "scope",
            "link",
        ]);
        w.ip(&[
            "route",
            "add",
            "default",
            "via",
            "169.254.1.1",
            "dev",
            "eth0",
        ]);
        self.workloads.push((w, ip.to_string()));
    }

    /// BASE and two workloads on node-a: a client (`calia…`, 10.65.0.1, app=client) and a
    /// server (`calib…`, 10.65.0.2, app=server).
    fn client_and_server(&mut self) {
        self.workload("calia0000000001", "10.65.0.1");
        self.workload("calib0000000002", "10.65.0.2");
        self.apply(BASE);
        self.apply(&wep(
            "node-a",
            "client",
            "calia0000000001",
            "10.65.0.1",
            "client",
        ));
        self.apply(&wep(
            "node-a",
            "server",
            "calib0000000002",
            "10.65.0.2",
            "server",
        ));
    }

    fn apply(&self, yaml: &str) {
        let (code, body) = http(&self.node, API_PORT, "POST", "/apply", yaml);
        assert_eq!(code, 200, "{body}");
    }

    /// Waits until the server holds `kvs` KVs (writes reach its cache asynchronously).
    fn settle(&self, kvs: u64) {
        wait_for(
            &format!("{kvs} KVs in the server"),
            Duration::from_secs(10),
            || {
                let (_, body) = http(&self.node, HEALTH_PORT, "GET", "/status", "");
                body.contains(&format!("\"kvs\":{kvs},"))
            },
        );
    }

    fn delete(&self, yaml: &str) {
        let (code, body) = http(&self.node, API_PORT, "POST", "/delete", yaml);
        assert_eq!(code, 200, "{body}");
    }

    /// Starts a TCP listener in workload `i` on these ports (answers "ok").
    fn listen(&self, i: usize, ports: &[u16]) {
        let (ns, ip) = &self.workloads[i];
        self.listen_in(ns, ip, ports);
    }

    /// Starts a TCP listener in `ns` on these ports (answers "ok"); `ip` is one of its
    /// addresses.
    fn listen_in(&self, ns: &Netns, ip: &str, ports: &[u16]) {
        let ports = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let script = format!(
            "import socket, threading\n\
             def serve(p):\n\
             \x20   s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             \x20   s.bind(('0.0.0.0', p)); s.listen(64)\n\
             \x20   while True:\n\
             \x20       c, _ = s.accept(); c.sendall(b'ok'); c.close()\n\
             for p in [{ports}]:\n\
             \x20   threading.Thread(target=serve, args=(p,), daemon=True).start()\n\
             threading.Event().wait()\n"
        );
        let child = ns.spawn(&["python3", "-c", &script], &[]);
        self.listeners.borrow_mut().push(child);
        let first = ports.split(',').next().unwrap().to_string();
        // Listening once its own address answers locally.
        wait_for("the listener", Duration::from_secs(10), || {
            ns.try_exec(&[
                "python3",
                "-c",
                &format!("import socket; socket.create_connection(('{ip}', {first}), timeout=1)"),
            ])
        });
    }

    /// Whether workload `from` can open a TCP connection to workload `to` on `port` (and
    /// read the listener's answer).
    fn connects(&self, from: usize, to: usize, port: u16) -> bool {
        connects_from(&self.workloads[from].0, &self.workloads[to].1, port)
    }
    fn iptables_save(&self) -> String {
        self.node.exec(&["iptables-save", "-t", "filter"])
    }

    fn ipset_list(&self) -> String {
        self.node.exec(&["ipset", "list"])
    }

    fn routes(&self) -> String {
        self.node.ip(&["route", "show", "proto", "80"])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(a) = &mut self.agent {
            let _ = a.kill();
            let _ = a.wait();
        }
        for l in self.listeners.borrow_mut().iter_mut() {
            let _ = l.kill();
            let _ = l.wait();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("ta-manifests-{}", self.node.name())),
        );
    }
}

const BASE: &str = r#"
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 192.168.200.1/24}}
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-b}
spec: {bgp: {ipv4Address: 192.168.200.2/24}}
---
apiVersion: crd.projectcalico.org/v1
kind: IPAMBlock
metadata: {name: 10-65-0-0-26}
spec: {cidr: 10.65.0.0/26, affinity: "host:node-a", allocations: [0, 1, 2]}
---
apiVersion: crd.projectcalico.org/v1
kind: IPAMBlock
metadata: {name: 10-65-1-0-26}
spec: {cidr: 10.65.1.0/26, affinity: "host:node-b", allocations: [0]}
---
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.demo}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
  labelsToApply: {pcns.team: web}
"#;

fn wep(node: &str, pod: &str, iface: &str, ip: &str, app: &str) -> String {
    format!(
        r#"
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: {node}-k8s-{pod}-eth0
  namespace: demo
  labels: {{app: {app}, projectcalico.org/namespace: demo, projectcalico.org/orchestrator: k8s}}
spec:
  orchestrator: k8s
  node: {node}
  pod: {pod}
  endpoint: eth0
  interfaceName: {iface}
  ipNetworks: [{ip}/32]
  profiles: [kns.demo]
"#
    )
}

fn server_policy(port: u16) -> String {
    format!(
        r#"
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {{name: allow-client, namespace: demo}}
spec:
  order: 100
  selector: app == 'server'
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source: {{selector: app == 'client'}}
      destination: {{ports: [{port}]}}
"#
    )
}

#[test]
fn policy_verdicts_are_real_packets_and_follow_policy_changes() {
    let mut c = Cluster::new();
    c.client_and_server();
    // A client on another node: its address belongs in the rule's ipset too.
    c.apply(&wep(
        "node-b",
        "remote",
        "calir0000000009",
        "10.65.1.5",
        "client",
    ));
    // BASE is 8 KVs (2 blocks, 2 nodes and their host IPs, the profile's rules and labels).
    c.settle(11);
    c.start_agent(&["--refresh-interval", "300"]);
    wait_for("agent readiness", Duration::from_secs(30), || {
        c.agent_ready()
    });
    c.listen(1, &[8080, 9090]);

    // Profiles allow everything: both ports connect.
    assert!(c.connects(0, 1, 8080));
    assert!(c.connects(0, 1, 9090));

    // Routes: local workloads, this node's block blackholed, node-b's block via node-b.
    let routes = c.routes();
    assert!(
        routes.contains("10.65.0.1 dev calia0000000001 scope link"),
        "{routes}"
    );
    assert!(
        routes.contains("10.65.0.2 dev calib0000000002 scope link"),
        "{routes}"
    );
    assert!(routes.contains("blackhole 10.65.0.0/26"), "{routes}");
    assert!(
        routes.contains("10.65.1.0/26 via 192.168.200.2 dev ext0"),
        "{routes}"
    );
    assert_eq!(
        c.node
            .exec(&["cat", "/proc/sys/net/ipv4/conf/calia0000000001/proxy_arp"])
            .trim(),
        "1"
    );

    // Only 8080 from clients: 9090 is dropped at the end of the tier.
    c.apply(&server_policy(8080));
    wait_for("the policy chain", Duration::from_secs(10), || {
        c.iptables_save().contains(":cali-pi-demo/allow-client")
    });
    let save = c.iptables_save();
    assert!(
        save.contains("-A FORWARD -m comment --comment \"cali:"),
        "{save}"
    );
    assert!(save.contains("-A cali-tw-calib0000000002"), "{save}");
    assert!(
        save.contains("-j cali-pi-demo/allow-client"),
        "the server's chain jumps to the policy: {save}"
    );
    let sets = c.ipset_list();
    assert!(sets.contains("Name: cali40s:"), "{sets}");
    assert!(
        sets.contains("10.65.0.1") && sets.contains("10.65.1.5"),
        "local and remote clients: {sets}"
    );
    assert!(
        !sets.contains("10.65.0.2\n"),
        "the server is not a client: {sets}"
    );
    assert!(c.connects(0, 1, 8080));
    assert!(!c.connects(0, 1, 9090), "9090 must be dropped");

    // Change the policy: the verdicts swap.
    c.apply(&server_policy(9090));
    wait_for("9090 allowed", Duration::from_secs(10), || {
        c.connects(0, 1, 9090)
    });
    assert!(!c.connects(0, 1, 8080), "8080 must be dropped now");

    // The client is relabelled: it leaves the ipset and loses access.
    c.apply(&wep(
        "node-a",
        "client",
        "calia0000000001",
        "10.65.0.1",
        "other",
    ));
    wait_for("9090 denied", Duration::from_secs(10), || {
        !c.connects(0, 1, 9090)
    });

    // A workload whose interface appears after its endpoint: link monitoring routes it
    // (the refresh interval is 300 s, so only the link event can do it in time).
    c.apply(&wep(
        "node-a",
        "late",
        "calic0000000003",
        "10.65.0.3",
        "client",
    ));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!c.routes().contains("10.65.0.3"));
    c.workload("calic0000000003", "10.65.0.3");
    wait_for("the late workload's route", Duration::from_secs(10), || {
        c.routes().contains("10.65.0.3 dev calic0000000003")
    });
    wait_for("the late client connects", Duration::from_secs(10), || {
        c.connects(2, 1, 9090)
    });
}

#[test]
fn drift_is_repaired_and_cleanup_leaves_foreign_state() {
    let mut c = Cluster::new();
    // Foreign state the agent must never touch.
    c.node.exec(&["iptables", "-N", "FOREIGN"]);
    c.node
        .exec(&["iptables", "-A", "FOREIGN", "-s", "1.2.3.4", "-j", "DROP"]);
    c.node
        .exec(&["iptables", "-A", "FORWARD", "-s", "5.6.7.8", "-j", "ACCEPT"]);
    c.node.exec(&["ipset", "create", "foreign", "hash:ip"]);
    c.node.exec(&["ipset", "add", "foreign", "9.9.9.9"]);
    c.node.ip(&[
        "route",
        "add",
        "10.99.0.0/24",
        "dev",
        "ext0",
        "proto",
        "static",
    ]);
    c.client_and_server();
    c.apply(&server_policy(8080));
    c.settle(11);
    c.start_agent(&["--refresh-interval", "1"]);
    wait_for("agent readiness", Duration::from_secs(30), || {
        c.agent_ready()
    });
    wait_for("the policy chain", Duration::from_secs(10), || {
        c.iptables_save().contains(":cali-pi-demo/allow-client")
    });

    // Drift: a flushed chain and a deleted route come back within the refresh interval.
    c.node
        .exec(&["iptables", "-F", "cali-pi-demo/allow-client"]);
    c.node.ip(&["route", "del", "10.65.0.2/32"]);
    wait_for("the chain's rules back", Duration::from_secs(10), || {
        c.iptables_save().contains("-A cali-pi-demo/allow-client")
    });
    wait_for("the route back", Duration::from_secs(10), || {
        c.routes().contains("10.65.0.2 dev calib0000000002")
    });

    // Deleting everything removes what the agent made for it...
    c.delete(&server_policy(8080));
    c.delete(&wep(
        "node-a",
        "client",
        "calia0000000001",
        "10.65.0.1",
        "client",
    ));
    c.delete(&wep(
        "node-a",
        "server",
        "calib0000000002",
        "10.65.0.2",
        "server",
    ));
    c.delete(BASE);
    wait_for(
        "endpoint chains, sets and routes gone",
        Duration::from_secs(10),
        || {
            let save = c.iptables_save();
            !save.contains("cali-tw-")
                && !save.contains("cali-pi-")
                && !c.ipset_list().contains("cali40")
                && c.routes().trim().is_empty()
        },
    );
    // ...and --cleanup removes the rest (base chains and hooks), once the agent is stopped.
    if let Some(mut a) = c.agent.take() {
        let _ = Command::new("kill")
            .args(["-TERM", &a.id().to_string()])
            .status();
        let status = a.wait().unwrap();
        assert!(status.success(), "SIGTERM exits 0: {status:?}");
    }
    c.node.exec(&[AGENT, "--cleanup", "--nodename", "node-a"]);
    let save = c.iptables_save();
    assert!(!save.contains("cali"), "{save}");
    assert!(
        save.contains(":FOREIGN") && save.contains("-A FOREIGN -s 1.2.3.4/32 -j DROP"),
        "{save}"
    );
    assert!(
        save.contains("-A FORWARD -s 5.6.7.8/32 -j ACCEPT"),
        "{save}"
    );
    let sets = c.ipset_list();
    assert!(!sets.contains("cali"), "{sets}");
    assert!(
        sets.contains("Name: foreign") && sets.contains("9.9.9.9"),
        "{sets}"
    );
    assert!(c.routes().trim().is_empty());
    assert!(
        c.node
            .ip(&["route", "show"])
            .contains("10.99.0.0/24 dev ext0 proto static")
    );
}

#[test]
fn dry_run_prints_the_plan_and_touches_nothing() {
    let c = Cluster::new();
    c.apply(BASE);
    c.apply(&wep(
        "node-a",
        "server",
        "calib0000000002",
        "10.65.0.2",
        "server",
    ));
    c.apply(&server_policy(8080));
    c.settle(10);
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            c.node.name(),
            AGENT,
            "--dry-run",
            "--nodename",
            "node-a",
        ])
        .args(["--addr", &format!("127.0.0.1:{SERVER_PORT}")])
        .args(["--health-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = String::from_utf8(out.stdout).unwrap();
    assert!(
        plan.contains("*filter") && plan.contains("COMMIT"),
        "{plan}"
    );
    assert!(plan.contains(":cali-pi-demo/allow-client"), "{plan}");
    assert!(plan.contains("create cali40s:"), "{plan}");
    assert!(plan.contains("10.65.0.2"), "{plan}");
    assert!(plan.contains("blackhole 10.65.0.0/26"), "{plan}");
    assert!(
        !c.iptables_save().contains("cali"),
        "dry run applied nothing"
    );
    assert!(c.routes().trim().is_empty());
}

#[test]
fn bad_settings_exit_64_naming_the_setting() {
    let out = Command::new(AGENT)
        .args([
            "--nodename",
            "n",
            "--refresh-interval",
            "0",
            "--addr",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("FELIX_IPTABLESREFRESHINTERVAL"));
    let out = Command::new(AGENT)
        .env_remove("FELIX_TYPHAADDR")
        .args(["--nodename", "n"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("FELIX_TYPHAADDR"));
}

const UPLINK_HEP: &str = r#"
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node-a-ext0
  labels: {role: uplink}
spec: {node: node-a, interfaceName: ext0, expectedIPs: [192.168.200.1]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: uplink-ingress}
spec:
  order: 10
  selector: role == 'uplink'
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      destination: {ports: [7070]}
"#;

#[test]
fn host_endpoint_policy_guards_the_node_and_failsafe_ports_stay_open() {
    let mut c = Cluster::new();
    c.apply(BASE);
    c.settle(8);
    c.start_agent(&["--refresh-interval", "300"]);
    wait_for("agent readiness", Duration::from_secs(30), || {
        c.agent_ready()
    });
    // A service on the node itself, on an allowed port, a denied one, and ssh (failsafe).
    c.listen_in(&c.node, "192.168.200.1", &[7070, 7071, 22]);
    for port in [7070, 7071, 22] {
        assert!(
            connects_from(&c.outside, "192.168.200.1", port),
            "{port} before any policy"
        );
    }
    c.apply(UPLINK_HEP);
    wait_for("7071 dropped", Duration::from_secs(10), || {
        !connects_from(&c.outside, "192.168.200.1", 7071)
    });
    assert!(
        connects_from(&c.outside, "192.168.200.1", 7070),
        "allowed by the policy"
    );
    assert!(connects_from(&c.outside, "192.168.200.1", 22), "failsafe");
    let save = c.iptables_save();
    assert!(
        save.contains("-A cali-from-host-endpoint -i ext0 -m comment")
            && save.contains("-g cali-fh-ext0"),
        "{save}"
    );
    assert!(
        save.contains("-A OUTPUT -m comment --comment \"cali:"),
        "{save}"
    );
    // Workloads are unaffected: host endpoint policy is for the host's own traffic.
    let (_, metrics) = http(&c.node, AGENT_HEALTH, "GET", "/metrics", "");
    assert!(
        metrics.contains("felix_active_local_endpoints 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("felix_active_local_policies 1"),
        "{metrics}"
    );
    c.delete(UPLINK_HEP);
    wait_for("7071 open again", Duration::from_secs(10), || {
        connects_from(&c.outside, "192.168.200.1", 7071)
    });
}
