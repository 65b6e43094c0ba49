//! The docker-compose deployment agrees with the code it deploys.
//!
//! No Docker engine runs here, so these tests parse `docker-compose.yml` and the `Dockerfile`
//! and compare them with `Settings::default()`, the `sessionlog` binary's commands, the CQL the
//! store creates keyspaces with and the versions `scripts/` runs: a port, a setting name, a
//! subcommand, a service or an image that drifts on one side fails here instead of at
//! `docker compose up`. No servers are needed.

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use sessionlog_log::Settings;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The services our binary runs; the others are the servers.
const OUR_SERVICES: [&str; 8] = [
    "sessionlog-init",
    "projector",
    "wake",
    "ingest",
    "recovery",
    "mcp",
    "console",
    "otlp-export",
];
const SERVERS: [&str; 3] = ["kafka", "schema-registry", "scylla"];
/// Where the binary reads the `SESSIONLOG_*` variables that are not settings (`SESSIONLOG_LOG`).
const CLI_SOURCES: [&str; 2] = ["cli/src/main.rs", "cli/src/commands.rs"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The compose file with its anchors resolved (serde_yaml expands aliases while parsing).
fn compose() -> Yaml {
    let text = read("docker-compose.yml");
    assert!(
        !text.contains("<<:"),
        "docker-compose.yml uses a `<<` merge key: these tests read aliases, not merges; \
         write the shared part as a whole alias (`environment: *sessionlog-env`)"
    );
    serde_yaml::from_str(&text).expect("docker-compose.yml is not valid YAML")
}

fn service<'a>(compose: &'a Yaml, name: &str) -> &'a Yaml {
    compose
        .get("services")
        .and_then(|s| s.get(name))
        .unwrap_or_else(|| panic!("docker-compose.yml has no service `{name}`"))
}

fn scalar(value: &Yaml) -> String {
    match value {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("expected a scalar, found {other:?}"),
    }
}

/// A service's environment, whether written as a mapping or as a `KEY=value` list.
fn env_of(compose: &Yaml, name: &str) -> BTreeMap<String, String> {
    match service(compose, name).get("environment") {
        None => BTreeMap::new(),
        Some(Yaml::Mapping(map)) => map
            .iter()
            .map(|(k, v)| {
                (
                    scalar(k),
                    if v.is_null() {
                        String::new()
                    } else {
                        scalar(v)
                    },
                )
            })
            .collect(),
        Some(Yaml::Sequence(items)) => items
            .iter()
            .map(|item| {
                let item = scalar(item);
                let (k, v) = item.split_once('=').unwrap_or((&item, ""));
                (k.to_string(), v.to_string())
            })
            .collect(),
        Some(other) => {
            panic!("service `{name}`: environment is neither a map nor a list: {other:?}")
        }
    }
}

/// A service's command as words (compose accepts a string or a list).
fn command_of(compose: &Yaml, name: &str) -> Vec<String> {
    match service(compose, name).get("command") {
        Some(Yaml::String(s)) => s.split_whitespace().map(String::from).collect(),
        Some(Yaml::Sequence(words)) => words.iter().map(scalar).collect(),
        other => panic!("service `{name}` has no usable command: {other:?}"),
    }
}

/// `(host port, container port)` for each port a service publishes, short (`[ip:][host:]container`)
/// or long (`{published, target}`) syntax; no host port when Docker is left to pick one (what
/// a service scaled to several replicas needs).
fn ports(compose: &Yaml, name: &str) -> Vec<(Option<u16>, u16)> {
    let Some(Yaml::Sequence(ports)) = service(compose, name).get("ports") else {
        return Vec::new();
    };
    ports
        .iter()
        .map(|p| match p {
            Yaml::Mapping(_) => (
                p.get("published").map(|h| parse_port(&scalar(h))),
                parse_port(&scalar(
                    p.get("target").expect("long port syntax without `target`"),
                )),
            ),
            _ => {
                let short = scalar(p);
                let short = short.split('/').next().unwrap_or_default(); // drop `/tcp`
                let parts: Vec<&str> = short.rsplitn(3, ':').collect();
                (parts.get(1).map(|h| parse_port(h)), parse_port(parts[0]))
            }
        })
        .collect()
}

