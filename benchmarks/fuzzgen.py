"""Random small axon programs and random rewrites of them (Hypothesis strategies), and the NumPy oracle
that judges every verdict: the generators shared by `tests/verification/test_soundness_fuzz.py` (bounded,
derandomized, in CI) and `benchmarks/soundness_fuzz.py` (>= 10,000 examples).

A pair is a program A and a program B made from A by rewrites of one of three kinds:

* `sound`: algebraic identities that hold at every size (commutativity, associativity, distributing,
  x/x*y, slice composition x[a:b][c:d] = x[a+c:...], transpose of transpose, sum and cumsum linearity,
  mean = sum / k, max shift, exp(a+b) = exp(a) exp(b), reshape round trips, broadcasting forms,
  matmul identities, reduction order, ...). The verifier should prove most of these.
* `edge`: identities that hold only at some sizes or under a domain assumption that fails at some
  sizes (divisors such as k*y - y.sum() that are identically zero at k=1, a max over unit slices
  past a small symbolic axis, strided splits that need divisibility). A proof of one must narrow its
  claim (`verdict.covers`) or state the assumption.
* `mutation`: usually-unsound changes (off-by-one slice bounds, swapped axes, dropped terms, changed
  constants, sum vs max, wrong axes, keepdims lost, wrong composition rules, ...).

Whatever the kind, the oracle (`judge`) re-evaluates both programs with the programs' own NumPy
reference (`axon.semantics.evaluate`, what `Program.__call__` runs) at many sizes (1 and 2 along each
axis among them) on random inputs. A PROVED verdict whose programs differ at a size it covers is a
*proved-but-false*. A REFUTED verdict of a `sound` pair whose counterexample NumPy does not show at its
own sizes is a *refuted-but-equal* (a false counterexample, less severe, reported separately).

Programs are built as a small AST (`E`) whose nodes are traced with axon's own tracer as they are made
(so every shape rule is axon's), rendered as ordinary `@axon.program` source (one statement per
operator) and re-traced from that text, so what is verified is exactly the printed program.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import operator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Optional

import numpy as np
from hypothesis import strategies as st

import axon
from axon.errors import AxonError
from axon.frontend.program import Program, _parse_dim
from axon.frontend.tracer import Tensor, Trace
from axon.ir import Graph, input_node, toposort
from axon.semantics.algebra import const_value
from axon.semantics.evaluate import bind_sizes
from axon.semantics.ops import OP_SPECS, Op
from axon.semantics.sizes import Size, bind_shape

SYMBOLS = ("m", "n", "k")
LITERALS = (1, 2, 3, 4)
INPUT_NAMES = ("x", "y", "z")
RENAMES = {"m": "rows", "n": "cols", "k": "depth", "h": "half"}


# ============================================================================================
# The AST: each node is traced as it is built (val is a Tensor, a Python float or a Size)
# ============================================================================================
@dataclass(eq=False)
class E:
    op: str
    kids: tuple
    args: tuple
    val: object
    pos: bool = False  # > 0 for all inputs (so log / sqrt / division by it are safe)

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.val, Tensor)

    @property
    def shape(self):
        return self.val.shape if self.is_tensor else ()

    @property
    def rank(self) -> int:
        return len(self.shape)


class Invalid(Exception):
    """A generated candidate does not type-check (the generator then tries something else)."""


BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
          "matmul": operator.matmul}
BINARY_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "matmul": "@"}
FUNCS1 = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "square", "reciprocal", "silu")
FUNCS2 = ("maximum", "minimum")
REDUCE = ("sum", "max", "mean")


def mk(op: str, kids, args=()) -> E:
    """Build (and trace) one node; raises Invalid when axon's shape rules reject it."""
    kids = tuple(kids)
    vals = [k.val for k in kids]
    try:
        if op in BINARY:
            if not any(isinstance(v, Tensor) for v in vals):
                raise Invalid("no tensor operand")
            if not isinstance(vals[0], Tensor) and isinstance(vals[0], Size):
                raise Invalid("a size on the left")
            val = BINARY[op](*vals)
        elif op in FUNCS1:
            val = getattr(axon, op)(vals[0])
        elif op in FUNCS2:
            if not any(isinstance(v, Tensor) for v in vals):
                raise Invalid("no tensor operand")
            val = getattr(axon, op)(*vals)
        elif op == "neg":
            val = -vals[0]
        elif op in REDUCE:
            axis, keepdims = args
            val = getattr(vals[0], op)(axis=axis, keepdims=keepdims)
        elif op == "cumsum":
            val = vals[0].cumsum(axis=args[0])
        elif op == "transpose":
            val = vals[0].transpose(*args[0])
        elif op == "T":
            val = vals[0].T
        elif op == "slice":
            (key,) = args
            val = vals[0][tuple(None if it is None else slice(*it) for it in key)]
        elif op == "reshape":
            (entries,) = args
            dims = []
            for entry in entries:
                d = Size.of(1)
                for f in entry:
                    if not isinstance(f, int) and f[1] >= len(vals[f[0]].shape):
                        raise Invalid("a reshape names an axis its operand no longer has")
                    d = d * (Size.of(f) if isinstance(f, int) else vals[f[0]].shape[f[1]])
                dims.append(d)
            try:
                dims = [d for d in dims]
                val = vals[0].reshape(*dims)
            except IndexError:
                raise Invalid("a reshape names an axis its operand no longer has") from None
        elif op == "dim":
            val = vals[0].shape[args[0]]
        elif op == "const":
            val = args[0]
        else:
            raise ValueError(f"unknown op {op}")
    except AxonError as err:
        raise Invalid(str(err)) from None
    if op in BINARY or op in FUNCS2 or op in FUNCS1 or op in REDUCE or op in ("neg", "cumsum"):
        if not isinstance(val, Tensor):
            raise Invalid("not a tensor")
    return E(op, kids, tuple(args), val, _positive(op, kids, args))


def _positive(op, kids, args) -> bool:
    p = [k.pos for k in kids]
    if op == "const":
        return args[0] > 0
    if op == "dim":
        return True
    if op in ("exp", "sigmoid", "square"):
        return True
    if op in ("add", "mul", "div", "minimum", "matmul"):
        return all(p)
    if op == "maximum":
        return any(p)
    if op in ("sqrt", "rsqrt", "reciprocal", "sum", "max", "mean", "cumsum", "transpose", "T", "slice",
              "reshape", "relu"):
        return bool(p) and p[0] and (op != "relu")
    return False


def const(value: float) -> E:
    if not math.isfinite(value) or abs(value) > 1e100:
        raise Invalid("constant out of range")
    return mk("const", (), (value,))


class Ctx:
    """One program signature: its inputs as traced leaves (one trace per pair)."""

    def __init__(self, signature):
        self.signature = tuple((name, tuple(dims)) for name, dims in signature)
        self.trace = Trace()
        self.inputs = []
        for name, dims in self.signature:
            node = input_node(name, tuple(_parse_dim("fuzz", name, d) for d in dims))
            self.inputs.append(E("input", (), (name,), Tensor(node, self.trace, label=name)))


# ============================================================================================
# Rendering: `@axon.program` source, one statement per operator
# ============================================================================================
def _fmt_key(key) -> str:
    parts = []
    for it in key:
        if it is None:
            parts.append("None")
            continue
        start, stop, step = it
        text = (str(start) if start else "") + ":" + ("" if stop is None else str(stop))
        if step != 1:
            text += f":{step}"
        parts.append(text)
    return ", ".join(parts)


def render(signature, outputs, name: str, rename: Optional[dict] = None) -> str:
    names: dict[int, str] = {}
    lines: list[str] = []

    def ref(e: E) -> str:
        if e.op == "input":
            return e.args[0]
        if e.op == "const":
            v = e.args[0]
            return f"({v!r})" if v < 0 else repr(v)
        if e.op == "dim":
            return f"{ref(e.kids[0])}.shape[{e.args[0]}]"
        if id(e) in names:
            return names[id(e)]
        k = [ref(c) for c in e.kids]
        if e.op in BINARY:
            expr = f"{k[0]} {BINARY_SYMBOL[e.op]} {k[1]}"
        elif e.op in FUNCS1 or e.op in FUNCS2:
            expr = f"axon.{e.op}({', '.join(k)})"
        elif e.op == "neg":
            expr = f"-{k[0]}"
        elif e.op in REDUCE:
            expr = f"{k[0]}.{e.op}(axis={e.args[0]}, keepdims={e.args[1]})"
        elif e.op == "cumsum":
            expr = f"{k[0]}.cumsum(axis={e.args[0]})"
        elif e.op == "transpose":
            expr = f"{k[0]}.transpose{tuple(e.args[0])!r}".replace(",)", ")")
        elif e.op == "T":
            expr = f"{k[0]}.T"
        elif e.op == "slice":
            expr = f"{k[0]}[{_fmt_key(e.args[0])}]"
        elif e.op == "reshape":
            dims = []
            for entry in e.args[0]:
                fs = [str(f) if isinstance(f, int) else f"{k[f[0]]}.shape[{f[1]}]" for f in entry]
                dims.append(" * ".join(fs) if fs else "1")
            expr = f"{k[0]}.reshape({', '.join(dims)}{',' if len(dims) == 1 else ''})"
        else:
            raise ValueError(e.op)
        var = f"t{len(names) + 1}"
        names[id(e)] = var
        lines.append(f"    {var} = {expr}")
        return var

    results = [ref(o) for o in outputs]
    rename = rename or {}

    def dim_text(d):
        if isinstance(d, int):
            return str(d)
        factor, _, sym = d.rpartition("*")
        sym = rename.get(sym, sym)
        return f'"{factor}*{sym}"' if factor else f'"{sym}"'

    decl = ", ".join(f"{n}=({', '.join(dim_text(d) for d in dims)}{',' if len(dims) == 1 else ''})"
                     for n, dims in signature)
    params = ", ".join(n for n, _ in signature)
    body = "\n".join(lines + [f"    return {', '.join(results)}"])
    return f"@axon.program({decl})\ndef {name}({params}):\n{body}\n"


