//! AMX tiles, counted as usable only where a tile load really runs.
//!
//! CPUID and the kernel's permission (`arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)`) can both
//! say yes in a virtual machine whose hypervisor does not give the guest the tile state:
//! llama.cpp dies there with SIGILL at its first `tileloadd`. So the probe configures a tile,
//! loads and releases it in a forked child, where a fault ends the child alone, and the tiles
//! count only if the child exits cleanly. It runs once per process ([`amx`]).
//!
//! No kernel of this crate multiplies on tiles: the probe is what a caller logs, and what
//! an AMX kernel would be chosen by.

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Amx {
    /// A tile configuration, load and release ran.
    Usable,
    /// Not tried: what is missing (the CPU's AMX, the OS's tile state, the permission).
    Absent(String),
    /// Tried, and the trial ended otherwise (a signal, or a status).
    Faulted(String),
}

impl std::fmt::Display for Amx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amx::Usable => write!(f, "AMX tiles run here"),
            Amx::Absent(why) => write!(f, "no AMX tiles: {why}"),
            Amx::Faulted(how) => write!(f, "AMX tiles are listed but a tile load {how}"),
        }
    }
}

/// The probe's answer for this process (probed at the first call).
pub fn amx() -> &'static Amx {
    static AMX: std::sync::OnceLock<Amx> = std::sync::OnceLock::new();
    AMX.get_or_init(|| probe(false))
}

/// Probes the tiles; `force` runs the trial even where CPUID or the OS says no (a test of the
/// fault's containment).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn probe(force: bool) -> Amx {
    match (linux::missing(), force) {
        (Some(why), false) => Amx::Absent(why),
        _ => linux::trial(),
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub fn probe(_force: bool) -> Amx {
    Amx::Absent("not x86-64 Linux".into())
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod linux {
    use super::Amx;
    use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};

    /// `arch_prctl` codes (asm/prctl.h) and the tile data's XSAVE feature number.
    const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_ulong = 18;

    /// What keeps the tiles from running, if anything: CPUID's AMX-TILE and AMX-INT8, the
    /// OS's tile state in XCR0, then the permission (asked for here, once per process).
    pub(super) fn missing() -> Option<String> {
        // CPUID leaves 1 and 7 exist on every x86-64 CPU.
        let (leaf1, leaf7) = (__cpuid(1), __cpuid_count(7, 0));
        if leaf7.edx & (1 << 24) == 0 || leaf7.edx & (1 << 25) == 0 {
            return Some("the CPU lists no AMX-TILE and AMX-INT8".into());
        }
        if leaf1.ecx & (1 << 27) == 0 {
            return Some("the OS enables no XSAVE state (OSXSAVE)".into());
        }
        // SAFETY: OSXSAVE is set, so XGETBV runs.
        let xcr0 = unsafe { xcr0() };
        if xcr0 & (3 << 17) != 3 << 17 {
            return Some("the OS does not enable the tile state (XCR0 bits 17, 18)".into());
        }
        // SAFETY: the syscall takes two integers.
        let asked = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        (asked != 0).then(|| {
            let e = std::io::Error::last_os_error();
            format!("the kernel refuses the tile data permission ({e})")
        })
    }

    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        _xgetbv(0)
    }

    /// Runs the tile instructions in a forked child and reads how it ended.
    pub(super) fn trial() -> Amx {
        let config = tile_config();
        let data = [0u8; 1024];
        // SAFETY: the child runs only async-signal-safe calls and the tile instructions
        // before `_exit`, so forking from a threaded process is sound.
        match unsafe { libc::fork() } {
            -1 => Amx::Absent(format!("fork: {}", std::io::Error::last_os_error())),
            // SAFETY: as above; `config` and `data` are the child's copies.
            0 => unsafe { child(&config, &data) },
            pid => ended(pid),
        }
    }

    /// The child: default SIGILL, no core dump, one tile configured, loaded and released.
    unsafe fn child(config: &[u8; 64], data: &[u8; 1024]) -> ! {
        libc::signal(libc::SIGILL, libc::SIG_DFL);
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
        std::arch::asm!(
            "ldtilecfg [{config}]",
            "tileloadd tmm0, [{data} + {stride}*1]",
            "tilerelease",
            config = in(reg) config.as_ptr(),
            data = in(reg) data.as_ptr(),
            stride = in(reg) 64usize,
            options(nostack),
        );
        libc::_exit(0)
    }

    /// How the child `pid` ended.
    fn ended(pid: libc::pid_t) -> Amx {
        let mut status = 0;
        // SAFETY: `pid` is this process's child; `status` is written once.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            return Amx::Faulted(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        match (libc::WIFEXITED(status), libc::WIFSIGNALED(status)) {
            (true, _) if libc::WEXITSTATUS(status) == 0 => Amx::Usable,
            (true, _) => Amx::Faulted(format!("exited with {}", libc::WEXITSTATUS(status))),
            (_, true) if libc::WTERMSIG(status) == libc::SIGILL => {
                Amx::Faulted("raised SIGILL".into())
            }
            (_, true) => Amx::Faulted(format!("raised signal {}", libc::WTERMSIG(status))),
            _ => Amx::Faulted(format!("ended with status {status}")),
        }
    }

    /// Palette 1 with tile 0 as 16 rows of 64 bytes (the largest), the others unused.
    fn tile_config() -> [u8; 64] {
        let mut c = [0u8; 64];
        c[0] = 1;
        c[16..18].copy_from_slice(&64u16.to_le_bytes());
        c[48] = 16;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_answers_without_taking_the_process_down() {
        let found = probe(false);
        println!("{found}");
        if let Amx::Absent(why) = &found {
            assert!(!why.is_empty());
        }
        assert_eq!(amx(), amx(), "probed once");
    }

    /// Where the CPU lists no AMX, a forced tile load faults in the child, and only there.
    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn a_tile_load_that_faults_ends_only_the_child() {
        let listed = linux::missing();
        let forced = probe(true);
        println!("forced trial: {forced} (AMX here: {listed:?})");
        if listed.is_some() {
            assert_eq!(forced, Amx::Faulted("raised SIGILL".into()));
        }
    }
}
