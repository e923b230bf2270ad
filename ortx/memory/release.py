"""Between compile stages, hand the memory a stage freed back to the OS, so the next stage does not add to the peak RSS.

1. Cycle collection: onnx_ir graphs are reference cycles (node <-> value <-> graph), so a graph a stage dropped (a
   clone, the model onnx_ir's shape inference deserializes to merge shapes, the graph upgrade_opset replaced), with
   the tensors only it held, stays allocated until a full collection, which a process that imported onnx, onnx_ir
   and onnxscript (~90k tracked objects) seldom runs by itself. A full collection costs tens of milliseconds there,
   so it runs only for graphs of COLLECT_MIN_NODES nodes or more; a smaller graph's garbage is a few hundred KiB.
2. malloc_trim(0) (glibc): glibc keeps freed heap memory resident for reuse, and numpy buffers below its mmap
   threshold (which rises to 32 MiB as large blocks are freed) come from the heap, so a freed weight copy or packing
   temporary would stay in the RSS. Trimming gives back every free page.
Limits: step 2 needs glibc and does nothing elsewhere; memory the next stage would have reused is given back and
faulted in again, which costs page faults but never raises the peak.
"""
from __future__ import annotations

import ctypes
import functools
import gc
from collections.abc import Callable

import onnx_ir as ir

# The CNNs of issue #6 keep 143 (PP-OCR cls) to 200+ nodes after the graph passes, and collecting lowers PP-OCR
# cls's peak by ~5 MiB; for the 30-node BERT-like block it changed nothing measurable (< 0.2 MiB), and a one-node
# conformance model would pay a full collection (0.03-0.1 s on a loaded 2-core host) for nothing.
COLLECT_MIN_NODES = 64


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def return_free_pages() -> bool:
    """Step 2 alone (after dropping objects that hold no reference cycles, such as a ModelProto); False when the C
    library has no malloc_trim."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def release_freed_memory(model: ir.Model) -> None:
    """Steps 1 and 2, after a stage that worked on `model` (its node count decides step 1)."""
    if len(model.graph) >= COLLECT_MIN_NODES:
        gc.collect()
    return_free_pages()


def between_passes(model: ir.Model) -> Callable[[], None]:
    """run_passes' `after_each` for `model`: step 2 after every pass (a fusion's float64 temporaries, freed inside
    the heap, would otherwise add to the next pass's), and step 1 too after a pass that replaced the model's graph
    (upgrade_opset), when all of the old graph is cyclic garbage."""
    graph = model.graph

    def after_pass() -> None:
        nonlocal graph
        if model.graph is not graph:
            graph = model.graph
            gc.collect()
        return_free_pages()

    return after_pass
