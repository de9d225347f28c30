//! The decoder-only transformer every family shares: embedding, a stack of layers (each an
//! attention block and a feed-forward block between RMS norms), final norm and head. Dense
//! families differ only in config; MoE and latent-attention families build their own layers.

use mlx_rs::Array;

use super::layer_node::NodeSlot;
use super::shape::{EndShape, HeadKind, LayerShape, ModelShape, NormPlacement};
use super::{
    Attention, AttentionConfig, Embedding, LatentAttention, Linear, Moe, RankPart, RmsNorm, Rope,
    TensorCut,
};
use crate::cache::{KvCache, KvFormat};
use crate::error::Result;
use crate::models::Transformer;
use crate::weights::{Cut, Weights};

/// Everything a family's config.json decides about the decoder.
pub struct DecoderConfig {
    pub vocab_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub attention: AttentionConfig,
    pub rope: Rope,
    /// What the family declared: each layer's shape and the ends'.
    pub shape: ModelShape,
}

impl DecoderConfig {
    /// The decoder around the layers, and what a dense layer's tensor split must divide.
    pub fn skeleton(&self) -> Skeleton {
        Skeleton {
            vocab_size: self.vocab_size,
            num_hidden_layers: self.num_hidden_layers,
            hidden_size: self.attention.hidden_size,
            rms_norm_eps: self.attention.rms_norm_eps,
            ends: self.shape.ends,
            tensor_counts: vec![
                ("attention heads", self.attention.heads),
                ("KV heads", self.attention.kv_heads),
                ("MLP neurons", self.intermediate_size),
            ],
        }
    }

    /// A dense layer's grouped-query attention at `{prefix}.self_attn`.
    pub fn attention(
        &self,
        w: &mut Weights,
        prefix: &str,
        tensor: &Option<TensorCut>,
    ) -> Result<AttentionBlock> {
        let attention = Attention::load(
            w,
            &format!("{prefix}.self_attn"),
            &self.attention,
            &self.rope,
            tensor,
        )?;
        Ok(AttentionBlock::Standard(attention))
    }
}

/// SwiGLU feed-forward; tensor-parallel, gate/up are cut by output and down by input.
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
    tensor: Option<TensorCut>,
}

impl Mlp {
    /// `{prefix}.{gate,up,down}_proj` for `hidden -> inter -> hidden`.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        (hidden, inter): (i32, i32),
        bias: bool,
        tensor: &Option<TensorCut>,
    ) -> Result<Mlp> {
        let (rows, cols) = (Cut::rows(tensor), Cut::cols(tensor));
        Ok(Mlp {
            gate_proj: Linear::load_split(
                w,
                &format!("{prefix}.gate_proj"),
                hidden,
                inter,
                bias,
                rows,
            )?,
            up_proj: Linear::load_split(
                w,
                &format!("{prefix}.up_proj"),
                hidden,
                inter,
                bias,
                rows,
            )?,
            down_proj: Linear::load_split(
                w,
                &format!("{prefix}.down_proj"),
                inter,
                hidden,
                bias,
                cols,
            )?,
            tensor: tensor.clone(),
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        TensorCut::all_sum(&self.tensor, self.forward_partial(x)?)
    }

    /// This rank's partial output, before the sum over ranks (a MoE block sums its shared
    /// experts with its routed ones).
    pub fn forward_partial(&self, x: &Array) -> Result<Array> {
        let hidden = Linear::swiglu(&self.gate_proj, &self.up_proj, x)?;
        self.down_proj.forward(&hidden)
    }

    /// Whether this rank holds the whole MLP (no tensor cut).
    pub fn is_whole(&self) -> bool {
        self.tensor.is_none()
    }

    pub fn arrays(&self) -> Vec<&Array> {
        [&self.gate_proj, &self.up_proj, &self.down_proj]
            .into_iter()
            .flat_map(Linear::arrays)
            .collect()
    }
}

/// A layer's attention: grouped-query (llama, qwen) or multi-head latent (DeepSeek).
pub enum AttentionBlock {
    Standard(Attention),
    Latent(LatentAttention),
}

impl AttentionBlock {
    fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        match self {
            AttentionBlock::Standard(a) => a.forward(x, caches),
            AttentionBlock::Latent(a) => a.forward(x, caches),
        }
    }

    /// Whether this block can attend over a cache stored in `format`: a quantized side must
    /// be whole groups wide; DeepSeek's latent cache is read by plain matmuls, so it may be
    /// cast but not quantized (mlx-lm's `deepseek_v3` cannot either).
    pub fn check_kv_format(&self, format: &KvFormat) -> std::result::Result<(), String> {
        match self {
            AttentionBlock::Standard(a) => format.check_widths(a.head_dim(), a.head_dim()),
            AttentionBlock::Latent(_) if format.quantizes() => Err(
                "a quantized KV cache is not supported with multi-head latent attention \
                 (DeepSeek, Kimi K2): use cache type f16 or bf16"
                    .into(),
            ),
            AttentionBlock::Latent(_) => Ok(()),
        }
    }

    /// Elements one position adds to this layer's cache on this rank.
    pub fn kv_elements(&self) -> usize {
        match self {
            AttentionBlock::Standard(a) => a.kv_elements(),
            AttentionBlock::Latent(a) => a.kv_elements(),
        }
    }

    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            AttentionBlock::Standard(a) => a.arrays(),
            AttentionBlock::Latent(a) => a.arrays(),
        }
    }
}

