//! LoadModel's P2P options: with no hostfile and a token (option `p2p_token`, or LocalAI's
//! `LOCALAI_P2P_TOKEN` / `TOKEN`), rank 0 finds its workers over mDNS.

use super::env::{fallback, fallback_int};
use super::{Bad, Env, OptionSpec, OptionValue, Token};

/// How rank 0 finds its workers when no hostfile says.
#[derive(Debug, Clone, PartialEq)]
pub struct P2pConfig {
    pub token: Token,
    /// LocalAI's network id: nodes of another id never join.
    pub network_id: String,
    /// Ranks in all, rank 0 included (`p2p_ranks`); None: whoever is there after the wait.
    pub ranks: Option<usize>,
    /// How long to browse (`p2p_wait`).
    pub wait_secs: u64,
    /// Rank 0's ring address (`MLX_P2P_RING`, set by `worker p2p-mlx --serve`); else chosen.
    pub ring: Option<String>,
    /// JACCL: rank 0's RDMA devices in port order (`MLX_P2P_RDMA_DEVICES`, comma-separated;
    /// else the kernel's list).
    pub rdma_devices: Vec<String>,
}

/// Seconds browsed for workers when `p2p_wait` does not say: without `p2p_ranks` (whoever
/// answers is taken), and with it (the wait ends as soon as they are all there).
const WAIT_ANY: u64 = 10;
const WAIT_FOR_RANKS: u64 = 60;

/// The P2P options a request gave.
#[derive(Default)]
pub(super) struct P2pGiven {
    token: Option<String>,
    network_id: Option<String>,
    ranks: Option<usize>,
    wait: Option<u64>,
}

impl P2pGiven {
    /// Takes `key` if it is a P2P option; false otherwise.
    pub(super) fn set(
        &mut self,
        spec: &OptionSpec,
        value: &OptionValue,
        bad: &Bad,
    ) -> Result<bool, String> {
        let text = || match value {
            OptionValue::Str(s) => Ok(s.clone()),
            OptionValue::Int(i) => Ok(i.to_string()),
            _ => Err(bad("a string")),
        };
        match spec.name {
            "p2p_token" => self.token = Some(text()?),
            "p2p_network_id" => self.network_id = Some(text()?),
            "p2p_ranks" => self.ranks = Some(spec.int(value, bad)?),
            "p2p_wait" => self.wait = Some(spec.int(value, bad)? as u64),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn any(&self) -> bool {
        self.token.is_some()
            || self.network_id.is_some()
            || self.ranks.is_some()
            || self.wait.is_some()
    }

    /// The P2P settings when there is no hostfile and a token; an error for P2P options that
    /// cannot apply (beside a hostfile, or without a token).
    pub(super) fn settle(self, hostfile: bool, env: &dyn Env) -> Result<Option<P2pConfig>, String> {
        if hostfile {
            return match self.any() {
                true => Err(
                    "the p2p_* options find workers when there is no hostfile; this load has one"
                        .into(),
                ),
                false => Ok(None),
            };
        }
        let token = (self.token.clone()).or_else(|| fallback(env, "p2p_token").map(|(_, v)| v));
        let Some(token) = token else {
            return match self.any() {
                true => Err("the p2p_* options need a token: option p2p_token, or LOCALAI_P2P_TOKEN / TOKEN".into()),
                false => Ok(None),
            };
        };
        let ranks = match self.ranks {
            Some(n) => Some(n),
            None => fallback_int(env, "p2p_ranks")?,
        };
        let default_wait = if ranks.is_some() {
            WAIT_FOR_RANKS
        } else {
            WAIT_ANY
        };
        let wait_secs = match self.wait {
            Some(w) => w,
            None => fallback_int(env, "p2p_wait")?.map_or(default_wait, |w| w as u64),
        };
        let network_id = (self.network_id)
            .or_else(|| fallback(env, "p2p_network_id").map(|(_, v)| v))
            .unwrap_or_default();
        Ok(Some(P2pConfig {
            token: Token(token),
            network_id,
            ranks,
            wait_secs,
            ring: env.var("MLX_P2P_RING"),
            rdma_devices: env
                .var("MLX_P2P_RDMA_DEVICES")
                .map(|d| d.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
        }))
    }
}
