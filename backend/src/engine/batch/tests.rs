//! The scheduler's edge cases against a fake model, in milliseconds.
use super::*;
use crate::engine::fake::{self, tokenizer, Call, FakeModel, StepRow};
use crate::request::FinishReason;
use crate::speculative::Drafting;
use tokio::sync::mpsc as tmpsc;

type Rx = tmpsc::UnboundedReceiver<Result<Event>>;

const MODES: [Queueing; 3] = [Queueing::HostIds, Queueing::Async, Queueing::NextStep];

/// No test here needs more rounds; more means the scheduler stopped making progress.
const MAX_ROUNDS: usize = 500;

/// Roomy limits: every test tightens only what it is about.
fn limits() -> BatchLimits {
    BatchLimits {
        max_batch: 4,
        queue_timeout: Duration::from_secs(60),
        kv_budget: 1 << 30,
        prefill_budget: 4096,
    }
}

/// Greedy, ignoring eos, so a request makes exactly `max_tokens` tokens.
fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        ignore_eos: true,
        ..GenerateOptions::default()
    }
}

/// Sampled on the host (a temperature) yet always the model's greedy choice (top-k 1).
fn sampled(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: crate::sampling::SamplingParams {
            temperature: 0.7,
            top_k: 1,
            seed: Some(1),
            ..Default::default()
        },
        ..greedy(max_tokens)
    }
}

/// Greedy, with each token's log-probability (so sampled on the host).
fn with_logprobs(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        logprobs: Some(2),
        ..greedy(max_tokens)
    }
}

/// A prompt of ordinary (not special) ids; prompts of different seeds share no prefix.
fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| 100 + (seed * 1009 + i * 37) % 40_000)
        .collect()
}

/// The tokens the fake model's greedy decode makes after `prompt`.
fn expected(prompt: &[u32], n: usize) -> Vec<u32> {
    let last = *prompt.last().expect("a prompt");
    std::iter::successors(Some(last), |&id| Some(fake::next_token(id)))
        .skip(1)
        .take(n)
        .collect()
}

fn waiting(ids: Vec<u32>, options: GenerateOptions) -> (Waiting, Rx) {
    let (events, rx) = tmpsc::unbounded_channel();
    let w = Waiting {
        ids,
        options,
        events,
        since: Instant::now(),
        _in_flight: None,
    };
    (w, rx)
}

fn enqueue(batch: &mut Batch, ids: Vec<u32>, options: GenerateOptions) -> Rx {
    let (w, rx) = waiting(ids, options);
    batch.enqueue(w);
    rx
}

/// What a request received so far.
#[derive(Default)]
struct Outcome {
    tokens: Vec<u32>,
    done: Option<Summary>,
    error: Option<Error>,
}

fn drain(rx: &mut Rx) -> Outcome {
    let mut out = Outcome::default();
    while let Ok(event) = rx.try_recv() {
        match event {
            Ok(Event::Token(t)) => out.tokens.push(t.id),
            Ok(Event::Done(s)) => out.done = Some(s),
            Err(e) => out.error = Some(e),
        }
    }
    out
}

fn round(batch: &mut Batch, model: &FakeModel, limits: &BatchLimits) -> Vec<Summary> {
    batch
        .round(model, tokenizer(), limits)
        .expect("the round runs")
}

/// Runs rounds until nothing is queued or running.
fn run_until_idle(batch: &mut Batch, model: &FakeModel, limits: &BatchLimits) {
    for _ in 0..MAX_ROUNDS {
        if batch.idle() {
            return;
        }
        round(batch, model, limits);
    }
    panic!("the batch did not drain within {MAX_ROUNDS} rounds");
}

