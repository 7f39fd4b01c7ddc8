#!/usr/bin/env python3
"""Side-by-side harness: an unmodified calico-node (Felix, confd, status reporter) fed
by Calico's own calico-typha ("calico" side) and by our typha-server ("ours" side), on the
same datastore, each Felix in its own network namespace; dumps and diffs what each programs.

    harness.py run [--datastore etcd|kubernetes] [--typha-server PATH] [--keep] ...
    harness.py cleanup
    harness.py dump NAME        (dump + diff the running setup once, by hand)

See README.md.
"""
import argparse
import base64
import copy
import datetime
import difflib
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster as C  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
# Runs and process state live under the repository's target/ (never in the source tree).
WORK = os.environ.get("COMPARE_DIR", os.path.join(REPO, "target", "calico-node-compare"))
STATE = os.path.join(WORK, "state")
RUNS = os.path.join(WORK, "runs")
# Calico v3.32.0's own programs and source: yours, from outside this repository (nothing of
# Calico's is kept here). See README.md.
CALICO_BIN = os.environ.get("CALICO_BIN_DIR", "")
CALICO_SRC = os.environ.get("CALICO_SRC", "")
PEERS_BIN = os.environ.get("PEERS_BIN", os.path.join(REPO, "target", "peers", "bin"))
DEFAULT_TYPHA_SERVER = os.environ.get(
    "TYPHA_SERVER_BIN", os.path.join(REPO, "target", "release", "typha-server"))

SIDES = ["calico", "ours"]
SIDE = {
    "calico": dict(ns="th-calico", hostif="thv-calico", hostip="172.31.250.1", nsip="172.31.250.2",
                   felix_health=9201, felix_metrics=9301),
    "ours": dict(ns="th-ours", hostif="thv-ours", hostip="172.31.251.1", nsip="172.31.251.2",
                 felix_health=9202, felix_metrics=9302),
}
NODE_V4, NODE_V6 = C.NODES[C.NODE][0], C.NODES[C.NODE][1]

LOGF = None


def log(*a):
    line = "[%s] %s" % (datetime.datetime.now().strftime("%H:%M:%S"), " ".join(str(x) for x in a))
    print(line, flush=True)
    if LOGF:
        LOGF.write(line + "\n")
        LOGF.flush()


