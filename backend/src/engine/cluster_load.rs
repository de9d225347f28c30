//! Rank 0's LoadModel over a hostfile: form (or reuse) the cluster, join the MLX group,
//! tell every worker its part, load rank 0's own, and check they all loaded the same model.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use super::sharded::{FormedCluster, ShardedModel};
use crate::distributed::protocol::{LoadPlan, Part, Shipment, ToLeader, ToWorker};
use crate::distributed::split::layer_ranges;
use crate::distributed::wire::digest;
use crate::distributed::{clear_groups, Group, Hostfile};
use crate::distributed::{Cluster, ClusterOptions, GiveUp};
use crate::error::{read_json, Error, Result};
use crate::loader::{self, LoadedModel};
use crate::models;
use crate::models::common::{ExpertCut, RankPart, TensorCut};
use crate::options::{LoadConfig, Parallelism};
use crate::shipping::{self, Portion, Shares, Shipper};
use crate::source;
use crate::weights::{PartAxes, PartReads};

/// How long workers get to load their part.
const LOAD_TIMEOUT: Duration = Duration::from_secs(900);

/// The hostfile, read and validated for the configured transport.
pub fn read_hostfile(config: &LoadConfig) -> Result<Option<Hostfile>> {
    let Some(path) = &config.cluster.hostfile else {
        return Ok(None);
    };
    let hostfile = Hostfile::read(path, config.cluster.transport)
        .map_err(|e| Error::Distributed(e.to_string()))?;
    Ok(Some(hostfile))
}

/// Whether `formed` is the cluster `hostfile` describes, still whole: a load over it keeps
/// the model it serves until the new one is in on every rank.
pub fn reusable(formed: Option<&Rc<FormedCluster>>, hostfile: &Hostfile) -> bool {
    let digest = digest(hostfile.mlx_json().as_bytes());
    formed.is_some_and(|s| s.hostfile_digest == digest && s.cluster.check().is_ok())
}

/// Loads `config`'s model over the cluster `hostfile` describes, reusing `formed` when it
/// is the same cluster and still whole. Workers build their part beside the old one and
/// swap only on `Commit`, sent once every rank has loaded the same model.
/// `joined` is the workers that joined in the wait phase (`connect`), when `formed` is not
/// reusable.
/// `give_up` ends the wait for the workers' parts (the LoadModel's caller left); they are
/// told to drop them.
pub fn load(
    config: &LoadConfig,
    hostfile: &Hostfile,
    formed: &mut Option<Rc<FormedCluster>>,
    joined: Option<Box<Joined>>,
    give_up: GiveUp<'_>,
) -> Result<LoadedModel> {
    if let Some(joined) = joined {
        *formed = None;
        clear_groups();
        *formed = Some(Rc::new(group_up(config, hostfile, *joined)?));
    } else if !reusable(formed.as_ref(), hostfile) {
        return Err(Error::Internal(
            "a load over a new cluster reached the engine without its workers".into(),
        ));
    }
    let formed = formed
        .clone()
        .ok_or_else(|| Error::Internal("the cluster was not formed".into()))?;
    let dir = source::resolve_with(&config.model, &source::Lookup::of(config))?;
    let parts = plan_parts(config, &dir, &formed.cluster)?;
    tracing::info!(?parts, "loading over {} ranks", parts.len());
    let (own, reads) = noted_first(config, &dir, &parts, &formed)?;
    let (ships, _shipper) = match config.shipping.ship_model {
        true => start_shipping(&formed, &dir, &parts, reads.as_ref())?,
        false => (HashMap::new(), None),
    };
    let id = send_plans(config, &formed, &parts, ships)?;
    let outcome = load_everywhere(config, &dir, &parts, &formed, own, (id, give_up));
    // Best effort: a worker that cannot hear Abort is lost, and the cluster is formed anew.
    let _ = match &outcome {
        Ok(_) => formed.cluster.broadcast(&ToWorker::Commit),
        Err(_) => formed.cluster.broadcast(&ToWorker::Abort),
    };
    if outcome.is_ok() {
        let size = parts.len();
        let described: Vec<String> = parts
            .iter()
            .enumerate()
            .map(|(rank, part)| part.describe(rank, size))
            .collect();
        formed.cluster.board().set_parts(&described);
    }
    outcome
}

/// Sends every worker its part's `LoadPlan` under a new load number, which it returns.
fn send_plans(
    config: &LoadConfig,
    formed: &FormedCluster,
    parts: &[Part],
    mut ships: HashMap<usize, Shipment>,
) -> Result<u64> {
    let id = formed.loads.get() + 1;
    formed.loads.set(id);
    for (rank, part) in parts.iter().enumerate().skip(1) {
        formed.cluster.send_to(
            rank,
            &ToWorker::Load(LoadPlan {
                load: id,
                model: config.model.clone(),
                model_path: config.model_path.as_ref().map(|p| p.display().to_string()),
                allow_paths_outside_model_path: config.allow_paths_outside_model_path,
                weight_mode: config.weight_mode,
                kv_format: config.kv,
                part: part.clone(),
                adapters: config.adapters.clone(),
                ship: ships.remove(&rank),
            }),
        )?;
    }
    Ok(id)
}

