//! Command-line arguments; every distributed flag has an environment fallback. A flag that
//! stands for a LoadModel option takes its variable, and its help unless it says more,
//! from the option's table row.

use std::path::PathBuf;

use backend::options::{docs, table, OptionSpec};
use clap::{Args, CommandFactory, Parser, Subcommand};

/// The flags that stand for a LoadModel option: clap's id, then the option.
const OPTION_FLAGS: &[(&str, &str)] = &[
    ("hostfile", "hostfile"),
    ("backend", "distributed_backend"),
    ("mlx_backend", "distributed_backend"),
    ("coordinator", "coordinator"),
    ("control_port", "control_port"),
];

/// The command line, its option flags completed from the option table.
pub fn command() -> clap::Command {
    let mut cli = Cli::command();
    let names: Vec<String> = (cli.get_subcommands())
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        cli = cli.mut_subcommand(name, with_table_flags);
    }
    cli
}

/// A subcommand whose option flags take their variable and help from the table.
fn with_table_flags(mut sub: clap::Command) -> clap::Command {
    for &(id, option) in OPTION_FLAGS {
        let Some(spec) = table::find(option) else {
            continue;
        };
        if sub.get_arguments().any(|a| a.get_id() == id) {
            sub = sub.mut_arg(id, |arg| table_flag(arg, spec));
        }
    }
    sub
}

/// The row's first variable as the flag's fallback; the row's doc as its help, unless the
/// field's own doc says what the flag means for its command.
fn table_flag(arg: clap::Arg, spec: &OptionSpec) -> clap::Arg {
    let arg = match spec.env.first() {
        Some(var) => arg.env(var),
        None => arg,
    };
    match arg.get_help() {
        Some(_) => arg,
        None => arg.help(docs::flag_help(spec)),
    }
}

#[derive(Parser)]
#[command(name = "worker", version, about = "mlx-distributed worker and tools")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Generate text with a model on this machine, streaming it to stdout.
    Generate(GenerateArgs),
    /// Demo: rank 0 and workers on loopback, LoadModel over gRPC, then a streamed answer.
    Demo(DemoArgs),
    /// Run one rank of a distributed model: rank 0 serves gRPC, ranks 1+ follow rank 0.
    #[command(name = "mlx-distributed")]
    MlxDistributed(DistributedArgs),
    /// Latency and bandwidth of all_sum and send/recv between ranks (run it on every rank).
    BenchLink(BenchLinkArgs),
    /// Preflight: hostfile, this machine, ports, the workers' builds, the model and memory.
    Check(CheckArgs),
    /// LocalAI-style P2P (no hostfile): a worker advertises itself over mDNS and waits for a
    /// rank 0 with its token to give it a rank; with --serve, this node is that rank 0.
    #[command(name = "p2p-mlx")]
    P2pMlx(P2pArgs),
    /// Rank 0 for users without a host: load a model YAML's model, then serve gRPC.
    Serve(ServeArgs),
    /// Start every rank of a hostfile from this machine over SSH, with their logs here.
    Launch(LaunchArgs),
}

