//! What rank 0 knows of each rank while a model is served on the cluster: where it runs,
//! its part, whether it is up, its link errors and how its steps spent their time. The
//! metrics listener reads it; workers' step times come on the replies they send anyway.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Time one rank's steps took since it loaded, by phase (running totals, so a reply that
/// carries none loses nothing: the next one has it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimes {
    pub steps: u64,
    /// Evaluating the rank's layers, less the time its input was waited for inside MLX.
    pub compute_secs: f64,
    /// Handing activations and plans on (control frames, MLX group sends).
    pub communication_secs: f64,
    /// Waiting for the rank before it: its activations, or rank 0's word to go.
    pub waiting_secs: f64,
}

/// The phases a step's time is split into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Compute,
    Communication,
    Waiting,
}

impl StepTimes {
    pub fn add(&mut self, phase: Phase, took: Duration) {
        let secs = took.as_secs_f64();
        match phase {
            Phase::Compute => self.compute_secs += secs,
            Phase::Communication => self.communication_secs += secs,
            Phase::Waiting => self.waiting_secs += secs,
        }
    }
}

/// Whether rank 0 still hears from a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Up,
    /// Its connection failed, it stopped answering, or it failed a step.
    Lost,
}

/// One rank as rank 0 sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RankState {
    pub rank: usize,
    /// Its host and ring port, as the hostfile names it.
    pub address: String,
    /// The layers or shard it holds ("layers 0-15", "tensor 1/2"); empty before a load.
    pub part: String,
    pub health: Health,
    /// Failures of its control connection (a failed read or write, silence, a failed step).
    pub link_errors: u64,
    pub times: StepTimes,
    /// What went wrong with it last.
    pub last_error: Option<String>,
}

/// Every rank's state; rank 0's own times are recorded here directly.
#[derive(Debug)]
pub struct RankBoard {
    ranks: Mutex<Vec<RankState>>,
}

impl RankBoard {
    /// A board for the ranks at `addresses` (rank 0 first), all up.
    pub fn new(addresses: &[String]) -> RankBoard {
        let ranks = addresses
            .iter()
            .enumerate()
            .map(|(rank, address)| RankState {
                rank,
                address: address.clone(),
                part: String::new(),
                health: Health::Up,
                link_errors: 0,
                times: StepTimes::default(),
                last_error: None,
            })
            .collect();
        RankBoard {
            ranks: Mutex::new(ranks),
        }
    }

    fn with(&self, rank: usize, f: impl FnOnce(&mut RankState)) {
        let mut ranks = self.ranks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = ranks.get_mut(rank) {
            f(r);
        }
    }

    /// A worker's running totals, as its last reply carried them.
    pub fn report(&self, rank: usize, times: StepTimes) {
        self.with(rank, |r| r.times = times);
    }

    /// Adds to a rank's totals (rank 0 measures its own).
    pub fn add(&self, rank: usize, phase: Phase, took: Duration) {
        self.with(rank, |r| r.times.add(phase, took));
    }

    /// Counts one more step of `rank`.
    pub fn step(&self, rank: usize) {
        self.with(rank, |r| r.times.steps += 1);
    }

    /// A link failure of `rank`: the rank is lost, counted once (the heartbeat and a failed
    /// send may both see the same loss), and the first reason is kept.
    pub fn lost(&self, rank: usize, why: &str) {
        self.with(rank, |r| {
            if r.health == Health::Lost {
                return;
            }
            r.health = Health::Lost;
            r.link_errors += 1;
            r.last_error = Some(why.to_string());
        });
    }

    /// Each rank's part of the model being loaded, and times from zero.
    pub fn set_parts(&self, parts: &[String]) {
        let mut ranks = self.ranks.lock().unwrap_or_else(|e| e.into_inner());
        for (r, part) in ranks.iter_mut().zip(parts) {
            r.part = part.clone();
            r.times = StepTimes::default();
        }
    }

    pub fn ranks(&self) -> Vec<RankState> {
        self.ranks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lost rank stays lost and counts its errors; a worker's report replaces its totals,
    /// rank 0's own are added up.
    #[test]
    fn ranks_are_reported_and_lost() {
        let board = RankBoard::new(&["a:1".into(), "b:1".into()]);
        board.add(0, Phase::Compute, Duration::from_millis(500));
        board.add(0, Phase::Compute, Duration::from_millis(500));
        board.step(0);
        let worker = StepTimes {
            steps: 3,
            waiting_secs: 0.25,
            ..StepTimes::default()
        };
        board.report(1, worker);
        board.lost(1, "rank 1 (b:1) was lost: eof");
        board.lost(1, "rank 1 (b:1) stopped answering");
        let ranks = board.ranks();
        assert_eq!(ranks[0].times.compute_secs, 1.0);
        assert_eq!(ranks[0].times.steps, 1);
        assert_eq!(ranks[1].times, worker);
        assert_eq!(ranks[1].health, Health::Lost);
        assert_eq!(ranks[1].link_errors, 1);
        assert_eq!(
            ranks[1].last_error.as_deref(),
            Some("rank 1 (b:1) was lost: eof")
        );
        assert_eq!(ranks[0].health, Health::Up);
    }
}
