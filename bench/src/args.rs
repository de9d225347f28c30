//! The benchmark's flags.

use std::path::PathBuf;

use clap::Parser;

/// The engine benchmark: this engine, mlx-lm and llama.cpp on the same checkpoint, in one run.
#[derive(Parser)]
#[command(name = "bench", version)]
pub struct BenchArgs {
    /// The model folder to measure.
    #[arg(long)]
    pub model: PathBuf,
    /// The same checkpoint dequantized to f32, where mlx-lm runs our fast mode's numerics.
    #[arg(long)]
    pub f32_twin: Option<PathBuf>,
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    pub prompt_lens: Vec<usize>,
    /// Prompt lengths for the as-stored runs (MLX's scalar CPU quantized kernels are slow).
    #[arg(long, value_delimiter = ',', default_value = "128")]
    pub as_stored_prompt_lens: Vec<usize>,
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// The prompt before the generated tokens: decode is measured from this position on (a
    /// long one shows how a step's cost grows with the context); llama.cpp's row decodes from 0.
    #[arg(long, default_value_t = 16)]
    pub gen_after: usize,
    /// Runs per prompt length in the f32 measurements, the best one counting (a first run pays
    /// one-time set-up such as BLAS buffers); the slow as-stored runs run once.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Python with mlx-lm (default: the fixture venv).
    #[arg(long, env = "MLX_LM_PYTHON")]
    pub python: Option<PathBuf>,
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/bench/mlx_lm_engine.py"))]
    pub mlx_lm_script: PathBuf,
    /// Each mlx-lm or llama-bench run is killed after this long.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    #[arg(long)]
    pub skip_as_stored: bool,
    #[arg(long)]
    pub skip_mlx_lm: bool,
    /// Skip our dequantized-f32 row (5-8x the checkpoint's memory: too much for a large model).
    #[arg(long)]
    pub skip_dequantized: bool,
    /// The `llama.cpp native` row's `llama-bench` (default: the one `scripts/bench/llama-bench`
    /// builds with `GGML_NATIVE=ON` into the cache's `llama.cpp/bin`; when that is missing, the
    /// row is skipped).
    #[arg(long)]
    pub llama_bench: Option<PathBuf>,
    /// The `llama.cpp generic` row's `llama-bench` (default: the one `scripts/bench/llama-bench`
    /// builds with `GGML_NATIVE=OFF` and AVX-512, VNNI and BF16 named into the cache's
    /// `llama.cpp/bin-generic`; when that is missing, the row is skipped).
    #[arg(long)]
    pub llama_bench_generic: Option<PathBuf>,
    /// The GGUF llama.cpp runs on (default: the cache's Q8_0 GGUF for a model folder whose name
    /// contains `8bit`, the Q4_1 one otherwise).
    #[arg(long)]
    pub gguf: Option<PathBuf>,
    /// llama.cpp's threads (`-t`) and the bandwidth measurement's (default: every core); our
    /// engine uses every core (its engine thread and product pool).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Rounds of ours (f32, packed, packed int8) then each llama.cpp build, alternated so that drift hits
    /// all; the best of each counts.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Skip the read-bandwidth measurement and decode's fraction of its limit.
    #[arg(long)]
    pub skip_bandwidth: bool,
    /// The C heap's large-block thresholds: `bounded` as the gRPC service sets them
    /// (`memory::bound_heap`), or `glibc`'s moving defaults (to measure what they cost).
    #[arg(long, value_enum, default_value_t = Heap::Bounded)]
    pub heap: Heap,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Heap {
    Bounded,
    Glibc,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_a_binary_per_llama_cpp_build() {
        let args = BenchArgs::try_parse_from([
            "bench",
            "--model",
            "m",
            "--llama-bench",
            "a/llama-bench",
            "--llama-bench-generic",
            "b/llama-bench",
        ])
        .unwrap();
        assert_eq!(args.llama_bench, Some(PathBuf::from("a/llama-bench")));
        assert_eq!(
            args.llama_bench_generic,
            Some(PathBuf::from("b/llama-bench"))
        );
        let args = BenchArgs::try_parse_from(["bench", "--model", "m"]).unwrap();
        assert!(args.llama_bench.is_none() && args.llama_bench_generic.is_none());
    }
}
