"""Operator propagation finds the issue's identities with no rule written for any of them.

Each test traces a program, runs propagation with the SMT verifier, and asserts that the variant
we expect (traced separately, as a user would write it) is among the extracted variants. Each
identity has a must-reject twin: a look-alike that is false, whose variant must not appear.
"""
import pathlib
import re

import pytest

import axon
import axon.frontend.functions as F
from axon.rewriting import discover
from axon.suite import EPS, SUITE


def variants_of(program, checker, limit=200):
    nu, stats = discover(program.graph, checker)
    return nu, stats, {v.graph.outputs: v for v in nu.extract_variants(limit)}


def assert_finds(program, expected, checker):
    nu, stats, variants = variants_of(program, checker)
    assert expected.graph.outputs in variants, (
        f"{expected.name} not among {len(variants)} variants of {program.name}:\n"
        + "\n\n".join(v.graph.pretty() for v in variants.values()))
    found = variants[expected.graph.outputs]
    assert found.rewrites, "the expected variant must come from at least one rewrite"
    for pid in found.rewrites:
        proof = nu.proofs[pid]
        assert proof.status == "PROVED" and proof.numeric.count("agree") >= 2, proof
    assert stats.unsound == 0
    return nu, found


def test_per_row_scale_moves_after_matmul(checker):  # (X*s)@W = (X@W)*s, s per row
    @axon.program(x=("m", "k"), s=("m", 1), w=("k", "n"))
    def scaled(x, s, w):
        return (x * s) @ w

    @axon.program(x=("m", "k"), s=("m", 1), w=("k", "n"))
    def after(x, s, w):
        return (x @ w) * s

    assert_finds(scaled, after, checker)


def test_per_column_scale_does_not_move_after_matmul(checker):  # twin: (X*c)@W != (X@W)*c for c(1, k)
    @axon.program(x=("m", "k"), c=(1, "k"), w=("k", "k"))
    def scaled(x, c, w):
        return (x * c) @ w

    @axon.program(x=("m", "k"), c=(1, "k"), w=("k", "k"))
    def wrong(x, c, w):
        return (x @ w) * c

    _, stats, variants = variants_of(scaled, checker)
    assert wrong.graph.outputs not in variants
    assert stats.candidates >= 1  # it type-checks, so it was tried and refuted


def test_division_by_row_statistic_moves_after_matmul(checker):  # (X/s)@W = (X@W)/s
    @axon.program(x=("m", "k"), s=("m", 1), w=("k", "n"))
    def divided(x, s, w):
        return (x / s) @ w

    @axon.program(x=("m", "k"), s=("m", 1), w=("k", "n"))
    def after(x, s, w):
        return (x @ w) / s

    assert_finds(divided, after, checker)


def test_sum_distributes_over_matmul(checker):  # (X+Y)@W = X@W + Y@W: clone degree 2
    @axon.program(x=("m", "k"), y=("m", "k"), w=("k", "n"))
    def summed(x, y, w):
        return (x + y) @ w

    @axon.program(x=("m", "k"), y=("m", "k"), w=("k", "n"))
    def distributed(x, y, w):
        return x @ w + y @ w

    nu, found = assert_finds(summed, distributed, checker)
    assert "degree 2" in nu.proofs[found.rewrites[0]].rewrite


def test_product_does_not_distribute_over_matmul(checker):  # twin: (X*Y)@W != (X@W)*(Y@W)
    @axon.program(x=("m", "k"), y=("m", "k"), w=("k", "k"))
    def product(x, y, w):
        return (x * y) @ w

    @axon.program(x=("m", "k"), y=("m", "k"), w=("k", "k"))
    def wrong(x, y, w):
        return (x @ w) * (y @ w)

    _, _, variants = variants_of(product, checker)
    assert wrong.graph.outputs not in variants and len(variants) == 1


