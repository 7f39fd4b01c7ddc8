//! The real `typha-server` binary, as an operator runs it: the default (embedded) datastore
//! serving the shipped sample cluster, health, status and metrics over HTTP, the embedded
//! datastore's write API, SIGTERM, bad settings.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Peer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_protocol::message::GoodbyeReason;
use typha_server::datastore::embedded::{DirSource, Embedded};

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");

fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
}

/// GET `path`; (status, body).
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "GET", path, "").await
}

/// One HTTP/1.1 request; (status, body).
async fn request(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let status = buf.split(' ').nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// Waits (up to 20 s) until `/readiness` on `health` answers 200; its body.
async fn until_ready(health: u16) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((200, body)) = get(health, "/readiness").await {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends SIGTERM and checks that the process exits 0.
async fn sigterm_exits_cleanly(mut child: std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn serves_the_sample_cluster_reports_health_and_exits_cleanly_on_sigterm() {
    let (port, health, metrics) = (free_port(), free_port(), free_port());
    let mut child = Command::new(BIN)
        .args([
            "--server-host",
            "127.0.0.1",
            "--server-port",
            &port.to_string(),
        ])
        .args([
            "--health-host",
            "127.0.0.1",
            "--health-port",
            &health.to_string(),
        ])
        .args([
            "--prometheus-metrics-host",
            "127.0.0.1",
            "--prometheus-metrics-port",
            &metrics.to_string(),
        ])
        .args(["--shutdown-timeout-secs", "2"])
        // The repository root, where the README runs it: the default manifests folder is there.
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let body = until_ready(health).await;
    assert!(body.contains("in sync"), "{body}");
    assert_eq!(get(health, "/liveness").await.unwrap().0, 200);

    // A client gets exactly the shipped sample cluster.
    let store = Embedded::new();
    DirSource::new(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cluster"),
        store.clone(),
    )
    .scan();
    let (want, n) = common::expected_digest(&store);
    let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
    p.hello(Peer::offer("worker-1", None)).await.unwrap();
    p.until("the sample cluster", |p| {
        p.state.len() == n && p.status == Some(typha_protocol::model::SyncStatus::InSync)
    })
    .await;
    assert_eq!(p.digest.combined(), want);

    let (status, text) = get(metrics, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    for name in [
        "typha_connections_accepted",
        "typha_connections_active",
        "typha_connections_dropped",
        "typha_breadcrumb_seq_number",
        "typha_updates_total",
        "typha_updates_skipped",
        "typha_cache_size",
        "typha_snapshots_generated",
        "typha_snapshots_reused",
        "typha_snapshot_raw_bytes",
        "typha_snapshot_compressed_bytes",
        "typha_client_snapshot_send_secs",
        "typha_client_latency_secs",
        "typha_ping_latency",
        "typha_kvs_per_msg",
        "typha_frames_encoded_total",
        "typha_resumes_total",
        "typha_bytes_sent_total",
        "typha_client_ack_lag_secs",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "metric {name} missing"
        );
    }
    assert!(
        text.contains("typha_cache_size{syncer=\"felix\"} "),
        "{text}"
    );

    // SIGTERM: the client is told, the process exits 0.
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(
        p.until_closed().await.map(|g| g.reason),
        Some(GoodbyeReason::Shutdown)
    );
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

fn run_expecting_config_error(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{args:?} {env:?}: {out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn bad_settings_exit_64_with_one_line_naming_the_setting() {
    let e = run_expecting_config_error(&["--server-cert-file", "/etc/hostname"], &[]);
    assert!(e.contains("TYPHA_SERVERKEYFILE"), "{e}");
    let e = run_expecting_config_error(&[], &[("TYPHA_SERVERPORT", "not-a-port")]);
    assert!(e.contains("TYPHA_SERVERPORT"), "{e}");
    let e = run_expecting_config_error(&[], &[("TYPHA_DATASTORETYPE", "consul")]);
    assert!(e.contains("TYPHA_DATASTORETYPE"), "{e}");
    let e = run_expecting_config_error(&["--embedded-dir", "/nonexistent/dir"], &[]);
    assert!(e.contains("TYPHA_EMBEDDEDDIR"), "{e}");
    let e = run_expecting_config_error(
        &[],
        &[
            ("TYPHA_DATASTORETYPE", "typha"),
            ("TYPHA_UPSTREAMADDR", "127.0.0.1:1"),
            ("TYPHA_UPSTREAMCAFILE", "/etc/hostname"),
            ("TYPHA_UPSTREAMCERTFILE", "/etc/hostname"),
            ("TYPHA_UPSTREAMKEYFILE", "/etc/hostname"),
        ],
    );
    assert!(e.contains("TYPHA_UPSTREAM"), "{e}");
    let e = run_expecting_config_error(
        &[],
        &[
            ("TYPHA_DATASTORETYPE", "kubernetes"),
            ("TYPHA_K8SAPIENDPOINT", "not a url"),
        ],
    );
    assert!(e.contains("TYPHA_K8SAPIENDPOINT"), "{e}");
    let e = run_expecting_config_error(&[], &[("TYPHA_EMBEDDEDAPIADDR", "no port")]);
    assert!(e.contains("TYPHA_EMBEDDEDAPIADDR"), "{e}");
}

/// `typha-server check-config` with exactly `env` (and `args`): exit code, stdout, stderr.
fn check_config(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .arg("check-config")
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn check_config_takes_calicos_own_deployment_and_refuses_what_is_no_setting() {
    // Calico v3.32's calico-typha Deployment (manifests/calico-typha.yaml), and the setting
    // the Tigera operator adds; the datastore is the embedded one here (the Kubernetes one
    // would want a cluster to be checked against).
    let calico = [
        ("TYPHA_LOGSEVERITYSCREEN", "info"),
        ("TYPHA_LOGFILEPATH", "none"),
        ("TYPHA_LOGSEVERITYSYS", "none"),
        ("TYPHA_CONNECTIONREBALANCINGMODE", "kubernetes"),
        ("TYPHA_HEALTHENABLED", "true"),
        ("TYPHA_SHUTDOWNTIMEOUTSECS", "300"),
        ("TYPHA_FIPSMODEENABLED", "false"),
    ];
    let (code, out, err) = check_config(&[], &calico);
    assert_eq!(code, Some(0), "{err}");
    // One line for each Typha setting we do not implement, saying what we do instead.
    for name in [
        "TYPHA_LOGFILEPATH",
        "TYPHA_LOGSEVERITYSYS",
        "TYPHA_FIPSMODEENABLED",
    ] {
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&format!("typha-server: {name}=")))
            .collect();
        assert_eq!(lines.len(), 1, "{name} in\n{out}");
        assert!(lines[0].contains("does not implement: "), "{}", lines[0]);
    }
    assert!(
        out.lines().last().unwrap().contains("configuration ok"),
        "{out}"
    );

    // A level that is none: a server that would log nothing. In any case of the name.
    for name in ["TYPHA_LOGSEVERITYSCREEN", "typha_logseverityscreen"] {
        let (code, _, err) = check_config(&[], &[(name, "verbose")]);
        assert_eq!(code, Some(64), "{name}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("TYPHA_LOGSEVERITYSCREEN"), "{err}");
    }
    // A name that is no setting of ours nor of Typha's: a typo.
    let (code, _, err) = check_config(&[], &[("TYPHA_SERVERPROT", "5473")]);
    assert_eq!(code, Some(64));
    assert!(err.contains("TYPHA_SERVERPROT"), "{err}");
    // What would quietly give less than was asked.
    let (code, _, err) = check_config(&[], &[("TYPHA_FIPSMODEENABLED", "true")]);
    assert_eq!(code, Some(64));
    assert!(err.contains("TYPHA_FIPSMODEENABLED"), "{err}");
}

#[test]
fn check_config_reads_typhas_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typha.cfg");
    std::fs::write(
        &file,
        "[global]\nLogSeverityScreen = Warning\nServerPort = 5474\nLogFilePath = none\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let (code, out, err) = check_config(&["-c", f], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(":5474"), "{out}");
    assert!(out.contains("TYPHA_LOGFILEPATH="), "{out}");
    assert!(out.contains(f), "{out}");
    // The environment wins over the file.
    let (_, out, _) = check_config(&["-c", f], &[("TYPHA_SERVERPORT", "5475")]);
    assert!(out.contains(":5475"), "{out}");
    std::fs::write(&file, "LogSeverityScreen = verbose\n").unwrap();
    let (code, _, err) = check_config(&["--config-file", f], &[]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("TYPHA_LOGSEVERITYSCREEN"), "{err}");
    std::fs::write(&file, "ServerPort = many\n").unwrap();
    let (code, _, err) = check_config(&["-c", f], &[]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("TYPHA_SERVERPORT") && err.contains(f), "{err}");
}

#[tokio::test]
async fn version_and_start_say_what_the_binary_was_built_from() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().to_owned().into())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert_eq!(
        text.lines().next().unwrap(),
        concat!("typha-server ", env!("CARGO_PKG_VERSION"))
    );
    let commit = field("commit:");
    let date = field("build date:");
    // Built from a checkout (git here), the commit is HEAD's, unless the build named one.
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_owned());
    match (option_env!("TYPHA_GIT_COMMIT"), head) {
        (Some(given), _) if !given.is_empty() => assert_eq!(commit, given),
        (_, Some(head)) => assert_eq!(commit, head),
        _ => assert_eq!(commit, "unknown"),
    }
    assert!(
        date == "unknown" || (date.len() == 20 && date.ends_with('Z') && date.contains('T')),
        "{date}"
    );
    let short = Command::new(BIN).arg("-V").output().unwrap();
    let short = String::from_utf8(short.stdout).unwrap();
    assert!(
        short.contains(&commit) && short.lines().count() == 1,
        "{short}"
    );
    // The first line logged at start says it too.
    let lines = log_lines(&[]).await;
    let start = lines
        .iter()
        .find(|l| l.contains("typha-server starting"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(start.contains(&commit) && start.contains(&date), "{start}");
}

#[tokio::test]
async fn the_write_api_changes_what_clients_see_and_status_reports_the_digest() {
    let (port, health, api) = (free_port(), free_port(), free_port());
    let empty = tempfile::tempdir().unwrap();
    let child = Command::new(BIN)
        .env("TYPHA_SERVERHOST", "127.0.0.1")
        .env("TYPHA_SERVERPORT", port.to_string())
        .env("TYPHA_HEALTHHOST", "127.0.0.1")
        .env("TYPHA_HEALTHPORT", health.to_string())
        .env("TYPHA_PROMETHEUSMETRICSENABLED", "false")
        .env("TYPHA_EMBEDDEDDIR", empty.path())
        .env("TYPHA_EMBEDDEDAPIADDR", format!("127.0.0.1:{api}"))
        .env("TYPHA_SHUTDOWNTIMEOUTSECS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_ready(health).await;
    let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
    p.hello(Peer::offer("worker-1", None)).await.unwrap();

    let manifest = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: blocked}\nspec: {nets: [198.51.100.0/24]}\n";
    let (status, body) = request(api, "POST", "/apply", manifest).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"applied\":1"), "{body}");
    p.until("the applied set", |p| p.state.len() == 1).await;
    let (status, body) = get(health, "/status").await.unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kvs"], 1, "{v}");
    assert_eq!(v["status"], "in-sync", "{v}");
    assert_eq!(v["connections"], 1, "{v}");
    assert_eq!(
        v["digest"].as_str().unwrap(),
        format!("{:016x}", p.digest.combined()),
        "{v}"
    );

    // An invalid resource is refused by name and changes nothing.
    let bad = manifest
        .replace("blocked", "second")
        .replace("198.51.100.0/24", "nope");
    let (status, body) = request(api, "POST", "/apply", &bad).await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("GlobalNetworkSet second"), "{body}");
    let (status, body) = request(api, "POST", "/delete", manifest).await.unwrap();
    assert_eq!(status, 200, "{body}");
    p.until("the deletion", |p| p.state.is_empty()).await;

    sigterm_exits_cleanly(child).await;
}

#[tokio::test]
async fn a_second_tier_binary_serves_what_the_first_serves() {
    let (a_port, a_health, b_port, b_health) = (free_port(), free_port(), free_port(), free_port());
    let spawn = |args: Vec<String>| {
        Command::new(BIN)
            .args(args)
            .args(["--prometheus-metrics-enabled", "false"])
            .args(["--shutdown-timeout-secs", "1"])
            // The repository root, where the README runs it: the default manifests folder is there.
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let a = spawn(
        [
            "--server-host",
            "127.0.0.1",
            "--server-port",
            &a_port.to_string(),
            "--health-port",
            &a_health.to_string(),
        ]
        .map(String::from)
        .to_vec(),
    );
    let b = spawn(
        [
            "--datastore",
            "typha",
            "--upstream",
            &format!("127.0.0.1:{a_port}"),
            "--server-host",
            "127.0.0.1",
            "--server-port",
            &b_port.to_string(),
            "--health-port",
            &b_health.to_string(),
        ]
        .map(String::from)
        .to_vec(),
    );
    until_ready(b_health).await;
    let store = Embedded::new();
    DirSource::new(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cluster"),
        store.clone(),
    )
    .scan();
    let (want, n) = common::expected_digest(&store);
    let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], b_port))).await;
    p.hello(Peer::offer("worker-1", None)).await.unwrap();
    p.until("the sample cluster through tier B", |p| {
        p.state.len() == n && p.status == Some(typha_protocol::model::SyncStatus::InSync)
    })
    .await;
    assert_eq!(p.digest.combined(), want);
    let (_, status) = get(b_health, "/status").await.unwrap();
    assert!(status.contains(&format!("{want:016x}")), "{status}");
    for c in [b, a] {
        sigterm_exits_cleanly(c).await;
    }
}

