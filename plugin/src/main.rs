//! The `topolet` binary: command-line parsing and composition only; the work lives in the library.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use topolet::config::Config;
use topolet::telemetry::logging::LogFormat;

/// The version this build reports (`topolet --version`, and through [`topolet::set_version`]
/// `topolet status` and `topolet_build_info`): the crate's, unless the build sets
/// `TOPOLET_VERSION` (a packager's suffix; the Helm suite's upgrade image is such a build).
/// Read here, not in the library, so that such a build recompiles only this file.
const VERSION: &str = match option_env!("TOPOLET_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// Exit codes (documented in `topolet --help` and the generated reference, from [`EXIT_CODES`]).
const EXIT_FAILURE: u8 = 1;
const EXIT_USAGE: u8 = 2;
/// `topolet status` could not reach the running plugin.
const EXIT_UNREACHABLE: u8 = 3;

/// Every exit code with its meaning: `--help`'s last line and `docs/src/reference/cli.md`.
const EXIT_CODES: [(u8, &str); 4] = [
    (0, "success"),
    (EXIT_FAILURE, "the command failed (the message says why)"),
    (EXIT_USAGE, "bad usage or invalid configuration"),
    (
        EXIT_UNREACHABLE,
        "(status) the running plugin could not be reached",
    ),
];

/// `--help`'s last line: [`EXIT_CODES`].
fn exit_codes_help() -> String {
    let codes: Vec<String> = EXIT_CODES
        .iter()
        .map(|(code, meaning)| format!("{code} {meaning}"))
        .collect();
    format!("Exit codes: {}.", codes.join("; "))
}

#[derive(Parser)]
#[command(
    name = "topolet",
    version = VERSION,
    about = "Kubelet-grade, topology-aware resource management for containerd, as an NRI plugin",
    after_help = exit_codes_help()
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// Where a pre-installed plugin (launched by containerd with no arguments) finds its config.
const PREINSTALLED_CONFIG: &str = "/etc/topolet/config.toml";
/// Where a pre-installed plugin logs (containerd connects its stdout and stderr to /dev/null).
const PREINSTALLED_LOG: &str = "/var/log/topolet/topolet.log";

#[derive(Subcommand)]
enum Command {
    /// Run the NRI plugin: register with containerd and rewrite every container's resources.
    #[command(after_help = RUN_HELP)]
    Run {
        /// Node configuration file (TOML); defaults apply without one.
        #[arg(long, value_name = "FILE.toml")]
        config: Option<PathBuf>,
        /// Root of the sysfs tree to read the machine from.
        #[arg(long, value_name = "DIR", default_value = "/sys")]
        sysfs_root: PathBuf,
        /// Append logs to this file instead of stderr.
        #[arg(long, value_name = "PATH")]
        log_file: Option<PathBuf>,
        /// Log line format.
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
    },
    /// What-if placement: admit pods in order on a machine and print each container's resources as JSON.
    #[command(
        after_help = "Examples:\n  topolet plan --sysfs-root /sys --pods pods.yaml\n  kubectl get pods -o json | topolet plan --sysfs-root fixtures/2s-24c-ht --config node.toml --pods -"
    )]
    Plan {
        /// Root of the sysfs tree to read the machine from.
        #[arg(long, value_name = "DIR", default_value = "/sys")]
        sysfs_root: PathBuf,
        /// Node configuration file (TOML); defaults apply without one.
        #[arg(long, value_name = "FILE.toml")]
        config: Option<PathBuf>,
        /// Pods as JSON or YAML: one Pod, a List of Pods, or an array; `-` reads stdin.
        #[arg(long, value_name = "FILE")]
        pods: PathBuf,
        /// The devices each container was given, with their NUMA nodes: a JSON object mapping
        /// "namespace/pod/container" to [{"id": "/dev/nvidia1", "numa": 1}, …] ("numa" left out:
        /// no locality). Their nodes are topology hints, as a container's device nodes are.
        #[arg(long, value_name = "DEVICES.json")]
        devices: Option<PathBuf>,
    },
    /// Eviction order under one signal's pressure, as the kubelet ranks pods: prints a JSON
    /// array of "namespace/name", first evicted first.
    #[command(after_help = RANK_HELP)]
    Rank {
        /// The pressured signal: memory.available, nodefs.available, nodefs.inodesFree,
        /// imagefs.available, imagefs.inodesFree or pid.available.
        #[arg(long, value_name = "SIGNAL", value_parser = parse_signal)]
        signal: topolet_core::eviction::Signal,
        /// Pods as JSON or YAML: one Pod, a List of Pods, or an array; `-` reads stdin.
        #[arg(long, value_name = "FILE")]
        pods: PathBuf,
        /// Per-pod usage: a JSON object mapping "namespace/name" to usage (see below).
        #[arg(long, value_name = "USAGE.json")]
        usage: PathBuf,
    },
    /// Node pressure conditions now (MemoryPressure, DiskPressure, PIDPressure), as a
    /// node-problem-detector custom plugin: one line on stdout, exit 0 OK, 1 under pressure,
    /// 2 unknown.
    #[command(after_help = CONDITIONS_HELP)]
    Conditions {
        /// Node configuration file (TOML): its [eviction] thresholds; kubelet defaults without one.
        #[arg(long, value_name = "FILE.toml")]
        config: Option<PathBuf>,
    },
    /// Take back what topolet published in the cluster, on every node: its node conditions,
    /// pressure taints, reclaimed-CPU extended resource and NodeResourceTopology objects (at
    /// uninstall: the Helm chart's post-delete hook runs it). Credentials: KUBECONFIG, else the
    /// in-cluster service account.
    #[command(after_help = WITHDRAW_HELP)]
    Withdraw {
        /// An extended resource name to remove besides the default (repeatable).
        #[arg(long, value_name = "NAME")]
        extended_resource: Vec<String>,
        /// A node configuration whose [reclaimed] resource_name is removed too (repeatable).
        #[arg(long, value_name = "FILE.toml")]
        config: Vec<PathBuf>,
    },
    /// Check an installation: every topolet pod of a namespace matching a label selector is
    /// Running and answers on its HTTP endpoint, /readyz 200 (synchronized with the runtime) and
    /// /metrics 200 (the Helm chart's test hook runs it). Credentials: KUBECONFIG, else the
    /// in-cluster service account.
    Probe {
        /// The namespace of the topolet pods (default: this pod's own).
        #[arg(long)]
        namespace: Option<String>,
        /// Their label selector.
        #[arg(long, default_value = "app.kubernetes.io/name=topolet")]
        selector: String,
        /// Their metrics port ([metrics] address).
        #[arg(long, default_value_t = 9464)]
        port: u16,
        /// Connect to this address instead of each pod's IP, and probe only the pods of --node (a
        /// loopback [metrics] address on the host's network: reachable from that node only).
        #[arg(long, requires = "node")]
        host: Option<String>,
        /// The node this probe runs on.
        #[arg(long)]
        node: Option<String>,
        /// Reach the pods of --node at this address (on the host's network, the node's own
        /// loopback), the others at their pod IP.
        #[arg(long, requires = "node")]
        local_address: Option<String>,
        /// Also write the report to this file (a pod's /dev/termination-log: the result shows
        /// in the pod's status, `kubectl describe pod`).
        #[arg(long, value_name = "PATH")]
        report_file: Option<PathBuf>,
    },
    /// Show the running plugin's view of the node: topology, reserved / shared / exclusive CPUs
    /// per NUMA node, free capacity and the largest aligned free blocks, the NRI connection and
    /// pressure conditions.
    #[command(after_help = STATUS_HELP)]
    Status {
        /// The running plugin's admin socket ([admin] socket in its configuration).
        #[arg(long, value_name = "PATH", default_value = "/run/topolet/admin.sock")]
        admin_socket: PathBuf,
        /// Output format: an aligned table for people, JSON for scripts.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: StatusFormat,
    },
    /// Configuration commands.
    #[command(
        after_help = "Example:\n  topolet config check /etc/topolet/config.toml --sysfs-root /sys"
    )]
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file against this machine (or a sysfs tree); exit 2 when invalid.
    #[command(after_help = CHECK_HELP)]
    Check {
        /// The configuration file.
        file: PathBuf,
        /// Root of the sysfs tree to validate against.
        #[arg(long, value_name = "DIR", default_value = "/sys")]
        sysfs_root: PathBuf,
    },
}

