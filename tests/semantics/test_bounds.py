"""Per-element error bounds (axon.semantics.bounds): they hold for a kernel that rounds every
intermediate and sums in the worst order, they follow each element's own magnitude, and a
reference check under them fails on errors a max|ref|-scaled tolerance let through."""
import ml_dtypes
import numpy as np
import pytest

import axon
import axon.frontend.functions as F
from axon.semantics.bounds import (Precision, compare, function_tolerance, gamma, kernel_reference,
                                   program_reference, unit_roundoff)
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import OP_SPECS, Op, concrete_params
from axon.semantics.algebra import const_value
from axon.semantics.sizes import bind_shape
from axon.suite import SUITE

NARROW = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def test_unit_roundoff_and_gamma():
    assert unit_roundoff(np.float32) == 2.0 ** -24
    assert unit_roundoff(ml_dtypes.bfloat16) == 2.0 ** -8
    assert unit_roundoff(np.float16) == 2.0 ** -11
    assert unit_roundoff(np.int32) == 0.0
    assert gamma(4, 0.01) == pytest.approx(0.04 / 0.96)
    assert gamma(300, 2.0 ** -8) == float("inf")  # n u >= 1: no bound


def emulate(graph, arrays, dtype):
    """A kernel as badly behaved as the bounds allow: every operation in float32, every result
    rounded to `dtype`, every sum accumulated sequentially (the order with the largest error bound)."""
    narrow = NARROW[dtype]
    rnd = lambda v: np.asarray(v, np.float32).astype(narrow).astype(np.float32)
    env = {}
    binding = {}
    from axon.semantics.evaluate import bind_sizes

    binding = bind_sizes(graph, {k: v.shape for k, v in arrays.items()})
    for n in graph.nodes():
        if n.op is Op.INPUT:
            env[n] = np.asarray(arrays[n.params.name], np.float32)
        elif n.op is Op.CONST:
            env[n] = np.float32(const_value(n.params.value, binding))
        elif n.op is Op.REDUCE_SUM:
            seq = np.take(np.cumsum(env[n.inputs[0]], axis=n.params.axis, dtype=np.float32), [-1], axis=n.params.axis)
            env[n] = rnd(seq if n.params.keepdims else np.squeeze(seq, n.params.axis))
        else:
            args = [env[x] for x in n.inputs]
            with np.errstate(all="ignore"):
                env[n] = rnd(OP_SPECS[n.op].numpy(args, concrete_params(n.params, binding), bind_shape(n.shape, binding)))
    return [env[o] for o in graph.outputs]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_emulated_kernel_stays_within_the_bounds_on_every_benchmark(dtype):
    for name, b in SUITE.items():
        inputs = b.program.random_inputs(b.sizes("small"), dtype=dtype, seed=1)
        want, tol = kernel_reference(b.program.graph, inputs, dtype)
        # the reference is the evaluator's, bit for bit
        for w, r in zip(want, evaluate(b.program.graph, inputs)):
            assert np.array_equal(w, r), name
        check = compare(emulate(b.program.graph, inputs, dtype), want, tol)
        assert check.ok, (name, dtype, check.explain())
        assert check.tolerance["unbounded_elements"] == 0, name


def test_a_bound_follows_its_own_element_not_the_largest():
    @axon.program(x=("m", "n"), y=("m", "n"))
    def mul(x, y):
        return x * y

    x = np.array([[1e-3, 1e3]], np.float32)
    y = np.ones((1, 2), np.float32)
    want, tol = kernel_reference(mul.graph, {"x": x, "y": y}, "float32")
    small, big = tol.bounds[0][0]
    assert small < 1e-9 < big  # u |x y| at each element
    off = want[0].copy()
    off[0, 0] += 1e-6  # far below 2 eps max|ref| = 2.4e-4, the old check's slack at every element
    assert not compare([off], want, tol).ok
    off = want[0].copy()
    off[0, 1] += 1e-6
    assert compare([off], want, tol).ok


