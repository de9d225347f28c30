//! The decoder-only transformer every family shares: embedding, a stack of layers (each an
//! attention block and a feed-forward block between RMS norms), final norm and head. Dense
//! families differ only in config; MoE and latent-attention families build their own layers.

use mlx_rs::Array;

use super::layer_node::NodeSlot;
use super::shape::{
    Activation, AttentionSpan, EmbedScale, EndShape, HeadKind, LayerShape, ModelShape,
    NormPlacement,
};
use super::{
    Attention, AttentionConfig, Embedding, GatedDeltaNet, LatentAttention, Linear, Moe, RankPart,
    RmsNorm, Rope, SparseLatentAttention, TensorCut,
};
use crate::cache::{CacheKind, KvCache, KvFormat, LayerCache, RecurrentState};
use crate::error::Result;
use crate::models::Transformer;
use crate::weights::{Cut, WeightMode, Weights};

/// Everything a family's config.json decides about the decoder.
pub struct DecoderConfig {
    pub vocab_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub attention: AttentionConfig,
    pub rope: Rope,
    /// Sliding layers' rope, where they have their own base (Gemma 3's local base).
    pub window_rope: Option<Rope>,
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
            windows: self.shape.windows(),
            tensor_counts: vec![
                ("attention heads", self.attention.heads),
                ("KV heads", self.attention.kv_heads),
                ("MLP neurons", self.intermediate_size),
            ],
        }
    }

    /// A dense layer's grouped-query attention at `{prefix}.self_attn`, for a layer of
    /// `shape` (a sliding layer takes its own rope where its family gives it one).
    pub fn attention(
        &self,
        w: &mut Weights,
        (prefix, shape): (&str, &LayerShape),
        tensor: &Option<TensorCut>,
    ) -> Result<AttentionBlock> {
        let rope = match (shape.span, &self.window_rope) {
            (AttentionSpan::Sliding { .. }, Some(rope)) => rope,
            _ => &self.rope,
        };
        let prefix = format!("{prefix}.self_attn");
        let attention = Attention::load(w, (&prefix, shape), &self.attention, rope, tensor)?;
        Ok(AttentionBlock::Standard(attention))
    }
}

/// Gated feed-forward (SwiGLU or GeGLU); tensor-parallel, gate/up are cut by output and down
/// by input.
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
    pub activation: Activation,
    tensor: Option<TensorCut>,
}

impl Mlp {
    /// `{prefix}.{gate,up,down}_proj` for `hidden -> inter -> hidden`, SwiGLU.
    pub fn load(
        w: &mut Weights,
        prefix: &str,
        dims: (i32, i32),
        bias: bool,
        tensor: &Option<TensorCut>,
    ) -> Result<Mlp> {
        Mlp::load_gated(w, prefix, (dims, Activation::SwiGlu), bias, tensor)
    }

    /// `{prefix}.{gate,up,down}_proj` for `hidden -> inter -> hidden`, gated by `activation`.
    pub fn load_gated(
        w: &mut Weights,
        prefix: &str,
        ((hidden, inter), activation): ((i32, i32), Activation),
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
            activation,
            tensor: tensor.clone(),
        })
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        TensorCut::all_sum(&self.tensor, self.forward_partial(x)?)
    }

    /// This rank's partial output, before the sum over ranks (a MoE block sums its shared
    /// experts with its routed ones).
    pub fn forward_partial(&self, x: &Array) -> Result<Array> {
        let hidden = match self.activation {
            Activation::SwiGlu => Linear::swiglu(&self.gate_proj, &self.up_proj, x)?,
            Activation::GeGluTanh => {
                super::layers::geglu_tanh(&self.gate_proj.forward(x)?, &self.up_proj.forward(x)?)?
            }
            Activation::ClampedSwiGlu => super::layers::clamped_swiglu(
                &self.gate_proj.forward(x)?,
                &self.up_proj.forward(x)?,
            )?,
        };
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

/// A layer's attention: grouped-query (llama, qwen), multi-head latent (DeepSeek), or
/// Gated DeltaNet's linear attention (Qwen3-Next, Qwen3.5).
pub enum AttentionBlock {
    Standard(Attention),
    Latent(LatentAttention),
    /// Latent attention over the keys its indexer picks (DeepSeek Sparse Attention; boxed:
    /// the enum stays small).
    SparseLatent(Box<SparseLatentAttention>),
    GatedDelta(Box<GatedDeltaNet>),
}

/// Each row's keys and values, for an attention block.
pub(super) fn kv_caches<'a>(caches: &'a mut [&mut LayerCache]) -> Result<Vec<&'a mut KvCache>> {
    caches.iter_mut().map(|c| c.kv()).collect()
}