def build(source: str, name: str) -> Program:
    namespace = {"axon": axon}
    exec(compile(source, f"<fuzz {name}>", "exec"), namespace)
    return namespace[name]


# ============================================================================================
# Program generation
# ============================================================================================
@st.composite
def signatures(draw):
    syms = draw(st.lists(st.sampled_from(SYMBOLS), min_size=1, max_size=3, unique=True))
    pool = [s for s in syms for _ in range(3)] + list(LITERALS)
    if draw(st.integers(0, 9)) == 4:
        pool += ["2*h"] * 2
    n_inputs = draw(st.sampled_from([1, 2, 2, 2, 3]))
    sig = []
    for name in INPUT_NAMES[:n_inputs]:
        rank = draw(st.sampled_from([1, 2, 2, 2, 3]))
        sig.append((name, tuple(draw(st.sampled_from(pool)) for _ in range(rank))))
    return tuple(sig)


GROW = (["unary"] * 3 + ["binary"] * 5 + ["scalar"] * 2 + ["reduce"] * 3 + ["cumsum"] + ["matmul"] * 2
        + ["transpose"] * 2 + ["slice"] * 3 + ["newaxis", "reshape"])
CONSTS = (0.5, 2.0, 3.0, -1.5, 1e-3)


def _broadcasts_to(a, b) -> bool:
    """Does shape `a` broadcast into shape `b` without changing it?"""
    if len(a) > len(b):
        return False
    return all(da == db or da == Size.of(1) for da, db in zip(reversed(a), reversed(b)))


def _compatible(a, b) -> bool:
    try:
        from axon.semantics.ops import broadcast_shapes
        broadcast_shapes(a, b)
        return True
    except AxonError:
        return False


def positive(draw, e: E) -> E:
    if e.pos:
        return e
    if draw(st.booleans()):
        return mk("exp", [e])
    return mk("add", [mk("square", [e]), const(draw(st.sampled_from([0.5, 1.0, 2.0])))])


def _draw_slice_item(draw, size: Size):
    """One axis of a slice: mostly a proper sub-range (constant or open-ended bounds, steps)."""
    start = draw(st.sampled_from([0, 0, 1, 1, 2]))
    kind = draw(st.sampled_from(["open", "open", "const", "const", "const"]))
    step = draw(st.sampled_from([1, 1, 1, 2]))
    stop = None if kind == "open" else start + draw(st.integers(1, 3))
    fixed = size.as_int()
    if fixed is not None and stop is not None:
        stop = min(stop, fixed)
    if (start, stop, step) == (0, None, 1):
        start = 1
    return (start, stop, step)


def grow(draw, pool: list) -> E:
    kind = draw(st.sampled_from(GROW))
    tensors = [e for e in pool if e.is_tensor]
    a = draw(st.sampled_from(tensors))
    if kind == "unary":
        op = draw(st.sampled_from(["exp", "tanh", "sigmoid", "relu", "neg", "square", "sqrt", "log", "rsqrt",
                                   "reciprocal", "silu"]))
        if op in ("sqrt", "log", "rsqrt"):
            a = positive(draw, a)
        return mk(op, [a])
    if kind == "binary":
        op = draw(st.sampled_from(["add", "add", "sub", "mul", "mul", "div", "maximum", "minimum"]))
        others = [b for b in tensors if _compatible(a.shape, b.shape)]
        b = draw(st.sampled_from(others))
        if op == "div" and draw(st.booleans()):
            b = positive(draw, b)
        return mk(op, [a, b])
    if kind == "scalar":
        op = draw(st.sampled_from(["add", "sub", "mul", "div", "rsub"]))
        c = const(draw(st.sampled_from(CONSTS)))
        if op == "rsub":
            return mk("sub", [c, a])
        return mk(op, [a, c])
    if kind == "reduce":
        if a.rank == 0:
            raise Invalid("scalar")
        op = draw(st.sampled_from(REDUCE))
        return mk(op, [a], (draw(st.integers(0, a.rank - 1)), draw(st.booleans())))
    if kind == "cumsum":
        if a.rank == 0:
            raise Invalid("scalar")
        return mk("cumsum", [a], (draw(st.integers(0, a.rank - 1)),))
    if kind == "matmul":
        if a.rank < 2:
            raise Invalid("rank")
        others = [b for b in tensors if b.rank >= 2 and b.shape[-2] == a.shape[-1]]
        if not others:
            others = [mk("T", [b]) for b in tensors if b.rank == 2 and b.shape[-1] == a.shape[-1]]
        if not others:
            raise Invalid("no matmul partner")
        return mk("matmul", [a, draw(st.sampled_from(others))])
    if kind == "transpose":
        if a.rank < 2:
            raise Invalid("rank")
        if a.rank == 2 and draw(st.booleans()):
            return mk("T", [a])
        perms = [p for p in itertools.permutations(range(a.rank)) if p != tuple(range(a.rank))]
        return mk("transpose", [a], (draw(st.sampled_from(perms)),))
    if kind == "slice":
        if a.rank == 0:
            raise Invalid("scalar")
        axis = draw(st.integers(0, a.rank - 1))
        key = [(0, None, 1)] * a.rank
        key[axis] = _draw_slice_item(draw, a.shape[axis])
        return mk("slice", [a], (tuple(key),))
    if kind == "newaxis":
        at = draw(st.integers(0, a.rank))
        key = [(0, None, 1)] * a.rank
        key.insert(at, None)
        return mk("slice", [a], (tuple(key),))
    if kind == "reshape":
        if a.rank < 2:
            raise Invalid("rank")
        i = draw(st.integers(0, a.rank - 2))
        entries = [((0, j),) for j in range(i)] + [((0, i), (0, i + 1))] + [((0, j),) for j in range(i + 2, a.rank)]
        return mk("reshape", [a], (tuple(entries),))
    raise ValueError(kind)


@st.composite
def programs(draw, max_ops: int = 5):
    """(ctx, outputs, pool): a random program over a random signature (pool: every value made)."""
    ctx = Ctx(draw(signatures()))
    pool = list(ctx.inputs)
    made = []
    n_ops = draw(st.integers(1, max_ops))
    for _ in range(n_ops * 3):
        if len(made) >= n_ops:
            break
        try:
            e = grow(draw, pool)
        except Invalid:
            continue
        pool.append(e)
        made.append(e)
    if not made:
        made = [mk("mul", [ctx.inputs[0], const(2.0)])]
    outputs = [made[-1]]
    if len(made) >= 3 and draw(st.integers(0, 9)) == 4 and made[-2] not in _nodes(outputs):
        outputs.append(made[-2])
    return ctx, tuple(outputs), pool


def _nodes(outputs) -> list[E]:
    """Every AST node reachable from `outputs`, children first, each once (by identity)."""
    order, seen = [], set()

    def go(e):
        if id(e) in seen:
            return
        seen.add(id(e))
        for k in e.kids:
            go(k)
        order.append(e)

    for o in outputs:
        go(o)
    return order


def replace_node(outputs, target: E, replacement: E):
    """`outputs` with `target` (by identity) replaced; ancestors re-traced (Invalid if ill-typed)."""
    memo: dict[int, E] = {}

    def go(e):
        if e is target:
            return replacement
        if id(e) not in memo:
            kids = tuple(go(k) for k in e.kids)
            memo[id(e)] = e if all(a is b for a, b in zip(kids, e.kids)) else mk(e.op, kids, e.args)
        return memo[id(e)]

    return tuple(go(o) for o in outputs)


# ============================================================================================
# Rewrites: (name, kind, applies(e), apply(draw, ctx, e, outputs) -> E)
# ============================================================================================
@dataclass(frozen=True)
class Rule:
    name: str
    kind: str  # "sound", "edge" or "mutation"
    applies: Callable[[E], bool]
    apply: Callable
    shape_preserving: bool = True


RULES: list[Rule] = []


def rule(name, kind, applies, shape_preserving=True):
    def deco(fn):
        RULES.append(Rule(name, kind, applies, fn, shape_preserving))
        return fn
    return deco


def is_op(*ops):
    return lambda e: e.op in ops


def _same_shape_kids(e):
    return e.is_tensor and all(k.is_tensor and k.shape == e.shape for k in e.kids)


def _square_2d(e):
    return e.is_tensor and e.rank >= 2 and e.shape[-1] == e.shape[-2]


# --- sound -----------------------------------------------------------------------------------
@rule("commute", "sound", is_op("add", "mul", "maximum", "minimum"))
def _(draw, ctx, e, outs):
    a, b = e.kids
    return mk(e.op, [b, a])


@rule("associate", "sound", lambda e: e.op in ("add", "mul") and e.kids[0].op == e.op)
def _(draw, ctx, e, outs):
    (a, b), c = e.kids[0].kids, e.kids[1]
    return mk(e.op, [a, mk(e.op, [b, c])])


@rule("distribute", "sound", lambda e: e.op == "mul" and any(k.op in ("add", "sub") for k in e.kids))
def _(draw, ctx, e, outs):
    a, s = e.kids if e.kids[1].op in ("add", "sub") else (e.kids[1], e.kids[0])
    b, c = s.kids
    return mk(s.op, [times(b, a), times(c, a)])


def times(a: E, b: E) -> E:
    """a * b, with the operands in whichever order the tracer accepts (a size cannot lead)."""
    try:
        return mk("mul", [a, b])
    except Invalid:
        return mk("mul", [b, a])


@rule("factor", "sound", lambda e: e.op in ("add", "sub") and all(k.op == "mul" for k in e.kids)
      and e.kids[0].kids[1] is e.kids[1].kids[1])
