//! The decoder-only transformer that llama, qwen2 and qwen3 share; families differ only in config.

use mlx_rs::nn::silu;
use mlx_rs::Array;

use super::{Attention, AttentionConfig, Embedding, Linear, RmsNorm, Rope};
use crate::cache::KvCache;
use crate::error::Result;
use crate::weights::Weights;

/// Everything a family's config.json decides about the decoder.
pub struct DecoderConfig {
    pub vocab_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub mlp_bias: bool,
    pub tie_word_embeddings: bool,
    pub attention: AttentionConfig,
    pub rope: Rope,
}

/// SwiGLU feed-forward.
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

impl Mlp {
    fn load(w: &mut Weights, prefix: &str, hidden: i32, inter: i32, bias: bool) -> Result<Mlp> {
        Ok(Mlp {
            gate_proj: w.linear(&format!("{prefix}.gate_proj"), hidden, inter, bias)?,
            up_proj: w.linear(&format!("{prefix}.up_proj"), hidden, inter, bias)?,
            down_proj: w.linear(&format!("{prefix}.down_proj"), inter, hidden, bias)?,
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let gate = silu(self.gate_proj.forward(x)?)?;
        self.down_proj
            .forward(&gate.multiply(self.up_proj.forward(x)?)?)
    }
}

pub struct DecoderLayer {
    pub self_attn: Attention,
    pub mlp: Mlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn load(w: &mut Weights, prefix: &str, c: &DecoderConfig) -> Result<DecoderLayer> {
        let (hidden, eps) = (c.attention.hidden_size, c.attention.rms_norm_eps);
        Ok(DecoderLayer {
            self_attn: Attention::load(w, &format!("{prefix}.self_attn"), &c.attention)?,
            mlp: Mlp::load(
                w,
                &format!("{prefix}.mlp"),
                hidden,
                c.intermediate_size,
                c.mlp_bias,
            )?,
            input_layernorm: w.rms_norm(&format!("{prefix}.input_layernorm"), hidden, eps)?,
            post_attention_layernorm: w.rms_norm(
                &format!("{prefix}.post_attention_layernorm"),
                hidden,
                eps,
            )?,
        })
    }

    fn forward(&self, x: &Array, rope: &Rope, cache: &mut KvCache) -> Result<Array> {
        let h = x.add(
            self.self_attn
                .forward(&self.input_layernorm.forward(x)?, rope, cache)?,
        )?;
        Ok(h.add(
            self.mlp
                .forward(&self.post_attention_layernorm.forward(&h)?)?,
        )?)
    }

    fn arrays(&self) -> Vec<&Array> {
        let mlp = [&self.mlp.gate_proj, &self.mlp.up_proj, &self.mlp.down_proj];
        let mut out = self.self_attn.arrays();
        out.extend(mlp.into_iter().flat_map(Linear::arrays));
        out.extend([
            &self.input_layernorm.weight,
            &self.post_attention_layernorm.weight,
        ]);
        out
    }
}

/// Output projection: the tied embedding, or its own `lm_head`.
pub enum Head {
    Tied,
    LmHead(Linear),
}

/// Checkpoint layout: `model.embed_tokens`, `model.layers.N`, `model.norm`, `lm_head`.
pub struct Decoder {
    pub embed_tokens: Embedding,
    pub layers: Vec<DecoderLayer>,
    pub norm: RmsNorm,
    pub lm_head: Head,
    rope: Rope,
}

impl Decoder {
    pub fn load(w: &mut Weights, c: DecoderConfig) -> Result<Decoder> {
        let hidden = c.attention.hidden_size;
        let embed_tokens = w.embedding("model.embed_tokens", c.vocab_size, hidden)?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| DecoderLayer::load(w, &format!("model.layers.{i}"), &c))
            .collect::<Result<Vec<_>>>()?;
        let norm = w.rms_norm("model.norm", hidden, c.attention.rms_norm_eps)?;
        let lm_head = match c.tie_word_embeddings {
            true => Head::Tied,
            false => Head::LmHead(w.linear("lm_head", hidden, c.vocab_size, false)?),
        };
        Ok(Decoder {
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope: c.rope,
        })
    }

    /// Token ids [B, L] to logits [B, L, vocab], extending every layer's cache.
    pub fn forward(&self, inputs: &Array, caches: &mut [KvCache]) -> Result<Array> {
        let mut h = self.embed_tokens.forward(inputs)?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            h = layer.forward(&h, &self.rope, cache)?;
        }
        let h = self.norm.forward(&h)?;
        match &self.lm_head {
            Head::Tied => self.embed_tokens.as_linear(&h),
            Head::LmHead(linear) => linear.forward(&h),
        }
    }

    /// Every parameter, to evaluate once at load.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.embed_tokens.arrays();
        out.extend(self.layers.iter().flat_map(DecoderLayer::arrays));
        out.push(&self.norm.weight);
        if let Head::LmHead(l) = &self.lm_head {
            out.extend(l.arrays());
        }
        out
    }
}
