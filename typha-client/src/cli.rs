//! Command-line flags shared by the bundled programs (`typha-tail`, `typha-agent`): how to
//! find and trust a typha server, under Felix's environment names.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ClientConfig, ConfigError};
use crate::discovery::Discovery;
use crate::tls::ClientTls;

/// Where the servers are and how to talk to them.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Server addresses, `host:port`, comma-separated (names resolve to all their addresses).
    #[arg(long, env = "FELIX_TYPHAADDR", value_delimiter = ',')]
    pub addr: Vec<String>,
    /// Kubernetes Service to discover servers from (instead of --addr).
    #[arg(long, env = "FELIX_TYPHAK8SSERVICENAME")]
    pub k8s_service_name: Option<String>,
    /// Namespace of that Service.
    #[arg(long, env = "FELIX_TYPHAK8SNAMESPACE", default_value = "kube-system")]
    pub k8s_namespace: String,
    /// CA that signs the server's certificate.
    #[arg(long, env = "FELIX_TYPHACAFILE")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate.
    #[arg(long, env = "FELIX_TYPHACERTFILE")]
    pub cert_file: Option<PathBuf>,
    /// Client key.
    #[arg(long, env = "FELIX_TYPHAKEYFILE")]
    pub key_file: Option<PathBuf>,
    /// Required server certificate CN.
    #[arg(long, env = "FELIX_TYPHACN")]
    pub server_cn: Option<String>,
    /// Required server certificate URI SAN.
    #[arg(long, env = "FELIX_TYPHAURISAN")]
    pub server_uri_san: Option<String>,
    /// Seconds without a message before the server is considered gone.
    #[arg(long, env = "FELIX_TYPHAREADTIMEOUT", default_value_t = 30.0)]
    pub read_timeout: f64,
    /// Seconds a write may take before the connection is given up.
    #[arg(long, env = "FELIX_TYPHAWRITETIMEOUT", default_value_t = 10.0)]
    pub write_timeout: f64,
}

impl ConnectArgs {
    /// The client configuration for a node called `hostname`, as program `program` (told to
    /// the server), or the setting that is wrong.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting: `FELIX_TYPHAADDR` when neither `--addr` nor
    /// `--k8s-service-name` is given, `FELIX_TYPHAREADTIMEOUT` when the read timeout is not a
    /// positive number of seconds, and the CA, certificate or key setting that is missing when
    /// another TLS setting is given.
    pub fn client_config(
        &self,
        hostname: &str,
        program: &str,
    ) -> Result<ClientConfig, ConfigError> {
        let discovery = if !self.addr.is_empty() {
            Discovery::addresses(self.addr.clone())
        } else if let Some(service) = &self.k8s_service_name {
            Discovery::kubernetes(service.clone(), self.k8s_namespace.clone())
        } else {
            return Err(ConfigError::new(
                "FELIX_TYPHAADDR",
                "set --addr (or FELIX_TYPHAADDR) to the server's host:port",
            ));
        };
        let mut cfg = ClientConfig::new(hostname.to_string(), discovery);
        cfg.info = format!("{program}/{}", env!("CARGO_PKG_VERSION"));
        let secs = |v: f64, name: &'static str| {
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| ConfigError::new(name, "not a positive number of seconds"))
        };
        cfg.read_timeout = secs(self.read_timeout, "FELIX_TYPHAREADTIMEOUT")?;
        cfg.write_timeout = secs(self.write_timeout, "FELIX_TYPHAWRITETIMEOUT")?;
        let any_tls = self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some();
        if any_tls {
            let need = |v: &Option<PathBuf>, name: &'static str| {
                v.clone()
                    .ok_or_else(|| ConfigError::new(name, "required with the other TLS settings"))
            };
            cfg.tls = Some(ClientTls {
                ca_file: need(&self.ca_file, "FELIX_TYPHACAFILE")?,
                cert_file: need(&self.cert_file, "FELIX_TYPHACERTFILE")?,
                key_file: need(&self.key_file, "FELIX_TYPHAKEYFILE")?,
                server_cn: self.server_cn.clone(),
                server_uri_san: self.server_uri_san.clone(),
            });
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        connect: ConnectArgs,
    }

    fn config(args: &[&str]) -> Result<ClientConfig, ConfigError> {
        Cli::try_parse_from(["prog", "--addr", "typha:5473"].iter().chain(args))
            .unwrap()
            .connect
            .client_config("n1", "prog")
    }

    /// Both of Felix's timeouts reach the client, with Felix's defaults (30 s, 10 s).
    #[test]
    fn felix_timeouts_are_read_and_checked() {
        let c = config(&[]).unwrap();
        assert_eq!(c.read_timeout, Duration::from_secs(30));
        assert_eq!(c.write_timeout, Duration::from_secs(10));
        let c = config(&["--read-timeout", "45", "--write-timeout", "2.5"]).unwrap();
        assert_eq!(c.read_timeout, Duration::from_secs(45));
        assert_eq!(c.write_timeout, Duration::from_millis(2500));
        let e = config(&["--write-timeout", "0"]).err().unwrap();
        assert_eq!(e.setting, "FELIX_TYPHAWRITETIMEOUT");
        let e = config(&["--read-timeout=-1"]).err().unwrap();
        assert_eq!(e.setting, "FELIX_TYPHAREADTIMEOUT");
    }

    /// Every Felix setting the library reads from the environment is a flag here too, so the
    /// bundled programs' `--check-config` knows it.
    #[test]
    fn every_felix_variable_the_library_reads_is_a_flag() {
        use clap::CommandFactory;
        let envs: Vec<String> = Cli::command()
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        for name in [
            "FELIX_TYPHAADDR",
            "FELIX_TYPHAK8SSERVICENAME",
            "FELIX_TYPHAK8SNAMESPACE",
            "FELIX_TYPHACAFILE",
            "FELIX_TYPHACERTFILE",
            "FELIX_TYPHAKEYFILE",
            "FELIX_TYPHACN",
            "FELIX_TYPHAURISAN",
            "FELIX_TYPHAREADTIMEOUT",
            "FELIX_TYPHAWRITETIMEOUT",
        ] {
            assert!(envs.iter().any(|e| e == name), "{name}");
        }
    }
}
