//! The chart's agent DaemonSet (`deploy/helm/typha`) sets only settings this program has, with
//! values it accepts: `typha-agent --check-config` with exactly the rendered environment, for
//! every value set that deploys the agent.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_typha-agent");

/// The helm `peers/build` makes (`$TYPHA_PEERS_DIR`, else the repository's `target/peers`).
fn helm() -> Option<PathBuf> {
    let dir = std::env::var_os("TYPHA_PEERS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers"),
        PathBuf::from,
    );
    let helm = dir.join("bin/helm");
    if helm.is_file() {
        Some(helm)
    } else if std::env::var_os("TYPHA_TEST_ALLOW_SKIP").is_some() {
        eprintln!("skipped: no helm at {} (run peers/build)", helm.display());
        None
    } else {
        panic!(
            "no helm at {} (run peers/build). Or set TYPHA_TEST_ALLOW_SKIP=1 to skip.",
            helm.display()
        )
    }
}

#[test]
fn the_charts_agent_environment_is_accepted_by_the_agent() {
    let Some(helm) = helm() else { return };
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/typha");
    let mut checked = 0;
    let mut sets: Vec<PathBuf> = std::fs::read_dir(chart.join("ci"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    sets.sort();
    for values in sets {
        let out = Command::new(&helm)
            .args(["template", "typha"])
            .arg(&chart)
            .args(["--namespace", "kube-system", "-f"])
            .arg(&values)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap())
            .collect();
        let Some(ds) = docs.iter().find(|d| d["kind"] == "DaemonSet") else {
            continue;
        };
        let c = &ds["spec"]["template"]["spec"]["containers"][0];
        let mut cmd = Command::new(BIN);
        cmd.arg("--check-config").env_clear();
        for e in c["env"].as_array().unwrap() {
            let value = match e["value"].as_str() {
                Some(v) => v.to_owned(),
                None => match e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap() {
                    "spec.nodeName" => "node-a".to_owned(),
                    "metadata.namespace" => "kube-system".to_owned(),
                    other => panic!("a downward-API field this test does not know: {other}"),
                },
            };
            cmd.env(e["name"].as_str().unwrap(), value);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}: typha-agent --check-config refuses the chart's environment: {}",
            values.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        // The health address the probes use is the one the agent serves.
        let addr = String::from_utf8_lossy(&out.stdout).into_owned();
        let port = c["livenessProbe"]["httpGet"]["port"].as_u64().unwrap();
        assert!(addr.contains(&format!("127.0.0.1:{port}")), "{addr}");
        checked += 1;
    }
    assert!(checked >= 2, "value sets with the agent: {checked}");
}

#[test]
fn an_unknown_felix_setting_is_named() {
    let out = Command::new(BIN)
        .arg("--check-config")
        .env_clear()
        .env("NODENAME", "node-a")
        .env("FELIX_TYPHAADDR", "127.0.0.1:5473")
        .env("FELIX_TYPHAK8SSERVICENAM", "calico-typha")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("FELIX_TYPHAK8SSERVICENAM: not a setting"),
        "{err}"
    );
}