def test_transpose_of_product_swaps_operands(checker):  # (XY)^T = Y^T X^T: the permuted degree-2 clone
    nu, found = assert_finds(SUITE["matmul_transpose"].program, _transposed_product(), checker)
    assert "reordered (1, 0)" in nu.proofs[found.rewrites[0]].rewrite


def _transposed_product():
    @axon.program(x=("m", "k"), w=("k", "n"))
    def swapped(x, w):
        return w.T @ x.T

    return swapped


def test_batched_transpose_of_product(checker):
    @axon.program(x=("b", "m", "k"), w=("b", "k", "n"))
    def batched(x, w):
        return (x @ w).transpose(0, 2, 1)

    @axon.program(x=("b", "m", "k"), w=("b", "k", "n"))
    def swapped(x, w):
        return w.transpose(0, 2, 1) @ x.transpose(0, 2, 1)

    assert_finds(batched, swapped, checker)


@pytest.mark.parametrize("shape", [(), (1, 1)])
def test_scalar_factor_moves_out_of_matmul(checker, shape):  # (aA)B = a(AB)
    @axon.program(a=shape, x=("m", "k"), w=("k", "n"))
    def scaled(a, x, w):
        return (a * x) @ w

    @axon.program(a=shape, x=("m", "k"), w=("k", "n"))
    def after(a, x, w):
        return a * (x @ w)

    assert_finds(scaled, after, checker)


def test_constant_factor_moves_out_of_matmul(checker):
    @axon.program(x=("m", "k"), w=("k", "n"))
    def scaled(x, w):
        return (2.0 * x) @ w

    @axon.program(x=("m", "k"), w=("k", "n"))
    def after(x, w):
        return 2.0 * (x @ w)

    assert_finds(scaled, after, checker)


def test_activation_does_not_move_after_matmul(checker):  # twin: relu(X)@W != relu(X@W)
    @axon.program(x=("m", "k"), w=("k", "n"))
    def wrong(x, w):
        return F.relu(x @ w)

    _, _, variants = variants_of(SUITE["relu_matmul"].program, checker)
    assert wrong.graph.outputs not in variants and len(variants) == 1


def test_rmsnorm_normalisation_runs_after_matmul(checker):
    @axon.program(x=("m", "k"), w=("k", "n"))
    def after(x, w):
        return (x @ w) / F.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS)

    assert_finds(SUITE["rmsnorm_matmul"].program, after, checker)


def test_softmax_normalisation_runs_after_matmul(checker):
    @axon.program(x=("m", "k"), w=("k", "n"))
    def after(x, w):
        e = F.exp(x - x.max(axis=-1, keepdims=True))
        return (e @ w) / e.sum(axis=-1, keepdims=True)

    assert_finds(SUITE["softmax_matmul"].program, after, checker)


def test_gqa_normalisation_runs_after_the_value_matmul(checker):
    @axon.program(q=("kv", "g", "s", "d"), k=("kv", 1, "t", "d"), v=("kv", 1, "t", "d"))
    def after(q, k, v):
        scores = q @ k.transpose(0, 1, 3, 2)
        e = F.exp(scores - scores.max(axis=-1, keepdims=True))
        return (e @ v) / e.sum(axis=-1, keepdims=True)

    assert_finds(SUITE["gqa"].program, after, checker)


def test_gated_mlp_has_no_false_variant_and_stays_small(checker):
    nu, stats, variants = variants_of(SUITE["gated_mlp"].program, checker)
    assert len(variants) == 1 and stats.proved == 0 and stats.candidates >= 1
    assert nu.num_classes == 9  # x, w1, w2, w3 and five operators, x shared by both projections


def test_no_rule_is_written_for_any_operator():
    """Propagation and its language name no tensor operator beyond the leaves: rewrites are found."""
    source = pathlib.Path(axon.__file__).parent / "rewriting"
    for name in ("propagation.py", "language.py"):
        named = set(re.findall(r"Op\.([A-Z_]+)", (source / name).read_text()))
        assert named <= {"INPUT", "CONST"}, (name, named)
