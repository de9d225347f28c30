//! The options' behaviour: values, fallbacks, conflicts and the errors that name them.

use std::collections::HashMap;
use std::path::PathBuf;

use super::*;
use crate::cache::KvEncoding;
use crate::distributed::Transport;
use crate::lora::{AdapterPlan, Merge};
use crate::speculative::Drafting;

pub(super) struct FakeEnv(pub(super) HashMap<&'static str, &'static str>);

impl Env for FakeEnv {
    fn var(&self, key: &str) -> Option<String> {
        self.0.get(key).map(|v| v.to_string())
    }
}

pub(super) fn load(
    options: &[&str],
    env: &[(&'static str, &'static str)],
) -> Result<LoadConfig, String> {
    let req = LoadRequest {
        model: "m".into(),
        options: options.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    LoadConfig::from_request(&req, &FakeEnv(env.iter().copied().collect()))
}

/// `metrics_addr` takes an ip:port; anything else is an error naming the option.
#[test]
fn metrics_addr_is_an_ip_and_port() -> Result<(), String> {
    let c = load(&["metrics_addr:127.0.0.1:9090"], &[])?;
    assert_eq!(c.metrics.addr, "127.0.0.1:9090".parse().ok());
    assert_eq!(load(&[], &[])?.metrics.addr, None);
    for bad in [
        "metrics_addr:9090",
        "metrics_addr:localhost",
        "metrics_addr:true",
    ] {
        let e = load(&[bad], &[]).err().unwrap_or_default();
        assert!(e.contains("`metrics_addr`") && e.contains("ip:port"), "{e}");
    }
    Ok(())
}

/// LocalAI's cache type fields, then options over them; bad names and sizes are errors
/// naming the field or option.
#[test]
fn lora_adapters_scales_and_fuse() -> Result<(), String> {
    let load = |req: LoadRequest| LoadConfig::from_request(&req, &NoEnv);
    let base = LoadRequest {
        model: "m".into(),
        ..Default::default()
    };
    let c = load(LoadRequest {
        lora_adapter: "one".into(),
        lora_adapters: vec!["two".into(), "three".into()],
        lora_scales: vec![0.5, -1.0],
        options: vec!["fuse:false".into()],
        ..base.clone()
    })?;
    let got: Vec<(&str, f32)> = (c.adapters.adapters.iter())
        .map(|a| (a.name.as_str(), a.scale))
        .collect();
    assert_eq!(got, [("one", 1.0), ("two", 0.5), ("three", -1.0)]);
    assert_eq!(c.adapters.merge, Merge::RunTime);
    assert_eq!(load(base.clone())?.adapters, AdapterPlan::default());
    let err = |req: LoadRequest| load(req).err().unwrap_or_default();
    let scales = err(LoadRequest {
        lora_adapters: vec!["a".into()],
        lora_scales: vec![1.0, 2.0],
        ..base.clone()
    });
    assert!(scales.contains("LoraScales has 2 values for 1"), "{scales}");
    let lora_base = err(LoadRequest {
        lora_adapter: "a".into(),
        lora_base: "b".into(),
        ..base.clone()
    });
    assert!(lora_base.contains("LoraBase"), "{lora_base}");
    let fuse = err(LoadRequest {
        options: vec!["fuse:true".into()],
        ..base.clone()
    });
    assert!(fuse.contains("`fuse`"), "{fuse}");
    let nan = err(LoadRequest {
        lora_adapter: "a".into(),
        lora_scale: f32::NAN,
        ..base
    });
    assert!(nan.contains("LoraScale"), "{nan}");
    Ok(())
}

/// `ship_model` needs a hostfile (option or environment) and no adapters.
#[test]
fn ship_model_needs_a_cluster_and_no_adapters() -> Result<(), String> {
    assert!(!load(&[], &[])?.shipping.ship_model);
    let hostfile = [("MLX_DISTRIBUTED_HOSTFILE", "/h.json")];
    assert!(load(&["ship_model:true"], &hostfile)?.shipping.ship_model);
    assert!(
        load(&["ship_model:true", "hostfile:/h.json"], &[])?
            .shipping
            .ship_model
    );
    let alone = load(&["ship_model:true"], &[]).err().unwrap_or_default();
    assert!(alone.contains("no cluster to ship to"), "{alone}");
    let bad = load(&["ship_model:maybe"], &hostfile)
        .err()
        .unwrap_or_default();
    assert!(bad.contains("option `ship_model`"), "{bad}");
    let req = LoadRequest {
        model: "m".into(),
        options: vec!["ship_model:true".into()],
        lora_adapter: "a".into(),
        ..Default::default()
    };
    let env = FakeEnv(hostfile.into_iter().collect());
    let adapters = LoadConfig::from_request(&req, &env)
        .err()
        .unwrap_or_default();
    assert!(
        adapters.contains("LoRA adapters are not shipped"),
        "{adapters}"
    );
    Ok(())
}

#[test]
fn speculation_options_and_the_draft_model() -> Result<(), String> {
    let load = |options: &[&str], draft: &str| {
        let req = LoadRequest {
            model: "m".into(),
            options: options.iter().map(|o| o.to_string()).collect(),
            draft_model: draft.into(),
            ..Default::default()
        };
        LoadConfig::from_request(&req, &NoEnv)
    };
    let c = load(&["speculative:ngram", "num_draft_tokens:6"], "")?;
    assert_eq!((c.spec.drafting, c.spec.draft_tokens), (Drafting::Ngram, 6));
    let c = load(&[], " small ")?;
    assert_eq!(
        (c.spec.drafting, c.spec.draft_model.as_deref()),
        (Drafting::Model, Some("small"))
    );
    assert_eq!(load(&[], "")?.spec.drafting, Drafting::Off);
    let err = |options: &[&str], draft: &str| load(options, draft).err().unwrap_or_default();
    assert!(err(&["speculative:ngram"], "small").contains("DraftModel is set"));
    assert!(err(&["speculative:draft"], "").contains("needs ModelOptions.DraftModel"));
    assert!(err(&["speculative:eagle"], "").contains("option `speculative`"));
    assert!(err(&["num_draft_tokens:33"], "").contains("num_draft_tokens"));
    Ok(())
}

#[test]
fn kv_cache_types_and_mlx_lm_options() -> Result<(), String> {
    let req = LoadRequest {
        model: "m".into(),
        cache_type_key: "q8_0".into(),
        cache_type_value: "f16".into(),
        options: vec!["kv_group_size:32".into(), "quantized_kv_start:100".into()],
        ..Default::default()
    };
    let f = LoadConfig::from_request(&req, &NoEnv)?.kv;
    assert_eq!(f.keys, KvEncoding::Affine { bits: 8 });
    assert_eq!(f.values, KvEncoding::Float(crate::cache::KvFloat::F16));
    assert_eq!((f.group_size, f.quantized_start), (32, 100));
    let f = load(&["kv_bits:4"], &[])?.kv;
    assert_eq!(
        (f.keys, f.values),
        (
            KvEncoding::Affine { bits: 4 },
            KvEncoding::Affine { bits: 4 }
        )
    );
    let bad_field = LoadRequest {
        cache_type_key: "q3_k".into(),
        ..req
    };
    let err = LoadConfig::from_request(&bad_field, &NoEnv).unwrap_err();
    assert!(
        err.contains("CacheTypeKey") && err.contains("q3_k"),
        "{err}"
    );
    for (option, named) in [
        ("kv_group_size:48", "kv_group_size"),
        ("kv_bits:7", "kv_bits"),
        ("cache_type_v:q2", "cache_type_v"),
    ] {
        let err = load(&[option], &[]).unwrap_err();
        assert!(err.contains(named), "{option}: {err}");
    }
    Ok(())
}

#[test]
fn values_are_typed_like_localai() {
    let parsed = parse_options(&[
        "a:true".into(),
        "b: 12 ".into(),
        "c:1e3".into(),
        "d:x:y".into(),
        "noval".into(),
    ]);
    assert_eq!(
        parsed,
        vec![
            ("a".into(), OptionValue::Bool(true)),
            ("b".into(), OptionValue::Int(12)),
            ("c".into(), OptionValue::Float(1000.0)),
            ("d".into(), OptionValue::Str("x:y".into())),
        ]
    );
}

#[test]
fn p2p_without_a_hostfile_from_options_or_localai_variables() -> Result<(), String> {
    assert_eq!(load(&[], &[])?.p2p, None);
    let c = load(&["p2p_ranks:3", "p2p_wait:5"], &[("TOKEN", "the-token")])?;
    let p = c.p2p.ok_or("p2p")?;
    assert_eq!(
        (p.token.0.as_str(), p.ranks, p.wait_secs),
        ("the-token", Some(3), 5)
    );
    assert_eq!(c.cluster.token, Some(Token("the-token".into())));
    let c = load(
        &["p2p_token:opt-token"],
        &[("LOCALAI_P2P_NETWORK_ID", "n1")],
    )?;
    let p = c.p2p.ok_or("p2p")?;
    assert_eq!(
        (p.token.0.as_str(), p.network_id.as_str(), p.ranks),
        ("opt-token", "n1", None)
    );
    // A hostfile wins over an ambient token; P2P options beside one are an error.
    let c = load(&["hostfile:/h.json"], &[("TOKEN", "the-token")])?;
    assert_eq!(c.p2p, None);
    let err = |o: &[&str], e: &[(&'static str, &'static str)]| load(o, e).unwrap_err();
    assert!(err(&["hostfile:/h.json", "p2p_ranks:2"], &[]).contains("no hostfile"));
    assert!(err(&["p2p_ranks:2"], &[]).contains("need a token"));
    assert!(err(&["p2p_ranks:1"], &[("TOKEN", "t")]).contains("p2p_ranks"));
    Ok(())
}

#[test]
fn known_options_and_env_fallbacks() -> Result<(), String> {
    let c = load(
        &[
            "temp:0.7",
            "top_k:40",
            "max_tokens:99",
            "parallelism:tensor",
            "unknown:1",
        ],
        &[
            ("MLX_DISTRIBUTED_HOSTFILE", "/h.json"),
            ("MLX_DISTRIBUTED_BACKEND", "jaccl"),
        ],
    )?;
    assert_eq!(c.sampling.temperature, Some(0.7));
    assert_eq!(c.sampling.top_k, Some(40));
    assert_eq!(c.sampling.max_tokens, Some(99));
    assert!(!c.allow_paths_outside_model_path);
    assert!(load(&["allow_paths_outside_model_path:true"], &[])?.allow_paths_outside_model_path);
    assert_eq!(c.cluster.hostfile, Some(PathBuf::from("/h.json")));
    assert_eq!(c.cluster.transport, Transport::Jaccl);
    assert_eq!(c.cluster.effective_parallelism(), Parallelism::Tensor);
    // A mixture of experts whose experts divide over the ranks runs expert-parallel by
    // default where the default would be tensor; an explicit choice stands.
    assert_eq!(c.cluster.parallelism_for(Some(128), 2), Parallelism::Tensor);
    let jaccl = load(&[], &[("MLX_DISTRIBUTED_BACKEND", "jaccl")])?;
    assert_eq!(
        jaccl.cluster.parallelism_for(Some(128), 2),
        Parallelism::Expert
    );
    assert_eq!(
        jaccl.cluster.parallelism_for(Some(128), 3),
        Parallelism::Tensor
    );
    assert_eq!(jaccl.cluster.parallelism_for(None, 2), Parallelism::Tensor);
    let ring = load(&[], &[])?;
    assert_eq!(
        ring.cluster.parallelism_for(Some(128), 2),
        Parallelism::Pipeline
    );
    let expert = load(&["parallelism:expert"], &[])?;
    assert_eq!(expert.cluster.parallelism_for(None, 2), Parallelism::Expert);
    let c = load(
        &["hostfile:/o.json", "distributed_backend:ring"],
        &[("MLX_DISTRIBUTED_HOSTFILE", "/h.json")],
    )?;
    assert_eq!(
        (c.cluster.hostfile, c.cluster.transport),
        (Some(PathBuf::from("/o.json")), Transport::Ring)
    );
    assert_eq!(
        load(&[], &[])?.cluster.effective_parallelism(),
        Parallelism::Pipeline
    );
    Ok(())
}

/// The options read from the environment are exactly the rows that list variables: a
/// fallback names its option, and the row names the variables.
#[test]
fn fallbacks_are_the_rows_with_variables() {
    let mut read = [
        "coordinator",
        "control_port",
        "cpu_numerics",
        "hostfile",
        "distributed_backend",
        "p2p_token",
        "p2p_network_id",
        "p2p_ranks",
        "p2p_wait",
    ];
    let mut rows: Vec<&str> = (OPTIONS.iter())
        .filter(|o| !o.env.is_empty())
        .map(|o| o.name)
        .collect();
    read.sort_unstable();
    rows.sort_unstable();
    assert_eq!(read[..], rows[..]);
    let c = load(&[], &[("MLX_JACCL_COORDINATOR", "10.0.0.1:5000")]);
    assert_eq!(
        c.ok().and_then(|c| c.cluster.coordinator).as_deref(),
        Some("10.0.0.1:5000")
    );
    let port = load(&[], &[("MLX_DISTRIBUTED_CONTROL_PORT", "70000")]).unwrap_err();
    assert!(
        port.contains("MLX_DISTRIBUTED_CONTROL_PORT") && port.contains("[1, 65535]"),
        "{port}"
    );
}

#[test]
fn bad_values_are_named() {
    for (opt, needle) in [
        ("top_p:2", "top_p"),
        ("max_tokens:-1", "max_tokens"),
        ("distributed_backend:mpi", "distributed_backend"),
        ("parallelism:data", "parallelism"),
        ("seed:abc", "seed"),
        ("trust_remote_code:maybe", "trust_remote_code"),
        (
            "allow_paths_outside_model_path:yes",
            "allow_paths_outside_model_path",
        ),
    ] {
        let err = load(&[opt], &[]).unwrap_err();
        assert!(err.contains(needle), "{opt}: {err}");
    }
    let err = load(&[], &[("MLX_DISTRIBUTED_BACKEND", "nccl")]).unwrap_err();
    assert!(err.contains("MLX_DISTRIBUTED_BACKEND"), "{err}");
}

/// The bounds the issue named: fractional, huge and out-of-range values are refused with
/// the option, the range and the value; kv_bits beside a cache type is a conflict.
#[test]
fn ranges_are_named_with_the_value() {
    let err = |o: &str| load(&[o], &[("TOKEN", "t")]).err().unwrap_or_default();
    let e = err("p2p_wait:1.5");
    assert!(
        e.contains("`p2p_wait`") && e.contains("[1, 600]") && e.contains("got 1.5"),
        "{e}"
    );
    let e = err("quantized_kv_start:1e11");
    assert!(
        e.contains("`quantized_kv_start`")
            && e.contains("[0, 16777216]")
            && e.contains("100000000000"),
        "{e}"
    );
    for (o, range) in [
        ("join_timeout:3601", "[1, 3600]"),
        ("p2p_wait:601", "[1, 600]"),
        ("queue_timeout:0", "[1, 3600]"),
        ("max_batch:100000", "[1, 1024]"),
        ("control_port:70000", "[1, 65535]"),
        ("max_tokens:99999999999", "[1, 16777216]"),
    ] {
        let e = err(o);
        let key = o.split(':').next().unwrap_or_default();
        assert!(e.contains(key) && e.contains(range), "{o}: {e}");
    }
    assert!(load(&["join_timeout:3600", "queue_timeout:3600"], &[]).is_ok());
    for (options, cache_key) in [
        (&["cache_type_k:q4_0", "kv_bits:8"][..], ""),
        (&["kv_bits:8"][..], "q8_0"),
    ] {
        let req = LoadRequest {
            model: "m".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            cache_type_key: cache_key.into(),
            ..Default::default()
        };
        let e = LoadConfig::from_request(&req, &NoEnv)
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("kv_bits") && (e.contains("cache_type_k") || e.contains("CacheTypeKey")),
            "{e}"
        );
    }
}

