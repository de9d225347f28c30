//! The decoder-only transformer that llama, qwen2 and qwen3 share; families differ only in config.

use mlx_rs::nn::silu;
use mlx_rs::Array;

use super::{
    Attention, AttentionConfig, Embedding, Linear, RmsNorm, Rope, ShardPlan, Split, TensorSplit,
};
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

/// SwiGLU feed-forward; tensor-parallel, gate/up are cut by output and down by input.
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
    tensor: Option<TensorSplit>,
}

impl Mlp {
    fn load(
        w: &mut Weights,
        prefix: &str,
        c: &DecoderConfig,
        tensor: &Option<TensorSplit>,
    ) -> Result<Mlp> {
        let (hidden, inter, bias) = (c.attention.hidden_size, c.intermediate_size, c.mlp_bias);
        let (rows, cols) = (Split::rows(tensor), Split::cols(tensor));
        Ok(Mlp {
            gate_proj: w.linear_split(&format!("{prefix}.gate_proj"), hidden, inter, bias, rows)?,
            up_proj: w.linear_split(&format!("{prefix}.up_proj"), hidden, inter, bias, rows)?,
            down_proj: w.linear_split(&format!("{prefix}.down_proj"), inter, hidden, bias, cols)?,
            tensor: tensor.clone(),
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        let gate = silu(self.gate_proj.forward(x)?)?;
        let out = self
            .down_proj
            .forward(&gate.multiply(self.up_proj.forward(x)?)?)?;
        TensorSplit::all_sum(&self.tensor, out)
    }
}

pub struct DecoderLayer {
    pub self_attn: Attention,
    pub mlp: Mlp,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
}

impl DecoderLayer {
    fn load(
        w: &mut Weights,
        prefix: &str,
        c: &DecoderConfig,
        tensor: &Option<TensorSplit>,
    ) -> Result<DecoderLayer> {
        let (hidden, eps) = (c.attention.hidden_size, c.attention.rms_norm_eps);
        Ok(DecoderLayer {
            self_attn: Attention::load(w, &format!("{prefix}.self_attn"), &c.attention, tensor)?,
            mlp: Mlp::load(w, &format!("{prefix}.mlp"), c, tensor)?,
            input_layernorm: w.rms_norm(&format!("{prefix}.input_layernorm"), hidden, eps)?,
            post_attention_layernorm: w.rms_norm(
                &format!("{prefix}.post_attention_layernorm"),
                hidden,
                eps,
            )?,
        })
    }

    fn forward(&self, x: &Array, rope: &Rope, caches: &mut [&mut KvCache]) -> Result<Array> {
        let h = x.add(self.self_attn.forward(
            &self.input_layernorm.forward(x)?,
            rope,
            caches,
        )?)?;
        Ok(h.add(
            self.mlp
                .forward(&self.post_attention_layernorm.forward(&h)?)?,
        )?)
    }

    pub fn arrays(&self) -> Vec<&Array> {
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

/// The parameters a rank holds, as Status reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightStats {
    /// Bytes, as computed with (packed, dequantized or as stored).
    pub bytes: u64,
    /// Packed layers on the portable kernel (no vector kernel for their format here).
    pub portable_layers: usize,
}

/// Output projection: the tied embedding, or its own `lm_head`.
pub enum Head {
    Tied,
    LmHead(Linear),
}

/// Checkpoint layout: `model.embed_tokens`, `model.layers.N`, `model.norm`, `lm_head`.
/// A pipeline rank holds only its layers; the embedding, norm and head live on rank 0.
pub struct Decoder {
    pub embed_tokens: Option<Embedding>,
    pub layers: Vec<DecoderLayer>,
    pub norm: Option<RmsNorm>,
    pub lm_head: Option<Head>,
    rope: Rope,
    /// Packed layers that run the portable kernel on this CPU (none where a vector kernel
    /// covers the format).
    portable_layers: usize,
}

impl Decoder {
    pub fn load(w: &mut Weights, c: DecoderConfig, plan: &ShardPlan) -> Result<Decoder> {
        let hidden = c.attention.hidden_size;
        if let Some(t) = &plan.tensor {
            t.check(&[
                ("attention heads", c.attention.heads),
                ("KV heads", c.attention.kv_heads),
                ("MLP neurons", c.intermediate_size),
            ])?;
        }
        let embed_tokens = match plan.ends {
            true => Some(w.embedding("model.embed_tokens", c.vocab_size, hidden)?),
            false => None,
        };
        let layers = (0..c.num_hidden_layers as usize)
            .filter(|i| plan.holds_layer(*i))
            .map(|i| DecoderLayer::load(w, &format!("model.layers.{i}"), &c, &plan.tensor))
            .collect::<Result<Vec<_>>>()?;
        let (norm, lm_head) = match plan.ends {
            true => (
                Some(w.rms_norm("model.norm", hidden, c.attention.rms_norm_eps)?),
                Some(match c.tie_word_embeddings {
                    true => Head::Tied,
                    false => Head::LmHead(w.linear("lm_head", hidden, c.vocab_size, false)?),
                }),
            ),
            false => (None, None),
        };
        Ok(Decoder {
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope: c.rope,
            portable_layers: w.portable_layers().len(),
        })
    }

    /// Token ids [B, L] to logits [B, L, vocab]; row b extends `rows[b]` (one cache per layer).
    pub fn forward(&self, inputs: &Array, rows: &mut [&mut [KvCache]]) -> Result<Array> {
        let h = self.embed(inputs)?;
        let h = self.run_layers(&h, rows)?;
        self.head(&h)
    }

    /// Token ids to the first layer's input (rank 0 only).
    pub fn embed(&self, inputs: &Array) -> Result<Array> {
        self.embed_tokens
            .as_ref()
            .ok_or_else(not_here)?
            .forward(inputs)
    }

    /// This rank's layers over `h` ([B, L, hidden]), extending each row's caches.
    pub fn run_layers(&self, h: &Array, rows: &mut [&mut [KvCache]]) -> Result<Array> {
        let mut h = h.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let mut caches: Vec<&mut KvCache> = rows.iter_mut().map(|r| &mut r[i]).collect();
            h = layer.forward(&h, &self.rope, &mut caches)?;
        }
        Ok(h)
    }

    /// The last layer's output to logits (rank 0 only).
    pub fn head(&self, h: &Array) -> Result<Array> {
        let h = self.norm.as_ref().ok_or_else(not_here)?.forward(h)?;
        match self.lm_head.as_ref().ok_or_else(not_here)? {
            Head::Tied => self
                .embed_tokens
                .as_ref()
                .ok_or_else(not_here)?
                .as_linear(&h),
            Head::LmHead(linear) => linear.forward(&h),
        }
    }

    /// Bytes of keys and values one position takes in this rank's layers (they are kept in
    /// the activations' dtype, which the norms share).
    pub fn kv_bytes_per_position(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.self_attn.kv_elements() * l.input_layernorm.weight.item_size())
            .sum()
    }

    /// What this rank's parameters take (a tied head shares the embedding's bytes).
    pub fn weight_stats(&self) -> WeightStats {
        WeightStats {
            bytes: self.arrays().iter().map(|a| a.nbytes() as u64).sum(),
            portable_layers: self.portable_layers,
        }
    }

    /// Every parameter, to evaluate once at load.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out: Vec<&Array> = self
            .embed_tokens
            .iter()
            .flat_map(Embedding::arrays)
            .collect();
        out.extend(self.layers.iter().flat_map(DecoderLayer::arrays));
        out.extend(self.norm.iter().map(|n| &n.weight));
        if let Some(Head::LmHead(l)) = &self.lm_head {
            out.extend(l.arrays());
        }
        out
    }
}

fn not_here() -> crate::error::Error {
    crate::error::Error::Internal("this rank does not hold the embedding and head".into())
}
