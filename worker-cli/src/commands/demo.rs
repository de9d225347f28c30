//! `worker demo`: the product end to end on one machine. It writes a loopback ring hostfile,
//! starts the workers and then rank 0 (this same binary, `mlx-distributed`), loads the model
//! over gRPC as LocalAI would, and streams a chat answer to stdout. Only the answer, a live
//! counter and the summary reach the terminal; the ranks' logs go to a file it names.

use std::io::{IsTerminal, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backend::grpc::pb::{self, backend_client::BackendClient};

use super::CliResult;
use crate::args::DemoArgs;

/// Kills the ranks when the demo ends, however it ends.
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A free loopback port whose successor is free too (rank 0's control channel).
fn port_pair(taken: &[u16]) -> CliResult<u16> {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let clear = |p: u16| !taken.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok();
        if port < u16::MAX - 1 && clear(port) && clear(port + 1) {
            return Ok(port);
        }
    }
}

pub fn run(args: DemoArgs) -> CliResult {
    let dir = std::env::temp_dir().join(format!("mlx-distributed-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut ports: Vec<u16> = Vec::new();
    for _ in 0..args.ranks.max(1) {
        let p = port_pair(&ports)?;
        ports.extend([p, p + 1]);
    }
    let addrs: Vec<String> = ports
        .iter()
        .step_by(2)
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let hostfile = dir.join("hostfile.json");
    std::fs::write(&hostfile, serde_json::to_string(&addrs)?)?;
    let grpc = format!("127.0.0.1:{}", port_pair(&ports)?);
    let log_path = std::env::temp_dir().join("mlx-distributed-demo.log");
    let log = std::fs::File::create(&log_path)?;
    eprintln!(
        "{} ranks on loopback ({}); their logs: {}",
        args.ranks.max(1),
        addrs.join(" "),
        log_path.display()
    );

    let exe = std::env::current_exe()?;
    let token = std::env::var("MLX_DISTRIBUTED_TOKEN").unwrap_or_else(|_| demo_token());
    let mut ranks = Ranks(Vec::new());
    // Workers first, as in production; rank 0 last, serving gRPC.
    for rank in (0..args.ranks.max(1)).rev() {
        let mut cmd = Command::new(&exe);
        cmd.args([
            "mlx-distributed",
            "--rank",
            &rank.to_string(),
            "--addr",
            &grpc,
            "--hostfile",
        ])
        .arg(&hostfile)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .env("MLX_DISTRIBUTED_TOKEN", &token)
        .stdout(Stdio::null())
        .stderr(log.try_clone()?);
        ranks.0.push(cmd.spawn()?);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let limit = Duration::from_secs(args.timeout_secs);
    let result =
        rt.block_on(async { tokio::time::timeout(limit, demo(&args, &grpc, &hostfile)).await });
    let _ = std::fs::remove_dir_all(&dir);
    drop(ranks);
    result.map_err(|_| format!("the demo did not finish within {limit:?}"))?
}

/// A token for the demo's ranks (one the user set wins), so their control channel is
/// authenticated as in production rather than by the hostfile's digest.
fn demo_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let part = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u32(std::process::id());
        h.write_u128(Instant::now().elapsed().as_nanos());
        h.finish()
    };
    format!("demo-{:016x}{:016x}", part(1), part(2))
}

/// A client of rank 0's gRPC server, once it is up (within 30 s).
async fn connect(grpc: &str) -> CliResult<BackendClient<tonic::transport::Channel>> {
    let start = Instant::now();
    loop {
        if let Ok(c) = BackendClient::connect(format!("http://{grpc}")).await {
            return Ok(c);
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!("rank 0 did not come up at {grpc}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The LoadModel a host would send: the `--config` YAML's (through the one mapping, its
/// `hostfile:` option pointed at the demo's loopback hostfile), `--model` winning.
fn load_request(args: &DemoArgs, hostfile: &Path) -> CliResult<pb::ModelOptions> {
    let yaml = super::config::read(args.config.as_deref())?;
    let mut req = yaml.preload(hostfile).unwrap_or_default();
    if let Some(model) = &args.model {
        req.model = std::fs::canonicalize(model)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| model.clone());
    }
    if req.model.is_empty() {
        return Err("--model (or a --config with parameters.model) is required".into());
    }
    Ok(pb::ModelOptions {
        model: req.model,
        model_path: req.model_path,
        options: req.options,
        context_size: req.context_size,
        trust_remote_code: req.trust_remote_code,
        grammar_triggers: req
            .grammar_triggers
            .into_iter()
            .map(|word| pb::GrammarTrigger { word })
            .collect(),
        cache_type_key: req.cache_type_key,
        cache_type_value: req.cache_type_value,
        draft_model: req.draft_model,
        lora_adapter: req.lora_adapter,
        lora_scale: req.lora_scale,
        lora_adapters: req.lora_adapters,
        lora_scales: req.lora_scales,
        lora_base: req.lora_base,
        ..Default::default()
    })
}

async fn demo(args: &DemoArgs, grpc: &str, hostfile: &Path) -> CliResult {
    let start = Instant::now();
    let mut client = connect(grpc).await?;
    let loaded = client
        .load_model(load_request(args, hostfile)?)
        .await?
        .into_inner();
    if !loaded.success {
        return Err(format!("LoadModel failed: {}", loaded.message).into());
    }
    let from = args
        .config
        .as_ref()
        .map_or(String::new(), |c| format!(" as {} says", c.display()));
    eprintln!(
        "loaded over {} ranks in {:.1} s{from}",
        args.ranks,
        start.elapsed().as_secs_f64()
    );
    let req = pb::PredictOptions {
        use_tokenizer_template: true,
        messages: vec![pb::Message {
            role: "user".into(),
            content: args.prompt.clone(),
            ..Default::default()
        }],
        tokens: args.max_tokens,
        temperature: 0.0,
        ..Default::default()
    };
    let mut stream = client.predict_stream(req).await?.into_inner();
    let mut last = pb::Reply::default();
    let mut counter = LiveCounter::new();
    while let Some(reply) = stream.message().await? {
        counter.show(&reply.message)?;
        last = reply;
    }
    counter.clear()?;
    let prompt_secs = last.timing_prompt_processing / 1000.0;
    let gen_secs = last.timing_token_generation / 1000.0;
    eprintln!(
        "\n[{} ranks on loopback | prompt: {} tokens, {:.1} tok/s | generation: {} tokens, \
         {:.1} tok/s]",
        args.ranks,
        last.prompt_tokens,
        last.prompt_tokens as f64 / prompt_secs.max(1e-9),
        last.tokens,
        last.tokens as f64 / gen_secs.max(1e-9),
    );
    let _ = client.free(pb::HealthMessage {}).await;
    eprintln!(
        "With LocalAI: run `worker mlx-distributed` on each machine (README, Running one model on \
         several machines) and add rank 0 as a backend: local-ai run \
         --external-grpc-backends \"mlx-distributed:HOST:PORT\" (README, Serving LocalAI)"
    );
    Ok(())
}

/// Streams the answer to stdout; on a terminal a token counter follows the text (dim unless
/// `NO_COLOR` says no colour).
struct LiveCounter {
    tty: bool,
    dim: bool,
    tokens: usize,
    start: Instant,
}

impl LiveCounter {
    fn new() -> LiveCounter {
        LiveCounter {
            tty: std::io::stdout().is_terminal(),
            dim: backend::progress::colour(&std::io::stdout()),
            tokens: 0,
            start: Instant::now(),
        }
    }

    /// Writes a text delta (one token's), then the counter after it without moving the cursor.
    fn show(&mut self, text: &[u8]) -> std::io::Result<()> {
        self.tokens += 1;
        let mut out = std::io::stdout().lock();
        if !self.tty {
            out.write_all(text)?;
            return out.flush();
        }
        let rate = self.tokens as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
        // Clear the old counter, write the text, save the cursor, draw, restore.
        out.write_all(b"\x1b[K")?;
        out.write_all(text)?;
        let (dim, plain) = match self.dim {
            true => ("\x1b[2m", "\x1b[0m"),
            false => ("", ""),
        };
        write!(
            out,
            "\x1b7{dim}  [{} tokens, {rate:.1} tok/s]{plain}\x1b8",
            self.tokens
        )?;
        out.flush()
    }

    fn clear(&self) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.tty {
            out.write_all(b"\x1b[K")?;
        }
        out.flush()
    }
}
