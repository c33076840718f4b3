"""Ground SMT queries: a canonical term difference, its side conditions, and one z3 call.

A `Query` states: for positive integer dimensions meeting the size facts (divisibility, minimum
sizes) and non-empty-size preconditions, for an index inside the output (and fold binders inside
their extents), under the domain assumptions, is `difference` 0? (`claim` may ask `!= 0`, `> 0`
or `>= 0` instead: whether a domain assumption follows from the sizes alone.)
Its translation is quantifier-free: tensors are uninterpreted functions Int^r -> Real, exp/log/
sqrt/tanh uninterpreted functions Real -> Real, max/min if-then-else, and each distinct canonical
fold one fresh real constant (sound: a fold's value is some real, and equal folds already share one
key). Lemmas that remain for the solver are ground instances at the terms in play (`exp_pos`,
`exp_add` for pairs of exp atoms whose arguments add up to 0 or to a third one's,
`sqrt_nonneg`, `sqrt_square`, `nonzero_divisor` for divisors that read data or are sizes alone).

Each call gets its own z3 Context with a fixed timeout and random seed: contexts share nothing, so
results do not depend on earlier queries, and `unknown` or a timeout is reported, never guessed.
The call runs in a forked child with a hard wall-clock limit (see HARD_LIMIT_FACTOR).
"""
from __future__ import annotations

import math
import os
import pickle
import select
import signal
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

import z3

from axon.errors import UnsupportedError
from axon.verification.terms import COMPARISONS, Atom, Fn, Fold, Group, Poly, Read, Var, reads_data

# z3's nonlinear arithmetic can run far past its own timeout, rlimit and interrupt (measured: a 2 s
# query stuck 21 s inside one non-cancellable step, depending on the seed), so each query runs in a
# forked child that is killed at HARD_LIMIT_FACTOR times the timeout (plus start-up slack).
HARD_LIMIT_FACTOR = 2.5
HARD_LIMIT_SLACK_S = 1.0


@dataclass(frozen=True)
class Query:
    difference: Poly
    assumptions: tuple[tuple[str, Poly], ...]       # (relation to 0, term): domain assumptions
    bounds: tuple[tuple[Poly, Poly], ...]           # (index, size): 0 <= index < size
    positive: tuple[Poly, ...]                      # sizes that must be >= 1
    facts: tuple[tuple[Poly, int, Optional[int]], ...]  # (size, d, n): d divides size, size >= n (None: any)
    claim: str = "=="                               # prove `difference <claim> 0`
    label: str = ""

    @property
    def key(self) -> str:
        """Canonical text of the query (index variables are named by output axis), the memo key."""
        return " ; ".join([f"{self.claim} 0: {self.difference.key}",
                           *sorted(f"{r} 0: {p.key}" for r, p in self.assumptions),
                           *(f"0 <= {i.key} < {s.key}" for i, s in self.bounds),
                           *sorted(f"{p.key} >= 1" for p in self.positive),
                           *sorted(f"{d} | {p.key}" + ("" if n is None else f" >= {n}") for p, d, n in self.facts)])


@dataclass
class Outcome:
    result: str  # "unsat" (goal proved), "sat", "unknown"
    reason: str
    seconds: float
    model_sizes: Optional[dict[str, int]] = None
    vacuous: bool = False


