//! The chart in `deploy/helm/typha`, checked two ways.
//!
//! Without a cluster: for every value set under `ci/`, the rendered objects agree with each
//! other and with the programs (grace period = drain time, probe and metrics ports = their
//! settings, selectors match, TLS files come from a mounted Secret directory, every `TYPHA_*`
//! the Deployment sets is accepted by `typha-server check-config`, the ClusterRole is exactly
//! the README's table, the image's user is the pod's).
//!
//! On a real kube-apiserver (`common::kube`, built by `peers/build`) with cert-manager's and
//! prometheus-operator's CRDs: `helm install` creates every object, the API server validating
//! each (the Certificates, Issuers, ServiceMonitor and PrometheusRule too, against those
//! projects' own CRDs). No kubelet or controller-manager runs here, so no Pod is ever created
//! and the Deployment stays at 0 ready replicas: instead typha-server runs as a process outside
//! the cluster with the chart's own environment, authenticated with a token minted for the
//! chart's ServiceAccount, and syncs with exactly the chart's RBAC; the agent's ServiceAccount
//! can list the Service's EndpointSlices and nothing more.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::helm::{
    chart, documents, env_of, free_port, helm, helm_admin, readiness, root, selects,
};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use typha_client::discovery::Discovery;
use typha_server::governor::share::{SYNCER_TYPES, typha_limit};
use typha_test_support::control_plane::peers_dir;

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");

/// `helm template` of the chart with these arguments.
fn render(helm: &Path, args: &[&str]) -> Vec<Value> {
    let out = Command::new(helm)
        .args(["template", "typha"])
        .arg(chart())
        .args(["--namespace", "kube-system"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).unwrap())
}

fn value_sets() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    v.sort();
    assert!(v.len() >= 4, "{v:?}");
    v
}

fn find<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let v = find(objs, kind);
    assert_eq!(v.len(), 1, "one {kind}");
    v[0]
}

fn named<'a>(objs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// The numeric user of the image's `server` stage (`USER 10001` or `USER 10001:10001`).
fn dockerfile_server_user() -> u64 {
    let text = std::fs::read_to_string(root().join("deploy/image/Dockerfile")).unwrap();
    let mut in_server = false;
    let mut user = None;
    for line in text.lines().map(str::trim) {
        let upper = line.to_ascii_uppercase();
        if upper.starts_with("FROM ") {
            in_server = upper.ends_with(" AS SERVER");
        } else if in_server && upper.starts_with("USER ") {
            let u = line[5..].trim().split(':').next().unwrap();
            user = Some(
                u.parse()
                    .unwrap_or_else(|_| panic!("USER is not numeric: {line}")),
            );
        }
    }
    user.expect("the Dockerfile has a `FROM ... AS server` stage with a USER")
}

