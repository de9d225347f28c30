//! AMX tiles, counted as usable only where they really run and give the right totals.
//!
//! CPUID and the kernel's permission (`arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)`) can both
//! say yes in a virtual machine whose hypervisor does not give the guest the tile state:
//! llama.cpp dies there with SIGILL at its first `tileloadd`. So the probe configures the
//! tiles and runs the integer kernel's own tile steps ([`TileUnit::steps`]) in a forked child,
//! where a fault ends the child alone, and compares its totals with [`Model`]'s, the step
//! written out from the instructions' definitions. The tiles count only if the child exits
//! cleanly with the model's totals. It runs once per process ([`amx`]).
//!
//! The steps are the one place this crate runs tile instructions; the kernel that uses them
//! (`int8::x86::amx`) is tested on [`Model`] everywhere, and on the hardware where it runs.

/// What the probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Amx {
    /// The tile step ran and gave the model's totals.
    Usable,
    /// Not tried: what is missing (the CPU's AMX, the OS's tile state, the permission).
    Absent(String),
    /// Tried, and the trial ended otherwise (a signal, a status, or totals not the model's).
    Faulted(String),
}

impl std::fmt::Display for Amx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amx::Usable => write!(f, "AMX tiles run here"),
            Amx::Absent(why) => write!(f, "no AMX tiles: {why}"),
            Amx::Faulted(how) => write!(f, "AMX tiles are listed but the tile step {how}"),
        }
    }
}

/// The probe's answer for this process (probed at the first call). `MLX_DISTRIBUTED_AMX=off`
/// turns the tiles off without a probe (to measure the kernels without them).
pub fn amx() -> &'static Amx {
    static AMX: std::sync::OnceLock<Amx> = std::sync::OnceLock::new();
    AMX.get_or_init(|| match std::env::var("MLX_DISTRIBUTED_AMX").as_deref() {
        Ok("off") => Amx::Absent("turned off by MLX_DISTRIBUTED_AMX=off".into()),
        _ => probe(false),
    })
}

/// Rows one tile step takes at most: the rows of A and of C.
pub const ROWS: usize = 16;
/// Bytes of one block's codes as B: 8 rows of 64, row `l` holding lane `l`'s 4 codes of
/// each of 16 weight rows (a block of the tiled weights' layout, its lanes unpacked). A step
/// reads a span's: one block's or two's, one after the other.
pub const CODES: usize = 8 * 64;
/// Totals a step gives each row of A: one a weight row (a row of C).
pub const COLUMNS: usize = 16;
/// Bytes of digits in a row of A at most (the configured depth): a span of two blocks'. A
/// span of one block takes 32.
pub const DEPTH: usize = 64;
/// Steps one call takes at most, each into a C tile of its own, so that the tiles' steps
/// overlap: one at a time, each waited for before its store, a step took about 66 cycles.
pub const STEPS: usize = 4;

/// Where one call's steps read and write. Step `i` reads A at `a + i·a_step` (its rows the
/// configured depth apart) and B at `b + i·b_step`, and writes C at `c + i·c_step` (its rows
/// [`COLUMNS`] totals apart); the steps are bytes.
#[derive(Clone, Copy, Debug)]
pub struct Steps {
    pub a: *const i8,
    pub a_step: usize,
    pub b: *const u8,
    pub b_step: usize,
    pub c: *mut i32,
    pub c_step: usize,
    /// 1..=[`STEPS`].
    pub count: usize,
}

/// Integer totals on tiles: `tdpbsud` (signed digits times unsigned codes, summed exactly in
/// i32), one span of digits a row of A against a span of a tile's 16 weight rows.
pub trait TileUnit {
    /// Readies the tiles for steps of `rows` rows of A (1..=[`ROWS`]) of `depth` bytes (32 or
    /// [`DEPTH`]).
    ///
    /// # Safety
    /// [`Hardware`] needs the probe's [`Amx::Usable`].
    unsafe fn configure(&mut self, rows: usize, depth: usize);

    /// For each step `i < steps.count`, configured row `m` and weight row `n`, depth `d`:
    /// `C_i[m·16 + n] = Σ_{l<d/4, j<4} A_i[m·d + 4l + j] · B_i[64l + 4n + j]`.
    ///
    /// # Safety
    /// Configured; each step's A holds the configured rows, B `d / 4` rows of 64 bytes, and C
    /// the rows' [`COLUMNS`] totals.
    unsafe fn steps(&mut self, steps: &Steps);

    /// Gives the tiles back (the hardware's to their initial state).
    ///
    /// # Safety
    /// As [`TileUnit::configure`].
    unsafe fn release(&mut self);
}

/// The tile step written out from the instructions' definitions: what the probe and the
/// kernel's tests hold the hardware to, and what the kernel is tested on where no tiles run.
#[derive(Default)]
pub struct Model {
    rows: usize,
    depth: usize,
}

