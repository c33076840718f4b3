"""Every lemma the verifier relies on, checked on concrete sizes; and the symbolic encoding (which
applies the structural lemmas while it builds terms) checked against NumPy on every benchmark."""
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from axon.semantics.evaluate import evaluate
from axon.suite import SUITE
from axon.verification import terms as T
from axon.verification.lemmas import LEMMAS
from axon.verification.symbolic import Encoder, SymbolicAlgebra, output_index

SOURCES = [Path(T.__file__), Path(T.__file__).with_name("smt.py")]


@pytest.mark.parametrize("name", sorted(LEMMAS))
def test_verify_lemma_holds_on_concrete_sizes(name):
    lemma = LEMMAS[name]
    for n, seed in itertools.product((1, 2, 5, 17), range(3)):
        lhs, rhs = lemma.check(np.random.default_rng(seed), n)
        assert np.allclose(lhs, rhs, rtol=1e-12, atol=1e-12), (name, n, seed, lhs, rhs)


def test_verify_every_named_lemma_is_in_the_table():
    """Rewrites in terms.py and lemmas in smt.py cite lemma names in backquotes or comments."""
    cited = set()
    for path in SOURCES:
        text = path.read_text()
        cited |= set(re.findall(r"`([a-z]+_[a-z_]+|laurent|content)`", text))
        cited |= set(re.findall(r"# ([a-z]+_[a-z_]+):", text))
    cited -= {"check_graphs"}
    assert cited and cited <= set(LEMMAS), cited - set(LEMMAS)


@pytest.mark.parametrize("name", sorted(SUITE))
def test_verify_symbolic_terms_agree_with_numpy(name):
    program = SUITE[name].program
    binding = {d: 2 + i for i, d in enumerate(program.dims)}
    arrays = program.random_inputs(binding, dtype="float64", seed=1)
    outputs = evaluate(program.graph, arrays, binding)
    enc = Encoder(SymbolicAlgebra())
    for k, out in enumerate(program.graph.outputs):
        term = enc.term(out, output_index(out.rank))
        for pos in itertools.islice(np.ndindex(outputs[k].shape), 0, None, 5):
            env = {**{f"dim:{d}": v for d, v in binding.items()}, **{f"idx:i{j}": p for j, p in enumerate(pos)}}
            assert T.evaluate(term, env, arrays) == pytest.approx(outputs[k][pos], rel=1e-9, abs=1e-12)


def test_verify_alpha_equivalent_folds_share_a_key():
    x = lambda r: T.read("x", [T.var("i0", "idx"), r])
    n = T.var("n", "dim")
    first = T.fold("add", n, T.Var("_r1", "bound"), x(T.var("_r1", "bound")))
    second = T.fold("add", n, T.Var("_r9", "bound"), x(T.var("_r9", "bound")) * 1)
    assert first == second


def test_verify_fold_normalisations():
    n, c = T.var("n", "dim"), T.read("c", [T.var("i0", "idx")])
    r = T.Var("_r1", "bound")
    x = T.read("x", [T.Poly.atom(r)])
    plain = T.fold("add", n, r, x)
    assert T.fold("add", n, r, c * x + 3 * x) == c * plain + 3 * plain           # fold_linear, fold_factor
    assert T.fold("add", n, r, c) == n * c                                         # fold_const
    big = T.fold("max", n, r, x)
    assert T.fold("max", n, r, x + c) == big + c                                   # extremum_shift
    assert T.fold("max", n, r, -2 * x) == -2 * T.fold("min", n, r, x)             # extremum_scale
    assert T.fold("max", n, r, c) == c                                             # extremum_const
    assert T.fold("add", T.Poly.const(2), r, x) == T.read("x", [0]) + T.read("x", [1])  # fold_unroll


def test_verify_exp_sqrt_normalisations():
    a, b = T.read("a", []), T.read("b", [])
    assert T.exp(a - b) == T.exp(a) / T.exp(b)                                     # exp_add, exp_int
    assert T.exp(T.log(a) * 2) == a * a                                            # exp_log
    assert T.log(T.exp(a) * T.exp(b)) == a + b                                     # log_exp
    s = T.unary("sqrt", a + b)
    assert s * s == a + b and s ** -2 == T.inverse(a + b)                          # sqrt_square
    assert (a + b) * T.inverse(2 * (a + b) * a) == T.Poly.const(T.Fraction(1, 2)) * T.inverse(a) * (a + b) / (a + b)
