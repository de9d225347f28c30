//! The registry's facts and each family's declared shape, on its test fixture's config.

use serde_json::{json, Value};

use super::common::shape::*;
use super::common::{layer_node_supports, EndShape, HeadKind, LayerShape};
use super::{facts, facts_of, Experts, Layout, TextConfigAt};
use crate::error::Result;

/// The sizes every fixture shares (tiny-*: 64 hidden, 4 heads of 32).
fn tiny(model_type: &str, extra: Value) -> Value {
    let mut config = json!({
        "model_type": model_type, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "rms_norm_eps": 1e-6, "vocab_size": 49152, "rope_theta": 1000000.0,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        config[k] = v.clone();
    }
    config
}

fn llama3() -> Value {
    tiny(
        "llama",
        json!({"head_dim": 32, "attention_bias": false, "mlp_bias": false,
            "tie_word_embeddings": false, "rope_theta": 500000.0, "rope_scaling": {
            "factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}),
    )
}

fn qwen3_moe() -> Value {
    tiny(
        "qwen3_moe",
        json!({"head_dim": 32, "tie_word_embeddings": false, "num_hidden_layers": 3,
            "decoder_sparse_step": 1, "mlp_only_layers": [1], "moe_intermediate_size": 32,
            "norm_topk_prob": true, "num_experts": 8, "num_experts_per_tok": 2}),
    )
}

/// tiny-deepseek-v2 or -v3 (`model_type`), YaRN-scaled with `mscale_all_dim`.
fn deepseek(model_type: &str) -> Value {
    tiny(
        model_type,
        json!({"num_hidden_layers": 3, "first_k_dense_replace": 1, "kv_lora_rank": 32,
            "moe_intermediate_size": 32, "moe_layer_freq": 1, "n_group": 4,
            "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
            "num_key_value_heads": 4, "q_lora_rank": null, "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 16, "v_head_dim": 32, "rope_theta": 10000.0,
            "routed_scaling_factor": 2.5, "topk_group": 2, "tie_word_embeddings": false,
            "topk_method": if model_type == "deepseek_v2" { "group_limited_greedy" }
                else { "noaux_tc" },
            "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                "type": "yarn"}}),
    )
}

fn declared(config: &Value) -> Result<(Vec<LayerShape>, EndShape)> {
    let shape = facts_of(config)?.shape(config)?;
    Ok((shape.layers, shape.ends))
}

#[test]
fn dense_families_declare_llamas_layer_with_their_differences() -> Result<()> {
    let (layers, ends) = declared(&llama3())?;
    let llama = LayerShape::llama(RopeScaling::Llama3);
    assert_eq!(layers, vec![llama; 2]);
    assert_eq!(ends, EndShape::plain(HeadKind::Untied));

    let qwen2 = tiny("qwen2", json!({"tie_word_embeddings": true}));
    let (layers, ends) = declared(&qwen2)?;
    let with_bias = LayerShape {
        bias: AttnBias::Qkv,
        ..LayerShape::llama(RopeScaling::None)
    };
    assert_eq!(layers, vec![with_bias; 2]);
    assert_eq!(ends.head, HeadKind::Tied);

    let qwen3 = tiny(
        "qwen3",
        json!({"head_dim": 32, "tie_word_embeddings": true}),
    );
    let (layers, _) = declared(&qwen3)?;
    let with_norms = LayerShape {
        qk_norm: Some(NormKind::Rms),
        ..LayerShape::llama(RopeScaling::None)
    };
    assert_eq!(layers, vec![with_norms; 2]);
    Ok(())
}

#[test]
fn llama_biases_and_traditional_rope_are_declared() -> Result<()> {
    let config = tiny(
        "mistral",
        json!({"attention_bias": true, "mlp_bias": true, "rope_traditional": true}),
    );
    let (layers, _) = declared(&config)?;
    assert_eq!(layers[0].bias, AttnBias::QkvO);
    assert_eq!(layers[0].mlp_bias, MlpBias::All);
    assert_eq!(layers[0].rope.pairs, RopePairs::Adjacent);
    Ok(())
}

#[test]
fn qwen3_moe_declares_experts_in_its_sparse_layers_only() -> Result<()> {
    let (layers, _) = declared(&qwen3_moe())?;
    let moe = FeedForwardKind::Moe {
        routing: RoutingKind::Softmax,
        shared: None,
    };
    let kinds: Vec<FeedForwardKind> = layers.iter().map(|l| l.feed_forward).collect();
    assert_eq!(kinds, [moe, FeedForwardKind::Dense, moe]);
    assert!(layers.iter().all(|l| l.qk_norm == Some(NormKind::Rms)));
    Ok(())
}

#[test]
fn deepseek_declares_latent_attention_and_its_routing() -> Result<()> {
    for (model_type, routing) in [
        ("deepseek_v2", RoutingKind::SoftmaxGroups),
        ("deepseek_v3", RoutingKind::SigmoidCorrected),
        ("kimi_k2", RoutingKind::SigmoidCorrected),
    ] {
        let (layers, ends) = declared(&deepseek(model_type))?;
        let moe = FeedForwardKind::Moe {
            routing,
            shared: Some(1),
        };
        let first = LayerShape {
            rope: RopeShape {
                span: RopeSpan::Full,
                pairs: RopePairs::Adjacent,
                scaling: RopeScaling::Yarn,
            },
            attention: AttentionKind::Latent,
            scale: AttnScale::YarnMscale,
            ..LayerShape::llama(RopeScaling::Yarn)
        };
        let sparse = LayerShape {
            feed_forward: moe,
            ..first
        };
        assert_eq!(layers, [first, sparse, sparse], "{model_type}");
        assert_eq!(ends, EndShape::plain(HeadKind::Untied));
    }
    Ok(())
}

/// tiny-deepseek-v32 and tiny-glm-moe-dsa's sizes: DeepSeek-V3's with an indexer.
fn sparse(model_type: &str) -> Value {
    let mut config = deepseek(model_type);
    for (k, v) in [
        ("q_lora_rank", json!(64)),
        ("index_head_dim", json!(32)),
        ("index_n_heads", json!(4)),
        ("index_topk", json!(12)),
    ] {
        config[k] = v;
    }
    if model_type == "glm_moe_dsa" {
        let rope = config["rope_scaling"].take();
        config["rope_parameters"] = json!({"rope_theta": 1000000.0});
        config["rope_parameters"]["rope_type"] = rope["type"].clone();
        for k in [
            "factor",
            "mscale",
            "mscale_all_dim",
            "original_max_position_embeddings",
        ] {
            config["rope_parameters"][k] = rope[k].clone();
        }
    }
    config
}

#[test]
fn sparse_attention_families_declare_it_and_refuse_bad_indexer_fields() -> Result<()> {
    for model_type in ["deepseek_v32", "glm_moe_dsa"] {
        let (layers, _) = declared(&sparse(model_type))?;
        assert!(layers.iter().all(
            |l| l.attention == AttentionKind::SparseLatent && l.scale == AttnScale::YarnMscale
        ));
        assert!(!layers.iter().any(layer_node_supports));
        let bad = |field: &str, value: Value| {
            let mut config = sparse(model_type);
            config[field] = value;
            declared(&config)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(bad("q_lora_rank", Value::Null).contains("q_lora_rank is null"));
        assert!(bad("index_topk", json!(0)).contains("index_topk"));
        assert!(bad("index_head_dim", json!(8)).contains("index_head_dim 8 is below"));
    }
    let mut glm = sparse("glm_moe_dsa");
    glm["rope_parameters"] = json!({"rope_type": "default"});
    let err = declared(&glm)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("rope_parameters.rope_theta"), "{err}");
    Ok(())
}

#[test]
fn the_one_node_layer_takes_the_dense_families_shapes_only() -> Result<()> {
    for config in [
        llama3(),
        tiny("qwen2", json!({})),
        tiny(
            "qwen3",
            json!({"head_dim": 32, "tie_word_embeddings": true}),
        ),
    ] {
        let (layers, _) = declared(&config)?;
        assert!(layers.iter().all(layer_node_supports), "{config}");
    }
    let (layers, _) = declared(&qwen3_moe())?;
    let taken: Vec<bool> = layers.iter().map(layer_node_supports).collect();
    assert_eq!(taken, [false, true, false]);
    let (layers, _) = declared(&deepseek("deepseek_v3"))?;
    assert!(!layers.iter().any(layer_node_supports));
    Ok(())
}

/// One feature beyond what the node computes, each on an otherwise taken shape: the node
/// refuses it, so the layer runs op by op.
#[test]
fn one_extra_feature_sends_a_layer_op_by_op() {
    let taken = LayerShape {
        qk_norm: Some(NormKind::Rms),
        ..LayerShape::llama(RopeScaling::Llama3)
    };
    assert!(layer_node_supports(&taken));
    let post = NormShape {
        kind: NormKind::Rms,
        placement: NormPlacement::Sandwich(SandwichKeys::Gemma),
    };
    let partial = RopeShape {
        span: RopeSpan::Partial { fraction: 0.25 },
        ..taken.rope
    };
    let window = AttentionSpan::Sliding {
        window: 4096,
        rope_base: Some(10000.0),
    };
    let extra = [
        LayerShape {
            norms: post,
            ..taken
        },
        LayerShape {
            rope: partial,
            ..taken
        },
        LayerShape {
            span: window,
            ..taken
        },
        LayerShape {
            bias: AttnBias::QkvO,
            ..taken
        },
        LayerShape {
            mlp_bias: MlpBias::All,
            ..taken
        },
        LayerShape {
            activation: Activation::GeGluTanh,
            ..taken
        },
        LayerShape {
            scale: AttnScale::QueryPreAttnScalar(256.0),
            ..taken
        },
        LayerShape {
            attn_softcap: SoftCap::Tanh(50.0),
            ..taken
        },
        LayerShape {
            qk_norm: Some(NormKind::RmsPlusOne),
            ..taken
        },
        LayerShape {
            qk_norm_span: QkNormSpan::AllHeads,
            ..taken
        },
        LayerShape {
            query_scaling: QueryScaling::Llama4 {
                beta: 0.1,
                original: 8192.0,
            },
            ..taken
        },
    ];
    for shape in extra {
        assert!(!layer_node_supports(&shape), "{shape:?}");
    }
}

#[test]
fn registry_facts_for_every_model_type_and_alias() -> Result<()> {
    let dense = ["llama", "mistral", "qwen2", "qwen3"];
    for model_type in dense {
        assert_eq!(facts(model_type)?.experts, Experts::Dense, "{model_type}");
    }
    let counted = [
        ("qwen3_moe", "num_experts"),
        ("deepseek_v2", "n_routed_experts"),
        ("deepseek_v3", "n_routed_experts"),
        ("kimi_k2", "n_routed_experts"),
    ];
    for (model_type, key) in counted {
        assert_eq!(facts(model_type)?.experts, Experts::CountedBy(key));
    }
    for model_type in dense.iter().chain(counted.iter().map(|(m, _)| m)) {
        let f = facts(model_type)?;
        assert!(matches!(f.text_config, TextConfigAt::TopLevel));
        assert_eq!(f.layout, Layout::Model);
    }
    // An alias declares its family's shape for the same config.
    for (alias, family) in [("mistral", "llama"), ("kimi_k2", "deepseek_v3")] {
        let mut config = match family {
            "llama" => llama3(),
            _ => deepseek(family),
        };
        let theirs = declared(&config)?;
        config["model_type"] = json!(alias);
        assert_eq!(declared(&config)?, theirs, "{alias}");
    }
    let unknown = facts("mamba").err().map(|e| e.to_string());
    assert!(unknown.is_some_and(|e| e.contains("mamba") && e.contains("gemma3_text")));
    Ok(())
}

#[test]
fn facts_read_the_config_they_describe() -> Result<()> {
    let config = qwen3_moe();
    let f = facts_of(&config)?;
    assert_eq!(f.num_layers(&config)?, 3);
    assert_eq!(f.expert_count(&config), Some(8));
    assert_eq!(facts_of(&llama3())?.expert_count(&llama3()), None);
    assert!(facts_of(&json!({})).is_err());
    Ok(())
}

#[test]
fn layouts_find_layers_and_ends_under_their_prefix() {
    assert_eq!(
        Layout::Model.layer_of("model.layers.12.mlp.gate.weight"),
        Some(12)
    );
    assert!(Layout::Model.is_end("lm_head.weight"));
    let nested = Layout::LanguageModel;
    assert_eq!(nested.layer_of("language_model.model.layers.3.x"), Some(3));
    // transformers 5 spells a wrapper's text model `model.language_model.`.
    assert_eq!(nested.layer_of("model.language_model.layers.3.x"), Some(3));
    assert_eq!(
        nested.text_key("language_model.lm_head.weight").as_deref(),
        Some("lm_head.weight")
    );
    assert_eq!(nested.text_key("vision_tower.blocks.0.weight"), None);
    assert_eq!(nested.text_key("model.vision_tower.x"), None);
    assert!(nested.is_end("language_model.model.norm.weight"));
    assert!(!nested.is_end("vision_tower.model.norm.weight"));
}

fn gemma3_text() -> Value {
    tiny(
        "gemma3_text",
        json!({"hidden_size": 96, "num_hidden_layers": 4, "head_dim": 32,
            "query_pre_attn_scalar": 48, "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window": 8,
            "sliding_window_pattern": 2}),
    )
}

#[test]
fn gemma3_declares_sliding_layers_between_global_ones() -> Result<()> {
    let (layers, ends) = declared(&gemma3_text())?;
    let spans: Vec<Option<i32>> = layers.iter().map(LayerShape::window).collect();
    assert_eq!(spans, [Some(8), None, Some(8), None]);
    let sliding = layers[0];
    assert_eq!(
        sliding.span,
        AttentionSpan::Sliding {
            window: 8,
            rope_base: Some(10000.0)
        }
    );
    assert_eq!(sliding.rope.scaling, RopeScaling::None);
    assert_eq!(layers[1].rope.scaling, RopeScaling::Linear);
    assert_eq!(
        sliding.norms.placement,
        NormPlacement::Sandwich(SandwichKeys::Gemma)
    );
    assert_eq!(sliding.norms.kind, NormKind::RmsPlusOne);
    assert_eq!(sliding.activation, Activation::GeGluTanh);
    assert_eq!(sliding.scale, AttnScale::QueryPreAttnScalar(48.0));
    assert_eq!(ends.embed_scale, EmbedScale::SqrtHidden);
    assert_eq!(ends.head, HeadKind::Tied);
    Ok(())
}

#[test]
fn wrappers_read_their_text_config_and_take_its_shape() -> Result<()> {
    let text = gemma3_text();
    let wrapper = json!({"model_type": "gemma3", "text_config": text, "vocab_size": 49152});
    let f = facts_of(&wrapper)?;
    assert_eq!(f.layout, Layout::LanguageModel);
    assert_eq!(f.num_layers(&wrapper)?, 4);
    assert_eq!(f.shape(&wrapper)?, facts_of(&text)?.shape(&text)?);
    // Gemma 3's wrapper supplies the vocabulary size, as mlx-lm's does.
    assert_eq!(f.text_config(&wrapper)?["vocab_size"], json!(49152));

    let kimi = json!({"model_type": "kimi_k25"});
    let err = facts_of(&kimi)?.shape(&kimi).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("kimi_k25") && e.contains("text_config")));
    let k25 = json!({"model_type": "kimi_k25", "text_config": deepseek("deepseek_v3")});
    assert_eq!(facts_of(&k25)?.expert_count(&k25), Some(8));
    Ok(())
}

#[test]
fn mistral3_takes_its_text_models_family() -> Result<()> {
    let ministral = tiny(
        "ministral3",
        json!({"head_dim": 32, "sliding_window": 8, "num_hidden_layers": 2,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0,
                "original_max_position_embeddings": 16, "llama_4_scaling_beta": 0.1}}),
    );
    let (layers, ends) = declared(&ministral)?;
    assert_eq!(layers[0].window(), Some(8));
    assert_eq!(layers[1].window(), None);
    assert_eq!(
        layers[0].query_scaling,
        QueryScaling::Llama4 {
            beta: 0.1,
            original: 16.0
        }
    );
    assert_eq!(layers[0].rope.scaling, RopeScaling::Yarn);
    assert_eq!(ends.head, HeadKind::Tied);
    let wrapper = json!({"model_type": "mistral3", "text_config": ministral.clone()});
    let (wrapped, ends) = declared(&wrapper)?;
    assert_eq!(wrapped, layers);
    // mlx-lm's mistral3 unties the head unless the text config says.
    let mut untied = ministral.clone();
    untied
        .as_object_mut()
        .map(|o| o.remove("tie_word_embeddings"));
    let wrapper = json!({"model_type": "mistral3", "text_config": untied});
    assert_eq!(declared(&wrapper)?.1.head, HeadKind::Untied);
    assert_eq!(ends.head, HeadKind::Untied);

    let mistral4 = mistral4();
    let (layers, _) = declared(&mistral4)?;
    let wrapper = json!({"model_type": "mistral3", "text_config": mistral4});
    assert_eq!(declared(&wrapper)?.0, layers);
    assert_eq!(facts_of(&wrapper)?.expert_count(&wrapper), Some(8));
    assert_eq!(facts_of(&ministral)?.expert_count(&ministral), None);
    Ok(())
}

/// tiny-mistral4: latent attention, YaRN from `rope_parameters`, Llama 4 scaling, experts
/// after one dense layer.
fn mistral4() -> Value {
    tiny(
        "mistral4",
        json!({"num_hidden_layers": 3, "first_k_dense_replace": 1, "kv_lora_rank": 32,
            "q_lora_rank": 48, "moe_intermediate_size": 32, "n_group": 4, "topk_group": 2,
            "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
            "num_key_value_heads": 4, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
            "v_head_dim": 32, "routed_scaling_factor": 1.5, "norm_topk_prob": true,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.1}}),
    )
}

#[test]
fn mistral4_declares_latent_attention_llama4_scaling_and_grouped_softmax_experts() -> Result<()> {
    let (layers, ends) = declared(&mistral4())?;
    let first = LayerShape {
        rope: RopeShape {
            span: RopeSpan::Full,
            pairs: RopePairs::Adjacent,
            scaling: RopeScaling::Yarn,
        },
        attention: AttentionKind::Latent,
        scale: AttnScale::YarnMscale,
        query_scaling: QueryScaling::Llama4 {
            beta: 0.1,
            original: 16.0,
        },
        ..LayerShape::llama(RopeScaling::Yarn)
    };
    let sparse = LayerShape {
        feed_forward: FeedForwardKind::Moe {
            routing: RoutingKind::SoftmaxGroupsByTwo,
            shared: Some(1),
        },
        ..first
    };
    assert_eq!(layers, [first, sparse, sparse]);
    assert_eq!(ends, EndShape::plain(HeadKind::Untied));
    assert!(!layers.iter().any(layer_node_supports));
    for (field, value, named) in [
        ("rope_parameters", json!(null), "needs rope_parameters"),
        ("n_group", json!(3), "n_group 3"),
        ("qk_rope_head_dim", json!(15), "qk_rope_head_dim 15"),
    ] {
        let mut bad = mistral4();
        bad[field] = value;
        let err = declared(&bad).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains(named)), "{field}");
    }
    let mut no_beta = mistral4();
    no_beta["rope_parameters"]
        .as_object_mut()
        .map(|o| o.remove("llama_4_scaling_beta"));
    let err = declared(&no_beta).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("llama_4_scaling_beta")));
    Ok(())
}

