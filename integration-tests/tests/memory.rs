//! Memory that proves the split: a random-weight llama checkpoint of about 1.5 GB, written at
//! test time, runs on a real 2-rank cluster on loopback, as a pipeline and then split by
//! heads. Each rank's peak resident memory (VmHWM, so transient copies at load count) after
//! LoadModel and a short generation stays near its share of the weights, and each rank reads
//! (`rchar`: bytes through read/pread, which MLX's loader uses) little more than its share.
//!
//! The checkpoint is f32, the dtype the CPU path computes in, so what a rank holds is what it
//! reads (bf16 would be widened at load). Its embedding (tied to the head, rank 0's in a
//! pipeline) is 3% of the bytes: a narrow model (hidden 256) with a wide MLP carries the bytes.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::cluster::{Cluster, TempDir};
use integration_tests::{fixture, TestResult};
use tonic::transport::Channel;

const HIDDEN: u64 = 256;
const HEADS: u64 = 4;
const KV_HEADS: u64 = 2;
const HEAD_DIM: u64 = 64;
const INTER: u64 = 16384;
const LAYERS: u64 = 28;
/// The tokenizer's (SmolLM2's, copied from the tiny-llama3 fixture).
const VOCAB: u64 = 49152;
const F32: u64 = 4;
const MIB: u64 = 1 << 20;
/// What a rank may read beyond its tensors: config.json, the tokenizer (3.4 MB), the
/// safetensors header, gRPC and control messages.
const READ_SLACK: u64 = 16 * MIB;
/// Tokens generated per mode: past 16, so the ranks' state check runs once.
const TOKENS: i32 = 20;

/// The checkpoint's tensors in file order: name and shape.
fn tensors() -> Vec<(String, Vec<u64>)> {
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN])];
    for i in 0..LAYERS {
        let p = format!("model.layers.{i}");
        let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
        out.extend([
            (format!("{p}.input_layernorm.weight"), vec![HIDDEN]),
            (format!("{p}.post_attention_layernorm.weight"), vec![HIDDEN]),
            (format!("{p}.self_attn.q_proj.weight"), vec![q, HIDDEN]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv, HIDDEN]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv, HIDDEN]),
            (format!("{p}.self_attn.o_proj.weight"), vec![HIDDEN, q]),
            (format!("{p}.mlp.gate_proj.weight"), vec![INTER, HIDDEN]),
            (format!("{p}.mlp.up_proj.weight"), vec![INTER, HIDDEN]),
            (format!("{p}.mlp.down_proj.weight"), vec![HIDDEN, INTER]),
        ]);
    }
    out.push(("model.norm.weight".to_string(), vec![HIDDEN]));
    out
}

fn bytes_of(shape: &[u64]) -> u64 {
    shape.iter().product::<u64>() * F32
}

/// What the parts weigh: the embedding and final norm, one layer's norms and one layer's
/// matrices, and the whole file's tensors.
struct Sizes {
    ends: u64,
    layer_norms: u64,
    layer_matrices: u64,
    total: u64,
}

impl Sizes {
    fn of(tensors: &[(String, Vec<u64>)]) -> Sizes {
        let (mut sizes, mut total) = ([0u64; 3], 0);
        for (name, shape) in tensors {
            let bytes = bytes_of(shape);
            total += bytes;
            let slot = match (name.strip_prefix("model.layers.0."), shape.len()) {
                _ if !name.starts_with("model.layers.") => 0,
                (Some(_), 1) => 1,
                (Some(_), _) => 2,
                (None, _) => continue,
            };
            sizes[slot] += bytes;
        }
        let [ends, layer_norms, layer_matrices] = sizes;
        Sizes {
            ends,
            layer_norms,
            layer_matrices,
            total,
        }
    }

    fn layer(&self) -> u64 {
        self.layer_norms + self.layer_matrices
    }
}

/// Writes the checkpoint: config.json (llama, f32, tied embedding), the tiny-llama3
/// fixture's tokenizer, and model.safetensors of uniform noise in [-0.05, 0.05) (norms 1).
/// One 4 MiB block of noise is written again and again from a different start per tensor:
/// the file writes at disk speed.
fn write_checkpoint(dir: &Path) -> TestResult<Sizes> {
    let tokenizer = fixture("tiny-llama3")?;
    for file in [
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ] {
        std::fs::copy(tokenizer.join(file), dir.join(file))?;
    }
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_hidden_layers": LAYERS,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "max_position_embeddings": 4096,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    });
    std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
    let tensors = tensors();
    write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    Ok(Sizes::of(&tensors))
}