/// `(host port, container port)` for each port published on a host port of its own.
fn published_ports(compose: &Yaml, name: &str) -> Vec<(u16, u16)> {
    ports(compose, name)
        .into_iter()
        .filter_map(|(host, container)| Some((host?, container)))
        .collect()
}

fn parse_port(text: &str) -> u16 {
    text.parse()
        .unwrap_or_else(|_| panic!("`{text}` is not a port number"))
}

/// `host:port` → (host, port).
fn host_port(address: &str) -> (String, u16) {
    let (host, port) = address
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("`{address}` has no port"));
    (host.to_string(), parse_port(port))
}

/// `scheme://host:port/path` → (host, port).
fn url_host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    host_port(rest.split('/').next().unwrap_or_default())
}

/// A Kafka listener list (`NAME://host:port,...`) as name → (host, port).
fn listeners(list: &str) -> BTreeMap<String, (String, u16)> {
    list.split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (name, address) = l
                .split_once("://")
                .unwrap_or_else(|| panic!("listener `{l}` is not NAME://host:port"));
            (name.to_string(), host_port(address))
        })
        .collect()
}

fn kafka_env(compose: &Yaml, key: &str) -> String {
    env_of(compose, "kafka")
        .remove(key)
        .unwrap_or_else(|| panic!("the kafka service does not set {key}"))
}

/// The default settings as JSON: the shape `SESSIONLOG_<SECTION>__<KEY>` variables address.
fn default_settings_json() -> Json {
    serde_json::to_value(Settings::default()).expect("settings serialise")
}

/// The value a service sees for a setting: its own variable, else the default.
fn effective(env: &BTreeMap<String, String>, section: &str, key: &str) -> String {
    let var = format!(
        "SESSIONLOG_{}__{}",
        section.to_uppercase(),
        key.to_uppercase()
    );
    env.get(&var)
        .cloned()
        .unwrap_or_else(|| match &default_settings_json()[section][key] {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        })
}

#[test]
fn compose_declares_the_stack_and_builds_our_services_from_the_dockerfile() {
    let compose = compose();
    for name in SERVERS.iter().chain(&OUR_SERVICES) {
        service(&compose, name);
    }
    for name in OUR_SERVICES {
        let build = service(&compose, name).get("build").unwrap_or_else(|| {
            panic!("service `{name}` is not built from our Dockerfile (no `build`)")
        });
        let (context, dockerfile) = match build {
            Yaml::String(context) => (context.clone(), "Dockerfile".to_string()),
            _ => (
                build.get("context").map_or_else(|| ".".into(), scalar),
                build
                    .get("dockerfile")
                    .map_or_else(|| "Dockerfile".into(), scalar),
            ),
        };
        assert!(
            context == "." && dockerfile == "Dockerfile",
            "service `{name}` builds {context}/{dockerfile}, not ./Dockerfile"
        );
        assert!(
            service(&compose, name).get("entrypoint").is_none(),
            "service `{name}` overrides the Dockerfile's ENTRYPOINT (`sessionlog`)"
        );
    }
}

#[test]
fn our_services_start_in_order_on_healthy_servers() {
    let compose = compose();
    let init_deps = service(&compose, "sessionlog-init").get("depends_on");
    for server in SERVERS {
        let condition = init_deps
            .and_then(|d| d.get(server))
            .and_then(|d| d.get("condition"))
            .map(scalar);
        assert_eq!(
            condition.as_deref(),
            Some("service_healthy"),
            "sessionlog-init must wait for `{server}` to be healthy (depends_on condition)"
        );
        assert!(
            service(&compose, server).get("healthcheck").is_some(),
            "`{server}` has no healthcheck, so `service_healthy` never holds"
        );
    }
    for name in OUR_SERVICES.iter().filter(|n| **n != "sessionlog-init") {
        let condition = service(&compose, name)
            .get("depends_on")
            .and_then(|d| d.get("sessionlog-init"))
            .and_then(|d| d.get("condition"))
            .map(scalar);
        assert_eq!(
            condition.as_deref(),
            Some("service_completed_successfully"),
            "`{name}` must start only after `sessionlog init` succeeded"
        );
    }
}