/// Three greedy requests (one joining a running batch) under `queueing`: their tokens.
fn three_requests(queueing: Queueing) -> Vec<Vec<u32>> {
    let model = FakeModel::new(queueing);
    let mut batch = Batch::new(4);
    let limits = limits();
    let specs = [(prompt(11, 5), 3), (prompt(12, 12), 6), (prompt(13, 70), 9)];
    let mut rxs: Vec<Rx> = specs[..2]
        .iter()
        .map(|(p, n)| enqueue(&mut batch, p.clone(), greedy(*n)))
        .collect();
    round(&mut batch, &model, &limits);
    round(&mut batch, &model, &limits);
    let (p, n) = &specs[2];
    rxs.push(enqueue(&mut batch, p.clone(), greedy(*n)));
    run_until_idle(&mut batch, &model, &limits);
    fake::replay(&model.calls()).expect("a follower could follow every step");
    let mut tokens = Vec::new();
    for (rx, (p, n)) in rxs.iter_mut().zip(&specs) {
        let out = drain(rx);
        assert!(out.error.is_none(), "{queueing:?}: {:?}", out.error);
        let done = out.done.expect("the request is answered");
        assert_eq!(
            (done.generated_tokens, done.finish),
            (*n, FinishReason::Length)
        );
        assert_eq!(out.tokens, expected(p, *n), "{queueing:?}");
        tokens.push(out.tokens);
    }
    tokens
}

/// The one-step-ahead greedy path (queued with async_eval or left to the next step) must
/// give every row the tokens that stepping with host ids gives, as rows come and go.
#[test]
fn greedy_rows_get_the_same_tokens_in_every_queueing_mode() {
    let host = three_requests(Queueing::HostIds);
    assert_eq!(three_requests(Queueing::Async), host);
    assert_eq!(three_requests(Queueing::NextStep), host);
}

/// Rows that must be sampled on the host (a temperature, logprobs) join and leave greedy
/// rows that are stepped one ahead: every row still gets the model's choice.
#[test]
fn host_sampled_rows_mixed_with_greedy_rows_change_no_token() {
    let (sampled, with_logprobs) = (sampled(4), with_logprobs(3));
    for queueing in MODES {
        let model = FakeModel::new(queueing);
        let mut batch = Batch::new(0);
        let limits = limits();
        let specs = [
            (prompt(30, 6), greedy(8)),
            (prompt(31, 9), sampled.clone()),
            (prompt(32, 4), with_logprobs.clone()),
        ];
        let mut rxs = Vec::new();
        for (p, opts) in &specs {
            rxs.push(enqueue(&mut batch, p.clone(), opts.clone()));
            round(&mut batch, &model, &limits);
        }
        run_until_idle(&mut batch, &model, &limits);
        for (rx, (p, opts)) in rxs.iter_mut().zip(&specs) {
            let out = drain(rx);
            assert_eq!(out.tokens, expected(p, opts.max_tokens), "{queueing:?}");
        }
        fake::replay(&model.calls()).expect("a follower could follow every step");
    }
}

/// A prompt whose last two tokens start over a run of the fake's own greedy chain, so prompt
/// lookup (which matches two tokens or more) proposes what the model will say next.
fn echoing_prompt(seed: u32, run: usize) -> Vec<u32> {
    let mut p = prompt(seed, 3);
    let start = [p[1], p[2]];
    p.extend(expected(&p, run));
    p.extend(start);
    p
}

