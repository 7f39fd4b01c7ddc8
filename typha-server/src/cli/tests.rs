use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::flags::Cli;
use super::settings::DEFAULT_EMBEDDED_DIR;
use crate::config::{Config, DatastoreConfig};
use crate::datastore::etcd::EtcdTls;
use crate::datastore::kubernetes::{CalicoGroup, InterfacePrefix};
use typha_service::exit::SettingError;

fn parse(args: &[&str]) -> Result<Config, SettingError> {
    Cli::try_parse_from(std::iter::once("typha-server").chain(args.iter().copied()))
        .expect("flags parse")
        .into_config()
}

#[test]
fn upstream_settings() {
    let e = parse(&["--datastore", "typha"]).unwrap_err();
    assert_eq!(e.setting, "TYPHA_UPSTREAMADDR");
    let c = parse(&[
        "--datastore-type",
        "typha",
        "--upstream",
        "typha-a:5473, typha-b:5473",
    ])
    .unwrap();
    let DatastoreConfig::Upstream(u) = c.datastore else {
        panic!("not upstream")
    };
    assert_eq!(u.addrs, ["typha-a:5473", "typha-b:5473"]);
    assert!(u.tls.is_none());
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.pem");
    std::fs::write(&f, "x").unwrap();
    let f = f.to_str().unwrap();
    let e = parse(&[
        "--datastore",
        "typha",
        "--upstream",
        "a:1",
        "--upstream-ca-file",
        f,
    ])
    .unwrap_err();
    assert_eq!(e.setting, "TYPHA_UPSTREAMCERTFILE");
    let c = parse(&[
        "--datastore",
        "typha",
        "--upstream",
        "a:1",
        "--upstream-ca-file",
        f,
        "--upstream-cert-file",
        f,
        "--upstream-key-file",
        f,
        "--upstream-cn",
        "typha-server",
    ])
    .unwrap();
    let DatastoreConfig::Upstream(u) = c.datastore else {
        panic!("not upstream")
    };
    assert_eq!(u.tls.unwrap().server_cn.as_deref(), Some("typha-server"));
}

#[test]
fn defaults_match_typha() {
    let c = parse(&[]).unwrap();
    // All interfaces, IPv6 and IPv4, as Go's `net.Listen("tcp", ":5473")`.
    assert_eq!(c.listen, SocketAddr::from((crate::listen::ALL, 5473)));
    assert_eq!(c.health.unwrap().ip(), crate::listen::ALL);
    assert_eq!(c.metrics.unwrap().ip(), crate::listen::ALL);
    assert_eq!(c.health.unwrap().port(), 9098);
    assert_eq!(c.metrics.unwrap().port(), 9093);
    assert_eq!(c.conn.ping_interval, Duration::from_secs(10));
    assert_eq!(c.conn.pong_timeout, Duration::from_secs(60));
    assert_eq!(c.conn.handshake_timeout, Duration::from_secs(10));
    assert_eq!(c.conn.max_fall_behind, Duration::from_secs(300));
    assert_eq!(c.conn.write_timeout, Duration::from_secs(120));
    assert_eq!(c.cache.max_batch, 100);
    assert_eq!(c.max_connections, 10_000);
    assert_eq!(c.shutdown_timeout, Duration::from_secs(300));
    assert!(c.tls.is_none());
}