#[test]
fn bad_window_and_layer_types_are_refused_by_name() {
    let refused = |extra: Value| {
        let config = tiny(
            "ministral3",
            json!({"num_hidden_layers": 2, "rope_parameters": {"rope_theta": 1e6,
                "original_max_position_embeddings": 16, "llama_4_scaling_beta": 0.1}}),
        );
        let mut config = config;
        for (k, v) in extra.as_object().into_iter().flatten() {
            config[k] = v.clone();
        }
        declared(&config)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let sliding = json!(["sliding_attention", "full_attention"]);
    assert!(refused(json!({"layer_types": sliding})).contains("no sliding_window"));
    assert!(refused(json!({"layer_types": ["full_attention"]})).contains("layer_types lists 1"));
    assert!(refused(json!({"layer_types": ["local", "full_attention"]})).contains("local"));
    let zero = json!({"layer_types": sliding, "sliding_window": 0});
    assert!(refused(zero).contains("sliding_window is 0"));
    let mut gemma = gemma3_text();
    gemma["sliding_window_pattern"] = json!(0);
    let err = declared(&gemma).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("sliding_window_pattern")));
}

#[test]
fn glm4_moe_declares_partial_rope_and_sigmoid_experts_after_its_dense_layers() -> Result<()> {
    let config = tiny(
        "glm4_moe",
        json!({"num_hidden_layers": 3, "head_dim": 32, "partial_rotary_factor": 0.5,
            "use_qk_norm": true, "attention_bias": true, "moe_intermediate_size": 32,
            "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
            "n_group": 4, "topk_group": 2, "norm_topk_prob": true,
            "routed_scaling_factor": 2.5, "first_k_dense_replace": 1,
            "tie_word_embeddings": false}),
    );
    let (layers, ends) = declared(&config)?;
    let moe = FeedForwardKind::Moe {
        routing: RoutingKind::SigmoidCorrected,
        shared: Some(1),
    };
    let kinds: Vec<FeedForwardKind> = layers.iter().map(|l| l.feed_forward).collect();
    assert_eq!(kinds, [FeedForwardKind::Dense, moe, moe]);
    assert_eq!(layers[0].rope.span, RopeSpan::Partial { fraction: 0.5 });
    assert_eq!(layers[0].rope.pairs, RopePairs::Halves);
    assert_eq!(
        (layers[0].qk_norm, layers[0].bias),
        (Some(NormKind::Rms), AttnBias::Qkv)
    );
    assert_eq!(ends.head, HeadKind::Untied);
    assert_eq!(facts_of(&config)?.expert_count(&config), Some(8));
    let mut softmax = config;
    softmax["scoring_func"] = json!("softmax");
    let err = declared(&softmax).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("scoring_func `softmax`")));
    Ok(())
}