#[derive(Args)]
pub struct LaunchArgs {
    /// A LocalAI model YAML: its options give the hostfile, backend, coordinator and control
    /// port (flags win), and rank 0 loads its model before serving.
    #[arg(long, env = "MLX_DISTRIBUTED_CONFIG")]
    pub config: Option<PathBuf>,
    /// The hostfile whose ranks are started (the option `hostfile`; default: the --config
    /// YAML's).
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
    #[arg(long, value_parser = ["ring", "jaccl"])]
    pub backend: Option<String>,
    /// A model folder or repo id: checked on every rank, and loaded by rank 0 before serving.
    #[arg(long)]
    pub model: Option<String>,
    /// LocalAI's models folder on the ranks, where a relative --model is looked for.
    #[arg(long)]
    pub model_path: Option<PathBuf>,
    /// Rank 0 ships each worker its share of the model (`ship_model:true`): only rank 0's
    /// host needs the model; the check asks the workers for memory, not the model.
    #[arg(long)]
    pub ship_model: bool,
    /// Where rank 0 serves gRPC (on rank 0's host).
    #[arg(long, default_value = "localhost:50051")]
    pub addr: String,
    /// Start ranks 1 and up only: rank 0 is the host's (LocalAI's) to start.
    #[arg(long)]
    pub workers_only: bool,
    /// Skip `worker check` (run on rank 0's host against the started workers).
    #[arg(long)]
    pub no_check: bool,
    /// Seconds `worker check` waits for the workers to join.
    #[arg(long, default_value_t = 20)]
    pub join_timeout: u64,
    #[arg(long)]
    pub coordinator: Option<String>,
    #[arg(long)]
    pub control_port: Option<u16>,
    /// The control channel's secret (sent to the ranks on their stdin, not their command line).
    #[arg(long, env = "MLX_DISTRIBUTED_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The user to log in as on every host.
    #[arg(long)]
    pub ssh_user: Option<String>,
    /// The SSH port on every host.
    #[arg(long)]
    pub ssh_port: Option<u16>,
    /// A private key to log in with (only it is offered).
    #[arg(long)]
    pub ssh_identity: Option<PathBuf>,
    /// An ssh option `KEY=VALUE` (`-o`), repeatable.
    #[arg(long = "ssh-option")]
    pub ssh_options: Vec<String>,
    /// Seconds to wait for an SSH connection.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// The worker binary on the hosts (default: this binary's path).
    #[arg(long)]
    pub remote_worker: Option<String>,
    /// Where the hostfile is written on the hosts (default: its absolute path here).
    #[arg(long)]
    pub remote_hostfile: Option<String>,
    /// Where the --config YAML is written on rank 0's host (default: its absolute path here).
    #[arg(long)]
    pub remote_config: Option<String>,
    /// Flags added to every rank's `worker mlx-distributed` command line.
    #[arg(last = true)]
    pub worker_args: Vec<String>,
}

#[derive(Args)]
pub struct ServeArgs {
    /// A LocalAI model YAML: the model is loaded at start-up as LoadModel would load it from
    /// this file (its options name the cluster, if any).
    #[arg(long, env = "MLX_DISTRIBUTED_CONFIG")]
    pub config: PathBuf,
    /// Where to serve the gRPC backend.
    #[arg(long, env = "MLX_DISTRIBUTED_ADDR", default_value = "localhost:50051")]
    pub addr: String,
    /// LocalAI's models folder, where a relative `parameters.model` is looked for.
    #[arg(long)]
    pub model_path: Option<PathBuf>,
}

#[derive(Args)]
pub struct P2pArgs {
    /// A LocalAI model YAML, checked at start; the serving node loads its model over the
    /// cluster it forms (with no hostfile: the workers it finds).
    #[arg(long, env = "MLX_DISTRIBUTED_CONFIG")]
    pub config: Option<PathBuf>,
    /// The shared secret: only nodes with the same token find and join each other (else
    /// LOCALAI_TOKEN, LOCALAI_P2P_TOKEN or TOKEN, as LocalAI reads them, or MLX_DISTRIBUTED_TOKEN).
    #[arg(long, hide_env_values = true)]
    pub token: Option<String>,
    /// LocalAI's network id: nodes of another id never join (else LOCALAI_P2P_NETWORK_ID or
    /// P2P_NETWORK_ID).
    #[arg(long)]
    pub p2p_network_id: Option<String>,
    /// With --serve: how many ranks form the cluster (this one included); without it, the
    /// workers found within --timeout.
    #[arg(long, requires = "serve")]
    pub ranks: Option<usize>,
    /// Serve gRPC at this address: this node becomes rank 0 and gives the workers it finds
    /// their ranks. Without it the node is a worker, waiting for any rank 0 of its network.
    #[arg(long)]
    pub serve: Option<String>,
    /// This node's address for the ring (default: the one that routes to the LAN).
    #[arg(long)]
    pub ip: Option<String>,
    /// The MLX ring port (rank 0 also uses the next one, for its control channel).
    #[arg(long, alias = "port", env = "MLX_LISTEN_PORT", default_value_t = 5555)]
    pub mlx_listen_port: u16,
    /// ring (default) or jaccl (the node advertises its RDMA devices).
    #[arg(long, value_parser = ["ring", "jaccl"], default_value = "ring")]
    pub mlx_backend: String,
    /// JACCL: this node's RDMA devices in port order (default: /sys/class/infiniband).
    #[arg(long, value_delimiter = ',')]
    pub rdma_devices: Vec<String>,
    /// Where a worker writes the hostfile it is given (default: none is written).
    #[arg(long)]
    pub hostfile_out: Option<PathBuf>,
    /// With --serve: seconds to look for the workers at each LoadModel (`p2p_wait`).
    #[arg(long, requires = "serve")]
    pub timeout: Option<u64>,
}