/// Tensor or expert mode with `ship_model`: rank 0 loads its own part first, noting the
/// tensors it read as parts, since every rank cuts each tensor the same way: what rank 0 read
/// as part 0, a worker reads as its part (one source of truth, the loader itself).
fn noted_first(
    config: &LoadConfig,
    dir: &std::path::Path,
    parts: &[Part],
    formed: &FormedCluster,
) -> Result<(Option<loader::LoadedPart>, Option<PartAxes>)> {
    if !config.shipping.ship_model || matches!(parts.first(), None | Some(Part::Pipeline { .. })) {
        return Ok((None, None));
    }
    let reads = PartReads::default();
    let own = load_part(config, dir, &parts[0], formed, Some(reads.clone()))?;
    Ok((Some(own), Some(reads.taken())))
}

/// `ship_model`: each worker's share (its layers in pipeline mode; its parts of the tensors
/// rank 0 read as parts, as `reads` notes, and the others whole, in tensor or expert mode),
/// and the server that ships them for this load (dropped when the load is over).
fn start_shipping(
    formed: &FormedCluster,
    dir: &std::path::Path,
    parts: &[Part],
    reads: Option<&PartAxes>,
) -> Result<(HashMap<usize, Shipment>, Option<Shipper>)> {
    let (listener, address) = shipping::listen(&formed.control)?;
    let fingerprint = loader::fingerprint(dir)?;
    let layout = models::facts_of(&read_json(&dir.join("config.json"))?)?.layout;
    let mut shares = HashMap::new();
    for (rank, part) in parts.iter().enumerate().skip(1) {
        let portion = match (part, reads) {
            (Part::Pipeline { start, end }, _) => Portion::Layers {
                layers: *start..*end,
                layout,
            },
            (_, Some(reads)) => Portion::Parts { rank, reads },
            (_, None) => {
                return Err(Error::Internal(
                    "a tensor-mode share without rank 0's part reads".into(),
                ))
            }
        };
        let share = shipping::share(dir, &portion, fingerprint.clone(), address.clone())?;
        tracing::info!(
            rank,
            items = share.items.len(),
            bytes = share.items.iter().map(|i| i.len).sum::<u64>(),
            "shipping a share"
        );
        shares.insert(rank, share);
    }
    let shipper = Shipper::start(
        listener,
        Shares {
            dir: dir.to_owned(),
            by_rank: shares.clone(),
            secret: formed.secret.clone(),
            corrupt: shipping::corrupt_hook(),
        },
    )?;
    Ok((shares, Some(shipper)))
}

/// The parallel mode for a model of `experts` routed experts (see
/// [`ClusterOptions::parallelism_for`](crate::options::ClusterOptions::parallelism_for)).
fn parallelism(config: &LoadConfig, experts: Option<u64>, size: usize) -> Parallelism {
    let chosen = config.cluster.parallelism_for(experts, size);
    if chosen == Parallelism::Expert && config.cluster.parallelism.is_none() {
        tracing::info!(
            ranks = size,
            "a mixture of experts: expert parallelism by default"
        );
    }
    chosen
}

/// Each rank's part: layer ranges (pipeline) or the whole model split by heads (tensor).
fn plan_parts(config: &LoadConfig, dir: &std::path::Path, cluster: &Cluster) -> Result<Vec<Part>> {
    let model_config: serde_json::Value = read_json(&dir.join("config.json"))?;
    let family = models::facts_of(&model_config)?;
    let layers = family.num_layers(&model_config)?;
    let size = cluster.size();
    let experts = family.expert_count(&model_config);
    Ok(match parallelism(config, experts, size) {
        Parallelism::Pipeline => layer_ranges(
            &loader::layer_bytes(dir, family.layout, layers)?,
            size,
            config.cluster.layer_split.as_deref(),
            &cluster.free_memory(),
        )
        .map_err(Error::Config)?
        .into_iter()
        .map(|r| Part::Pipeline {
            start: r.start,
            end: r.end,
        })
        .collect(),
        Parallelism::Tensor => vec![Part::Tensor; size],
        Parallelism::Expert => vec![Part::Expert; size],
    })
}