#[test]
fn half_a_tls_configuration_names_the_missing_setting() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.pem");
    std::fs::write(&f, "x").unwrap();
    let f = f.to_str().unwrap();
    assert_eq!(
        parse(&["--server-cert-file", f]).unwrap_err().setting,
        "TYPHA_SERVERKEYFILE"
    );
    assert_eq!(
        parse(&["--server-cert-file", f, "--server-key-file", f])
            .unwrap_err()
            .setting,
        "TYPHA_CAFILE"
    );
    let e = parse(&[
        "--server-cert-file",
        f,
        "--server-key-file",
        f,
        "--ca-file",
        f,
    ])
    .unwrap_err();
    assert_eq!(e.setting, "TYPHA_CLIENTCN");
    let c = parse(&[
        "--server-cert-file",
        f,
        "--server-key-file",
        f,
        "--ca-file",
        f,
        "--client-cn",
        "typha-client",
    ])
    .unwrap();
    assert_eq!(c.tls.unwrap().client_cns, vec!["typha-client".to_owned()]);
    let e = parse(&[
        "--server-cert-file",
        "/nonexistent",
        "--server-key-file",
        f,
        "--ca-file",
        f,
        "--client-uri-san",
        "spiffe://x",
    ])
    .unwrap_err();
    assert_eq!(e.setting, "TYPHA_SERVERCERTFILE");
}

#[test]
fn bad_values_name_the_setting() {
    let e = parse(&["--datastore-type", "consul"]).unwrap_err();
    assert_eq!(e.setting, "TYPHA_DATASTORETYPE");
    assert!(e.reason.contains("embedded, etcdv3"), "{e}");
    assert_eq!(
        parse(&["--server-ping-interval-secs=-1"])
            .unwrap_err()
            .setting,
        "TYPHA_SERVERPINGINTERVALSECS"
    );
    assert_eq!(
        parse(&["--snapshot-cache-max-batch-size", "0"])
            .unwrap_err()
            .setting,
        "TYPHA_SNAPSHOTCACHEMAXBATCHSIZE"
    );
    assert_eq!(
        parse(&["--health-host", "no.such.host.invalid"])
            .unwrap_err()
            .setting,
        "TYPHA_HEALTHHOST"
    );
}

#[test]
fn etcd_settings() {
    let c = parse(&["--datastore-type", "etcdv3"]).unwrap();
    assert_eq!(
        c.datastore,
        DatastoreConfig::Etcd {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            tls: None
        }
    );
    let c = parse(&[
        "--datastore-type",
        "etcdv3",
        "--etcd-endpoints",
        "http://10.0.0.1:2379, http://10.0.0.2:2379,",
    ])
    .unwrap();
    assert!(
        matches!(c.datastore, DatastoreConfig::Etcd { endpoints, .. }
        if endpoints == ["http://10.0.0.1:2379", "http://10.0.0.2:2379"])
    );
    // Calico's names, for the environment.
    use clap::CommandFactory;
    let cmd = Cli::command();
    for (long, env) in [
        ("etcd-endpoints", "TYPHA_ETCDENDPOINTS"),
        ("etcd-ca-file", "TYPHA_ETCDCAFILE"),
        ("etcd-cert-file", "TYPHA_ETCDCERTFILE"),
        ("etcd-key-file", "TYPHA_ETCDKEYFILE"),
    ] {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap();
        assert_eq!(arg.get_env().unwrap(), env);
    }
    // The etcd settings do not matter to the embedded datastore.
    assert!(matches!(
        parse(&["--etcd-endpoints", "nonsense"]).unwrap().datastore,
        DatastoreConfig::Embedded { .. }
    ));
}

