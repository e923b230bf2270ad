"""ortx.codegen.jit: JIT'd segments are bitwise the interpreter, the disk cache hits, corrupt entries are rebuilt,
and no compiler / a failing compiler / an unusable cache directory fall back to the interpreter with a warning.

Every test uses its own cache directory (tmp_path) through ortx.config.Options or the jit_cache_dir provider
option. The in-process loaded-library table is keyed by path, so a fresh directory (or a copy of one) is read from
disk; copies are how the tests corrupt entries that this process has never mapped.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import threading

import numpy as np
import onnx
import onnxruntime
import pytest

import ortx
from ortx import _kernels, pipeline
from ortx.codegen import jit, render
from ortx.config import Options
from ortx.ep import compile_nodes
from ortx.ep.options import parse_providers
from ortx.ep.runtime import ClaimedStep
from tests import _models
from tests.codegen.test_render import small_classifier

ISAS = ("portable", "avx2", "avx512")
RUNNABLE_ISAS = ISAS[: ISAS.index(_kernels.cpu_isa()) + 1]
UNRUNNABLE_ISAS = ISAS[ISAS.index(_kernels.cpu_isa()) + 1:]

MODELS = {
    "tiny_conv_relu": _models.tiny_conv_relu,
    "small_classifier": small_classifier,
    "resnet18_style_32": lambda: _models.resnet18_style(size=32),
    "mobilenetv2_style_32": lambda: _models.mobilenetv2_style(size=32),
    "transformer_block": _models.transformer_block,
}


def _input_shapes(model: onnx.ModelProto) -> dict:
    return {value.name: tuple(d.dim_value for d in value.type.tensor_type.shape.dim) for value in model.graph.input}


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, size=shape).astype(np.float32) for name, shape in _input_shapes(model).items()}


def _compile(model: onnx.ModelProto, options: Options | None, *, threads: int = 2, reference: bool = False):
    ort = pipeline.OrtSettings(onnxruntime.SessionOptions(), ["CPUExecutionProvider"], [{}])
    return pipeline.compile_for_shapes(pipeline.prepare(model), _input_shapes(model), ort, num_threads=threads,
                                       use_reference_kernels=reference, jit=options)


def _natives(compiled) -> list:
    return [step.program.native for step in compiled.plan.steps if isinstance(step, ClaimedStep)]


def _run(compiled, feeds) -> list[np.ndarray]:
    results = compiled.plan.run(feeds)
    return [np.asarray(results[name]) for name in compiled.plan.graph_outputs]


def _assert_bitwise(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), "JIT output differs from the interpreter"


@pytest.fixture
def compiler_runs(monkeypatch) -> list[str]:
    """Symbols the C compiler was run for during the test."""
    calls: list[str] = []
    real = jit._compile

    def counting(rendered, *args):
        calls.append(rendered.symbol)
        return real(rendered, *args)

    monkeypatch.setattr(jit, "_compile", counting)
    return calls


@pytest.fixture(params=RUNNABLE_ISAS)
def isa(request):
    assert _kernels.force_isa(request.param) == request.param
    yield request.param
    _kernels.force_isa(_kernels.cpu_isa())


# Numerics -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("threads", [1, 2])
def test_jit_is_bitwise_the_interpreter(name, threads, tmp_path, compiler_runs):
    model = MODELS[name]()
    feeds = _feeds(model, seed=threads)
    jitted = _compile(model, Options(cache_dir=tmp_path), threads=threads)
    natives = _natives(jitted)
    assert natives and all(native is not None for native in natives)
    assert len(compiler_runs) == len({native.symbol for native in natives})
    interpreted = _compile(model, None, threads=threads)
    assert all(native is None for native in _natives(interpreted))
    _assert_bitwise(_run(jitted, feeds), _run(interpreted, feeds))


def test_jit_is_bitwise_the_interpreter_on_every_isa(isa, tmp_path):
    model = _models.resnet18_style(size=32)
    feeds = _feeds(model, seed=3)
    _assert_bitwise(_run(_compile(model, Options(cache_dir=tmp_path)), feeds), _run(_compile(model, None), feeds))


def test_isas_this_cpu_cannot_run_are_reported():
    for name in UNRUNNABLE_ISAS:
        assert _kernels.force_isa(name) == _kernels.cpu_isa(), f"{name} is not runnable on this CPU"
    _kernels.force_isa(_kernels.cpu_isa())
    assert set(RUNNABLE_ISAS) | set(UNRUNNABLE_ISAS) == set(ISAS)


def test_reference_kernels_run_through_the_jit(tmp_path):
    model = small_classifier()
    feeds = _feeds(model, seed=4)
    jitted = _compile(model, Options(cache_dir=tmp_path), reference=True)
    assert all(native is not None for native in _natives(jitted))
    _assert_bitwise(_run(jitted, feeds), _run(_compile(model, None, reference=True), feeds))


def test_jit_reports_step_timings(tmp_path):
    model = small_classifier()
    compiled = _compile(model, Options(cache_dir=tmp_path))
    seconds: dict = {}
    compiled.plan.run(_feeds(model), step_seconds=seconds)
    claimed_nodes = {node for step in compiled.plan.steps if isinstance(step, ClaimedStep)
                     for node in step.program.step_nodes}
    assert set(seconds) == claimed_nodes
    assert all(value >= 0 for value in seconds.values()) and sum(seconds.values()) > 0


def test_session_jit_option_on_and_off(tmp_path):
    model = _models.resnet18_style(size=32)
    feeds = _feeds(model, seed=5)
    outputs = {}
    for setting in ("on", "off"):
        session = ortx.InferenceSession(model, providers=[
            ("OrtxEP", {"jit": setting, "jit_cache_dir": str(tmp_path / setting)}), "CPUExecutionProvider"])
        outputs[setting] = session.run(None, feeds)
        assert session.get_provider_options()["OrtxEP"]["jit"] == str(setting == "on")
    assert list((tmp_path / "on").glob("*.so")), "jit on wrote no cache entry"
    assert not (tmp_path / "off").exists()
    _assert_bitwise(outputs["on"], outputs["off"])


def test_jit_provider_option_is_validated():
    with pytest.raises(ValueError, match="OrtxEP provider option 'jit'"):
        parse_providers([("OrtxEP", {"jit": "sometimes"})], None)
    assert parse_providers([("OrtxEP", {"jit": "off"})], None).ortx.jit_options() is None
    options = parse_providers([("OrtxEP", {"jit_cache_dir": "/tmp/somewhere"})], None).ortx.jit_options()
    assert options.jit and str(options.cache_dir) == "/tmp/somewhere"


# The cache ------------------------------------------------------------------------------------------------------
def test_second_session_hits_the_cache_without_compiling(tmp_path, compiler_runs):
    model = small_classifier()
    providers = [("OrtxEP", {"jit_cache_dir": str(tmp_path)}), "CPUExecutionProvider"]
    first = ortx.InferenceSession(model, providers=providers)
    compiled_once = len(compiler_runs)
    assert compiled_once >= 1
    second = ortx.InferenceSession(model, providers=providers)
    assert len(compiler_runs) == compiled_once
    feeds = _feeds(model)
    _assert_bitwise(second.run(None, feeds), first.run(None, feeds))


def test_disk_cache_is_read_back_without_compiling(tmp_path, compiler_runs):
    model = small_classifier()
    first = _compile(model, Options(cache_dir=tmp_path / "first"))
    assert [native.origin for native in _natives(first)] == ["compiled"]
    shutil.copytree(tmp_path / "first", tmp_path / "copy")  # a path this process has never loaded
    runs_before = len(compiler_runs)
    second = _compile(model, Options(cache_dir=tmp_path / "copy"))
    assert [native.origin for native in _natives(second)] == ["cache"]
    assert len(compiler_runs) == runs_before
    feeds = _feeds(model)
    _assert_bitwise(_run(second, feeds), _run(first, feeds))


def test_same_process_reuses_a_loaded_segment(tmp_path, compiler_runs):
    model = _models.tiny_conv_relu()
    _compile(model, Options(cache_dir=tmp_path))
    again = _compile(model, Options(cache_dir=tmp_path))
    assert [native.origin for native in _natives(again)] == ["loaded"]
    assert len(compiler_runs) == 1


def _entry(directory):
    libraries = list(directory.glob("*.so"))
    assert len(libraries) == 1
    return libraries[0], libraries[0].with_name(libraries[0].name + ".sha256")


def _corrupt_garbage(library, sidecar, other):
    library.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())


def _corrupt_truncated(library, sidecar, other):
    data = library.read_bytes()
    library.write_bytes(data[: len(data) // 3])


def _corrupt_empty(library, sidecar, other):
    library.write_bytes(b"")


def _corrupt_missing_sidecar(library, sidecar, other):
    sidecar.unlink()


def _corrupt_garbage_with_matching_checksum(library, sidecar, other):
    garbage = b"\x7fELF" + bytes(range(256)) * 8
    library.write_bytes(garbage)
    sidecar.write_text(hashlib.sha256(garbage).hexdigest())


def _corrupt_wrong_symbol(library, sidecar, other):
    """A valid library of another segment, checksum and all: dlopen works, the symbol is missing."""
    data = other.read_bytes()
    library.write_bytes(data)
    sidecar.write_text(hashlib.sha256(data).hexdigest())


CORRUPTIONS = {function.__name__.removeprefix("_corrupt_"): function for function in (
    _corrupt_garbage, _corrupt_truncated, _corrupt_empty, _corrupt_missing_sidecar,
    _corrupt_garbage_with_matching_checksum, _corrupt_wrong_symbol)}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_cache_entry_is_rebuilt_with_a_warning(corruption, tmp_path, compiler_runs, caplog):
    model = _models.tiny_conv_relu()
    interpreted = _run(_compile(model, None), _feeds(model))
    _compile(model, Options(cache_dir=tmp_path / "first"))
    _compile(small_classifier(), Options(cache_dir=tmp_path / "other"))
    shutil.copytree(tmp_path / "first", tmp_path / "corrupt")
    library, sidecar = _entry(tmp_path / "corrupt")
    CORRUPTIONS[corruption](library, sidecar, _entry(tmp_path / "other")[0])
    runs_before = len(compiler_runs)
    with caplog.at_level(logging.WARNING, logger="ortx.codegen.jit"):
        rebuilt = _compile(model, Options(cache_dir=tmp_path / "corrupt"))
    assert [native.origin for native in _natives(rebuilt)] == ["compiled"]
    assert len(compiler_runs) == runs_before + 1
    assert any("corrupt" in record.getMessage() and str(library) in record.getMessage()
               for record in caplog.records), caplog.text
    assert hashlib.sha256(library.read_bytes()).hexdigest() == sidecar.read_text().strip()
    _assert_bitwise(_run(rebuilt, _feeds(model)), interpreted)


def test_concurrent_builds_of_one_key_compile_once(tmp_path, compiler_runs):
    rendered = render.render(compile_nodes.compile_graph(compile_nodes.infer_shapes(small_classifier()).graph))
    options = Options(cache_dir=tmp_path)
    barrier = threading.Barrier(3)
    results = []

    def build():
        barrier.wait()
        results.append(jit.build(rendered, options))

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(compiler_runs) == 1
    assert sorted(native.origin for native in results) == ["compiled", "loaded", "loaded"]
    assert len({native.address for native in results}) == 1


def test_cache_key_covers_compiler_and_flags():
    compiler = jit.Compiler("/usr/bin/cc", "cc 1.0")
    key = jit.cache_key("int x;", compiler)
    assert key == jit.cache_key("int x;", compiler)
    assert key != jit.cache_key("int y;", compiler)
    assert key != jit.cache_key("int x;", jit.Compiler("/usr/bin/cc", "cc 1.1"))
    assert key != jit.cache_key("int x;", jit.Compiler("/usr/bin/clang", "cc 1.0"))
    assert key != jit.cache_key("int x;", compiler, flags=("-O3",))


# Fallbacks ------------------------------------------------------------------------------------------------------
def _assert_falls_back(model, options, caplog, message: str):
    with caplog.at_level(logging.WARNING, logger="ortx.codegen.jit"):
        compiled = _compile(model, options)
    natives = _natives(compiled)
    assert natives and all(native is None for native in natives)
    assert any(message in record.getMessage() for record in caplog.records), caplog.text
    feeds = _feeds(model)
    _assert_bitwise(_run(compiled, feeds), _run(_compile(model, None), feeds))


def test_no_compiler_falls_back_to_the_interpreter(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(jit, "find_compiler", lambda options: None)
    _assert_falls_back(_models.tiny_conv_relu(), Options(cache_dir=tmp_path), caplog, "no C compiler found")
    assert not list(tmp_path.iterdir()), "no compiler, yet the cache directory was written"


def test_named_compiler_that_does_not_exist_falls_back(tmp_path, caplog):
    _assert_falls_back(_models.tiny_conv_relu(), Options(cache_dir=tmp_path, compiler="ortx-no-such-cc"), caplog,
                       "no C compiler found (ortx-no-such-cc)")


def test_failing_compiler_falls_back(tmp_path, caplog):
    assert shutil.which("false") is not None
    _assert_falls_back(_models.tiny_conv_relu(), Options(cache_dir=tmp_path, compiler="false"), caplog,
                       "could not be built")
    assert not list(tmp_path.glob("*.so")), "a failed compile left a cache entry"


def test_unusable_cache_directory_falls_back(tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")  # a path under a file cannot be created, even by root
    _assert_falls_back(_models.tiny_conv_relu(), Options(cache_dir=blocker / "cache"), caplog, "is not usable")


def test_options_from_environment():
    assert Options.from_environment({"ORTX_CACHE_DIR": "/x/cache"}).cache_dir.as_posix() == "/x/cache"
    assert Options.from_environment({"XDG_CACHE_HOME": "/xdg"}).cache_dir.as_posix() == "/xdg/ortx"
    assert Options.from_environment({}, cache_dir="/given").cache_dir.as_posix() == "/given"
    assert Options.from_environment({"ORTX_CC": "clang"}).compiler == "clang"
    assert Options.from_environment({}, jit=False).jit is False
    assert Options.from_environment({}).cache_dir.name == "ortx"