/// Each row's recurrent state, for a linear-attention block.
fn recurrent_states<'a>(caches: &'a mut [&mut LayerCache]) -> Result<Vec<&'a mut RecurrentState>> {
    caches.iter_mut().map(|c| c.recurrent()).collect()
}

impl AttentionBlock {
    fn forward(&self, x: &Array, caches: &mut [&mut LayerCache]) -> Result<Array> {
        match self {
            AttentionBlock::Standard(a) => a.forward(x, &mut kv_caches(caches)?),
            AttentionBlock::Latent(a) => a.forward(x, &mut kv_caches(caches)?),
            AttentionBlock::SparseLatent(a) => a.forward(x, &mut kv_caches(caches)?),
            AttentionBlock::GatedDelta(g) => g.forward(x, &mut recurrent_states(caches)?),
        }
    }

    /// The kind of cache this block keeps.
    pub fn cache_kind(&self, window: Option<i32>) -> CacheKind {
        match self {
            AttentionBlock::GatedDelta(_) => CacheKind::Recurrent,
            _ => CacheKind::Kv { window },
        }
    }

    /// Whether this block can attend over a cache stored in `format`: a quantized side must
    /// be whole groups wide; DeepSeek's latent cache is read by plain matmuls, so it may be
    /// cast but not quantized (mlx-lm's `deepseek_v3` cannot either).
    pub fn check_kv_format(&self, format: &KvFormat) -> std::result::Result<(), String> {
        match self {
            AttentionBlock::Standard(a) if a.has_sinks() && format.quantizes() => Err(
                "a quantized KV cache is not supported with attention sinks (gpt-oss; mlx-lm's \
                 quantized attention cannot take them either): use cache type f16 or bf16"
                    .into(),
            ),
            AttentionBlock::Standard(a) => format.check_widths(a.head_dim(), a.head_dim()),
            AttentionBlock::Latent(_) if format.quantizes() => Err(
                "a quantized KV cache is not supported with multi-head latent attention \
                 (DeepSeek, Kimi K2): use cache type f16 or bf16"
                    .into(),
            ),
            AttentionBlock::Latent(_) | AttentionBlock::GatedDelta(_) => Ok(()),
            // The indexer's keys decide which keys attend: quantized, they would pick others.
            AttentionBlock::SparseLatent(_) if format.quantizes() => Err(
                "a quantized KV cache is not supported with sparse latent attention \
                 (DeepSeek-V3.2, GLM-5): its indexer picks keys by their exact scores; use \
                 cache type f16 or bf16"
                    .into(),
            ),
            AttentionBlock::SparseLatent(_) => Ok(()),
        }
    }

    /// Elements one position adds to this layer's cache on this rank.
    pub fn kv_elements(&self) -> usize {
        match self {
            AttentionBlock::Standard(a) => a.kv_elements(),
            AttentionBlock::Latent(a) => a.kv_elements(),
            AttentionBlock::SparseLatent(a) => a.kv_elements(),
            AttentionBlock::GatedDelta(_) => 0,
        }
    }

    /// Bytes a sequence of `positions` keeps in this block's state whatever its length (a
    /// linear-attention block's, with a checkpoint every `CHECKPOINT_EVERY` positions).
    pub fn state_bytes(&self, positions: usize) -> usize {
        match self {
            AttentionBlock::GatedDelta(g) => {
                let every = crate::cache::CHECKPOINT_EVERY as usize;
                g.state_bytes() * (1 + positions / every)
            }
            _ => 0,
        }
    }

    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            AttentionBlock::Standard(a) => a.arrays(),
            AttentionBlock::Latent(a) => a.arrays(),
            AttentionBlock::SparseLatent(a) => a.arrays(),
            AttentionBlock::GatedDelta(g) => g.arrays(),
        }
    }
}

/// A layer's feed-forward block: one gated MLP, or a mixture of experts.
// Most layers are dense: the mixture is the boxed one, not the common case.
#[allow(clippy::large_enum_variant)]
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
    /// The norm before attention.
    pub input_layernorm: RmsNorm,
    /// The norm before the MLP (llama's name for it).
    pub post_attention_layernorm: RmsNorm,
    /// A sandwich layer's norms after attention and after the MLP.
    pub after: Option<[RmsNorm; 2]>,
    /// What the family declared for this layer: how it runs, and whether a fast path takes it.
    pub shape: LayerShape,
    /// The one-node decode step, made at the first (`layer_node.rs`).
    pub(super) node: NodeSlot,
}

