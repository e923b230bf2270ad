"""Graph passes over onnx_ir models, each `verb_object(model, *, options) -> PassReport`, in place.

The levels are literal tuples, like a compiler's -O flags:
  LEVEL_1_PASSES  standard cleanup that changes no arithmetic: shapes, folding, dead code
  LEVEL_2_PASSES  adds fusions that still emit standard ONNX ops (plain onnxruntime runs the result)
  LEVEL_3_PASSES  adds non-standard ops: ai.ortx ops that only OrtxEP runs (FusedConv, ScaledDotProductAttention)
                  and onnxruntime contrib ops (com.microsoft Gelu, FastGelu, QuickGelu) that both run
DEFAULT_PASSES is level 2, what `optimize` runs by default; SESSION_PASSES, what the pipeline runs before OrtxEP
compiles, adds materialize_constants (tensors a file need not hold but kernels need as constants). The pipeline
applies fuse_conv_epilogue itself, after it knows which nodes OrtxEP claims.
"""
from ortx.passes._report import PassError, PassReport, run_passes
from ortx.passes.fuse_attention import fuse_attention, fuse_attention_extended
from ortx.passes.eliminate_common_subexpressions import eliminate_common_subexpressions
from ortx.passes.eliminate_dead_code import eliminate_dead_code
from ortx.passes.fold_constants import fold_constants
from ortx.passes.fold_reshapes import fold_reshapes
from ortx.passes.fold_slice_squeezes import fold_slice_squeezes
from ortx.passes.flush_denormal_weights import flush_denormal_weights
from ortx.passes.fuse_conv_batchnorm import fuse_conv_batchnorm
from ortx.passes.fuse_conv_epilogue import fuse_conv_epilogue
from ortx.passes.fuse_elementwise_chains import fuse_elementwise_chains
from ortx.passes.fuse_gelu import fuse_gelu, fuse_gelu_extended
from ortx.passes.fuse_gemm import fuse_gemm
from ortx.passes.fuse_hardswish import fuse_hardswish
from ortx.passes.fuse_input_affine import fuse_input_affine
from ortx.passes.fuse_layer_normalization import fuse_layer_normalization
from ortx.passes.fuse_pad import fuse_pad
from ortx.passes.fuse_reduce_sum_square import fuse_reduce_sum_square
from ortx.passes.fuse_sibling_matmuls import fuse_sibling_matmuls
from ortx.passes.fuse_silu import fuse_silu, fuse_silu_extended
from ortx.passes.infer_shapes import infer_shapes
from ortx.passes.materialize_constants import materialize_constants
from ortx.passes.remove_no_ops import remove_no_ops
from ortx.passes.replace_sum_with_add import replace_sum_with_add
from ortx.passes.share_initializers import share_initializers
from ortx.passes.upgrade_opset import upgrade_opset

LEVEL_1_PASSES = (
    # First: shapes let folding evaluate Shape/Size of static tensors and let the no-op checks compare shapes.
    infer_shapes,
    # Lifts Constant nodes and folds constant subgraphs, so later passes see weights as initializers.
    fold_constants,
    # Removes what folding orphaned, and Identity/Dropout that would hide a Conv -> BatchNormalization pair.
    eliminate_dead_code,
    # Old opsets' residual Sum as Add, which the fusions (level 2, the pipeline's Conv epilogues) match.
    replace_sum_with_add,
    # Needs the shapes and constants above: a Reshape/Slice/Expand is a no-op only against a static input shape.
    remove_no_ops,
    # After remove_no_ops, so a no-op link does not count as a chain member that must be kept.
    fold_reshapes,
    fold_slice_squeezes,
    # Before CSE: CSE only merges nodes whose inputs are the same values, and equal weights become one value here.
    share_initializers,
    eliminate_common_subexpressions,
)

