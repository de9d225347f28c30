//! The engine thread's handlers driven by hand on the test's thread, over the fake model.

use super::*;
use crate::engine::build::Built;
use crate::engine::fake::{self, FakeModel, Trouble};
use crate::models::Queueing;
use crate::options::{LoadRequest, NoEnv};
use crate::request::Event;
use tokio::sync::mpsc as tmpsc;

type Rx = tmpsc::UnboundedReceiver<Result<Event>>;

/// An engine thread's state, driven by hand on this thread (no channel, no MLX stream).
fn engine() -> EngineThread {
    EngineThread::new(
        Arc::new(RwLock::new(Snapshot::default())),
        mpsc::channel().0,
    )
}

/// Installs a fake model, as a completed LoadModel would, with `options`.
fn install(engine: &mut EngineThread, model: FakeModel, options: &[&str]) {
    let request = LoadRequest {
        model: "fake".into(),
        options: options.iter().map(|o| o.to_string()).collect(),
        ..LoadRequest::default()
    };
    let config = LoadConfig::from_request(&request, &NoEnv).expect("the options parse");
    engine.install(Built {
        model: LoadedModel {
            model: Box::new(model),
            tokenizer: fake::tokenizer().clone(),
            config: serde_json::Value::Null,
            dir: std::path::PathBuf::new(),
        },
        config,
        context: 1 << 20,
        on_cluster: false,
        draft: None,
    });
}

