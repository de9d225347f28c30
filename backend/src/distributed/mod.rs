//! Everything that crosses ranks: the MLX group, hostfiles, the control channel between
//! rank 0 and the workers, and the pipeline's activation hand-off (over the MLX group, or
//! inside control messages into an inbox).

pub mod board;
mod cluster;
mod fault;
mod group;
mod hostfile;
pub mod inbox;
mod join;
pub mod link;
pub mod p2p;
pub mod pipeline;
pub mod protocol;
pub mod split;
pub mod wire;

pub use board::{Health, Phase, RankBoard, RankState, StepTimes};
#[cfg(test)]
pub(crate) use cluster::loopback;
pub use cluster::Cluster;
pub use fault::Fault;
pub use group::{clear_groups, Group, GroupError, Transport};
pub use hostfile::{ssh_hosts, Hostfile, HostfileError, MLX_LAUNCH_STARTING_PORT};
pub use join::{
    check_join_timeout, ClusterOptions, GiveUp, LinkError, LinkOptions, MAX_JOIN_TIMEOUT_SECS,
};

/// Bytes of memory this machine can still give a model (for `layer_split:auto`).
pub fn free_memory() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        for line in meminfo.lines() {
            if let Some(kb) = line.strip_prefix("MemAvailable:") {
                let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                return kb * 1024;
            }
        }
        0
    }
    #[cfg(not(target_os = "linux"))]
    {
        // macOS: the machine's (unified) memory as sysctl reports it, an upper bound.
        let out = std::process::Command::new("sysctl")
            .args(["-n", "hw.memsize"])
            .output();
        out.ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
