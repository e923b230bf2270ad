"""ortx.codegen.gemm's conv mode: a generated kernel computing a conv2d_f32 of one image and one group (weights in
the lowering's packed panels, the patch matrix packed through kernels/conv_source.c) equals the float64 definition
of the conv and the prebuilt conv2d_f32 within the fp32 tolerance, on shapes with tails (Cout not a multiple of the
tile's rows, pixels not a multiple of its columns, K past one block), stride 2, padding, dilation, bias, residual
and Relu/Clip/LeakyRelu, through both B sources (planes and im2col); and it repeats bit for bit, again and on 1 and
2 threads. Each case compiles one kernel (~0.5 s).
"""
from __future__ import annotations

import numpy as np
import pytest

from ortx.codegen import gemm
from ortx.config import Options
from ortx.tune import gemm_space
from ortx.tune.conv_problems import PrebuiltConv, conv_operands
from tests.tolerances import assert_close

ISAS = gemm.runnable_isas()
ISA = ISAS[-1]
WIDE = {"portable": 16, "avx2": 16, "avx512": 32, "neon": 16}  # a multiple of the 16-column B panels


def conv_ints(cin, height, width, cout, kernel, *, stride=1, pad=0, dilation=1, bias=True, residual=False,
              activation=0, threads=2) -> list[int]:
    out_height = (height + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    out_width = (width + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    return [1, cin, height, width, cout, out_height, out_width, kernel, kernel, stride, stride, pad, pad, dilation,
            dilation, 1, int(bias), int(residual), activation, threads]


# (conv ints, activation params, schedule changes). The B source: planes when stride 1 and OW >= 32, else im2col.
CASES = [
    # Cout 13 (tail of 6 rows), 37x41 = 1517 pixels (tail of 32 columns), planes; A read in place (mr 6, kc 256)
    (conv_ints(16, 37, 41, 13, 3, pad=1, activation=1), (0.0, 0.0), dict(mr=6, kc=256, mc=12, nc=64)),
    # stride 2 (im2col), residual, Clip; A repacked into 12-row panels, K 144 in blocks of 100, 2 x 3 tasks
    (conv_ints(16, 37, 41, 13, 3, stride=2, pad=1, residual=True, activation=3), (0.0, 6.0),
     dict(mr=12, kc=100, mc=24, nc=64, pack_a=True, tasks_m=2, tasks_n=3, prefetch=8, loop_order="ir_jr")),
    # no padding, no bias, OW 48 (planes), K 72; 14-row tile, kc 512 > K
    (conv_ints(8, 9, 50, 20, 3, bias=False), (0.0, 0.0), dict(mr=14, nr=16, kc=512, mc=28, nc=32, pack_a=True,
                                                               unroll=2)),
    # 1x1 stride 2 (ResNet's downsample shortcut, im2col), LeakyRelu; K 24 < any kc
    (conv_ints(24, 15, 15, 70, 1, stride=2, activation=2), (0.1, 0.0), dict(mr=6, kc=256, tasks_m=4, tasks_n=1)),
    # 5x5, pad 2, dilation 2, OW 6 (im2col), K 500: two blocks of 256 with A in place, residual
    (conv_ints(20, 12, 10, 7, 5, pad=2, dilation=2, residual=True, activation=1), (0.0, 0.0),
     dict(mr=6, kc=256, mc=6, nc=32, prefetch=4)),
]


@pytest.fixture(scope="module")
def options(tmp_path_factory) -> Options:
    return Options(cache_dir=tmp_path_factory.mktemp("conv-jit-cache"))


def _run(kernel, problem: gemm.GemmProblem, arrays: list[np.ndarray], threads: int) -> np.ndarray:
    output = np.full((problem.m, problem.n), np.nan, np.float32)
    rest = iter(arrays[2:])
    bias = next(rest) if problem.bias else None
    residual = next(rest) if problem.residual_row_stride else None
    kernel(arrays[0], arrays[1], output, bias, residual, num_threads=threads)
    return output


@pytest.mark.parametrize("ints, params, changes", CASES)
def test_generated_conv_equals_the_reference_and_the_prebuilt_conv(ints, params, changes, options):
    problem, reason = gemm.from_conv_step(ints, params)
    assert problem is not None, reason
    schedule = gemm.GemmSchedule(isa=ISA, **{"nr": WIDE[ISA], **changes})
    assert schedule.problems(problem) == []
    kernel = gemm.build_gemm(problem, schedule, options)
    arrays, reference = conv_operands(problem, seed=sum(ints))
    actual = _run(kernel, problem, arrays, 2)
    assert_close(actual, reference.astype(np.float32), what=f"generated conv {problem.signature} vs float64")
    prebuilt = _run(PrebuiltConv(problem), problem, arrays, 2)
    assert_close(actual, prebuilt, what="generated conv vs conv2d_f32")
    np.testing.assert_array_equal(_run(kernel, problem, arrays, 2), actual, err_msg="again")
    np.testing.assert_array_equal(_run(kernel, problem, arrays, 1), actual, err_msg="1 thread vs 2")


@pytest.mark.parametrize("isa", ISAS[:-1])
def test_every_isa_computes_the_conv(isa, options):
    ints, params, changes = CASES[1]
    problem, _ = gemm.from_conv_step(ints, params)
    schedule = gemm.GemmSchedule(isa=isa, **{**changes, "mr": 4, "nr": 16})
    arrays, reference = conv_operands(problem, seed=1)
    actual = _run(gemm.build_gemm(problem, schedule, options), problem, arrays, 2)
    assert_close(actual, reference.astype(np.float32), what=f"{isa} conv")


def test_the_default_conv_schedule_is_the_prebuilt_tile_and_the_space_keeps_the_panels():
    problem, _ = gemm.from_conv_step(CASES[0][0], CASES[0][1])
    default = gemm_space.default_schedule(problem, ISA, 2)
    space = gemm_space.gemm_space(problem, ISA)
    assert space.contains(default) and default["pack_b"] and default["kc"] == gemm.PREPACKED_KC
    assert default["pack_a"] == (default["mr"] != gemm.PREPACKED_MR)
    assert all(nr % gemm.PREPACKED_NR == 0 for nr in space.choices["nr"]) and space.choices["pack_b"] == (True,)
    assert not space.contains(default.replace(mr=4, pack_a=False)), "the packed weights have 6-row panels"
    assert problem.signature.startswith("conv2d_f32|16x37x41->13x37x41|kernel=3x3|stride=1,1|pad=1,1")


@pytest.mark.parametrize("ints, reason", [
    ([2, *conv_ints(8, 9, 9, 8, 3)[1:]], "batch 2"),
    (conv_ints(8, 9, 9, 8, 3)[:15] + [2] + conv_ints(8, 9, 9, 8, 3)[16:], "group 2"),
    (conv_ints(8, 9, 9, 8, 3, activation=4), "activation 4"),  # sigmoid: needs exp
])
def test_convs_the_template_does_not_cover_are_named(ints, reason):
    problem, why = gemm.from_conv_step(ints, (0.0, 0.0))
    assert problem is None and why.startswith(reason)


def test_a_schedule_that_reads_the_weights_in_place_needs_their_panels():
    problem, _ = gemm.from_conv_step(CASES[0][0], CASES[0][1])
    with pytest.raises(gemm.GemmError, match="mr 6 and kc 256"):
        gemm.render_gemm(problem, gemm.GemmSchedule(isa=ISA, mr=4, nr=16, kc=256, mc=8))