/// The binary over a real kube-apiserver, as ServiceAccount `kube-system/calico-typha` granted
/// `rules`, its credentials in a kubeconfig (as an operator outside the cluster, or the
/// in-cluster files inside it, would give them), with `env` set too; stdout piped. Returns the
/// process, its ports and a reader of its log lines.
async fn kubernetes_binary(
    cp: &typha_test_support::control_plane::ControlPlane,
    rules: &[(String, Vec<String>)],
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    u16,
    u16,
    std::sync::mpsc::Receiver<String>,
) {
    cp.grant(
        common::kube::TYPHA_NAMESPACE,
        common::kube::TYPHA_ACCOUNT,
        common::kube::TYPHA_ACCOUNT,
        rules,
    )
    .await
    .unwrap();
    let token = cp
        .service_account_token(common::kube::TYPHA_NAMESPACE, common::kube::TYPHA_ACCOUNT)
        .await
        .unwrap();
    let kubeconfig = cp.write_kubeconfig("typha", &token).unwrap();
    let (port, health) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .env("TYPHA_DATASTORETYPE", "kubernetes")
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("TYPHA_K8SAPIENDPOINT")
        .env("TYPHA_SERVERHOST", "127.0.0.1")
        .env("TYPHA_SERVERPORT", port.to_string())
        .env("TYPHA_HEALTHHOST", "127.0.0.1")
        .env("TYPHA_HEALTHPORT", health.to_string())
        .env("TYPHA_PROMETHEUSMETRICSENABLED", "false")
        .env("TYPHA_SHUTDOWNTIMEOUTSECS", "1")
        .env("TYPHA_STALETHRESHOLDSECS", "3")
        .env_remove("CALICO_API_GROUP")
        .env_remove("FELIX_INTERFACEPREFIX")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
    }
    (child, port, health, rx)
}

