//! How a pipeline spreads the layers over ranks: evenly, by hand (`layer_split:"12,18"`),
//! or in proportion to each rank's free memory (`layer_split:auto`). "Evenly" and "in
//! proportion" weigh layers by their stored bytes: a model whose first layers are dense and
//! the rest mixtures of experts gives each rank its share of the bytes, not of the count.

use std::ops::Range;

/// Each rank's layer range, in rank order, for layers of `layer_bytes` stored bytes each.
pub fn layer_ranges(
    layer_bytes: &[u64],
    ranks: usize,
    split: Option<&str>,
    free_memory: &[u64],
) -> Result<Vec<Range<usize>>, String> {
    let layers = layer_bytes.len();
    if layers < ranks {
        return Err(format!(
            "a pipeline over {ranks} ranks needs at least {ranks} layers; the model has {layers}"
        ));
    }
    let uniform = layer_bytes.windows(2).all(|w| w[0] == w[1]);
    let counts = match (split.map(str::trim), uniform) {
        (None | Some(""), true) => even(layers, ranks),
        (None | Some(""), false) => by_bytes(layer_bytes, &vec![1; ranks]),
        (Some("auto"), true) => by_weight(layers, free_memory),
        (Some("auto"), false) => by_bytes(layer_bytes, free_memory),
        (Some(list), _) => by_hand(layers, ranks, list)?,
    };
    let mut start = 0;
    Ok(counts
        .into_iter()
        .map(|n| {
            start += n;
            start - n..start
        })
        .collect())
}

fn even(layers: usize, ranks: usize) -> Vec<usize> {
    (0..ranks)
        .map(|r| layers / ranks + usize::from(r >= ranks - layers % ranks))
        .collect()
}

/// Proportional shares (largest remainder), at least one layer each.
fn by_weight(layers: usize, weights: &[u64]) -> Vec<usize> {
    let ranks = weights.len();
    let total: u128 = weights.iter().map(|&w| w.max(1) as u128).sum();
    let spare = (layers - ranks) as u128;
    let exact: Vec<u128> = weights.iter().map(|&w| spare * w.max(1) as u128).collect();
    let mut counts: Vec<usize> = exact.iter().map(|e| 1 + (e / total) as usize).collect();
    let mut order: Vec<usize> = (0..ranks).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(exact[r] % total));
    let mut left = layers - counts.iter().sum::<usize>();
    for r in order.into_iter().cycle() {
        if left == 0 {
            break;
        }
        counts[r] += 1;
        left -= 1;
    }
    counts
}

/// Contiguous layer counts, at least one per rank, that make the largest part smallest, each
/// rank's bytes measured against its share (`shares`, e.g. free memory): a small dynamic
/// program over the split points (ranks x layers^2, microseconds for any real model).
fn by_bytes(layer_bytes: &[u64], shares: &[u64]) -> Vec<usize> {
    let (layers, ranks) = (layer_bytes.len(), shares.len());
    let mut cumulative = vec![0f64; layers + 1];
    for (i, &b) in layer_bytes.iter().enumerate() {
        cumulative[i + 1] = cumulative[i] + b as f64;
    }
    let cost = |r: usize, from: usize, to: usize| {
        (cumulative[to] - cumulative[from]) / shares[r].max(1) as f64
    };
    // best[r][i]: the smallest largest part for layers ..i over ranks ..=r; from[r][i] its
    // split point.
    let mut best = vec![vec![f64::INFINITY; layers + 1]; ranks];
    let mut from = vec![vec![0usize; layers + 1]; ranks];
    for (i, first) in best[0].iter_mut().enumerate().skip(1) {
        *first = cost(0, 0, i);
    }
    for r in 1..ranks {
        for i in r + 1..=layers {
            for j in r..i {
                let worst = best[r - 1][j].max(cost(r, j, i));
                if worst < best[r][i] {
                    best[r][i] = worst;
                    from[r][i] = j;
                }
            }
        }
    }
    let mut counts = vec![0; ranks];
    let mut end = layers;
    for r in (1..ranks).rev() {
        let start = from[r][end];
        counts[r] = end - start;
        end = start;
    }
    counts[0] = end;
    counts
}

fn by_hand(layers: usize, ranks: usize, list: &str) -> Result<Vec<usize>, String> {
    let counts: Vec<usize> = list
        .split(',')
        .map(|n| n.trim().parse::<usize>().ok().filter(|n| *n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            format!(
                "layer_split {list:?}: expected \"auto\" or positive layer counts like \"12,18\""
            )
        })?;
    if counts.len() != ranks {
        return Err(format!(
            "layer_split {list:?} lists {} ranks, the hostfile has {ranks}",
            counts.len()
        ));
    }
    let sum: usize = counts.iter().sum();
    if sum != layers {
        return Err(format!(
            "layer_split {list:?} adds up to {sum} layers, the model has {layers}"
        ));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` layers of one size.
    fn uniform(n: usize) -> Vec<u64> {
        vec![100; n]
    }

    #[test]
    fn even_manual_and_auto_splits() -> Result<(), String> {
        assert_eq!(
            layer_ranges(&uniform(30), 2, None, &[])?,
            vec![0..15, 15..30]
        );
        assert_eq!(
            layer_ranges(&uniform(30), 4, None, &[])?,
            vec![0..7, 7..14, 14..22, 22..30]
        );
        assert_eq!(
            layer_ranges(&uniform(30), 2, Some("12,18"), &[])?,
            vec![0..12, 12..30]
        );
        assert_eq!(
            layer_ranges(&uniform(30), 2, Some("auto"), &[8, 24])?,
            vec![0..8, 8..30]
        );
        let auto = layer_ranges(&uniform(30), 3, Some("auto"), &[1, 1, 1])?;
        assert_eq!(auto.iter().map(|r| r.len()).sum::<usize>(), 30);
        Ok(())
    }

    /// DeepSeek-like: one dense layer, then MoE layers ten times its size. Ranks get equal
    /// bytes (or bytes in proportion to free memory), never an empty part.
    #[test]
    fn layers_of_different_sizes_split_by_bytes() -> Result<(), String> {
        let mut sizes = vec![10u64];
        sizes.extend([100u64; 5]);
        // 510 bytes: rank 0 takes the dense layer and two MoE layers (210), rank 1 three (300).
        assert_eq!(layer_ranges(&sizes, 2, None, &[])?, vec![0..3, 3..6]);
        assert_eq!(layer_ranges(&sizes, 3, None, &[])?, vec![0..2, 2..4, 4..6]);
        // Twice the memory on rank 1: about a third of the bytes on rank 0.
        assert_eq!(
            layer_ranges(&sizes, 2, Some("auto"), &[1, 2])?,
            vec![0..2, 2..6]
        );
        // A huge first layer still leaves one layer for every other rank.
        let lopsided = [1000u64, 1, 1];
        assert_eq!(
            layer_ranges(&lopsided, 3, None, &[])?,
            vec![0..1, 1..2, 2..3]
        );
        Ok(())
    }

    #[test]
    fn bad_splits_name_the_problem() {
        let err = |s| layer_ranges(&uniform(30), 2, Some(s), &[]).unwrap_err();
        assert!(err("12,17").contains("adds up to 29"));
        assert!(err("30").contains("lists 1 ranks"));
        assert!(err("a,b").contains("expected"));
        assert!(err("0,30").contains("expected"));
        assert!(layer_ranges(&uniform(1), 2, None, &[])
            .unwrap_err()
            .contains("at least 2 layers"));
    }
}