LEVEL_2_PASSES = (
    # Before the cleanup: the opset converter emits Constants and shape ops that the cleanup then folds.
    upgrade_opset,
) + LEVEL_1_PASSES + (
    # The fusions need constant initializers for weights and parameters (made so by fold_constants).
    fuse_conv_batchnorm,
    # After fuse_conv_batchnorm, which folds an affine into the Conv before it (always exact); what is left is
    # an affine after an activation, folded forward into the next Conv's weights where that Conv does not pad.
    fuse_input_affine,
    # Needs the static normalised dims infer_shapes found (and, for opset < 17 models, upgrade_opset).
    fuse_layer_normalization,
    fuse_gemm,
    # After fuse_gemm, which takes 2-D MatMul + Add as Gemm first; merges attention's Q/K/V projections.
    fuse_sibling_matmuls,
    fuse_pad,
    # Needs constant axes and exponents (fold_constants): a square then ReduceSum becomes one ReduceSumSquare.
    fuse_reduce_sum_square,
    # Activations: standard ops that fuse_conv_epilogue (level 3) then takes into FusedConv as its activation.
    fuse_hardswish,
    fuse_gelu,
    # After fuse_hardswish: x * HardSigmoid(x) is HardSwish's, not SiLU's (this pass matches only Sigmoid).
    fuse_silu,
    # Standard Attention at opset >= 23 only; after fold_reshapes/remove_no_ops, which leave Q/K/V's own shape ops.
    fuse_attention,
    # After the fusions that compute new weights (a BatchNormalization's scale folded into tiny weights can make
    # subnormals); changes a product by less than float32's smallest normal, so it is level 2, not level 1.
    flush_denormal_weights,
    # Last: drops the weights and parameters the fusions replaced.
    eliminate_dead_code,
)

LEVEL_3_PASSES = LEVEL_2_PASSES + (
    # Below opset 20 / 24 (no Gelu / Swish): com.microsoft Gelu, FastGelu and QuickGelu.
    fuse_gelu_extended,
    fuse_silu_extended,
    # Where level 2 emitted no standard Attention: ai.ortx ScaledDotProductAttention.
    fuse_attention_extended,
    # Last: the epilogue fusion needs BN already folded, or Conv -> BN -> Relu would not match Conv -> Relu.
    # (fuse_elementwise_chains is not in the levels: see ortx.pipeline.ELEMENTWISE_CHAINS.)
    fuse_conv_epilogue,
)

DEFAULT_PASSES = LEVEL_2_PASSES

# Level 2 with materialize_constants right after fold_constants, which makes the shapes it needs constant, and
# before the fusions that need constant weights (fuse_conv_batchnorm).
_FOLD = LEVEL_2_PASSES.index(fold_constants) + 1
SESSION_PASSES = LEVEL_2_PASSES[:_FOLD] + (materialize_constants,) + LEVEL_2_PASSES[_FOLD:]

LEVELS = {0: (), 1: LEVEL_1_PASSES, 2: LEVEL_2_PASSES, 3: LEVEL_3_PASSES}

__all__ = ["DEFAULT_PASSES", "SESSION_PASSES", "LEVELS", "LEVEL_1_PASSES", "LEVEL_2_PASSES", "LEVEL_3_PASSES",
           "PassError", "PassReport", "eliminate_common_subexpressions", "eliminate_dead_code", "fold_constants",
           "fold_reshapes", "fold_slice_squeezes", "flush_denormal_weights", "fuse_attention",
           "fuse_attention_extended", "fuse_conv_batchnorm", "fuse_conv_epilogue", "fuse_elementwise_chains",
           "fuse_gelu", "fuse_gelu_extended", "fuse_gemm", "fuse_hardswish", "fuse_layer_normalization", "fuse_pad",
           "fuse_sibling_matmuls", "fuse_silu", "fuse_silu_extended", "infer_shapes", "materialize_constants",
           "remove_no_ops", "replace_sum_with_add", "run_passes", "share_initializers", "upgrade_opset"]