class _Translation:
    """Poly -> z3 over one context, collecting ground lemmas for the atoms it meets."""

    def __init__(self, ctx: z3.Context):
        self.ctx = ctx
        self.atoms: dict[Atom, z3.ExprRef] = {}
        self.lemmas: list[z3.BoolRef] = []
        self.dims: dict[str, z3.ArithRef] = {}
        self.folds = 0

    def num(self, value: Fraction) -> z3.ArithRef:
        return z3.RealVal(f"{value.numerator}/{value.denominator}", self.ctx)

    def real(self, p: Poly) -> z3.ArithRef:
        total = None
        for m, c in p.terms:
            term = None if c == 1 and m else self.num(c)
            for a, e in m:
                base = self.atom(a)
                power = base
                for _ in range(abs(e) - 1):
                    power = power * base
                if e < 0:
                    if not _positional(a):  # nonzero_divisor: an atom under a negative power divides
                        self.lemmas.append(base != 0)
                    power = 1 / power
                term = power if term is None else term * power
            total = term if total is None else total + term
        return total if total is not None else self.num(Fraction(0))

    def integer(self, p: Poly) -> z3.ArithRef:
        # (n - 1)/2 of an odd n: the size facts make the whole an integer, not each term (n/2 and
        # -1/2 floored apart give one less), so the terms are summed over a common denominator
        common = 1
        for _, c in p.terms:
            common = common * c.denominator // math.gcd(common, c.denominator)
        total = z3.IntVal(0, self.ctx)
        for m, c in p.terms:
            term = z3.IntVal(int(c * common), self.ctx)
            for a, e in m:
                if e < 0:
                    raise UnsupportedError(f"index term {p.key} divides")
                for _ in range(e):
                    term = term * self.int_atom(a)
            total = total + term
        if common != 1:
            total = total / z3.IntVal(common, self.ctx)
        return z3.simplify(total)

    def int_atom(self, a: Atom) -> z3.ArithRef:
        if isinstance(a, Var) and a.kind in ("dim", "idx", "bound"):
            return self.var(a)
        if isinstance(a, Fn) and a.op in ("floordiv", "mod"):
            x, y = (self.integer(arg) for arg in a.args)
            return x / y if a.op == "floordiv" else x % y
        raise UnsupportedError(f"{a.key} is not an index term")

    def var(self, a: Var) -> z3.ArithRef:
        if a.key not in self.dims:
            self.dims[a.key] = z3.Int(a.key, self.ctx)
        return self.dims[a.key]

    def atom(self, a: Atom) -> z3.ArithRef:
        if a in self.atoms:
            return self.atoms[a]
        if isinstance(a, Var) or (isinstance(a, Fn) and a.op in ("floordiv", "mod")):
            value = z3.ToReal(self.int_atom(a))
        elif isinstance(a, Read):
            sorts = [z3.IntSort(self.ctx)] * len(a.index) + [z3.RealSort(self.ctx)]
            fn = z3.Function(f"T_{a.tensor}", *sorts)
            value = fn(*(self.integer(i) for i in a.index)) if a.index else z3.Real(f"T_{a.tensor}", self.ctx)
        elif isinstance(a, Group):
            value = self.real(a.poly)
        elif isinstance(a, Fold):
            value = z3.Real(f"fold{self.folds}", self.ctx)
            self.folds += 1
        elif a.op in ("max", "min"):
            x, y = (self.real(arg) for arg in a.args)
            value = z3.If(x >= y, x, y) if a.op == "max" else z3.If(x <= y, x, y)
        elif a.op in COMPARISONS:
            d = self.real(a.args[0])
            holds = {"ge": d >= 0, "gt": d > 0, "eq": d == 0}[a.op]
            value = z3.If(holds, z3.RealVal(1, self.ctx), z3.RealVal(0, self.ctx))
        elif a.op == "where":
            c, x, y = (self.real(arg) for arg in a.args)
            value = z3.If(c != 0, x, y)
        else:
            fn = z3.Function(a.op, z3.RealSort(self.ctx), z3.RealSort(self.ctx))
            arg = self.real(a.args[0])
            value = fn(arg)
            if a.op == "exp":
                self.lemmas.append(value > 0)  # exp_pos: exp(t) > 0
            elif a.op == "sqrt":
                # sqrt_nonneg, sqrt_square: sqrt(t) >= 0 and sqrt(t)^2 = t where t >= 0
                self.lemmas.append(z3.Implies(arg >= 0, z3.And(value >= 0, value * value == arg)))
        self.atoms[a] = value
        return value


def _positional(a: Atom) -> bool:
    """Whether `a` is made of output indices and sizes alone. Such a divisor (1 / (arange(k) + 1 - n)
    in a concatenation's right part, built for every position) is zero at positions where its part
    is not taken; a lemma that it is non-zero would leave those positions out of the proof."""
    p = Poly.atom(a)
    return bool(p.free) and not reads_data(p)


def _exp_add(tr: _Translation) -> list[z3.BoolRef]:
    """exp(a) exp(b) = exp(a + b) for the exp atoms in play: the term constructors already merge
    exps of one monomial, but exp(1000) exp(-1000) are two constants' atoms."""
    exps = {a.args[0]: v for a, v in tr.atoms.items() if isinstance(a, Fn) and a.op == "exp"}
    lemmas = []
    args = sorted(exps, key=lambda p: p.key)
    for i, p in enumerate(args):
        for q in args[i + 1:]:
            total = p + q
            if total == Poly.const(0):
                lemmas.append(exps[p] * exps[q] == 1)
            elif total in exps:
                lemmas.append(exps[p] * exps[q] == exps[total])
    return lemmas


