//! Every registered `model_type`, aliases included, against mlx-lm's greedy tokens on its
//! family's tiny fixture: f32, packed on the CPU (the exact numerics), dequantized and as
//! stored, one row alone, a batch of rows at different positions, and resumed from a cached
//! prefix. In-process, so it costs seconds; a family cannot be registered without fixtures.
//! The integer path (`cpu_numerics:int8`) runs on every quantized fixture too, against the
//! exact one.

use std::path::{Path, PathBuf};

use backend::cache::LayerCache;
use backend::loader::{self, LoadedModel};
use backend::models::Row;
use backend::weights::WeightMode;
use integration_tests::goldens::{greedy_tokens, load_tiny_file, TinyGolden};
use integration_tests::quality;
use integration_tests::{fixture, TestResult};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::Array;

/// `model_type` → its float fixture, its quantized one and any others of the same float model
/// (an alias's are its family's), as `scripts/fixtures/tiny_configs.py registry` lists them
/// from the fixtures' recipes.
fn registry() -> TestResult<Vec<(String, String, Vec<String>)>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fixtures/tiny_configs.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg("registry")
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let table: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    let fixture = |row: &serde_json::Value, kind: &str| -> TestResult<String> {
        let name = row[kind].as_str();
        Ok(name
            .ok_or_else(|| format!("no {kind} fixture in {row}"))?
            .to_string())
    };
    let more = |row: &serde_json::Value| -> Vec<String> {
        let names = row["more_quantized"].as_array().into_iter().flatten();
        names
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect()
    };
    (table.iter())
        .map(|(t, row)| {
            let quantized = std::iter::once(fixture(row, "quantized")?).chain(more(row));
            Ok((t.clone(), fixture(row, "float")?, quantized.collect()))
        })
        .collect()
}

/// Rows in the batch; row r joins it r tokens after row 0, so the rows sit at different
/// positions.
const ROWS: usize = 3;

/// A family is not registered without fixtures that prove it.
#[test]
fn every_model_type_has_its_fixtures() -> TestResult {
    let mut listed: Vec<String> = registry()?.into_iter().map(|(t, _, _)| t).collect();
    let mut registered = backend::models::model_types();
    listed.sort();
    registered.sort_unstable();
    assert_eq!(listed, registered);
    Ok(())
}