impl DecoderLayer {
    /// A layer of `shape` at `prefix` from its two blocks and the checkpoint's norms (two
    /// before the blocks, or four around them, as the shape places them).
    pub fn new(
        w: &mut Weights,
        prefix: &str,
        (hidden, eps): (i32, f32),
        shape: LayerShape,
        (self_attn, mlp): (AttentionBlock, FeedForward),
    ) -> Result<DecoderLayer> {
        shape.check_implemented()?;
        let kind = shape.norms.kind;
        let mut norm =
            |name: &str| RmsNorm::load_kind(w, &format!("{prefix}.{name}"), (hidden, eps), kind);
        let (input, before_mlp, after) = match shape.norms.placement {
            NormPlacement::Pre => (
                norm("input_layernorm")?,
                norm("post_attention_layernorm")?,
                None,
            ),
            NormPlacement::Sandwich(keys) => {
                let [pre_attn, post_attn, pre_mlp, post_mlp] = keys.names();
                let (input, after_attn) = (norm(pre_attn)?, norm(post_attn)?);
                let (before_mlp, after_mlp) = (norm(pre_mlp)?, norm(post_mlp)?);
                (input, before_mlp, Some([after_attn, after_mlp]))
            }
            NormPlacement::Post => {
                return Err(crate::error::Error::Config(
                    "norm placement Post is not implemented yet".into(),
                ))
            }
        };
        Ok(DecoderLayer {
            shape,
            self_attn,
            mlp,
            input_layernorm: input,
            post_attention_layernorm: before_mlp,
            after,
            node: NodeSlot::default(),
        })
    }

    /// A dense family's layer `index`: grouped-query attention and a gated MLP.
    fn load_dense(
        w: &mut Weights,
        (prefix, index): (&str, usize),
        c: &DecoderConfig,
        tensor: &Option<TensorCut>,
    ) -> Result<DecoderLayer> {
        let a = &c.attention;
        let shape = c.shape.layer(index)?;
        let attention = c.attention(w, (prefix, &shape), tensor)?;
        let dims = ((a.hidden_size, c.intermediate_size), shape.activation);
        let bias = shape.mlp_bias.present();
        let mlp = Mlp::load_gated(w, &format!("{prefix}.mlp"), dims, bias, tensor)?;
        let norms = (a.hidden_size, a.rms_norm_eps);
        DecoderLayer::new(
            w,
            prefix,
            norms,
            shape,
            (attention, FeedForward::Dense(mlp)),
        )
    }

    fn forward(&self, x: &Array, caches: &mut [&mut LayerCache]) -> Result<Array> {
        if let Some(h) = self.decode_as_one_node(x, caches)? {
            return Ok(h);
        }
        let attended = self
            .self_attn
            .forward(&self.input_layernorm.forward(x)?, caches)?;
        let h = x.add(after(&self.after, 0, attended)?)?;
        let fed = self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&h)?)?;
        Ok(h.add(after(&self.after, 1, fed)?)?)
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.self_attn.arrays();
        out.extend(self.mlp.arrays());
        out.extend([
            &self.input_layernorm.weight,
            &self.post_attention_layernorm.weight,
        ]);
        out.extend(self.after.iter().flatten().map(|n| &n.weight));
        out
    }
}

/// A block's output through a sandwich layer's norm after it (`i`: 0 attention, 1 MLP), or as
/// it is in a pre-norm layer.
fn after(norms: &Option<[RmsNorm; 2]>, i: usize, out: Array) -> Result<Array> {
    match norms {
        Some(norms) => norms[i].forward(&out),
        None => Ok(out),
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
    /// The windows of the whole model's sliding layers (`ModelShape::windows`).
    pub windows: Vec<i32>,
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
    /// Layers whose shape the one-node decode layer does not take: they decode op by op.
    pub op_by_op_layers: usize,
    /// Whether packed products run with int8 activations (`cpu_numerics:int8`).
    pub int8: bool,
    /// Packed layers `cpu_numerics:int8` leaves exact (no integer kernel for their format).
    pub exact_under_int8: usize,
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
    /// Layers whose shape the one-node decode layer does not take.
    op_by_op_layers: usize,
    /// `cpu_numerics:int8`, and the packed layers it leaves exact.
    int8: (bool, usize),
    /// The embedding's output scale (Gemma's √hidden, rounded to bf16), if any.
    embed_scale: Option<f32>,
    /// The windows of the whole model's sliding layers, whichever rank holds them.
    model_windows: Vec<i32>,
}

impl Decoder {
    /// A dense family's decoder (llama, qwen2, qwen3).
    pub fn load(w: &mut Weights, c: DecoderConfig, part: &RankPart) -> Result<Decoder> {
        Decoder::assemble(w, &c.skeleton(), part, &|w, prefix, i, tensor| {
            DecoderLayer::load_dense(w, (prefix, i), &c, tensor)
        })
    }

    /// The final norm and the head (rank 0's in a pipeline).
    fn load_head(w: &mut Weights, s: &Skeleton) -> Result<(RmsNorm, Head)> {
        let hidden = s.hidden_size;
        let norm = (hidden, s.rms_norm_eps);
        let norm = RmsNorm::load_kind(w, keys::NORM, norm, s.ends.final_norm)?;
        let head = match s.ends.head {
            HeadKind::Tied => Head::Tied,
            HeadKind::Untied => {
                Head::LmHead(Linear::load(w, keys::HEAD, hidden, s.vocab_size, false)?)
            }
        };
        Ok((norm, head))
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
            true => Self::load_head(w, s).map(|(n, h)| (Some(n), Some(h)))?,
            false => (None, None),
        };
        let op_by_op_layers = log_op_by_op(&layers, &held);
        Ok(Decoder {
            embed_tokens,
            layers,
            norm,
            lm_head,
            portable_layers: w.portable_layers().len(),
            op_by_op_layers,
            int8: (
                w.mode() == WeightMode::PackedInt8,
                w.exact_under_int8().len(),
            ),
            embed_scale: embed_scale(s.ends.embed_scale, hidden),
            model_windows: s.windows.clone(),
        })
    }

    /// Every parameter, to evaluate once at load.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out: Vec<&Array> = self.layers.iter().flat_map(DecoderLayer::arrays).collect();
        out.extend(self.end_arrays());
        out
    }

    /// The parameters outside the layers: the embedding, the final norm and the head.
    fn end_arrays(&self) -> Vec<&Array> {
        let mut out: Vec<&Array> = self
            .embed_tokens
            .iter()
            .flat_map(Embedding::arrays)
            .collect();
        out.extend(self.norm.iter().map(|n| &n.weight));
        if let Some(Head::LmHead(l)) = &self.lm_head {
            out.extend(l.arrays());
        }
        out
    }
}

