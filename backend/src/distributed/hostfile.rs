//! Hostfiles, validated before MLX sees them: LocalAI's ring list (`["ip:port", ...]` or a
//! list of lists), LocalAI's JACCL device matrix, and `mlx.launch` / `mlx.distributed_config`
//! files (`[{"ssh", "ips", "rdma"}]` or `{"backend", "envs", "hosts"}`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::distributed::Transport;

/// The port `mlx.launch` starts counting from when a hostfile lists bare IPs.
pub const MLX_LAUNCH_STARTING_PORT: u16 = 32323;

/// A hostfile's layout depends on the transport, and `Any` leaves the choice to MLX at run
/// time, so there is nothing to read the file as.
const ANY_HAS_NO_HOSTFILE: &str =
    "transport `any` has no hostfile format (MLX picks it at run time); use ring or jaccl";

#[derive(Debug, Clone, PartialEq)]
pub enum Hostfile {
    /// Rank i listens on `ranks[i]` (one or more `ip:port`).
    Ring { ranks: Vec<Vec<String>> },
    /// `devices[i][j]`: the RDMA device rank i uses to reach rank j (none on the diagonal).
    Jaccl {
        devices: Vec<Vec<Option<String>>>,
        coordinator: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
#[error("hostfile {}: {message}", crate::error::quote(&path.display().to_string()))]
pub struct HostfileError {
    pub path: PathBuf,
    pub message: String,
}

impl Hostfile {
    /// Reads and validates the hostfile at `path` for `transport`.
    pub fn read(path: &Path, transport: Transport) -> Result<Hostfile, HostfileError> {
        let err = |message: String| HostfileError {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Hostfile::parse(&text, transport).map_err(err)
    }

    /// Parses hostfile JSON; the error names the problem.
    pub fn parse(text: &str, transport: Transport) -> Result<Hostfile, String> {
        if transport == Transport::Any {
            return Err(ANY_HAS_NO_HOSTFILE.into());
        }
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let hostfile = match (&json, transport) {
            (Value::Object(o), _) if o.contains_key("hosts") => from_mlx_config(&o["hosts"], transport)?,
            (Value::Array(items), _) if items.iter().all(Value::is_object) && !items.is_empty() => from_mlx_config(&json, transport)?,
            (Value::Array(items), Transport::Ring) => Hostfile::Ring {
                ranks: items.iter().enumerate().map(|(rank, v)| ring_rank(rank, v)).collect::<Result<_, _>>()?,
            },
            (Value::Array(rows), Transport::Jaccl) => Hostfile::Jaccl { devices: device_matrix(rows)?, coordinator: None },
            _ => return Err("expected a JSON list (LocalAI) or an object with \"hosts\" (mlx.distributed_config)".into()),
        };
        hostfile.validate()?;
        Ok(hostfile)
    }

    pub fn size(&self) -> usize {
        match self {
            Hostfile::Ring { ranks } => ranks.len(),
            Hostfile::Jaccl { devices, .. } => devices.len(),
        }
    }

    /// Fails unless `rank` is one of the hostfile's ranks.
    pub fn check_rank(&self, rank: usize) -> Result<(), String> {
        match rank < self.size() {
            true => Ok(()),
            false => Err(format!(
                "rank {rank} is out of range: the hostfile has {} ranks (0..{})",
                self.size(),
                self.size()
            )),
        }
    }

    /// The JSON MLX 0.32 reads: `MLX_HOSTFILE` (ring) or `MLX_IBV_DEVICES` (jaccl).
    pub fn mlx_json(&self) -> String {
        match self {
            Hostfile::Ring { ranks } => serde_json::to_string(ranks),
            Hostfile::Jaccl { devices, .. } => serde_json::to_string(devices),
        }
        .expect("strings serialize")
    }

    /// Each rank's address for messages: its first ring address, or `rank N` for JACCL.
    pub fn rank_addresses(&self) -> Vec<String> {
        match self {
            Hostfile::Ring { ranks } => ranks.iter().map(|a| a.join(",")).collect(),
            Hostfile::Jaccl { devices, .. } => (0..devices.len())
                .map(|r| format!("jaccl rank {r}"))
                .collect(),
        }
    }

    /// Where rank 0 listens for workers: rank 0's ring address (or the JACCL coordinator)
    /// with the port after it, unless `port` says otherwise. It must not be a ring address.
    pub fn control_address(
        &self,
        coordinator: Option<&str>,
        port: Option<u16>,
    ) -> Result<String, String> {
        let base = match self {
            Hostfile::Ring { ranks } => ranks[0][0].clone(),
            Hostfile::Jaccl {
                coordinator: own, ..
            } => coordinator
                .map(str::to_string)
                .or_else(|| own.clone())
                .ok_or(
                "JACCL needs rank 0's coordinator address (--coordinator or MLX_JACCL_COORDINATOR)",
            )?,
        };
        check_address(&base)?;
        let (host, base_port) = base.rsplit_once(':').ok_or("no port")?;
        let base_port: u16 = base_port
            .parse()
            .map_err(|_| format!("bad port in {base}"))?;
        let port = match port {
            Some(p) => p,
            None => base_port.checked_add(1).ok_or_else(|| {
                format!("{base}: no port after it for the control channel; set control_port")
            })?,
        };
        let control = format!("{host}:{port}");
        if let Hostfile::Ring { ranks } = self {
            if let Some(r) = ranks.iter().position(|a| a.contains(&control)) {
                return Err(format!(
                    "rank 0's control channel {control} (its ring port + 1) is rank {r}'s ring address; \
                     leave a gap between ports or set control_port (MLX_DISTRIBUTED_CONTROL_PORT)"
                ));
            }
        }
        Ok(control)
    }

    fn validate(&self) -> Result<(), String> {
        if self.size() == 0 {
            return Err("lists no ranks".into());
        }
        if let Hostfile::Ring { ranks } = self {
            let mut seen = HashSet::new();
            for (rank, addrs) in ranks.iter().enumerate() {
                for a in addrs {
                    check_address(a).map_err(|e| format!("rank {rank}: {e}"))?;
                    if !seen.insert(a.as_str()) {
                        return Err(format!("address {a} appears twice (rank {rank})"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Each rank's host for `ssh`, read from hostfile JSON: `mlx.launch`'s `"ssh"` entry (else its
/// first IP), or the host of a ring rank's first address. LocalAI's JACCL matrix names no host.
pub fn ssh_hosts(text: &str) -> Result<Vec<String>, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let hosts = match &json {
        Value::Object(o) if o.contains_key("hosts") => o["hosts"].as_array(),
        Value::Array(items) if items.iter().all(Value::is_object) => Some(items),
        _ => None,
    };
    match hosts {
        Some(hosts) => hosts
            .iter()
            .enumerate()
            .map(|(i, h)| mlx_launch_host(i, h))
            .collect(),
        None => match Hostfile::parse(text, Transport::Ring)? {
            Hostfile::Ring { ranks } => ranks.iter().map(|a| address_host(&a[0])).collect(),
            Hostfile::Jaccl { .. } => Err("a ring hostfile parses as ring".into()),
        },
    }
}

/// An `mlx.launch` host's `"ssh"` name, else its first IP.
fn mlx_launch_host(i: usize, host: &Value) -> Result<String, String> {
    let first_ip = host["ips"].as_array().and_then(|ips| ips.first());
    host["ssh"]
        .as_str()
        .or_else(|| first_ip.and_then(Value::as_str))
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .ok_or_else(|| format!("host {i} has neither \"ssh\" nor \"ips\" to reach it by"))
}

/// The host of `host:port`, without IPv6 brackets.
fn address_host(a: &str) -> Result<String, String> {
    check_address(a)?;
    let (host, _) = a.rsplit_once(':').ok_or("no port")?;
    Ok(host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string())
}

/// One ring rank: `"ip:port"` or a list of them.
fn ring_rank(rank: usize, v: &Value) -> Result<Vec<String>, String> {
    let addrs = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|a| {
                a.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("rank {rank}: {a} is not an \"ip:port\" string"))
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(format!(
                "rank {rank}: {other} is not an \"ip:port\" string or a list of them"
            ))
        }
    };
    if addrs.is_empty() {
        return Err(format!("rank {rank} has no address"));
    }
    Ok(addrs)
}

/// A square matrix of device names with `null` on the diagonal.
fn device_matrix(rows: &[Value]) -> Result<Vec<Vec<Option<String>>>, String> {
    let n = rows.len();
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            let row = row
                .as_array()
                .ok_or_else(|| format!("row {i} is not a list: the JACCL hostfile is a matrix"))?;
            if row.len() != n {
                return Err(format!(
                    "the matrix is not square: row {i} has {} entries for {n} ranks",
                    row.len()
                ));
            }
            row.iter()
                .enumerate()
                .map(|(j, d)| match (i == j, d) {
                    (true, Value::Null) => Ok(None),
                    (true, other) => Err(format!(
                        "diagonal entry [{i}][{i}] must be null, got {other}"
                    )),
                    (false, Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                    (false, other) => Err(format!(
                        "entry [{i}][{j}] must be an RDMA device name, got {other}"
                    )),
                })
                .collect()
        })
        .collect()
}

/// `mlx.launch` hosts: ring ports are assigned from 32323 up, as mlx.launch does.
fn from_mlx_config(hosts: &Value, transport: Transport) -> Result<Hostfile, String> {
    let hosts = hosts.as_array().ok_or("\"hosts\" must be a list")?;
    let ips = |i: usize, h: &Value| -> Result<Vec<String>, String> {
        h["ips"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .filter(|a| !a.is_empty())
            .ok_or_else(|| format!("host {i} has no \"ips\""))
    };
    match transport {
        Transport::Ring => {
            let mut port = MLX_LAUNCH_STARTING_PORT;
            let mut ranks = Vec::new();
            for (i, h) in hosts.iter().enumerate() {
                let addrs = ips(i, h)?
                    .into_iter()
                    .map(|ip| {
                        let a = format!("{ip}:{port}");
                        port = port.wrapping_add(1);
                        a
                    })
                    .collect();
                ranks.push(addrs);
            }
            Ok(Hostfile::Ring { ranks })
        }
        Transport::Jaccl => {
            let rows: Vec<Value> = hosts.iter().map(|h| h["rdma"].clone()).collect();
            let coordinator = ips(0, hosts.first().ok_or("no hosts")?)?.into_iter().next();
            Ok(Hostfile::Jaccl {
                devices: device_matrix(&rows)?,
                coordinator: coordinator.map(|ip| format!("{ip}:{MLX_LAUNCH_STARTING_PORT}")),
            })
        }
        Transport::Any => Err(ANY_HAS_NO_HOSTFILE.into()),
    }
}

/// `host:port` with a non-empty host and a port in 1..=65535.
fn check_address(a: &str) -> Result<(), String> {
    let (host, port) = a
        .rsplit_once(':')
        .ok_or_else(|| format!("address {a:?} has no port (expected ip:port)"))?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_[]:".contains(c));
    match (host_ok, port.parse::<u16>()) {
        (true, Ok(p)) if p > 0 => Ok(()),
        _ => Err(format!("malformed address {a:?} (expected ip:port)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(text: &str) -> Result<Hostfile, String> {
        Hostfile::parse(text, Transport::Ring)
    }

    #[test]
    fn localai_ring_flat_and_nested() -> Result<(), String> {
        let flat = ring(r#"["127.0.0.1:5555", "127.0.0.1:5556"]"#)?;
        let nested = ring(r#"[["127.0.0.1:5555"], ["127.0.0.1:5556"]]"#)?;
        assert_eq!(flat, nested);
        assert_eq!(
            flat.mlx_json(),
            r#"[["127.0.0.1:5555"],["127.0.0.1:5556"]]"#
        );
        flat.check_rank(1)?;
        assert!(flat.check_rank(2).unwrap_err().contains("out of range"));
        Ok(())
    }

    #[test]
    fn localai_jaccl_matrix() -> Result<(), String> {
        let h = Hostfile::parse(
            r#"[[null, "rdma_en5"], ["rdma_en5", null]]"#,
            Transport::Jaccl,
        )?;
        assert_eq!(h.size(), 2);
        assert_eq!(h.mlx_json(), r#"[[null,"rdma_en5"],["rdma_en5",null]]"#);
        Ok(())
    }

    #[test]
    fn mlx_launch_files() -> Result<(), String> {
        let hosts = r#"{"backend": "ring", "envs": [], "hosts": [
            {"ssh": "a", "ips": ["10.0.0.1"], "rdma": [null, "rdma_en3"]},
            {"ssh": "b", "ips": ["10.0.0.2"], "rdma": ["rdma_en3", null]}]}"#;
        assert_eq!(
            ring(hosts)?,
            Hostfile::Ring {
                ranks: vec![vec!["10.0.0.1:32323".into()], vec!["10.0.0.2:32324".into()]]
            }
        );
        match Hostfile::parse(hosts, Transport::Jaccl)? {
            Hostfile::Jaccl { coordinator, .. } => {
                assert_eq!(coordinator.as_deref(), Some("10.0.0.1:32323"))
            }
            other => panic!("{other:?}"),
        }
        Ok(())
    }

    #[test]
    fn ssh_hosts_of_each_format() -> Result<(), String> {
        assert_eq!(
            ssh_hosts(r#"["10.0.0.1:5555", ["10.0.0.2:5556", "10.1.0.2:5557"]]"#)?,
            ["10.0.0.1", "10.0.0.2"]
        );
        let launch = r#"[{"ssh": "mac1", "ips": ["10.0.0.1"]}, {"ips": ["10.0.0.2"]}]"#;
        assert_eq!(ssh_hosts(launch)?, ["mac1", "10.0.0.2"]);
        let wrapped = format!(r#"{{"backend": "ring", "hosts": {launch}}}"#);
        assert_eq!(ssh_hosts(&wrapped)?, ["mac1", "10.0.0.2"]);
        assert!(ssh_hosts(r#"[{"rdma": []}]"#)
            .unwrap_err()
            .contains("host 0"));
        assert!(ssh_hosts(r#"[[null, "a"], ["a", null]]"#).is_err());
        Ok(())
    }

    #[test]
    fn bad_hostfiles_name_the_problem() {
        for (text, transport, needle) in [
            (
                r#"["127.0.0.1:5555", "127.0.0.1:5555"]"#,
                Transport::Ring,
                "appears twice",
            ),
            (r#"["127.0.0.1"]"#, Transport::Ring, "no port"),
            (r#"["127.0.0.1:99999"]"#, Transport::Ring, "malformed"),
            (r#"[[null, "a"], ["a"]]"#, Transport::Jaccl, "not square"),
            (r#"[["x", "a"], ["a", null]]"#, Transport::Jaccl, "diagonal"),
            (r#"[]"#, Transport::Ring, "no ranks"),
            (r#"{"a": 1}"#, Transport::Ring, "expected"),
            ("not json", Transport::Ring, "JSON"),
            (r#"["127.0.0.1:5555"]"#, Transport::Any, "transport `any`"),
        ] {
            let err = Hostfile::parse(text, transport).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn read_names_the_file() {
        let err = Hostfile::read(Path::new("/no/such/hostfile.json"), Transport::Ring).unwrap_err();
        assert!(err.to_string().contains("/no/such/hostfile.json"));
    }
}
