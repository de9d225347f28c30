//! Where a model comes from: a local folder (possibly under LocalAI's ModelPath), or a
//! Hugging Face repo id fetched with hf-hub (honouring HF_HOME and HF_HUB_OFFLINE).

use std::io::{ErrorKind, IsTerminal};
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::lora::{AdapterPlan, Adapters};
use crate::options::LoadConfig;

/// Files a model folder may have besides its weights.
const REQUIRED: &[&str] = &["config.json", "tokenizer.json"];
const OPTIONAL: &[&str] = &[
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
];

/// Where to look for a model, and how far a relative name may reach from there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lookup<'a> {
    /// LocalAI's models folder. When given, a relative model resolves under it only, never
    /// against the working directory; when not (the CLI tools), against the working directory.
    pub model_path: Option<&'a Path>,
    /// Lets a relative model leave `model_path` through `..` or a symbolic link. Off unless the
    /// operator sets it: whoever calls LoadModel chooses the name.
    pub allow_outside: bool,
}

impl<'a> Lookup<'a> {
    /// The rule a LoadModel asked for.
    pub fn of(config: &'a LoadConfig) -> Lookup<'a> {
        Lookup {
            model_path: config.model_path.as_deref(),
            allow_outside: config.allow_paths_outside_model_path,
        }
    }

    /// The models folder, if one was given and is not empty.
    fn base(&self) -> Option<&'a Path> {
        self.model_path.filter(|p| !p.as_os_str().is_empty())
    }
}

/// Resolves `model` to a local folder: under `model_path` (which it may not leave; without
/// one, against the working directory), else as a repo id.
pub fn resolve(model: &str, model_path: Option<&Path>) -> Result<PathBuf> {
    let lookup = Lookup {
        model_path,
        allow_outside: false,
    };
    locate(model, &lookup, true)
}

/// As `resolve`, with the rule `lookup` gives.
pub fn resolve_with(model: &str, lookup: &Lookup) -> Result<PathBuf> {
    locate(model, lookup, true)
}

/// As `resolve`, but a repo id is only looked up in the local cache, never downloaded.
pub fn resolve_local(model: &str, model_path: Option<&Path>) -> Result<PathBuf> {
    let lookup = Lookup {
        model_path,
        allow_outside: false,
    };
    locate(model, &lookup, false)
}

fn locate(model: &str, lookup: &Lookup, download: bool) -> Result<PathBuf> {
    locate_kind(model, lookup, download, Kind::Model)
}

/// Resolves a LoRA adapter as [`resolve_with`] resolves a model: a folder (under the model
/// path), or a repo id whose adapter files are fetched.
pub fn resolve_adapter(name: &str, lookup: &Lookup) -> Result<PathBuf> {
    locate_kind(name, lookup, true, Kind::Adapter)
}

/// Each adapter of `plan`, found by the rule the model was (a folder under the model path,
/// or a repo id whose adapter files are fetched).
pub fn resolve_adapters(plan: &AdapterPlan, lookup: &Lookup) -> Result<Adapters> {
    let folders = (plan.adapters.iter())
        .map(|spec| Ok((resolve_adapter(&spec.name, lookup)?, spec.scale)))
        .collect::<Result<_>>()?;
    Ok(Adapters::new(folders, plan.merge))
}

/// What a folder or repo holds, which decides the files fetched.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Adapter,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Model => "model",
            Kind::Adapter => "LoRA adapter",
        }
    }

    /// The file every such folder has, whose parent is the snapshot.
    fn anchor(self) -> &'static str {
        match self {
            Kind::Model => "config.json",
            Kind::Adapter => "adapter_config.json",
        }
    }
}

fn locate_kind(model: &str, lookup: &Lookup, download: bool, kind: Kind) -> Result<PathBuf> {
    if model.is_empty() {
        return Err(Error::Source(format!("no {} given", kind.noun())));
    }
    let found = match lookup.base() {
        Some(base) => under_model_path(model, base, lookup.allow_outside)?,
        None => folder(model, Path::new(model))?,
    };
    if let Some(dir) = found {
        return Ok(dir);
    }
    if looks_like_repo_id(model) {
        return match (download && !offline(), kind) {
            (true, Kind::Model) => from_hub(model),
            (true, Kind::Adapter) => adapter_from_hub(model),
            (false, _) => cached(model, kind),
        };
    }
    let under = match lookup.base() {
        Some(base) => format!(" (looked under the model path {})", quote_path(base)),
        None => String::new(),
    };
    Err(Error::Source(format!(
        "{} {} is neither a folder nor a Hugging Face repo id{under}",
        kind.noun(),
        quote(model)
    )))
}

