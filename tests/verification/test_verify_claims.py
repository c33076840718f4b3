"""Soundness regressions: each case that once proved something false (or crashed, or refuted a true
identity through rounding) next to its twin. A proof states the sizes and assumptions it covers;
`Verdict.covers` must be false exactly where the two programs can differ."""
import numpy as np
import pytest

import axon
from axon.cli import main
from axon.errors import AxonError, InputError
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


def differ_at(f, g, sizes: dict, seed: int = 0) -> bool:
    """Do the programs' NumPy references differ at these sizes on random inputs?"""
    rng = np.random.default_rng(seed)
    arrays = {n.params.name: rng.standard_normal(tuple(int(s.evaluate(sizes)) for s in n.shape))
              for n in f.graph.inputs}
    a, b = f(**arrays), g(**dict(zip([n.params.name for n in g.graph.inputs], arrays.values())))
    with np.errstate(invalid="ignore"):
        return not np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)


# --- 1. a constant slice stop on a symbolic axis ----------------------------------------------
@axon.program(x=("m", "k"))
def first3_sum(x):
    return x[:, 0:3].sum(axis=1, keepdims=True)


@axon.program(x=("m", "k"))
def first3_sum_shifted(x):
    return x[:, 0:1] * 3.0 + (x[:, 0:3] - x[:, 0:1]).sum(axis=1, keepdims=True)


@axon.program(x=("m", "k"))
def row_sum(x):
    return x.sum(axis=1, keepdims=True)


def test_constant_stop_needs_the_axis_to_reach_it():
    v = verdict(first3_sum, first3_sum_shifted)
    assert v.status is Status.PROVED and v.conditions == ("k >= 3",)
    assert "k >= 3" in v.reason
    assert not v.covers({"m": 2, "k": 2}) and v.covers({"m": 2, "k": 3})


def test_constant_stop_is_not_the_whole_axis():
    v = verdict(first3_sum, row_sum)
    assert v.status is Status.REFUTED and v.counterexample["sizes"]["k"] > 3


def test_program_rejects_sizes_below_a_constant_stop():
    with pytest.raises(InputError, match="k >= 3"):
        first3_sum(np.ones((2, 2)))


# --- 2. divisors inside reductions --------------------------------------------------------------
@axon.program(x=("m", "k"), y=("m", "k"))
def cancelled_in_sum(x, y):
    d = y * x.shape[1] - y.sum(axis=1, keepdims=True)  # zero for every input when k = 1
    d = axon.sqrt(d * d)
    return (x * d / d).sum(axis=1)


@axon.program(x=("m", "k"), y=("m", "k"))
def plain_sum(x, y):
    return x.sum(axis=1)


@axon.program(x=("m", "k"), y=("m", "k"))
def cancelled_exp_in_sum(x, y):
    e = axon.exp(y)
    return (x * e / e).sum(axis=1)


def test_divisor_inside_a_sum_narrows_the_claim():
    v = verdict(cancelled_in_sum, plain_sum)
    assert v.status is Status.PROVED
    assert "divisors are non-zero" in v.assumptions and "k >= 2" in v.conditions
    assert not v.covers({"m": 3, "k": 1}) and v.covers({"m": 3, "k": 2})
    assert differ_at(cancelled_in_sum, plain_sum, {"m": 3, "k": 1})
    assert not differ_at(cancelled_in_sum, plain_sum, {"m": 3, "k": 4})


def test_divisor_that_cannot_vanish_is_no_assumption():
    v = verdict(cancelled_exp_in_sum, plain_sum)
    assert v.status is Status.PROVED and v.assumptions == () and v.conditions == ()


# --- 3. honest assumptions ------------------------------------------------------------------------
@axon.program(x=("m", "k"))
def mean(x):
    return x.mean(axis=1)


@axon.program(x=("m", "k"))
def sum_over_k(x):
    return x.sum(axis=1) / x.shape[1]


@axon.program(x=("m", "k"))
def centred_ratio(x):
    c = x - x.mean(axis=1, keepdims=True)
    return c / c


@axon.program(x=("m", "k"))
def ones(x):
    return x * 0.0 + 1.0


