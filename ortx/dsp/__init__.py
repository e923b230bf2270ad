"""The DSP device's compiler (issue #7): signal ops lowered onto ortx's own planned FFT (kernels/fft.c).

DFT (opsets 17/20), STFT, Hann/Hamming/Blackman windows, MelWeightMatrix and 1-D Conv as an FIR filter or as a
Conv1d-as-STFT. `check(node)` says whether (and why not) a node runs here; `compile_nodes` returns a DspProgram
with `run(inputs, outputs)` and `stats()`; ortx.ep.devices.dsp declares the device and wraps these.
"""
from ortx.dsp.program import OPS, DspProgram, check, compile_nodes

__all__ = ["OPS", "DspProgram", "check", "compile_nodes"]