#[test]
fn every_model_type_equals_mlx_lm_in_every_mode_alone_and_batched() -> TestResult {
    let root = std::env::temp_dir().join(format!("mlxd-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (model_type, float, quantized) in registry()? {
        let mut cases = vec![(&float, WeightMode::AsStored, "golden.json")];
        for q in &quantized {
            cases.extend([
                (q, WeightMode::PackedF32, "golden.json"),
                (q, WeightMode::DequantizeF32, "golden.json"),
                (q, WeightMode::AsStored, "golden-as-stored.json"),
            ]);
        }
        for (folder, mode, file) in cases {
            let golden = load_tiny_file(folder, file)?;
            let dir = as_model_type(&root, folder, &model_type)?;
            let m = loader::load(&dir, mode)?;
            let what = format!("{model_type} ({folder}, {mode:?})");
            let n = golden.tokens.len();
            let alone = greedy_tokens(&m, &golden.prompt_ids, n)?;
            assert_eq!(alone, golden.tokens, "{what}: alone");
            for (r, tokens) in batched(&m, &golden, ROWS)?.iter().enumerate() {
                assert_eq!(tokens, &golden.tokens, "{what}: row {r} of a batch");
            }
            let resumed = from_a_cached_prefix(&m, &golden)?;
            assert_eq!(resumed, golden.tokens, "{what}: from a cached prefix");
            budget_counts_states(&m, &what);
        }
    }
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// Positions of prose each quantized fixture reads on both paths.
const INT8_POSITIONS: usize = 256;
/// Random weights give nearly uniform next-token distributions (perplexity near the
/// 49,152-token vocabulary), where the first-ranked token flips on tiny differences, and so do
/// discrete choices inside the model (a router's experts, an indexer's keys): the fixtures
/// measure 94.5-100% top-1 agreement and a mean KLD of up to 2.4e-3 nats (DeepSeek-V3.2's
/// indexer), most of them below 1e-6 (AVX-512 machine, 2026-11-26). These bounds catch a broken
/// integer kernel: with the low digits dropped (one int8 per value), deepseek_v2's fixture
/// measured KLD 0.017 and 55% agreement; with every block's unit 2% high, KLD 0.088 and 18%.
/// The quality gate proper is SmolLM2's (`int8_quality.rs`).
const INT8_MIN_TOP1: f64 = 0.9;
const INT8_MAX_KLD: f64 = 0.005;

/// Every family's quantized fixtures on the integer path (`WeightMode::PackedInt8`) against
/// the exact one, teacher-forced over the same prose (`quality::gate`), within the bounds
/// above. Layers whose format has no integer kernel take the exact path.
#[test]
fn every_model_type_keeps_the_exact_top1_on_the_integer_path() -> TestResult {
    let mut seen = std::collections::HashSet::new();
    for (model_type, _, quantized) in registry()? {
        for folder in quantized.iter().filter(|q| seen.insert(q.to_string())) {
            let dir = fixture(folder)?;
            let exact = loader::load(&dir, WeightMode::PackedF32)?;
            let int8 = loader::load(&dir, WeightMode::PackedInt8)?;
            let ids = quality::prose_ids(&exact, INT8_POSITIONS)?;
            let gate = quality::gate(&exact, &int8, &ids)?;
            println!("{model_type} ({folder}): {gate}");
            assert!(
                gate.top1 >= INT8_MIN_TOP1 && gate.mean_kld <= INT8_MAX_KLD,
                "{model_type} ({folder}): {gate}, outside top-1 >= {INT8_MIN_TOP1} and \
                 KLD <= {INT8_MAX_KLD}"
            );
        }
    }
    Ok(())
}

/// Qwen3.5's configs come flat or under `text_config` (its multimodal checkpoints): mlx-lm
/// takes both, and so does the registry, with the same tokens.
#[test]
fn qwen3_5_configs_nested_under_text_config_equal_mlx_lm() -> TestResult {
    let root = std::env::temp_dir().join(format!("mlxd-nested-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for folder in ["tiny-qwen3-5", "tiny-qwen3-5-moe-4bit"] {
        let dir = fixture(folder)?;
        let scratch = root.join(folder);
        std::fs::create_dir_all(&scratch)?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_name() != "config.json" {
                std::os::unix::fs::symlink(entry.path(), scratch.join(entry.file_name()))?;
            }
        }
        let text: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
        let mut nested = serde_json::json!({"model_type": text["model_type"], "text_config": text});
        if let Some(q) = nested["text_config"].get("quantization").cloned() {
            nested["quantization"] = q;
        }
        std::fs::write(scratch.join("config.json"), serde_json::to_vec(&nested)?)?;
        let golden = load_tiny_file(folder, "golden.json")?;
        let m = loader::load(&scratch, WeightMode::PackedF32)?;
        let got = greedy_tokens(&m, &golden.prompt_ids, golden.tokens.len())?;
        assert_eq!(got, golden.tokens, "{folder} nested");
    }
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// The fixture as `model_type` names it: itself, or a folder of links with the alias (or
/// the wrapper's text model type) written into its config.json.
fn as_model_type(root: &Path, folder: &str, model_type: &str) -> TestResult<PathBuf> {
    let dir = fixture(folder)?;
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
    if config["model_type"] == model_type {
        return Ok(dir);
    }
    let scratch = root.join(format!("{folder}-as-{model_type}"));
    if !scratch.exists() {
        std::fs::create_dir_all(&scratch)?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_name() != "config.json" {
                std::os::unix::fs::symlink(entry.path(), scratch.join(entry.file_name()))?;
            }
        }
        let mut config = config;
        config["model_type"] = serde_json::json!(model_type);
        std::fs::write(scratch.join("config.json"), serde_json::to_vec(&config)?)?;
    }
    Ok(scratch)
}

/// `rows` copies of the golden's prompt, row r decoded alone for r tokens and then all in one
/// decode batch until each has the golden's length: each row's greedy tokens.
fn batched(m: &LoadedModel, golden: &TinyGolden, rows: usize) -> TestResult<Vec<Vec<u32>>> {
    let ids = &golden.prompt_ids;
    let n = golden.tokens.len();
    let mut caches: Vec<Vec<LayerCache>> = (0..rows).map(|_| m.model.new_caches()).collect();
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); rows];
    for (r, row) in caches.iter_mut().enumerate() {
        let prompt = Array::from_slice(ids, &[1, ids.len() as i32]);
        out[r].push(argmax_last(&m.model.forward(&prompt, row)?, 0)?);
        for _ in 0..r {
            let last = Array::from_slice(&out[r][out[r].len() - 1..], &[1, 1]);
            out[r].push(argmax_last(&m.model.forward(&last, row)?, 0)?);
        }
    }
    while out.iter().any(|o| o.len() < n) {
        let last: Vec<u32> = out.iter().filter_map(|o| o.last().copied()).collect();
        let inputs = Array::from_slice(&last, &[rows as i32, 1]);
        let mut batch: Vec<Row> = (caches.iter_mut().enumerate())
            .map(|(r, caches)| Row {
                slot: r as u64,
                caches,
            })
            .collect();
        let logits = m.model.forward_rows(&inputs, &mut batch, Vec::new())?;
        for (r, tokens) in out.iter_mut().enumerate() {
            tokens.push(argmax_last(&logits, r as i32)?);
        }
    }
    Ok(out.into_iter().map(|o| o[..n].to_vec()).collect())
}