def test_a_matmul_element_is_bounded_by_gamma_k_times_its_absolute_products():
    @axon.program(a=("m", "k"), b=("k", "n"))
    def mm(a, b):
        return a @ b

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 64), dtype=np.float32), rng.standard_normal((64, 8), dtype=np.float32)
    want, tol = kernel_reference(mm.graph, {"a": a, "b": b}, "float32")
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    u = 2.0 ** -24
    # gamma_K |A||B| for the float32 accumulation (nothing narrower stores it), then the output's
    # rounding u (|ref| + e); each rounding allows half a subnormal
    e = gamma(64, u) * mag + 2.0 ** -150
    want_bound = e + u * (np.abs(want[0]) + e) + 2.0 ** -150
    # |A||B| is summed in float32 and scaled up by 1 / (1 - gamma_K): never below the exact formula
    assert (tol.bounds[0] >= want_bound).all() and (tol.bounds[0] <= want_bound * (1 + 1e-5)).all()


def test_a_divisor_whose_interval_holds_zero_leaves_the_element_unbounded():
    @axon.program(x=("m", "n"), y=("m", "n"))
    def ratio(x, y):
        return x / (y - 1.0)

    x = np.ones((1, 3), np.float32)
    y = np.array([[1.0, 2.0, 3.0]], np.float32)  # y - 1 = 0 exactly: no finite bound
    want, tol = kernel_reference(ratio.graph, {"x": x, "y": y}, "float32")
    assert np.isinf(tol.bounds[0][0, 0]) and np.isfinite(tol.bounds[0][0, 1:]).all()
    assert tol.summary()["unbounded_elements"] == 1
    got = want[0].astype(np.float32)
    assert compare([got], want, tol).ok  # inf == inf: a non-finite reference is matched exactly
    got[0, 2] = np.nan
    c = compare([got], want, tol)
    assert not c.ok and c.worst == (0, (0, 2)) and c.failed == 1


def test_bf16_intermediates_widen_the_bound_only_where_the_kernel_keeps_them():
    @axon.program(x=("m", "n"))
    def soft(x):
        e = F.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    x = np.random.default_rng(2).standard_normal((8, 256)).astype(ml_dtypes.bfloat16)
    _, any_kernel = kernel_reference(soft.graph, {"x": x}, "bfloat16")
    _, f32_mid = kernel_reference(soft.graph, {"x": x}, "bfloat16", narrow=())
    # every intermediate in bf16 (Options.precision "kernel") against float32 ones and a bf16 output
    assert (any_kernel.bounds[0] > 2 * f32_mid.bounds[0]).all()
    assert f32_mid.summary()["bound_over_ref_median"] < 2 * 2.0 ** -8


def test_an_opaque_function_is_bounded_by_its_magnitudes_and_its_own_rounding():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((8, 32)), rng.standard_normal((32, 4))
    ref = (a @ b).astype(np.float32)
    mag = np.abs(a) @ np.abs(b)
    prec = Precision(("bfloat16",), "bfloat16")
    tol = function_tolerance([ref], [mag], prec, reduction=32, roundings=1, narrowed=0)
    u, u32 = 2.0 ** -8, 2.0 ** -24
    r = np.abs(ref.astype(np.float64))
    m = np.maximum(r, mag)
    want = (u + u) * r + 2.0 ** -134 + gamma(32, u32) * m + u32 * r + gamma(32, u32) * m
    np.testing.assert_allclose(tol.bounds[0], want, rtol=1e-12)
    assert "K = 32" in tol.formula() and tol.summary()["method"] == "reference"


def test_program_reference_takes_a_precision_per_output():
    b = SUITE["rope"]
    inputs = b.program.random_inputs(b.sizes("small"), dtype="float32", seed=0)
    _, tol = program_reference(b.program.graph, inputs, Precision(("float32", "bfloat16"), "bfloat16"))
    s = tol.summary()
    assert s["dtypes"]["out"] == ["float32", "bfloat16"] and s["unit_roundoff"]["mid"] == 2.0 ** -8


