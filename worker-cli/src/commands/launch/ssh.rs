//! The system `ssh` client: it already knows the user's keys, agent, `~/.ssh/config` and
//! known hosts, so the launcher reuses it instead of speaking SSH itself. Every call runs
//! without a terminal and never prompts (`BatchMode`), with a bounded connect time.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::LaunchError;

/// How to reach every host: the same user, port, key and options for all of them.
pub struct Ssh {
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity: Option<PathBuf>,
    /// `KEY=VALUE` pairs, each passed as `-o KEY=VALUE`.
    pub options: Vec<String>,
    pub connect_timeout: u64,
}

/// The remote side of every process the launcher starts. It reads the control token from
/// the first line of stdin (so it is on no command line), runs the program, and sends it
/// SIGTERM when stdin closes: the launcher closes it to stop the rank, and a dropped
/// connection closes it too, so nothing outlives the launcher. (A rank ends itself at most
/// 4.5 s after SIGTERM.) Stdin is kept on fd 3 because a background job's stdin is
/// `/dev/null`; the watcher is killed once the program has ended.
const WRAPPER: &str = r#"IFS= read -r t || exit 0
[ -n "$t" ] && export MLX_DISTRIBUTED_TOKEN="$t"
[ -x "$0" ] || { echo "no executable worker at $0" >&2; exit 127; }
exec 3<&0
"$0" "$@" </dev/null 3<&- &
w=$!
{ cat <&3 >/dev/null; kill -TERM $w; } >/dev/null 2>&1 &
g=$!
exec 3<&-
wait $w
s=$?
kill $g 2>/dev/null
exit $s"#;

/// The shell command line that runs `program args...` under [`WRAPPER`], with `RUST_LOG`
/// passed on when it is set here.
pub fn wrapped(program: &str, args: &[String]) -> Result<String, LaunchError> {
    let mut words = vec!["sh".to_string(), "-c".into(), WRAPPER.into()];
    words.push(program.into());
    words.extend(args.iter().cloned());
    let line = shlex::try_join(words.iter().map(String::as_str))
        .map_err(|e| LaunchError::Quote(e.to_string()))?;
    Ok(match std::env::var("RUST_LOG") {
        Ok(level) => {
            let level = shlex::try_quote(&level).map_err(|e| LaunchError::Quote(e.to_string()))?;
            format!("RUST_LOG={level} {line}")
        }
        Err(_) => line,
    })
}

impl Ssh {
    /// `ssh [options] -- host remote`, in its own process group: a Ctrl-C at the terminal
    /// reaches only the launcher, which then stops every rank in order.
    pub fn command(&self, host: &str, remote: &str) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(["-T", "-o", "BatchMode=yes"])
            .arg("-o")
            .arg(format!("ConnectTimeout={}", self.connect_timeout));
        if let Some(user) = &self.user {
            cmd.arg("-l").arg(user);
        }
        if let Some(port) = self.port {
            cmd.arg("-p").arg(port.to_string());
        }
        if let Some(key) = &self.identity {
            cmd.arg("-i").arg(key).args(["-o", "IdentitiesOnly=yes"]);
        }
        for option in &self.options {
            cmd.arg("-o").arg(option);
        }
        cmd.arg("--").arg(host).arg(remote).process_group(0);
        cmd
    }

    /// Writes the file to its host (its folder made if missing) and finds the worker binary
    /// there. This is also the first connection to each host, so a host without SSH access
    /// or without the binary fails here, before any rank has started.
    pub fn upload(&self, up: Upload) -> Result<(), LaunchError> {
        let quote = |s: &str| shlex::try_quote(s).map(|q| q.into_owned());
        let path = quote(up.path).map_err(|e| LaunchError::Quote(e.to_string()))?;
        let mut remote = format!("mkdir -p \"$(dirname {path})\" && cat > {path}");
        if let Some((worker, _)) = &up.worker {
            let worker = quote(worker).map_err(|e| LaunchError::Quote(e.to_string()))?;
            remote += &format!(" && {{ [ -x {worker} ] || exit {NO_WORKER}; }}");
        }
        let out = self.run_with_input(up.host, &remote, up.bytes)?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match (out.status.code(), up.worker) {
            (Some(0), _) => Ok(()),
            (Some(255) | None, _) => Err(LaunchError::Ssh {
                host: up.host.into(),
                message: stderr,
            }),
            (Some(NO_WORKER), Some((worker, ranks))) => Err(LaunchError::NoWorker {
                ranks,
                host: up.host.into(),
                path: worker.into(),
            }),
            _ => Err(LaunchError::Upload {
                host: up.host.into(),
                path: up.path.into(),
                message: stderr,
            }),
        }
    }

    /// Runs `remote` on `host` with `input` on its stdin; its stderr and status.
    fn run_with_input(
        &self,
        host: &str,
        remote: &str,
        input: &[u8],
    ) -> Result<std::process::Output, LaunchError> {
        let mut child = self
            .command(host, remote)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(LaunchError::Spawn)?;
        if let Some(mut stdin) = child.stdin.take() {
            // A refused connection closes the pipe early; the exit status says why.
            let _ = stdin.write_all(input);
        }
        child.wait_with_output().map_err(LaunchError::Spawn)
    }
}

/// The exit status of an upload whose host lacks the worker binary.
const NO_WORKER: i32 = 3;

/// A file for a host, and the worker binary to find there with the ranks it is for.
pub struct Upload<'a> {
    pub host: &'a str,
    pub path: &'a str,
    pub bytes: &'a [u8],
    pub worker: Option<(&'a str, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_every_word() -> Result<(), LaunchError> {
        let line = wrapped(
            "/opt/my worker",
            &["--hostfile".into(), "/a b/h.json".into()],
        )?;
        assert!(line.contains("'/opt/my worker'"), "{line}");
        assert!(line.contains("'/a b/h.json'"), "{line}");
        assert!(line.contains("sh -c '"), "{line}");
        Ok(())
    }

    /// The wrapper itself, run by a local `sh`: the token line is read, and closing stdin
    /// ends the program with SIGTERM (the wrapper then exits with its status, 143).
    #[test]
    fn closing_stdin_stops_the_wrapped_program() -> Result<(), Box<dyn std::error::Error>> {
        let mut child = Command::new("sh")
            .args(["-c", WRAPPER, "/bin/sleep", "30"])
            .stdin(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        writeln!(stdin, "a-token")?;
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            child.try_wait()?.is_none(),
            "the program ended before the stop"
        );
        let start = std::time::Instant::now();
        drop(stdin);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if start.elapsed() > std::time::Duration::from_secs(5) {
                child.kill()?;
                return Err("the wrapper did not stop its program".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(143), "{status}");
        Ok(())
    }

    #[test]
    fn ssh_never_prompts_and_passes_the_options() {
        let ssh = Ssh {
            user: Some("me".into()),
            port: Some(2222),
            identity: Some("/k".into()),
            options: vec!["UserKnownHostsFile=/dev/null".into()],
            connect_timeout: 5,
        };
        let cmd = ssh.command("10.0.0.2", "true");
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        for needle in [
            "-o BatchMode=yes",
            "-o ConnectTimeout=5",
            "-l me",
            "-p 2222",
            "-i /k",
            "-o UserKnownHostsFile=/dev/null",
            "-- 10.0.0.2 true",
        ] {
            assert!(joined.contains(needle), "{joined}");
        }
    }
}