#[tokio::test]
async fn the_binary_syncs_a_real_api_server_as_a_service_account_with_the_readmes_rules() {
    let Some(cp) = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    common::kube::apply(
        &admin,
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": "prod", "labels": {"team": "web"}}}),
    )
    .await;
    let (child, port, health, _log) =
        kubernetes_binary(&cp, &common::kube::readme_rules(), &[]).await;
    until_ready(health).await;
    let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
    p.hello(Peer::offer("worker-1", None)).await.unwrap();
    p.until("the namespace's profile", |p| {
        p.state.keys().any(|k| k.to_string().contains("kns.prod"))
    })
    .await;
    sigterm_exits_cleanly(child).await;
}

#[tokio::test]
async fn without_one_rule_the_binary_says_in_one_line_which_resource_it_may_not_list() {
    let Some(cp) = common::kube::default().await else {
        return;
    };
    // Every rule the README lists, less pods.
    let rules: Vec<(String, Vec<String>)> = common::kube::readme_rules()
        .into_iter()
        .map(|(g, rs)| (g, rs.into_iter().filter(|r| r != "pods").collect()))
        .collect();
    let (mut child, _, health, log) = kubernetes_binary(&cp, &rules, &[]).await;
    // Long enough for several retries and the staleness threshold (3 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the server keeps running (and retrying) instead of exiting"
    );
    let lines: Vec<String> = log.try_iter().collect();
    let said: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("may not list pods"))
        .collect();
    assert!(
        !said.is_empty(),
        "one line names the resource it may not list: {lines:#?}"
    );
    let line = said[0];
    assert!(line.contains("403"), "{line}");
    assert!(
        line.contains("system:serviceaccount:kube-system:calico-typha"),
        "{line}"
    );
    // Said once when it starts failing (and once more when the view turns stale), not on every
    // retry.
    assert!(said.len() <= 2, "{said:#?}");
    let (code, body) = get(health, "/readiness").await.unwrap();
    assert_eq!(code, 503, "not ready without a listing: {body}");
    sigterm_exits_cleanly(child).await;
}