def test_a_long_bf16_contraction_gets_the_probabilistic_bound_and_still_holds():
    @axon.program(x=("m", "k"), y=("m", "k"), w=("k", "n"))
    def gated(x, y, w):
        return (x * y) @ w  # a computed operand, rounded to bf16 for the Tensor Engine

    rng = np.random.default_rng(4)
    inputs = {"x": rng.standard_normal((8, 8192)), "y": rng.standard_normal((8, 8192)),
              "w": rng.standard_normal((8192, 64))}
    inputs = {k: v.astype(ml_dtypes.bfloat16) for k, v in inputs.items()}
    want, tol = kernel_reference(gated.graph, inputs, "bfloat16")
    h = inputs["x"].astype(np.float64) * inputs["y"].astype(np.float64)
    worst_case = 2.0 ** -8 * (np.abs(h) @ np.abs(inputs["w"].astype(np.float64)))  # one rounding of h alone
    one_rounding = np.median(worst_case / np.abs(want[0]))
    assert one_rounding > 0.2  # the worst case of a single rounding of h: a quarter of the output
    assert tol.summary()["bound_over_ref_median"] < one_rounding / 3
    assert compare(emulate(gated.graph, inputs, "bfloat16"), want, tol).ok


def _causal(shift: int):
    @axon.program(q=("s", 64), k=("t", 64), v=("t", 64))
    def causal(q, k, v):
        x = F.where(F.arange("s")[:, None] + shift >= F.arange("t")[None, :], q @ k.T, -30000.0)
        e = F.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v
    return causal


def test_positions_are_exact_so_a_causal_bound_stays_tight_and_sees_a_mask_off_by_one():
    # positions up to 1023 are not bfloat16 numbers, but a kernel compares them as integers: the
    # mask never flips, the masked scores (-30000, far below each row's max) add no error, and the
    # row max's own error cancels in the normalization. Scores stored in bfloat16 (|x| ~ 20, so
    # ~0.1 absolute) really do move each probability by ~10%: that bound is wide, and honest
    right, wrong = _causal(0), _causal(1)
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal((1024, 64)).astype(ml_dtypes.bfloat16) for n in "qkv"}
    for narrow in (None, frozenset()):  # every intermediate in bfloat16, or in float32
        want, tol = kernel_reference(right.graph, inputs, "bfloat16", narrow)
        summary = tol.summary()
        assert summary["unbounded_elements"] == 0
        assert summary["bound_over_ref_median"] < (1.0 if narrow is None else 0.01)
        assert compare([want[0].astype(ml_dtypes.bfloat16)], want, tol).ok
        off_by_one = evaluate(wrong.graph, inputs)[0].astype(ml_dtypes.bfloat16)
        assert not compare([off_by_one], want, tol).ok


def test_a_check_that_bounds_almost_nothing_is_inconclusive_not_a_pass():
    @axon.program(x=("m", "n"), y=("m", "n"))
    def ratio(x, y):
        return x / (y - 1.0)

    x = np.ones((4, 50), np.float32)
    y = np.ones((4, 50), np.float32)  # every divisor 0: no element has a finite bound
    want, tol = kernel_reference(ratio.graph, {"x": x, "y": y}, "float32")
    got = np.zeros((4, 50), np.float32)  # anything at all, where the reference is inf
    c = compare([got], want, tol)
    assert not c.ok and c.error.startswith("inconclusive: 200 of 200 output elements have no finite error bound")


