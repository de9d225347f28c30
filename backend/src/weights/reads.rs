//! The reads a load made as parts, noted so that rank 0 can tell which byte runs each
//! worker needs when the model is shipped to it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::Weights;

/// The tensors a load read as parts (`Stored::read_part`), by key: the axis and the part
/// count. Every rank cuts a tensor the same way (only its part differs), so rank 0's own load
/// tells which byte runs each worker will read (`Stored::part_runs`); every other tensor a
/// load reads whole.
#[derive(Debug, Clone, Default)]
pub struct PartReads(Arc<Mutex<PartAxes>>);

/// Each tensor read as parts, by key: the axis it was cut along and the part count.
pub type PartAxes = BTreeMap<String, (usize, usize)>;

impl PartReads {
    pub(super) fn note(&self, key: &str, axis: usize, size: usize) {
        let mut reads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        reads.insert(key.to_owned(), (axis, size));
    }

    /// What was noted so far.
    pub fn taken(&self) -> PartAxes {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Weights {
    /// The same weights, noting each tensor read as a part in `reads`.
    pub fn with_part_reads(mut self, reads: Option<PartReads>) -> Weights {
        self.part_reads = reads;
        self
    }
}
