//! What the streaming examples share.

/// Two threads each summing half of every buffer, as words: what the memory gives a plain
/// read of the same bytes at that moment.
pub fn plain_read(buffers: &[&[u8]]) -> u64 {
    std::thread::scope(|scope| {
        let halves: Vec<_> = (0..2)
            .map(|h| {
                scope.spawn(move || {
                    buffers.iter().fold(0u64, |acc, m| {
                        let half = &m[h * m.len() / 2..(h + 1) * m.len() / 2];
                        half.chunks_exact(8).fold(acc, |a, b| {
                            a.wrapping_add(u64::from_le_bytes(b.try_into().unwrap_or_default()))
                        })
                    })
                })
            })
            .collect();
        halves.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    })
}