#[test]
fn every_value_set_renders_objects_that_agree_with_each_other_and_the_programs() {
    let Some(helm) = helm() else { return };
    let image_user = dockerfile_server_user();
    let secret = tempfile::tempdir().unwrap();
    let ca = typha_server::pki::Ca::new("test-ca").unwrap();
    let leaf = ca.server("typha-server", &[]).unwrap();
    for (name, body) in [
        ("tls.crt", &leaf.cert_pem),
        ("tls.key", &leaf.key_pem),
        ("ca.crt", &ca.cert_pem),
    ] {
        std::fs::write(secret.path().join(name), body).unwrap();
    }
    for values in value_sets() {
        let set = values.file_name().unwrap().to_string_lossy().into_owned();
        let objs = render(&helm, &["-f", values.to_str().unwrap()]);
        let dep = one(&objs, "Deployment");
        let pod = &dep["spec"]["template"];
        let labels = &pod["metadata"]["labels"];
        let spec = &pod["spec"];
        let c = &spec["containers"][0];
        let env = env_of(c);
        let num = |k: &str| -> u64 { env[k].parse().unwrap_or_else(|_| panic!("{set}: {k}")) };

        // The drain fits in the grace period, and the rollout waits for it.
        let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert_eq!(grace, num("TYPHA_SHUTDOWNTIMEOUTSECS"), "{set}");
        let deadline = dep["spec"]["progressDeadlineSeconds"].as_u64().unwrap();
        assert!(
            deadline * 10 >= grace * 12,
            "{set}: {deadline} < 1.2 × {grace}"
        );

        // Probes where the server serves health; ports where it listens.
        for probe in ["livenessProbe", "readinessProbe"] {
            let get = &c[probe]["httpGet"];
            assert_eq!(
                get["port"].as_u64().unwrap(),
                num("TYPHA_HEALTHPORT"),
                "{set}"
            );
            assert_eq!(get["host"], "127.0.0.1", "{set}");
        }
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/liveness");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readiness");
        let port = |name: &str| -> u64 {
            c["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{set}: port {name}"))["containerPort"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(port("calico-typha"), num("TYPHA_SERVERPORT"), "{set}");
        assert_eq!(
            port("http-metrics"),
            num("TYPHA_PROMETHEUSMETRICSPORT"),
            "{set}"
        );

        // Selectors select.
        assert!(
            selects(&dep["spec"]["selector"]["matchLabels"], labels),
            "{set}"
        );
        // The Service agents and calico-node find the servers through: this release's, or, with
        // `service.create=false`, Calico's own, which the pods join by its selector's label
        // (Calico's Typha Service selects `k8s-app: calico-typha`) and a port named
        // calico-typha (the port name Calico's clients look for in its EndpointSlices).
        let service = &env["TYPHA_K8SSERVICENAME"];
        match named(&objs, "Service", service) {
            Some(svc) => {
                assert!(selects(&svc["spec"]["selector"], labels), "{set}");
                let sp = &svc["spec"]["ports"][0];
                assert_eq!(
                    sp["name"].as_str().unwrap(),
                    env["TYPHA_K8SPORTNAME"],
                    "{set}"
                );
                assert_eq!(sp["targetPort"], "calico-typha", "{set}");
            }
            None => {
                assert!(
                    selects(&json!({"k8s-app": service}), labels),
                    "{set}: the pods join Calico's Service {service} by k8s-app"
                );
                assert_eq!(env["TYPHA_K8SPORTNAME"], "calico-typha", "{set}");
            }
        }
        for s in find(&objs, "Service") {
            assert!(
                selects(&s["spec"]["selector"], labels),
                "{set}: {}",
                s["metadata"]["name"]
            );
        }
        // No object of Calico's own Typha names: the Tigera operator's ServiceAccount,
        // ClusterRole(Binding), Deployment and PodDisruptionBudget are all calico-typha.
        for o in &objs {
            let kind = o["kind"].as_str().unwrap();
            if kind != "Service" {
                assert_ne!(
                    o["metadata"]["name"], "calico-typha",
                    "{set}: a {kind} named as Calico's"
                );
            }
        }
        match find(&objs, "PodDisruptionBudget").first() {
            Some(pdb) => {
                assert!(
                    selects(&pdb["spec"]["selector"]["matchLabels"], labels),
                    "{set}"
                );
                assert_eq!(pdb["spec"]["maxUnavailable"], 1);
            }
            // Calico's budget (selector k8s-app: calico-typha) covers the pods.
            None => assert!(
                selects(&json!({"k8s-app": "calico-typha"}), labels),
                "{set}: no budget of its own, and Calico's does not select the pods"
            ),
        }

        // Non-root as the image is, and the rest of the hardening.
        let psc = &spec["securityContext"];
        assert_eq!(
            psc["runAsUser"].as_u64().unwrap(),
            image_user,
            "{set}: the Dockerfile's USER"
        );
        assert_eq!(psc["runAsNonRoot"], true);
        assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(spec["hostNetwork"], true);
        assert_eq!(spec["priorityClassName"], "system-cluster-critical");
        let tolerations = spec["tolerations"].as_array().unwrap();
        assert!(
            tolerations.iter().all(|t| t.get("key").is_some()),
            "{set}: no toleration of every taint (a cordon must move the server)"
        );

        // TLS files are in a Secret (or the operator's Secret and CA bundle, projected) mounted
        // as a directory (rotation reaches them); plaintext sets none of them.
        let mounts = c["volumeMounts"].as_array().cloned().unwrap_or_default();
        let tls_vars = [
            "TYPHA_SERVERCERTFILE",
            "TYPHA_SERVERKEYFILE",
            "TYPHA_CAFILE",
        ];
        if set.contains("replace-calico-manifest") {
            for k in tls_vars.iter().chain(&["TYPHA_CLIENTCN"]) {
                assert!(!env.contains_key(*k), "{set}: plaintext, yet {k}");
            }
        }
        for k in tls_vars.into_iter().filter(|k| env.contains_key(*k)) {
            let m = mounts
                .iter()
                .find(|m| env[k].starts_with(m["mountPath"].as_str().unwrap()))
                .unwrap_or_else(|| panic!("{set}: {k} is on no mount"));
            assert!(
                m.get("subPath").is_none(),
                "{set}: subPath never sees a rotation"
            );
            let vol = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap();
            if let Some(projected) = vol.get("projected") {
                // The operator's: typha-certs and the CA bundle ConfigMap.
                let sources = projected["sources"].to_string();
                assert!(
                    sources.contains("typha-certs") && sources.contains("tigera-ca-bundle"),
                    "{set}: {sources}"
                );
                assert_eq!(env["TYPHA_CLIENTCN"], "typha-client", "{set}");
                continue;
            }
            let secret = vol["secret"]["secretName"].as_str().unwrap();
            // With cert-manager, a Certificate writes that Secret, with the CN clients check.
            if let Some(cert) = find(&objs, "Certificate")
                .into_iter()
                .find(|c| c["spec"]["secretName"] == secret)
            {
                assert_eq!(cert["spec"]["commonName"], "typha-server", "{set}");
            }
        }

        // Exactly the README's rules for the Kubernetes datastore; no cluster-wide reads else.
        let roles = find(&objs, "ClusterRole");
        if env["TYPHA_DATASTORETYPE"] == "kubernetes" {
            let mut chart_rules: Vec<(String, Vec<String>)> = roles[0]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    assert_eq!(r["verbs"], json!(["get", "list", "watch"]), "{set}");
                    let mut res: Vec<String> =
                        serde_json::from_value(r["resources"].clone()).unwrap();
                    res.sort();
                    (r["apiGroups"][0].as_str().unwrap().to_owned(), res)
                })
                .collect();
            let mut readme: Vec<(String, Vec<String>)> = common::kube::readme_rules()
                .into_iter()
                .map(|(g, mut r)| {
                    r.sort();
                    (g, r)
                })
                .collect();
            chart_rules.sort();
            readme.sort();
            assert_eq!(
                chart_rules, readme,
                "{set}: the chart's ClusterRole is the README's table"
            );
        } else {
            assert!(roles.is_empty(), "{set}: {roles:?}");
        }
        for role in find(&objs, "Role") {
            assert_eq!(
                role["rules"],
                json!([{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}]),
                "{set}: a namespaced Role lists EndpointSlices and nothing else"
            );
        }

        // The agent looks for this Service and checks the server's CN; the server checks the
        // agent's.
        if let Some(ds) = find(&objs, "DaemonSet").first() {
            let pod = &ds["spec"]["template"];
            assert!(selects(
                &ds["spec"]["selector"]["matchLabels"],
                &pod["metadata"]["labels"]
            ));
            let aenv = env_of(&pod["spec"]["containers"][0]);
            assert_eq!(
                aenv["FELIX_TYPHAK8SSERVICENAME"],
                env["TYPHA_K8SSERVICENAME"]
            );
            if let Some(cert) = find(&objs, "Certificate")
                .into_iter()
                .find(|c| c["spec"]["usages"].to_string().contains("client auth"))
            {
                assert_eq!(
                    cert["spec"]["commonName"].as_str().unwrap(),
                    env["TYPHA_CLIENTCN"]
                );
                assert_eq!(aenv["FELIX_TYPHACN"], "typha-server");
            }
        }

        // Every TYPHA_* the Deployment sets is a setting of ours, with a value we accept. The
        // server reads its key at start-up: the mounted Secrets' files are stood in for by a
        // folder holding tls.crt, tls.key and ca.crt.
        let mut cmd = Command::new(BIN);
        cmd.arg("check-config").env_clear();
        for (k, v) in &env {
            let v = match v.as_str() {
                "<metadata.namespace>" => "kube-system".to_owned(),
                v => [
                    "/etc/typha/tls/",
                    "/etc/typha/etcd/",
                    "/etc/typha/upstream/",
                ]
                .iter()
                .find_map(|m| v.strip_prefix(m))
                .map_or_else(
                    || v.to_owned(),
                    |f| secret.path().join(f).display().to_string(),
                ),
            };
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{set}: typha-server check-config refuses the chart's environment: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_replica_count_carries_every_calico_node_with_one_replica_down() {
    let Some(helm) = helm() else { return };
    let replicas = |args: &[&str]| -> usize {
        let objs = render(&helm, args);
        let r = one(&objs, "Deployment")["spec"]["replicas"]
            .as_u64()
            .unwrap();
        usize::try_from(r).unwrap()
    };
    // The server's defaults: TYPHA_MAXCONNECTIONSLOWERLIMIT, TYPHA_MAXCONNECTIONSUPPERLIMIT.
    let (lower, upper) = (400, 10_000);
    // Small clusters as Calico's (one replica per node at most), at least three above four
    // nodes, then one per 2,000 nodes (server.nodesPerReplica) and one more.
    for (nodes, want) in [
        (1_usize, 1_usize),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 3),
        (200, 3),
        (4_000, 3),
        (4_001, 4),
        (5_000, 4),
        (10_000, 6),
        (20_000, 11),
    ] {
        let r = replicas(&["--set", &format!("cluster.nodes={nodes}")]);
        assert_eq!(r, want, "{nodes} nodes");
        if nodes <= 4 {
            continue;
        }
        // One replica down, the others hold every calico-node's four connections, each
        // replica at most 2,000 nodes (the size measured with headroom) and within the limit
        // the server computes, whether the Service still lists the failed replica or not.
        let survivors = r - 1;
        let each = nodes.div_ceil(survivors);
        assert!(
            each <= 2_000,
            "{nodes} nodes on {survivors} replicas: {each} each"
        );
        for listed in [r, survivors] {
            let limit = typha_limit(lower, upper, listed, nodes, SYNCER_TYPES);
            assert!(
                each * SYNCER_TYPES <= limit,
                "{nodes} nodes, {listed} replicas listed: {each} nodes × 4 each over the limit \
                 {limit}"
            );
        }
        // And with room for the balancing tolerance (the mean plus 10 %, plus one) under the
        // ceiling.
        assert!(each * SYNCER_TYPES * 11 / 10 < upper, "{nodes} nodes");
    }
    // A replica sized for fewer nodes: more replicas; an explicit count wins.
    assert_eq!(
        replicas(&[
            "--set",
            "cluster.nodes=5000",
            "--set",
            "server.nodesPerReplica=1000"
        ]),
        6
    );
    assert_eq!(
        replicas(&["--set", "cluster.nodes=5000", "--set", "server.replicas=27"]),
        27
    );
}