/// A prefix-cache hit as the engine makes one: the prompt's first `len - 3` positions fed
/// and kept (the entry a prefilled prompt leaves), then its rest and the answer fed and the
/// earlier entry's cut points adopted (`LayerCache::adopt`, as an entry that covers another
/// does), shared back to `len - 3` (`LayerCache::prefix`, which a sliding layer or a
/// recurrent state allows only where `can_cut_to` says), the rest of the prompt fed, then
/// greedy.
fn from_a_cached_prefix(m: &LoadedModel, golden: &TinyGolden) -> TestResult<Vec<u32>> {
    let ids = &golden.prompt_ids;
    let len = ids.len() - 3;
    let mut stored = m.model.new_caches();
    m.model.forward(
        &Array::from_slice(&ids[..len], &[1, len as i32]),
        &mut stored,
    )?;
    let early = stored.clone();
    let fed: Vec<u32> = ids[len..].iter().chain(&golden.tokens).copied().collect();
    let all = Array::from_slice(&fed, &[1, fed.len() as i32]);
    m.model.forward(&all, &mut stored)?;
    for (cache, earlier) in stored.iter_mut().zip(&early) {
        cache.adopt(earlier);
    }
    assert!(
        stored.iter().all(|c| c.can_cut_to(len)),
        "the window or the checkpoints hold it"
    );
    let mut caches: Vec<LayerCache> = stored.iter().map(|c| c.prefix(len)).collect();
    let rest = Array::from_slice(&ids[len..], &[1, 3]);
    let mut out = vec![argmax_last(&m.model.forward(&rest, &mut caches)?, 0)?];
    while out.len() < golden.tokens.len() {
        let last = Array::from_slice(&out[out.len() - 1..], &[1, 1]);
        out.push(argmax_last(&m.model.forward(&last, &mut caches)?, 0)?);
    }
    Ok(out)
}

/// The KV budget counts a recurrent state whatever the length, and once more for each
/// checkpoint a sequence passes (every 256 positions).
fn budget_counts_states(m: &LoadedModel, what: &str) {
    let recurrent = (m.model.new_caches().iter()).any(|c| matches!(c, LayerCache::Recurrent(_)));
    let (empty, long) = (m.model.kv_bytes(0, 1), m.model.kv_bytes(512, 512));
    let per_position = m.model.kv_bytes_per_position();
    match recurrent {
        true => {
            assert!(empty > 0, "{what}: the states are counted");
            assert!(
                long > empty + 512 * per_position,
                "{what}: and their checkpoints"
            );
        }
        false => assert_eq!(empty, 0, "{what}"),
    }
}

/// The greedy token of row `r`'s last position.
fn argmax_last(logits: &Array, r: i32) -> TestResult<u32> {
    let last = logits.index((r, -1, ..));
    let id = mlx_rs::ops::indexing::argmax_axis(&last, -1, None)?;
    Ok(id.item_exact::<u32>())
}