def test_a_softmax_row_max_is_a_shift_whose_error_cancels_and_no_other_max_is():
    from axon.semantics.bounds import normalized_shifts

    @axon.program(x=("m", "n"), v=("n", "d"))
    def attend(x, v):
        e = F.exp(x - x.max(axis=-1, keepdims=True))
        return (e @ v) / e.sum(axis=-1, keepdims=True)  # the normalization after the matmul

    @axon.program(x=("m", "n"))
    def unnormalized(x):
        return F.exp(x - x.max(axis=-1, keepdims=True))  # the shift reaches the output

    assert [n.op for n in normalized_shifts(attend.graph)] == [Op.REDUCE_MAX]
    assert not normalized_shifts(unnormalized.graph)
    assert len(normalized_shifts(SUITE["softmax"].program.graph)) == 1


def test_a_value_float32_cannot_hold_is_unbounded_and_a_derived_operators_inner_steps_are_not():
    @axon.program(x=("m", "n"))
    def act(x):
        return F.exp(x) + F.silu(-x)

    x = np.linspace(-20.0, 3.0, 200, dtype=np.float32)[None, :]
    x[0, 0], x[0, 1] = 89.0, -89.0  # exp(89) overflows float32; silu(89) is one instruction, exact
    want, tol = kernel_reference(act.graph, {"x": x}, "float32")
    assert np.isinf(tol.bounds[0][0, 0]) and np.isfinite(tol.bounds[0][0, 1:]).all()
    with np.errstate(over="ignore"):  # exp(89) is no float32 number
        got = want[0].astype(np.float32)
    assert got[0, 0] == np.inf  # what float32's exp(89) gives
    assert compare([got], want, tol).ok
    got[0, 2] *= 1.001
    assert not compare([got], want, tol).ok


def test_an_input_the_intermediate_dtype_holds_has_no_narrowing_error_and_others_keep_theirs():
    from axon.semantics.bounds import _Bounded, _holds

    bf16, fp8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
    assert _holds(np.float32, bf16) and _holds(bf16, fp8) and _holds(np.float32, np.float16)
    assert not _holds(bf16, np.float32) and not _holds(bf16, np.float16) and not _holds(np.float32, np.int32)
    alg = _Bounded(Precision.of_kernel("bfloat16"))
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    held, wide = alg.exact(x.astype(bf16)), alg.exact(x)
    # the shortcut is what narrowing would have computed: nothing lost for bf16 values ...
    assert not held.det.any() and np.array_equal(alg.narrowed(held.v), held.det)
    # ... while float32 values stored in a bf16 kernel lose up to u_bf16 of themselves
    assert wide.det.any() and (wide.det <= 2.0 ** -8 * np.abs(x)).all()


def test_absolute_products_past_float32s_range_stay_finite_upper_bounds():
    """|A||B| is summed in float32 for speed; where the sum could pass float32's range (squared
    error bounds in the probabilistic part grow fast) it is summed in float64, so a finite bound
    does not become an infinite one (every element unchecked)."""
    from axon.semantics.bounds import _abs_matmul

    x, y = np.full((2, 64), 1e30), np.full((64, 3), 1e20)
    out = _abs_matmul(x, y)
    assert np.isfinite(out).all() and (out >= 64 * 1e50).all() and (out <= 64 * 1e50 * (1 + 1e-12)).all()
    small = _abs_matmul(np.full((2, 64), 0.5), np.full((64, 3), 2.0))  # the float32 path
    assert (small >= 64.0).all() and (small <= 64.0 * (1 + 1e-5)).all()


def test_independent_error_parts_add_in_l2_as_hypot_does_and_past_the_squares_range():
    """_l2 is hypot without its cost: the same to a few ulps, broadcast to the value's shape, and
    finite where the squares overflow but the norm does not."""
    from axon.semantics.bounds import _l2

    rng = np.random.default_rng(0)
    a, b = np.abs(rng.standard_normal((3, 5))) * 1e-3, np.abs(rng.standard_normal(5))
    assert np.allclose(_l2(a, b), np.hypot(a, b), rtol=1e-15, atol=0)
    assert _l2(np.zeros(5), 2.0, (3, 5)).shape == (3, 5) and (_l2(np.zeros(5), 2.0, (3, 5)) == 2.0).all()
    big = _l2(np.array([1e200, 3.0]), np.array([1e200, 4.0]))
    assert np.isfinite(big).all() and big[0] == pytest.approx(np.sqrt(2) * 1e200) and big[1] == 5.0
    assert np.isinf(_l2(np.array([np.inf]), np.array([1.0]))).all()


