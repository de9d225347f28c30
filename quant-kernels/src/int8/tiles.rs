//! Weights stored in tiles: what the integer path's x86-64 kernels read, rearranged once at
//! load. A tile is [`WIDTH`] weight rows; in it each block's 4-byte words of the 16 rows lie
//! side by side (`[block][word][row]`), and the scales and biases `[group][row]`. A 64-byte
//! load is then one int8 lane of 16 weight rows (8 bits) or two (4 bits: the low nibbles are
//! lane `w`, the high ones lane `w + 4`, as a block stores them), so that one row of x needs
//! no sum across lanes: each of its outputs is a lane of the accumulators.
//!
//! The tiles are a permutation of the checkpoint's bytes: the same memory. Only 4- and 8-bit
//! affine codes, and E2M1 (`mxfp4`, `nvfp4`), whose words hold whole lanes, and only weights of
//! whole tiles ([`takes`]); the others stay in rows.

use super::{block_bytes, kind, Isa, BLOCK, E2M1};
use crate::{Format, Mode};

/// Weight rows a tile holds: the i32 lanes of a 512-bit register.
pub const WIDTH: usize = 16;

/// Whether an `n`-row weight of `format` can be stored in tiles: 4-bit (affine or E2M1) or
/// 8-bit affine codes, `n` a multiple of [`WIDTH`].
pub fn takes(format: Format, n: usize) -> bool {
    let codes =
        matches!(kind(format), 4 | E2M1) || (format.bits == 8 && format.mode == Mode::Affine);
    super::supported(format) && codes && n.is_multiple_of(WIDTH) && n > 0
}

/// Whether this machine's integer kernels read tiles ([`read_by`] its set).
pub fn wanted() -> bool {
    read_by(super::isa())
}

/// Whether the kernel set `set` reads tiles: the x86-64 sets (AVX2 and AVX-VNNI with F16C,
/// which every AVX2 CPU has).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub fn read_by(set: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::x86::reads_tiles(set);
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// 4-byte words of one block of `format`'s codes.
fn words(format: Format) -> usize {
    block_bytes(kind(format)) / 4
}

/// Where row `n`'s word `w` of block `b` goes in the tiles of rows of `k` codes.
fn tiled_at(format: Format, k: usize, (n, b, w): (usize, usize, usize)) -> usize {
    let (tile, row) = (n / WIDTH, n % WIDTH);
    let words = words(format);
    let tile_words = WIDTH * k / BLOCK * words;
    tile * tile_words + (b * words + w) * WIDTH + row
}

/// The packed codes of `n` rows of `k` codes (`src`, row after row) into tiles (`dst`).
///
/// # Panics
/// If `!takes(format, n)`, or either buffer is not `n` rows of codes.
pub fn tile_codes(format: Format, (n, k): (usize, usize), src: &[u8], dst: &mut [u8]) {
    let (words, bytes) = check(format, (n, k), src, dst);
    for (i, word) in src.chunks_exact(4).enumerate() {
        let (n, at) = (i / (bytes / 4), i % (bytes / 4));
        let at = tiled_at(format, k, (n, at / words, at % words));
        dst[4 * at..4 * at + 4].copy_from_slice(word);
    }
}

/// [`tile_codes`] undone: tiles (`src`) back into rows (`dst`).
///
/// # Panics
/// As [`tile_codes`].
pub fn untile_codes(format: Format, (n, k): (usize, usize), src: &[u8], dst: &mut [u8]) {
    let (words, bytes) = check(format, (n, k), src, dst);
    for (i, word) in dst.chunks_exact_mut(4).enumerate() {
        let (n, at) = (i / (bytes / 4), i % (bytes / 4));
        let at = tiled_at(format, k, (n, at / words, at % words));
        word.copy_from_slice(&src[4 * at..4 * at + 4]);
    }
}

/// A block's words and a row's bytes, once the shapes are checked.
fn check(format: Format, (n, k): (usize, usize), src: &[u8], dst: &[u8]) -> (usize, usize) {
    assert!(
        takes(format, n),
        "{format:?} with {n} rows is not stored in tiles"
    );
    let bytes = format.row_bytes(k);
    assert!(k.is_multiple_of(format.group) && k.is_multiple_of(BLOCK));
    assert_eq!(src.len(), n * bytes, "the codes are {n} rows of {k}");
    assert_eq!(dst.len(), n * bytes, "the codes are {n} rows of {k}");
    (words(format), bytes)
}

/// Scales or biases of `n` rows of `groups` groups (`src`, `[row][group]`) into tiles
/// (`dst`, `[tile][group][row]`).
///
/// # Panics
/// If `n` is not whole tiles, or either buffer is not `n * groups` values.
pub fn tile_params<T: Copy>((n, groups): (usize, usize), src: &[T], dst: &mut [T]) {
    check_params((n, groups), src.len(), dst.len());
    for (i, &v) in src.iter().enumerate() {
        dst[params_at(groups, i)] = v;
    }
}

/// [`tile_params`] undone.
///
/// # Panics
/// As [`tile_params`].
pub fn untile_params<T: Copy>((n, groups): (usize, usize), src: &[T], dst: &mut [T]) {
    check_params((n, groups), src.len(), dst.len());
    for (i, v) in dst.iter_mut().enumerate() {
        *v = src[params_at(groups, i)];
    }
}

fn check_params((n, groups): (usize, usize), src: usize, dst: usize) {
    assert!(n.is_multiple_of(WIDTH), "{n} rows are not whole tiles");
    assert!(
        src == n * groups && dst == n * groups,
        "the values are {n} rows of {groups}"
    );
}

/// Where value `i` of `[row][group]` goes in `[tile][group][row]`.
fn params_at(groups: usize, i: usize) -> usize {
    let (n, g) = (i / groups, i % groups);
    (n / WIDTH) * WIDTH * groups + g * WIDTH + n % WIDTH
}