impl Transformer for Decoder {
    fn embed(&self, inputs: &Array) -> Result<Array> {
        let h = self
            .embed_tokens
            .as_ref()
            .ok_or_else(not_here)?
            .forward(inputs)?;
        match self.embed_scale {
            None => Ok(h),
            Some(scale) => {
                let scale = Array::from_f32(scale).as_dtype(mlx_rs::Dtype::Bfloat16)?;
                Ok(h.multiply(scale.as_dtype(h.dtype())?)?)
            }
        }
    }

    fn run_layers(&self, h: &Array, rows: &mut [&mut [LayerCache]]) -> Result<Array> {
        let mut h = h.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let mut caches: Vec<&mut LayerCache> = rows.iter_mut().map(|r| &mut r[i]).collect();
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

    /// A sliding layer holds at most its window's capacity, however long the sequence.
    fn kv_bytes(&self, format: &KvFormat, positions: usize, chunk: usize) -> usize {
        self.layers
            .iter()
            .map(|l| {
                let held = match l.shape.window() {
                    Some(w) => positions.min(crate::cache::window_capacity(w, chunk)),
                    None => positions,
                };
                let item_size = l.input_layernorm.weight.item_size();
                held * format.bytes_per_position(l.self_attn.kv_elements(), item_size)
                    + l.self_attn.state_bytes(positions)
            })
            .sum()
    }

    fn layer_caches(&self) -> Vec<CacheKind> {
        (self.layers.iter())
            .map(|l| l.self_attn.cache_kind(l.shape.window()))
            .collect()
    }

    fn model_windows(&self) -> Vec<i32> {
        self.model_windows.clone()
    }

    fn check_kv_format(&self, format: &KvFormat) -> Result<()> {
        for layer in &self.layers {
            if layer.shape.window().is_some() && format.quantizes() {
                return Err(crate::error::Error::InvalidRequest(
                    "a quantized KV cache is not supported with sliding-window attention \
                     (mlx-lm's rotating cache cannot quantize either): use cache type f16 \
                     or bf16"
                        .into(),
                ));
            }
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
            op_by_op_layers: self.op_by_op_layers,
            int8: self.int8.0,
            exact_under_int8: self.int8.1,
        }
    }

    fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer by layer, with progress: reading (and dequantizing) the weights is what takes time.
    fn materialize(&self) -> Result<()> {
        let mut progress = crate::progress::Progress::new("loading layers", self.layers.len());
        let evaluated = |arrays: Vec<&Array>| -> Result<()> {
            mlx_rs::transforms::eval(arrays.iter().copied())?;
            arrays
                .into_iter()
                .try_for_each(crate::memory::on_huge_pages)
        };
        for layer in &self.layers {
            evaluated(layer.arrays())?;
            progress.tick();
        }
        evaluated(self.end_arrays())
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

/// The embedding's scale for `scale` at `hidden` wide (rounded to bf16 when applied).
fn embed_scale(scale: EmbedScale, hidden: i32) -> Option<f32> {
    match scale {
        EmbedScale::None => None,
        EmbedScale::SqrtHidden => Some(f64::from(hidden).sqrt() as f32),
    }
}

fn not_here() -> crate::error::Error {
    crate::error::Error::Internal("this rank does not hold the embedding and head".into())
}