#[test]
fn etcd_tls_settings_are_checked_and_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    crate::pki::write_bundle(dir.path(), &["localhost"], "typha").unwrap();
    let f = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
    let (ca, cert, key) = (f("ca.crt"), f("client.crt"), f("client.key"));
    let junk = f("junk");
    std::fs::write(&junk, "not pem").unwrap();
    let etcd = |extra: &[&str]| {
        let mut args = vec![
            "--datastore-type",
            "etcdv3",
            "--etcd-endpoints",
            "https://127.0.0.1:2379",
        ];
        args.extend_from_slice(extra);
        parse(&args)
    };
    let c = etcd(&[
        "--etcd-ca-file",
        &ca,
        "--etcd-cert-file",
        &cert,
        "--etcd-key-file",
        &key,
    ])
    .unwrap();
    let DatastoreConfig::Etcd { tls: Some(tls), .. } = c.datastore else {
        panic!("{:?}", c.datastore)
    };
    assert_eq!(tls.ca_file, PathBuf::from(&ca));
    assert_eq!(tls.client.unwrap().key_file, PathBuf::from(&key));
    // Server authentication only.
    let c = etcd(&["--etcd-ca-file", &ca]).unwrap();
    assert!(matches!(
        c.datastore,
        DatastoreConfig::Etcd {
            tls: Some(EtcdTls { client: None, .. }),
            ..
        }
    ));

    let setting = |r: Result<Config, SettingError>| r.unwrap_err().setting;
    assert_eq!(setting(etcd(&[])), "TYPHA_ETCDCAFILE", "https needs the CA");
    assert_eq!(
        setting(etcd(&["--etcd-ca-file", &ca, "--etcd-cert-file", &cert])),
        "TYPHA_ETCDKEYFILE"
    );
    assert_eq!(
        setting(etcd(&["--etcd-ca-file", &ca, "--etcd-key-file", &key])),
        "TYPHA_ETCDCERTFILE"
    );
    assert_eq!(
        setting(etcd(&["--etcd-cert-file", &cert, "--etcd-key-file", &key])),
        "TYPHA_ETCDCAFILE"
    );
    assert_eq!(
        setting(etcd(&["--etcd-ca-file", &junk])),
        "TYPHA_ETCDCAFILE"
    );
    assert_eq!(
        setting(etcd(&["--etcd-ca-file", "/nonexistent/ca.crt"])),
        "TYPHA_ETCDCAFILE"
    );
    assert_eq!(
        setting(etcd(&[
            "--etcd-ca-file",
            &ca,
            "--etcd-cert-file",
            &junk,
            "--etcd-key-file",
            &key
        ])),
        "TYPHA_ETCDCERTFILE"
    );
    assert_eq!(
        setting(etcd(&[
            "--etcd-ca-file",
            &ca,
            "--etcd-cert-file",
            &cert,
            "--etcd-key-file",
            &cert
        ])),
        "TYPHA_ETCDKEYFILE",
        "a certificate is not a key"
    );
    for endpoints in [
        "http://127.0.0.1:2379",                        // TLS files, plain endpoint
        "https://127.0.0.1:2379,http://127.0.0.1:2380", // mixed
        "ftp://127.0.0.1:2379",
        "127.0.0.1:2379",
        "",
    ] {
        let r = parse(&[
            "--datastore-type",
            "etcdv3",
            "--etcd-endpoints",
            endpoints,
            "--etcd-ca-file",
            &ca,
        ]);
        assert_eq!(setting(r), "TYPHA_ETCDENDPOINTS", "{endpoints:?}");
    }
}

#[test]
fn booleans_accept_typha_spellings() {
    let c = parse(&[
        "--health-enabled",
        "false",
        "--prometheus-metrics-enabled",
        "no",
    ])
    .unwrap();
    assert!(c.health.is_none() && c.metrics.is_none());
}

#[test]
fn tight_pong_timeouts_are_widened_as_typha_does() {
    let c = parse(&[
        "--server-ping-interval-secs",
        "5",
        "--server-pong-timeout-secs",
        "8",
    ])
    .unwrap();
    assert_eq!(c.conn.normalized().pong_timeout, Duration::from_secs(30));
}

#[test]
fn the_default_manifests_folder_is_relative_to_the_working_directory() {
    // Not a path of the machine that built the binary.
    let c = parse(&[]).unwrap();
    let DatastoreConfig::Embedded { dir: Some(dir), .. } = c.datastore else {
        panic!("embedded by default")
    };
    assert_eq!(dir, PathBuf::from(DEFAULT_EMBEDDED_DIR));
    assert!(dir.is_relative());
}

