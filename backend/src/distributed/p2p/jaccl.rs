//! The JACCL device matrix for nodes found over mDNS. Each node advertises its RDMA devices
//! in port order; in a full mesh (each node cabled once to every other), a node's k-th
//! device reaches its k-th peer in rank order, so row i takes node i's devices in order and
//! skips the diagonal.

use super::{P2pError, Result};

/// `devices[i][j]`: the device rank i uses to reach rank j (none on the diagonal), from each
/// rank's advertised devices; an error names a rank with too few.
pub fn device_matrix(advertised: &[Vec<String>]) -> Result<Vec<Vec<Option<String>>>> {
    let size = advertised.len();
    advertised
        .iter()
        .enumerate()
        .map(|(i, devices)| {
            if devices.len() + 1 < size {
                return Err(P2pError::Cluster(format!(
                    "rank {i} advertises {} RDMA devices; a full mesh of {size} ranks needs {} \
                     on each",
                    devices.len(),
                    size - 1
                )));
            }
            let mut own = devices.iter();
            Ok((0..size)
                .map(|j| match j == i {
                    true => None,
                    false => own.next().cloned(),
                })
                .collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_row_takes_its_devices_in_order_around_the_diagonal() -> Result<()> {
        let m = device_matrix(&[
            list(&["rdma_en2", "rdma_en3"]),
            list(&["rdma_en4", "rdma_en5"]),
            list(&["rdma_en6", "rdma_en7", "spare"]),
        ])?;
        let s = |d: &str| Some(d.to_string());
        assert_eq!(
            m,
            vec![
                vec![None, s("rdma_en2"), s("rdma_en3")],
                vec![s("rdma_en4"), None, s("rdma_en5")],
                vec![s("rdma_en6"), s("rdma_en7"), None],
            ]
        );
        let err = device_matrix(&[list(&["a", "b"]), list(&["c"]), list(&["d", "e"])]);
        assert!(err.is_err_and(|e| e.to_string().contains("rank 1 advertises 1")));
        Ok(())
    }
}