/// Not a test: started (as this test binary) with `TYPHA_TEST_RUN_DISCOVERY` = service and
/// namespace, and `$KUBECONFIG` the agent's, it discovers the servers as the agent does and
/// prints `OK <addr> ...` or `ERR <error>`.
#[test]
fn discovery_process() {
    let Some(args) = std::env::var_os("TYPHA_TEST_RUN_DISCOVERY") else {
        return;
    };
    let args = args.into_string().unwrap();
    let (service, namespace) = args.split_once(' ').unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    match rt.block_on(Discovery::kubernetes(service, namespace).discover("node-a")) {
        Ok(t) => {
            let a: Vec<String> = t.iter().map(|t| t.addr.to_string()).collect();
            println!("OK {}", a.join(" "));
        }
        Err(e) => println!("ERR {e}"),
    }
    std::process::exit(0);
}

/// Creates every CRD in `<peers>/<dir>` (cert-manager's or prometheus-operator's) and waits
/// until `kinds` are served.
async fn crds(admin: &kube::Client, dir: &str, kinds: &[(&str, &str, &str)]) {
    let dir = peers_dir().join(dir);
    assert!(dir.is_dir(), "{}: run peers/build", dir.display());
    let crd = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let api: Api<DynamicObject> = Api::all_with(admin.clone(), &crd);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        for doc in documents(&std::fs::read_to_string(&f).unwrap()) {
            if doc["kind"] != "CustomResourceDefinition" {
                continue;
            }
            let obj: DynamicObject = serde_json::from_value(doc).unwrap();
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => panic!("{}: {e}", f.display()),
            }
        }
    }
    for (group, kind, plural) in kinds {
        let res =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &res);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while let Err(e) = api.list(&ListParams::default().limit(1)).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{kind} not served: {e}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test]