/// Speculating rows (greedy, sampled, with logprobs) in one batch with rows that do not:
/// every row gets the tokens of plain decoding, proposals are taken, a step verifies
/// several positions, and the rejected positions are dropped on every rank (a follower
/// replaying the steps finds each slot where rank 0 says).
#[test]
fn speculating_rows_take_proposals_and_change_no_token() {
    let ngram = |opts: GenerateOptions| GenerateOptions {
        drafting: Drafting::Ngram,
        draft_tokens: 4,
        ..opts
    };
    let (sampled, logprobs) = (sampled(9), with_logprobs(7));
    for queueing in MODES {
        let model = FakeModel::new(queueing);
        let mut batch = Batch::new(4);
        let specs = [
            (echoing_prompt(40, 6), ngram(greedy(10))),
            (echoing_prompt(41, 12), ngram(sampled.clone())),
            (prompt(42, 5), greedy(6)),
            (echoing_prompt(43, 3), ngram(logprobs.clone())),
        ];
        let mut rxs: Vec<Rx> = specs
            .iter()
            .map(|(p, o)| enqueue(&mut batch, p.clone(), o.clone()))
            .collect();
        run_until_idle(&mut batch, &model, &limits());
        for (rx, (p, opts)) in rxs.iter_mut().zip(&specs) {
            let out = drain(rx);
            assert!(out.error.is_none(), "{:?}", out.error);
            assert_eq!(out.tokens, expected(p, opts.max_tokens), "{queueing:?}");
        }
        let calls = model.calls();
        fake::replay(&calls).expect("a follower could follow every step");
        assert!(
            calls.iter().any(|c| !c.prefill && c.shape[1] > 1),
            "{queueing:?}"
        );
        let trims = calls.iter().flat_map(|c| &c.cache_ops);
        assert!(trims
            .into_iter()
            .any(|op| matches!(op, CacheOp::Trim { .. })));
        let spec = batch.speculation();
        assert!(
            spec.accepted > 0 && spec.accepted <= spec.drafted,
            "{spec:?}"
        );
    }
}

/// Proposals never run past max_tokens: a step writes no position the row did not reserve.
#[test]
fn proposals_stop_at_max_tokens() {
    let model = FakeModel::new(Queueing::HostIds);
    let mut batch = Batch::new(0);
    let opts = GenerateOptions {
        drafting: Drafting::Ngram,
        draft_tokens: 8,
        ..greedy(3)
    };
    let p = echoing_prompt(50, 12);
    let mut rx = enqueue(&mut batch, p.clone(), opts);
    run_until_idle(&mut batch, &model, &limits());
    assert_eq!(drain(&mut rx).tokens, expected(&p, 3));
    let widest = model
        .calls()
        .iter()
        .filter(|c| !c.prefill)
        .map(|c| c.shape[1])
        .max();
    assert_eq!(widest, Some(3), "the input and the two tokens left");
}

/// Prefill takes up to `prefill_budget` prompt tokens a round (at least one chunk), so a
/// long prompt is spread over rounds and short ones that arrive together decode together.
#[test]
fn prefill_chunks_share_a_round_budget() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(0);
    let limits = BatchLimits {
        prefill_budget: 16,
        ..limits()
    };
    let chunked = |n| GenerateOptions {
        prefill_step: 8,
        ..greedy(n)
    };
    let _rxs: Vec<Rx> = [prompt(40, 20), prompt(41, 5), prompt(42, 5)]
        .into_iter()
        .map(|p| enqueue(&mut batch, p, chunked(2)))
        .collect();
    let shapes = |model: &FakeModel| -> Vec<(u64, Vec<i32>)> {
        let calls = model.calls();
        calls
            .iter()
            .map(|c| (c.rows[0].slot, c.shape.clone()))
            .collect()
    };
    round(&mut batch, &model, &limits);
    assert_eq!(shapes(&model), [(1, vec![1, 8]), (1, vec![1, 8])]);
    round(&mut batch, &model, &limits);
    let second = &shapes(&model)[2..];
    let prefills = [(1, vec![1, 3]), (2, vec![1, 4]), (3, vec![1, 4])];
    assert_eq!(second[..3], prefills);
    assert_eq!(second[3], (1, vec![3, 1]), "the three rows decode together");
    let _rx = enqueue(&mut batch, prompt(43, 40), chunked(1));
    let over = BatchLimits {
        prefill_budget: 4,
        ..limits
    };
    run_until_idle(&mut batch, &model, &over);
    let calls = model.calls();
    let fourth: Vec<&Call> = calls.iter().filter(|c| c.rows[0].slot == 4).collect();
    assert!(fourth[..4].iter().all(|c| c.prefill && c.shape == [1, 8]));
    assert_eq!(
        fourth[4].shape,
        [1, 7],
        "a chunk over budget still runs alone"
    );
}

