//! What the streaming examples share.

/// Two threads each summing half of every buffer, as words, read as `streams` equal parts
/// side by side, 512 bytes from each in turn: what the memory gives a plain read of the same
/// bytes at that moment (some hosts read several streams faster than one).
pub fn plain_read(buffers: &[&[u8]], streams: usize) -> u64 {
    std::thread::scope(|scope| {
        let halves: Vec<_> = (0..2)
            .map(|h| {
                scope.spawn(move || {
                    buffers.iter().fold(0u64, |acc, m| {
                        let half = &m[h * m.len() / 2..(h + 1) * m.len() / 2];
                        acc.wrapping_add(sum_streams(half, streams))
                    })
                })
            })
            .collect();
        halves.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    })
}

/// The wrapping sum of `bytes` as words, read as `streams` equal parts, 512 bytes of each in
/// turn (the bytes past whole turns of every part at the end).
fn sum_streams(bytes: &[u8], streams: usize) -> u64 {
    let len = bytes.len() / streams / 512 * 512;
    let mut acc = 0u64;
    for at in (0..len).step_by(512) {
        for s in 0..streams {
            acc = acc.wrapping_add(sum_words(&bytes[s * len + at..s * len + at + 512]));
        }
    }
    acc.wrapping_add(sum_words(&bytes[streams * len..]))
}

fn sum_words(bytes: &[u8]) -> u64 {
    bytes.chunks_exact(8).fold(0u64, |a, b| {
        a.wrapping_add(u64::from_le_bytes(b.try_into().unwrap_or_default()))
    })
}
