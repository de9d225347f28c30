//! How a pipeline spreads the layers over ranks: evenly, by hand (`layer_split:"12,18"`),
//! or in proportion to each rank's free memory (`layer_split:auto`).

use std::ops::Range;

/// Each rank's layer range, in rank order.
pub fn layer_ranges(
    layers: usize,
    ranks: usize,
    split: Option<&str>,
    free_memory: &[u64],
) -> Result<Vec<Range<usize>>, String> {
    if layers < ranks {
        return Err(format!(
            "a pipeline over {ranks} ranks needs at least {ranks} layers; the model has {layers}"
        ));
    }
    let counts = match split.map(str::trim) {
        None | Some("") => even(layers, ranks),
        Some("auto") => by_weight(layers, free_memory),
        Some(list) => by_hand(layers, ranks, list)?,
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

    #[test]
    fn even_manual_and_auto_splits() -> Result<(), String> {
        assert_eq!(layer_ranges(30, 2, None, &[])?, vec![0..15, 15..30]);
        assert_eq!(
            layer_ranges(30, 4, None, &[])?,
            vec![0..7, 7..14, 14..22, 22..30]
        );
        assert_eq!(
            layer_ranges(30, 2, Some("12,18"), &[])?,
            vec![0..12, 12..30]
        );
        assert_eq!(
            layer_ranges(30, 2, Some("auto"), &[8, 24])?,
            vec![0..8, 8..30]
        );
        let auto = layer_ranges(30, 3, Some("auto"), &[1, 1, 1])?;
        assert_eq!(auto.iter().map(|r| r.len()).sum::<usize>(), 30);
        Ok(())
    }

    #[test]
    fn bad_splits_name_the_problem() {
        let err = |s| layer_ranges(30, 2, Some(s), &[]).unwrap_err();
        assert!(err("12,17").contains("adds up to 29"));
        assert!(err("30").contains("lists 1 ranks"));
        assert!(err("a,b").contains("expected"));
        assert!(err("0,30").contains("expected"));
        assert!(layer_ranges(1, 2, None, &[])
            .unwrap_err()
            .contains("at least 2 layers"));
    }
}