fn write_safetensors(path: &Path, tensors: &[(String, Vec<u64>)]) -> TestResult {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, shape) in tensors {
        let end = offset + bytes_of(shape);
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut header = serde_json::to_vec(&header)?;
    // The data starts 8-byte aligned, as the format asks.
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut file = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    file.write_all(&(header.len() as u64).to_le_bytes())?;
    file.write_all(&header)?;
    let noise = noise_block(1 << 20);
    let ones: Vec<u8> = std::iter::repeat_n(1f32.to_le_bytes(), HIDDEN as usize)
        .flatten()
        .collect();
    for (i, (_, shape)) in tensors.iter().enumerate() {
        if shape.len() == 1 {
            file.write_all(&ones)?;
            continue;
        }
        let mut left = bytes_of(shape) as usize;
        let mut start = (i * 7919 * 4) % noise.len();
        while left > 0 {
            let n = left.min(noise.len() - start);
            file.write_all(&noise[start..start + n])?;
            left -= n;
            start = 0;
        }
    }
    file.into_inner()?.sync_data()?;
    Ok(())
}

/// `n` f32 values, uniform in [-0.05, 0.05), as little-endian bytes (xorshift64).
fn noise_block(n: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
        out.extend_from_slice(&((unit - 0.5) * 0.1).to_le_bytes());
    }
    out
}

/// A field of /proc/PID/status in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(pid: u32, field: &str) -> TestResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))?;
    Ok(kb << 10)
}

/// Bytes a process has read through read(2)/pread(2) (/proc/PID/io `rchar`), page cache
/// or not.
fn read_bytes(pid: u32) -> TestResult<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    Ok(io
        .lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no rchar in /proc/{pid}/io"))?)
}

/// One rank's numbers for one mode.
struct RankMemory {
    baseline_rss: u64,
    /// Peak resident memory after LoadModel, before generating.
    loaded_peak: u64,
    peak: u64,
    /// Resident at the end (after the generation).
    rss: u64,
    read: u64,
}