#[test]
fn minimax_declares_all_head_norms_partial_rope_and_normalized_sigmoid_experts() -> Result<()> {
    let config = tiny(
        "minimax",
        json!({"head_dim": 32, "rotary_dim": 16, "intermediate_size": 32,
            "num_local_experts": 8, "num_experts_per_tok": 2, "use_qk_norm": true,
            "tie_word_embeddings": false}),
    );
    let (layers, ends) = declared(&config)?;
    let want = LayerShape {
        rope: RopeShape {
            span: RopeSpan::Partial { fraction: 0.5 },
            ..LayerShape::llama(RopeScaling::None).rope
        },
        qk_norm: Some(NormKind::Rms),
        qk_norm_span: QkNormSpan::AllHeads,
        feed_forward: FeedForwardKind::Moe {
            routing: RoutingKind::SigmoidNormalized,
            shared: None,
        },
        ..LayerShape::llama(RopeScaling::None)
    };
    assert_eq!(layers, [want; 2]);
    assert!(!layers.iter().any(layer_node_supports));
    assert_eq!(ends.head, HeadKind::Untied);
    assert_eq!(facts_of(&config)?.expert_count(&config), Some(8));
    let mut alias = config.clone();
    alias["model_type"] = json!("minimax_m2");
    assert_eq!(declared(&alias)?, (layers, ends));
    // A rotary span whose fraction rounds below it in f32 still rotates exactly rotary_dim.
    let odd = tiny(
        "minimax",
        json!({"head_dim": 24, "rotary_dim": 14, "num_local_experts": 8,
            "num_experts_per_tok": 2}),
    );
    let (layers, _) = declared(&odd)?;
    assert_eq!(layers[0].rope.dims(24), 14);
    for (field, value, named) in [
        ("rotary_dim", json!(15), "rotary_dim is 15"),
        ("rotary_dim", json!(64), "rotary_dim is 64"),
        ("scoring_func", json!("softmax"), "scoring_func `softmax`"),
        ("num_experts_per_tok", json!(9), "num_experts_per_tok is 9"),
    ] {
        let mut bad = config.clone();
        bad[field] = value;
        let err = declared(&bad).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains(named)), "{field}");
    }
    Ok(())
}