#[test]
fn published_ports_are_the_default_settings_ports() {
    let compose = compose();
    let defaults = Settings::default();
    let expected = [
        (
            "kafka",
            host_port(&defaults.kafka.bootstrap).1,
            "kafka.bootstrap",
        ),
        (
            "schema-registry",
            url_host_port(&defaults.registry.url).1,
            "registry.url",
        ),
        (
            "scylla",
            host_port(&defaults.cql.node_list()[0]).1,
            "cql.nodes",
        ),
    ];
    for (name, port, setting) in expected {
        let host_ports: Vec<u16> = published_ports(&compose, name)
            .iter()
            .map(|p| p.0)
            .collect();
        assert!(
            host_ports.contains(&port),
            "`{name}` publishes host ports {host_ports:?}, but the default {setting} uses {port}"
        );
    }
}

#[test]
fn kafka_advertises_the_default_bootstrap_to_the_host_and_a_name_to_containers() {
    let compose = compose();
    let declared = listeners(&kafka_env(&compose, "KAFKA_LISTENERS"));
    let advertised = listeners(&kafka_env(&compose, "KAFKA_ADVERTISED_LISTENERS"));
    let protocols = kafka_env(&compose, "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP");
    for name in advertised.keys() {
        assert!(
            declared.contains_key(name),
            "kafka advertises listener {name} but KAFKA_LISTENERS does not declare it"
        );
        assert!(
            protocols
                .split(',')
                .any(|p| p.split(':').next() == Some(name)),
            "listener {name} has no entry in KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"
        );
    }

    // The host listener: advertised as the default bootstrap, published on the port it listens on.
    let (default_host, default_port) = host_port(&Settings::default().kafka.bootstrap);
    let (host_listener, (host, port)) = advertised
        .iter()
        .find(|(_, (_, port))| *port == default_port)
        .unwrap_or_else(|| {
            panic!("kafka advertises no listener on the default bootstrap port {default_port}: {advertised:?}")
        });
    assert!(
        host == &default_host || host == "localhost",
        "kafka's host listener {host_listener} advertises {host}:{port}; host clients use {default_host}:{default_port}"
    );
    let listening_port = declared[host_listener].1;
    assert!(
        published_ports(&compose, "kafka").contains(&(default_port, listening_port)),
        "kafka must publish host port {default_port} to container port {listening_port}, where \
         {host_listener} listens; it publishes {:?}",
        published_ports(&compose, "kafka")
    );

    // Containers must bootstrap through a listener advertised under a name they can resolve.
    let internal: Vec<String> = advertised
        .values()
        .filter(|(host, _)| host == "kafka")
        .map(|(host, port)| format!("{host}:{port}"))
        .collect();
    assert!(
        !internal.is_empty(),
        "kafka advertises no listener as `kafka:<port>` for containers"
    );
    for name in OUR_SERVICES {
        let bootstrap = effective(&env_of(&compose, name), "kafka", "bootstrap");
        for server in bootstrap.split(',').map(str::trim) {
            assert!(
                internal.iter().any(|a| a == server),
                "`{name}` bootstraps from {server}, not a listener kafka advertises to containers {internal:?}"
            );
        }
    }
    let registry_store = env_of(&compose, "schema-registry")
        .remove("SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS")
        .expect("schema-registry sets SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS");
    for server in registry_store.split(',') {
        let address = server.split_once("://").map_or(server, |(_, a)| a).trim();
        assert!(
            internal.iter().any(|a| a == address),
            "the schema registry stores schemas via {address}, not a listener kafka advertises to containers {internal:?}"
        );
    }
}