def test_an_exponentials_spread_is_its_upper_corner_in_closed_form():
    """exp's box spread is e^v (e^e - 1), one pass where the corners took six: it bounds exp
    anywhere in the box, equals the corners' value to rounding, and is infinite where the box is."""
    from axon.semantics.bounds import _spread
    from axon.semantics.scalar import SCALAR_SPECS, ScalarOp

    rng = np.random.default_rng(0)
    v = rng.standard_normal(1000) * 30
    e = np.abs(rng.standard_normal(1000)) * np.logspace(-12, 1, 1000)
    e[:3] = (0.0, np.inf, 700.0)
    spec = SCALAR_SPECS[ScalarOp.EXP]
    with np.errstate(over="ignore", invalid="ignore"):
        spread = _spread(ScalarOp.EXP, spec, [v], [e], np.exp(v))
        corners = np.maximum(np.abs(np.exp(v + e) - np.exp(v)), np.abs(np.exp(v - e) - np.exp(v)))
    # where v + e rounds (e below ~1e-6 |v|) the corners lose digits that the closed form keeps
    fair = np.isfinite(corners) & (e > 1e-6 * np.maximum(1.0, np.abs(v)))
    assert fair.sum() > 300 and np.allclose(spread[fair], corners[fair], rtol=1e-8, atol=0)
    assert spread[0] == 0.0 and np.isinf(spread[1])
    fair[:3] = False
    for d in (-1.0, -0.5, 0.5, 1.0):  # the box's inside
        with np.errstate(over="ignore", invalid="ignore"):
            inside = np.abs(np.exp(v + d * e) - np.exp(v)) <= spread * (1 + 1e-9)
        assert inside[fair].all()


_HEAP_PROBE = """
import ctypes, json
import numpy as np
from axon.heap import _libc, reusing_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]

_libc.mallinfo2.restype = MallInfo2

def mapped_and_kept():
    before = _libc.mallinfo2()
    a = np.ones(SIZE // 8)
    mapped = _libc.mallinfo2().hblkhd - before.hblkhd
    del a
    return mapped, _libc.mallinfo2().fordblks

outside = mapped_and_kept()
with reusing_freed_memory():
    inside = mapped_and_kept()
print(json.dumps([outside, inside, mapped_and_kept()]))
"""


