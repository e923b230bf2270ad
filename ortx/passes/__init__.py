"""Graph passes over onnx_ir models, each `verb_object(model, *, options) -> PassReport`, in place.

DEFAULT_PASSES is the order `optimize` and the pipeline run them in; it keeps the model standard ONNX that plain
onnxruntime runs. fuse_conv_epilogue (ai.ortx FusedConv) is not here: OrtxEP runs it when it compiles.
"""
from ortx.passes._report import PassError, PassReport, run_passes
from ortx.passes.eliminate_dead_code import eliminate_dead_code
from ortx.passes.fold_constants import fold_constants
from ortx.passes.fuse_conv_batchnorm import fuse_conv_batchnorm

DEFAULT_PASSES = (
    # First: lifts Constant nodes and folds constant subgraphs, so later passes see weights as initializers.
    fold_constants,
    # Second: removes what folding orphaned, and Identity/Dropout that would hide a Conv -> BatchNormalization
    # pair from the fusion.
    eliminate_dead_code,
    # Last: needs constant initializers for W, B and the BN parameters (made so by fold_constants).
    fuse_conv_batchnorm,
)

__all__ = ["DEFAULT_PASSES", "PassError", "PassReport", "run_passes", "fold_constants", "eliminate_dead_code",
           "fuse_conv_batchnorm"]
