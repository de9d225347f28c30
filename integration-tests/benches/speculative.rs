//! What speculative decoding buys, one greedy request at a time: prompt lookup
//! (`speculative:ngram`) on the 4-bit SmolLM2, and the 4-bit model as the DraftModel of the
//! 8-bit one. Decode tok/s with and without, on a task grounded in its input (repeat a piece
//! of code with one change; target >= 1.5x) and on free writing, with the share of proposals
//! taken. The texts must be the same with and without. Also greedy sampled on the host (what a
//! verifying step pays before its proposals).

use std::time::Duration;

use backend::grpc::pb::{self, backend_client::BackendClient};
use integration_tests::rpc::chat_request;
use integration_tests::server::BackendProcess;
use integration_tests::{fixture, TestResult};
use serde_json::Value;
use tonic::transport::Channel;

const MODEL: &str = "smollm2-135m-4bit";
const TARGET: &str = "smollm2-135m-8bit";
const TOKENS: i32 = 256;
const RUNS: usize = 3;

const CODE: &str = "```python
import json
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 1
    tags: list = field(default_factory=list)

    def total(self):
        return self.price * self.quantity


class Cart:
    def __init__(self):
        self.items = []

    def add(self, item):
        self.items.append(item)

    def remove(self, name):
        self.items = [i for i in self.items if i.name != name]

    def total(self):
        return sum(i.total() for i in self.items)

    def to_json(self):
        return json.dumps([i.__dict__ for i in self.items])


cart = Cart()
cart.add(Item(\"apple\", 0.5, 6))
cart.add(Item(\"bread\", 2.25))
print(cart.total())
print(cart.to_json())
```";

fn tasks() -> [(&'static str, String); 2] {
    [
        (
            "grounded",
            format!(
                "Rewrite this code with one change: rename the class `Cart` to `ShoppingCart`. \
                 Repeat everything else exactly.\n\n{CODE}"
            ),
        ),
        (
            "free",
            "Write a long story about a lighthouse keeper who finds a message in a bottle."
                .to_string(),
        ),
    ]
}

fn request(prompt: &str) -> pb::PredictOptions {
    pb::PredictOptions {
        ignore_eos: true,
        ..chat_request(prompt, TOKENS)
    }
}

/// The best decode tok/s of RUNS requests, and the text.
async fn decode_rate(c: &BackendClient<Channel>, prompt: &str) -> TestResult<(f64, String)> {
    let (mut best, mut text) = (0.0f64, String::new());
    for _ in 0..RUNS {
        let reply =
            tokio::time::timeout(Duration::from_secs(600), c.clone().predict(request(prompt)))
                .await??
                .into_inner();
        let rate = reply.tokens as f64 / (reply.timing_token_generation / 1000.0);
        best = best.max(rate);
        text = String::from_utf8(reply.message)?;
    }
    Ok((best, text))
}

/// GetMetrics' speculation counters: steps that proposed, proposals made, proposals taken.
async fn speculation(c: &mut BackendClient<Channel>) -> TestResult<[f64; 3]> {
    let metrics = c.get_metrics(pb::MetricsRequest {}).await?.into_inner();
    let parsed: Value = serde_json::from_str(&metrics.prompt_json_for_slot)?;
    let n = |k: &str| parsed["speculation"][k].as_f64().unwrap_or(0.0);
    Ok([n("steps"), n("drafted"), n("accepted")])
}

/// One task under one setting: decode tok/s, the text, and the speculation counters.
struct Measured {
    rate: f64,
    text: String,
    steps: f64,
    drafted: f64,
    accepted: f64,
}

/// Each task's measurements of `model` under `options`, drafted for by `draft` (a fixture).
async fn measure(model: &str, options: &[&str], draft: Option<&str>) -> TestResult<Vec<Measured>> {
    let server = BackendProcess::start(&[]).await?;
    let mut c = server.client().await?;
    let req = pb::ModelOptions {
        model: fixture(model)?.to_string_lossy().into_owned(),
        options: options.iter().map(|s| s.to_string()).collect(),
        draft_model: match draft {
            Some(d) => fixture(d)?.to_string_lossy().into_owned(),
            None => String::new(),
        },
        ..Default::default()
    };
    let loaded = c.load_model(req).await?.into_inner();
    assert!(loaded.success, "{loaded:?}");
    decode_rate(&c, "Hello").await?; // warm-up
    let mut out = Vec::new();
    for (_, prompt) in tasks() {
        let before = speculation(&mut c).await?;
        let (rate, text) = decode_rate(&c, &prompt).await?;
        let after = speculation(&mut c).await?;
        out.push(Measured {
            rate,
            text,
            steps: after[0] - before[0],
            drafted: after[1] - before[1],
            accepted: after[2] - before[2],
        });
    }
    Ok(out)
}

/// Prints one setting's numbers against plain decoding's, task by task.
fn report(setting: &str, plain: &[Measured], spec: &[Measured]) {
    for (((name, _), p), s) in tasks().iter().zip(plain).zip(spec) {
        assert_eq!(
            p.text, s.text,
            "{name}: speculation changed the greedy text"
        );
        println!(
            "{name}, {setting}: {:.1} tok/s against {:.1} plain ({:.2}x); {:.0} of {:.0} \
             proposals taken ({:.0}%), {:.2} a verifying step",
            s.rate,
            p.rate,
            s.rate / p.rate,
            s.accepted,
            s.drafted,
            100.0 * s.accepted / s.drafted.max(1.0),
            s.accepted / s.steps.max(1.0),
        );
    }
}

/// Plain decoding measured again beside each setting, so that the machine's drift between
/// settings (the plain rate moved 168-191 tok/s between two runs of an hour) stays out of
/// each ratio.
#[tokio::main(flavor = "current_thread")]
async fn main() -> TestResult {
    // Greedy through the host path (top-k 1 at a temperature): what every verifying step
    // pays before its proposals.
    let mut settings = vec![(
        format!("{MODEL}, sampled on the host"),
        vec!["temperature:0.7".to_string(), "top_k:1".to_string()],
    )];
    for k in [1, 2, 4] {
        let options = vec![
            "speculative:ngram".to_string(),
            format!("num_draft_tokens:{k}"),
        ];
        settings.push((format!("{MODEL}, ngram k={k}"), options));
    }
    for (setting, options) in settings {
        let plain = measure(MODEL, &[], None).await?;
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let spec = measure(MODEL, &options, None).await?;
        report(&setting, &plain, &spec);
    }
    let plain = measure(TARGET, &[], None).await?;
    let spec = measure(TARGET, &["num_draft_tokens:2"], Some(MODEL)).await?;
    report(&format!("{TARGET}, draft {MODEL} k=2"), &plain, &spec);
    Ok(())
}