#[test]
fn kubernetes_settings_with_host_local_ipam() {
    let c = parse(&["--datastore-type", "kubernetes"]).unwrap();
    assert_eq!(
        c.datastore,
        DatastoreConfig::Kubernetes {
            api_endpoint: None,
            use_pod_cidr: false,
            calico_api_group: None,
            interface_prefix: InterfacePrefix::CALI,
        }
    );
    let c = parse(&[
        "--datastore-type",
        "kubernetes",
        "--k8s-api-endpoint",
        "https://10.96.0.1:443",
        "--use-pod-cidr",
        "true",
    ])
    .unwrap();
    assert_eq!(
        c.datastore,
        DatastoreConfig::Kubernetes {
            api_endpoint: Some("https://10.96.0.1:443".into()),
            use_pod_cidr: true,
            calico_api_group: None,
            interface_prefix: InterfacePrefix::CALI,
        }
    );
}

/// `CALICO_API_GROUP` and `FELIX_INTERFACEPREFIX`, as Calico's Typha reads them: the group in
/// any case (unset: discovered), the first of the prefixes (unset or empty: `cali`); a value
/// that is neither group, or a prefix Felix would refuse, names the variable.
#[test]
fn calicos_api_group_and_interface_prefix() {
    let kubernetes = |extra: &[&str]| {
        let mut args = vec!["--datastore-type", "kubernetes"];
        args.extend_from_slice(extra);
        parse(&args)
    };
    let datastore = |extra: &[&str]| match kubernetes(extra).unwrap().datastore {
        DatastoreConfig::Kubernetes {
            calico_api_group,
            interface_prefix,
            ..
        } => (calico_api_group, interface_prefix.to_string()),
        other => panic!("{other:?}"),
    };
    assert_eq!(datastore(&[]), (None, "cali".into()));
    assert_eq!(
        datastore(&["--calico-api-group", "projectcalico.org/v3"]),
        (Some(CalicoGroup::V3), "cali".into())
    );
    assert_eq!(
        datastore(&["--calico-api-group", "ProjectCalico.org/V3"]).0,
        Some(CalicoGroup::V3)
    );
    assert_eq!(
        datastore(&["--calico-api-group", "crd.projectcalico.org/v1"]).0,
        Some(CalicoGroup::V1)
    );
    assert_eq!(datastore(&["--calico-api-group", ""]).0, None);
    let e = kubernetes(&["--calico-api-group", "projectcalico.org"]).unwrap_err();
    assert_eq!(e.setting, "CALICO_API_GROUP");
    assert!(e.reason.contains("projectcalico.org/v3"), "{}", e.reason);

    assert_eq!(datastore(&["--interface-prefix", "eni,cali"]).1, "eni");
    assert_eq!(datastore(&["--interface-prefix", "azv"]).1, "azv");
    assert_eq!(datastore(&["--interface-prefix", ""]).1, "cali");
    for bad in ["eni,", ",cali", "en i", "a-prefix-too-long", "eni;cali"] {
        let e = kubernetes(&["--interface-prefix", bad]).unwrap_err();
        assert_eq!(e.setting, "FELIX_INTERFACEPREFIX", "{bad:?}");
    }
}

#[test]
fn snapshot_chunks_are_configurable_within_what_clients_decode() {
    let c = parse(&[
        "--snapshot-chunk-kvs",
        "4000",
        "--snapshot-chunk-kib",
        "1024",
        "--snapshot-zstd-level",
        "9",
    ])
    .unwrap();
    assert_eq!(
        c.conn.snapshot,
        crate::cache::snapshot::SnapshotConfig {
            chunk_kvs: 4000,
            chunk_bytes: 1 << 20,
            zstd_level: 9
        }
    );
    assert_eq!(parse(&[]).unwrap().conn.snapshot, Default::default());
    for (flag, value, env) in [
        ("--snapshot-chunk-kvs", "0", "TYPHA_SNAPSHOTCHUNKKVS"),
        ("--snapshot-chunk-kib", "0", "TYPHA_SNAPSHOTCHUNKKIB"),
        ("--snapshot-chunk-kib", "16385", "TYPHA_SNAPSHOTCHUNKKIB"),
        ("--snapshot-zstd-level", "0", "TYPHA_SNAPSHOTZSTDLEVEL"),
        ("--snapshot-zstd-level", "20", "TYPHA_SNAPSHOTZSTDLEVEL"),
    ] {
        assert_eq!(
            parse(&[flag, value]).unwrap_err().setting,
            env,
            "{flag} {value}"
        );
    }
}