/// A request whose client left while it waited is dropped before it costs a step.
#[test]
fn a_request_whose_client_left_while_waiting_never_runs() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let in_flight = Arc::new(AtomicUsize::new(1));
    let (mut w, rx) = waiting(prompt(1, 8), greedy(4));
    w._in_flight = Some(InFlight(in_flight.clone()));
    batch.enqueue(w);
    drop(rx);
    assert!(round(&mut batch, &model, &limits()).is_empty());
    assert!(batch.idle());
    assert!(
        model.calls().is_empty(),
        "the model ran: {:?}",
        model.calls()
    );
    assert_eq!(
        in_flight.load(Ordering::SeqCst),
        0,
        "still counted in flight"
    );
}

/// A request that waited past queue_timeout is answered Overloaded, without a step.
#[test]
fn a_request_past_queue_timeout_is_overloaded_and_never_runs() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let (mut w, mut rx) = waiting(prompt(1, 8), greedy(4));
    w.since = Instant::now()
        .checked_sub(Duration::from_millis(5))
        .expect("an instant 5 ms ago");
    batch.enqueue(w);
    let limits = BatchLimits {
        queue_timeout: Duration::ZERO,
        ..limits()
    };
    assert!(round(&mut batch, &model, &limits).is_empty());
    assert!(batch.idle());
    assert!(
        model.calls().is_empty(),
        "the model ran: {:?}",
        model.calls()
    );
    let out = drain(&mut rx);
    assert!(out.tokens.is_empty() && out.done.is_none());
    assert!(
        matches!(out.error, Some(Error::Overloaded(_))),
        "{:?}",
        out.error
    );
    assert!(
        matches!(rx.try_recv(), Err(tmpsc::error::TryRecvError::Disconnected)),
        "the request is let go"
    );
}

/// A rank lost during the round that admits a request must fail that request too: the
/// round's senders include the queued requests, not just the running ones.
#[test]
fn senders_cover_queued_requests() {
    let mut batch = Batch::new(0);
    let (tx, mut rx) = tmpsc::unbounded_channel();
    batch.enqueue(Waiting {
        ids: vec![1, 2, 3],
        options: GenerateOptions::default(),
        events: tx,
        since: Instant::now(),
        _in_flight: None,
    });
    let senders = batch.senders();
    assert_eq!(senders.len(), 1);
    for s in senders {
        s.send(Err(Error::RankLost("rank 1 was lost".into())))
            .expect("the request is listening");
    }
    assert!(matches!(rx.try_recv(), Ok(Err(Error::RankLost(_)))));
}

/// With KV room for one request, the next waits until the first retires; then the first's
/// cached prefix is evicted to admit it, and the next step carries that eviction.
#[test]
fn a_request_waits_for_kv_budget_and_evicts_a_cached_prefix() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let (a, b) = (prompt(1, 10), prompt(2, 10));
    let need = kv_reservation(&model, a.len(), &greedy(4));
    let limits = BatchLimits {
        kv_budget: need + need / 2,
        ..limits()
    };
    let mut rx_a = enqueue(&mut batch, a.clone(), greedy(4));
    let mut rx_b = enqueue(&mut batch, b.clone(), greedy(4));
    for _ in 0..MAX_ROUNDS {
        if batch.idle() {
            break;
        }
        round(&mut batch, &model, &limits);
        let held = batch.reserved() + batch.cache.bytes();
        assert!(held <= limits.kv_budget, "{held} bytes held");
    }
    let calls = model.calls();
    let b_first = calls.iter().position(|c| c.rows[0].slot == 2);
    let b_first = b_first.expect("the second request ran");
    let slots = |c: &Call| c.rows.iter().map(|r| r.slot).collect::<Vec<_>>();
    assert!(
        calls[..b_first].iter().all(|c| slots(c) == [1]),
        "B ran beside A"
    );
    assert!(calls[b_first..].iter().all(|c| c.rows[0].slot == 2));
    let admitted = &calls[b_first];
    assert!(admitted.prefill);
    assert_eq!(admitted.rows, [StepRow { slot: 2, offset: 0 }]);
    let a_retired = [
        CacheOp::Save {
            slot: 1,
            entry: 1,
            len: 14,
        },
        CacheOp::Release { slot: 1 },
    ];
    let evicted = CacheOp::Evict { entry: 1 };
    assert_eq!(admitted.cache_ops, [&a_retired[..], &[evicted]].concat());
    assert_eq!(drain(&mut rx_a).tokens, expected(&a, 4));
    assert_eq!(drain(&mut rx_b).tokens, expected(&b, 4));
    fake::replay(&calls).expect("a follower could follow every step");
}