impl TileUnit for Model {
    unsafe fn configure(&mut self, rows: usize, depth: usize) {
        assert!((1..=ROWS).contains(&rows), "1 to {ROWS} rows, not {rows}");
        assert!(
            depth == 32 || depth == DEPTH,
            "a depth of 32 or {DEPTH}, not {depth}"
        );
        (self.rows, self.depth) = (rows, depth);
    }

    unsafe fn steps(&mut self, s: &Steps) {
        assert!((1..=STEPS).contains(&s.count), "1 to {STEPS} steps");
        for i in 0..s.count {
            let (a, b) = (s.a.add(i * s.a_step), s.b.add(i * s.b_step));
            let c = s.c.byte_add(i * s.c_step);
            for (m, n) in (0..self.rows).flat_map(|m| (0..COLUMNS).map(move |n| (m, n))) {
                let products = (0..self.depth).map(|i| {
                    let (l, j) = (i / 4, i % 4);
                    i32::from(*a.add(m * self.depth + i)) * i32::from(*b.add(64 * l + 4 * n + j))
                });
                *c.add(m * COLUMNS + n) = products.sum();
            }
        }
    }

    unsafe fn release(&mut self) {
        self.rows = 0;
    }
}

/// The tile steps on the CPU's tiles: tmm0-tmm3 the totals (C) of up to four steps, tmm4
/// and tmm5 the digits (A), tmm6 and tmm7 the codes (B). It keeps the configured depth, A's
/// row stride.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
pub struct Hardware {
    depth: usize,
}

#[cfg(target_arch = "x86_64")]
impl TileUnit for Hardware {
    unsafe fn configure(&mut self, rows: usize, depth: usize) {
        assert!((1..=ROWS).contains(&rows), "1 to {ROWS} rows, not {rows}");
        assert!(
            depth == 32 || depth == DEPTH,
            "a depth of 32 or {DEPTH}, not {depth}"
        );
        self.depth = depth;
        let config = step_config(rows, depth);
        std::arch::asm!(
            "ldtilecfg [{config}]",
            config = in(reg) config.as_ptr(),
            options(nostack, readonly),
        );
    }

    unsafe fn steps(&mut self, s: &Steps) {
        match s.count {
            STEPS => four(s, self.depth),
            count => {
                for i in 0..count {
                    one(s, i, self.depth);
                }
            }
        }
    }

    unsafe fn release(&mut self) {
        std::arch::asm!("tilerelease", options(nostack, nomem));
    }
}

/// Step `i` of `s` alone (A's rows `depth` apart): its product, then its store.
#[cfg(target_arch = "x86_64")]
unsafe fn one(s: &Steps, i: usize, depth: usize) {
    std::arch::asm!(
        "tilezero tmm0",
        "tileloadd tmm4, [{a} + {row}*1]",
        "tileloadd tmm6, [{b} + {line}*1]",
        "tdpbsud tmm0, tmm4, tmm6",
        "tilestored [{c} + {line}*1], tmm0",
        a = in(reg) s.a.add(i * s.a_step),
        row = in(reg) depth,
        b = in(reg) s.b.add(i * s.b_step),
        line = in(reg) 64usize,
        c = in(reg) s.c.byte_add(i * s.c_step),
        options(nostack),
    );
}

/// Four steps, each into its own C, all issued before the first store.
#[cfg(target_arch = "x86_64")]
unsafe fn four(s: &Steps, depth: usize) {
    std::arch::asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        "tileloadd tmm4, [{a} + {row}*1]",
        "tileloadd tmm6, [{b} + {line}*1]",
        "tdpbsud tmm0, tmm4, tmm6",
        "add {a}, {a_step}",
        "add {b}, {b_step}",
        "tileloadd tmm5, [{a} + {row}*1]",
        "tileloadd tmm7, [{b} + {line}*1]",
        "tdpbsud tmm1, tmm5, tmm7",
        "add {a}, {a_step}",
        "add {b}, {b_step}",
        "tileloadd tmm4, [{a} + {row}*1]",
        "tileloadd tmm6, [{b} + {line}*1]",
        "tdpbsud tmm2, tmm4, tmm6",
        "add {a}, {a_step}",
        "add {b}, {b_step}",
        "tileloadd tmm5, [{a} + {row}*1]",
        "tileloadd tmm7, [{b} + {line}*1]",
        "tdpbsud tmm3, tmm5, tmm7",
        "tilestored [{c} + {line}*1], tmm0",
        "add {c}, {c_step}",
        "tilestored [{c} + {line}*1], tmm1",
        "add {c}, {c_step}",
        "tilestored [{c} + {line}*1], tmm2",
        "add {c}, {c_step}",
        "tilestored [{c} + {line}*1], tmm3",
        a = inout(reg) s.a => _,
        a_step = in(reg) s.a_step,
        row = in(reg) depth,
        b = inout(reg) s.b => _,
        b_step = in(reg) s.b_step,
        line = in(reg) 64usize,
        c = inout(reg) s.c => _,
        c_step = in(reg) s.c_step,
        options(nostack),
    );
}

