//! What the chart tests share: the chart's path, the helm `peers/build` makes, running helm
//! against a control plane, reading its YAML, and a few checks of rendered objects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;
use typha_test_support::control_plane::{ControlPlane, peer};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn chart() -> PathBuf {
    root().join("deploy/helm/typha")
}

/// The helm `peers/build` makes, or `None` (after saying so) when skipping is allowed.
pub fn helm() -> Option<PathBuf> {
    match peer("helm") {
        Ok(p) => Some(p),
        Err(e) if std::env::var_os(super::kube::ALLOW_SKIP).is_some() => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!(
            "{e}. Or set {}=1 to skip the tests that need it.",
            super::kube::ALLOW_SKIP
        ),
    }
}

/// The YAML documents of a multi-document text, empty ones left out.
pub fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Whether every label of `selector` is on `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.as_object().unwrap();
    !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A container's environment: value, or `<fieldRef path>` for a downward-API value.
pub fn env_of(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match e["value"].as_str() {
                Some(v) => v.to_owned(),
                None => format!(
                    "<{}>",
                    e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap()
                ),
            };
            (name, value)
        })
        .collect()
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
}

/// The status line of `GET /readiness`, if the server answers.
pub async fn readiness(port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /readiness HTTP/1.0\r\n\r\n").await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .map(str::to_owned)
}

/// Runs helm with the cluster administrator's kubeconfig.
pub fn helm_admin(helm: &Path, cp: &ControlPlane, args: &[&str]) -> String {
    let kubeconfig = cp.write_admin_kubeconfig().unwrap();
    let out = Command::new(helm)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", cp.dir().join("helm-cache"))
        .env("HELM_CONFIG_HOME", cp.dir().join("helm-config"))
        .env("HELM_DATA_HOME", cp.dir().join("helm-data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