/// A prompt a cached entry fully covers has nothing to prefill: its Restore must still
/// reach the model, in the very step that first runs its row.
#[test]
fn a_restore_with_nothing_to_prefill_reaches_the_next_step() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let limits = limits();
    let p = prompt(3, 70);
    let mut rx_a = enqueue(&mut batch, p.clone(), greedy(3));
    run_until_idle(&mut batch, &model, &limits);
    let pending = batch.cache_ops.clone();
    let a_retired = [
        CacheOp::Save {
            slot: 1,
            entry: 2,
            len: 73,
        },
        CacheOp::Adopt { entry: 2, from: 1 },
        CacheOp::Evict { entry: 1 },
        CacheOp::Release { slot: 1 },
    ];
    assert_eq!(
        pending, a_retired,
        "the prompt's entry grew to the whole sequence"
    );
    let first = model.calls().len();
    let mut rx_b = enqueue(&mut batch, p.clone(), greedy(3));
    round(&mut batch, &model, &limits);
    let restore = CacheOp::Restore {
        slot: 2,
        entry: 2,
        len: 69,
    };
    let next = Call {
        shape: vec![1, 1],
        prefill: false,
        rows: vec![StepRow {
            slot: 2,
            offset: 69,
        }],
        cache_ops: [&a_retired[..], &[restore]].concat(),
        failed: false,
    };
    assert_eq!(model.calls()[first], next);
    run_until_idle(&mut batch, &model, &limits);
    assert_eq!(drain(&mut rx_a).tokens, expected(&p, 3));
    assert_eq!(drain(&mut rx_b).tokens, expected(&p, 3));
    let stats = batch.cache_stats();
    assert_eq!((stats.hits, stats.reused_tokens), (1, 69));
    fake::replay(&model.calls()).expect("a follower could follow every step");
}

/// A repeated prompt arriving while its first copy decodes joins the batch from the
/// prefix saved at prefill, its Restore in the first step it takes part in.
#[test]
fn a_restored_prompt_joins_a_running_batch_in_the_next_step() {
    for queueing in MODES {
        let model = FakeModel::new(queueing);
        let mut batch = Batch::new(4);
        let limits = limits();
        let p = prompt(4, 70);
        let mut rx_a = enqueue(&mut batch, p.clone(), greedy(10));
        round(&mut batch, &model, &limits);
        round(&mut batch, &model, &limits);
        let first = model.calls().len();
        let mut rx_b = enqueue(&mut batch, p.clone(), greedy(3));
        round(&mut batch, &model, &limits);
        let next = &model.calls()[first];
        let restore = CacheOp::Restore {
            slot: 2,
            entry: 1,
            len: 69,
        };
        assert_eq!(next.cache_ops, [restore], "{queueing:?}");
        assert!(!next.prefill, "{queueing:?}");
        assert!(
            next.rows.contains(&StepRow {
                slot: 2,
                offset: 69
            }),
            "{queueing:?}"
        );
        run_until_idle(&mut batch, &model, &limits);
        assert_eq!(drain(&mut rx_a).tokens, expected(&p, 10), "{queueing:?}");
        assert_eq!(drain(&mut rx_b).tokens, expected(&p, 3), "{queueing:?}");
        fake::replay(&model.calls()).expect("a follower could follow every step");
    }
}