#[test]
fn our_services_reach_the_registry_and_cql_at_their_container_ports() {
    let compose = compose();
    for name in OUR_SERVICES {
        let env = env_of(&compose, name);
        let (host, port) = url_host_port(&effective(&env, "registry", "url"));
        let registry_ports: Vec<u16> = published_ports(&compose, "schema-registry")
            .iter()
            .map(|p| p.1)
            .collect();
        assert!(
            host == "schema-registry" && registry_ports.contains(&port),
            "`{name}` looks for the registry at {host}:{port}; the service is schema-registry on {registry_ports:?}"
        );
        for node in effective(&env, "cql", "nodes").split(',').map(str::trim) {
            let (host, port) = host_port(node);
            let cql_ports: Vec<u16> = published_ports(&compose, "scylla")
                .iter()
                .map(|p| p.1)
                .collect();
            assert!(
                host == "scylla" && cql_ports.contains(&port),
                "`{name}` connects to CQL node {node}; the service is scylla on {cql_ports:?}"
            );
        }
    }
}

#[test]
fn every_sessionlog_variable_is_one_our_code_reads() {
    let compose = compose();
    let settings = default_settings_json();
    let cli_sources: String = CLI_SOURCES.iter().map(|f| read(f)).collect();
    for name in OUR_SERVICES {
        for var in env_of(&compose, name)
            .keys()
            .filter(|k| k.starts_with("SESSIONLOG_"))
        {
            let path = &var["SESSIONLOG_".len()..];
            if !path.contains("__") {
                // Not a setting (e.g. SESSIONLOG_LOG, the tracing filter): the binary must name it.
                assert!(
                    cli_sources.contains(&format!("\"{var}\"")),
                    "`{name}` sets {var}, which is neither a setting (SESSIONLOG_<SECTION>__<KEY>) \
                     nor a variable {CLI_SOURCES:?} read"
                );
                continue;
            }
            let mut node = &settings;
            for segment in path.split("__").map(str::to_lowercase) {
                match node.get(&segment) {
                    Some(next) => node = next,
                    // A free-form map (kafka.librdkafka) takes any key.
                    None if node.as_object().is_some_and(|m| m.is_empty()) => break,
                    None => panic!(
                        "`{name}` sets {var}, but Settings has no `{}` (typo? known keys: {})",
                        path.to_lowercase().replace("__", "."),
                        known_keys(&settings).join(", ")
                    ),
                }
            }
        }
    }
}

fn known_keys(settings: &Json) -> Vec<String> {
    let mut keys = Vec::new();
    for (section, fields) in settings.as_object().into_iter().flatten() {
        for key in fields.as_object().into_iter().flatten().map(|(k, _)| k) {
            keys.push(format!(
                "SESSIONLOG_{}__{}",
                section.to_uppercase(),
                key.to_uppercase()
            ));
        }
    }
    keys
}

#[test]
fn our_services_use_the_default_names_and_fit_a_single_node() {
    let compose = compose();
    for name in OUR_SERVICES {
        let env = env_of(&compose, name);
        for (section, key) in [
            ("kafka", "topic"),
            ("kafka", "dead_letter_topic"),
            ("cql", "keyspace"),
        ] {
            let default = effective(&BTreeMap::new(), section, key);
            assert_eq!(
                effective(&env, section, key),
                default,
                "`{name}` uses {section}.{key} {:?}; everything else (README, scripts) uses the default",
                effective(&env, section, key)
            );
        }
        // One Kafka node and one Scylla node: more replicas than that cannot be placed.
        let number = |section: &str, key: &str| -> i64 {
            effective(&env, section, key)
                .parse()
                .unwrap_or_else(|_| panic!("`{name}`: {section}.{key} is not a number"))
        };
        let kafka_rf = number("kafka", "replication_factor");
        assert!(
            kafka_rf == 1,
            "`{name}`: kafka.replication_factor {kafka_rf} on the single kafka node"
        );
        let min_isr = number("kafka", "min_insync_replicas");
        assert!(
            min_isr <= kafka_rf,
            "`{name}`: kafka.min_insync_replicas {min_isr} exceeds the replication factor {kafka_rf}"
        );
        // Unset ("null"), the store counts the nodes: one here.
        let cql_rf = effective(&env, "cql", "replication_factor");
        assert!(
            cql_rf == "null" || cql_rf == "1",
            "`{name}`: cql.replication_factor {cql_rf} on the single scylla node"
        );
    }
}

