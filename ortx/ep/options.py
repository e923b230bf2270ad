"""Provider list and OrtxEP provider options: parsed and validated once, with errors that list what is valid."""
from __future__ import annotations

import dataclasses
import os

import onnxruntime

from ortx.config import Options
from ortx.ep.precision import BF16_COMPUTE, PRECISIONS

ORTX_PROVIDER = "OrtxEP"

# OrtxEP's provider options: name -> (description, parser).
def _parse_shapes(value) -> dict[str, tuple[int, ...]]:
    """'x:1x3x640x640,y:1x4' or {'x': [1, 3, 640, 640]}."""
    if isinstance(value, dict):
        return {str(name): tuple(int(d) for d in dims) for name, dims in value.items()}
    shapes = {}
    for item in str(value).split(","):
        name, _, dims = item.strip().rpartition(":")
        if not name or not dims:
            raise ValueError(f"OrtxEP option input_shapes: {item!r} is not NAME:DxDxD")
        shapes[name] = tuple(int(d) for d in dims.split("x"))
    return shapes


def _parse_bool(value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean, got {value!r}")


def _parse_positive_int(value) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return number


def _parse_tuning(value) -> str:
    from ortx.tune.engine_choice import MODES

    text = str(value).strip().lower()
    if text not in MODES:
        raise ValueError(f"expected one of {', '.join(MODES)}, got {value!r}")
    return text


def _parse_sparse(value) -> str:
    from ortx.tune.sparse_choice import SPARSE_OPTIONS

    text = str(value).strip().lower()
    if text not in SPARSE_OPTIONS:
        raise ValueError(f"expected one of {', '.join(SPARSE_OPTIONS)}, got {value!r}")
    return text


def _parse_precision(value) -> str:
    text = str(value).strip().lower()
    if text not in PRECISIONS:
        raise ValueError(f"expected one of {', '.join(PRECISIONS)}, got {value!r}")
    return text


def _parse_bf16_compute(value) -> str:
    text = str(value).strip().lower()
    if text not in BF16_COMPUTE:
        raise ValueError(f"expected one of {', '.join(BF16_COMPUTE)}, got {value!r}")
    return text


def _parse_names(value) -> tuple[str, ...]:
    names = [part.strip() for part in (value.split(",") if isinstance(value, str) else value)]
    if not all(isinstance(name, str) for name in names) or "" in names:
        raise ValueError(f"expected node names separated by commas, got {value!r}")
    return tuple(dict.fromkeys(names))


def _parse_devices(value) -> str:
    from ortx.ep.devices import select

    return ",".join(device.name for device in select(str(value)))


def _parse_placement(value) -> dict:
    from ortx.ep.placement import parse_placement

    return parse_placement(value)


PROVIDER_OPTIONS = {
    "input_shapes": ("fix dynamic input dims at creation, e.g. 'x:1x3x640x640'", _parse_shapes),
    "reference_kernels": ("run the naive reference kernels (debugging numerics)", _parse_bool),
    "max_specializations": ("how many input-shape specialisations to keep compiled (default 8)", _parse_positive_int),
    "jit": ("'on' (default): compile claimed segments to C with the system compiler, cached on disk; 'off': run "
            "them on the step interpreter", _parse_bool),
    "jit_cache_dir": ("where JIT'd segments and the tuning database are kept (default: ORTX_CACHE_DIR, else "
                      "~/.cache/ortx)", str),
    "tuning": ("per claimed segment, OrtxEP or ORT, whichever is faster here, and per kernel step its thread "
               "count: 'cached' (default) applies recorded measurements only, 'quick'/'full' also measure at "
               "session creation and record them, 'off' neither gives a segment back nor changes a step's "
               "threads", _parse_tuning),
    "precision": ("'fp32' (default) or 'bf16': Gemm/MatMul with constant weights and dense convs run with bf16 "
                  "operands and fp32 accumulation; everything else stays fp32 (ortx/ep/precision.py)",
                  _parse_precision),
    "bf16_compute": ("under precision 'bf16': 'auto' (default) runs fp32 kernels on a CPU where bf16 would be "
                     "slower (no AVX512_BF16, or vdpbf16ps measured below 1.25x the fp32 multiply-add rate, as on "
                     "Intel cores without AMX; the assignment says so), 'always' runs the bf16 kernels anyway",
                     _parse_bf16_compute),
    "fp32_nodes": ("under precision 'bf16', nodes computed at fp32 accuracy from unrounded inputs and weights "
                   "(fp32 kernels; 1x1 convs on AMX as bf16x3), 'NODE,...' (the model's names; a node the graph "
                   "passes fused, e.g. a BatchNormalization, names the conv it joined): where bf16's error grows "
                   "most, often a network's first layers; `ortx fp32-nodes MODEL --target-cosine 0.999` chooses "
                   "them by measurement", _parse_names),
    "devices": ("the devices OrtxEP places nodes on, in order of preference, e.g. 'npu,dsp,cpu' (default 'cpu'; "
                "`ortx devices` lists them); nodes none of them runs go to ONNX Runtime", _parse_devices),
    "placement": ("forces nodes onto devices, 'NODE:DEVICE,...' (the device must be in `devices` and able to run "
                  "the node, else an error says why)", _parse_placement),
    "sparse": ("constant-weight Conv/Gemm/MatMul layers with many zeros on CSR kernels: 'auto' (default) decides "
               "per layer from the measured dense/sparse crossover as `tuning` allows (records for 'cached', "
               "measured now for 'quick'/'full', else sparse only from 80% zeros), 'measure' times each candidate "
               "layer now and records it, 'off' keeps every layer dense (in every mode a MatMul by a banded "
               "constant, e.g. a mel filterbank, runs band_gemm_f32: ortx/ep/lowering/band.py)", _parse_sparse),
}


@dataclasses.dataclass(frozen=True)
class OrtxOptions:
    input_shapes: dict = dataclasses.field(default_factory=dict)
    reference_kernels: bool = False
    max_specializations: int = 8
    jit: bool = True
    jit_cache_dir: str = ""
    tuning: str = "cached"
    precision: str = "fp32"
    bf16_compute: str = "auto"
    fp32_nodes: tuple = ()
    devices: str = "cpu"
    placement: dict = dataclasses.field(default_factory=dict)
    sparse: str = "auto"

    def device_settings(self):
        """The devices and forced placements for the pipeline (ortx.pipeline.DeviceSettings)."""
        from ortx.ep.devices import select
        from ortx.pipeline import DeviceSettings

        return DeviceSettings(tuple(select(self.devices)), dict(self.placement))

    def tuning_settings(self):
        """Where and how the pipeline chooses OrtxEP or ORT per segment (ortx.pipeline.TuningSettings)."""
        from ortx.pipeline import TuningSettings

        cache_dir = Options.from_environment(cache_dir=self.jit_cache_dir or None).cache_dir
        return TuningSettings(self.tuning, str(cache_dir / "tuning.sqlite"), sparse=self.sparse)

    def jit_options(self) -> Options | None:
        """What the pipeline needs to JIT claimed segments, or None when the JIT is off."""
        if not self.jit:
            return None
        return Options.from_environment(cache_dir=self.jit_cache_dir or None)


@dataclasses.dataclass(frozen=True)
class ProviderChoice:
    use_ortx: bool
    ortx: OrtxOptions
    ort_providers: list[str]
    ort_provider_options: list[dict]


def parse_providers(providers, provider_options) -> ProviderChoice:
    providers = list(providers) if providers else [ORTX_PROVIDER, "CPUExecutionProvider"]
    names, options = [], []
    for index, provider in enumerate(providers):
        if isinstance(provider, tuple):
            name, provider_option = provider
        else:
            name = provider
            provider_option = provider_options[index] if provider_options and index < len(provider_options) else {}
        names.append(name)
        options.append(dict(provider_option or {}))
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError(f"provider_options has {len(provider_options)} entries for {len(providers)} providers; "
                         "give one dict per provider")
    available = onnxruntime.get_available_providers()
    valid = [ORTX_PROVIDER] + list(available)
    for name in names:
        if name not in valid:
            raise ValueError(f"unknown execution provider {name!r}; valid providers here: {', '.join(valid)}")
    use_ortx = ORTX_PROVIDER in names
    ortx_options = OrtxOptions()
    if use_ortx:
        raw = options[names.index(ORTX_PROVIDER)]
        parsed = {}
        for key, value in raw.items():
            if key not in PROVIDER_OPTIONS:
                listing = "; ".join(f"{k}: {d}" for k, (d, _) in PROVIDER_OPTIONS.items())
                raise ValueError(f"unknown OrtxEP provider option {key!r}; valid options: {listing}")
            try:
                parsed[key] = PROVIDER_OPTIONS[key][1](value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"OrtxEP provider option {key!r}: {error}") from error
        ortx_options = OrtxOptions(**parsed)
        _check_placement_devices(ortx_options)
    ort_names = [n for n in names if n != ORTX_PROVIDER] or ["CPUExecutionProvider"]
    ort_options = [o for n, o in zip(names, options) if n != ORTX_PROVIDER] or [{}]
    return ProviderChoice(use_ortx, ortx_options, ort_names, ort_options)


def _check_placement_devices(options: OrtxOptions) -> None:
    selected = options.devices.split(",")
    for node, device in options.placement.items():
        if device not in selected:
            raise ValueError(f"OrtxEP provider option 'placement': node {node!r} is forced onto device {device!r}, "
                             f"which is not in option 'devices' ({options.devices!r})")


def thread_count(sess_options) -> int:
    """intra_op_num_threads, or ORT's default: one thread per core this process may use."""
    requested = getattr(sess_options, "intra_op_num_threads", 0) if sess_options is not None else 0
    if requested and requested > 0:
        return int(requested)
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


_COPIED_SESSION_OPTIONS = (
    "intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level", "execution_mode",
    "log_severity_level", "log_verbosity_level", "logid", "enable_cpu_mem_arena", "enable_mem_pattern",
    "enable_mem_reuse", "use_deterministic_compute",
)


def sub_session_options(sess_options, *, shares_cores_with_ortx: bool) -> onnxruntime.SessionOptions:
    """Options for ORT sub-sessions: the user's settings; their threads stop spinning when ortx kernels share
    the cores, since idle ORT threads spinning between segments would steal time from ortx's threads."""
    options = onnxruntime.SessionOptions()
    if sess_options is not None:
        for name in _COPIED_SESSION_OPTIONS:
            try:
                setattr(options, name, getattr(sess_options, name))
            except (AttributeError, TypeError):
                pass
    if shares_cores_with_ortx:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options