/// Tokenizes at the edge, as the service does, and sends the request in.
fn generate(engine: &mut EngineThread, text: &str, max_tokens: usize) -> Rx {
    let info = engine.shared.read().expect("readable").model.clone();
    let info = info.expect("a model is installed");
    let options = GenerateOptions {
        max_tokens,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let request = info.request(text, options, "").expect("a valid prompt");
    let (events, rx) = tmpsc::unbounded_channel();
    engine.enqueue(request, events, None);
    rx
}

fn run_rounds(engine: &mut EngineThread) {
    for _ in 0..200 {
        if engine.batch.idle() {
            return;
        }
        engine.round();
    }
    panic!("the engine did not drain");
}

/// The tokens and the error a request got.
fn outcome(rx: &mut Rx) -> (usize, Option<Error>) {
    let (mut tokens, mut error) = (0, None);
    while let Ok(event) = rx.try_recv() {
        match event {
            Ok(Event::Token(_)) => tokens += 1,
            Ok(Event::Done(_)) => {}
            Err(e) => error = Some(e),
        }
    }
    (tokens, error)
}

/// The tokens of a request that got no error.
fn served(rx: &mut Rx) -> usize {
    let (tokens, error) = outcome(rx);
    assert!(error.is_none(), "{error:?}");
    tokens
}

/// Requests tokenized for a model that has since been replaced are ABORTED; the new
/// model's serve, and the metrics count them.
#[test]
fn ids_of_a_replaced_model_are_aborted_and_the_new_one_serves() {
    let mut engine = engine();
    install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
    let info = engine.shared.read().expect("readable").model.clone();
    let stale = info
        .expect("installed")
        .request("Hello there", GenerateOptions::default(), "");
    install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
    let (events, mut rx) = tmpsc::unbounded_channel();
    engine.enqueue(stale.expect("valid"), events, None);
    assert!(matches!(outcome(&mut rx).1, Some(Error::Aborted(m)) if m.contains("replaced")));
    let mut fresh = generate(&mut engine, "Hello there", 4);
    run_rounds(&mut engine);
    assert_eq!(served(&mut fresh), 4);
    let snapshot = engine.shared.read().expect("readable").clone();
    assert_eq!(snapshot.metrics.tokens_generated, 4);
    assert_eq!(snapshot.state, EngineState::Ready);
}

/// A request whose KV memory exceeds the whole budget is RESOURCE_EXHAUSTED at once.
#[test]
fn a_request_larger_than_the_kv_budget_is_refused_at_admission() {
    let mut engine = engine();
    install(
        &mut engine,
        FakeModel::new(Queueing::HostIds),
        &["kv_memory_mb:1"],
    );
    // 16 bytes a position: 100,000 positions are more than 1 MiB.
    let mut rx = generate(&mut engine, "Hello", 100_000);
    let (_, error) = outcome(&mut rx);
    assert!(matches!(error, Some(Error::Overloaded(m)) if m.contains("kv_memory_mb")));
    assert!(engine.batch.idle());
}

/// On one node, a failed round fails its requests and a panicking one fails them with
/// INTERNAL naming the panic; either way the model keeps serving the next request.
#[test]
fn a_failed_or_panicking_round_fails_its_requests_and_the_model_serves_on() {
    for trouble in [Trouble::Fail, Trouble::Panic] {
        let mut engine = engine();
        let model = FakeModel::new(Queueing::HostIds).with_trouble(trouble);
        install(&mut engine, model, &[]);
        let mut first = generate(&mut engine, "Hello", 3);
        run_rounds(&mut engine);
        let (_, error) = outcome(&mut first);
        match trouble {
            Trouble::Panic => assert!(
                matches!(&error, Some(Error::Internal(m)) if m.contains("a step panicked")),
                "{error:?}"
            ),
            _ => assert!(error.is_some(), "{trouble:?}"),
        }
        let mut second = generate(&mut engine, "Hello", 3);
        run_rounds(&mut engine);
        assert_eq!(served(&mut second), 3, "{trouble:?}");
    }
}

/// Free ends the running requests with ABORTED and forgets the model.
#[test]
fn free_aborts_the_running_requests_and_forgets_the_model() {
    let mut engine = engine();
    install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
    let mut rx = generate(&mut engine, "Hello", 50);
    engine.round();
    engine.free();
    assert!(matches!(outcome(&mut rx).1, Some(Error::Aborted(m)) if m.contains("freed")));
    assert!(engine.shared.read().expect("readable").model.is_none());
    let (events, mut late) = tmpsc::unbounded_channel();
    let request = GenerateRequest {
        ids: vec![1, 2],
        model: ModelSerial(1),
        options: GenerateOptions::default(),
    };
    engine.enqueue(request, events, None);
    assert!(matches!(outcome(&mut late).1, Some(Error::NotLoaded)));
}

/// A posted fault with no cluster under the engine (stale, or from a replaced one)
/// changes nothing.
#[test]
fn a_stale_cluster_fault_changes_nothing() {
    let mut engine = engine();
    install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
    engine.on_cluster_fault();
    let mut rx = generate(&mut engine, "Hello", 2);
    run_rounds(&mut engine);
    assert_eq!(served(&mut rx), 2);
}

/// A load that waits for a worker runs beside serving: the fake model answers while the
/// wait runs, and the wait ends at its next tick once its caller is gone, the model still
/// served and Status's wait cleared.
#[test]
fn a_wait_for_workers_runs_beside_serving_and_ends_when_its_caller_leaves() {
    let (post, posted) = mpsc::channel();
    let mut engine = EngineThread { post, ..engine() };
    install(&mut engine, FakeModel::new(Queueing::HostIds), &[]);
    let free = || std::net::TcpListener::bind("127.0.0.1:0").map(|l| l.local_addr());
    let mut ports: Vec<std::net::SocketAddr> = (0..3)
        .map(|_| free().expect("a port").expect("an address"))
        .collect();
    let control = ports.pop().expect("three ports").port();
    let hostfile = std::env::temp_dir().join(format!("wait-{}.json", std::process::id()));
    std::fs::write(&hostfile, serde_json::json!(ports).to_string()).expect("written");
    let request = LoadRequest {
        model: "fake".into(),
        options: vec![
            format!("hostfile:{}", hostfile.display()),
            format!("control_port:{control}"),
        ],
        ..LoadRequest::default()
    };
    let config = LoadConfig::from_request(&request, &NoEnv).expect("the options parse");
    let (tx, rx) = oneshot::channel();
    engine.on_load(Box::new(config), Reply::new(tx));
    assert!(engine.pending.is_some());
    let mut answer = generate(&mut engine, "Hello", 3);
    run_rounds(&mut engine);
    assert_eq!(served(&mut answer), 3);
    drop(rx);
    let waited = posted.recv_timeout(Duration::from_secs(2));
    let _ = std::fs::remove_file(&hostfile);
    let Ok(Command::Waited(outcome)) = waited else {
        panic!("the wait did not end after its caller left");
    };
    assert!(matches!(&outcome.result, Err(Error::Aborted(m)) if m.contains("caller left")));
    engine.on_waited(*outcome);
    let snapshot = engine.shared.read().expect("readable").clone();
    assert!(snapshot.load_wait.is_none() && snapshot.model.is_some());
    assert!(snapshot
        .last_error
        .is_some_and(|e| e.contains("caller left")));
}