/// A layer's feed-forward block: one SwiGLU, or a mixture of experts.
pub enum FeedForward {
    Dense(Mlp),
    Moe(Box<Moe>),
}

impl FeedForward {
    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            FeedForward::Dense(m) => m.forward(x),
            FeedForward::Moe(m) => m.forward(x),
        }
    }

    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            FeedForward::Dense(m) => m.arrays(),
            FeedForward::Moe(m) => m.arrays(),
        }
    }
}

pub struct DecoderLayer {
    pub self_attn: AttentionBlock,
    pub mlp: FeedForward,
    pub input_layernorm: RmsNorm,
    pub post_attention_layernorm: RmsNorm,
    /// What the family declared for this layer: how it runs, and whether a fast path takes it.
    pub shape: LayerShape,
    /// The one-node decode step, made at the first (`layer_node.rs`).
    pub(super) node: NodeSlot,
}

impl DecoderLayer {
    /// A layer of `shape` at `prefix` from its two blocks and the checkpoint's two norms.
    pub fn new(
        w: &mut Weights,
        prefix: &str,
        (hidden, eps): (i32, f32),
        shape: LayerShape,
        (self_attn, mlp): (AttentionBlock, FeedForward),
    ) -> Result<DecoderLayer> {
        shape.check_implemented()?;
        Ok(DecoderLayer {
            shape,
            self_attn,
            mlp,
            input_layernorm: RmsNorm::load(w, &format!("{prefix}.input_layernorm"), hidden, eps)?,
            post_attention_layernorm: RmsNorm::load(
                w,
                &format!("{prefix}.post_attention_layernorm"),
                hidden,
                eps,
            )?,
            node: NodeSlot::default(),
        })
    }

    /// A dense family's layer `index`: grouped-query attention and a SwiGLU.
    fn load_dense(
        w: &mut Weights,
        (prefix, index): (&str, usize),
        c: &DecoderConfig,
        tensor: &Option<TensorCut>,
    ) -> Result<DecoderLayer> {
        let a = &c.attention;
        let shape = c.shape.layer(index)?;
        let attention = c.attention(w, prefix, tensor)?;
        let dims = (a.hidden_size, c.intermediate_size);
        let bias = shape.mlp_bias.present();
        let mlp = Mlp::load(w, &format!("{prefix}.mlp"), dims, bias, tensor)?;
        let norms = (a.hidden_size, a.rms_norm_eps);
        DecoderLayer::new(
            w,
            prefix,
            norms,
            shape,
            (attention, FeedForward::Dense(mlp)),
        )
    }

    fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        if let Some(h) = self.decode_as_one_node(x, caches)? {
            return Ok(h);
        }
        match self.shape.norms.placement {
            NormPlacement::Pre => {
                let normed = self.input_layernorm.forward(x)?;
                let h = x.add(self.self_attn.forward(&normed, caches)?)?;
                let normed = self.post_attention_layernorm.forward(&h)?;
                Ok(h.add(self.mlp.forward(&normed)?)?)
            }
            // Refused at load (`LayerShape::check_implemented`).
            placement => Err(crate::error::Error::Internal(format!(
                "norm placement {placement:?} is not implemented yet"
            ))),
        }
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.self_attn.arrays();
        out.extend(self.mlp.arrays());
        out.extend([
            &self.input_layernorm.weight,
            &self.post_attention_layernorm.weight,
        ]);
        out
    }
}

/// What the decoder around the layers needs: sizes, the head's kind, and the counts tensor
/// parallelism must divide.
pub struct Skeleton {
    pub vocab_size: i32,
    pub num_hidden_layers: i32,
    pub hidden_size: i32,
    pub rms_norm_eps: f32,
    /// The embedding, final norm and head, as the family declared them.
    pub ends: EndShape,
    /// What tensor parallelism cuts (heads, neurons), each named for the error.
    pub tensor_counts: Vec<(&'static str, i32)>,
}

/// Builds layer `index` at `prefix`, cut by the tensor split.
pub type LayerLoader<'a> =
    dyn Fn(&mut Weights, &str, usize, &Option<TensorCut>) -> Result<DecoderLayer> + 'a;

/// The parameters a rank holds, as Status reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WeightStats {
    /// Bytes, as computed with (packed, dequantized or as stored).
    pub bytes: u64,
    /// Packed layers on the portable kernel (no vector kernel for their format here).
    pub portable_layers: usize,
    /// Packed-mode layers dequantized: no packed kernel for their quantization mode.
    pub dequantized_layers: usize,
    /// Layers whose shape the one-node decode layer does not take: they decode op by op.
    pub op_by_op_layers: usize,
}

/// The checkpoint's layout around the layers, written once: the decoder takes these keys and
/// loading (which keys a rank holds) and pipeline planning (bytes per layer) read them.
pub mod keys {
    pub const EMBED: &str = "model.embed_tokens";
    pub const NORM: &str = "model.norm";
    pub const HEAD: &str = "lm_head";
    /// Layer `i` is `{LAYERS}.{i}`.
    pub const LAYERS: &str = "model.layers";

    /// The layer a key belongs to, if it is a layer's.
    pub fn layer_of(key: &str) -> Option<usize> {
        let rest = key.strip_prefix(LAYERS)?.strip_prefix('.')?;
        rest.split('.').next()?.parse().ok()
    }

    /// Whether a key is the embedding's, the final norm's or the head's (rank 0's in a pipeline).
    pub fn is_end(key: &str) -> bool {
        [EMBED, NORM, HEAD]
            .iter()
            .any(|p| key.strip_prefix(p).is_some_and(|r| r.starts_with('.')))
    }
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
    /// Packed layers that run the portable kernel on this CPU (none where a vector kernel
    /// covers the format).
    portable_layers: usize,
    /// Packed-mode layers dequantized (no packed kernel for their quantization mode).
    dequantized_layers: usize,
    /// Layers whose shape the one-node decode layer does not take.
    op_by_op_layers: usize,
}

impl Decoder {
    /// A dense family's decoder (llama, qwen2, qwen3).
    pub fn load(w: &mut Weights, c: DecoderConfig, part: &RankPart) -> Result<Decoder> {
        Decoder::assemble(w, &c.skeleton(), part, &|w, prefix, i, tensor| {
            DecoderLayer::load_dense(w, (prefix, i), &c, tensor)
        })
    }