@axon.program(x=("m", "k"))
def even_columns(x):
    return x[:, ::2]


@axon.program(x=("m", "k"))
def even_columns_twice(x):
    return x[:, ::2] * 2.0 - x[:, ::2]


@axon.program(x=("m", "k"))
def after_first(x):
    return x[:, 1:] * 1.0


@axon.program(x=("m", "k"))
def after_first_twice(x):
    return x[:, 1:] + x[:, 1:] - x[:, 1:]


def test_a_mean_assumes_nothing():
    v = verdict(mean, sum_over_k)
    assert v.status is Status.PROVED and v.reason == "equal for all sizes"


def test_centred_values_vanish_at_one_column():
    v = verdict(centred_ratio, ones)
    assert v.status is Status.PROVED and "k >= 2" in v.conditions
    assert "divisors are non-zero" in v.assumptions
    assert not v.covers({"m": 2, "k": 1})
    assert differ_at(centred_ratio, ones, {"m": 2, "k": 1})


def test_strided_slice_states_divisibility():
    v = verdict(even_columns, even_columns_twice)
    assert v.status is Status.PROVED and v.conditions == ("k even",)
    assert not v.covers({"m": 2, "k": 3}) and v.covers({"m": 2, "k": 4})


def test_positive_intermediate_sizes_are_stated():
    v = verdict(after_first, after_first_twice)
    assert v.status is Status.PROVED and v.conditions == ("k >= 2",)


def test_a_divisor_zero_at_every_size_is_no_proof():
    @axon.program(x=("m", "k"))
    def zero_ratio(x):
        z = x - x
        return x * z / z

    @axon.program(x=("m", "k"))
    def same(x):
        return x * 1.0

    assert verdict(zero_ratio, same).status is not Status.PROVED


