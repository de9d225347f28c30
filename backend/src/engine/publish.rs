//! The snapshot the engine thread publishes after each command and round: what Health,
//! Status and the metrics read without waiting for the thread.

use super::core::EngineThread;
use super::shared::Snapshot;
use crate::request::Summary;

impl EngineThread {
    /// Changes the published snapshot (a poisoned lock leaves it as it was).
    pub(super) fn publish(&self, f: impl FnOnce(&mut Snapshot)) {
        if let Ok(mut s) = self.shared.write() {
            f(&mut s);
        }
    }

    /// The batch's queue, rows and KV held, however the round ended (a failed one emptied it).
    pub(super) fn publish_load(&self) {
        let (queued, running) = (self.batch.queued(), self.batch.running());
        let reserved = self.batch.reserved();
        self.publish(|s| {
            (s.metrics.queued, s.metrics.running) = (queued, running);
            s.metrics.kv_reserved_bytes = reserved;
        });
    }

    /// The round's finished requests counted, and the batch's gauges as the round left them.
    pub(super) fn count(&self, done: &[Summary]) {
        let (cache, reserved) = (self.batch.cache_stats(), self.batch.reserved());
        let (grammar, speculation) = (self.batch.grammar_time(), self.batch.speculation());
        let throughput = self.batch.throughput();
        self.publish(|s| {
            s.metrics.prefix_cache = cache;
            s.metrics.kv_reserved_bytes = reserved;
            s.metrics.throughput = throughput;
            s.metrics.grammar = grammar;
            s.metrics.speculation = speculation;
            for summary in done {
                let m = &mut s.metrics;
                m.requests += 1;
                m.prompt_tokens_processed += summary.prompt_tokens as u64;
                m.tokens_generated += summary.generated_tokens as u64;
                m.last_tokens_per_second =
                    summary.generated_tokens as f64 / summary.decode_secs.max(1e-9);
            }
        });
    }
}