/// Loads the settings from `args`, an environment and a config file (`None`: absent), as the
/// program does.
fn load(
    args: &[&str],
    env: &[(&str, &str)],
    file: Option<&str>,
) -> Result<super::sources::Loaded, super::sources::LoadError> {
    let args = std::iter::once("typha-server")
        .chain(args.iter().copied())
        .map(std::ffi::OsString::from)
        .collect();
    let env: Vec<_> = env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    let file = file.map(str::to_owned);
    super::sources::load(args, env, move |p| {
        assert_eq!(p, std::path::Path::new("/etc/calico/typha.cfg"));
        Ok(file.clone())
    })
}

/// Calico v3.32's manifests (`calico-typha.yaml`) and the Tigera operator's Deployment set these.
const CALICOS_DEPLOYMENT: &[(&str, &str)] = &[
    ("TYPHA_LOGSEVERITYSCREEN", "info"),
    ("TYPHA_LOGFILEPATH", "none"),
    ("TYPHA_LOGSEVERITYSYS", "none"),
    ("TYPHA_CONNECTIONREBALANCINGMODE", "kubernetes"),
    ("TYPHA_DATASTORETYPE", "kubernetes"),
    ("TYPHA_HEALTHENABLED", "true"),
    ("TYPHA_SHUTDOWNTIMEOUTSECS", "300"),
    ("TYPHA_FIPSMODEENABLED", "false"),
];

#[test]
fn calicos_deployment_environment_is_accepted_with_a_line_for_each_setting_we_do_not_have() {
    let l = load(&[], CALICOS_DEPLOYMENT, None).unwrap();
    assert!(l.unknown.is_empty(), "{:?}", l.unknown);
    assert_eq!(l.notes.len(), 3, "{:?}", l.notes);
    for name in [
        "TYPHA_LOGFILEPATH",
        "TYPHA_LOGSEVERITYSYS",
        "TYPHA_FIPSMODEENABLED",
    ] {
        assert!(
            l.notes.iter().any(|n| n.starts_with(&format!("{name}="))),
            "{name}: {:?}",
            l.notes
        );
    }
    let c = l.cli.into_config().unwrap();
    assert!(matches!(c.datastore, DatastoreConfig::Kubernetes { .. }));
    assert!(c.governor.is_some());
    // What would quietly give less than was asked is refused, naming the setting.
    let e = load(&[], &[("TYPHA_FIPSMODEENABLED", "true")], None).unwrap_err();
    assert!(e.to_string().starts_with("TYPHA_FIPSMODEENABLED: "), "{e}");
    // A name that is nobody's setting is unknown.
    let l = load(&[], &[("TYPHA_SERVERPROT", "5473")], None).unwrap();
    assert_eq!(l.unknown, ["TYPHA_SERVERPROT (in the environment)"]);
}

#[test]
fn a_log_severity_that_is_not_a_level_is_refused() {
    for bad in ["verbose", "inf", "debug,verbose"] {
        let l = load(&[], &[("TYPHA_LOGSEVERITYSCREEN", bad)], None).unwrap();
        let e = l.cli.into_config().unwrap_err();
        assert_eq!(e.setting, "TYPHA_LOGSEVERITYSCREEN", "{bad}");
    }
    for (ok, filter) in [
        ("Info", "info"),
        ("WARNING", "warn"),
        ("critical", "error"),
        ("none", "off"),
        (
            "info,typha_server::governor=debug",
            "info,typha_server::governor=debug",
        ),
    ] {
        let l = load(&[], &[("TYPHA_LOGSEVERITYSCREEN", ok)], None).unwrap();
        assert_eq!(l.cli.log_filter().unwrap(), filter);
        l.cli.into_config().unwrap();
    }
}