/// The binary's subcommands as clap names them, each with its long flags (snake_cased, as the
/// compose file's `--flag` words are compared), read from the command tree itself.
fn cli_subcommands() -> BTreeMap<String, Vec<String>> {
    let cli = <sessionlog_cli::Cli as clap::CommandFactory>::command();
    cli.get_subcommands()
        .map(|sub| {
            let flags = sub
                .get_arguments()
                .filter_map(|arg| arg.get_long())
                .map(|long| long.replace('-', "_"))
                .collect();
            (sub.get_name().to_string(), flags)
        })
        .collect()
}

#[test]
fn our_services_run_commands_the_binary_accepts() {
    let compose = compose();
    let commands = cli_subcommands();
    assert_eq!(
        command_of(&compose, "sessionlog-init"),
        ["init"],
        "sessionlog-init must run `sessionlog init`"
    );
    let projector = command_of(&compose, "projector");
    assert_eq!(
        projector.first().map(String::as_str),
        Some("project"),
        "the projector must run `sessionlog project`"
    );
    for name in OUR_SERVICES {
        let words = command_of(&compose, name);
        let fields = commands.get(&words[0]).unwrap_or_else(|| {
            panic!(
                "`{name}` runs `sessionlog {}`, but the binary's commands are {:?}",
                words[0],
                commands.keys()
            )
        });
        for flag in words.iter().filter_map(|w| w.strip_prefix("--")) {
            let flag = flag.split('=').next().unwrap_or_default().replace('-', "_");
            assert!(
                fields.contains(&flag),
                "`{name}` passes --{flag} to `sessionlog {}`, which takes {fields:?}",
                words[0]
            );
        }
    }
}

#[test]
fn kafka_image_is_the_version_the_native_stack_runs() {
    let compose = compose();
    let image = scalar(
        service(&compose, "kafka")
            .get("image")
            .expect("kafka has an image"),
    );
    let version = pinned("scripts/lib/common.sh", "KAFKA_VERSION=");
    assert_eq!(
        image,
        format!("apache/kafka:{version}"),
        "compose runs {image}, the native stack (and so the tests) Kafka {version}"
    );
}

/// The version `file` pins on its line starting with `prefix` (`KAFKA_VERSION=`).
fn pinned(file: &str, prefix: &str) -> String {
    read(file)
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("{file} has no line {prefix}..."))
        .trim()
        .to_string()
}

/// The `FROM` lines of the Dockerfile, as (image, stage name).
fn dockerfile_stages(dockerfile: &str) -> Vec<(String, Option<String>)> {
    dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .map(|rest| {
            let words: Vec<&str> = rest
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let stage = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            (words[0].to_string(), stage)
        })
        .collect()
}