/// Issue 39, on the binary: a cluster without any of Calico's CRDs. The server does not claim
/// to be in sync with an empty policy state: `/readiness` fails and says why, `/status` has
/// the reason, and one warning says what to do. Once Calico 3.32's `projectcalico.org/v3` CRDs
/// are installed (minimal ones of ours, or Calico's own from `TYPHA_TEST_CALICO_V3_CRDS`:
/// `common::kube::v3_crds`), it discovers them with no restart and serves from them; a pod's
/// interface is named with `FELIX_INTERFACEPREFIX=eni,cali`'s first prefix.
#[tokio::test]
async fn without_calicos_crds_the_binary_is_not_ready_until_the_v3_crds_arrive() {
    let Some(cp) = common::kube::start(typha_test_support::control_plane::Options {
        calico_crds: false,
        ..Default::default()
    })
    .await
    else {
        return;
    };
    let admin = cp.admin().unwrap();
    let (mut child, port, health, log) = kubernetes_binary(
        &cp,
        &common::kube::readme_rules(),
        &[("FELIX_INTERFACEPREFIX", "eni,cali")],
    )
    .await;
    // Several retries, and past the staleness threshold (3 s).
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(child.try_wait().unwrap().is_none(), "it keeps running");
    let (code, body) = get(health, "/readiness").await.unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("none of Calico's kinds"), "{body}");
    assert!(body.contains("wait-for-datastore"), "{body}");
    let (_, status) = get(health, "/status").await.unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["status"], "wait-for-datastore", "{status}");
    let error = status["datastore"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("Install Calico's CRDs") && error.contains("CALICO_API_GROUP"),
        "{status}"
    );
    let lines: Vec<String> = log.try_iter().collect();
    let warned: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("none of Calico's kinds"))
        .collect();
    assert!(!warned.is_empty(), "a warning says what to do: {lines:#?}");
    // Once, not on every retry.
    assert_eq!(warned.len(), 1, "{warned:#?}");

    common::kube::v3_crds(&admin).await;
    common::kube::apply(
        &admin,
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}),
    )
    .await;
    let pool = typha_server::calico::v3::Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": "pods"},
        "spec": {"cidr": "10.0.0.0/16", "vxlanMode": "Always"}}))
    .unwrap();
    common::kube::put_v3(&admin, &pool).await;
    // No controller-manager makes the namespace's `default` account: the pod names its own.
    common::kube::apply(
        &admin,
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "api", "namespace": "web"}}),
    )
    .await;
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "api-1", "namespace": "web"},
        "spec": {"nodeName": "node-1", "serviceAccountName": "api",
                 "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}});
    common::kube::apply(&admin, pod.clone()).await;
    common::kube::set_status(
        &admin,
        &pod,
        serde_json::json!({"phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}]}),
    )
    .await;
    until_ready(health).await;
    let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
    p.hello(Peer::offer("worker-1", None)).await.unwrap();
    p.until("the v3 CRDs' pool and the pod's endpoint", |p| {
        p.state.contains_key("/calico/v1/ipam/v4/pool/10.0.0.0-16")
            && p.state
                .keys()
                .any(|k| k.to_string().contains("/workload/k8s/"))
    })
    .await;
    let interface = p.state.values().find_map(|v| match v.decode().unwrap() {
        typha_protocol::model::Value::WorkloadEndpoint(w) => Some(w.name),
        _ => None,
    });
    // From Python: "eni" + hashlib.sha1(b"web.api-1").hexdigest()[:11]
    assert_eq!(interface.as_deref(), Some("eni81deba30cdc"));
    let lines: Vec<String> = log.try_iter().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("reading Calico's kinds from projectcalico.org/v3")),
        "{lines:#?}"
    );
    sigterm_exits_cleanly(child).await;
}