#[derive(Args)]
pub struct CheckArgs {
    /// A LocalAI model YAML: its options' hostfile, backend, coordinator and control port and
    /// its `parameters.model`, as LoadModel will read them (flags and variables win).
    #[arg(long, env = "MLX_DISTRIBUTED_CONFIG")]
    pub config: Option<PathBuf>,
    /// The hostfile whose ranks are checked (the option `hostfile`; default: the --config
    /// YAML's).
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
    #[arg(long, value_parser = ["ring", "jaccl"])]
    pub backend: Option<String>,
    /// A model folder or repo id every rank should have (never downloaded by the check).
    #[arg(long)]
    pub model: Option<String>,
    /// The model is shipped (`ship_model:true`): only rank 0 needs it; the workers are
    /// checked for the memory of their share.
    #[arg(long)]
    pub ship_model: bool,
    /// LocalAI's models folder, where a relative --model is looked for.
    #[arg(long)]
    pub model_path: Option<PathBuf>,
    #[arg(long)]
    pub coordinator: Option<String>,
    #[arg(long)]
    pub control_port: Option<u16>,
    /// Seconds to wait for the workers to join.
    #[arg(long, default_value_t = 10)]
    pub join_timeout: u64,
    /// The control channel's shared secret, as the workers have it.
    #[arg(long, env = "MLX_DISTRIBUTED_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Args)]
pub struct BenchLinkArgs {
    #[arg(long)]
    pub hostfile: PathBuf,
    #[arg(long, env = "MLX_RANK")]
    pub rank: usize,
    #[arg(long, default_value = "ring", value_parser = ["ring", "jaccl"])]
    pub backend: String,
    #[arg(long)]
    pub coordinator: Option<String>,
    /// Message sizes in KiB (all ranks must pass the same).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4,16,64,256,1024,4096,16384,65536"
    )]
    pub sizes_kb: Vec<usize>,
    /// At most this many timed repetitions per size (at least 3).
    #[arg(long, default_value_t = 50)]
    pub max_iters: usize,
}

#[derive(Args)]
pub struct DemoArgs {
    /// A LocalAI model YAML to load as a host would (`model-configs/smollm2-pipeline-2.yaml`):
    /// its options, with the hostfile the demo writes for its loopback ranks.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A model folder or a Hugging Face repo id (default: the YAML's `parameters.model`).
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long, default_value = "What is the capital of France?")]
    pub prompt: String,
    /// Ranks on this machine (rank 0 plus workers).
    #[arg(long, default_value_t = 2)]
    pub ranks: usize,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: i32,
    /// Everything is stopped after this long.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
}