#[test]
fn dockerfile_builds_the_cli_and_runs_sessionlog() {
    let dockerfile = read("Dockerfile");
    let build = dockerfile
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("the Dockerfile runs no `cargo build`");
    assert!(
        build.contains("--release")
            && (build.contains("-p sessionlog-cli") || build.contains("--package sessionlog-cli")),
        "the Dockerfile's build is `{}`, not a release build of sessionlog-cli",
        build.trim()
    );
    let cli_manifest = read("cli/Cargo.toml");
    assert!(
        cli_manifest.contains("name = \"sessionlog-cli\"")
            && cli_manifest.contains("name = \"sessionlog\""),
        "cli/Cargo.toml no longer names the package sessionlog-cli with a `sessionlog` binary"
    );
    assert!(
        dockerfile.contains("target/release/sessionlog"),
        "the Dockerfile does not copy target/release/sessionlog out of the build"
    );

    let stages = dockerfile_stages(&dockerfile);
    assert!(
        stages.len() >= 2,
        "the Dockerfile should be multi-stage (builder + runtime): {stages:?}"
    );
    let runtime_start = dockerfile.rfind("\nFROM ").expect("a runtime stage");
    let entrypoint = dockerfile[runtime_start..]
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("ENTRYPOINT"))
        .expect("the runtime stage sets no ENTRYPOINT")
        .trim();
    assert!(
        entrypoint == r#"["sessionlog"]"# || entrypoint == "sessionlog",
        "the runtime ENTRYPOINT is {entrypoint}, not sessionlog (compose passes only the subcommand)"
    );

    // The binary links glibc dynamically: build and run on the same Debian release.
    let codename = |image: &str| {
        ["bookworm", "trixie", "bullseye"]
            .into_iter()
            .find(|c| image.contains(c))
            .map(String::from)
    };
    let builder = codename(&stages[0].0);
    let runtime = codename(&stages[stages.len() - 1].0);
    assert!(
        builder.is_some() && builder == runtime,
        "builder {} and runtime {} are not the same Debian release",
        stages[0].0,
        stages[stages.len() - 1].0
    );
}

#[test]
fn docker_build_context_leaves_out_build_output_and_stack_state() {
    let ignore = read(".dockerignore");
    let entries: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_start_matches('/').trim_end_matches('/'))
        .collect();
    for needed in ["target", ".stack", ".git"] {
        assert!(
            entries.contains(&needed),
            ".dockerignore does not exclude {needed}/ (it has {entries:?})"
        );
    }
}

#[test]
fn the_otlp_export_sends_to_the_phoenix_service_once_it_is_healthy() {
    let compose = compose();
    let words = command_of(&compose, "otlp-export");
    let endpoint = words
        .iter()
        .skip_while(|w| *w != "--endpoint")
        .nth(1)
        .expect("otlp-export passes --endpoint");
    let (host, port) = url_host_port(endpoint);
    let phoenix_ports: Vec<u16> = published_ports(&compose, "phoenix")
        .iter()
        .map(|p| p.1)
        .collect();
    assert!(
        host == "phoenix" && phoenix_ports.contains(&port) && endpoint.ends_with("/v1/traces"),
        "otlp-export sends to {endpoint}; Phoenix takes OTLP/HTTP at phoenix:{phoenix_ports:?}/v1/traces"
    );
    let condition = service(&compose, "otlp-export")
        .get("depends_on")
        .and_then(|d| d.get("phoenix"))
        .and_then(|d| d.get("condition"))
        .map(scalar);
    assert_eq!(condition.as_deref(), Some("service_healthy"));
    assert!(service(&compose, "phoenix").get("healthcheck").is_some());
}

/// The binary's long-running services: the subcommands that serve `/health` (they take
/// `--listen`), each with the default port of its settings' `listen`, if it has one.
fn serving_commands() -> BTreeMap<String, Option<u16>> {
    let defaults = Settings::default();
    let default_port = |listen: &str| Some(host_port(listen).1);
    cli_subcommands()
        .into_iter()
        .filter(|(_, flags)| flags.iter().any(|f| f == "listen"))
        .map(|(command, _)| {
            let port = match command.as_str() {
                "ingest" => default_port(&defaults.ingest.listen),
                "serve-recovery" => default_port(&defaults.recovery.listen),
                _ => None,
            };
            (command, port)
        })
        .collect()
}