fn main() -> ExitCode {
    topolet::set_version(VERSION);
    let cli = Cli::parse();
    let command = match cli.command {
        Some(c) => c,
        // containerd launches pre-installed plugins without arguments, with NRI_PLUGIN_SOCKET set.
        None if std::env::var_os(topolet_nri::config::ENV_PLUGIN_SOCKET).is_some() => {
            let config = PathBuf::from(PREINSTALLED_CONFIG);
            Command::Run {
                config: config.exists().then_some(config),
                sysfs_root: PathBuf::from("/sys"),
                log_file: Some(PathBuf::from(PREINSTALLED_LOG)),
                log_format: LogFormat::Text,
            }
        }
        None => {
            use clap::CommandFactory;
            let _ = Cli::command().print_help();
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let result = match command {
        Command::Run {
            config,
            sysfs_root,
            log_file,
            log_format,
        } => run(
            config.as_deref(),
            &sysfs_root,
            log_format,
            log_file.as_deref(),
        ),
        Command::Plan {
            sysfs_root,
            config,
            pods,
            devices,
        } => plan(&sysfs_root, config.as_deref(), &pods, devices.as_deref()),
        Command::Config {
            command: ConfigCommand::Check { file, sysfs_root },
        } => config_check(&file, &sysfs_root),
        Command::Status {
            admin_socket,
            output,
        } => return status(&admin_socket, output),
        Command::Rank {
            signal,
            pods,
            usage,
        } => rank(signal, &pods, &usage),
        Command::Conditions { config } => return conditions(config.as_deref()),
        Command::Withdraw {
            extended_resource,
            config,
        } => withdraw(&extended_resource, &config),
        Command::Probe {
            namespace,
            selector,
            port,
            host,
            node,
            local_address,
            report_file,
        } => probe(
            namespace,
            topolet::introspection::probe::Target {
                namespace: String::new(),
                selector,
                port,
                host,
                node,
                local_address,
            },
            report_file.as_deref(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("topolet: {}", describe(&e));
            let usage = e.chain().any(|c| {
                c.downcast_ref::<topolet::config::ConfigError>().is_some()
                    || c.downcast_ref::<RankInputError>().is_some()
                    || c.downcast_ref::<topolet_core::placement::PlacementError>()
                        .is_some_and(|p| p.is_config())
            });
            ExitCode::from(if usage { EXIT_USAGE } else { EXIT_FAILURE })
        }
    }
}

const CONDITIONS_HELP: &str = "Examples:
  topolet conditions --config /etc/topolet/config.toml
  # node-problem-detector custom plugin monitor rule:
  #   {\"type\": \"permanent\", \"condition\": \"MemoryPressure\", \"path\": \"/usr/local/bin/topolet\",
  #    \"args\": [\"conditions\", \"--config\", \"/etc/topolet/config.toml\"]}

Reads memory.available (root cgroup working set), nodefs/imagefs (statvfs) and pid.available once,
compares them with the [eviction] hard and soft thresholds (no grace periods: one snapshot), and
prints one line of at most 80 bytes.

Exit codes: 0 no pressure; 1 pressure (the line names the signals); 2 unknown (a signal could not
be read, or the configuration is invalid).";

const RUN_HELP: &str = "Examples:
  topolet run --config /etc/topolet/config.toml
  TOPOLET_LOG=debug topolet run --config node.toml --log-format json
  topolet run --config node.toml --log-file /var/log/topolet/topolet.log

Registers with containerd over [nri] socket and places every container until SIGTERM or SIGINT.
Restarting is safe: running containers keep their cpusets and are taken over at Synchronize.

Reload: on SIGHUP (systemctl reload topolet) and when the file changes (checked every 2s), the
file is validated as `config check` does. A valid one applies to containers created from then
on; an invalid one, or one that would break running containers (e.g. cpu.policy none while
containers hold exclusive cpus), is rejected and logged naming file and key, and the running one
stays. The keys `config check` lists as read only at start ([nri], [state], [reclaimed]
resource_name, ...) need a restart.

Pre-installed mode: started by containerd with no arguments and NRI_PLUGIN_SOCKET set, topolet
reads /etc/topolet/config.toml (defaults if absent) and logs to /var/log/topolet/topolet.log.

Log level: TOPOLET_LOG (tracing EnvFilter syntax, default info).

Exit codes: 0 stopped by a signal or by containerd closing the connection; 1 failed (machine
unreadable, NRI connection lost); 2 invalid configuration.";

const WITHDRAW_HELP: &str = "Examples:
  KUBECONFIG=~/.kube/config topolet withdraw
  topolet withdraw --config /etc/topolet/config.toml --config pool-latency.toml

The reclaimed-CPU extended resource is removed under the default name (topolet.io/reclaimed-cpu),
every --extended-resource and the [reclaimed] resource_name of every --config, read as `topolet
run` reads it. A configuration that cannot be read is reported naming the file and key after the
others' names are withdrawn.

Exit codes: 0 withdrawn; 1 the API could not be reached or refused a change; 2 a --config could
not be read (everything else was withdrawn).";

const CHECK_HELP: &str = "Examples:
  topolet config check /etc/topolet/config.toml
  topolet config check node.toml --sysfs-root plugin/tests/fixtures/sysfs/ci-host-captured

Checks syntax and every key (unknown keys are errors), then builds the policies against the
machine: reserved cpus that do not exist, memory reserved on a missing NUMA node or above its
capacity, PCI devices that do not exist, more NUMA nodes than the topology policy allows, cpu
options that need policy static. Prints `FILE: ok` (and any warnings on stderr), then a line
naming the keys a running topolet reads only at start: a change to them needs a restart, a
reload applies the rest.

Exit codes: 0 valid; 1 the machine could not be read; 2 invalid, with one line naming the file,
the key and the problem, e.g.
  topolet: /etc/topolet/config.toml: cpu.reserved_cpus: cpus 96 do not exist on this machine (online: 0-95)";

const STATUS_HELP: &str = "Examples:
  topolet status
  topolet status -o json | jq '.numa_nodes[] | {id, free, largest_l3_block}'
  topolet status --admin-socket /run/topolet/admin.sock

The admin socket is root-only (mode 0600): run as root.

Exit codes: 0 status printed; 1 topolet answered with an error, or the answer was not understood;
3 the plugin could not be reached (socket missing, permission denied, nobody listening).";

#[derive(Clone, Copy, clap::ValueEnum)]
enum StatusFormat {
    Table,
    Json,
}

/// `topolet status`: asks the running plugin over its admin socket and prints the answer.
fn status(socket: &Path, output: StatusFormat) -> ExitCode {
    use std::io::Write;
    let status = match topolet::introspection::admin::query_status(socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("topolet: {e}");
            return ExitCode::from(if e.is_unreachable() {
                EXIT_UNREACHABLE
            } else {
                EXIT_FAILURE
            });
        }
    };
    let text = match output {
        StatusFormat::Table => topolet::introspection::status_table::render_table(&status),
        StatusFormat::Json => match serde_json::to_string_pretty(&status) {
            Ok(j) => j + "\n",
            Err(e) => {
                eprintln!("topolet: encoding the status as JSON: {e}");
                return ExitCode::from(EXIT_FAILURE);
            }
        },
    };
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::stdout().write_all(text.as_bytes());
    ExitCode::SUCCESS
}

/// `topolet conditions`: one observation of the node's signals against the thresholds.
fn conditions(config: Option<&Path>) -> ExitCode {
    use topolet_core::eviction::{npd, NodeCondition, SignalObservation};
    // The whole reason on stderr, the node-problem-detector line (cut to its size) on stdout.
    let unknown = |reason: &str| {
        eprintln!("topolet: {reason}");
        println!(
            "{}",
            npd::truncate_message(&format!("unknown: {reason}"), npd::NPD_MAX_OUTPUT_LENGTH)
        );
        ExitCode::from(npd::NpdStatus::Unknown.exit_code())
    };
    let config = match load_config(config) {
        Ok(c) => c,
        Err(e) => return unknown(&describe(&e)),
    };
    let eviction = match config.eviction() {
        Ok(e) => e,
        Err(e) => return unknown(&e.to_string()),
    };
    // No NRI connection here: the runtime is the one whose CRI socket exists.
    let runtime = topolet::pressure::wiring::runtime_by_socket(std::path::Path::new("/"));
    let sources = topolet::pressure::signals::SignalSources {
        root: PathBuf::from("/"),
        nodefs: eviction.nodefs_path.clone(),
        imagefs: eviction.imagefs_path_for(runtime),
    };
    let observations = topolet::pressure::observation::observations(&sources.observe())
        .into_iter()
        .map(|(signal, o)| {
            (
                signal,
                SignalObservation {
                    available: o.available,
                    capacity: o.capacity,
                    time: None,
                },
            )
        })
        .collect();
    let report = npd::npd_report(
        &eviction,
        &observations,
        &std::collections::BTreeSet::<NodeCondition>::new(),
    );
    println!("{}", report.message);
    ExitCode::from(report.status.exit_code())
}

/// The error and its causes on one line, skipping a cause its parent already quotes.
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Ok(Config::load(p)?),
        None => Ok(Config::default()),
    }
}

