//! Where a model comes from: a local folder (possibly under LocalAI's ModelPath), or a
//! Hugging Face repo id fetched with hf-hub (honouring HF_HOME and HF_HUB_OFFLINE).

use std::io::IsTerminal;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Files a model folder may have besides its weights.
const REQUIRED: &[&str] = &["config.json", "tokenizer.json"];
const OPTIONAL: &[&str] = &[
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
];

/// Resolves `model` to a local folder: as a path, then under `model_path`, then as a repo id.
pub fn resolve(model: &str, model_path: Option<&Path>) -> Result<PathBuf> {
    resolve_with(model, model_path, true)
}

/// As `resolve`, but a repo id is only looked up in the local cache, never downloaded.
pub fn resolve_local(model: &str, model_path: Option<&Path>) -> Result<PathBuf> {
    resolve_with(model, model_path, false)
}

fn resolve_with(model: &str, model_path: Option<&Path>, download: bool) -> Result<PathBuf> {
    if model.is_empty() {
        return Err(Error::Source("no model given".into()));
    }
    let direct = PathBuf::from(model);
    if direct.is_dir() {
        return Ok(direct);
    }
    if let Some(base) = model_path.filter(|p| !p.as_os_str().is_empty()) {
        if Path::new(model)
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(Error::Source(format!(
                "model `{model}` may not leave the model path"
            )));
        }
        let joined = base.join(model);
        if joined.is_dir() {
            return Ok(joined);
        }
    }
    if looks_like_repo_id(model) {
        return match download && !offline() {
            true => from_hub(model),
            false => cached(model),
        };
    }
    Err(Error::Source(format!(
        "model `{model}` is neither a folder nor a Hugging Face repo id"
    )))
}

/// The cached snapshot of `repo_id`, without going online.
fn cached(repo_id: &str) -> Result<PathBuf> {
    let cache = hf_hub::Cache::from_env();
    let config = cache
        .model(repo_id.to_string())
        .get("config.json")
        .ok_or_else(|| {
            let why = match offline() {
                true => "HF_HUB_OFFLINE is set and the model",
                false => "the model",
            };
            Error::Source(format!(
                "{repo_id}: {why} is not in the cache at {}",
                cache.path().display()
            ))
        })?;
    Ok(config.parent().expect("a file has a folder").to_owned())
}

fn looks_like_repo_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Fetches (or, offline, finds in the cache) the files of `repo_id`; returns the snapshot folder.
fn from_hub(repo_id: &str) -> Result<PathBuf> {
    let err = |e: String| Error::Source(format!("{repo_id}: {e}"));
    let cache = hf_hub::Cache::from_env();
    let api = hf_hub::api::sync::ApiBuilder::from_cache(cache)
        .with_progress(std::io::stderr().is_terminal())
        .build()
        .map_err(|e| err(e.to_string()))?;
    let repo = api.model(repo_id.to_string());
    let mut config = None;
    for file in REQUIRED {
        let path = repo.get(file).map_err(|e| err(format!("{file}: {e}")))?;
        config.get_or_insert(path);
    }
    for file in OPTIONAL {
        let _ = repo.get(file);
    }
    let weights = match repo.get("model.safetensors.index.json") {
        Ok(index) => {
            let index: serde_json::Value = crate::error::read_json(&index)?;
            let mut files: Vec<String> = index["weight_map"]
                .as_object()
                .map(|m| {
                    m.values()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            files.dedup();
            files
        }
        Err(_) => vec!["model.safetensors".to_string()],
    };
    for file in weights {
        repo.get(&file).map_err(|e| err(format!("{file}: {e}")))?;
    }
    Ok(config
        .expect("config.json fetched")
        .parent()
        .expect("a file has a folder")
        .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        assert!(looks_like_repo_id(
            "mlx-community/SmolLM2-135M-Instruct-4bit"
        ));
        assert!(!looks_like_repo_id("../etc/passwd"));
        assert!(!looks_like_repo_id("a/b/c"));
        assert!(!looks_like_repo_id("/abs/path"));
    }

    #[test]
    fn missing_model_is_a_clear_error() {
        let err = resolve("no-such-model-folder", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("neither a folder nor"), "{err}");
        let err = resolve("../x", Some(Path::new("/tmp")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("may not leave"), "{err}");
    }

    #[test]
    fn offline_hub_miss_names_the_cache() {
        std::env::set_var("HF_HUB_OFFLINE", "1");
        std::env::set_var("HF_HOME", std::env::temp_dir().join("mlxd-empty-hf-home"));
        let err = resolve("someone/some-model", None).unwrap_err().to_string();
        assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
    }
}
