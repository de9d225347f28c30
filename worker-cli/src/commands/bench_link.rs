//! `worker bench-link`: the link between ranks as MLX uses it. Every rank runs it with the
//! same hostfile; rank 0 prints all_sum (every rank) and send/recv (rank 0 and rank 1,
//! ping-pong) latency and bandwidth for sizes from 4 KB to 64 MB, like the RDMA benchmarks
//! users know, and a JSON line.

use std::time::Instant;

use backend::distributed::Group;
use mlx_rs::{Array, Dtype};
use serde_json::json;

use super::CliResult;
use crate::args::BenchLinkArgs;

/// Average and best seconds of one operation.
struct Timing {
    avg: f64,
    best: f64,
}

impl Timing {
    fn measure(iters: usize, mut op: impl FnMut() -> CliResult) -> CliResult<Timing> {
        op()?; // warm-up
        let (mut total, mut best) = (0.0, f64::MAX);
        for _ in 0..iters {
            let t = Instant::now();
            op()?;
            let s = t.elapsed().as_secs_f64();
            total += s;
            best = best.min(s);
        }
        Ok(Timing {
            avg: total / iters as f64,
            best,
        })
    }

    fn row(&self, bytes: usize) -> serde_json::Value {
        json!({"avg_ms": self.avg * 1e3, "avg_gb_s": gb_s(bytes, self.avg), "peak_gb_s": gb_s(bytes, self.best)})
    }
}

fn gb_s(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs.max(1e-12) / 1e9
}

/// Fewer repetitions for large messages, so every size takes a similar time.
fn iterations(bytes: usize, max: usize) -> usize {
    ((256usize << 20) / bytes).clamp(3, max)
}

pub fn run(args: BenchLinkArgs) -> CliResult {
    let hostfile = super::hostfile_for_rank(&args.hostfile, &args.backend, args.rank)?;
    let group = Group::join(&hostfile, args.rank, args.coordinator.as_deref())?;
    let (rank, size) = (group.rank(), group.size());
    if rank == 0 {
        println!("{size} ranks over {}", args.backend);
        println!(
            "{:>9} | {:>10} {:>9} {:>9} | {:>10} {:>9} {:>9}",
            "size", "all_sum ms", "avg GB/s", "peak GB/s", "p2p ms", "avg GB/s", "peak GB/s"
        );
    }
    let mut rows = Vec::new();
    for kb in args.sizes_kb.iter().copied() {
        let bytes = kb << 10;
        let n = (bytes / 4) as i32;
        let x = Array::ones::<f32>(&[n])?;
        let iters = iterations(bytes, args.max_iters);
        let all_sum = Timing::measure(iters, || {
            group.all_sum(&x)?.eval()?;
            Ok(())
        })?;
        let p2p = Timing::measure(iters, || round_trip(&group, &x))?;
        let one_way = Timing {
            avg: p2p.avg / 2.0,
            best: p2p.best / 2.0,
        };
        if rank == 0 {
            println!(
                "{:>9} | {:>10.3} {:>9.3} {:>9.3} | {:>10.3} {:>9.3} {:>9.3}",
                human(bytes),
                all_sum.avg * 1e3,
                gb_s(bytes, all_sum.avg),
                gb_s(bytes, all_sum.best),
                one_way.avg * 1e3,
                gb_s(bytes, one_way.avg),
                gb_s(bytes, one_way.best)
            );
        }
        rows.push(
            json!({"bytes": bytes, "all_sum": all_sum.row(bytes), "send_recv": one_way.row(bytes)}),
        );
    }
    if rank == 0 {
        println!(
            "{}",
            json!({"ranks": size, "backend": args.backend, "sizes": rows})
        );
    }
    Ok(())
}

/// Rank 0 sends `x` to rank 1, which sends it back: half a round trip is one transfer.
fn round_trip(group: &Group, x: &Array) -> CliResult {
    let n = x.shape()[0];
    match group.rank() {
        0 => {
            group.send(x, 1)?.eval()?;
            group.recv(&[n], Dtype::Float32, 1)?.eval()?;
        }
        1 => {
            let y = group.recv(&[n], Dtype::Float32, 0)?;
            group.send(&y, 0)?.eval()?;
        }
        _ => {}
    }
    Ok(())
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MB", b >> 20),
        b => format!("{} KB", b >> 10),
    }
}
