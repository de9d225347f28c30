//! A linear-attention layer's state for one sequence (mlx-lm's `ArraysCache` of a Gated
//! DeltaNet layer): the convolution's last inputs and the recurrent state, which hold every
//! position seen in a fixed size. A state cannot be cut back to an earlier position, so it
//! keeps copies at checkpoints: every [`CHECKPOINT_EVERY`] positions, and wherever it was
//! stored whole; a prefix or a trim is exact at a checkpoint and refused elsewhere.

use mlx_rs::Array;

/// A state keeps a copy of itself each time its sequence reaches a multiple of this.
pub const CHECKPOINT_EVERY: i32 = 256;

/// The state at one position: the convolution's inputs before it and the recurrence after
/// the position before it.
#[derive(Clone)]
pub struct Checkpoint {
    pub at: i32,
    pub conv: Array,
    pub state: Array,
}

/// One layer's state for one sequence, empty before its first position.
#[derive(Clone, Default)]
pub struct RecurrentState {
    /// `[1, kernel - 1, conv_dim]`: the convolution's inputs of the last positions.
    conv: Option<Array>,
    /// `[1, v_heads, v_dim, k_dim]`, f32.
    state: Option<Array>,
    offset: i32,
    /// Earlier states, by position, oldest first (none at `offset`: that is the state itself).
    checkpoints: Vec<Checkpoint>,
}

impl RecurrentState {
    pub fn new() -> RecurrentState {
        RecurrentState::default()
    }

    /// How many positions the state has taken.
    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// The convolution inputs and the recurrent state (`None` before the first position).
    pub fn arrays(&self) -> Option<(&Array, &Array)> {
        Some((self.conv.as_ref()?, self.state.as_ref()?))
    }

    /// The state after `advanced` more positions, with `passed`: the states at the positions
    /// taken (the last one included) that are multiples of [`CHECKPOINT_EVERY`].
    pub fn advance(
        &mut self,
        (conv, state): (Array, Array),
        advanced: i32,
        passed: Vec<Checkpoint>,
    ) {
        self.checkpoints.extend(passed);
        self.conv = Some(conv);
        self.state = Some(state);
        self.offset += advanced;
    }

    /// The state now, as a checkpoint.
    fn current(&self) -> Option<Checkpoint> {
        let (conv, state) = self.arrays()?;
        Some(Checkpoint {
            at: self.offset,
            conv: conv.clone(),
            state: state.clone(),
        })
    }

    /// Positions this state can be cut back to exactly: its checkpoints and its offset.
    pub fn cut_points(&self) -> Vec<i32> {
        let mut points: Vec<i32> = self.checkpoints.iter().map(|c| c.at).collect();
        points.push(self.offset);
        points
    }

    /// Whether the state can be taken back to its first `len` positions: at its offset or
    /// past it (nothing to take back), at 0, or at a checkpoint.
    pub fn can_cut_to(&self, len: usize) -> bool {
        let len = i32::try_from(len).unwrap_or(i32::MAX);
        len >= self.offset || len == 0 || self.checkpoints.iter().any(|c| c.at == len)
    }

    /// The state at its first `len` positions (sharing arrays), where [`Self::can_cut_to`]
    /// says it can be; elsewhere a caller's bug, logged, and the state kept whole.
    pub fn prefix(&self, len: usize) -> RecurrentState {
        let mut prefix = self.clone();
        prefix.trim(len);
        prefix
    }

    /// Takes the state back to its first `len` positions (see [`Self::prefix`]).
    pub fn trim(&mut self, len: usize) {
        let len = i32::try_from(len).unwrap_or(i32::MAX);
        if len >= self.offset {
            return;
        }
        if len == 0 {
            *self = RecurrentState::new();
            return;
        }
        let Some(i) = self.checkpoints.iter().position(|c| c.at == len) else {
            tracing::error!(
                offset = self.offset,
                len,
                "a recurrent state was cut where it has no checkpoint; kept whole"
            );
            return;
        };
        let at = self.checkpoints[i].clone();
        self.checkpoints.truncate(i);
        self.conv = Some(at.conv);
        self.state = Some(at.state);
        self.offset = at.at;
    }

    /// Keeps the checkpoints of `other` (a state of a sequence this one extends) that this
    /// one lacks below its offset: a stored prefix's states stay reachable.
    pub fn adopt(&mut self, other: &RecurrentState) {
        let theirs = other.checkpoints.iter().cloned().chain(other.current());
        for c in theirs {
            let known = self.checkpoints.iter().any(|m| m.at == c.at);
            if c.at < self.offset && !known {
                self.checkpoints.push(c);
            }
        }
        self.checkpoints.sort_by_key(|c| c.at);
    }

    /// The arrays held (the state and its checkpoints), to evaluate or count.
    pub fn held(&self) -> Vec<&Array> {
        let checkpoints = self.checkpoints.iter().flat_map(|c| [&c.conv, &c.state]);
        self.conv
            .iter()
            .chain(self.state.iter())
            .chain(checkpoints)
            .collect()
    }

    /// Bytes held, checkpoints included.
    pub fn nbytes(&self) -> usize {
        self.held().into_iter().map(Array::nbytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state of `value` everywhere (conv [1, 3, 2], state [1, 1, 1, 1]).
    fn arrays(value: f32) -> (Array, Array) {
        (
            Array::from_slice(&[value; 6], &[1, 3, 2]),
            Array::from_slice(&[value], &[1, 1, 1, 1]),
        )
    }

    fn checkpoint(at: i32) -> Checkpoint {
        let (conv, state) = arrays(at as f32);
        Checkpoint { at, conv, state }
    }

    fn value(s: &RecurrentState) -> f32 {
        s.arrays().map_or(-1.0, |(_, st)| st.as_slice::<f32>()[0])
    }

    /// Cut back exactly at a checkpoint, the offset or 0, nowhere else; an entry that covers
    /// another adopts its end as a checkpoint.
    #[test]
    fn a_state_is_cut_only_where_it_has_kept_itself() {
        let mut s = RecurrentState::new();
        s.advance(arrays(300.0), 300, vec![checkpoint(256)]);
        s.advance(arrays(600.0), 300, vec![checkpoint(512)]);
        assert_eq!(s.cut_points(), [256, 512, 600]);
        assert!(s.can_cut_to(512) && s.can_cut_to(0) && s.can_cut_to(700));
        assert!(!s.can_cut_to(300), "between checkpoints");
        let back = s.prefix(512);
        assert_eq!((back.offset(), value(&back)), (512, 512.0));
        assert_eq!(back.cut_points(), [256, 512]);
        let mut kept = s.prefix(300);
        assert_eq!(kept.offset(), 600, "a cut elsewhere keeps the state whole");
        let mut shorter = RecurrentState::new();
        shorter.advance(arrays(300.0), 300, vec![checkpoint(256)]);
        kept.adopt(&shorter);
        assert_eq!(kept.cut_points(), [256, 300, 512, 600]);
        assert_eq!(value(&kept.prefix(300)), 300.0);
    }
}
