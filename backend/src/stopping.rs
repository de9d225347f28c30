//! Stop strings across token boundaries: text that could still become a stop is held back,
//! and the text is cut before the stop.

#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What to emit after a delta, and whether a stop string was hit.
#[derive(Debug, PartialEq, Eq)]
pub struct StopCheck {
    pub emit: String,
    pub stopped: bool,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, delta: &str) -> StopCheck {
        self.held.push_str(delta);
        let first_stop = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first_stop {
            let emit = self.held[..at].to_string();
            self.held.clear();
            return StopCheck {
                emit,
                stopped: true,
            };
        }
        let keep = self
            .stops
            .iter()
            .map(|s| partial_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let emit = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        StopCheck {
            emit,
            stopped: false,
        }
    }

    /// The held-back text, when generation ends for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`.
pub(crate) fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| stop.is_char_boundary(n) && text.ends_with(&stop[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_split_across_deltas_is_cut() {
        let mut m = StopMatcher::new(vec!["<END>".into()]);
        assert_eq!(m.push("Hello <E").emit, "Hello ");
        let c = m.push("ND> more");
        assert_eq!(
            c,
            StopCheck {
                emit: String::new(),
                stopped: true
            }
        );
    }

    #[test]
    fn false_alarm_is_released() {
        let mut m = StopMatcher::new(vec!["###".into()]);
        assert_eq!(m.push("a #").emit, "a ");
        assert_eq!(m.push("b").emit, "#b");
        assert_eq!(m.push("#").emit, "");
        assert_eq!(m.flush(), "#");
    }

    #[test]
    fn earliest_stop_wins() {
        let mut m = StopMatcher::new(vec!["world".into(), "lo".into()]);
        assert_eq!(m.push("hello world").emit, "hel");
    }
}