#[test]
fn names_are_read_in_any_case_and_the_upper_case_one_wins() {
    let l = load(
        &[],
        &[
            ("typha_serverport", "1111"),
            ("Typha_HealthPort", "2222"),
            ("TYPHA_PROMETHEUSMETRICSPORT", "3333"),
            ("typha_prometheusmetricsport", "4444"),
            ("typha_datastoretype", "ETCDV3"),
        ],
        None,
    )
    .unwrap();
    let c = l.cli.into_config().unwrap();
    assert_eq!(c.listen.port(), 1111);
    assert_eq!(c.health.unwrap().port(), 2222);
    assert_eq!(c.metrics.unwrap().port(), 3333);
    assert!(matches!(c.datastore, DatastoreConfig::Etcd { .. }));
}

#[test]
fn typhas_config_file_is_read_under_the_environment_and_the_flags() {
    let file = "# Typha's config file\n\
                [global]\n\
                ServerPort = 1111\n\
                healthport: 2222 ; a comment\n\
                PrometheusMetricsPort = \"3333\"\n\
                ClientCN = typha-client # another\n\
                LogFilePath = none\n\
                HealthEnabled = none\n\
                [other]\n\
                ServerHandshakeTimeoutSecs = 7\n";
    let l = load(
        &["--server-port", "5555"],
        &[("TYPHA_HEALTHPORT", "6666")],
        Some(file),
    )
    .unwrap();
    assert_eq!(
        l.file.as_deref(),
        Some(std::path::Path::new("/etc/calico/typha.cfg"))
    );
    assert!(l.notes.iter().any(|n| n.starts_with("TYPHA_LOGFILEPATH=")));
    assert_eq!(l.cli.client_cn, ["typha-client"]);
    assert!(!l.cli.health_enabled, "none turns a switch off");
    assert_eq!(l.cli.server_port, 5555, "the flag wins");
    assert_eq!(
        l.cli.health_port, 6666,
        "the environment wins over the file"
    );
    assert_eq!(l.cli.prometheus_metrics_port, 3333);
    assert_eq!(l.cli.server_handshake_timeout_secs, 7.0);
    // A bad value from the file says so; a line that is no setting names the line.
    let e = load(&[], &[], Some("ServerPort = x\n")).unwrap_err();
    assert!(e.to_string().contains("TYPHA_SERVERPORT"), "{e}");
    assert!(e.to_string().contains("/etc/calico/typha.cfg"), "{e}");
    let e = load(&[], &[], Some("[global]\nnot a setting\n")).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
    // An unknown name in the file is reported as such.
    let l = load(&[], &[], Some("ServerPrt = 1\n")).unwrap();
    assert_eq!(l.unknown, ["TYPHA_SERVERPRT (in the config file)"]);
}