/// Every log line the server writes to a pipe from start to SIGTERM, with `env` set.
async fn log_lines(env: &[(&str, &str)]) -> Vec<String> {
    let (port, health) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .args([
            "--server-host",
            "127.0.0.1",
            "--server-port",
            &port.to_string(),
        ])
        .args([
            "--health-host",
            "127.0.0.1",
            "--health-port",
            &health.to_string(),
        ])
        .args(["--prometheus-metrics-enabled", "false"])
        .args(["--shutdown-timeout-secs", "1"])
        .envs(env.iter().copied())
        .env_remove("NO_COLOR")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    until_ready(health).await;
    sigterm_exits_cleanly(child).await;
    reader.join().unwrap()
}

#[tokio::test]
async fn logs_on_a_pipe_are_plain_text_or_json_lines_without_colour() {
    let text = log_lines(&[]).await;
    assert!(text.len() >= 2, "{text:?}");
    for l in &text {
        assert!(
            !l.contains('\u{1b}'),
            "a terminal escape in a piped log line: {l:?}"
        );
    }
    assert!(text.iter().any(|l| l.contains("INFO")), "{text:?}");
    // Calico's level names set the level: at Warning, the info lines are gone.
    let quiet = log_lines(&[("TYPHA_LOGSEVERITYSCREEN", "Warning")]).await;
    assert!(quiet.iter().all(|l| !l.contains("INFO")), "{quiet:?}");
    let json = log_lines(&[("TYPHA_LOGFORMATJSON", "true")]).await;
    assert!(json.len() >= 2, "{json:?}");
    for l in &json {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert!(v["level"].is_string(), "{l}");
        assert!(!l.contains('\u{1b}'), "{l:?}");
    }
}