@pytest.mark.skipif(not hasattr(__import__("axon.heap").heap._libc, "mallinfo2"), reason="glibc >= 2.33")
def test_a_reference_reuses_freed_memory_instead_of_mapping_fresh_pages():
    """Inside reusing_freed_memory a 256 MB array comes from the heap and stays there when freed
    (for the next one to reuse), where glibc maps it afresh and unmaps it; outside, the defaults
    are back. Read from glibc's own accounting (mallinfo2: page-fault counts are not reported
    under every kernel), in a fresh interpreter: a heap that earlier work left with a large free
    block serves the array from it whatever the settings."""
    import json
    import subprocess
    import sys

    size = 256 << 20
    out = subprocess.run([sys.executable, "-c", f"SIZE = {size}" + _HEAP_PROBE], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    (mapped0, _), (mapped, kept), (mapped2, kept2) = json.loads(out)
    assert mapped0 >= size
    assert mapped == 0 and kept >= size
    assert mapped2 >= size and kept2 < size  # mapped afresh again, the heap trimmed


@axon.program(x=("m", "d"), g=("d",), w=("d", "n"))
def norm_then_project(x, g, w):
    return (x * axon.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * g) @ w


def test_a_norms_error_is_a_scale_of_its_rows_through_a_matmul():
    """x * rsqrt(mean(x^2)) errs by one factor (1 + d) per row; through the matmul that is d |h|,
    not d sum|a||b| (sqrt(K) times more): a row scaled by 1.13 (a mean over 200 of 256) is caught,
    where the bound let 40% through, and the most rounding kernel still passes."""
    rng = np.random.default_rng(3)
    inputs = {k: rng.standard_normal(s).astype(ml_dtypes.bfloat16)
              for k, s in (("x", (128, 256)), ("g", (256,)), ("w", (256, 256)))}
    (want,), tol = kernel_reference(norm_then_project.graph, inputs, "bfloat16")
    assert np.median(tol.bounds[0] / np.abs(want)) < 0.15
    assert compare(emulate(norm_then_project.graph, inputs, "bfloat16"), [want], tol).ok
    scaled = want * np.sqrt(256 / 200)
    assert not compare([scaled], [want], tol).ok


def test_a_row_error_counted_as_fixed_stays_a_bound_where_others_are_infinite():
    from axon.semantics.bounds import _Val

    v = np.array([[1.0, -2.0], [3.0, 0.5]])
    x = _Val(v, np.full_like(v, np.inf), np.zeros_like(v), np.array([[np.inf, 0.0], [0.0, 0.0]]), np.full((2, 1), 0.1))
    plain = x.plain()
    assert plain.row is None and not np.isnan(plain.fixed).any()
    np.testing.assert_allclose(plain.fixed, 0.1 * np.abs(v))
    assert np.isinf(plain.likely()[0, 0]) and plain.likely()[1, 1] == pytest.approx(0.05)


def test_a_report_says_what_a_wide_bound_lets_through():
    from axon.semantics.bounds import describe

    summary = lambda rel: {"formula": "f", "dtypes": {"out": ["bfloat16"], "mid": "bfloat16", "acc": "float32"},
                           "longest_reduction": 8, "bound_median": 1.0, "bound_over_ref_median": rel,
                           "unbounded_elements": 0}
    assert "loose" not in describe(summary(0.01)) and "weak" not in describe(summary(0.01))
    assert "loose: a kernel off by 30% of a typical element can pass" in describe(summary(0.3))
    assert "this check is weak" in describe(summary(2.0))


def test_a_value_the_kernel_holds_in_float32_overflows_at_float32s_limit_not_float16s():
    """A float16 kernel that squares and sums a matmul's rows in float32 (PSUM, an f32 column)
    never holds those sums in float16: past 65504 they are not an overflow. The bound was
    infinite there, so such programs (an RMSNorm of a projection) got no kernel in float16."""
    @axon.program(x=("m", "k"), w=("k", "n"))
    def rms_of_projection(x, w):
        h = x @ w
        return h * axon.rsqrt((h * h).mean(axis=-1, keepdims=True) + 1e-6)

    rng = np.random.default_rng(0)
    ins = {"x": rng.standard_normal((64, 512)).astype(np.float16), "w": rng.standard_normal((512, 256)).astype(np.float16)}
    h = ins["x"].astype(np.float64) @ ins["w"].astype(np.float64)
    assert ((h * h).sum(-1) > 65504).all()  # every row's sum of squares is past float16's range
    graph = rms_of_projection.graph
    _, held_f32 = kernel_reference(graph, ins, "float16", frozenset(), {"m": 64, "k": 512, "n": 256})
    assert np.isfinite(held_f32.bounds[0]).all()
    # a kernel that may store every intermediate in float16 (narrow=None: any kernel) does overflow there
    _, any_kernel = kernel_reference(graph, ins, "float16", None, {"m": 64, "k": 512, "n": 256})
    assert not np.isfinite(any_kernel.bounds[0]).any()