def _(draw, ctx, e, outs):
    (a, c), (b, _) = e.kids[0].kids, e.kids[1].kids
    return mk("mul", [mk(e.op, [a, b]), c])


def _divisor_candidates(ctx, outs, e):
    return [d for d in ctx.inputs + [n for n in _nodes(outs) if n.is_tensor]
            if _broadcasts_to(d.shape, e.shape)]


@rule("x/x*y", "sound", lambda e: e.is_tensor)
def _(draw, ctx, e, outs):
    cands = _divisor_candidates(ctx, outs, e)
    if not cands:
        raise Invalid("no divisor")
    d = draw(st.sampled_from(cands))
    form = draw(st.integers(0, 2))
    if form == 0:
        return mk("mul", [mk("div", [d, d]), e])
    if form == 1:
        return mk("div", [mk("mul", [e, d]), d])
    return mk("mul", [e, mk("div", [d, d])])


def _compose_item(inner, outer):
    (a, b, p), (c, d, q) = inner, outer
    stops = [s for s in (b, None if d is None else a + p * d) if s is not None]
    return (a + p * c, min(stops) if stops else None, p * q)


def _plain_key(key) -> bool:
    return None not in key


@rule("slice-compose", "sound", lambda e: e.op == "slice" and e.kids[0].op == "slice"
      and _plain_key(e.args[0]) and _plain_key(e.kids[0].args[0]))
def _(draw, ctx, e, outs):
    inner = e.kids[0]
    key = tuple(_compose_item(i, o) for i, o in zip(inner.args[0], e.args[0]))
    return mk("slice", [inner.kids[0]], (key,))


