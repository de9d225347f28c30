//! Command-line arguments; every distributed flag has an environment fallback.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// Compute as the checkpoint stores it (MLX's quantized kernels), as mlx-lm does,
    /// instead of dequantizing to f32 (the fast default on CPU).
    #[arg(long)]
    pub as_stored: bool,
    /// Write the generated token ids as JSON to stderr.
    #[arg(long, hide = true)]
    pub print_ids: bool,
    #[arg(skip)]
    pub _dir: Option<PathBuf>,
}