async fn helm_installs_on_a_real_api_server_and_the_server_syncs_with_exactly_the_charts_rbac() {
    let Some(helm) = helm() else { return };
    let Some(cp) = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    crds(
        &admin,
        "cert-manager-crds",
        &[
            ("cert-manager.io", "Certificate", "certificates"),
            ("cert-manager.io", "Issuer", "issuers"),
        ],
    )
    .await;
    crds(
        &admin,
        "prometheus-operator-crds",
        &[
            ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
            ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
        ],
    )
    .await;

    // Every kind the chart can make: cert-manager's objects, the monitoring objects, the agent.
    let values = chart().join("ci/large-cluster-values.yaml");
    helm_admin(
        &helm,
        &cp,
        &[
            "install",
            "typha",
            chart().to_str().unwrap(),
            "--namespace",
            "kube-system",
            "-f",
            values.to_str().unwrap(),
        ],
    );
    let manifest = helm_admin(
        &helm,
        &cp,
        &["get", "manifest", "typha", "--namespace", "kube-system"],
    );
    let objs = documents(&manifest);
    assert!(objs.len() >= 18, "{}", objs.len());
    let discovery = kube::Discovery::new(admin.clone()).run().await.unwrap();
    for o in &objs {
        let (group, version) = o["apiVersion"]
            .as_str()
            .unwrap()
            .split_once('/')
            .unwrap_or(("", o["apiVersion"].as_str().unwrap()));
        let kind = o["kind"].as_str().unwrap();
        let name = o["metadata"]["name"].as_str().unwrap();
        let (res, caps) = discovery
            .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
            .unwrap_or_else(|| panic!("the API server serves no {kind}"));
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(admin.clone(), "kube-system", &res)
            }
            kube::discovery::Scope::Cluster => Api::all_with(admin.clone(), &res),
        };
        api.get(name)
            .await
            .unwrap_or_else(|e| panic!("{kind} {name} was not created: {e}"));
    }

    // Something to sync: a namespace and a service account in it (two profiles).
    common::kube::namespace(&admin, "shop").await;
    common::kube::apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "web", "namespace": "shop"}}),
    )
    .await;

    // The server, outside the cluster, with the chart's environment and the chart's identity.
    let dep = one(&objs, "Deployment");
    let env = env_of(&dep["spec"]["template"]["spec"]["containers"][0]);
    let token = cp
        .service_account_token("kube-system", "typha-server")
        .await
        .unwrap();
    let kubeconfig = cp.write_kubeconfig("chart-typha", &token).unwrap();
    let certs = tempfile::tempdir().unwrap();
    let st = Command::new(BIN)
        .args(["gen-certs", "--out"])
        .arg(certs.path())
        .args(["--server-name", "localhost"])
        .status()
        .unwrap();
    assert!(st.success());
    let (port, health) = (free_port(), free_port());
    let mut cmd = Command::new(BIN);
    cmd.env_clear();
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let file = |n: &str| certs.path().join(n);
    cmd.env("TYPHA_K8SNAMESPACE", "kube-system")
        .env("KUBECONFIG", &kubeconfig)
        // Loopback ports of our own instead of the host network's.
        .env("TYPHA_SERVERHOST", "127.0.0.1")
        .env("TYPHA_SERVERPORT", port.to_string())
        .env("TYPHA_HEALTHHOST", "127.0.0.1")
        .env("TYPHA_HEALTHPORT", health.to_string())
        .env("TYPHA_PROMETHEUSMETRICSENABLED", "false")
        .env("TYPHA_SHUTDOWNTIMEOUTSECS", "1")
        // The files the Secret volume would hold.
        .env("TYPHA_SERVERCERTFILE", file("server.crt"))
        .env("TYPHA_SERVERKEYFILE", file("server.key"))
        .env("TYPHA_CAFILE", file("ca.crt"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let log = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let mut g = log.lock().unwrap();
                g.push_str(&l);
                g.push('\n');
            }
        });
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if readiness(health).await.is_some_and(|l| l.contains(" 200 ")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready with the chart's RBAC: {}",
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let ca = std::fs::read_to_string(file("ca.crt")).unwrap();
    let client = typha_server::pki::Issued {
        cert_pem: std::fs::read_to_string(file("client.crt")).unwrap(),
        key_pem: std::fs::read_to_string(file("client.key")).unwrap(),
    };
    let mut p = common::Peer::connect_tls(
        SocketAddr::from(([127, 0, 0, 1], port)),
        common::tls_client(&ca, Some(&client)),
    )
    .await
    .unwrap();
    p.hello(common::Peer::offer("node-a", None)).await.unwrap();
    p.until("the namespace's and the service account's profiles", |p| {
        let keys: Vec<String> = p.state.keys().map(ToString::to_string).collect();
        keys.iter().any(|k| k.contains("kns.shop"))
            && keys.iter().any(|k| k.contains("ksa.shop.web"))
    })
    .await;
    // Balancing listed the Service's EndpointSlices with the chart's Role: nothing forbidden.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let said = log.lock().unwrap().clone();
    // A status 403 stands alone; a timestamp's fraction (`09.403204Z`) may hold the digits too.
    let status_403 = said.match_indices("403").any(|(i, _)| {
        let before = said[..i].chars().next_back();
        let after = said[i + 3..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit() || c == '.')
            && !after.is_some_and(|c| c.is_ascii_digit())
    });
    assert!(
        !status_403 && !said.to_lowercase().contains("forbidden"),
        "{said}"
    );
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();

    // The agent's identity discovers the servers through the EndpointSlices, and nothing more.
    // (No EndpointSlice controller runs: the slice is written as it would write it. Loopback
    // addresses are refused by the API server, so a documentation address stands in.)
    common::kube::apply(
        &admin,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "calico-typha-abcde", "namespace": "kube-system",
                            "labels": {"kubernetes.io/service-name": "calico-typha"}},
               "addressType": "IPv4",
               "ports": [{"name": "calico-typha", "port": 5473, "protocol": "TCP"}],
               "endpoints": [{"addresses": ["192.0.2.10"], "conditions": {"ready": true}, "nodeName": "node-b"}]}),
    )
    .await;
    let agent_token = cp
        .service_account_token("kube-system", "typha-agent")
        .await
        .unwrap();
    let agent_kubeconfig = cp.write_kubeconfig("chart-agent", &agent_token).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "discovery_process", "--nocapture", "--quiet"])
        .env("TYPHA_TEST_RUN_DISCOVERY", "calico-typha kube-system")
        .env("KUBECONFIG", &agent_kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("OK 192.0.2.10:5473"), "{stdout}");
    let agent = cp.client_with_token(&agent_token).unwrap();
    let forbidden = |r: Result<kube::core::ObjectList<DynamicObject>, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    let pods = common::kube::resource("v1", "Pod", "pods");
    assert!(forbidden(
        Api::<DynamicObject>::all_with(agent.clone(), &pods)
            .list(&ListParams::default())
            .await
    ));
    let slices = common::kube::resource("discovery.k8s.io/v1", "EndpointSlice", "endpointslices");
    assert!(forbidden(
        Api::<DynamicObject>::namespaced_with(agent.clone(), "default", &slices)
            .list(&ListParams::default())
            .await
    ));
    let secrets = common::kube::resource("v1", "Secret", "secrets");
    assert!(forbidden(
        Api::<DynamicObject>::namespaced_with(agent, "kube-system", &secrets)
            .list(&ListParams::default())
            .await
    ));
}