fn plan(
    sysfs_root: &Path,
    config: Option<&Path>,
    pods: &Path,
    devices: Option<&Path>,
) -> anyhow::Result<()> {
    let config = load_config(config)?;
    let text = if pods == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading pods from stdin")?;
        s
    } else {
        std::fs::read_to_string(pods).with_context(|| format!("{}: cannot read", pods.display()))?
    };
    let topology = topolet::host::sysfs::discover(sysfs_root)?;
    let pods = topolet_core::kube::pod_input::parse_pods(&text)
        .with_context(|| format!("{}", pods.display()))?;
    let devices = match devices {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read", path.display()))?;
            topolet_core::placement::plan::parse_plan_devices(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => Default::default(),
    };
    let out = topolet_core::placement::plan::plan_with_devices(
        &topology,
        &config.placement()?,
        &pods,
        &devices,
    )?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn config_check(file: &Path, sysfs_root: &Path) -> anyhow::Result<()> {
    let config = Config::load(file)?;
    let topology = topolet::host::sysfs::discover(sysfs_root)?;
    let (_, warnings) = config
        .placement()
        .and_then(|settings| topolet_core::placement::Placement::new(&topology, &settings))
        .with_context(|| format!("{}", file.display()))?;
    for w in warnings {
        eprintln!("topolet: warning: {}: {w}", file.display());
    }
    println!("{}: ok", file.display());
    // No running configuration to compare with here: which keys a reload would not apply.
    println!(
        "{}: {}",
        file.display(),
        topolet::config::reload::read_at_start_line()
    );
    Ok(())
}

/// The API credentials of the commands that need them (`probe`, `withdraw`): KUBECONFIG, else
/// the in-cluster service account; an error without either.
fn cli_credentials() -> anyhow::Result<topolet::cluster::client::Credentials> {
    use topolet::cluster::client;
    use topolet::config::{KubernetesConfig, KubernetesEnabled};
    let config = KubernetesConfig {
        enabled: KubernetesEnabled::On,
        ..KubernetesConfig::default()
    };
    client::credentials(
        &config,
        std::env::var_os("KUBECONFIG").as_deref(),
        client::in_cluster_available(),
    )
    .map_err(anyhow::Error::msg)?
    .context("no Kubernetes credentials")
}

/// A one-thread runtime for a command's few API calls.
fn cli_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The namespace of this pod's service account, when it runs in one.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// `topolet probe`: `target` with its namespace from `namespace`, else this pod's own.
fn probe(
    namespace: Option<String>,
    mut target: topolet::introspection::probe::Target,
    report_file: Option<&Path>,
) -> anyhow::Result<()> {
    use topolet::cluster::client;
    let creds = cli_credentials()?;
    let namespace = match namespace {
        Some(n) => n,
        None => std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
            .map(|n| n.trim().to_string())
            .with_context(|| {
                format!("--namespace not given and {SERVICE_ACCOUNT_NAMESPACE} not readable")
            })?,
    };
    let runtime = cli_runtime()?;
    let probes = runtime.block_on(async {
        let c = client::client(&creds).await?;
        target.namespace = namespace;
        topolet::introspection::probe::probe_pods(c, &target).await
    })?;
    let mut failed = Vec::new();
    let mut report = String::new();
    for p in &probes {
        let line = match &p.result {
            Ok(len) => format!(
                "node {} pod {}: /readyz 200 (synchronized), /metrics 200 ({len} bytes)",
                p.node, p.pod
            ),
            Err(e) => {
                failed.push(format!("{} (node {}): {e}", p.pod, p.node));
                format!("node {} pod {}: FAILED: {e}", p.node, p.pod)
            }
        };
        println!("{line}");
        report.push_str(&line);
        report.push('\n');
    }
    if let Some(path) = report_file {
        std::fs::write(path, &report)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {} topolet pods failed: {}",
        failed.len(),
        probes.len(),
        failed.join("; ")
    );
    Ok(())
}

/// `topolet withdraw`: see `topolet::cluster::withdraw`. A configuration that cannot be read
/// does not stop the rest: every other name is withdrawn first, then the command fails naming the
/// file and key (exit 2), since the name that file sets may still be on the nodes.
fn withdraw(named: &[String], configs: &[PathBuf]) -> anyhow::Result<()> {
    use topolet::cluster::{client, withdraw};
    let (names, unreadable) = withdraw::resource_names(named, configs);
    let done = cli_credentials().and_then(|creds| {
        let done = cli_runtime()?.block_on(async {
            let c = client::client(&creds).await?;
            withdraw::withdraw(c, &names).await
        })?;
        Ok((creds, done))
    });
    let (creds, done) = match done {
        Ok(d) => d,
        Err(e) => {
            // The unreadable configurations are said too: the next run needs them fixed.
            for u in &unreadable {
                eprintln!("topolet: {u}");
            }
            return Err(e);
        }
    };
    println!(
        "withdrawn ({}): node conditions {:?}; taints {:?}; extended resources {:?} (of {names:?}); \
         NodeResourceTopology objects {:?}",
        creds.describe(),
        done.conditions,
        done.taints,
        done.extended_resources,
        done.nrt_objects
    );
    let mut unreadable = unreadable.into_iter();
    let Some(first) = unreadable.next() else {
        return Ok(());
    };
    for e in unreadable {
        eprintln!("topolet: {e}");
    }
    Err(anyhow::Error::new(first).context(format!(
        "withdrew the extended resources {names:?}, but not the one a configuration that \
         cannot be read may name (fix it and run again, or name it with --extended-resource)"
    )))
}

fn run(
    config: Option<&Path>,
    sysfs_root: &Path,
    log_format: LogFormat,
    log_file: Option<&Path>,
) -> anyhow::Result<()> {
    topolet::telemetry::logging::init(log_format, log_file).with_context(|| {
        format!(
            "opening log file {}",
            log_file
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )
    })?;
    let config_path = config;
    let config = load_config(config)
        .inspect_err(|e| tracing::error!(error = %format!("{e:#}"), "invalid configuration"))?;
    topolet::run::run(config, config_path, sysfs_root)
        .inspect_err(|e| tracing::error!(error = %format!("{e:#}"), "topolet stopped"))
}

const RANK_HELP: &str = "Examples:
  topolet rank --signal memory.available --pods pods.yaml --usage usage.json
  kubectl get pods -A -o json | topolet rank --signal pid.available --pods - --usage usage.json

USAGE.json maps \"namespace/name\" to
  {\"memory_working_set\": \"199Mi\", \"processes\": 10, \"disk\": \"1Gi\", \"inodes\": 100}
(quantities or plain numbers; a missing field is 0). A pod missing from USAGE.json has no
statistics and ranks first, as in the kubelet. Order: memory and disk signals put pods using more
than their request first, then lower priority, then larger usage above request; pid.available
puts lower priority first, then more processes. Guaranteed pods come after all others and
critical pods (static, mirror, priority >= 2000000000) last; ties go by namespace/name.

Exit codes: 0 success; 2 bad usage (unknown signal, unreadable or invalid pods or usage file).";

fn parse_signal(text: &str) -> Result<topolet_core::eviction::Signal, String> {
    topolet_core::eviction::Signal::parse(text).map_err(|e| e.to_string())
}

/// A `topolet rank` input problem (exit 2): the message names the file and the entry.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RankInputError(String);

/// The text of `path`, or of stdin for `-`.
fn read_input(path: &Path) -> Result<String, RankInputError> {
    let mut text = String::new();
    let read = if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|e| RankInputError(format!("{}: cannot read: {e}", path.display())))?;
    Ok(text)
}

fn rank(
    signal: topolet_core::eviction::Signal,
    pods_path: &Path,
    usage_path: &Path,
) -> anyhow::Result<()> {
    let pods = topolet_core::kube::pod_input::parse_pods(&read_input(pods_path)?)
        .map_err(|e| RankInputError(format!("{}: {e}", pods_path.display())))?;
    let usage = topolet_core::eviction::usage_input::parse_usage(&read_input(usage_path)?)
        .map_err(|e| RankInputError(format!("{}: {e}", usage_path.display())))?;
    if let Some(unknown) = usage.keys().find(|k| !pods.iter().any(|p| &p.key() == *k)) {
        return Err(RankInputError(format!(
            "{}: {unknown:?}: no such pod in {}",
            usage_path.display(),
            pods_path.display()
        ))
        .into());
    }
    let order = topolet_core::eviction::rank_keys(signal, &pods, &usage);
    println!("{}", serde_json::to_string(&order)?);
    Ok(())
}

#[cfg(test)]
#[allow(dead_code)]
#[path = "reference/page.rs"]
mod page;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// `docs/src/reference/cli.md`: every subcommand's `--help`, and [`EXIT_CODES`].
    fn cli_reference() -> String {
        fn walk(cmd: &clap::Command, out: &mut String) {
            let name = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
            let help = cmd.clone().render_long_help().to_string();
            let lines: Vec<&str> = help.trim_end().lines().map(str::trim_end).collect();
            out.push_str(&format!(
                "\n## `{name}`\n\n```text\n{}\n```\n",
                lines.join("\n")
            ));
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                walk(sub, out);
            }
        }
        let mut out = format!(
            "# Command line\n\n{}\n\n\
             The `topolet` binary's subcommands, each as its `--help` prints it (see \
             [Commands](../commands.md) for what they are for), and its exit codes \
             ([Exit codes](../exit-codes.md)). Started by containerd as a pre-installed NRI \
             plugin (no arguments, `{ENV}` set), it runs `topolet run` with \
             `{PREINSTALLED_CONFIG}` when that file exists and logs to `{PREINSTALLED_LOG}`.\n\n\
             ## Exit codes\n\n| code | meaning |\n|---|---|\n",
            page::GENERATED,
            ENV = topolet_nri::config::ENV_PLUGIN_SOCKET,
        );
        for (code, meaning) in EXIT_CODES {
            out.push_str(&format!("| {code} | {} |\n", page::cell(meaning)));
        }
        out.push_str(
            "\n`topolet conditions` speaks node-problem-detector's protocol instead: 0 OK, 1 \
             under pressure, 2 unknown.\n",
        );
        let mut cmd = Cli::command();
        cmd.build();
        walk(&cmd, &mut out);
        out
    }

    #[test]
    fn cli_reference_is_current() {
        page::check_or_bless("cli.md", &cli_reference());
    }

    #[test]
    fn help_names_every_exit_code() {
        let help = Cli::command().render_long_help().to_string();
        for (code, meaning) in EXIT_CODES {
            assert!(help.contains(&format!("{code} {meaning}")), "{help}");
        }
    }
}