#[tokio::test]
async fn a_drain_fails_readiness_at_once_and_keeps_liveness_and_metrics_until_the_last_goodbye() {
    const CLIENTS: usize = 4;
    // A drain of about 3.6 s: probes have time to see it, even on a loaded machine.
    const TIMEOUT_SECS: f64 = 5.0;
    let (port, health, metrics) = (free_port(), free_port(), free_port());
    let mut child = Command::new(BIN)
        .args([
            "--server-host",
            "127.0.0.1",
            "--server-port",
            &port.to_string(),
        ])
        .args([
            "--health-host",
            "127.0.0.1",
            "--health-port",
            &health.to_string(),
        ])
        .args(["--prometheus-metrics-host", "127.0.0.1"])
        .args(["--prometheus-metrics-port", &metrics.to_string()])
        .args(["--shutdown-timeout-secs", &TIMEOUT_SECS.to_string()])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_ready(health).await;
    let mut peers = Vec::new();
    for i in 0..CLIENTS {
        let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
        p.hello(Peer::offer(&format!("worker-{i}"), None))
            .await
            .unwrap();
        p.until("in sync", |p| {
            p.status == Some(typha_protocol::model::SyncStatus::InSync)
        })
        .await;
        peers.push(p);
    }

    let pid = child.id();
    let sigterm = tokio::time::Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    // Each client records when its Goodbye came.
    let goodbyes: Vec<_> = peers
        .into_iter()
        .map(|mut p| {
            tokio::spawn(async move {
                let g = p.until_closed().await;
                (g.map(|g| g.reason), tokio::time::Instant::now())
            })
        })
        .collect();
    // Meanwhile, probe the three endpoints until the process is gone.
    let probes = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            let at = tokio::time::Instant::now();
            let ready = get(health, "/readiness").await.map(|r| r.0);
            let live = get(health, "/liveness").await.map(|r| r.0);
            let scraped = get(metrics, "/metrics").await;
            let remaining = scraped.as_ref().and_then(|(_, text)| {
                text.lines()
                    .find_map(|l| l.strip_prefix("typha_shutdown_connections_remaining "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            });
            if ready.is_none() && live.is_none() && scraped.is_none() {
                return seen;
            }
            seen.push((at, ready, live, scraped.map(|r| r.0), remaining));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut times = Vec::new();
    for g in goodbyes {
        let (reason, at) = g.await.unwrap();
        assert_eq!(reason, Some(GoodbyeReason::Shutdown));
        times.push(at);
    }
    times.sort();
    let last_goodbye = *times.last().unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let seen = probes.await.unwrap();

    // Readiness failed when the signal was handled and never came back; while clients were
    // still waiting for their Goodbye (the server's own gauge says so in the same round of
    // probes), liveness and metrics answered. Judged by the gauge, not by when this process
    // saw the Goodbyes: a stall of the test process delays what it sees, not what the server
    // did.
    let unready_from = seen
        .iter()
        .position(|s| s.1 == Some(503))
        .expect("readiness never failed");
    let mut during = 0;
    for (_, ready, live, _, remaining) in &seen[unready_from..] {
        assert_ne!(*ready, Some(200), "readiness came back during the drain");
        if remaining.is_some_and(|r| r >= 1.0) {
            assert_eq!(*live, Some(200), "liveness during the drain");
            during += 1;
        }
    }
    assert!(
        during >= 2,
        "liveness and /metrics answered in only {during} rounds of probes during the drain"
    );
    // The drain's progress is on /metrics, counting down (from the first sample taken once the
    // drain had begun: a probe racing the signal may still read the gauge's 0 from before).
    let remaining: Vec<f64> = seen
        .iter()
        .filter_map(|s| s.4)
        .skip_while(|r| *r == 0.0)
        .collect();
    assert!(remaining.windows(2).all(|w| w[1] <= w[0]), "{remaining:?}");
    assert!(remaining.iter().any(|r| *r >= 1.0), "{remaining:?}");

    // Spread over the timeout, not a stampede. The exact pace (one connection every 0.95 x
    // timeout / connections, at most 1 s apart) is tested on a paused clock for both
    // protocols (`conn::drive::tests`); here the times are when this process saw each
    // Goodbye, and a stall of the test process bunches some of them, so only the whole spread
    // is checked, with room.
    let step = Duration::from_secs_f64((0.95 * TIMEOUT_SECS / CLIENTS as f64).min(1.0));
    let spread = last_goodbye - times[0];
    assert!(
        spread >= step.mul_f64(0.5 * (CLIENTS - 1) as f64)
            && last_goodbye - sigterm <= Duration::from_secs_f64(TIMEOUT_SECS + 5.0),
        "drain spread {spread:?}, finished {:?} after SIGTERM",
        last_goodbye - sigterm
    );
}