/// Requests for the cache-change ledger: shared prefixes, repeats and a zero-token
/// request, arriving (at the round given) while others run.
fn arrivals() -> Vec<(usize, Vec<u32>, usize)> {
    let base = prompt(20, 80);
    let with = |seed, len| [base.clone(), prompt(seed, len)].concat();
    vec![
        (0, with(21, 5), 4),
        (0, prompt(22, 30), 6),
        (1, with(21, 5), 3),
        (2, with(23, 8), 5),
        (3, prompt(24, 100), 2),
        (5, with(21, 5), 0),
        (6, prompt(22, 30), 2),
        (9, with(23, 8), 7),
    ]
}

/// Runs `arrivals` under `queueing` with a two-entry LRU, a tight KV budget and chunked
/// prefill, checking after every round that what the model was handed, then what is
/// still queued, only grew at its end: no queued change is dropped or reordered.
fn run_ledger(queueing: Queueing, model: &FakeModel, batch: &mut Batch) {
    let limits = BatchLimits {
        max_batch: 3,
        kv_budget: 14_000,
        prefill_budget: 48,
        ..limits()
    };
    let work = arrivals();
    let mut rxs = Vec::new();
    let mut seen: Vec<CacheOp> = Vec::new();
    for r in 0..MAX_ROUNDS {
        for (_, p, n) in work.iter().filter(|(at, ..)| *at == r) {
            let opts = GenerateOptions {
                prefill_step: 32,
                ..greedy(*n)
            };
            rxs.push((enqueue(batch, p.clone(), opts), p, *n));
        }
        if batch.idle() && r > 9 {
            break;
        }
        round(batch, model, &limits);
        let now = [model.delivered_ops(), batch.cache_ops.clone()].concat();
        assert!(
            now.starts_with(&seen),
            "{queueing:?} round {r}: queued cache changes were lost or reordered:\n\
             before {seen:?}\nnow {now:?}"
        );
        seen = now;
    }
    assert!(batch.idle(), "{queueing:?}: the batch did not drain");
    for (rx, p, n) in &mut rxs {
        let out = drain(rx);
        assert_eq!(out.tokens, expected(p, *n), "{queueing:?}");
        assert!(out.done.is_some() && out.error.is_none(), "{queueing:?}");
    }
}

/// Every Save, Restore, Release and Evict the scheduler queues reaches exactly one later
/// step, in order, and a follower replaying the steps agrees with rank 0 throughout.
#[test]
fn every_cache_change_reaches_exactly_one_later_step_in_order() {
    for queueing in MODES {
        let model = FakeModel::new(queueing);
        let mut batch = Batch::new(2);
        run_ledger(queueing, &model, &mut batch);
        let pending = batch.cache_ops.clone();
        let first = model.calls().len();
        let _rx = enqueue(&mut batch, prompt(25, 3), greedy(1));
        round(&mut batch, &model, &limits());
        assert_eq!(model.calls()[first].cache_ops, pending, "{queueing:?}");
        let ops = model.delivered_ops();
        for (i, op) in ops.iter().enumerate() {
            assert!(
                !ops[..i].contains(op),
                "{queueing:?}: {op:?} was handed twice"
            );
        }
        let has = |f: fn(&CacheOp) -> bool| ops.iter().any(f);
        assert!(
            has(|op| matches!(op, CacheOp::Restore { .. })),
            "{queueing:?}: no hit"
        );
        assert!(
            has(|op| matches!(op, CacheOp::Evict { .. })),
            "{queueing:?}: no eviction"
        );
        fake::replay(&model.calls()).expect("a follower could follow every step");
    }
}