/// `cpu_numerics` picks the packed kernels' numerics: the option, else its variable, else
/// `int8`. Asked for, `int8` needs packed weights on the CPU, so `dequantize:true` beside it is
/// refused naming both, in either order; as the default it leaves `dequantize:true` alone.
#[test]
fn cpu_numerics_settles_the_weight_mode() -> Result<(), String> {
    use crate::weights::{Numerics, WeightMode};
    let packed = WeightMode::default_for_device();
    let int8 = match packed {
        WeightMode::PackedF32 => WeightMode::PackedInt8,
        other => other,
    };
    let mode =
        |o: &[&str], e: &[(&'static str, &'static str)]| Ok::<_, String>(load(o, e)?.weight_mode);
    assert_eq!(mode(&[], &[])?, int8, "the default");
    assert_eq!(load(&[], &[])?.cpu_numerics, Some(Numerics::Int8));
    assert_eq!(mode(&["cpu_numerics:int8"], &[])?, int8);
    assert_eq!(mode(&["cpu_numerics:exact"], &[])?, packed);
    let var = "MLX_DISTRIBUTED_CPU_NUMERICS";
    assert_eq!(mode(&[], &[(var, "exact")])?, packed, "the variable");
    assert_eq!(
        mode(&["cpu_numerics:int8"], &[(var, "exact")])?,
        int8,
        "the option wins"
    );
    assert_eq!(mode(&["dequantize:true"], &[])?, WeightMode::DequantizeF32);
    assert_eq!(
        mode(&["cpu_numerics:exact", "dequantize:true"], &[])?,
        WeightMode::DequantizeF32
    );
    for pair in [
        ["cpu_numerics:int8", "dequantize:true"],
        ["dequantize:true", "cpu_numerics:int8"],
    ] {
        let e = load(&pair, &[]).err().unwrap_or_default();
        assert!(
            e.contains("cpu_numerics") && e.contains("dequantize"),
            "{e}"
        );
    }
    let e = load(&["dequantize:true"], &[(var, "int8")])
        .err()
        .unwrap_or_default();
    assert!(
        e.contains("cpu_numerics") && e.contains("dequantize"),
        "{e}"
    );
    for bad in [
        "cpu_numerics:fast",
        "cpu_numerics:true",
        "cpu_numerics:INT8",
    ] {
        let e = load(&[bad], &[]).err().unwrap_or_default();
        assert!(
            e.contains("`cpu_numerics`") && e.contains("exact or int8"),
            "{e}"
        );
    }
    let e = load(&[], &[(var, "fast")]).err().unwrap_or_default();
    assert!(
        e.contains(var) && e.contains("exact or int8") && e.contains("fast"),
        "{e}"
    );
    Ok(())
}