#[derive(Args)]
pub struct DistributedArgs {
    /// A LocalAI model YAML: its options' hostfile, backend, coordinator and control port
    /// (flags and variables win), so the same file starts every rank.
    #[arg(long, env = "MLX_DISTRIBUTED_CONFIG")]
    pub config: Option<PathBuf>,
    /// The hostfile every rank shares (LocalAI ring/JACCL or mlx.launch format).
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
    /// This machine's rank in the hostfile.
    #[arg(long, env = "MLX_RANK")]
    pub rank: usize,
    #[arg(long, value_parser = ["ring", "jaccl"])]
    pub backend: Option<String>,
    /// Rank 0 only: where to serve the gRPC backend.
    #[arg(long, env = "MLX_DISTRIBUTED_ADDR", default_value = "localhost:50051")]
    pub addr: String,
    #[arg(long)]
    pub coordinator: Option<String>,
    #[arg(long)]
    pub control_port: Option<u16>,
    /// The control channel's shared secret, the same on every rank (default: a digest of
    /// the hostfile).
    #[arg(long, env = "MLX_DISTRIBUTED_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Rank 0 only: a model folder or repo id to load before serving (over the YAML's
    /// `parameters.model`).
    #[arg(long)]
    pub model: Option<String>,
    /// Rank 0 only: LocalAI's models folder, where a relative --model is looked for.
    #[arg(long)]
    pub model_path: Option<PathBuf>,
    /// Rank 0 only: the model it loads before serving is shipped to the workers
    /// (`ship_model:true` added to its options).
    #[arg(long)]
    pub ship_model: bool,
}

#[derive(Args)]
pub struct GenerateArgs {
    /// A model folder or a Hugging Face repo id.
    #[arg(long)]
    pub model: String,
    #[arg(long)]
    pub prompt: String,
    /// Render the prompt as a user message through the model's chat template.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Compute as the checkpoint stores it (MLX's quantized kernels), as mlx-lm does. The
    /// default on CPU keeps quantized weights packed and multiplies them through our own
    /// kernels (int8 activations, or f32 with `--exact`).
    #[arg(long, conflicts_with = "dequantize")]
    pub as_stored: bool,
    /// Dequantize quantized weights to f32 at load (5-8x the memory; the f32 numerics of
    /// `--exact`, through BLAS).
    #[arg(long)]
    pub dequantize: bool,
    /// Multiply packed weights in f32, token for token as mlx-lm on the f32 twin (the load
    /// option `cpu_numerics:exact`; the default is `int8`, or `MLX_DISTRIBUTED_CPU_NUMERICS`).
    #[arg(long, conflicts_with_all = ["as_stored", "dequantize"])]
    pub exact: bool,
    /// Write the generated token ids to stderr.
    #[arg(long, hide = true)]
    pub print_ids: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag the table completes exists, names a row with a variable, and shows the
    /// row's doc in `--help` where its field has none.
    #[test]
    fn option_flags_take_their_variable_and_help_from_the_table() {
        let mut cli = command();
        let mut seen = std::collections::BTreeSet::new();
        for sub in cli.get_subcommands_mut() {
            for arg in sub.get_arguments() {
                let Some((id, option)) = OPTION_FLAGS.iter().find(|(id, _)| arg.get_id() == id)
                else {
                    continue;
                };
                let spec = table::find(option).expect("the option has a row");
                assert_eq!(arg.get_env(), spec.env.first().map(std::ffi::OsStr::new));
                seen.insert(*id);
            }
        }
        assert_eq!(seen.len(), OPTION_FLAGS.len(), "{seen:?}");
        let launch = cli
            .find_subcommand_mut("launch")
            .expect("launch")
            .render_help();
        let coordinator = table::find("coordinator").expect("coordinator");
        assert!(launch.to_string().contains(coordinator.doc), "{launch}");
    }

    /// The options the CLI hands to LoadModel by name have variables to stand for.
    #[test]
    fn settings_options_have_variables() {
        for option in [
            "hostfile",
            "distributed_backend",
            "control_port",
            "coordinator",
            "p2p_token",
            "p2p_network_id",
            "p2p_ranks",
            "p2p_wait",
        ] {
            assert!(
                table::find(option).is_some_and(|s| !s.env.is_empty()),
                "{option}"
            );
        }
    }
}