/// Palette 1 for steps of `rows` rows of A of `depth` bytes: C (tmm0-tmm3) `rows` x 64
/// bytes, A (tmm4, tmm5) `rows` x `depth`, B (tmm6, tmm7) `depth / 4` x 64. Bytes 16.. hold
/// each tile's row bytes, 48.. its rows.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn step_config(rows: usize, depth: usize) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[0] = 1;
    let (sums, digits, codes) = ((64u16, rows), (depth as u16, rows), (64u16, depth / 4));
    let tiles = [sums, sums, sums, sums, digits, digits, codes, codes];
    for (t, (bytes, rows)) in tiles.into_iter().enumerate() {
        c[16 + 2 * t..18 + 2 * t].copy_from_slice(&bytes.to_le_bytes());
        c[48 + t] = rows as u8;
    }
    c
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
    use super::{Amx, Hardware, Model, Steps, TileUnit, CODES, COLUMNS, DEPTH, ROWS, STEPS};
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

    /// The exit status of a child whose tile step gave totals other than the model's.
    const WRONG: i32 = 3;
    /// Totals of the trial: [`STEPS`] steps at once, then three of them one at a time.
    const OUTS: usize = 2 * STEPS - 1;

    /// Bytes of codes a step of the trial reads: a span of two blocks'.
    const B_BYTES: usize = 2 * CODES;

    /// The trial's steps, at the full depth: digits and codes over their whole ranges, and
    /// the model's totals.
    struct Trial {
        digits: [i8; STEPS * ROWS * DEPTH],
        codes: [u8; STEPS * B_BYTES],
        want: [[i32; ROWS * COLUMNS]; OUTS],
        got: [[i32; ROWS * COLUMNS]; OUTS],
    }

    impl Trial {
        fn new() -> Trial {
            let mut t = Trial {
                digits: std::array::from_fn(|i| (i * 37 % 256 + i / 512) as u8 as i8),
                codes: std::array::from_fn(|i| (i * 53 % 256 + i / 512) as u8),
                want: [[0; ROWS * COLUMNS]; OUTS],
                got: [[0; ROWS * COLUMNS]; OUTS],
            };
            // SAFETY: the buffers are the sizes the steps read and write.
            unsafe { t.run(&mut Model::default(), true) };
            t
        }

        /// The steps on `unit`, into `want` or `got`: all of them in one call, then the last
        /// three in another (one at a time on the hardware).
        ///
        /// # Safety
        /// As [`TileUnit::configure`].
        unsafe fn run(&mut self, unit: &mut impl TileUnit, want: bool) {
            let out = match want {
                true => &mut self.want,
                false => &mut self.got,
            };
            let (a_step, c_step) = (ROWS * DEPTH, ROWS * COLUMNS * 4);
            let all = Steps {
                a: self.digits.as_ptr(),
                a_step,
                b: self.codes.as_ptr(),
                b_step: B_BYTES,
                c: out.as_mut_ptr().cast(),
                c_step,
                count: STEPS,
            };
            let rest = Steps {
                a: all.a.add(a_step),
                b: all.b.add(B_BYTES),
                c: all.c.byte_add(STEPS * c_step),
                count: STEPS - 1,
                ..all
            };
            unit.configure(ROWS, DEPTH);
            unit.steps(&all);
            unit.steps(&rest);
            unit.release();
        }
    }

    /// Runs the tile step in a forked child and reads how it ended.
    pub(super) fn trial() -> Amx {
        let mut trial = Trial::new();
        // SAFETY: the child runs only async-signal-safe calls and the tile instructions
        // before `_exit`, so forking from a threaded process is sound.
        match unsafe { libc::fork() } {
            -1 => Amx::Absent(format!("fork: {}", std::io::Error::last_os_error())),
            // SAFETY: as above; `trial` is the child's copy.
            0 => unsafe { child(&mut trial) },
            pid => ended(pid),
        }
    }

    /// The child: default SIGILL, no core dump, the tile step, and its totals checked.
    unsafe fn child(trial: &mut Trial) -> ! {
        libc::signal(libc::SIGILL, libc::SIG_DFL);
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
        trial.run(&mut Hardware::default(), false);
        libc::_exit(if trial.got == trial.want { 0 } else { WRONG })
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
            (true, _) if libc::WEXITSTATUS(status) == WRONG => {
                Amx::Faulted("gave totals other than the model's".into())
            }
            (true, _) => Amx::Faulted(format!("exited with {}", libc::WEXITSTATUS(status))),
            (_, true) if libc::WTERMSIG(status) == libc::SIGILL => {
                Amx::Faulted("raised SIGILL".into())
            }
            (_, true) => Amx::Faulted(format!("raised signal {}", libc::WTERMSIG(status))),
            _ => Amx::Faulted(format!("ended with status {status}")),
        }
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
