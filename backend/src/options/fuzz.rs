//! Property tests over the table's keys: any value of any size, many options deep and long,
//! never panic, and every refusal names its option briefly.

use super::tests::{load, FakeEnv};
use super::{option_names, LoadConfig, LoadRequest, OPTIONS};

/// A small seeded generator (xorshift64*), so the property tests need no crate and
/// replay the same cases on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// Text of up to `size` characters: ASCII, multibyte, separators and brackets.
    fn text(&mut self, size: usize) -> String {
        const PIECES: &[&str] = &[
            "a", "Z", "9", ":", " ", "é", "€", "𝄞", "[", "{", "\"", "_", "-", ".", "\n", "\u{0}",
        ];
        let len = self.below(size + 1);
        (0..len).map(|_| self.pick(PIECES)).collect()
    }

    /// A value: numbers at and past every bound, floats, booleans, or text.
    fn value(&mut self, size: usize) -> String {
        const VALUES: &[&str] = &[
            "0",
            "1",
            "-1",
            "1.5",
            "1e11",
            "NaN",
            "inf",
            "-inf",
            "true",
            "false",
            "8",
            "600",
            "601",
            "3600",
            "3601",
            "65535",
            "65536",
            "16777216",
            "16777217",
            "9223372036854775807",
            "-9223372036854775808",
            "99999999999999999999",
            "q4_0",
            "ring",
            "127.0.0.1:9090",
            "auto",
            "1_000",
        ];
        match self.below(3) {
            0 => self.text(size),
            _ => self.pick(VALUES).to_string(),
        }
    }
}

/// Every key the parser knows (from the table), and some it does not.
fn keys() -> Vec<&'static str> {
    let mut keys = option_names();
    keys.extend(["gpu_layers", "temprature", ""]);
    keys
}

/// Each row of the table reaches a setter that takes it: a value it refuses names the
/// option; none answers "no setter".
#[test]
fn every_option_in_the_table_has_a_setter() {
    for spec in OPTIONS {
        for value in ["1", "x"] {
            let option = format!("{}:{value}", spec.name);
            if let Err(e) = load(&[option.as_str()], &[("TOKEN", "t")]) {
                assert!(
                    !e.contains("no setter") && e.contains(spec.name),
                    "{option}: {e}"
                );
            }
        }
    }
}

/// Checks one parse: no panic, an error under 1 KiB.
fn parse_checked(req: &LoadRequest) -> Result<LoadConfig, String> {
    let env = FakeEnv([("TOKEN", "t")].into_iter().collect());
    let run = std::panic::catch_unwind(|| LoadConfig::from_request(req, &env));
    let result = run
        .map_err(|_| format!("panicked on {:?}", crate::error::quote(&format!("{req:?}"))))
        .unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = &result {
        assert!(
            e.len() < 1024,
            "{} bytes: {}",
            e.len(),
            crate::error::quote(e)
        );
    }
    result
}

/// One option at a time, its value of any size (up to 256 KiB): a refused known option's
/// error names it; an unknown one is ignored.
#[test]
fn one_option_of_any_value_never_panics_and_names_itself() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let keys = keys();
    for case in 0..3000 {
        let size = [0, 8, 300, 5000, 1 << 18][case % 5];
        let key = rng.pick(&keys);
        let option = format!("{key}:{}", rng.value(size));
        let req = LoadRequest {
            model: "m".into(),
            options: vec![option.clone()],
            ..Default::default()
        };
        if let Err(e) = parse_checked(&req) {
            assert!(
                !key.is_empty() && e.contains(key),
                "{}: {e}",
                crate::error::quote(&option)
            );
        }
    }
}

/// Many options (up to 2,000), keys and values random with depth (`a:b:c:...`) and size as
/// the axes, and the request's own text fields long: never a panic, errors short.
#[test]
fn many_options_deep_and_long_never_panic() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let keys = keys();
    for case in 0..300 {
        let count = [1, 10, 100, 2000][case % 4];
        let depth = rng.below(50);
        let size = [4, 100, 2000][case % 3];
        let options = (0..count)
            .map(|_| {
                let key = match rng.below(3) {
                    0 => rng.text(size),
                    _ => rng.pick(&keys).to_string(),
                };
                let nested: Vec<String> = (0..depth).map(|_| rng.value(8)).collect();
                format!("{key}:{}{}", rng.value(size), nested.join(":"))
            })
            .collect();
        let req = LoadRequest {
            model: rng.text(size * 10).trim().to_string() + "m",
            options,
            cache_type_key: rng.text(size),
            lora_adapters: vec![rng.text(size)],
            draft_model: rng.text(size),
            ..Default::default()
        };
        let _ = parse_checked(&req);
    }
}