    /// This rank's part of a decoder whose layers `layer` builds.
    pub fn assemble(
        w: &mut Weights,
        s: &Skeleton,
        part: &RankPart,
        layer: &LayerLoader,
    ) -> Result<Decoder> {
        let hidden = s.hidden_size;
        s.ends.check_implemented()?;
        if let Some(t) = &part.tensor {
            t.check(&s.tensor_counts)?;
        }
        let embed_tokens = match part.ends {
            true => Some(Embedding::load(w, keys::EMBED, s.vocab_size, hidden)?),
            false => None,
        };
        let held: Vec<usize> = (0..s.num_hidden_layers as usize)
            .filter(|i| part.holds_layer(*i))
            .collect();
        // A tensor split reads each rank's parts here, not when they are evaluated: the
        // progress of a long load is shown here then.
        let mut progress = (part.tensor.as_ref())
            .map(|_| crate::progress::Progress::new("reading this rank's part", held.len()));
        let layers = (held.iter().copied())
            .map(|i| {
                let built = layer(w, &format!("{}.{i}", keys::LAYERS), i, &part.tensor);
                progress
                    .iter_mut()
                    .for_each(crate::progress::Progress::tick);
                built
            })
            .collect::<Result<Vec<_>>>()?;
        let (norm, lm_head) = match part.ends {
            true => (
                Some(RmsNorm::load(w, keys::NORM, hidden, s.rms_norm_eps)?),
                Some(match s.ends.head {
                    HeadKind::Tied => Head::Tied,
                    HeadKind::Untied => {
                        Head::LmHead(Linear::load(w, keys::HEAD, hidden, s.vocab_size, false)?)
                    }
                }),
            ),
            false => (None, None),
        };
        let op_by_op_layers = log_op_by_op(&layers, &held);
        Ok(Decoder {
            embed_tokens,
            layers,
            norm,
            lm_head,
            portable_layers: w.portable_layers().len(),
            dequantized_layers: w.dequantized_layers().len(),
            op_by_op_layers,
        })
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

impl Transformer for Decoder {
    fn embed(&self, inputs: &Array) -> Result<Array> {
        self.embed_tokens
            .as_ref()
            .ok_or_else(not_here)?
            .forward(inputs)
    }

    fn run_layers(&self, h: &Array, rows: &mut [&mut [KvCache]]) -> Result<Array> {
        let mut h = h.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let mut caches: Vec<&mut KvCache> = rows.iter_mut().map(|r| &mut r[i]).collect();
            h = layer.forward(&h, &mut caches)?;
        }
        Ok(h)
    }

    fn head(&self, h: &Array) -> Result<Array> {
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

    /// Keys and values are computed in the activations' dtype, which the norms share.
    fn kv_bytes_per_position(&self, format: &KvFormat) -> usize {
        self.layers
            .iter()
            .map(|l| {
                let item_size = l.input_layernorm.weight.item_size();
                format.bytes_per_position(l.self_attn.kv_elements(), item_size)
            })
            .sum()
    }

    fn check_kv_format(&self, format: &KvFormat) -> Result<()> {
        for layer in &self.layers {
            layer
                .self_attn
                .check_kv_format(format)
                .map_err(crate::error::Error::InvalidRequest)?;
        }
        Ok(())
    }

    /// A tied head shares the embedding's bytes.
    fn weight_stats(&self) -> WeightStats {
        WeightStats {
            bytes: self.arrays().iter().map(|a| a.nbytes() as u64).sum(),
            portable_layers: self.portable_layers,
            dequantized_layers: self.dequantized_layers,
            op_by_op_layers: self.op_by_op_layers,
        }
    }

    fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer by layer, with progress: reading (and dequantizing) the weights is what takes time.
    fn materialize(&self) -> Result<()> {
        let mut progress = crate::progress::Progress::new("loading layers", self.layers.len());
        for layer in &self.layers {
            mlx_rs::transforms::eval(layer.arrays())?;
            progress.tick();
        }
        Ok(mlx_rs::transforms::eval(self.arrays())?)
    }
}

/// Names, in the log, the held layers whose shape the one-node decode layer does not take;
/// their count is what Status reports.
fn log_op_by_op(layers: &[DecoderLayer], held: &[usize]) -> usize {
    let op_by_op: Vec<usize> = (held.iter().zip(layers))
        .filter(|(_, l)| !super::layer_node::supports(&l.shape))
        .map(|(i, _)| *i)
        .collect();
    if !op_by_op.is_empty() {
        tracing::info!(
            layers = ?op_by_op,
            "these layers decode op by op: the one-node decode layer does not take their shape"
        );
    }
    op_by_op.len()
}

fn not_here() -> crate::error::Error {
    crate::error::Error::Internal("this rank does not hold the embedding and head".into())
}