/// A step that fails between rounds fails the round; then every request, running or
/// queued, gets the error, and the Release of each running slot and the Evict of every
/// cache entry reach the next request's first step.
#[test]
fn a_failed_step_fails_every_request_and_its_cleanup_reaches_the_next_step() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let limits = BatchLimits {
        max_batch: 2,
        ..limits()
    };
    let in_flight = Arc::new(AtomicUsize::new(3));
    let mut rxs: Vec<Rx> = [prompt(5, 70), prompt(6, 10), prompt(7, 10)]
        .into_iter()
        .map(|p| {
            let (mut w, rx) = waiting(p, greedy(20));
            w._in_flight = Some(InFlight(in_flight.clone()));
            batch.enqueue(w);
            rx
        })
        .collect();
    round(&mut batch, &model, &limits);
    assert_eq!((batch.active.len(), batch.waiting.len()), (2, 1));
    model.fail_next();
    let err = batch.round(&model, tokenizer(), &limits);
    let err = err.expect_err("the failed step fails the round");
    assert!(matches!(err, Error::RankLost(_)), "{err:?}");
    batch.fail_all(&err);
    assert!(batch.idle());
    assert_eq!(
        in_flight.load(Ordering::SeqCst),
        0,
        "requests still in flight"
    );
    let cleanup = vec![
        CacheOp::Release { slot: 1 },
        CacheOp::Release { slot: 2 },
        CacheOp::Evict { entry: 1 },
    ];
    assert_eq!(batch.cache_ops, cleanup);
    assert_eq!(batch.cache_stats().entries, 0);
    for (i, rx) in rxs.iter_mut().enumerate() {
        let out = drain(rx);
        assert!(
            matches!(out.error, Some(Error::RankLost(_))),
            "request {i}: {:?}",
            out.error
        );
        assert!(out.done.is_none(), "request {i} was answered Done");
    }
    let first = model.calls().len();
    let p = prompt(8, 10);
    let mut rx = enqueue(&mut batch, p.clone(), greedy(2));
    run_until_idle(&mut batch, &model, &limits);
    let next = &model.calls()[first];
    assert_eq!(next.rows, [StepRow { slot: 3, offset: 0 }]);
    assert_eq!(next.cache_ops, cleanup);
    assert_eq!(drain(&mut rx).tokens, expected(&p, 2));
    fake::replay(&model.calls()).expect("a follower could follow every step");
}

/// A client that stops listening mid-generation is retired at the next round, its slot
/// saved and released, and those changes reach the next step of the rows that remain.
#[test]
fn a_client_that_leaves_mid_generation_is_retired_at_the_next_round() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let limits = limits();
    let rx_a = enqueue(&mut batch, prompt(9, 10), greedy(50));
    let b = prompt(10, 12);
    let mut rx_b = enqueue(&mut batch, b.clone(), greedy(50));
    round(&mut batch, &model, &limits);
    round(&mut batch, &model, &limits);
    drop(rx_a);
    let done = round(&mut batch, &model, &limits);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].finish, done[0].generated_tokens),
        (FinishReason::Cancelled, 3)
    );
    assert_eq!(batch.active.len(), 1);
    let retired = vec![
        CacheOp::Save {
            slot: 1,
            entry: 1,
            len: 13,
        },
        CacheOp::Release { slot: 1 },
    ];
    assert_eq!(batch.cache_ops, retired);
    let first = model.calls().len();
    round(&mut batch, &model, &limits);
    let next = &model.calls()[first];
    assert_eq!(next.cache_ops, retired);
    assert_eq!(next.rows.iter().map(|r| r.slot).collect::<Vec<_>>(), [2]);
    run_until_idle(&mut batch, &model, &limits);
    assert_eq!(drain(&mut rx_b).tokens, expected(&b, 50));
    fake::replay(&model.calls()).expect("a follower could follow every step");
}

