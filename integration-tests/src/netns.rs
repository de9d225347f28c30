//! Network namespaces a test creates for itself: a bridge in a hub namespace and one
//! namespace per node (a, b, c... at 10.77.0.11, .12, .13...), so tests can use real LAN addresses, multicast
//! and link failures without touching the host's network. Removed on drop.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{wait_bounded, TestResult};

/// Namespaces `{p}hub` (a bridge) and `{p}a`, `{p}b`, ... on it (10.77.0.11 and up),
/// removed on drop.
pub struct Lan {
    prefix: String,
    nodes: Vec<String>,
}

/// The most nodes a `Lan` has (named a, b, c...).
pub const MAX_NODES: usize = 8;

/// Runs `ip args...`, failing with its stderr.
pub fn ip(args: &[&str]) -> TestResult {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

impl Lan {
    /// Three nodes: a, b and c.
    pub fn new() -> TestResult<Lan> {
        Lan::with_nodes(3)
    }

    /// `count` nodes (at most `MAX_NODES`): a, b, c, d...
    pub fn with_nodes(count: usize) -> TestResult<Lan> {
        if count > MAX_NODES {
            return Err(format!("a Lan has at most {MAX_NODES} nodes").into());
        }
        let lan = Lan {
            prefix: format!("mlxp{}", std::process::id() % 100_000),
            nodes: (b'a'..)
                .take(count)
                .map(|c| (c as char).to_string())
                .collect(),
        };
        let hub = lan.ns("hub");
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for (i, node) in lan.nodes.iter().enumerate() {
            let ns = lan.ns(node);
            ip(&["netns", "add", &ns])?;
            let port = format!("v{node}");
            ip(&[
                "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &hub, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", Lan::addr(i)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(lan)
    }

    pub fn ns(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub fn addr(i: usize) -> String {
        format!("10.77.0.{}", 11 + i)
    }

    /// `program args...` inside namespace `node`.
    pub fn command(&self, node: &str, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(node)]).arg(program);
        cmd
    }

    /// Runs this test binary's ignored test `name` inside namespace `node`, with `env`, and
    /// asserts that it passed within `limit`.
    pub fn run_test_in(
        &self,
        node: &str,
        name: &str,
        env: &[(&str, &str)],
        limit: Duration,
    ) -> TestResult {
        let mut cmd = self.command(node, &std::env::current_exe()?);
        cmd.args(["--ignored", "--exact", name, "--nocapture"])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = wait_bounded(cmd.spawn()?, limit)?;
        let log = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        eprintln!("{log}");
        assert!(out.status.success() && log.contains("1 passed"), "{log}");
        Ok(())
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for n in self.nodes.iter().map(String::as_str).chain(["hub"]) {
            let _ = ip(&["netns", "del", &self.ns(n)]);
        }
    }
}