/// `model` as a folder under `base`, or as the absolute path the host sent; None when no such
/// folder exists. Containment is checked on canonical paths, so `..` and symbolic links count.
fn under_model_path(model: &str, base: &Path, allow_outside: bool) -> Result<Option<PathBuf>> {
    let path = Path::new(model);
    if path.is_absolute() {
        return folder(model, path);
    }
    if !allow_outside && path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(leaves(model, base));
    }
    let Some(dir) = canonical(model, &base.join(path))? else {
        return Ok(None);
    };
    if !allow_outside {
        let root = canonical(model, base)?.ok_or_else(|| {
            Error::Source(format!(
                "the model path {} does not exist",
                quote_path(base)
            ))
        })?;
        if !dir.starts_with(&root) {
            tracing::warn!(
                model = %quote(model),
                resolved = %dir.display(),
                "model refused: outside the model path"
            );
            return Err(leaves(model, base));
        }
    }
    Ok(dir.is_dir().then_some(dir))
}

/// `path` canonicalized if it is a folder; None when there is none.
fn folder(model: &str, path: &Path) -> Result<Option<PathBuf>> {
    Ok(canonical(model, path)?.filter(|p| p.is_dir()))
}

/// `path` canonicalized; None when it does not exist, an error naming `model` when it cannot
/// be resolved (a symbolic link loop, no permission) so that is not mistaken for "missing".
fn canonical(model: &str, path: &Path) -> Result<Option<PathBuf>> {
    match std::fs::canonicalize(path) {
        Ok(p) => Ok(Some(p)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(Error::Source(format!(
            "model {}: cannot resolve {}: {e}",
            quote(model),
            quote_path(path)
        ))),
    }
}

fn leaves(model: &str, base: &Path) -> Error {
    Error::Source(format!(
        "model {} may not leave the model path {} (through `..` or a symbolic link); the load \
         option allow_paths_outside_model_path:true allows it",
        quote(model),
        quote_path(base)
    ))
}

/// A user's value for an error message: cut by `error::quote`, in backticks, control
/// characters escaped so a hostile name cannot forge log lines.
fn quote(s: &str) -> String {
    format!("`{}`", crate::error::quote(s).escape_debug())
}

fn quote_path(p: &Path) -> String {
    quote(&p.to_string_lossy())
}

/// The cached snapshot of `repo_id`, without going online.
fn cached(repo_id: &str, kind: Kind) -> Result<PathBuf> {
    let cache = hf_hub::Cache::from_env();
    let anchor = cache
        .model(repo_id.to_string())
        .get(kind.anchor())
        .ok_or_else(|| {
            let why = match offline() {
                true => format!("HF_HUB_OFFLINE is set and the {}", kind.noun()),
                false => format!("the {}", kind.noun()),
            };
            Error::Source(format!(
                "{repo_id}: {why} is not in the cache at {}",
                cache.path().display()
            ))
        })?;
    snapshot_of(repo_id, &anchor)
}

/// The snapshot folder a fetched `config.json` is in.
fn snapshot_of(repo_id: &str, config: &Path) -> Result<PathBuf> {
    config.parent().map(Path::to_owned).ok_or_else(|| {
        Error::Source(format!(
            "{repo_id}: config.json at {} has no folder",
            config.display()
        ))
    })
}

/// The longest owner or name the Hugging Face hub accepts.
const REPO_PART_LIMIT: usize = 96;

fn looks_like_repo_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= REPO_PART_LIMIT
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// `repo_id` on the hub, through the cache `HF_HOME` names (a progress bar on a terminal).
fn hub_repo(repo_id: &str) -> Result<hf_hub::api::sync::ApiRepo> {
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::from_env())
        .with_progress(std::io::stderr().is_terminal())
        .build()
        .map_err(|e| Error::Source(format!("{repo_id}: {e}")))?;
    Ok(api.model(repo_id.to_string()))
}

/// Fetches (or, offline, finds in the cache) the files of `repo_id`; returns the snapshot folder.
fn from_hub(repo_id: &str) -> Result<PathBuf> {
    let err = |e: String| Error::Source(format!("{repo_id}: {e}"));
    let repo = hub_repo(repo_id)?;
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
    let config = config.ok_or_else(|| err("config.json was not fetched".into()))?;
    snapshot_of(repo_id, &config)
}