def _side_conditions(tr: _Translation, q: Query) -> list[z3.BoolRef]:
    facts: list[z3.BoolRef] = []
    for relation, p in q.assumptions:
        x = tr.real(p)
        facts.append({"!=": x != 0, ">": x > 0, ">=": x >= 0}[relation])
    for index, size in q.bounds:
        i = tr.real(index)
        facts += [i >= 0, i < tr.real(size)]
    facts += [tr.real(p) >= 1 for p in q.positive]
    for p, d, n in q.facts:
        if d > 1:
            facts.append(z3.ToReal(z3.Int(f"mult{len(facts)}", tr.ctx)) * d == tr.real(p))
        if n is not None:
            facts.append(tr.real(p) >= n)
    return facts


NEGATED = {"==": lambda x: x != 0, "!=": lambda x: x == 0, ">": lambda x: x <= 0, ">=": lambda x: x < 0}


def solve(q: Query, timeout_ms: int, seed: int) -> Outcome:
    """`_solve` in a child process with a hard wall-clock limit (in-process where fork is missing)."""
    if not hasattr(os, "fork"):
        return _solve(q, timeout_ms, seed)
    start = time.perf_counter()
    limit = timeout_ms / 1000 * HARD_LIMIT_FACTOR + HARD_LIMIT_SLACK_S
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: answer through the pipe, never return into the caller's code
        code = 0
        try:
            os.close(read_end)
            data = pickle.dumps(_solve(q, timeout_ms, seed))
            with os.fdopen(write_end, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    try:
        while True:
            left = limit - (time.perf_counter() - start)
            ready, _, _ = select.select([read_end], [], [], max(0.0, left))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                return Outcome("unknown", f"solver timeout after {timeout_ms} ms (stopped at {limit:.1f} s)",
                               time.perf_counter() - start)
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if not chunks:
        return Outcome("unknown", "the solver process failed", time.perf_counter() - start)
    return pickle.loads(b"".join(chunks))


def _solve(q: Query, timeout_ms: int, seed: int) -> Outcome:
    """Is `q.difference` 0 under the side conditions? `unsat` of its negation proves it; a proof is
    kept only if the side conditions themselves are satisfiable (the proof is not vacuous)."""
    start = time.perf_counter()
    ctx = z3.Context()
    try:
        tr = _Translation(ctx)
        goal = NEGATED[q.claim](tr.real(q.difference))
        facts = _side_conditions(tr, q) + _exp_add(tr)
        for var in list(tr.dims):
            if var.startswith("dim:"):
                facts.append(tr.dims[var] >= 1)
    except UnsupportedError as err:
        return Outcome("unknown", f"cannot encode the query: {err}", time.perf_counter() - start)

    def check(extra: list) -> tuple[z3.CheckSatResult, z3.Solver]:
        solver = z3.Solver(ctx=ctx)
        solver.set("timeout", int(timeout_ms))
        solver.set("random_seed", int(seed))
        solver.add(*facts, *tr.lemmas, *extra)
        return solver.check(), solver

    result, solver = check([goal])
    if result == z3.unsat:
        sat_assumptions, vac = check([])
        seconds = time.perf_counter() - start
        if sat_assumptions == z3.sat:
            return Outcome("unsat", "proved", seconds)
        why = "unsatisfiable" if sat_assumptions == z3.unsat else f"not shown satisfiable ({vac.reason_unknown()})"
        return Outcome("unknown", f"the proof's assumptions are {why}: the proof would be vacuous", seconds,
                       vacuous=True)
    seconds = time.perf_counter() - start
    if result == z3.sat:
        model = solver.model()
        sizes = {}
        for key, v in tr.dims.items():
            if key.startswith("dim:"):
                value = model.eval(v, model_completion=True)
                sizes[key[4:]] = value.as_long()
        return Outcome("sat", "the solver found a model of the abstracted query", seconds, model_sizes=sizes)
    reason = solver.reason_unknown()
    if "timeout" in reason or "cancel" in reason or "interrupt" in reason:
        return Outcome("unknown", f"solver timeout after {timeout_ms} ms", seconds)
    return Outcome("unknown", f"solver returned unknown ({reason})", seconds)