#[test]
fn other_names_and_typhas_older_etcd_settings() {
    let l = load(
        &[],
        &[
            ("USE_POD_CIDR", "true"),
            ("TYPHA_DATASTORETYPE", "kubernetes"),
        ],
        None,
    )
    .unwrap();
    assert!(l.cli.use_pod_cidr);
    let etcd = |env: &[(&str, &str)]| {
        let l = load(&[], env, None).unwrap();
        match l.cli.into_config().map(|c| c.datastore) {
            Ok(DatastoreConfig::Etcd { endpoints, .. }) => Ok(endpoints),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.setting),
        }
    };
    let d = ("TYPHA_DATASTORETYPE", "etcdv3");
    assert_eq!(etcd(&[d]).unwrap(), ["http://127.0.0.1:2379"]);
    assert_eq!(
        etcd(&[d, ("TYPHA_ETCDADDR", "etcd-0:2379")]).unwrap(),
        ["http://etcd-0:2379"]
    );
    assert_eq!(
        etcd(&[
            d,
            ("TYPHA_ETCDADDR", "etcd-0:2379"),
            ("TYPHA_ETCDENDPOINTS", "http://a:2379,http://b:2379")
        ])
        .unwrap(),
        ["http://a:2379", "http://b:2379"]
    );
    assert_eq!(
        etcd(&[d, ("TYPHA_ETCDSCHEME", "ftp")]).unwrap_err(),
        "TYPHA_ETCDSCHEME"
    );
}

#[test]
fn every_setting_of_typha_is_ours_or_accepted_with_a_note() {
    use clap::CommandFactory;
    // Calico v3.32's `typha/pkg/config/config_params.go`, every field with a `config` tag, as
    // its environment name.
    const TYPHAS: &[&str] = &[
        "DATASTORETYPE",
        "ETCDADDR",
        "ETCDSCHEME",
        "ETCDKEYFILE",
        "ETCDCERTFILE",
        "ETCDCAFILE",
        "ETCDENDPOINTS",
        "LOGFILEPATH",
        "LOGSEVERITYFILE",
        "LOGSEVERITYSCREEN",
        "LOGSEVERITYSYS",
        "HEALTHENABLED",
        "HEALTHHOST",
        "HEALTHPORT",
        "PROMETHEUSMETRICSENABLED",
        "PROMETHEUSMETRICSHOST",
        "PROMETHEUSMETRICSPORT",
        "PROMETHEUSGOMETRICSENABLED",
        "PROMETHEUSPROCESSMETRICSENABLED",
        "PROMETHEUSMETRICSCAFILE",
        "PROMETHEUSMETRICSCERTFILE",
        "PROMETHEUSMETRICSKEYFILE",
        "PROMETHEUSMETRICSCLIENTAUTH",
        "SNAPSHOTCACHEMAXBATCHSIZE",
        "SERVERMAXMESSAGESIZE",
        "SERVERMAXFALLBEHINDSECS",
        "SERVERNEWCLIENTFALLBEHINDGRACEPERIOD",
        "SERVERMINBATCHINGAGETHRESHOLDSECS",
        "SERVERPINGINTERVALSECS",
        "SERVERPONGTIMEOUTSECS",
        "SERVERHANDSHAKETIMEOUTSECS",
        "SERVERPORT",
        "SERVERHOST",
        "SERVERKEYFILE",
        "SERVERCERTFILE",
        "CAFILE",
        "CLIENTCN",
        "CLIENTURISAN",
        "DEBUGMEMORYPROFILEPATH",
        "DEBUGDISABLELOGDROPPING",
        "DEBUGHOST",
        "DEBUGPORT",
        "CONNECTIONREBALANCINGMODE",
        "CONNECTIONDROPINTERVALSECS",
        "SHUTDOWNTIMEOUTSECS",
        "SHUTDOWNCONNECTIONDROPINTERVALMAXSECS",
        "MAXCONNECTIONSUPPERLIMIT",
        "MAXCONNECTIONSLOWERLIMIT",
        "K8SSERVICEPOLLINTERVALSECS",
        "K8SNAMESPACE",
        "K8SSERVICENAME",
        "K8SPORTNAME",
    ];
    let cmd = Cli::command();
    let ours: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| Some(a.get_env()?.to_str()?.to_owned()))
        .collect();
    for name in TYPHAS.iter().map(|n| format!("TYPHA_{n}")) {
        let mine = ours.contains(&name);
        let noted = super::typha_settings::find(&name).is_some();
        assert!(
            mine != noted,
            "{name}: ours {mine}, noted {noted}: exactly one"
        );
    }
}