@rule("slice-decompose", "sound", lambda e: e.op == "slice" and _plain_key(e.args[0]))
def _(draw, ctx, e, outs):
    (x,) = e.kids
    key = e.args[0]
    axes = [j for j, it in enumerate(key) if it != (0, None, 1)]
    if not axes:
        raise Invalid("trivial")
    j = draw(st.sampled_from(axes))
    a, b, p = key[j]
    forms = []
    if a >= 1:
        forms.append("offset")
    if p > 1:
        forms.append("stride")
    if b is not None:
        forms.append("widen")
    if not forms:
        raise Invalid("no decomposition")
    form = draw(st.sampled_from(forms))
    if form == "offset":
        a1 = draw(st.integers(1, a))
        first, second = (a1, None, 1), (a - a1, None if b is None else b - a1, p)
    elif form == "stride":
        first, second = (a, b, 1), (0, None, p)
    else:
        extra = draw(st.integers(1, 3))
        first, second = (a, b + extra, p), (0, -(-(b - a) // p), 1)
    inner = list(key)
    inner[j] = first
    outer = [(0, None, 1)] * len(key)
    outer[j] = second
    return mk("slice", [mk("slice", [x], (tuple(inner),))], (tuple(outer),))


def _exp(v: float) -> float:
    if v > 200:
        raise Invalid("exp of a large constant")
    return math.exp(v)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


@rule("transpose-transpose", "sound", lambda e: e.is_tensor and e.rank >= 2)
def _(draw, ctx, e, outs):
    perms = list(itertools.permutations(range(e.rank)))
    p = draw(st.sampled_from(perms))
    if e.rank == 2 and draw(st.booleans()):
        return mk("T", [mk("T", [e])])
    return mk("transpose", [mk("transpose", [e], (p,))], (_inverse(p),))


@rule("transpose-fuse", "sound", lambda e: e.op in ("transpose", "T") and e.kids[0].op in ("transpose", "T"))
def _(draw, ctx, e, outs):
    def perm(n):
        return n.args[0] if n.op == "transpose" else tuple(reversed(range(n.rank)))
    inner, outer = perm(e.kids[0]), perm(e)
    combined = tuple(inner[i] for i in outer)
    x = e.kids[0].kids[0]
    if combined == tuple(range(len(combined))):
        return x
    return mk("transpose", [x], (combined,))


@rule("sum-linear", "sound", lambda e: e.op in ("sum", "mean") and e.kids[0].op in ("add", "sub")
      and _same_shape_kids(e.kids[0]))
def _(draw, ctx, e, outs):
    a, b = e.kids[0].kids
    return mk(e.kids[0].op, [mk(e.op, [a], e.args), mk(e.op, [b], e.args)])


@rule("sum-scale", "sound", lambda e: e.op in ("sum", "cumsum", "mean") and e.kids[0].op == "mul"
      and e.kids[0].kids[1].op == "const")
def _(draw, ctx, e, outs):
    a, c = e.kids[0].kids
    return mk("mul", [mk(e.op, [a], e.args), c])


@rule("sum-const-shift", "sound", lambda e: e.op == "sum" and e.kids[0].op == "add"
      and e.kids[0].kids[1].op == "const" and e.kids[0].kids[0].shape == e.kids[0].shape)
def _(draw, ctx, e, outs):
    a, c = e.kids[0].kids
    return _sum_plus_n_times(a, c, e.args)


def _sum_plus_n_times(a: E, c: E, args) -> E:
    """sum(a, axis) + n * c, n = a's size along axis (c a constant or a tensor broadcast along axis)."""
    n = mk("dim", [a], (args[0],))
    s = mk("sum", [a], args)
    if c.is_tensor:
        return mk("add", [s, mk("mul", [c, n])])
    return mk("mul", [mk("add", [mk("div", [s, n]), c]), n])


@rule("cumsum-linear", "sound", lambda e: e.op == "cumsum" and e.kids[0].op in ("add", "sub")
      and _same_shape_kids(e.kids[0]))
def _(draw, ctx, e, outs):
    a, b = e.kids[0].kids
    return mk(e.kids[0].op, [mk("cumsum", [a], e.args), mk("cumsum", [b], e.args)])


@rule("mean=sum/k", "sound", is_op("mean"))
def _(draw, ctx, e, outs):
    (x,) = e.kids
    return mk("div", [mk("sum", [x], e.args), mk("dim", [x], (e.args[0],))])


@rule("sum/k=mean", "sound", lambda e: e.op == "div" and e.kids[0].op == "sum" and e.kids[1].op == "dim"
      and e.kids[1].kids[0] is e.kids[0].kids[0] and e.kids[1].args[0] == e.kids[0].args[0])
def _(draw, ctx, e, outs):
    s = e.kids[0]
    return mk("mean", s.kids, s.args)


@rule("mean-as-product", "sound", lambda e: e.op == "mean")
def _(draw, ctx, e, outs):
    (x,) = e.kids
    return mk("mul", [mk("sum", [mk("div", [x, mk("dim", [x], (e.args[0],))])], e.args), const(1.0)])


def _const_along(e: E, axis: int, full_rank: int) -> bool:
    """Is tensor e (broadcast to rank full_rank) of size 1 along `axis`?"""
    if not e.is_tensor:
        return True
    offset = full_rank - e.rank
    return axis < offset or e.shape[axis - offset] == Size.of(1)


@rule("max-shift", "sound", lambda e: e.op in ("max", "sum") and e.kids[0].op in ("add", "sub")
      and e.args[1] and e.kids[0].kids[0].is_tensor and e.kids[0].kids[0].shape == e.kids[0].shape
      and _const_along(e.kids[0].kids[1], e.args[0], e.kids[0].rank))
def _(draw, ctx, e, outs):
    a, c = e.kids[0].kids
    if e.op == "max":
        return mk(e.kids[0].op, [mk("max", [a], e.args), c])
    # sum(a + c) = sum(a) + n * c, sum(a - c) = sum(a) + n * (-c)
    if e.kids[0].op == "sub":
        c = mk("neg", [c]) if c.is_tensor else const(-c.args[0])
    return _sum_plus_n_times(a, c, e.args)


# (tensor operands only: exp/log of a constant would be a rounded float, and the identity then holds
# only to float64 precision, which a high-precision refuter rightly refutes)
@rule("exp-sum", "sound", lambda e: e.op == "exp" and e.kids[0].op in ("add", "sub")
      and all(k.is_tensor for k in e.kids[0].kids))
def _(draw, ctx, e, outs):
    a, b = e.kids[0].kids
    ea = mk("exp", [a]) if a.is_tensor else const(_exp(a.args[0]))
    eb = mk("exp", [b]) if b.is_tensor else const(_exp(b.args[0]))
    return mk("mul" if e.kids[0].op == "add" else "div", [ea, eb])


@rule("exp-log", "sound", lambda e: e.is_tensor and e.pos)
def _(draw, ctx, e, outs):
    return mk("exp", [mk("log", [e])]) if draw(st.booleans()) else mk("square", [mk("sqrt", [e])])


@rule("log-product", "sound", lambda e: e.op == "log" and e.kids[0].op in ("mul", "div")
      and all(k.pos and k.is_tensor for k in e.kids[0].kids))
def _(draw, ctx, e, outs):
    a, b = e.kids[0].kids
    la = mk("log", [a]) if a.is_tensor else const(math.log(a.args[0]))
    lb = mk("log", [b]) if b.is_tensor else const(math.log(b.args[0]))
    return mk("add" if e.kids[0].op == "mul" else "sub", [la, lb])


@rule("sqrt-product", "sound", lambda e: e.op == "sqrt" and e.kids[0].op == "mul"
      and all(k.pos and k.is_tensor for k in e.kids[0].kids))
def _(draw, ctx, e, outs):
    a, b = e.kids[0].kids
    return mk("mul", [mk("sqrt", [a]), mk("sqrt", [b])])


DEFINITIONS = {
    "square": lambda x: mk("mul", [x, x]),
    "reciprocal": lambda x: mk("div", [const(1.0), x]),
    "relu": lambda x: mk("maximum", [x, const(0.0)]),
    "sigmoid": lambda x: mk("div", [const(1.0), mk("add", [const(1.0), mk("exp", [mk("neg", [x])])])]),
    "silu": lambda x: mk("mul", [x, mk("sigmoid", [x])]),
    "rsqrt": lambda x: mk("reciprocal", [mk("sqrt", [x])]),
    "neg": lambda x: mk("mul", [x, const(-1.0)]),
    "tanh": lambda x: mk("sub", [mk("mul", [mk("sigmoid", [mk("mul", [x, const(2.0)])]), const(2.0)]), const(1.0)]),
}


@rule("definition", "sound", lambda e: e.op in DEFINITIONS)
def _(draw, ctx, e, outs):
    return DEFINITIONS[e.op](e.kids[0])


@rule("sub=add-neg", "sound", lambda e: e.op in ("sub", "div") and e.kids[1].is_tensor)
def _(draw, ctx, e, outs):
    a, b = e.kids
    if e.op == "sub":
        return mk("add", [a, mk("neg", [b])]) if a.is_tensor else mk("add", [mk("neg", [b]), a])
    return mk("mul", [a, mk("reciprocal", [b])]) if a.is_tensor else mk("mul", [mk("reciprocal", [b]), a])


@rule("double-neg", "sound", lambda e: e.is_tensor)
def _(draw, ctx, e, outs):
    return mk("neg", [mk("neg", [e])]) if draw(st.booleans()) else mk("sub", [e, mk("sub", [e, e])])


def _merge_entries(rank, i):
    return tuple([((0, j),) for j in range(i)] + [((0, i), (0, i + 1))] + [((0, j),) for j in range(i + 2, rank)])


@rule("reshape-roundtrip", "sound", lambda e: e.is_tensor and e.rank >= 1)
def _(draw, ctx, e, outs):
    form = draw(st.sampled_from(["merge", "flatten", "unit"] if e.rank >= 2 else ["unit", "flatten"]))
    back = tuple(((1, j),) for j in range(e.rank))
    if form == "merge":
        i = draw(st.integers(0, e.rank - 2))
        merged = mk("reshape", [e], (_merge_entries(e.rank, i),))
        return mk("reshape", [merged, e], (back,))
    if form == "flatten":
        flat = mk("reshape", [e], ((tuple((0, j) for j in range(e.rank)),),))
        return mk("reshape", [flat, e], (back,))
    at = draw(st.integers(0, e.rank))
    key = [(0, None, 1)] * e.rank
    key.insert(at, None)
    expanded = mk("slice", [e], (tuple(key),))
    if draw(st.booleans()):
        return mk("sum", [expanded], (at, False))
    return mk("reshape", [expanded, e], (back,))


@rule("broadcast-form", "sound", lambda e: e.op in ("add", "sub", "mul", "div", "maximum", "minimum")
      and all(k.is_tensor for k in e.kids) and e.kids[0].rank != e.kids[1].rank)
def _(draw, ctx, e, outs):
    a, b = e.kids
    low = 0 if a.rank < b.rank else 1
    s = e.kids[low]
    missing = e.rank - s.rank
    if draw(st.booleans()):
        key = (None,) * missing + ((0, None, 1),) * s.rank
        s2 = mk("slice", [s], (key,))
    else:
        s2 = mk("reshape", [s], (((),) * missing + tuple(((0, j),) for j in range(s.rank)),))
    kids = [a, b]
    kids[low] = s2
    return mk(e.op, kids)


@rule("matmul-transpose", "sound", lambda e: e.op == "matmul" and e.rank == 2 and e.kids[0].rank == 2
      and e.kids[1].rank == 2)
def _(draw, ctx, e, outs):
    a, b = e.kids
    return mk("T", [mk("matmul", [mk("T", [b]), mk("T", [a])])])


@rule("matmul-distribute", "sound", lambda e: e.op == "matmul" and e.kids[0].op in ("add", "sub")
      and _same_shape_kids(e.kids[0]))
def _(draw, ctx, e, outs):
    (a, b), c = e.kids[0].kids, e.kids[1]
    return mk(e.kids[0].op, [mk("matmul", [a, c]), mk("matmul", [b, c])])


@rule("matmul-scale", "sound", lambda e: e.op == "matmul")
def _(draw, ctx, e, outs):
    a, b = e.kids
    c = draw(st.sampled_from([2.0, 0.5, -3.0]))
    return mk("matmul", [mk("mul", [a, const(c)]), mk("div", [b, const(c)])])


@rule("matmul-assoc", "sound", lambda e: e.op == "matmul" and e.kids[0].op == "matmul")
def _(draw, ctx, e, outs):
    (a, b), c = e.kids[0].kids, e.kids[1]
    return mk("matmul", [a, mk("matmul", [b, c])])


@rule("reduce-order", "sound", lambda e: e.op in ("sum", "max") and e.kids[0].op == e.op)
def _(draw, ctx, e, outs):
    inner = e.kids[0]
    x = inner.kids[0]
    (i, ki), (j, kj) = inner.args, e.args
    # axis j of the inner result is axis jj of x
    jj = j if (ki or j < i) else j + 1
    if jj == i:
        raise Invalid("same axis")
    # reduce x over jj first (keepdims kj), then over i (keepdims ki) expressed on the new tensor
    first = mk(e.op, [x], (jj, kj))
    ii = i if (kj or i < jj) else i - 1
    return mk(e.op, [first], (ii, ki))


@rule("keepdims-reshape", "sound", lambda e: e.op in ("sum", "max", "mean") and not e.args[1])
def _(draw, ctx, e, outs):
    (x,) = e.kids
    axis = e.args[0]
    kept = mk(e.op, [x], (axis, True))
    entries = tuple(((1, j),) for j in range(x.rank) if j != axis)
    return mk("reshape", [kept, x], (entries,))


@rule("push-elementwise", "sound", lambda e: e.op in ("slice", "transpose", "T") and _plain_key_or_perm(e)
      and e.kids[0].op in ("add", "sub", "mul", "div", "maximum", "minimum", "exp", "tanh", "neg", "square",
                            "sigmoid") and _same_shape_kids(e.kids[0]))
def _(draw, ctx, e, outs):
    inner = e.kids[0]
    return mk(inner.op, [mk(e.op, [k], e.args) for k in inner.kids])


def _plain_key_or_perm(e):
    return e.op != "slice" or _plain_key(e.args[0])


@rule("split-reduction", "sound", lambda e: e.op in ("sum", "max") and e.args[1]
      and (e.kids[0].shape[e.args[0]].as_int() or 99) > 1)
def _(draw, ctx, e, outs):
    (x,) = e.kids
    axis = e.args[0]
    c = draw(st.integers(1, 2))
    fixed = x.shape[axis].as_int()
    if fixed is not None:
        c = min(c, fixed - 1)
    lo = [(0, None, 1)] * x.rank
    hi = [(0, None, 1)] * x.rank
    lo[axis], hi[axis] = (0, c, 1), (c, None, 1)
    parts = [mk(e.op, [mk("slice", [x], (tuple(k),))], e.args) for k in (lo, hi)]
    return mk("add", parts) if e.op == "sum" else mk("maximum", parts)


@rule("cumsum-split", "sound", lambda e: e.op == "cumsum")
def _(draw, ctx, e, outs):
    # cumsum(x) = cumsum(2x) - cumsum(x), and cumsum(x)[:1] = x[:1] along the scan axis
    (x,) = e.kids
    axis = e.args[0]
    if draw(st.booleans()):
        return mk("sub", [mk("cumsum", [mk("mul", [x, const(2.0)])], e.args), mk("cumsum", [x], (axis,))])
    key = [(0, None, 1)] * x.rank
    key[axis] = (0, 1, 1)
    head = mk("sub", [mk("slice", [e], (tuple(key),)), mk("slice", [x], (tuple(key),))])
    return mk("add", [e, head])


@rule("cancel-large", "sound", lambda e: e.is_tensor)
def _(draw, ctx, e, outs):
    # (e + C) - C with a large C: equal over the reals; float64 loses e's low digits (a refuter that
    # compares with a tolerance relative to the output's scale alone can mistake that for a difference)
    c = draw(st.sampled_from([1e6, 1e9, 1e12]))
    return mk("sub", [mk("add", [e, const(c)]), const(c)])


@rule("log-exp-shift", "sound", lambda e: e.is_tensor)
def _(draw, ctx, e, outs):
    # log(exp(e + C)) - C = e (C = 300: exp stays finite for e < 409)
    c = draw(st.sampled_from([50.0, 300.0]))
    return mk("sub", [mk("log", [mk("exp", [mk("add", [e, const(c)])])]), const(c)])


# --- edge: true only at some sizes, or under assumptions that fail at some sizes ---------------
@rule("divide-by-(k*y-sum)", "edge", lambda e: e.is_tensor and e.rank >= 1)
def _(draw, ctx, e, outs):
    cands = [d for d in ctx.inputs + [n for n in _nodes(outs) if n.is_tensor]
             if d.rank >= 1 and _broadcasts_to(d.shape, e.shape)]
    if not cands:
        raise Invalid("no divisor")
    y = draw(st.sampled_from(cands))
    axis = draw(st.integers(0, y.rank - 1))
    form = draw(st.sampled_from(["k*y-sum", "k*y-sum", "y-mean", "y-max"]))
    if form == "k*y-sum":
        d = mk("sub", [mk("mul", [y, mk("dim", [y], (axis,))]), mk("sum", [y], (axis, True))])
    elif form == "y-mean":
        d = mk("sub", [y, mk("mean", [y], (axis, True))])
    else:
        d = mk("sub", [y, mk("max", [y], (axis, True))])
    return mk("div", [mk("mul", [e, d]), d])


@rule("max-of-unit-slices", "edge", lambda e: e.op in ("max", "sum", "mean") and e.args[1])
def _(draw, ctx, e, outs):
    (x,) = e.kids
    axis = e.args[0]
    c = draw(st.integers(2, 3))
    whole = [(0, None, 1)] * x.rank
    whole[axis] = (0, c, 1)
    units = []
    for i in range(c):
        key = [(0, None, 1)] * x.rank
        key[axis] = (i, i + 1, 1)
        units.append(mk("slice", [x], (tuple(key),)))
    lhs = mk(e.op, [mk("slice", [x], (tuple(whole),))], e.args)
    combine = {"max": "maximum", "sum": "add", "mean": "add"}[e.op]
    acc = units[0]
    for u in units[1:]:
        acc = mk(combine, [acc, u])
    if e.op == "mean":
        acc = mk("div", [acc, const(float(c))])
    # the claim: reducing the first c entries equals combining c unit slices (needs size >= c)
    return mk("add", [mk("sub", [e, lhs]), acc])


@rule("adjacent-unit-slices", "edge", lambda e: e.op == "slice" and _plain_key(e.args[0])
      and any(it[1] is not None and it[1] - it[0] == 2 and it[2] == 1 for it in e.args[0]))
def _(draw, ctx, e, outs):
    (x,) = e.kids
    key = e.args[0]
    j = next(j for j, it in enumerate(key) if it[1] is not None and it[1] - it[0] == 2 and it[2] == 1)
    a = key[j][0]
    k1, k2 = list(key), list(key)
    k1[j], k2[j] = (a, a + 1, 1), (a + 1, a + 2, 1)
    s = mk("sum", [e], (j, True))
    return mk("add", [mk("sub", [e, s]), mk("add", [mk("slice", [x], (tuple(k1),)), mk("slice", [x], (tuple(k2),))])])


@rule("strided-split", "edge", lambda e: e.op == "sum" and e.args[1])
def _(draw, ctx, e, outs):
    (x,) = e.kids
    axis = e.args[0]
    even, odd = [(0, None, 1)] * x.rank, [(0, None, 1)] * x.rank
    even[axis], odd[axis] = (0, None, 2), (1, None, 2)
    return mk("add", [mk("sum", [mk("slice", [x], (tuple(even),))], e.args),
                      mk("sum", [mk("slice", [x], (tuple(odd),))], e.args)])


@rule("const-stop-past-axis", "edge", lambda e: e.is_tensor and e.rank >= 1
      and any(d.as_int() is None for d in e.shape))
def _(draw, ctx, e, outs):
    axes = [j for j, d in enumerate(e.shape) if d.as_int() is None]
    j = draw(st.sampled_from(axes))
    c = draw(st.integers(2, 4))
    key = [(0, None, 1)] * e.rank
    key[j] = (0, c, 1)
    s = mk("slice", [e], (tuple(key),))
    # sum of the first c entries == the cumsum's entry c-1 (true when the axis has >= c entries)
    last = [(0, None, 1)] * e.rank
    last[j] = (c - 1, c, 1)
    scan = mk("slice", [mk("cumsum", [e], (j,))], (tuple(last),))
    head = mk("sum", [s], (j, True))
    if draw(st.booleans()):
        head = mk("mul", [mk("mean", [s], (j, True)), const(float(c))])
    return mk("add", [e, mk("sub", [head, scan])])


# --- mutations: usually unsound ----------------------------------------------------------------
@rule("off-by-one-slice", "mutation", lambda e: e.op == "slice" and _plain_key(e.args[0]))
def _(draw, ctx, e, outs):
    key = list(e.args[0])
    axes = [j for j, it in enumerate(key) if it != (0, None, 1)] or list(range(len(key)))
    j = draw(st.sampled_from(axes))
    a, b, p = key[j]
    choice = draw(st.sampled_from(["start+", "start-", "stop+", "stop-", "step", "open"]))
    if choice == "start+":
        a += 1
    elif choice == "start-" and a > 0:
        a -= 1
    elif choice == "stop+" and b is not None:
        b += 1
    elif choice == "stop-" and b is not None and b - 1 > a:
        b -= 1
    elif choice == "step":
        p = 2 if p == 1 else 1
    elif choice == "open":
        b = None if b is not None else a + 2
    else:
        a += 1
    key[j] = (a, b, p)
    return mk("slice", e.kids, (tuple(key),))


@rule("swap-axes", "mutation", lambda e: e.op in ("transpose", "T") or _square_2d(e))
def _(draw, ctx, e, outs):
    if e.op in ("transpose", "T"):
        x = e.kids[0]
        if e.op == "T" or draw(st.booleans()):
            return x if x.shape == e.shape else mk("transpose", [x], (tuple(reversed(range(x.rank))),))
        perms = [p for p in itertools.permutations(range(x.rank)) if p != e.args[0]]
        return mk("transpose", [x], (draw(st.sampled_from(perms)),))
    perm = list(range(e.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return mk("transpose", [e], (tuple(perm),))


@rule("drop-term", "mutation", lambda e: e.op in ("add", "sub", "mul", "div", "maximum", "minimum")
      and any(k.is_tensor and k.shape == e.shape for k in e.kids))
def _(draw, ctx, e, outs):
    keep = [k for k in e.kids if k.is_tensor and k.shape == e.shape]
    return draw(st.sampled_from(keep))


@rule("change-constant", "mutation", is_op("const"))
def _(draw, ctx, e, outs):
    v = e.args[0]
    return const(draw(st.sampled_from([v * 2, v + 1, -v if v else 1.0, v * 1.001])))


@rule("swap-reduction", "mutation", is_op("sum", "max", "mean"))
def _(draw, ctx, e, outs):
    other = draw(st.sampled_from([o for o in REDUCE if o != e.op]))
    return mk(other, e.kids, e.args)


@rule("reduction-axis", "mutation", lambda e: e.op in REDUCE + ("cumsum",) and e.kids[0].rank >= 2)
def _(draw, ctx, e, outs):
    axes = [a for a in range(e.kids[0].rank) if a != e.args[0]]
    return mk(e.op, e.kids, (draw(st.sampled_from(axes)),) + e.args[1:])


@rule("keepdims-lost", "mutation", lambda e: e.op in REDUCE and e.args[1], shape_preserving=False)
def _(draw, ctx, e, outs):
    return mk(e.op, e.kids, (e.args[0], False))


@rule("swap-operands", "mutation", lambda e: e.op in ("sub", "div", "matmul"))
def _(draw, ctx, e, outs):
    a, b = e.kids
    if isinstance(a.val, Size) or isinstance(b.val, Size):
        raise Invalid("size operand")
    return mk(e.op, [b, a])


SWAP_BINARY = {"add": ["sub", "mul"], "sub": ["add"], "mul": ["div", "add"], "div": ["mul"],
               "maximum": ["minimum", "add"], "minimum": ["maximum"]}
SWAP_UNARY = {"exp": ["tanh", "square"], "tanh": ["sigmoid"], "sigmoid": ["tanh"], "relu": ["neg", "silu"],
              "neg": ["relu"], "square": ["exp"], "sqrt": ["rsqrt"], "log": ["sqrt"], "rsqrt": ["sqrt"],
              "reciprocal": ["neg"], "silu": ["sigmoid"]}


@rule("swap-operator", "mutation", lambda e: e.op in SWAP_BINARY or e.op in SWAP_UNARY)
def _(draw, ctx, e, outs):
    other = draw(st.sampled_from(SWAP_BINARY.get(e.op) or SWAP_UNARY[e.op]))
    return mk(other, e.kids, e.args)


@rule("wrong-exp-sum", "mutation", lambda e: e.op == "exp" and e.kids[0].op in ("add", "sub")
      and all(k.is_tensor for k in e.kids[0].kids))
def _(draw, ctx, e, outs):
    a, b = e.kids[0].kids
    return mk("add", [mk("exp", [a]), mk("exp", [b])])


@rule("wrong-sum-shift", "mutation", lambda e: e.op == "sum" and e.kids[0].op == "add"
      and not e.kids[0].kids[1].is_tensor and e.kids[0].kids[0].shape == e.kids[0].shape)
def _(draw, ctx, e, outs):
    a, c = e.kids[0].kids
    return mk("add", [mk("sum", [a], e.args), c])  # forgets the factor n (true only at n = 1)


@rule("wrong-mean-count", "mutation", lambda e: e.op == "mean" and e.kids[0].rank >= 2)
def _(draw, ctx, e, outs):
    (x,) = e.kids
    other = draw(st.sampled_from([a for a in range(x.rank) if a != e.args[0]]))
    return mk("div", [mk("sum", [x], e.args), mk("dim", [x], (other,))])


@rule("wrong-slice-compose", "mutation", lambda e: e.op == "slice" and e.kids[0].op == "slice"
      and _plain_key(e.args[0]) and _plain_key(e.kids[0].args[0]))
def _(draw, ctx, e, outs):
    inner = e.kids[0]
    key = []
    for (a, b, p), (c, d, q) in zip(inner.args[0], e.args[0]):
        key.append((a + c, d if d is not None else b, p * q))  # forgets the offset on the stop
    return mk("slice", [inner.kids[0]], (tuple(key),))


@rule("wrong-divisor", "mutation", lambda e: e.is_tensor)
def _(draw, ctx, e, outs):
    cands = _divisor_candidates(ctx, outs, e)
    if len(cands) < 2:
        raise Invalid("no divisors")
    d1, d2 = draw(st.sampled_from(cands)), draw(st.sampled_from(cands))
    if d1 is d2:
        d2 = mk("add", [d2, const(1e-3)])
    return mk("div", [mk("mul", [e, d1]), d2])


@rule("strided-wrong", "mutation", lambda e: e.op == "slice" and _plain_key(e.args[0])
      and any(it[2] > 1 for it in e.args[0]))
def _(draw, ctx, e, outs):
    key = [(a + 1, b, p) if p > 1 else (a, b, p) for a, b, p in e.args[0]]
    return mk("slice", e.kids, (tuple(key),))


@rule("cumsum-dropped", "mutation", is_op("cumsum"))
def _(draw, ctx, e, outs):
    return e.kids[0]


@rule("reshape-misorder", "mutation", lambda e: e.is_tensor and e.rank == 2 and e.shape[0] != e.shape[1])
def _(draw, ctx, e, outs):
    # reshape (a, b) -> (b, a) -> transpose: same shape, wrong order of elements
    r = mk("reshape", [e, e], ((((1, 1),), ((1, 0),)),))
    return mk("T", [r])


KINDS = ("sound", "edge", "mutation")
RULE_KIND = {r.name: r.kind for r in RULES}


# --- planting: a subterm of the shape a rule rewrites, built from a program's values -------------
def _pick(draw, pool, pred=lambda e: True) -> E:
    cands = [e for e in pool if pred(e)]
    if not cands:
        raise Invalid("nothing to plant on")
    return draw(st.sampled_from(cands))


def _partner(draw, pool, a: E) -> E:
    """A value of a's shape: another one from the program, or a function of a."""
    same = [e for e in pool if e.shape == a.shape and e is not a]
    if same and draw(st.booleans()):
        return draw(st.sampled_from(same))
    return mk(draw(st.sampled_from(["tanh", "exp", "sigmoid", "square"])), [a])


def _operand(draw, pool, a: E) -> E:
    return const(draw(st.sampled_from(CONSTS))) if draw(st.integers(0, 3)) == 2 else _partner(draw, pool, a)


def _ranked(draw, pool, rank=1) -> E:
    return _pick(draw, pool, lambda e: e.rank >= rank)


def _axis(draw, a: E) -> int:
    return draw(st.integers(0, a.rank - 1))


def _p_reduce_of(ops, inner_ops, keepdims=None, const_rhs=False, same=True):
    def plant(draw, pool):
        a = _ranked(draw, pool)
        b = const(draw(st.sampled_from(CONSTS))) if const_rhs else _operand(draw, pool, a)
        inner = mk(draw(st.sampled_from(inner_ops)), [a, b])
        op = draw(st.sampled_from(ops))
        if op == "cumsum":
            return mk("cumsum", [inner], (_axis(draw, a),))
        kd = draw(st.booleans()) if keepdims is None else keepdims
        return mk(op, [inner], (_axis(draw, a), kd))
    return plant


def _p_max_shift(draw, pool):
    a = _ranked(draw, pool)
    axis = _axis(draw, a)
    c = const(draw(st.sampled_from(CONSTS))) if draw(st.booleans()) else \
        mk(draw(st.sampled_from(["mean", "max", "sum"])), [_partner(draw, pool, a)], (axis, True))
    return mk(draw(st.sampled_from(["max", "sum"])), [mk(draw(st.sampled_from(["add", "sub"])), [a, c])], (axis, True))


def _p_unary_of_binary(outer, inner_ops, positive_args=False):
    def plant(draw, pool):
        a = _pick(draw, pool, lambda e: e.is_tensor)
        b = _operand(draw, pool, a)
        if positive_args:
            a, b = positive(draw, a), (b if not b.is_tensor else positive(draw, b))
            if not b.is_tensor and b.args[0] <= 0:
                b = const(2.0)
        return mk(outer, [mk(draw(st.sampled_from(inner_ops)), [a, b])])
    return plant


def _p_matmul(draw, pool):
    a = _ranked(draw, pool, 2)
    partners = [e for e in pool if e.rank >= 2 and e.shape[-2] == a.shape[-1]]
    if partners and draw(st.booleans()):
        return mk("matmul", [a, draw(st.sampled_from(partners))])
    if a.rank == 2:
        return mk("matmul", [a, mk("T", [_partner(draw, pool, a)])])
    perm = tuple(range(a.rank - 2)) + (a.rank - 1, a.rank - 2)
    return mk("matmul", [a, mk("transpose", [_partner(draw, pool, a)], (perm,))])


def _p_matmul_distribute(draw, pool):
    m = _p_matmul(draw, pool)
    a, c = m.kids
    return mk("matmul", [mk(draw(st.sampled_from(["add", "sub"])), [a, _partner(draw, pool, a)]), c])


def _p_matmul_assoc(draw, pool):
    m = _p_matmul(draw, pool)
    a = m.kids[0]
    back = mk("T", [a]) if a.rank == 2 else mk("transpose", [a], (tuple(range(a.rank - 2)) + (a.rank - 1, a.rank - 2),))
    return mk("matmul", [m, back if m.shape[-1] == back.shape[-2] else mk("T", [m])])


def _p_two_reductions(draw, pool):
    a = _ranked(draw, pool, 2)
    op = draw(st.sampled_from(["sum", "max"]))
    i = _axis(draw, a)
    first = mk(op, [a], (i, draw(st.booleans())))
    return mk(op, [first], (_axis(draw, first), draw(st.booleans())))


def _p_reduce(keepdims=None, ops=REDUCE, min_rank=1):
    def plant(draw, pool):
        a = _ranked(draw, pool, min_rank)
        kd = draw(st.booleans()) if keepdims is None else keepdims
        return mk(draw(st.sampled_from(ops)), [a], (_axis(draw, a), kd))
    return plant


def _p_slice(item=None):
    def plant(draw, pool):
        a = _ranked(draw, pool)
        axis = _axis(draw, a)
        key = [(0, None, 1)] * a.rank
        key[axis] = item(draw) if item else _draw_slice_item(draw, a.shape[axis])
        return mk("slice", [a], (tuple(key),))
    return plant


def _p_slice_slice(draw, pool):
    s = _p_slice()(draw, pool)
    return _p_slice()(draw, [s])


def _p_transpose_transpose(draw, pool):
    a = _ranked(draw, pool, 2)
    perms = list(itertools.permutations(range(a.rank)))
    t = mk("transpose", [a], (draw(st.sampled_from(perms)),))
    return mk("transpose", [t], (draw(st.sampled_from(perms)),)) if draw(st.booleans()) else mk("T", [t])


def _p_broadcast(draw, pool):
    a = _ranked(draw, pool, 2)
    low = mk(draw(st.sampled_from(REDUCE)), [_partner(draw, pool, a)], (0, False))
    op = draw(st.sampled_from(["add", "sub", "mul", "div", "maximum"]))
    return mk(op, [a, low] if draw(st.booleans()) else [low, a])


def _p_push(draw, pool):
    a = _ranked(draw, pool, 1)
    inner = mk(draw(st.sampled_from(["add", "sub", "mul", "maximum"])), [a, _partner(draw, pool, a)])
    if a.rank >= 2 and draw(st.booleans()):
        return mk("T", [inner]) if a.rank == 2 else mk("transpose", [inner], (tuple(reversed(range(a.rank))),))
    return _p_slice()(draw, [inner])


def _p_sum_over_k(draw, pool):
    a = _ranked(draw, pool)
    axis = _axis(draw, a)
    return mk("div", [mk("sum", [a], (axis, draw(st.booleans()))), mk("dim", [a], (axis,))])


def _p_factor(draw, pool):
    a = _pick(draw, pool, lambda e: e.is_tensor)
    c = _partner(draw, pool, a)
    return mk(draw(st.sampled_from(["add", "sub"])), [mk("mul", [a, c]), mk("mul", [_partner(draw, pool, a), c])])


def _p_associate(draw, pool):
    a = _pick(draw, pool, lambda e: e.is_tensor)
    op = draw(st.sampled_from(["add", "mul"]))
    return mk(op, [mk(op, [a, _operand(draw, pool, a)]), _operand(draw, pool, a)])


def _p_definition(draw, pool):
    return mk(draw(st.sampled_from(sorted(set(DEFINITIONS) - {"neg"}))), [_pick(draw, pool, lambda e: e.is_tensor)])


def _p_unary(op):
    return lambda draw, pool: mk(op, [_pick(draw, pool, lambda e: e.rank >= 1)], ())


PLANTS = {
    "sum-linear": _p_reduce_of(["sum", "mean"], ["add", "sub"]),
    "sum-scale": _p_reduce_of(["sum", "mean", "cumsum"], ["mul"], const_rhs=True),
    "sum-const-shift": _p_reduce_of(["sum"], ["add"], const_rhs=True),
    "max-shift": _p_max_shift,
    "cumsum-linear": _p_reduce_of(["cumsum"], ["add", "sub"]),
    "cumsum-split": _p_reduce_of(["cumsum"], ["mul", "add"]),
    "distribute": lambda draw, pool: mk("mul", [_pick(draw, pool, lambda e: e.is_tensor),
                                                _p_associate(draw, pool).kids[0]]),
    "factor": _p_factor,
    "associate": _p_associate,
    "exp-sum": _p_unary_of_binary("exp", ["add", "sub"]),
    "log-product": _p_unary_of_binary("log", ["mul", "div"], positive_args=True),
    "sqrt-product": _p_unary_of_binary("sqrt", ["mul"], positive_args=True),
    "matmul-transpose": _p_matmul,
    "matmul-scale": _p_matmul,
    "matmul-distribute": _p_matmul_distribute,
    "matmul-assoc": _p_matmul_assoc,
    "reduce-order": _p_two_reductions,
    "keepdims-reshape": _p_reduce(keepdims=False),
    "mean=sum/k": _p_reduce(ops=("mean",)),
    "mean-as-product": _p_reduce(ops=("mean",)),
    "sum/k=mean": _p_sum_over_k,
    "split-reduction": _p_reduce(keepdims=True, ops=("sum", "max")),
    "slice-compose": _p_slice_slice,
    "slice-decompose": _p_slice(),
    "transpose-fuse": _p_transpose_transpose,
    "broadcast-form": _p_broadcast,
    "push-elementwise": _p_push,
    "definition": _p_definition,
    # edge
    "max-of-unit-slices": _p_reduce(keepdims=True, ops=("max", "sum", "mean")),
    "strided-split": _p_reduce(keepdims=True, ops=("sum",)),
    "adjacent-unit-slices": _p_slice(lambda draw: (lambda a: (a, a + 2, 1))(draw(st.integers(0, 2)))),
    # mutations that need a shape of program
    "wrong-exp-sum": _p_unary_of_binary("exp", ["add", "sub"]),
    "wrong-sum-shift": _p_reduce_of(["sum"], ["add"], const_rhs=True),
    "wrong-mean-count": _p_reduce(ops=("mean",), min_rank=2),
    "wrong-slice-compose": _p_slice_slice,
    "strided-wrong": _p_slice(lambda draw: (draw(st.integers(0, 1)), None, 2)),
    "swap-reduction": _p_reduce(),
    "reduction-axis": _p_reduce(min_rank=2),
    "keepdims-lost": _p_reduce(keepdims=True),
    "cumsum-dropped": _p_reduce_of(["cumsum"], ["add", "mul"]),
    "swap-operands": _p_matmul,
}


@dataclass
class Pair:
    kind: str
    rules: tuple[str, ...]
    source_a: str
    source_b: str

    def __repr__(self) -> str:
        return (f"Pair(kind={self.kind!r}, rules={self.rules!r})\n--- A ---\n{self.source_a}--- B ---\n"
                f"{self.source_b}")

    @property
    def key(self) -> str:
        return hashlib.sha1((self.source_a + "\0" + self.source_b).encode()).hexdigest()[:16]


def _apply_random(draw, ctx, outs, kind, only=None):
    nodes = _nodes(outs)
    where: dict[str, list] = {}
    for r in RULES:
        if r.kind == kind and (only is None or r.name == only):
            at = [e for e in nodes if (e.is_tensor or r.name == "change-constant") and r.applies(e)]
            if at:
                where[r.name] = (r, at)
    if not where:
        raise Invalid(f"no {kind} rule applies")
    names = sorted(where)
    for _ in range(4):
        # the rule first, then where: a rule that applies everywhere is not drawn more often
        r, at = where[draw(st.sampled_from(names))]
        e = draw(st.sampled_from(at))
        try:
            new = r.apply(draw, ctx, e, outs)
            if r.shape_preserving and new.shape != e.shape:
                raise Invalid(f"{r.name} changed the shape")
            result = replace_node(outs, e, new)
            if not all(o.is_tensor for o in result):
                raise Invalid("output is not a tensor")
            return r.name, result
        except Invalid:
            continue
    raise Invalid("no rule could be applied")


@st.composite
def pairs(draw, kinds=KINDS, weights=(6, 2, 3), max_ops: int = 5):
    """A `Pair`: a random program and a random rewrite of it (kind drawn by `weights`)."""
    kind = draw(st.sampled_from([k for k, w in zip(kinds, weights) for _ in range(w)]))
    for _attempt in range(6):
        try:
            return _pair_attempt(draw, kind, max_ops)
        except Invalid:
            continue
        except (IndexError, KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as err:
            import traceback
            GENERATOR_ERRORS.append(f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-6)}")
            continue
    return Pair(kind, ("none",), "", "")


GENERATOR_ERRORS: list[str] = []  # bugs of this generator (not of the verifier), for the report


def _pair_attempt(draw, kind, max_ops) -> Pair:
    ctx, outs, pool = draw(programs(max_ops=max_ops))
    applied = []
    target = None
    if draw(st.booleans()):
        # plant the pattern of a rule drawn uniformly, so that rules needing a shape of program
        # (sum of a sum, exp of a sum, matmul of a matmul, ...) are exercised as often as the rest
        names = sorted(n for n in PLANTS if RULE_KIND[n] == kind)
        target = draw(st.sampled_from(names))
        try:
            outs = (PLANTS[target](draw, [e for e in pool if e.is_tensor]),)
        except Invalid:
            target = None
    new = outs
    steps = draw(st.sampled_from([1, 1, 2, 3])) if kind == "sound" else 1
    if kind != "sound" and draw(st.booleans()):
        name, new = _apply_random(draw, ctx, new, "sound")
        applied.append(name)
    for i in range(steps):
        name, new = _apply_random(draw, ctx, new, kind, only=target if i == 0 else None)
        applied.append(name)
    rename = None
    if kind == "sound" and draw(st.integers(0, 19)) == 7:
        rename = RENAMES
        applied.append("rename-dims")
    source_a = render(ctx.signature, outs, "f")
    source_b = render(ctx.signature, new, "g", rename)
    if source_a.split("\n", 2)[2] == source_b.split("\n", 2)[2] and rename is None:
        raise Invalid("the rewrite changed nothing")
    return Pair(kind, tuple(applied), source_a, source_b)


# ============================================================================================
# The oracle: evaluate both programs at many sizes; compare
# ============================================================================================
MAX_ELEMENTS = 4096
SEVERE = "proved-but-false"


def size_bindings(dims: list[str], seed: int, extra_random: int = 6) -> list[dict[str, int]]:
    """Many size bindings, every dimension at 1 and at 2 among them (the others at 1..4 and distinct)."""
    rng = np.random.default_rng(seed)
    out: list[dict] = []

    def add(b):
        if b not in out:
            out.append(b)

    add({d: 1 for d in dims})
    add({d: 2 for d in dims})
    add({d: 3 + i for i, d in enumerate(dims)})
    add({d: 2 + i for i, d in enumerate(dims)})
    for d in dims:
        for v in (1, 2, 3, 5):
            for other in (3, 1):
                add({e: (v if e == d else other) for e in dims})
    add({d: 4 for d in dims})
    for _ in range(extra_random):
        add({d: int(rng.integers(1, 8)) for d in dims})
    add({d: 6 + i for i, d in enumerate(dims)})
    add({d: 8 - i for i, d in enumerate(dims)})
    add({d: 7 for d in dims})
    return out


def _holds(fact, binding) -> bool:
    """A size precondition of a program: a `SizeFact` (size, divisor, minimum) or a (size, divisor) pair."""
    if hasattr(fact, "holds"):
        return fact.holds(binding)
    size, divisor = fact
    v = size.evaluate(binding)
    return v.denominator == 1 and v.numerator % divisor == 0


def _valid(graph: Graph, binding) -> bool:
    for fact in graph.constraints:
        if not _holds(fact, binding):
            return False
    for node in toposort(graph.outputs + graph.inputs):
        for s in node.shape:
            v = s.evaluate(binding)
            if v.denominator != 1 or v < 1:
                return False
    return True


_OVERFLOW_OPS = {Op.EXP, Op.MUL, Op.SQUARE, Op.REDUCE_SUM, Op.CUMSUM, Op.MATMUL, Op.ADD, Op.SUB, Op.SIGMOID,
                 Op.SILU, Op.GELU, Op.NEG, Op.MAXIMUM, Op.MINIMUM}


class Overflow(Exception):
    pass


def evaluate_with_bound(graph: Graph, arrays, binding):
    """Outputs (the NumPy reference: each operator's `numpy`, as axon.semantics.evaluate does) and, per
    element, a bound on the magnitude of the rounding error in units of float64 epsilon (first-order
    forward error analysis). Also whether any node's NumPy shape drifts from its declared shape.
    Raises Overflow when a finite computation overflows, or an exp underflows toward 0 (not a
    division by zero)."""
    val, err = {}, {}
    drift = []
    with np.errstate(all="ignore"):
        for node in graph.nodes():
            if node.op is Op.INPUT:
                v = np.asarray(arrays[node.params.name], dtype=np.float64)
                e = np.abs(v)
            elif node.op is Op.CONST:
                v = np.float64(const_value(node.params.value, binding))
                e = np.abs(v)
            else:
                args = [val[i] for i in node.inputs]
                es = [err[i] for i in node.inputs]
                v = np.asarray(OP_SPECS[node.op].numpy(args, node.params, bind_shape(node.shape, binding)),
                               dtype=np.float64)
                e = _error(node.op, node, args, es, v, binding)
                if node.op in _OVERFLOW_OPS and (np.isinf(v) & np.all([np.isfinite(a).all() for a in args])).any():
                    raise Overflow(node.op.value)
                if node.op is Op.EXP and ((np.abs(v) > 1e150) | (np.abs(v) < 1e-150)).any():
                    raise Overflow("exp")  # over- or underflow: float64 leaves the reals' range
                if v.shape != bind_shape(node.shape, binding):
                    drift.append(f"{node.op.value}: NumPy shape {v.shape}, declared "
                                 f"{bind_shape(node.shape, binding)}")
            val[node], err[node] = v, e
    return tuple(val[o] for o in graph.outputs), tuple(err[o] for o in graph.outputs), drift


def _error(op, node, a, e, v, binding):
    av = np.abs(v)
    A = [np.abs(x) for x in a]
    if op in (Op.ADD, Op.SUB):
        return e[0] + e[1] + av
    if op is Op.MUL:
        return e[0] * A[1] + A[0] * e[1] + av
    if op is Op.DIV:
        return e[0] / A[1] + A[0] * e[1] / (A[1] * A[1]) + av
    if op in (Op.MAXIMUM, Op.MINIMUM):
        return np.maximum(e[0], e[1]) + 0 * av
    if op in (Op.NEG, Op.RELU):
        return e[0] + 0 * av
    if op is Op.SQUARE:
        return 2 * A[0] * e[0] + av
    if op is Op.EXP:
        return av * (e[0] + 1)
    if op is Op.LOG:
        return e[0] / A[0] + av + 1
    if op is Op.SQRT:
        return e[0] / (2 * av) + av
    if op is Op.RSQRT:
        return av * e[0] / (2 * A[0]) + av
    if op is Op.RECIPROCAL:
        return e[0] / (A[0] * A[0]) + av
    if op in (Op.TANH, Op.SIGMOID, Op.SILU, Op.GELU):
        return 1.2 * e[0] + av + 1
    if op in (Op.REDUCE_SUM, Op.CUMSUM, Op.MATMUL):
        spec = OP_SPECS[op]
        if op is Op.MATMUL:
            return 2 * (np.matmul(A[0], e[1]) + np.matmul(e[0], A[1]) + np.matmul(A[0], A[1]))
        return 2 * (spec.numpy([e[0] + A[0]], node.params, None)) + av
    if op is Op.REDUCE_MAX:
        return OP_SPECS[op].numpy([e[0]], node.params, None)
    # layout: the same index map on the bound
    return np.asarray(OP_SPECS[op].numpy([e[0]], node.params, bind_shape(node.shape, binding)), dtype=np.float64)


def compare(a, b, ea, eb, rtol=1e-6, atol=1e-9) -> Optional[str]:
    """None when two outputs agree: same shape, NaN and inf at the same places, finite values within
    rtol * max(|a|, |b|) + atol * (the error bound of either side)."""
    if a.shape != b.shape:
        return f"shapes {a.shape} vs {b.shape}"
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if (nan_a != nan_b).any():
        i = tuple(int(t) for t in np.argwhere(nan_a != nan_b)[0])
        return f"NaN at {i} on one side only: {a[i]!r} vs {b[i]!r}"
    inf = ~nan_a & (np.isinf(a) | np.isinf(b))
    if (inf & (a != b)).any():
        i = tuple(int(t) for t in np.argwhere(inf & (a != b))[0])
        return f"inf at {i} on one side only: {a[i]!r} vs {b[i]!r}"
    fin = np.isfinite(a) & np.isfinite(b)
    with np.errstate(all="ignore"):
        scale = np.maximum(np.nan_to_num(ea, nan=np.inf), np.nan_to_num(eb, nan=np.inf))
        tol = rtol * np.maximum(np.abs(a), np.abs(b)) + atol * scale
        bad = fin & ~(np.abs(a - b) <= tol)
    if bad.any():
        i = tuple(int(t) for t in np.argwhere(bad)[0])
        return f"differ at {i}: {a[i]!r} vs {b[i]!r}"
    return None


def covers(verdict, sizes) -> bool:
    fn = getattr(verdict, "covers", None)
    if fn is None:
        return True
    return bool(fn(dict(sizes)))


def assumptions_of(verdict) -> tuple:
    got = getattr(verdict, "assumptions", None)
    if got is not None:
        return tuple(got)
    reason = verdict.reason
    return tuple(reason.split("assuming ", 1)[1].split(" and ")) if "assuming " in reason else ()


@dataclass
class Check:
    """What the oracle found at each size binding of one pair."""

    differ: list = field(default_factory=list)  # (binding_a, binding_b, why, drift) where outputs differ
    equal: int = 0
    skipped_invalid: int = 0
    skipped_uncovered: int = 0
    skipped_overflow: int = 0
    both_raise: int = 0


def _positional(prog_a: Program, prog_b: Program, binding_a):
    shapes = [bind_shape(n.shape, binding_a) for n in prog_a.graph.inputs]
    names_b = [n.params.name for n in prog_b.graph.inputs]
    if len(names_b) != len(shapes):
        return None
    try:
        return bind_sizes(prog_b.graph, dict(zip(names_b, shapes)))
    except AxonError:
        return None


def oracle(prog_a: Program, prog_b: Program, verdict=None, seed: int = 0, bindings=None, trials: int = 1) -> Check:
    """Evaluate both programs at many size bindings on the same random inputs (matched by position)."""
    check = Check()
    dims = prog_a.graph.dims
    for binding in (bindings if bindings is not None else size_bindings(dims, seed)):
        binding = {d: binding[d] for d in dims}
        if any(int(np.prod(bind_shape(n.shape, binding))) > MAX_ELEMENTS for n in prog_a.graph.inputs):
            continue
        binding_b = _positional(prog_a, prog_b, binding)
        if binding_b is None or not _valid(prog_a.graph, binding) or not _valid(prog_b.graph, binding_b):
            check.skipped_invalid += 1
            continue
        if verdict is not None and not covers(verdict, {**binding_b, **binding}):
            check.skipped_uncovered += 1
            continue
        rng = np.random.default_rng([seed, *binding.values()])
        for _ in range(trials):
            arrays = [rng.standard_normal(bind_shape(n.shape, binding)) for n in prog_a.graph.inputs]
            why, drift = _one(prog_a, prog_b, arrays, binding, binding_b)
            if why == "overflow":
                check.skipped_overflow += 1
            elif why == "both raise":
                check.both_raise += 1
            elif why is None:
                check.equal += 1
            else:
                check.differ.append((binding, binding_b, why, drift))
                break
    return check


def _one(prog_a, prog_b, arrays, binding_a, binding_b):
    results, errors, drift = [], [], []
    for prog, binding in ((prog_a, binding_a), (prog_b, binding_b)):
        named = {n.params.name: x for n, x in zip(prog.graph.inputs, arrays)}
        try:
            outs, errs, d = evaluate_with_bound(prog.graph, named, binding)
            results.append((outs, errs))
            drift += [f"{prog.name}: {x}" for x in d]
        except Overflow:
            return "overflow", drift
        except Exception as err:  # NumPy refusing a shape (broadcast, reshape, empty max): undefined
            results.append(None)
            errors.append(f"{prog.name} raises {type(err).__name__}: {err}")
    if results[0] is None and results[1] is None:
        return "both raise", drift
    if results[0] is None or results[1] is None:
        return "; ".join(errors), drift
    (oa, ea), (ob, eb) = results
    if len(oa) != len(ob):
        return f"{len(oa)} vs {len(ob)} outputs", drift
    for k, (a, b, xa, xb) in enumerate(zip(oa, ob, ea, eb)):
        why = compare(a, b, xa, xb)
        if why is not None:
            return f"output {k}: {why}", drift
    return None, drift


# ============================================================================================
# One example, end to end
# ============================================================================================
@dataclass
class Outcome:
    pair: Pair
    status: str  # proved / refuted / unknown / invalid / crash
    reason: str = ""
    severe: Optional[str] = None  # "proved-but-false" with the evidence
    false_refutation: Optional[str] = None  # a sound pair refuted with a counterexample NumPy doesn't show
    check: Optional[Check] = None
    seconds: float = 0.0
    assumptions: tuple = ()

    def report(self) -> str:
        lines = [f"kind {self.pair.kind}, rules {', '.join(self.pair.rules)}", f"verdict: {self.status}: {self.reason}"]
        if self.assumptions:
            lines.append(f"assumptions: {'; '.join(self.assumptions)}")
        if self.severe:
            lines.append(f"PROVED-BUT-FALSE: {self.severe}")
        if self.false_refutation:
            lines.append(f"refuted-but-equal: {self.false_refutation}")
        lines += ["--- A ---", self.pair.source_a.rstrip(), "--- B ---", self.pair.source_b.rstrip()]
        return "\n".join(lines)


class Hang(BaseException):
    """The verifier ran past the per-example limit (a BaseException: no `except Exception` on the
    way may take it for an ordinary error and carry on)."""


def _alarm(signum, frame):
    raise Hang("the verifier ran past the per-example time limit")


def run_pair(pair: Pair, verifier, seed: int = 0, bindings_seed: Optional[int] = None,
             limit_s: int = 0) -> Outcome:
    """Verify one pair and judge the verdict. `limit_s` > 0: a verifier call that runs longer (in
    this process: the solver's own child has its timeout) is stopped and reported as a crash."""
    import signal
    import time
    import traceback

    if not pair.source_a:
        return Outcome(pair, "invalid", "no pair could be generated")
    try:
        prog_a, prog_b = build(pair.source_a, "f"), build(pair.source_b, "g")
    except AxonError as err:
        return Outcome(pair, "invalid", f"does not trace: {err}")
    t0 = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, _alarm) if limit_s else None
    try:
        if limit_s:  # and every second after, should one alarm be lost on the way
            signal.setitimer(signal.ITIMER_REAL, limit_s, 1.0)
        # whole programs: inputs correspond by position (check_graphs where check_programs is absent)
        check = getattr(verifier, "check_programs", verifier.check_graphs)
        verdict = check(prog_a.graph, prog_b.graph)
    except Hang as err:
        return Outcome(pair, "timeout", f"{err} ({limit_s} s)\n{traceback.format_exc(limit=-8)}",
                       seconds=time.perf_counter() - t0)
    except Exception as err:
        return Outcome(pair, "crash", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-8)}",
                       seconds=time.perf_counter() - t0)
    finally:
        if limit_s:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - t0
    status = verdict.status.value
    out = Outcome(pair, status, verdict.reason, seconds=seconds, assumptions=assumptions_of(verdict))
    if status == "proved":
        check = oracle(prog_a, prog_b, verdict, seed=seed if bindings_seed is None else bindings_seed)
        out.check = check
        if check.differ:
            ba, bb, why, drift = check.differ[0]
            sizes = ", ".join(f"{k}={v}" for k, v in ba.items()) or "no dimensions"
            if bb != ba:
                sizes += " (B: " + ", ".join(f"{k}={v}" for k, v in bb.items()) + ")"
            out.severe = f"at sizes {sizes}: {why}" + (f" [shape drift: {'; '.join(drift[:3])}]" if drift else "")
    elif status == "refuted" and pair.kind == "sound" and verdict.counterexample:
        cex = verdict.counterexample
        sizes = cex.get("sizes") or {}
        if set(prog_a.graph.dims) <= set(sizes):
            check = oracle(prog_a, prog_b, None, seed=seed + 1, bindings=[sizes], trials=3)
            if check.equal and not check.differ:
                out.false_refutation = (f"counterexample at sizes {sizes} ({verdict.reason}), but NumPy agrees "
                                        f"there on 3 fresh inputs")
    return out