def sh(cmd, check=True, capture=True, input=None, env=None, timeout=120):
    """Run a command (list or string); return stdout."""
    if isinstance(cmd, str):
        cmd = ["bash", "-c", cmd]
    p = subprocess.run(cmd, input=input, capture_output=capture, text=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {cmd}\n{p.stdout}\n{p.stderr}")
    return p.stdout if capture else ""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_get(url, timeout=3, headers=None, ctx=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # noqa: BLE001
        return None, str(e)


# ------------------------------------------------------------------ processes
OWN_MARKERS = (WORK, "etcd", "kube-apiserver", "typha")


def spawn(name, argv, env, logfile):
    f = open(logfile, "ab")
    p = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    os.makedirs(STATE, exist_ok=True)
    with open(os.path.join(STATE, name + ".pid"), "w") as fh:
        fh.write(f"{p.pid}\n{argv[0]}\n")
    return p


def pid_of(name):
    try:
        with open(os.path.join(STATE, name + ".pid")) as fh:
            pid = int(fh.readline())
            exe = fh.readline().strip()
    except (OSError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().decode(errors="replace")
    except OSError:
        return None
    if exe and exe not in cmd:
        return None  # pid reused by something else: not ours
    return pid


def alive(name):
    pid = pid_of(name)
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def signal_group(name, sig):
    pid = pid_of(name)
    if pid:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
    return pid


def stop(name, sig=signal.SIGTERM, wait=10.0):
    """Signal a process group; SIGKILL it if it has not gone after `wait`. Returns secs taken."""
    pid = signal_group(name, sig)
    t0 = time.time()
    if not pid:
        return 0.0
    while time.time() - t0 < wait:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if not os.path.exists(f"/proc/{pid}") or not alive(name):
            break
        time.sleep(0.2)
    took = time.time() - t0
    if alive(name):
        log(f"  {name} still alive after {wait:.0f}s: SIGKILL")
        signal_group(name, signal.SIGKILL)
        time.sleep(0.5)
        took = -took
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.remove(os.path.join(STATE, name + ".pid"))
    except OSError:
        pass
    return took


def cleanup():
    """Idempotent: kill everything we started, remove namespaces and veths."""
    if os.path.isdir(STATE):
        for f in sorted(os.listdir(STATE)):
            if f.endswith(".pid"):
                name = f[:-4]
                pid = pid_of(name)
                if pid:
                    print(f"cleanup: killing {name} (pgid {pid})")
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os.remove(os.path.join(STATE, f))
    time.sleep(0.5)
    for s in SIDES:
        ns, hostif = SIDE[s]["ns"], SIDE[s]["hostif"]
        if subprocess.run(["ip", "netns", "pids", ns], capture_output=True).returncode == 0:
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split():
                print(f"cleanup: killing pid {pid} left in netns {ns}")
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", hostif], capture_output=True)


# ------------------------------------------------------------------ the run
class Run:
    def __init__(self, args):
        self.args = args
        self.ds = args.datastore
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.dir = os.path.join(RUNS, f"{stamp}-{self.ds}")
        os.makedirs(self.dir)
        latest = os.path.join(RUNS, "latest")
        if os.path.islink(latest):
            os.remove(latest)
        os.symlink(self.dir, latest)
        global LOGF
        LOGF = open(os.path.join(self.dir, "harness.log"), "a")
        # A copy, so a rebuild of the original during the run changes nothing.
        self.typha_server_orig = os.path.abspath(args.typha_server)
        self.typha_server = os.path.join(self.dir, "typha-server")
        shutil.copy2(self.typha_server_orig, self.typha_server)
        self.typha_server_sha = hashlib.sha256(open(self.typha_server, "rb").read()).hexdigest()
        self.ports = {}
        self.results = []  # per scenario
        self.notes = []
        self.side_dir = {s: os.path.join(self.dir, s) for s in SIDES}
        for s in SIDES:
            for d in ("run", "varlib", "confd/config", "logs"):
                os.makedirs(os.path.join(self.side_dir[s], d), exist_ok=True)
        self.dumps = os.path.join(self.dir, "dumps")
        self.k8s_token = None

    # -------------------------------------------------------------- network
    def setup_netns(self):
        for s in SIDES:
            c = SIDE[s]
            ns, hostif = c["ns"], c["hostif"]
            sh(["ip", "netns", "add", ns])
            sh(["ip", "link", "add", hostif, "type", "veth", "peer", "name", "eth0", "netns", ns])
            sh(["ip", "addr", "add", c["hostip"] + "/30", "dev", hostif])
            sh(["ip", "link", "set", hostif, "up"])
            n = ["ip", "-n", ns]
            sh(n + ["link", "set", "lo", "up"])
            sh(n + ["addr", "add", c["nsip"] + "/30", "dev", "eth0"])
            sh(n + ["addr", "add", NODE_V4, "dev", "eth0"])
            sh(n + ["addr", "add", NODE_V6, "dev", "eth0", "nodad"])
            sh(n + ["link", "set", "eth0", "up"])
            # The host endpoint's interface, and the local workloads' interfaces (the workload
            # end stays in the same namespace: nothing sends packets here).
            sh(n + ["link", "add", "ext0", "type", "veth", "peer", "name", "ext0p"])
            sh(n + ["addr", "add", "172.30.5.1/24", "dev", "ext0"])
            sh(n + ["link", "set", "ext0", "up"])
            sh(n + ["link", "set", "ext0p", "up"])
            for ifname in C.local_ifaces(self.ds):
                peer = "w" + ifname[4:]
                sh(n + ["link", "add", ifname, "type", "veth", "peer", "name", peer])
                sh(n + ["link", "set", ifname, "up"])
                sh(n + ["link", "set", peer, "up"])
        log("netns + veths up:", ", ".join(f"{s}: {SIDE[s]['ns']} via {SIDE[s]['hostip']}" for s in SIDES))

    # -------------------------------------------------------------- datastore
    def start_etcd(self, binary, name="etcd"):
        p, pp = free_port(), free_port()
        self.ports["etcd"] = p
        urls = ",".join(f"http://{ip}:{p}" for ip in ["127.0.0.1"] + [SIDE[s]["hostip"] for s in SIDES])
        argv = [binary, "--name", "th", "--data-dir", os.path.join(self.dir, "etcd-data"),
                "--listen-client-urls", urls, "--advertise-client-urls", f"http://127.0.0.1:{p}",
                "--listen-peer-urls", f"http://127.0.0.1:{pp}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
                "--initial-cluster", f"th=http://127.0.0.1:{pp}", "--log-level", "warn"]
        env = dict(os.environ)
        spawn(name, argv, env, os.path.join(self.dir, "etcd.log"))
        self.etcd_url = f"http://127.0.0.1:{p}"
        for _ in range(100):
            st, body = http_get(self.etcd_url + "/health")
            if st == 200 and "true" in body:
                log(f"etcd ({binary}) up on {self.etcd_url} (+ the two host veth addresses)")
                return
            time.sleep(0.2)
        raise RuntimeError("etcd did not come up; see etcd.log")

    def etcdctl(self, *args, input=None):
        return sh(["etcdctl", "--endpoints", self.etcd_url] + list(args), input=input,
                  env=dict(os.environ, ETCDCTL_API="3"))

    def etcd_put(self, key, value):
        self.etcdctl("put", key, json.dumps(value, separators=(",", ":")))

    def etcd_get(self, key):
        out = self.etcdctl("get", "--print-value-only", key).strip()
        return json.loads(out) if out else None

    def etcd_del(self, key):
        self.etcdctl("del", key)

    # ---- Kubernetes
    def start_kubernetes(self):
        etcd36 = os.path.join(PEERS_BIN, "etcd")
        apiserver = os.path.join(PEERS_BIN, "kube-apiserver")
        for b in (etcd36, apiserver):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"{b} missing: run peers/build (or set PEERS_BIN)")
        self.start_etcd(etcd36)
        kd = os.path.join(self.dir, "k8s")
        os.makedirs(os.path.join(kd, "certs"))
        self.k8s_token = hashlib.sha1(self.dir.encode()).hexdigest()
        with open(os.path.join(kd, "tokens.csv"), "w") as f:
            f.write(f"{self.k8s_token},admin,admin,system:masters\n")
        sh(["openssl", "genrsa", "-out", os.path.join(kd, "sa.key"), "2048"])
        sh(["openssl", "rsa", "-in", os.path.join(kd, "sa.key"), "-pubout", "-out", os.path.join(kd, "sa.pub")])
        port = free_port()
        self.ports["apiserver"] = port
        argv = [apiserver, f"--etcd-servers={self.etcd_url}", "--bind-address=0.0.0.0",
                "--advertise-address=127.0.0.1", f"--secure-port={port}",
                f"--cert-dir={kd}/certs", f"--token-auth-file={kd}/tokens.csv",
                "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={kd}/sa.pub", f"--service-account-signing-key-file={kd}/sa.key",
                "--service-cluster-ip-range=10.96.0.0/16", "--profiling=false", "--v=0"]
        spawn("kube-apiserver", argv, dict(os.environ), os.path.join(self.dir, "kube-apiserver.log"))
        self.api = f"https://127.0.0.1:{port}"
        self.ssl = ssl.create_default_context()
        self.ssl.check_hostname = False
        self.ssl.verify_mode = ssl.CERT_NONE
        for _ in range(300):
            st, body = http_get(self.api + "/readyz", headers={"Authorization": f"Bearer {self.k8s_token}"},
                                ctx=self.ssl)
            if st == 200:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("kube-apiserver not ready; see kube-apiserver.log")
        # kubeconfigs: one for the host (127.0.0.1), one per side (its host veth address).
        self.kubeconfig = {}
        for who, ip in [("host", "127.0.0.1")] + [(s, SIDE[s]["hostip"]) for s in SIDES]:
            kc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": f"https://{ip}:{port}",
                                                         "insecure-skip-tls-verify": True}}],
                  "users": [{"name": "u", "user": {"token": self.k8s_token}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
            path = os.path.join(kd, f"kubeconfig-{who}")
            with open(path, "w") as f:
                yaml.safe_dump(kc, f)
            self.kubeconfig[who] = path
        log(f"kube-apiserver ready on {self.api} (bound 0.0.0.0 so the namespaces reach it)")
        self.apply_crds()

    def k8s(self, method, path, body=None, ctype="application/json", ok_missing=False):
        data = None
        if body is not None:
            data = json.dumps(body).encode() if not isinstance(body, (bytes, str)) else (
                body.encode() if isinstance(body, str) else body)
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.k8s_token}",
                                              "Content-Type": ctype, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl) as r:
                out = r.read().decode()
                return json.loads(out) if out else None
        except urllib.error.HTTPError as e:
            msg = e.read().decode(errors="replace")
            if ok_missing and e.code == 404:
                return None
            raise RuntimeError(f"{method} {path}: {e.code} {msg[:600]}")

    def apply_crds(self):
        crd_dir = os.path.join(CALICO_SRC, "libcalico-go/config/crd")
        names = []
        for f in sorted(os.listdir(crd_dir)):
            if not f.endswith(".yaml"):
                continue
            if not (f.startswith("crd.projectcalico.org_") or f.startswith("policy.networking.k8s.io_")):
                continue
            for doc in yaml.safe_load_all(open(os.path.join(crd_dir, f))):
                if not doc:
                    continue
                self.k8s("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
                names.append(doc["metadata"]["name"])
        for n in names:
            for _ in range(100):
                crd = self.k8s("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
                if conds.get("Established") == "True":
                    break
                time.sleep(0.2)
        log(f"applied {len(names)} CRDs from {crd_dir} (crd.projectcalico.org v1 + ClusterNetworkPolicy)")

    # -------------------------------------------------------------- calicoctl
    def calicoctl(self, *args, input=None, check=True):
        env = dict(os.environ)
        if self.ds == "etcd":
            env.update(DATASTORE_TYPE="etcdv3", ETCD_ENDPOINTS=self.etcd_url)
        else:
            env.update(DATASTORE_TYPE="kubernetes", KUBECONFIG=self.kubeconfig["host"])
        return sh([os.path.join(CALICO_BIN, "calicoctl")] + list(args) + ["--allow-version-mismatch"],
                  input=input, env=env, check=check)

    def apply(self, resources):
        if not resources:
            return
        text = yaml.safe_dump_all(resources)
        out = self.calicoctl("apply", "-f", "-", input=text)
        return out.strip()

    def ctl_get(self, kind, name, namespace=None):
        a = ["get", kind, name, "-o", "yaml"] + (["-n", namespace] if namespace else [])
        return yaml.safe_load(self.calicoctl(*a))

    def delete(self, kind, name, namespace=None):
        a = ["delete", kind, name] + (["-n", namespace] if namespace else [])
        self.calicoctl(*a)

    # -------------------------------------------------------------- seeding
    def seed(self):
        res = C.calico_resources(self.ds)
        if self.ds == "kubernetes":
            self.seed_k8s_objects()
        log("calicoctl apply:", self.apply(res))
        self.write_bad_gns(C.BAD_GNS_NETS)
        self.write_node_status(C.node_status())
        self.write_ipam(C.blocks())
        if self.ds == "kubernetes":
            self.seed_k8s_pods()
        log("seeded")

    def raw_v3_value(self, res):
        """Calico's v3 JSON as it stores it in etcd."""
        v = copy.deepcopy(res)
        v["metadata"].setdefault("uid", hashlib.md5(json.dumps(res).encode()).hexdigest()[:8] + "-0000-4000-8000-000000000000")
        v["metadata"].setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        return {"kind": v["kind"], "apiVersion": v["apiVersion"], "metadata": v["metadata"], "spec": v["spec"]}

    def crd_path(self, plural, name=None, namespace=None):
        p = "/apis/crd.projectcalico.org/v1/"
        if namespace:
            p += f"namespaces/{namespace}/"
        p += plural
        return p + (f"/{name}" if name else "")

    def crd_put(self, plural, obj, namespace=None):
        """Create-or-replace a crd.projectcalico.org/v1 object."""
        name = obj["metadata"]["name"]
        cur = self.k8s("GET", self.crd_path(plural, name, namespace), ok_missing=True)
        if cur is None:
            return self.k8s("POST", self.crd_path(plural, None, namespace), obj)
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.k8s("PUT", self.crd_path(plural, name, namespace), obj)

    def write_bad_gns(self, nets):
        res = C.r("GlobalNetworkSet", C.BAD_GNS_NAME, {"nets": list(nets)}, labels=C.BAD_GNS_LABELS)
        if self.ds == "etcd":
            key = f"/calico/resources/v3/projectcalico.org/globalnetworksets/{C.BAD_GNS_NAME}"
            old = self.etcd_get(key)
            v = self.raw_v3_value(res)
            if old:
                v["metadata"]["uid"] = old["metadata"]["uid"]
                v["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            self.etcd_put(key, v)
        else:
            obj = {"apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
                   "metadata": {"name": C.BAD_GNS_NAME, "labels": C.BAD_GNS_LABELS},
                   "spec": {"nets": list(nets)}}
            self.crd_put("globalnetworksets", obj)
        log(f"wrote GlobalNetworkSet {C.BAD_GNS_NAME} raw with nets {nets}")

    def write_node_status(self, res):
        if self.ds == "etcd":
            self.etcd_put(f"/calico/resources/v3/projectcalico.org/caliconodestatuses/{res['metadata']['name']}",
                          self.raw_v3_value(res))
        else:
            obj = {"apiVersion": "crd.projectcalico.org/v1", "kind": "CalicoNodeStatus",
                   "metadata": {"name": res["metadata"]["name"]}, "spec": res["spec"]}
            self.crd_put("caliconodestatuses", obj)

    def write_ipam(self, blocks, delete=()):
        for cidr, (node, allocs) in blocks.items():
            b = C.block_json(cidr, node, allocs)
            if self.ds == "etcd":
                self.etcd_put(C.block_key(cidr), b)
                self.etcd_put(C.affinity_key(node, cidr), {"state": "confirmed", "deleted": False})
            else:
                bname = cidr.replace("/", "-").replace(":", "-")
                spec = {"cidr": cidr, "affinity": b["affinity"], "allocations": b["allocations"],
                        "unallocated": b["unallocated"], "attributes": b["attributes"],
                        "sequenceNumber": 0, "sequenceNumberForAllocation": b["sequenceNumberForAllocation"],
                        "deleted": False, "strictAffinity": False}
                self.crd_put("ipamblocks", {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
                                            "metadata": {"name": bname}, "spec": spec})
                aname = f"{node}-{bname}"
                self.crd_put("blockaffinities", {
                    "apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
                    "metadata": {"name": aname, "labels": {"projectcalico.org/affinity-type": "host"}},
                    "spec": {"cidr": cidr, "node": node, "state": "confirmed", "deleted": "false",
                             "type": "host"}})
        for cidr, node in delete:
            if self.ds == "etcd":
                self.etcd_del(C.block_key(cidr))
                self.etcd_del(C.affinity_key(node, cidr))
            else:
                bname = cidr.replace("/", "-").replace(":", "-")
                self.k8s("DELETE", self.crd_path("ipamblocks", bname), ok_missing=True)
                self.k8s("DELETE", self.crd_path("blockaffinities", f"{node}-{bname}"), ok_missing=True)

    # ---- Kubernetes objects
    def seed_k8s_objects(self):
        for ns, labels in C.NAMESPACES.items():
            if ns == "kube-system":
                cur = self.k8s("GET", "/api/v1/namespaces/kube-system")
                cur["metadata"].setdefault("labels", {}).update(labels)
                self.k8s("PUT", "/api/v1/namespaces/kube-system", cur)
            else:
                self.k8s("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
        for (ns, sa), labels in C.SERVICEACCOUNTS.items():
            self.k8s("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                     {"metadata": {"name": sa, "labels": labels}})
        for ns in C.NAMESPACES:
            if ns in ("prod", "dev", "monitoring"):
                # the "default" SA is made by the controller manager, which does not run here
                self.k8s("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                         {"metadata": {"name": "default"}})
        for name in C.NODES:
            self.k8s("POST", "/api/v1/nodes", C.k8s_node(name))
        for obj in C.k8s_network_policies():
            self.k8s("POST", f"/apis/networking.k8s.io/v1/namespaces/{obj['metadata']['namespace']}/networkpolicies",
                     obj)
        for svc, eps in C.k8s_services():
            ns = svc["metadata"]["namespace"]
            self.k8s("POST", f"/api/v1/namespaces/{ns}/services", svc)
            for es in eps:
                self.k8s("POST", f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", es)
        log("Kubernetes namespaces, service accounts, nodes, NetworkPolicies, services written")

    def seed_k8s_pods(self):
        for w in C.WORKLOADS:
            self.k8s_create_pod(w)
        log(f"{len(C.WORKLOADS)} pods written (spec.nodeName + status.podIPs)")

    def k8s_create_pod(self, w):
        pod, status = C.k8s_pod(w)
        ns = pod["metadata"]["namespace"]
        self.k8s("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        cur = self.k8s("GET", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
        cur["status"] = status
        self.k8s("PUT", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status", cur)

    def k8s_patch(self, path, patch):
        return self.k8s("PATCH", path, patch, ctype="application/merge-patch+json")

    # -------------------------------------------------------------- typhas
    def start_typha(self, side):
        c = SIDE[side]
        if side not in self.ports.get("typha", {}):
            self.ports.setdefault("typha", {})[side] = dict(sync=free_port(), health=free_port(),
                                                            metrics=free_port())
        p = self.ports["typha"][side]
        env = dict(os.environ)
        env.update(TYPHA_SERVERPORT=str(p["sync"]), TYPHA_HEALTHENABLED="true",
                   TYPHA_HEALTHPORT=str(p["health"]), TYPHA_HEALTHHOST="127.0.0.1",
                   TYPHA_PROMETHEUSMETRICSENABLED="true", TYPHA_PROMETHEUSMETRICSPORT=str(p["metrics"]),
                   TYPHA_PROMETHEUSMETRICSHOST="127.0.0.1",
                   TYPHA_LOGFILEPATH="none", TYPHA_LOGSEVERITYSYS="none", TYPHA_LOGSEVERITYSCREEN="INFO",
                   TYPHA_CONNECTIONREBALANCINGMODE="none")
        if self.ds == "etcd":
            env.update(TYPHA_DATASTORETYPE="etcdv3", TYPHA_ETCDENDPOINTS=self.etcd_url)
        else:
            env.update(TYPHA_DATASTORETYPE="kubernetes", KUBECONFIG=self.kubeconfig["host"])
        if side == "calico":
            argv = [os.path.join(CALICO_BIN, "calico-typha")]
        else:
            argv = [self.typha_server]
            env["TYPHA_HISTORYMAXAGESECS"] = str(self.args.history_age)
            env.setdefault("RUST_LOG", "info")
        proc = spawn(f"typha-{side}", argv, env, os.path.join(self.side_dir[side], "logs", "typha.log"))
        for _ in range(240):
            st, _ = http_get(f"http://127.0.0.1:{p['health']}/readiness")
            if st == 200:
                log(f"typha-{side} ready: sync port {p['sync']} (clients use {c['hostip']}:{p['sync']}), "
                    f"health {p['health']}, metrics {p['metrics']}")
                return True
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        log(f"!! typha-{side} not ready (exit status {proc.poll()}); see {side}/logs/typha.log")
        self.notes.append(f"typha-{side} did not become ready at start")
        return False

    def typha_metrics(self, side, pattern=r"^typha_connections"):
        p = self.ports["typha"][side]
        st, body = http_get(f"http://127.0.0.1:{p['metrics']}/metrics")
        if st != 200:
            return {}
        out = {}
        for line in body.splitlines():
            if re.match(pattern, line):
                k, _, v = line.rpartition(" ")
                out[k] = v
        return out

    # -------------------------------------------------------------- calico-node
    def all_ports(self):
        ps = [22, 68, 179, 2379, 2380, 5473, 6443, 6666, 6667]
        ps += [SIDE[s][k] for s in SIDES for k in ("felix_health", "felix_metrics")]
        ps += [self.ports["etcd"]] + ([self.ports["apiserver"]] if "apiserver" in self.ports else [])
        for s in SIDES:
            ps.append(self.ports["typha"][s]["sync"])
        return ps

    def node_env(self, side):
        c = SIDE[side]
        p = self.ports["typha"][side]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TERM")}
        fs = ",".join(f"tcp:{x}" for x in self.all_ports()) + ",udp:53,udp:67,udp:68"
        env.update(
            NODENAME=C.NODE, CALICO_NODENAME=C.NODE, FELIX_FELIXHOSTNAME=C.NODE,
            FELIX_TYPHAADDR=f"{c['hostip']}:{p['sync']}",
            FELIX_HEALTHENABLED="true", FELIX_HEALTHHOST="127.0.0.1", FELIX_HEALTHPORT=str(c["felix_health"]),
            FELIX_PROMETHEUSMETRICSENABLED="true", FELIX_PROMETHEUSMETRICSHOST="127.0.0.1",
            FELIX_PROMETHEUSMETRICSPORT=str(c["felix_metrics"]),
            FELIX_REPORTINGINTERVALSECS="0", FELIX_USAGEREPORTINGENABLED="false",
            FELIX_IPTABLESBACKEND="nft", FELIX_NFTABLESMODE="Disabled", FELIX_BPFENABLED="false",
            FELIX_XDPENABLED="false", FELIX_WIREGUARDENABLED="false",
            FELIX_LOGFILEPATH="none", FELIX_LOGSEVERITYFILE="none", FELIX_LOGSEVERITYSYS="none",
            FELIX_LOGSEVERITYSCREEN="INFO", FELIX_DEBUGDISABLELOGDROPPING="true",
            FELIX_ENDPOINTSTATUSPATHPREFIX=os.path.join(self.side_dir[side], "run"),
            CALICO_ENDPOINT_STATUS_PATH_PREFIX=os.path.join(self.side_dir[side], "run"),
            FELIX_FAILSAFEINBOUNDHOSTPORTS=fs, FELIX_FAILSAFEOUTBOUNDHOSTPORTS=fs,
            BGP_LOGSEVERITYSCREEN="info",
        )
        if self.ds == "etcd":
            ep = f"http://{c['hostip']}:{self.ports['etcd']}"
            env.update(DATASTORE_TYPE="etcdv3", FELIX_DATASTORETYPE="etcdv3", ETCD_ENDPOINTS=ep,
                       FELIX_ETCDENDPOINTS=ep)
        else:
            env.update(DATASTORE_TYPE="kubernetes", FELIX_DATASTORETYPE="kubernetes",
                       KUBECONFIG=self.kubeconfig[side], FELIX_KUBECONFIG=self.kubeconfig[side])
        return env

    def prepare_confd(self, side):
        d = os.path.join(self.side_dir[side], "confd")
        src = os.path.join(CALICO_SRC, "confd/etc/calico/confd")
        for sub in ("templates", "conf.d"):
            if os.path.exists(os.path.join(d, sub)):
                shutil.rmtree(os.path.join(d, sub))
            shutil.copytree(os.path.join(src, sub), os.path.join(d, sub))
        for f in os.listdir(os.path.join(d, "conf.d")):
            p = os.path.join(d, "conf.d", f)
            out = []
            for line in open(p):
                if line.startswith("check_cmd") or line.startswith("reload_cmd"):
                    continue  # no BIRD here: nothing to check or reload
                line = line.replace('dest = "/etc/calico/confd/config/', f'dest = "{d}/config/')
                out.append(line)
            open(p, "w").write("".join(out))
        return d

    def start_node(self, side):
        c = SIDE[side]
        env = self.node_env(side)
        cn = os.path.join(CALICO_BIN, "calico-node")
        sup = os.path.join(HERE, "supervise.sh")
        varlib = os.path.join(self.side_dir[side], "varlib")
        os.makedirs("/var/lib/calico", exist_ok=True)  # mount point only; each Felix gets its own
        netns = ["ip", "netns", "exec", c["ns"], "unshare", "-m", "--propagation", "private",
                 "sh", "-c", 'mount --bind "$0" /var/lib/calico && exec "$@"', varlib]
        logs = os.path.join(self.side_dir[side], "logs")
        spawn(f"felix-{side}", ["bash", sup] + netns + [cn, "-felix"], env, os.path.join(logs, "felix.log"))
        confd_dir = self.prepare_confd(side)
        spawn(f"confd-{side}", ["bash", sup] + netns + [cn, "-confd", f"-confd-confdir={confd_dir}"], env,
              os.path.join(logs, "confd.log"))
        if not self.args.no_status_reporter:
            spawn(f"status-{side}", ["bash", sup] + netns + [cn, "-status-reporter"], env,
                  os.path.join(logs, "status-reporter.log"))
        log(f"calico-node -felix / -confd{'' if self.args.no_status_reporter else ' / -status-reporter'} "
            f"started for {side} in {c['ns']} (Typha {env['FELIX_TYPHAADDR']})")

    def felix_ready(self, side):
        c = SIDE[side]
        out = subprocess.run(["ip", "netns", "exec", c["ns"], "curl", "-s", "-o", "/dev/null", "-w",
                              "%{http_code}", "--max-time", "2",
                              f"http://127.0.0.1:{c['felix_health']}/readiness"],
                             capture_output=True, text=True)
        return out.stdout.strip() == "200"

    def felix_metrics(self, side):
        c = SIDE[side]
        out = subprocess.run(["ip", "netns", "exec", c["ns"], "curl", "-s", "--max-time", "2",
                              f"http://127.0.0.1:{c['felix_metrics']}/metrics"],
                             capture_output=True, text=True).stdout
        keep = []
        for line in out.splitlines():
            if re.match(r"^felix_(cluster_num_|active_local_)", line):
                keep.append(line)
        return "\n".join(sorted(keep)) + "\n"

    def starts(self, name):
        """How many times the supervised process has been started."""
        path = os.path.join(self.side_dir[name.split("-")[1]], "logs", name.split("-")[0] + ".log")
        if name.startswith("status"):
            path = os.path.join(self.side_dir[name.split("-")[1]], "logs", "status-reporter.log")
        try:
            return sum(1 for l in open(path, errors="replace") if l.startswith("=== supervise: start"))
        except OSError:
            return 0

    # -------------------------------------------------------------- dumps
    def ns_cmd(self, side, *cmd):
        p = subprocess.run(["ip", "netns", "exec", SIDE[side]["ns"]] + list(cmd), capture_output=True,
                           text=True)
        return self.normalise_common(side, p.stdout)

    def normalise_common(self, side, text):
        """Replace what is per-namespace by design (the host link's addresses, link-local addresses)."""
        c = SIDE[side]
        base = c["hostip"].rsplit(".", 1)[0]
        last = int(c["hostip"].rsplit(".", 1)[1]) - 1
        text = text.replace(f"{base}.{last}/30", "LINKNET")
        for i, tok in enumerate(["LINKNET_ADDR", "HOSTIP", "NSIP", "LINKBCAST"]):
            text = re.sub(rf"(?<![\d.]){re.escape(base)}\.{last + i}(?![\d])", tok, text)
        text = re.sub(r"fe80::[0-9a-f:]+", "fe80::X", text)
        return text

    @staticmethod
    def norm_iptables(text):
        tables = {}
        cur = None
        for line in text.splitlines():
            if not line or line.startswith("#") or line == "COMMIT":
                continue
            if line.startswith("*"):
                cur = line
                tables.setdefault(cur, {"chains": [], "rules": {}})
                continue
            if line.startswith(":"):
                name = line[1:].split()[0]
                policy = line.split()[1]
                tables[cur]["chains"].append(f":{name} {policy}")
                tables[cur]["rules"].setdefault(name, [])
                continue
            if line.startswith("-A "):
                chain = line.split()[1]
                line = re.sub(r"^-A \S+ ", "", line)
                tables[cur]["rules"].setdefault(chain, []).append(f"-A {chain} {line}")
        out = []
        for t in sorted(tables):
            out.append(t)
            out += sorted(tables[t]["chains"])
            for ch in sorted(tables[t]["rules"]):
                out += tables[t]["rules"][ch]
        return "\n".join(out) + "\n"

    @staticmethod
    def norm_ipset(text):
        sets = {}
        for line in text.splitlines():
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "create":
                line = re.sub(r" initval 0x[0-9a-f]+", "", line)
                line = re.sub(r" hashsize \d+", "", line)
                line = re.sub(r" bucketsize \d+", "", line)
                sets.setdefault(parts[1], ["", []])[0] = line
            elif parts[0] == "add":
                sets.setdefault(parts[1], ["", []])[1].append(line)
        out = []
        for name in sorted(sets):
            out.append(sets[name][0])
            out += sorted(sets[name][1])
        return "\n".join(out) + "\n"

    def dump(self, side):
        d = {}
        d["iptables"] = self.norm_iptables(self.ns_cmd(side, "iptables-nft-save"))
        d["ip6tables"] = self.norm_iptables(self.ns_cmd(side, "ip6tables-nft-save"))
        d["ipset"] = self.norm_ipset(self.ns_cmd(side, "ipset", "save"))

        def lines(t, keep=None):
            ls = [re.sub(r"\s+", " ", l).strip() for l in t.splitlines() if l.strip()]
            if keep:
                ls = [l for l in ls if keep(l)]
            return "\n".join(sorted(ls)) + "\n"
        d["route4"] = lines(self.ns_cmd(side, "ip", "-4", "route", "show", "table", "all"))
        d["route6"] = lines(self.ns_cmd(side, "ip", "-6", "route", "show", "table", "all"))
        d["rule4"] = self.ns_cmd(side, "ip", "-4", "rule")
        d["rule6"] = self.ns_cmd(side, "ip", "-6", "rule")
        d["neigh"] = lines(self.ns_cmd(side, "ip", "neigh", "show", "nud", "all"),
                           keep=lambda l: ("PERMANENT" in l or "NOARP" in l) and not l.startswith("ff0")
                           and "lladdr 33:33:" not in l and "lladdr 01:00:5e:" not in l)
        d["fdb"] = lines(self.ns_cmd(side, "bridge", "fdb", "show"), keep=lambda l: "vxlan" in l)

        def link_norm(l):
            parts = l.split()
            name = parts[0]
            if not name.startswith("vxlan"):
                l = re.sub(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", "MAC", l)
            return re.sub(r"@if\d+", "@ifN", l)
        d["links"] = lines("\n".join(link_norm(l) for l in self.ns_cmd(side, "ip", "-br", "link").splitlines()
                                     if l.strip()))
        d["addrs"] = lines(re.sub(r"@if\d+", "@ifN", self.ns_cmd(side, "ip", "-br", "addr")))
        # confd's rendered BIRD config
        cfgdir = os.path.join(self.side_dir[side], "confd", "config")
        for f in sorted(os.listdir(cfgdir)):
            if f.endswith(".cfg"):
                d["confd_" + f] = open(os.path.join(cfgdir, f)).read()
        # Felix's endpoint status files
        st = []
        base = os.path.join(self.side_dir[side], "run")
        for root, _, files in os.walk(base):
            for f in files:
                p = os.path.join(root, f)
                try:
                    body = open(p).read().strip()
                except OSError:
                    continue
                st.append(f"{os.path.relpath(p, base)} {body}")
        d["endpoint_status"] = "\n".join(sorted(st)) + "\n"
        d["felix_metrics"] = self.felix_metrics(side)
        return {k: self.normalise_common(side, v) for k, v in d.items()}  # (confd, status files too)

    def felix_proto(self, side):
        """Felix's calculation-graph output, replayed from its INFO log since its last start: the final
        state of every policy, profile, endpoint, IP set (members), route, pool, tunnel endpoint ...
        as Felix received it, one line per object, sorted."""
        path = os.path.join(self.side_dir[side], "logs", "felix.log")
        try:
            text = open(path, errors="replace").read()
        except OSError:
            return ""
        start = text.rfind("=== supervise: start")
        text = text[start:] if start >= 0 else text
        state, ipsets = {}, {}
        rx = re.compile(r"Received \*proto\.(\w+) update from calculation graph\. msg=(.*)$")
        keyrx = re.compile(r'^(?:types:\S+ (?:ip_pool_type:\S+ )?)?((?:id|dst|hostname|node|name):(?:\{[^}]*\}|"[^"]*"))'
                           r'(?: namespace:"[^"]*")?')
        for line in text.splitlines():
            m = rx.search(line)
            if not m:
                continue
            typ, msg = m.group(1), m.group(2).strip()
            if typ in ("InSync", "ConfigUpdate"):
                continue  # ConfigUpdate carries each side's own Typha address etc.
            fam = re.sub(r"(Update|Remove|DeltaUpdate)$", "", typ)
            if fam in ("Encapsulation", "GlobalBGPConfig"):
                state[(fam, "")] = msg
                continue
            km = keyrx.match(msg)
            key = km.group(1) if km else msg[:80]
            ns = re.search(r'^[^{]*?\bnamespace:"([^"]*)"', msg) if fam == "Service" else None
            if ns:
                key += "/" + ns.group(1)
            if fam == "IPSet":
                if typ == "IPSetUpdate":
                    ipsets[key] = set(re.findall(r'members:"([^"]*)"', msg))
                elif typ == "IPSetDeltaUpdate":
                    cur = ipsets.setdefault(key, set())
                    cur |= set(re.findall(r'added_members:"([^"]*)"', msg))
                    cur -= set(re.findall(r'removed_members:"([^"]*)"', msg))
                else:
                    ipsets.pop(key, None)
                continue
            if typ.endswith("Remove"):
                state.pop((fam, key), None)
            else:
                state[(fam, key)] = msg
        out = [f"{fam} {msg}" for (fam, _), msg in state.items()]
        out += [f"IPSet {k} members=[{', '.join(sorted(v))}]" for k, v in ipsets.items()]
        return "\n".join(sorted(out)) + "\n"

    @staticmethod
    def counts(d):
        def n(k, pred):
            return sum(1 for l in d.get(k, "").splitlines() if pred(l))
        return {
            "ipt4_rules": n("iptables", lambda l: l.startswith("-A ")),
            "ipt6_rules": n("ip6tables", lambda l: l.startswith("-A ")),
            "ipt4_chains": n("iptables", lambda l: l.startswith(":")),
            "ipsets": n("ipset", lambda l: l.startswith("create ")),
            "ipset_members": n("ipset", lambda l: l.startswith("add ")),
            "routes4": n("route4", lambda l: True),
            "routes6": n("route6", lambda l: True),
            "neigh": n("neigh", lambda l: True),
            "fdb": n("fdb", lambda l: True),
            "confd_lines": sum(n(k, lambda l: l.strip() != "") for k in d if k.startswith("confd_")),
            "confd_files": sum(1 for k in d if k.startswith("confd_")),
            "felix_proto_objs": n("felix_proto", lambda l: l.strip() != ""),
        }

    def wait_settled(self, label, min_wait=8, stable_polls=3, timeout=None):
        timeout = timeout or self.args.settle_timeout
        t0 = time.time()
        last = {s: None for s in SIDES}
        same = {s: 0 for s in SIDES}
        while True:
            time.sleep(3)
            ready = {s: self.felix_ready(s) for s in SIDES}
            for s in SIDES:
                h = hashlib.sha1(json.dumps(self.dump(s), sort_keys=True).encode()).hexdigest()
                same[s] = same[s] + 1 if h == last[s] else 0
                last[s] = h
            el = time.time() - t0
            if el >= min_wait and all(ready.values()) and all(v >= stable_polls for v in same.values()):
                log(f"  settled after {el:.0f}s ({label})")
                return True
            if el > timeout:
                log(f"  !! not settled after {el:.0f}s ({label}): felix ready={ready}, stable polls={same}")
                self.notes.append(f"{label}: not settled within {timeout}s (felix ready={ready})")
                return False

    def compare(self, label):
        os.makedirs(os.path.join(self.dumps, label), exist_ok=True)
        dumps = {}
        for s in SIDES:
            dumps[s] = self.dump(s)
            dumps[s]["felix_proto"] = self.normalise_common(s, self.felix_proto(s))
            sd = os.path.join(self.dumps, label, s)
            os.makedirs(sd, exist_ok=True)
            for k, v in dumps[s].items():
                open(os.path.join(sd, k + ".txt"), "w").write(v)
        keys = sorted(set(dumps["calico"]) | set(dumps["ours"]))
        diff_lines = []
        per_file = {}
        # The same diff with Felix's rule IDs ("cali:<hash>" comments, which chain: one rule that
        # hashes differently changes every later ID in its chain) masked: what differs in effect.
        sem_lines, sem_files = [], {}
        for k in keys:
            def mask(l):
                l = re.sub(r'"cali:[A-Za-z0-9_-]{16}"', '"cali:ID"', l)
                return re.sub(r'rule_id:"[A-Za-z0-9_-]{16}"', 'rule_id:"ID"', l)
            a = [mask(l) for l in dumps["calico"].get(k, "").splitlines()]
            b = [mask(l) for l in dumps["ours"].get(k, "").splitlines()]
            if a != b:
                dl = [l for l in difflib.unified_diff(a, b, f"calico/{k}", f"ours/{k}", n=0, lineterm="")]
                sem_files[k] = len([l for l in dl if not l.startswith(("---", "+++", "@@"))])
                sem_lines += dl
        open(os.path.join(self.dumps, label, "diff-ids-masked.txt"), "w").write("\n".join(sem_lines) + "\n")
        changed = {}
        for s in SIDES:
            prev = getattr(self, "prev_dump", {}).get(s)
            if prev is None:
                changed[s] = None
            else:
                n = 0
                for k in set(prev) | set(dumps[s]):
                    n += sum(1 for l in difflib.unified_diff(prev.get(k, "").splitlines(), dumps[s].get(k, "").splitlines(),
                                                             n=0, lineterm="")
                             if l[:1] in "+-" and not l.startswith(("---", "+++")))
                changed[s] = n
        self.prev_dump = dumps
        for k in keys:
            a = dumps["calico"].get(k, "").splitlines()
            b = dumps["ours"].get(k, "").splitlines()
            if a == b:
                continue
            dl = [l for l in difflib.unified_diff(a, b, f"calico/{k}", f"ours/{k}", n=0, lineterm="")]
            body = [l for l in dl if not l.startswith(("---", "+++", "@@"))]
            per_file[k] = len(body)
            diff_lines += dl
        open(os.path.join(self.dumps, label, "diff.txt"), "w").write("\n".join(diff_lines) + "\n")
        cnt = {s: self.counts(dumps[s]) for s in SIDES}
        res = {"scenario": label, "counts": cnt, "diff_files": per_file,
               "diff_lines": sum(per_file.values()),
               "masked_diff_files": sem_files, "masked_diff_lines": sum(sem_files.values()),
               "changed_since_previous": changed,
               "felix_starts": {s: self.starts(f"felix-{s}") for s in SIDES},
               "confd_starts": {s: self.starts(f"confd-{s}") for s in SIDES},
               "typha_metrics": {s: self.typha_metrics(s) for s in SIDES}}
        self.results.append(res)
        log(f"== {label}: counts per side")
        hdr = list(cnt["calico"].keys())
        log("   " + "side".ljust(8) + " ".join(h.rjust(13) for h in hdr))
        for s in SIDES:
            log("   " + s.ljust(8) + " ".join(str(cnt[s][h]).rjust(13) for h in hdr))
        log(f"   felix starts: {res['felix_starts']}, confd starts: {res['confd_starts']}")
        if any(v is not None for v in changed.values()):
            log(f"   lines changed since the previous scenario, per side: {changed}")
        if per_file:
            log(f"   with Felix's rule IDs masked: {res['masked_diff_lines']} differing lines in {sem_files}")
        if not per_file:
            log(f"== {label}: IDENTICAL dataplanes and confd output")
        else:
            log(f"== {label}: {res['diff_lines']} differing lines in {per_file}")
            shown = [l for l in diff_lines if not l.startswith("@@")]
            limit = self.args.max_print
            for l in shown[:limit]:
                log("   " + l)
            if len(shown) > limit:
                log(f"   ... {len(shown) - limit} more lines in {os.path.join(self.dumps, label, 'diff.txt')}")
        return res

    # -------------------------------------------------------------- scenarios
    def scenario_initial(self):
        log("=== scenario a: initial sync")
        self.wait_settled("a-initial", min_wait=20)
        return self.compare("a-initial")

    def churn(self):
        """Create, update and delete every kind."""
        ds = self.ds
        steps = []
        # workloads
        if ds == "etcd":
            w_new = C.wep(C.NEW_LOCAL)
            w2 = C.wep(C.WORKLOADS[1])
            w2["metadata"]["labels"]["tier"] = "canary"
            w2["spec"]["ports"].append({"name": "admin", "protocol": "TCP", "port": 8443})
            mon = C.wep(C.WORKLOADS[10])
            mon["metadata"]["labels"]["scraped"] = "yes"
            steps.append(("workload endpoints: create web-4 (node-a), update web-2 labels+ports, "
                          "update mon-1 labels, delete web-3 + cache-1",
                          lambda: (self.apply([w_new, w2, mon]),
                                   self.delete("workloadendpoint", C.wep_name("node-b", "web-3"), "dev"),
                                   self.delete("workloadendpoint", C.wep_name("node-b", "cache-1"), "prod"))))
        else:
            steps.append(("pods: create web-4 (node-a), relabel web-2, relabel mon-1, delete web-3 + cache-1",
                          lambda: (self.k8s_create_pod(C.NEW_LOCAL),
                                   self.k8s_patch("/api/v1/namespaces/prod/pods/web-2",
                                                  {"metadata": {"labels": {"tier": "canary"}}}),
                                   self.k8s_patch("/api/v1/namespaces/monitoring/pods/mon-1",
                                                  {"metadata": {"labels": {"scraped": "yes"}}}),
                                   self.k8s("DELETE", "/api/v1/namespaces/dev/pods/web-3?gracePeriodSeconds=0"),
                                   self.k8s("DELETE", "/api/v1/namespaces/prod/pods/cache-1?gracePeriodSeconds=0"))))
        # IPAM
        b = C.blocks(include_new=True)
        del b["10.66.0.0/26"]
        for ip in ("10.64.0.66",):  # web-3's address
            b["10.64.0.64/26"][1].pop(ip, None)
        nb = {k: b[k] for k in ("10.65.0.0/26", "10.64.0.64/26")}
        nb["10.65.1.0/26"] = ("node-b", {"10.65.1.5": ("node-b", {"namespace": "dev", "pod": "x", "node": "node-b"})})
        steps.append(("IPAM: allocate 10.65.0.5 in node-a's block, free 10.64.0.66, new block 10.65.1.0/26 "
                      "(node-b), delete block 10.66.0.0/26",
                      lambda: self.write_ipam(nb, delete=[("10.66.0.0/26", "node-b")])))
        # nodes
        if ds == "etcd":
            nodes = C.calico_nodes()
            nb_ = next(n for n in nodes if n["metadata"]["name"] == "node-b")
            nb_["spec"]["bgp"]["ipv4Address"] = "172.30.0.12/24"
            nb_["spec"]["vxlanTunnelMACAddr"] = "66:11:22:33:44:bb"
            nc = next(n for n in nodes if n["metadata"]["name"] == "node-c")
            nc["metadata"]["labels"]["zone"] = "z1"
            steps.append(("nodes: node-b new BGP IPv4 + VXLAN MAC, node-c zone label",
                          lambda: self.apply([nb_, nc])))
        else:
            steps.append(("nodes: node-b new BGP IPv4 + VXLAN MAC, node-c zone label",
                          lambda: (self.k8s_patch("/api/v1/nodes/node-b", {"metadata": {"annotations": {
                              "projectcalico.org/IPv4Address": "172.30.0.12/24",
                              "projectcalico.org/VXLANTunnelMACAddr": "66:11:22:33:44:bb"}}}),
                              self.k8s_patch("/api/v1/nodes/node-c", {"metadata": {"labels": {"zone": "z1"}}}))))
        # pools
        pools = C.ippools()
        pp = next(p for p in pools if p["metadata"]["name"] == "pool-plain")
        pp["spec"]["natOutgoing"] = True
        newpool = C.r("IPPool", "pool-new", {"cidr": "10.68.0.0/16", "vxlanMode": "Always", "ipipMode": "Never",
                                             "natOutgoing": False, "blockSize": 26})
        steps.append(("IP pools: pool-plain natOutgoing on, create pool-new, delete pool-disabled",
                      lambda: (self.apply([pp, newpool]), self.delete("ippool", "pool-disabled"))))
        # tiers + policies
        pols = {p["metadata"]["name"]: p for p in C.policies()}
        npn = pols["named-ports"]
        npn["spec"]["ingress"][0]["destination"]["ports"] = ["http", "pg", 8081]
        prednat = pols["prednat-gw"]
        prednat["spec"]["ingress"][0]["source"]["nets"] = ["100.64.0.0/10", "192.0.2.128/25"]
        web = pols["web-allow"]
        web["spec"]["egress"].insert(0, {"action": "Allow", "protocol": 6, "destination": {"ports": [8443]}})
        new_gnp = C.r("GlobalNetworkPolicy", "audit-egress", {
            "tier": "audit", "order": 1, "selector": "all()", "types": ["Egress"],
            "egress": [{"action": "Log", "protocol": 132}, {"action": "Allow", "protocol": 58, "ipVersion": 6},
                       {"action": "Pass"}]})
        new_np = C.r("NetworkPolicy", "scrape", {
            "tier": "default", "order": 10, "selector": "app == 'prometheus'", "types": ["Egress"],
            "egress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": ["metrics", "http"]}}]},
            namespace="monitoring")
        staged = C.policies()[-2]
        staged["spec"]["order"] = 31
        tiers = C.tiers()
        tiers[1]["spec"]["order"] = 150
        tiers.append(C.r("Tier", "audit", {"order": 50}))
        steps.append(("tiers + policies: platform order 150, new tier audit + GNP (protocols 132, 58), "
                      "update named-ports/prednat-gw/web-allow/staged-lockdown, new NP scrape, "
                      "delete GNP default-ns-isolation, NP dev-open, staged NP staged-web",
                      lambda: (self.apply(tiers), self.apply([npn, prednat, web, new_gnp, new_np, staged]),
                               self.delete("globalnetworkpolicy", "default-ns-isolation"),
                               self.delete("networkpolicy", "dev-open", "dev"),
                               self.delete("stagednetworkpolicy", "staged-web", "prod"))))
        if ds == "kubernetes":
            steps.append(("Kubernetes NetworkPolicies: update allow-web, delete deny-all-dev, create new",
                          lambda: self.k8s_np_churn()))
            steps.append(("namespaces/service accounts: relabel prod, relabel SA prod/web",
                          lambda: (self.k8s_patch("/api/v1/namespaces/prod", {"metadata": {"labels": {"tier": "gold"}}}),
                                   self.k8s_patch("/api/v1/namespaces/prod/serviceaccounts/web",
                                                  {"metadata": {"labels": {"role": "web2"}}}))))
        else:
            prof = next(p for p in C.profiles() if p["metadata"]["name"] == "kns.prod")
            prof["spec"]["labelsToApply"]["pcns.tier"] = "gold"
            prof["spec"]["ingress"] = [{"action": "Allow", "protocol": "TCP"}, {"action": "Deny"}]
            steps.append(("profiles: update kns.prod (labelsToApply + rules)", lambda: self.apply([prof])))
        # network sets
        sets = {s["metadata"]["name"]: s for s in C.networksets()}
        sets["gns-scanners"]["spec"]["nets"] = ["100.64.7.0/24", "100.64.8.0/24"]
        sets["ns-partners"]["spec"]["nets"].append("198.51.100.128/25")
        new_gns = C.r("GlobalNetworkSet", "gns-new", {"nets": ["192.0.2.64/26"]}, labels={"netset": "corp"})
        steps.append(("network sets: update gns-scanners, ns-partners; create gns-new; delete gns-corp, "
                      "ns-devtools; bad-CIDR set rewritten with another bad entry",
                      lambda: (self.apply([sets["gns-scanners"], sets["ns-partners"], new_gns]),
                               self.delete("globalnetworkset", "gns-corp"),
                               self.delete("networkset", "ns-devtools", "dev"),
                               self.write_bad_gns(["10.1.0.0/16", "not-a-cidr", "192.168.5.0/24",
                                                   "10.2.0.0/33", "172.16.9.0/24"]))))
        # host endpoints
        heps = {h["metadata"]["name"]: h for h in C.host_endpoints(self.ds)}
        heps["node-a-ext0"]["spec"]["expectedIPs"] = ["172.30.5.1", "172.30.5.2"]
        heps["node-a-ext0"]["metadata"]["labels"]["extra"] = "yes"
        new_hep = C.r("HostEndpoint", "node-c-eth0", {"node": "node-c", "interfaceName": "eth0",
                                                      "expectedIPs": ["172.30.0.3"]},
                      labels={"role": "gateway", "host-endpoint": "true"})
        steps.append(("host endpoints: update node-a-ext0, create node-c-eth0, delete node-b-eth0",
                      lambda: (self.apply([heps["node-a-ext0"], new_hep]),
                               self.delete("hostendpoint", "node-b-eth0"))))
        # felix / bgp config, peers, filters, node status
        cfg = {x["metadata"]["name"] + x["kind"]: x for x in C.felix_bgp_config()}
        fc = cfg["node.node-aFelixConfiguration"]
        fc["spec"]["externalNodesList"] = ["198.19.0.0/16", "198.20.0.0/16"]
        bc = cfg["defaultBGPConfiguration"]
        bc["spec"]["serviceExternalIPs"].append({"cidr": "198.18.101.0/24"})
        bcn = cfg["node.node-aBGPConfiguration"]
        bcn["spec"]["listenPort"] = 1791
        flt = cfg["filter-1BGPFilter"]
        flt["spec"]["exportV4"].append({"action": "Reject", "matchOperator": "In", "cidr": "10.66.0.0/16"})
        flt2 = C.r("BGPFilter", "filter-2", {"importV4": [{"action": "Accept", "matchOperator": "In",
                                                            "cidr": "10.0.0.0/8"}]})
        rr = cfg["peer-to-rrBGPPeer"]
        rr["spec"]["keepOriginalNextHop"] = True
        newpeer = C.r("BGPPeer", "peer-node-a-2", {"node": "node-a", "peerIP": "172.30.0.253", "asNumber": 64602,
                                                   "filters": ["filter-2"]})
        steps.append(("config: FelixConfiguration node.node-a, BGPConfiguration default + node.node-a, "
                      "BGPFilter update + create, BGPPeer update + create + delete, CalicoNodeStatus update",
                      lambda: (self.apply([fc, bc, bcn, flt, flt2, rr, newpeer]),
                               self.delete("bgppeer", "peer-global-tor"),
                               self.write_node_status(C.r("CalicoNodeStatus", "status-node-a",
                                                          {"node": "node-a", "classes": ["Agent", "BGP"],
                                                           "updatePeriodSeconds": 3600})))))
        if ds == "kubernetes":
            steps.append(("services/endpointslices: create one, delete one", lambda: self.k8s_svc_churn()))
        for desc, fn in steps:
            log("  churn:", desc)
            fn()
            time.sleep(self.args.churn_gap)

    def scenario_churn(self):
        log("=== scenario b: churn touching every kind")
        self.churn()
        self.wait_settled("b-churn", min_wait=15)
        return self.compare("b-churn")

    def ours_log_count(self, pattern):
        try:
            return sum(1 for l in open(os.path.join(self.side_dir["ours"], "logs", "typha.log"), errors="replace")
                       if re.search(pattern, l, re.I))
        except OSError:
            return 0

    def scenario_quiet(self):
        q = self.args.quiet
        log(f"=== scenario c: quiet for {q}s (history age of ours: {self.args.history_age}s), then one change")
        before = {s: self.typha_metrics(s) for s in SIDES}
        fb_before = self.ours_log_count(r"fell behind")
        starts_before = {s: (self.starts(f"felix-{s}"), self.starts(f"confd-{s}")) for s in SIDES}
        time.sleep(q)
        log("  one change: node-b's BGP IPv4 address -> 172.30.0.22/24 (felix: VXLAN FDB/neigh; confd: "
            "mesh peer)")
        if self.ds == "etcd":
            nb = self.ctl_get("node", "node-b")
            nb["spec"]["bgp"]["ipv4Address"] = "172.30.0.22/24"
            self.apply([nb])
        else:
            self.k8s_patch("/api/v1/nodes/node-b", {"metadata": {"annotations": {
                "projectcalico.org/IPv4Address": "172.30.0.22/24"}}})
        time.sleep(10)
        after = {s: self.typha_metrics(s) for s in SIDES}
        fb = self.ours_log_count(r"fell behind") - fb_before
        starts_after = {s: (self.starts(f"felix-{s}"), self.starts(f"confd-{s}")) for s in SIDES}
        self.wait_settled("c-quiet", min_wait=10)
        res = self.compare("c-quiet")
        dropped = {s: {k: v for k, v in after[s].items() if "dropped" in k} for s in SIDES}
        res["quiet"] = {"ours_fell_behind_log_lines": fb, "metrics_before": before, "metrics_after": after,
                        "felix_confd_starts_before": starts_before, "felix_confd_starts_after": starts_after}
        log(f"  ours: 'fell behind' log lines during c: {fb}")
        for s in SIDES:
            log(f"  {s}: dropped metrics after: {dropped[s]}; felix/confd starts before {starts_before[s]} "
                f"after {starts_after[s]}")
        return res

    def scenario_restart(self, sig):
        name = {signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}[sig]
        label = f"d-{name.lower()}"
        log(f"=== scenario {label}: {name} each typha, one change while down, restart, re-compare")
        took = {}
        for s in SIDES:
            took[s] = stop(f"typha-{s}", sig, wait=self.args.term_wait)
            log(f"  typha-{s}: gone {abs(took[s]):.1f}s after {name}" + (" (had to SIGKILL)" if took[s] < 0 else ""))
        # a change while no typha runs: one more CIDR in gns-scanners (the blocklist ipset)
        extra = {"SIGTERM": "100.64.10.0/24", "SIGKILL": "100.64.11.0/24"}[name]
        g = self.ctl_get("globalnetworkset", "gns-scanners")
        g["spec"]["nets"].append(extra)
        self.apply([g])
        log(f"  added {extra} to GlobalNetworkSet gns-scanners while both typhas were down")
        time.sleep(5)
        for s in SIDES:
            self.start_typha(s)
        self.wait_settled(label, min_wait=25)
        res = self.compare(label)
        res["stop_secs"] = took
        return res

    # -------------------------------------------------------------- k8s churn bits
    def k8s_np_churn(self):
        nps = {n["metadata"]["name"]: n for n in C.k8s_network_policies()}
        allow = nps["allow-web"]
        cur = self.k8s("GET", "/apis/networking.k8s.io/v1/namespaces/prod/networkpolicies/allow-web")
        allow["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        allow["spec"]["ingress"][0]["ports"].append({"protocol": "TCP", "port": 9443, "endPort": 9450})
        self.k8s("PUT", "/apis/networking.k8s.io/v1/namespaces/prod/networkpolicies/allow-web", allow)
        self.k8s("DELETE", "/apis/networking.k8s.io/v1/namespaces/dev/networkpolicies/deny-all-dev")
        self.k8s("POST", "/apis/networking.k8s.io/v1/namespaces/monitoring/networkpolicies", C.k8s_np_new())

    def k8s_svc_churn(self):
        svc, eps = C.k8s_service_new()
        self.k8s("POST", "/api/v1/namespaces/prod/services", svc)
        for es in eps:
            self.k8s("POST", "/apis/discovery.k8s.io/v1/namespaces/prod/endpointslices", es)
        self.k8s("DELETE", "/api/v1/namespaces/dev/services/frontend")
        self.k8s("DELETE", "/apis/discovery.k8s.io/v1/namespaces/dev/endpointslices/frontend-1")

    def log_digest(self, side, prog, top=8):
        """Distinct warnings/errors of one program's log (timestamps, pids, ports masked)."""
        path = os.path.join(self.side_dir[side], "logs", prog + ".log")
        counts = {}
        try:
            for l in open(path, errors="replace"):
                if not re.search(r"\[(WARNING|ERROR|FATAL|PANIC)\]| (WARN|ERROR) ", l):
                    continue
                if "tunl0" in l or "deprecated" in l:
                    continue
                m = l.strip()
                m = re.sub(r"^\d{4}-\d\d-\d\dT\S+Z\s+", "", m)       # ours (tracing)
                m = re.sub(r"^\d{4}-\d\d-\d\d \S+ ", "", m)           # Calico's (logrus)
                m = re.sub(r"(myID|connID|serverConnID)=0x[0-9a-f]+", r"\1=X", m)
                m = re.sub(r"\[\d+\]", "", m)
                m = re.sub(r"172\.31\.25[01]\.\d+(:\d+)?", "HOST", m)
                m = re.sub(re.escape(RUNS) + r"/[^/ ]+/(calico|ours)/", "RUN/", m)
                m = m[:220]
                counts[m] = counts.get(m, 0) + 1
        except OSError:
            return []
        return sorted(counts.items(), key=lambda kv: -kv[1])[:top]

    # -------------------------------------------------------------- summary
    def summary(self):
        lines = []
        lines.append(f"run: {self.dir}")
        lines.append(f"datastore: {self.ds}; calico-typha: {CALICO_BIN}/calico-typha; "
                     f"typha-server: {self.typha_server_orig} (sha256 {self.typha_server_sha[:16]})")
        lines.append("")
        hdr = ["ipt4_rules", "ipt6_rules", "ipsets", "ipset_members", "routes4", "routes6", "neigh", "fdb",
               "confd_lines"]
        lines.append("scenario".ljust(12) + "side".ljust(8) + "".join(h.rjust(14) for h in hdr) + "  diff")
        for r in self.results:
            for s in SIDES:
                lines.append(r["scenario"].ljust(12) + s.ljust(8) +
                             "".join(str(r["counts"][s][h]).rjust(14) for h in hdr) +
                             ("  " + (f"{r['diff_lines']} lines {r['diff_files']}; rule IDs masked: "
                                      f"{r['masked_diff_lines']} {r['masked_diff_files']}"
                                      if r["diff_lines"] else "identical")
                              if s == "ours" else ""))
        lines.append("")
        for r in self.results:
            lines.append(f"{r['scenario']}: dump lines changed since previous scenario {r['changed_since_previous']}")
        lines.append("")
        for r in self.results:
            if "quiet" in r:
                q = r["quiet"]
                lines.append(f"quiet spell ({self.args.quiet}s > history age {self.args.history_age}s): "
                             f"ours logged 'fell behind' {q['ours_fell_behind_log_lines']} time(s)")
                for s in SIDES:
                    d = {k: v for k, v in q["metrics_after"][s].items() if "dropped" in k}
                    lines.append(f"  {s}: dropped counters after: {d or '(none exported)'}; felix/confd starts "
                                 f"{q['felix_confd_starts_before'][s]} -> {q['felix_confd_starts_after'][s]}")
            if "stop_secs" in r:
                lines.append(f"{r['scenario']}: typha exit after signal (s, negative = needed SIGKILL): "
                             f"{ {k: round(v, 1) for k, v in r['stop_secs'].items()} }")
        lines.append(f"ours 'fell behind' log lines in whole run: {self.ours_log_count('fell behind')}")
        for s in SIDES:
            lines.append(f"{s}: felix starts {self.starts('felix-' + s)}, confd starts {self.starts('confd-' + s)}, "
                         f"status-reporter starts {self.starts('status-' + s)}")
        try:
            if self.ds == "etcd":
                cns = self.etcd_get("/calico/resources/v3/projectcalico.org/caliconodestatuses/status-node-a")
            else:
                cns = self.k8s("GET", self.crd_path("caliconodestatuses", "status-node-a"))
            st = (cns or {}).get("status") or {}
            lines.append(f"CalicoNodeStatus status-node-a in the datastore: status.lastUpdated="
                         f"{st.get('lastUpdated')!r} (written by a status reporter if set; both sides' "
                         f"reporters write the same object)")
        except Exception as e:  # noqa: BLE001
            lines.append(f"CalicoNodeStatus: could not read ({e})")
        for prog in ("status-reporter", "confd", "felix", "typha"):
            for side in SIDES:
                dg = self.log_digest(side, prog)
                if dg:
                    lines.append(f"{side} {prog}: distinct warnings/errors (count, message):")
                    lines += [f"  {n:5d}  {m}" for m, n in dg]
        if self.notes:
            lines.append("notes:")
            lines += ["  " + n for n in self.notes]
        text = "\n".join(lines) + "\n"
        open(os.path.join(self.dir, "summary.txt"), "w").write(text)
        json.dump(self.results, open(os.path.join(self.dir, "results.json"), "w"), indent=1, default=str)
        print("\n================ SUMMARY ================\n" + text)

    # -------------------------------------------------------------- main
    def run(self):
        a = self.args
        log(f"run dir {self.dir}; datastore {self.ds}; typha-server {self.typha_server_orig} "
            f"(sha256 {self.typha_server_sha[:16]}, copied into the run dir)")
        if not CALICO_BIN or not CALICO_SRC:
            raise RuntimeError(
                "set CALICO_BIN_DIR (your calico-typha, calico-node and calicoctl of Calico "
                "v3.32.0) and CALICO_SRC (Calico's v3.32.0 source, for confd's templates and the "
                "CRDs): see scripts/calico-node-compare/README.md")
        for b in (os.path.join(CALICO_BIN, x) for x in ("calico-typha", "calico-node", "calicoctl")):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"missing {b}")
        if not os.access(self.typha_server, os.X_OK):
            raise RuntimeError(f"missing typha-server binary {self.typha_server}")
        self.setup_netns()
        if self.ds == "etcd":
            self.start_etcd("/usr/bin/etcd")
        else:
            self.start_kubernetes()
        self.seed()
        for s in SIDES:
            self.start_typha(s)
        for s in SIDES:
            self.start_node(s)
        scen = a.scenarios
        if "a" in scen:
            self.scenario_initial()
        if "b" in scen:
            self.scenario_churn()
        if "c" in scen:
            self.scenario_quiet()
        if "d" in scen:
            self.scenario_restart(signal.SIGTERM)
            self.scenario_restart(signal.SIGKILL)
        self.summary()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--datastore", choices=["etcd", "kubernetes"], default="etcd")
    r.add_argument("--typha-server", default=DEFAULT_TYPHA_SERVER,
                   help="our typha-server binary (env TYPHA_SERVER_BIN)")
    r.add_argument("--history-age", type=int, default=20, help="TYPHA_HISTORYMAXAGESECS for ours")
    r.add_argument("--quiet", type=int, default=50, help="scenario c's quiet spell (s)")
    r.add_argument("--scenarios", default="abcd")
    r.add_argument("--settle-timeout", type=int, default=180)
    r.add_argument("--churn-gap", type=float, default=1.0)
    r.add_argument("--term-wait", type=float, default=60.0, help="how long SIGTERM may take before SIGKILL")
    r.add_argument("--max-print", type=int, default=400)
    r.add_argument("--no-status-reporter", action="store_true")
    r.add_argument("--keep", action="store_true", help="leave everything running after the run")
    sub.add_parser("cleanup")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    if args.cmd == "cleanup":
        cleanup()
        return
    cleanup()
    run = Run(args)
    try:
        run.run()
    except Exception as e:  # noqa: BLE001
        log(f"!! harness failed: {e!r}")
        import traceback
        traceback.print_exc()
        try:
            run.summary()
        except Exception:  # noqa: BLE001
            pass
        if not args.keep:
            cleanup()
        sys.exit(1)
    if args.keep:
        log("--keep: left running; `harness.py cleanup` stops it")
    else:
        cleanup()


if __name__ == "__main__":
    main()