# --- 4. bad input is one line, exit 2 ------------------------------------------------------------
@pytest.mark.parametrize("constant", ['float("inf")', 'float("nan")', "10**400"])
def test_non_finite_constants_are_bad_input(tmp_path, capsys, constant):
    path = tmp_path / "p.py"
    path.write_text(f"import axon\n@axon.program(x=('m', 'k'))\ndef f(x):\n    return x * {constant}\n")
    assert main(["verify", f"{path}:f", f"{path}:f"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a finite float64 number" in err


def test_large_finite_constants_still_work():
    @axon.program(x=("m", "k"))
    def big(x):
        return x * 1e300

    assert verdict(big, big).status is Status.PROVED


# --- 5. rounding is not a counterexample; a small exact difference is -----------------------------
@axon.program(x=("m", "k"))
def ident(x):
    return x


@axon.program(x=("m", "k"))
def through_1e10(x):
    return (x + 1e10) - 1e10


@axon.program(x=("m", "k"))
def exp_shifted(x):
    return axon.exp(x + 1000.0) * axon.exp(x * 0.0 - 1000.0)


@axon.program(x=("m", "k"))
def exp_plain(x):
    return axon.exp(x)


@axon.program(x=("m", "k"))
def softmax_800(x):
    e = axon.exp(800.0 * x)
    return e / e.sum(axis=1, keepdims=True)


@axon.program(x=("m", "k"))
def softmax_800_shifted(x):
    y = 800.0 * x
    e = axon.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@axon.program(x=("m", "k"))
def log_of_absorbed(x):
    # exp(x - 400) ~ 1e-174 vanishes into 1e12 at 100 digits (log(0) = -inf there), not at 200
    return axon.log((axon.exp(x - 400.0) + 1e12) - 1e12) + 400.0


@axon.program(x=("m", "k"))
def log_of_absorbed_off_by_one(x):
    return axon.log((axon.exp(x - 400.0) + 1e12) - 1e12) + 401.0


@axon.program(x=("m", "k"))
def times_1e12(x):
    return x * 1e12


@axon.program(x=("m", "k"))
def times_1e12_plus_1(x):
    return x * 1e12 + 1.0


@axon.program(x=("m", "k"))
def plus_1e_12(x):
    return x + 1e-12


@pytest.mark.parametrize("f, g", [(through_1e10, ident), (exp_shifted, exp_plain),
                                  (softmax_800, softmax_800_shifted), (log_of_absorbed, ident)])
def test_rounding_is_not_a_counterexample(f, g):
    assert verdict(f, g).status is Status.PROVED


@pytest.mark.parametrize("f, g", [(times_1e12, times_1e12_plus_1), (plus_1e_12, ident),
                                  (log_of_absorbed_off_by_one, ident)])
def test_small_exact_differences_are_refuted(f, g):
    v = verdict(f, g)
    assert v.status is Status.REFUTED and v.counterexample["a"] != v.counterexample["b"]


# --- 6. dimension names are local; inputs correspond by position --------------------------------
@axon.program(x=("m", "n"), w=("n", "p"))
def named_mn(x, w):
    return (x * 2.0) @ w


@axon.program(a=("rows", "cols"), b=("cols", "out"))
def named_rows(a, b):
    return a @ b + a @ b


@axon.program(a=("rows", "cols"), b=("cols", "out"))
def named_rows_wrong(a, b):
    return a @ b + a @ (b * 0.5)


@axon.program(x=("m", "m"), w=("m", "p"))
def square(x, w):
    return x @ w


def test_renamed_dimensions_prove():
    assert verdict(named_mn, named_rows).status is Status.PROVED


def test_renamed_dimensions_still_refute():
    assert verdict(named_mn, named_rows_wrong).status is Status.REFUTED


def test_inputs_that_do_not_correspond_are_bad_input():
    with pytest.raises(AxonError, match="do not correspond"):
        verdict(square, named_rows)


def test_strided_constant_stop_needs_only_the_last_index():
    @axon.program(x=("m", "k"))
    def every_other_of_8(x):
        return x[:, 0:8:2]

    assert {f.minimum for f in every_other_of_8.graph.constraints} == {7}
    assert every_other_of_8(np.ones((2, 7))).shape == (2, 4)


def test_narrowing_over_two_dimensions():
    @axon.program(x=("m", "k"), y=("m", "k"))
    def both_centred(x, y):
        d = (y * x.shape[1] - y.sum(axis=1, keepdims=True)) * (y * x.shape[0] - y.sum(axis=0, keepdims=True))
        return x * d / d

    @axon.program(x=("m", "k"), y=("m", "k"))
    def just_x(x, y):
        return x * 1.0

    v = verdict(both_centred, just_x)
    assert v.status is Status.PROVED and set(v.conditions) == {"k >= 2", "m >= 2"}
    assert not v.covers({"m": 1, "k": 3}) and not v.covers({"m": 3, "k": 1}) and v.covers({"m": 2, "k": 2})


def _scaled_and_back(c: int):
    """x * (k - c) / (k - c): NaN at k = c for every input, x elsewhere."""
    @axon.program(x=("m", "k"))
    def scaled_and_back(x):
        return x * (x.shape[1] - c) / (x.shape[1] - c)
    return scaled_and_back


@axon.program(x=("m", "k"))
def times_one(x):
    return x * 1.0


def test_a_size_divisor_zero_among_the_small_sizes_leaves_out_that_size_only():
    """k = 3 fails, among the small sizes the narrowing evaluates; the claim's k - 3 != 0 leaves
    it out, so no lower bound is taken (k >= 4 left out k = 1 and 2 too, and with k - 4 as the
    divisor every small size failed: "unknown")."""
    for c in (3, 4):
        f = _scaled_and_back(c)
        v = verdict(f, times_one)
        assert v.status is Status.PROVED and v.conditions == (f"-{c} + k != 0",), v
        assert v.covers({"m": 1, "k": 2}) and v.covers({"m": 1, "k": c + 1}) and not v.covers({"m": 5, "k": c})
        assert differ_at(f, times_one, {"m": 2, "k": c})


def test_a_size_the_programs_divide_by_is_non_zero_in_the_claim():
    """k = 5 fails, past the small sizes the narrowing evaluates: the claim states k - 5 != 0,
    and covers is false there."""
    f = _scaled_and_back(5)
    v = verdict(f, times_one)
    assert v.status is Status.PROVED and "-5 + k != 0" in v.conditions, v
    assert v.covers({"m": 2, "k": 4}) and v.covers({"m": 2, "k": 6}) and not v.covers({"m": 2, "k": 5})
    assert differ_at(f, times_one, {"m": 2, "k": 5})
    assert Verifier().check_nodes(f.graph.outputs[0], times_one.graph.outputs[0]).status is Status.UNKNOWN


def test_a_narrowed_claim_is_no_rewrite():
    """Rewrites apply at every size the program takes: propagation and synthesis use check_nodes."""
    v = Verifier().check_nodes(cancelled_in_sum.graph.outputs[0], plain_sum.graph.outputs[0])
    assert v.status is Status.UNKNOWN and "not proved at every size" in v.reason


def test_a_divisor_zero_on_part_of_the_inputs_does_not_narrow_by_chance():
    """relu(y).mean() is zero only where a row is <= 0: no size makes it zero for every input."""
    @axon.program(y=(2, "n"))
    def relu_mean(y):
        return axon.relu(y).mean(axis=1)

    @axon.program(y=(2, "n"))
    def relu_mean_cancelled(y):
        t = axon.relu(y).mean(axis=1)
        return t * (t / t)

    v = verdict(relu_mean, relu_mean_cancelled)
    assert not (v.proved and v.claim.narrowed)


def test_narrowing_ends_when_a_bound_does_not_help():
    from axon.verification.claim import narrowing

    small = [{"k": k, "n": n} for k in (1, 2, 3) for n in (1, 2, 3)]
    failing = [b for b in small if b["n"] == 3 or b["k"] == 1]
    facts = narrowing(small, failing)
    kept = [b for b in small if all(f.holds(b) for f in facts or [])]
    assert facts is None or not any(b in failing for b in kept)


def test_a_number_against_an_infinity_is_flagged():
    """relu(x*x / relu(x)) is inf where x < 0 and relu(x) is 0 there: a NumPy counterexample."""
    @axon.program(x=(2, "n"))
    def relu_x(x):
        return axon.relu(x)

    @axon.program(x=(2, "n"))
    def through_inf(x):
        return axon.relu(x * x / axon.relu(x))

    v = verdict(relu_x, through_inf)
    assert v.status is Status.REFUTED and np.isinf(v.counterexample["b"])


def _nested(depth, step):
    @axon.program(x=("m", "n"))
    def f(x):
        for _ in range(depth):
            x = step(x)
        return x
    return f


def test_a_polynomial_of_high_degree_is_expanded_in_bounded_time_or_left_undecided():
    """x := x * x + x nested: the degree doubles per level. Depth 7 (degree 128) proves in about a
    second; depth 10 would expand a product of 512 x 512 terms, past MAX_PRODUCT_TERMS: undecided
    at once, with the reason, instead of minutes of expansion."""
    v = Verifier().check_programs(_nested(7, lambda x: x * x + x).graph, _nested(7, lambda x: x * (x + 1.0)).graph)
    assert v.status is Status.PROVED, v
    v = Verifier().check_programs(_nested(10, lambda x: x * x + x).graph, _nested(10, lambda x: x * (x + 1.0)).graph)
    assert v.status is Status.UNKNOWN and "expands past" in v.reason, v


def test_a_claim_states_no_divisibility_every_size_has():
    """x[:, ::2][:, 1::2] of a 4*q-wide x is x[:, 2::4]: the programs' facts '2*q even', '4*q a
    multiple of 4' hold for every q, so the claim has no condition."""
    @axon.program(x=("m", "4*q"))
    def twice_strided(x):
        return x[:, ::2][:, 1::2]

    @axon.program(x=("m", "4*q"))
    def strided_by_four(x):
        return x[:, 2::4]

    v = verdict(twice_strided, strided_by_four)
    assert v.status is Status.PROVED and v.conditions == () and v.reason == "equal for all sizes", v


def test_one_divisibility_stated_once():
    """n even from a shape (minimum 0) and from a slice bound (minimum 1) is one fact in a claim."""
    from axon.semantics.sizes import Size, SizeFact
    from axon.verification.claim import simplify

    n = Size.of("n")
    assert simplify([SizeFact(n, 2, 0), SizeFact(n, 2, 1)]) == (SizeFact(n, 2, 1),)