/// A client that leaves in the round its long prompt's snapshot went out to the prefix cache
/// (the `Save` riding on that round's step): it is retired at the next round with its slot
/// released after the save, the entry stays, and a request with the same prompt restores it
/// and makes the same tokens.
#[test]
fn a_client_that_leaves_while_its_prompt_is_saved_leaves_a_usable_entry() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let limits = BatchLimits {
        prefill_budget: 32,
        ..limits()
    };
    let long = prompt(21, SNAPSHOT_MIN_TOKENS + 6);
    let rx_a = enqueue(&mut batch, long.clone(), greedy(20));
    let mut rx_b = enqueue(&mut batch, prompt(22, 8), greedy(20));
    let snapshot_sent = |m: &FakeModel| {
        m.calls().iter().flat_map(|c| c.cache_ops.clone()).any(
            |op| matches!(op, CacheOp::Save { slot: 1, len, .. } if len >= SNAPSHOT_MIN_TOKENS),
        )
    };
    for _ in 0..MAX_ROUNDS {
        if snapshot_sent(&model) {
            break;
        }
        round(&mut batch, &model, &limits);
    }
    assert!(snapshot_sent(&model), "the prompt's snapshot went out");
    drop(rx_a);
    let done = round(&mut batch, &model, &limits);
    let cancelled: Vec<_> = done.iter().map(|s| s.finish).collect();
    assert!(
        cancelled.contains(&FinishReason::Cancelled),
        "{cancelled:?}"
    );
    assert_eq!(batch.cache_ops.last(), Some(&CacheOp::Release { slot: 1 }));
    let first = model.calls().len();
    let mut rx_c = enqueue(&mut batch, long.clone(), greedy(5));
    run_until_idle(&mut batch, &model, &limits);
    let calls = model.calls();
    assert!(calls[first]
        .cache_ops
        .contains(&CacheOp::Release { slot: 1 }));
    let restored = calls[first..]
        .iter()
        .flat_map(|c| c.cache_ops.clone())
        .any(|op| matches!(op, CacheOp::Restore { len, .. } if len >= SNAPSHOT_MIN_TOKENS));
    assert!(restored, "the new request restored the saved prompt");
    assert_eq!(drain(&mut rx_c).tokens, expected(&long, 5));
    assert!(drain(&mut rx_b).done.is_some());
    fake::replay(&calls).expect("a follower could follow every step");
}

/// A client that leaves while its long prompt is still being prefilled in chunks: no chunk
/// of it runs after the next round's retirement, its slot is released, and the row beside
/// it goes on untouched.
#[test]
fn a_client_that_leaves_mid_prefill_gets_no_more_chunks() {
    let model = FakeModel::new(Queueing::Async);
    let mut batch = Batch::new(4);
    let limits = BatchLimits {
        prefill_budget: 16,
        ..limits()
    };
    let b = prompt(24, 6);
    let mut rx_b = enqueue(&mut batch, b.clone(), greedy(12));
    let rx_a = enqueue(&mut batch, prompt(23, 200), greedy(5));
    round(&mut batch, &model, &limits);
    round(&mut batch, &model, &limits);
    let prefills = |m: &FakeModel| {
        m.calls()
            .iter()
            .filter(|c| c.prefill && c.rows[0].slot == 2)
            .count()
    };
    let before = prefills(&model);
    assert!(
        (1..200 / 16).contains(&before),
        "mid-prefill: {before} chunks ran"
    );
    drop(rx_a);
    round(&mut batch, &model, &limits);
    run_until_idle(&mut batch, &model, &limits);
    assert!(
        prefills(&model) <= before + 1,
        "at most the chunk of the round it left in"
    );
    let released = model
        .calls()
        .iter()
        .flat_map(|c| c.cache_ops.clone())
        .any(|op| op == CacheOp::Release { slot: 2 });
    assert!(released, "the slot was released on the other ranks too");
    assert_eq!(drain(&mut rx_b).tokens, expected(&b, 12));
    fake::replay(&model.calls()).expect("a follower could follow every step");
}