/// Fetches (or, offline, finds in the cache) a LoRA adapter repo: its config and whichever
/// weights file its format has.
fn adapter_from_hub(repo_id: &str) -> Result<PathBuf> {
    let err = |e: String| Error::Source(format!("{repo_id}: {e}"));
    let repo = hub_repo(repo_id)?;
    let config = repo
        .get(Kind::Adapter.anchor())
        .map_err(|e| err(format!("{}: {e}", Kind::Adapter.anchor())))?;
    let fetched = [crate::lora::MLX_FILE, crate::lora::PEFT_FILE]
        .iter()
        .any(|file| repo.get(file).is_ok());
    if !fetched {
        return Err(err(format!(
            "has neither {} nor {}",
            crate::lora::MLX_FILE,
            crate::lora::PEFT_FILE
        )));
    }
    snapshot_of(repo_id, &config)
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

    /// A fresh folder for one test, with `models/` (the ModelPath) and `outside/` in it.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mlxd-source-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("models/m")).unwrap();
        std::fs::create_dir_all(dir.join("outside/fixture")).unwrap();
        dir
    }

    fn strict(model_path: &Path) -> Lookup<'_> {
        Lookup {
            model_path: Some(model_path),
            allow_outside: false,
        }
    }

    #[test]
    fn relative_models_resolve_under_the_model_path_only() {
        let dir = scratch("relative");
        let base = dir.join("models");
        let found = resolve_with("m", &strict(&base)).unwrap();
        assert_eq!(found, base.join("m").canonicalize().unwrap());
        let err = resolve_with("../outside/fixture", &strict(&base))
            .unwrap_err()
            .to_string();
        assert!(err.contains("may not leave the model path"), "{err}");
        // `src` is a folder relative to the test's working directory, not under the models.
        assert!(Path::new("src").is_dir());
        let err = resolve_with("src", &strict(&base)).unwrap_err().to_string();
        assert!(err.contains("neither a folder nor"), "{err}");
        // Without a model path (the CLI tools), the working directory is where to look.
        assert!(resolve("src", None).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn absolute_models_are_taken_as_the_host_sends_them() {
        let dir = scratch("absolute");
        let outside = dir.join("outside/fixture");
        let found = resolve_with(&outside.to_string_lossy(), &strict(&dir.join("models")));
        assert_eq!(found.unwrap(), outside.canonicalize().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_the_model_path_need_the_option() {
        let dir = scratch("symlink");
        let base = dir.join("models");
        std::os::unix::fs::symlink(dir.join("outside/fixture"), base.join("link")).unwrap();
        let err = resolve_with("link", &strict(&base))
            .unwrap_err()
            .to_string();
        assert!(err.contains("may not leave the model path"), "{err}");
        assert!(err.contains("allow_paths_outside_model_path"), "{err}");
        let allowed = Lookup {
            allow_outside: true,
            ..strict(&base)
        };
        let found = resolve_with("link", &allowed).unwrap();
        assert_eq!(found, dir.join("outside/fixture").canonicalize().unwrap());
        assert!(resolve_with("../outside/fixture", &allowed).is_ok());
        // A link that stays inside is fine without the option.
        std::os::unix::fs::symlink(base.join("m"), base.join("inner")).unwrap();
        assert!(resolve_with("inner", &strict(&base)).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_is_a_clear_error() {
        let dir = scratch("loop");
        let base = dir.join("models");
        std::os::unix::fs::symlink(base.join("loop"), base.join("loop")).unwrap();
        let err = resolve_with("loop", &strict(&base))
            .unwrap_err()
            .to_string();
        assert!(err.contains("model `loop`"), "{err}");
        assert!(err.contains("symbolic links"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_models_are_quoted_short() {
        let dir = scratch("long");
        let model = format!("../{}", "x".repeat(5000));
        let err = resolve_with(&model, &strict(&dir.join("models")))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 600 && err.contains("5003 bytes"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn offline_hub_miss_names_the_cache() {
        std::env::set_var("HF_HUB_OFFLINE", "1");
        std::env::set_var("HF_HOME", std::env::temp_dir().join("mlxd-empty-hf-home"));
        let err = resolve("someone/some-model", None).unwrap_err().to_string();
        assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
    }
}