/// Rank 0's part (unless `own` was loaded already), then every worker's answer to load
/// `id`, checked to be the same model. Answers to loads given up before are dropped.
fn load_everywhere(
    config: &LoadConfig,
    dir: &std::path::Path,
    parts: &[Part],
    formed: &Rc<FormedCluster>,
    own: Option<loader::LoadedPart>,
    (id, give_up): (u64, GiveUp<'_>),
) -> Result<LoadedModel> {
    let own = match own {
        Some(own) => Ok(own),
        None => load_part(config, dir, &parts[0], formed, None),
    };
    let cluster = &formed.cluster;
    let stale = |msg: &ToLeader| answer_to_load(msg).is_some_and(|load| load < id);
    cluster.forget(stale);
    let theirs = cluster.collect_until("LoadModel", LOAD_TIMEOUT, give_up, |rank, msg| match msg {
        ToLeader::Loaded { load, fingerprint } if *load == id => {
            Ok(Some((rank, fingerprint.clone())))
        }
        ToLeader::LoadFailed { load, error } if *load == id => Err(cluster.failed(rank, error)),
        _ => Ok(None),
    });
    cluster.forget(stale);
    let own = own?;
    let adapters = source::resolve_adapters(&config.adapters, &source::Lookup::of(config))?;
    let fingerprint = loader::fingerprint_with(dir, &adapters)?;
    for (rank, theirs) in theirs? {
        if theirs != fingerprint {
            return Err(Error::Distributed(format!(
                "rank {rank} loaded a different model than rank 0 from `{}` (config or weights \
                 differ: fingerprint {theirs} vs {fingerprint}); give every machine the same files",
                crate::error::quote(&config.model)
            )));
        }
    }
    own.serve(|transformer| {
        Ok(Box::new(ShardedModel::new(
            transformer,
            formed.clone(),
            parts[0].clone(),
            fingerprint,
            config.kv,
        )))
    })
}

/// The load number a worker's `Loaded` or `LoadFailed` answers.
fn answer_to_load(msg: &ToLeader) -> Option<u64> {
    match msg {
        ToLeader::Loaded { load, .. } | ToLeader::LoadFailed { load, .. } => Some(*load),
        _ => None,
    }
}

fn load_part(
    config: &LoadConfig,
    dir: &std::path::Path,
    part: &Part,
    formed: &FormedCluster,
    reads: Option<PartReads>,
) -> Result<loader::LoadedPart> {
    let adapters = source::resolve_adapters(&config.adapters, &source::Lookup::of(config))?;
    let recipe = loader::Recipe {
        mode: config.weight_mode,
        adapters: &adapters,
    };
    let own = loader::load_part_noting(dir, recipe, &rank_part(part, 0, &formed.group), reads)?;
    own.transformer.check_kv_format(&config.kv)?;
    Ok(own)
}

/// A rank's `RankPart` for its part.
pub fn rank_part(part: &Part, rank: usize, group: &Rc<Group>) -> RankPart {
    match part {
        Part::Pipeline { start, end } => RankPart {
            layers: Some(*start..*end),
            ends: rank == 0,
            tensor: None,
        },
        Part::Tensor | Part::Expert => RankPart {
            layers: None,
            ends: true,
            tensor: Some(TensorCut {
                rank,
                size: group.size(),
                group: group.clone(),
                experts: match part {
                    Part::Expert => ExpertCut::Whole,
                    _ => ExpertCut::Neurons,
                },
            }),
        },
    }
}

/// A cluster whose workers joined (the wait phase's result), its MLX group not yet formed.
pub struct Joined {
    cluster: Cluster,
    digest: String,
    control: String,
    secret: crate::distributed::wire::Secret,
}

/// The wait phase over a hostfile: waits for the workers to join rank 0's control channel
/// (network only, no MLX, so it runs off the engine thread); `give_up` ends it early.
pub fn connect(config: &LoadConfig, hostfile: &Hostfile, give_up: GiveUp<'_>) -> Result<Joined> {
    let control = hostfile
        .control_address(
            config.cluster.coordinator.as_deref(),
            config.cluster.control_port,
        )
        .map_err(|e| {
            Error::Distributed(format!(
                "hostfile {}: {e}",
                config
                    .cluster
                    .hostfile
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ))
        })?;
    let join_timeout = Duration::from_secs(config.cluster.join_timeout_secs);
    let token = config.cluster.token.as_ref().map(|t| t.0.as_str());
    let opts = ClusterOptions::new(hostfile, control, join_timeout, token);
    let cluster = Cluster::form_until(&opts, give_up)?;
    Ok(Joined {
        cluster,
        digest: digest(hostfile.mlx_json().as_bytes()),
        control: opts.control,
        secret: opts.secret,
    })
}

/// Forms the MLX group with the workers that joined (on the engine thread: MLX holds one
/// group at a time, and the old one is cleared first).
fn group_up(config: &LoadConfig, hostfile: &Hostfile, joined: Joined) -> Result<FormedCluster> {
    let Joined {
        cluster,
        digest,
        control,
        secret,
    } = joined;
    cluster.broadcast(&ToWorker::InitGroup)?;
    let (tx, rx) = mpsc::channel();
    let (h, coordinator) = (hostfile.clone(), config.cluster.coordinator.clone());
    std::thread::spawn(move || {
        let _ = tx.send(Group::join(&h, 0, coordinator.as_deref()));
    });
    cluster.collect(
        "joining the MLX group",
        Duration::from_secs(60),
        |_, msg| match msg {
            ToLeader::GroupReady => Ok(Some(())),
            _ => Ok(None),
        },
    )?;
    let group = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| {
        Error::Distributed("rank 0 could not join the MLX group within 60 s".into())
    })??;
    tracing::info!(size = group.size(), "MLX group formed");
    Ok(FormedCluster {
        cluster: Rc::new(cluster),
        group: Rc::new(group),
        hostfile_digest: digest,
        control,
        secret,
        seq: std::cell::Cell::new(0),
        loads: std::cell::Cell::new(0),
    })
}