/// A fresh 2-rank cluster loads the checkpoint with `options` and generates; each rank's
/// baseline, peak resident memory and bytes read.
async fn run(dir: &Path, name: &str, options: &[&str]) -> TestResult<[RankMemory; 2]> {
    let cluster = Cluster::start(2, name)?;
    let rank0 = cluster.rank0(&[]).await?;
    let pids = [rank0.pid(), cluster.workers[0].id()];
    let mut c = rank0.client().await?;
    let baseline_rss = [
        status_bytes(pids[0], "VmRSS")?,
        status_bytes(pids[1], "VmRSS")?,
    ];
    let read_before = [read_bytes(pids[0])?, read_bytes(pids[1])?];
    let load = pb::ModelOptions {
        model: dir.to_string_lossy().into_owned(),
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let loaded = bounded(c.load_model(load)).await?.into_inner();
    assert!(loaded.success, "{name}: {loaded:?}");
    let read = [
        read_bytes(pids[0])? - read_before[0],
        read_bytes(pids[1])? - read_before[1],
    ];
    let loaded_peak = [
        status_bytes(pids[0], "VmHWM")?,
        status_bytes(pids[1], "VmHWM")?,
    ];
    generate(&mut c, name).await?;
    let mut ranks = Vec::new();
    for (rank, pid) in pids.into_iter().enumerate() {
        ranks.push(RankMemory {
            baseline_rss: baseline_rss[rank],
            loaded_peak: loaded_peak[rank],
            peak: status_bytes(pid, "VmHWM")?,
            rss: status_bytes(pid, "VmRSS")?,
            read: read[rank],
        });
    }
    let [r0, r1]: [RankMemory; 2] = ranks.try_into().map_err(|_| "two ranks")?;
    Ok([r0, r1])
}

/// A greedy generation of `TOKENS` tokens, every one a forward pass through both ranks.
async fn generate(c: &mut BackendClient<Channel>, name: &str) -> TestResult {
    let req = pb::PredictOptions {
        prompt: "The quick brown fox jumps over the lazy dog".into(),
        tokens: TOKENS,
        ignore_eos: true,
        ..Default::default()
    };
    let reply = bounded(c.predict(req)).await?.into_inner();
    assert_eq!(reply.tokens, TOKENS, "{name}: {reply:?}");
    Ok(())
}

/// An RPC bounded to a minute.
async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> TestResult<T> {
    Ok(tokio::time::timeout(Duration::from_secs(60), call).await??)
}

fn report(mode: &str, ranks: &[RankMemory; 2], shares: [u64; 2], total: u64) {
    for (rank, (m, share)) in ranks.iter().zip(shares).enumerate() {
        eprintln!(
            "{mode} rank {rank}: baseline RSS {} MiB, peak after LoadModel {} MiB, after \
             generating {} MiB = {:.1}% of the \
             checkpoint, RSS at the end {} MiB, share {} MiB, read {} MiB",
            m.baseline_rss / MIB,
            m.loaded_peak / MIB,
            m.peak / MIB,
            100.0 * m.peak as f64 / total as f64,
            m.rss / MIB,
            share / MIB,
            m.read / MIB
        );
    }
}

/// Each rank read its share and little more (`rchar`, so the page cache hides nothing).
fn assert_reads(mode: &str, ranks: &[RankMemory; 2], shares: [u64; 2]) {
    for (rank, (m, share)) in ranks.iter().zip(shares).enumerate() {
        assert!(
            m.read >= share && m.read <= share + READ_SLACK,
            "{mode} rank {rank} read {} MiB for a share of {} MiB",
            m.read / MIB,
            share / MIB
        );
    }
}

/// Each rank's peak is under 60% of the checkpoint (the bound) and under its share
/// plus `OVERHEAD`.
fn assert_peaks(mode: &str, ranks: &[RankMemory; 2], shares: [u64; 2], total: u64) {
    for (rank, (m, share)) in ranks.iter().zip(shares).enumerate() {
        assert!(
            m.peak * 10 < total * 6,
            "{mode} rank {rank}: peak {} MiB is not under 60% of the {} MiB checkpoint",
            m.peak / MIB,
            total / MIB
        );
        assert!(
            m.peak < share + OVERHEAD,
            "{mode} rank {rank}: peak {} MiB is not under its share {} MiB + {} MiB",
            m.peak / MIB,
            share / MIB,
            OVERHEAD / MIB
        );
    }
}

/// What a rank holds besides its weights, whatever the model's size (measured in this test
/// from /proc/PID/smaps: 74-83 MiB): the binary's and libraries' pages (15 MiB before any
/// model), the heap (the tokenizer, 18-30 MiB), MLX's and OpenBLAS's working buffers, the KV
/// cache and activations of a short request. Never a second copy of a tensor: the largest is
/// 16 MiB, a layer 49 MiB.
const OVERHEAD: u64 = 100 * MIB;

#[tokio::test]
async fn each_rank_holds_and_reads_its_share_of_a_1_5_gb_checkpoint() -> TestResult {
    let start = Instant::now();
    let dir = TempDir::new("memory-checkpoint")?;
    let sizes = write_checkpoint(&dir.0)?;
    let written = start.elapsed();
    let total = sizes.total;

    // Pipeline: 14 layers each; rank 0 also holds the embedding (the tied head) and norm.
    let half = LAYERS / 2;
    let shares = [sizes.ends + half * sizes.layer(), half * sizes.layer()];
    let pipeline = run(&dir.0, "memory-pp", &[]).await?;
    report("pipeline", &pipeline, shares, total);
    assert_reads("pipeline", &pipeline, shares);
    assert_peaks("pipeline", &pipeline, shares, total);

    // Tensor: every rank holds the replicated part (embedding, norms) and half of every
    // layer's matrices (heads, KV heads, MLP neurons).
    let replicated = sizes.ends + LAYERS * sizes.layer_norms;
    let share = replicated + LAYERS * sizes.layer_matrices / 2;
    let tensor = run(&dir.0, "memory-tp", &["parallelism:tensor"]).await?;
    report("tensor", &tensor, [share, share], total);
    assert_reads("tensor", &tensor, [share, share]);
    assert_peaks("tensor", &tensor, [share, share], total);
    eprintln!(
        "checkpoint {} MiB ({} bytes) written in {:.1} s; test {:.1} s",
        total / MIB,
        total,
        written.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