/// The compose services running `sessionlog <command>`.
fn services_running(compose: &Yaml, command: &str) -> Vec<String> {
    OUR_SERVICES
        .iter()
        .filter(|name| command_of(compose, name).first().map(String::as_str) == Some(command))
        .map(|name| name.to_string())
        .collect()
}

/// A service's healthcheck as words: `["CMD", tool, args...]`, or the shell line split.
fn healthcheck_words(compose: &Yaml, name: &str) -> Vec<String> {
    let test = service(compose, name)
        .get("healthcheck")
        .and_then(|h| h.get("test"))
        .unwrap_or_else(|| panic!("`{name}` has no healthcheck"));
    let words: Vec<String> = match test {
        Yaml::Sequence(words) => words.iter().map(scalar).collect(),
        Yaml::String(line) => line.split_whitespace().map(String::from).collect(),
        other => panic!("`{name}`: healthcheck test is neither a list nor a string: {other:?}"),
    };
    match words.first().map(String::as_str) {
        Some("CMD") => words[1..].to_vec(),
        Some("CMD-SHELL") => words[1..]
            .iter()
            .flat_map(|w| w.split_whitespace().map(String::from).collect::<Vec<_>>())
            .collect(),
        _ => words,
    }
}

/// The packages the Dockerfile's runtime stage installs with apt-get.
fn runtime_packages() -> Vec<String> {
    let dockerfile = read("Dockerfile");
    let runtime = &dockerfile[dockerfile.rfind("\nFROM ").expect("a runtime stage")..];
    runtime
        .split("apt-get install")
        .skip(1)
        .flat_map(|rest| {
            rest.split("&&")
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .filter(|w| !w.starts_with('-') && *w != "\\")
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_service_we_ship_runs_with_a_readiness_healthcheck_on_the_port_it_listens_on() {
    let compose = compose();
    let commands = serving_commands();
    for expected in ["project", "wake", "ingest", "serve-recovery", "export-otlp"] {
        assert!(
            commands.contains_key(expected),
            "`sessionlog {expected}` no longer takes --listen: {commands:?}"
        );
    }
    let installed = runtime_packages();
    for (command, default_port) in &commands {
        let names = services_running(&compose, command);
        assert!(
            !names.is_empty(),
            "no compose service runs `sessionlog {command}`, a service we ship"
        );
        for name in names {
            let words = command_of(&compose, &name);
            let listen = words
                .iter()
                .skip_while(|w| *w != "--listen")
                .nth(1)
                .unwrap_or_else(|| panic!("`{name}` runs `sessionlog {command}` without --listen"));
            let (host, port) = host_port(listen);
            assert!(
                host == "0.0.0.0" || host == "[::]",
                "`{name}` listens on {listen}: inside a container, other containers, the \
                 published port and the healthcheck need 0.0.0.0"
            );
            if let Some(default_port) = default_port {
                assert_eq!(
                    port, *default_port,
                    "`{name}` listens on {port}, the settings' default (and the README) say {default_port}"
                );
            }
            assert!(
                ports(&compose, &name)
                    .iter()
                    .any(|(_, container)| *container == port),
                "`{name}` does not publish {port}, where it serves /metrics"
            );
            let check = healthcheck_words(&compose, &name);
            let url = check
                .iter()
                .find(|w| w.starts_with("http://"))
                .unwrap_or_else(|| panic!("`{name}`'s healthcheck asks no URL: {check:?}"));
            assert!(
                url == &format!("http://localhost:{port}/health/ready")
                    || url == &format!("http://127.0.0.1:{port}/health/ready"),
                "`{name}`'s healthcheck asks {url}, not /health/ready on {port}, where it listens"
            );
            let tool = &check[0];
            assert!(
                tool == "sessionlog" || installed.contains(tool),
                "`{name}`'s healthcheck runs {tool}, which the runtime image does not install \
                 (it installs {installed:?})"
            );
        }
    }
}

#[test]
fn the_projector_scales_without_a_fixed_name_host_port_or_instance_id() {
    let compose = compose();
    let projector = service(&compose, "projector");
    assert!(
        projector.get("container_name").is_none(),
        "a container_name stops `docker compose up --scale projector=3`"
    );
    let fixed: Vec<u16> = ports(&compose, "projector")
        .iter()
        .filter_map(|(host, _)| *host)
        .collect();
    assert!(
        fixed.is_empty(),
        "the projector publishes fixed host ports {fixed:?}: a second replica could not bind them"
    );
    assert!(
        !env_of(&compose, "projector").contains_key("SESSIONLOG_PROJECTOR__INSTANCE_ID"),
        "every replica would share one [projector] instance_id and fence the others"
    );
}

#[test]
fn the_store_creates_keyspaces_scylladb_with_tablets_accepts() {
    let cql = sessionlog_store::migrations::create_keyspace_cql("sessionlog", 1);
    assert!(
        cql.contains("'class': 'NetworkTopologyStrategy'") && !cql.contains("SimpleStrategy"),
        "the store creates keyspaces with `{cql}`; ScyllaDB refuses SimpleStrategy with tablets"
    );
    let image = scalar(
        service(&compose(), "scylla")
            .get("image")
            .expect("scylla has an image"),
    );
    assert!(image.starts_with("scylladb/scylla:"), "{image}");
}

/// The tag of `name`'s image.
fn image_tag(compose: &Yaml, name: &str) -> String {
    let image = scalar(
        service(compose, name)
            .get("image")
            .unwrap_or_else(|| panic!("`{name}` has no image")),
    );
    image
        .rsplit_once(':')
        .map(|(_, tag)| tag.to_string())
        .unwrap_or_else(|| panic!("`{name}` runs {image} without a tag"))
}

#[test]
fn the_servers_images_are_pinned_to_the_versions_the_scripts_run() {
    let compose = compose();
    for name in SERVERS.iter().chain(&["phoenix"]) {
        let tag = image_tag(&compose, name);
        assert!(
            tag != "latest"
                && tag
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit() || c == 'v'),
            "`{name}` is not pinned to a release: {tag}"
        );
    }
    let phoenix = pinned("scripts/phoenix-requirements.txt", "arize-phoenix==");
    assert_eq!(
        image_tag(&compose, "phoenix"),
        format!("version-{phoenix}"),
        "compose runs another Phoenix than scripts/stack up --with-traces"
    );
    // Confluent Platform N+4 is built on Apache Kafka N (7.x on 3.x, 8.x on 4.x).
    let major = |version: &str| -> u32 {
        version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("{version} has no major version"))
    };
    let kafka = major(&image_tag(&compose, "kafka"));
    let confluent = major(&image_tag(&compose, "schema-registry"));
    assert_eq!(
        confluent,
        kafka + 4,
        "cp-schema-registry {confluent}.x belongs with Kafka {}.x, the compose broker is {kafka}.x",
        confluent - 4
    );
}

#[test]
fn the_files_the_comments_name_exist() {
    for file in ["docker-compose.yml", "Dockerfile"] {
        let text = read(file);
        let comments = text
            .lines()
            .filter_map(|l| l.split_once('#').map(|(_, c)| c))
            .collect::<Vec<_>>()
            .join(" ");
        for word in comments.split(|c: char| c.is_whitespace() || "(),;`".contains(c)) {
            let path = word.trim_end_matches(['.', ':']);
            let repo_path = path.contains('/')
                && !path.starts_with(['/', '.', '<'])
                && !path.contains("://")
                && [".rs", ".sh", ".txt", ".toml", ".tmpl", ".md", ".yml"]
                    .iter()
                    .any(|ext| path.ends_with(ext));
            if repo_path {
                assert!(
                    repo_root().join(path).exists(),
                    "{file} names {path} in a comment, which does not exist"
                );
            }
        }
    }
}
