"""The lemmas the verifier relies on, as data: a statement, why it holds, and a concrete check.

Structural lemmas are applied by the term constructors (axon/verification/terms.py), ground lemmas
are instances the solver receives at the terms in play (axon/verification/smt.py). Every entry's
`check(rng, n)` returns two arrays that must agree when the lemma holds at extent `n`; a test runs
each at several sizes (TASO's practice: an axiom is checked concretely before it is trusted).
Sizes are >= 1 and domain assumptions (divisor != 0, sqrt argument >= 0, log argument > 0) hold.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Lemma:
    name: str
    statement: str
    why: str
    check: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def _v(rng, n):
    return rng.standard_normal(n)


LEMMAS: dict[str, Lemma] = {lemma.name: lemma for lemma in [
    # -- folds ---------------------------------------------------------------------------
    Lemma("fold_alpha", "fold_r b(r) = fold_s b(s)", "the binder's name is not part of the value",
          lambda rng, n: (lambda x: (np.sum([x[r] for r in range(n)]), np.sum([x[s] for s in range(n)])))(_v(rng, n))),
    Lemma("fold_linear", "sum_r (a(r) + b(r)) = sum_r a(r) + sum_r b(r)", "addition is associative and commutative",
          lambda rng, n: (lambda a, b: (np.sum(a + b), np.sum(a) + np.sum(b)))(_v(rng, n), _v(rng, n))),
    Lemma("fold_factor", "sum_r c * b(r) = c * sum_r b(r), c independent of r", "distributivity",
          lambda rng, n: (lambda c, b: (np.sum(c * b), c * np.sum(b)))(rng.standard_normal(), _v(rng, n))),
    Lemma("fold_const", "sum_{r<n} c = n * c", "n copies of c",
          lambda rng, n: (lambda c: (np.sum(np.full(n, c)), n * c))(rng.standard_normal())),
    Lemma("fold_swap", "fold_i fold_j b(i, j) = fold_j fold_i b(i, j), extents independent of i and j",
          "one associative and commutative combine over a rectangle, in either order",
          lambda rng, n: (lambda x: (np.array([sum(sum(x[i, j] for j in range(n + 1)) for i in range(n)),
                                               max(max(x[i, j] for j in range(n + 1)) for i in range(n))]),
                                     np.array([sum(sum(x[i, j] for i in range(n)) for j in range(n + 1)),
                                               max(max(x[i, j] for i in range(n)) for j in range(n + 1))])))(
              rng.standard_normal((n, n + 1)))),
    Lemma("fold_split", "fold_{r < q c} b(r) = fold_{i < q} fold_{k < c} b(c i + k)",
          "r -> (r div c, r mod c) is a bijection of [0, q c) onto [0, q) x [0, c)",
          lambda rng, n: (lambda x, c: (np.array([x.sum(), x.max()]),
                                        np.array([sum(sum(x[c * i + k] for k in range(c)) for i in range(n)),
                                                  max(max(x[c * i + k] for k in range(c)) for i in range(n))])))(
              rng.standard_normal(3 * n), 3)),
    Lemma("fold_cases", "fold_{r < E} b(r) = fold_{r < k} b(r) (+) fold_{r < E - k} b(r + k), 1 <= k <= E - 1, "
          "k an integer (the integer threshold of r's comparison with c: ceil(c) for a constant c), "
          "with a comparison of r against k decided on each side",
          "[0, E) is the disjoint union of [0, k) and k + [0, E - k); combine is associative and commutative",
          lambda rng, n: (lambda x, k: (np.array([x.sum(), x.max()]),
                                        np.array([x[:k].sum() + x[k:].sum(), max(x[:k].max(), x[k:].max())])))(
              rng.standard_normal(n + 1), max(1, n // 2))),
    Lemma("index_split", "floor((q b + r) / b) = q + floor(r / b), (q b + r) mod b = r mod b; integers, b > 0",
          "q b is a multiple of b", lambda rng, n: (lambda q, r, b: (
              np.concatenate([(q * b + r) // b, (q * b + r) % b]), np.concatenate([q + r // b, r % b])))(
              rng.integers(-9, 9, n), rng.integers(-20, 20, n), n + 1)),
    Lemma("index_range", "floor(r / b) = 0 and r mod b = r for 0 <= r < b", "definition of floor division",
          lambda rng, n: (lambda r: (np.concatenate([r // (n + 1), r % (n + 1)]), np.concatenate([0 * r, r])))(
              rng.integers(0, n + 1, n))),
    Lemma("compare_range", "for integers with 0 <= r < b: b - r > 0 and r - b >= 0 is false; a comparison "
          "is decided where the ranges of its indices decide it (a concatenation's branch on an index inside a fold)",
          "0 <= r <= b - 1", lambda rng, n: (lambda r: (np.concatenate([(n + 1) - r > 0, r - (n + 1) >= 0]),
                                                         np.concatenate([r >= 0, r < 0])))(rng.integers(0, n + 1, n))),
    Lemma("index_nest", "floor(floor(x / c) / b) = floor(x / (c b)) for b, c > 0", "nested floor division",
          lambda rng, n: (lambda x: ((x // 3) // (n + 1), x // (3 * (n + 1))))(rng.integers(-100, 100, n))),
    Lemma("fold_unroll", "fold_{r<n} b(r) = b(0) (+) ... (+) b(n-1) for a constant n",
          "the definition of a fold over a known extent",
          lambda rng, n: (lambda x: (np.array([np.sum(x), np.max(x)]),
                                     np.array([sum(x[r] for r in range(n)), max(x[r] for r in range(n))])))(_v(rng, n))),
    Lemma("extremum_shift", "max_r (b(r) + c) = max_r b(r) + c, n >= 1", "x -> x + c is monotone",
          lambda rng, n: (lambda c, b: (np.max(b + c), np.max(b) + c))(rng.standard_normal(), _v(rng, n))),
    Lemma("extremum_scale", "max_r c*b(r) = c * max_r b(r) if c >= 0, = c * min_r b(r) if c < 0; n >= 1",
          "x -> c x is monotone for c >= 0 and antitone for c < 0 (c = 0: both sides 0)",
          lambda rng, n: (lambda c, b: (np.array([np.max(c * b), np.max(-c * b), np.max(0 * b)]),
                                        np.array([c * np.max(b), -c * np.min(b), 0.0])))(abs(rng.standard_normal()),
                                                                                        _v(rng, n))),
    Lemma("extremum_const", "max_{r<n} c = c, n >= 1", "a non-empty range of equal values",
          lambda rng, n: (lambda c: (np.max(np.full(n, c)), c))(rng.standard_normal())),
    # -- interpreted max/min --------------------------------------------------------------
    Lemma("extremum_trivial", "max(a, a) = a; max(a, b) = a if a - b is a positive constant", "definition of max",
          lambda rng, n: (lambda a: (np.maximum(a, a) + np.maximum(a + 0.5, a), a + a + 0.5))(_v(rng, n))),
    Lemma("extremum_negate", "max(-a, -b) = -min(a, b); min(-a, -b) = -max(a, b)", "x -> -x is antitone",
          lambda rng, n: (lambda a, b: (np.array([np.maximum(-a, -b), np.minimum(-a, -b)]),
                                        np.array([-np.minimum(a, b), -np.maximum(a, b)])))(_v(rng, n), _v(rng, n))),
    # -- exp / log / sqrt -----------------------------------------------------------------
    Lemma("exp_add", "exp(a + b) = exp(a) * exp(b)", "the exponential is a homomorphism from + to *",
          lambda rng, n: (lambda a, b: (np.exp(a + b), np.exp(a) * np.exp(b)))(_v(rng, n), _v(rng, n))),
    Lemma("exp_int", "exp(k a) = exp(a)^k for integer k", "exp_add k times (and exp(-a) = 1/exp(a))",
          lambda rng, n: (lambda a: (np.concatenate([np.exp(3 * a), np.exp(-2 * a)]),
                                     np.concatenate([np.exp(a) ** 3, np.exp(a) ** -2])))(_v(rng, n))),
    Lemma("exp_zero", "exp(0) = 1", "definition", lambda rng, n: (np.exp(np.zeros(n)), np.ones(n))),
    Lemma("exp_log", "exp(k log a) = a^k for a > 0, integer k", "exp and log are inverse on the positive reals",
          lambda rng, n: (lambda a: (np.exp(2 * np.log(a)), a ** 2))(np.abs(_v(rng, n)) + 0.1)),
    Lemma("log_exp", "log(prod_i exp(a_i)^k_i) = sum_i k_i a_i", "log is the inverse of exp, exp_add",
          lambda rng, n: (lambda a, b: (np.log(np.exp(a) ** 2 * np.exp(b) ** -1), 2 * a - b))(_v(rng, n), _v(rng, n))),
    Lemma("sqrt_square", "sqrt(p)^e = p^trunc(e/2) * sqrt(p)^(e - 2 trunc(e/2)) for p >= 0",
          "sqrt(p)^2 = p for p >= 0",
          lambda rng, n: (lambda p: (np.concatenate([np.sqrt(p) ** 2, np.sqrt(p) ** 3, np.sqrt(p) ** -3]),
                                     np.concatenate([p, p * np.sqrt(p), np.sqrt(p) ** -1 / p])))(
              np.abs(_v(rng, n)) + 0.1)),
    # -- rational arithmetic ----------------------------------------------------------------
    Lemma("laurent", "a^i * a^j = a^(i+j); a^0 = 1 for a != 0", "exponent laws in a field",
          lambda rng, n: (lambda a: (a ** 2 * a ** -3 * (a / a), a ** -1))(_v(rng, n))),
    Lemma("content", "1 / (c g q) = (1/c) g^-1 q^-1 for a product with c g q != 0", "inverse of a product",
          lambda rng, n: (lambda c, g, q: (1 / (c * g * q), (1 / c) / g / q))(2.5, _v(rng, n), _v(rng, n))),
    Lemma("group_expand", "[q]^k = q^k for k >= 1", "a group stands for its polynomial",
          lambda rng, n: (lambda a, b: ((a + b) ** 2, a * a + 2 * a * b + b * b))(_v(rng, n), _v(rng, n))),
    # -- ground lemmas the solver receives ----------------------------------------------------
    Lemma("exp_pos", "exp(t) > 0", "range of exp",
          lambda rng, n: (np.exp(10 * _v(rng, n)) > 0, np.ones(n, dtype=bool))),
    Lemma("sqrt_nonneg", "sqrt(t) >= 0 and sqrt(t)^2 = t where t >= 0", "sqrt is the non-negative root",
          lambda rng, n: (lambda t: (np.concatenate([np.sqrt(t) >= 0, np.isclose(np.sqrt(t) ** 2, t)]),
                                     np.ones(2 * n, dtype=bool)))(np.abs(_v(rng, n)))),
    Lemma("nonzero_divisor", "an atom under a negative power is != 0",
          "it is a divisor of the program (domain assumption), a factor of one (content), or exp (exp_pos)",
          lambda rng, n: (lambda a: (a * (1 / a), np.ones(n)))(_v(rng, n))),
]}
