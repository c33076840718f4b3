"""Per-element error bounds for checking a kernel's outputs against the float64 reference.

A kernel passes when, at every output element, |out - ref| <= bound. The bound is what
floating-point error analysis allows a correct kernel at that element, from the dtypes involved
and that element's magnitudes; not a fraction of the largest output (which lets a small element
be wrong by the error room of a large one). Two ways to get it:

* `program_reference(graph, inputs, precision)`: the reference and a forward error analysis of
  the graph, evaluated together. Each value v carries e, a bound on |computed v - exact v|:
  - an input: e = |x - fl_mid(x)| (zero unless the kernel may narrow it);
  - an element-wise primitive f: e = max over the corners of the box v_i +- e_i of
    |f(corner) - f(v)|, plus its arithmetic in the engine's float32 (c_f u_acc |f|: 1 u for
    + - * / sqrt, 4 u (2 ulp) for exp log tanh, 0 for max min neg) and its storing in the
    intermediate dtype (u_mid |f| where that is narrower than float32); a divide counts twice (it
    may be lowered as reciprocal then multiply). Every primitive is monotone in each argument on
    a box that avoids its poles (a divisor or log argument whose box holds 0 makes e infinite), so
    the corners give its exact range: interval arithmetic, not a first-order estimate. Derived
    operators (silu, gelu, rsqrt, ...) are expanded through their scalar `definition`, each step
    rounded;
  - a sum of n terms (any order, any blocking): e = sum e_i + gamma_{n-1}(u_acc) sum |v_i|
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., (4.4)), a cumsum the same
    per prefix; a max: the spread of the box's max, between max(v_i - e_i) and max(v_i + e_i)
    (an element far below the maximum, a masked score, adds nothing); a row max that only shifts
    a normalized exponential (exp(x - m) / sum exp(x - m), `normalized_shifts`) has no error that
    reaches the output: the shift cancels;
  - values of positions (an arange and what is built from it: a mask) are exact, as the kernel
    compares them as integers; a comparison is exact where it cannot flip (0 and 1 are numbers
    of every format);
  - a matmul over K: e = (|A| + E_A)(|B| + E_B) - |A||B| + gamma_K(u_acc) |A||B| (Higham (3.5),
    accumulation in float32 PSUM), each plus the rounding of the result to u_mid;
  - layout operators move e with the values.
  That worst case grows like K u sum|a||b|, which at Llama sizes is as large as the output itself
  (K = 14336, a bf16 operand: sum|a||b| ~ 100 |ref|). So the same walk also carries the
  probabilistic model of Higham and Mary (SIAM J. Sci. Comput. 41(5), 2019: rounding errors
  independent, mean zero): each value's error is `fixed` (bounded, any sign, possibly shared) plus
  independent rounding errors of its own whose coefficients have L2 norm `rand`. A fresh rounding
  adds in L2 to rand; a sum over n terms adds the terms' rand in L2 and its own n - 1 additions as
  u sqrt(n - 1) sum|x|; a matmul's K products and additions add u sqrt(2K) |A||B|; wherever one
  element's error reaches several others (a broadcast operand, a matmul operand, a max, a scan's
  prefix) its rand is spent into fixed at LAMBDA; the model is first order through divides and
  logs. A column broadcast into a product (x * rsqrt(mean(x^2)), a norm) scales each row by one
  relative error: that part is kept as `row`, a relative error common to the last axis, which
  products of one width, last-axis sums and maxes and a matmul's rows carry as a scale (d |h|,
  not the d sum|a||b| of elementwise errors). By Hoeffding's inequality the error exceeds
  fixed + LAMBDA rand (LAMBDA = 8) with probability at most 2 exp(-32) = 2.5e-14 per element.
  The bound is the smaller of the two models, plus the output's rounding u_out (|ref| + e) where
  its dtype is narrower than what its last operation stored (else that store was the rounding).
  The graph's own operator order is analysed: a caller passes the variant a kernel implements.
* `function_tolerance(...)`: for an opaque NumPy reference (`axon simulate --reference`):
  bound = (u_out + R u_mid) |ref| + (gamma_K(u_acc) + C u_mid) M, where M = max(|ref|, |f(|x|)|)
  (f on the inputs' absolute values: sum |a_ik||b_kj| for a matmul, sum |x| for a sum), K the
  longest reduction, R the kernel's intermediate roundings, C the inputs narrowed to u_mid; plus
  the reference's own rounding when it returns float32.

u is the unit roundoff (2^-24 float32, 2^-8 bfloat16, 2^-11 float16); gamma_n = n u / (1 - n u).
Each rounding also allows half the dtype's smallest subnormal (the underflow term of fl(x) =
x (1 + d) + h). The float64 reference's own error is negligible beside these and ignored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Optional

import ml_dtypes
import numpy as np

from axon.heap import reusing_freed_memory
from axon.ir import Graph, Node, positional
from axon.semantics import batch
from axon.semantics.algebra import const_value
from axon.semantics.ops import OP_SPECS, OpKind, Op, concrete_params
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import bind_shape

# float32 accuracy of each primitive as the engines evaluate it, in units of u_acc: + - * / and
# sqrt are correctly rounded (1 u), the transcendentals within 2 ulp (4 u) of libm; max, min and
# negation are exact
_ARITH_U = {ScalarOp.ADD: 1, ScalarOp.SUB: 1, ScalarOp.MUL: 1, ScalarOp.DIV: 1, ScalarOp.EXP: 4,
            ScalarOp.LOG: 4, ScalarOp.SQRT: 1, ScalarOp.TANH: 4, ScalarOp.MAXIMUM: 0,
            ScalarOp.MINIMUM: 0, ScalarOp.NEG: 0, ScalarOp.GE: 0, ScalarOp.GT: 0, ScalarOp.EQ: 0,
            ScalarOp.WHERE: 0}
# roundings a primitive may take in a kernel: a divide may be lowered as reciprocal then multiply
_ROUNDINGS = {ScalarOp.DIV: 2}


def _finfo(dtype):
    dt = np.dtype(dtype)
    try:
        return np.finfo(dt)
    except (TypeError, ValueError):
        return ml_dtypes.finfo(dt)


def unit_roundoff(dtype) -> float:
    """u = eps / 2: the largest relative error of rounding to nearest in `dtype` (0 for integers)."""
    dt = np.dtype(dtype)
    return 0.0 if dt.kind in "iub" else float(_finfo(dt).eps) / 2


def _holds(wide, narrow) -> bool:
    """Every value of float dtype `narrow` is a value of float dtype `wide`."""
    wide, narrow = np.dtype(wide), np.dtype(narrow)
    if wide == narrow:
        return True
    if narrow.kind not in "fV" or wide.kind not in "fV":
        return False
    w, n = _finfo(wide), _finfo(narrow)
    return (n.nmant <= w.nmant and n.maxexp <= w.maxexp
            and n.minexp - n.nmant >= w.minexp - w.nmant)  # subnormals included


def _tiny(dtype) -> float:
    """Half the smallest subnormal: the absolute error of a rounding that underflows."""
    dt = np.dtype(dtype)
    return 0.0 if dt.kind in "iub" else float(_finfo(dt).smallest_subnormal) / 2


# the probabilistic model's confidence: a sum of independent mean-zero errors bounded by c_j exceeds
# LAMBDA sqrt(sum c_j^2) with probability at most 2 exp(-LAMBDA^2 / 2) = 2.5e-14 (Hoeffding)
LAMBDA = 8.0


def _scaled(u: float, x):
    """u x, where u = 0 gives 0 even on an unbounded (infinite) x."""
    return u * x if u else 0.0


def gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u), the relative bound on n successive roundings (inf once n u >= 1)."""
    nu = n * u
    return nu / (1 - nu) if nu < 1 else float("inf")


@dataclass(frozen=True)
class Precision:
    """Where a kernel rounds: its outputs, the intermediates it may store (in the narrowest dtype
    it touches: a bf16 kernel may keep any wide intermediate, a pass-crossing value or a matmul
    operand in bf16), and where it accumulates (float32: PSUM, and the engines' arithmetic)."""

    out: tuple[str, ...]  # per output
    mid: str
    acc: str = "float32"

    @staticmethod
    def of_kernel(dtype: str, outputs: int = 1) -> "Precision":
        return Precision((dtype,) * outputs, dtype)

    def u(self, which: str) -> float:
        return unit_roundoff(_np_dtype(getattr(self, which)))


def _np_dtype(name) -> np.dtype:
    if isinstance(name, np.dtype):
        return name
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, str(name)) else np.dtype(name)


@dataclass(frozen=True)
class Tolerance:
    """Per-output, per-element bounds on |out - ref|, and how they were made."""

    bounds: tuple[np.ndarray, ...]
    precision: Precision
    reduction: int  # the longest reduction (sum, scan, matmul contraction) the bound covers
    method: str  # "program": forward error analysis of the graph; "reference": |f|(|x|) magnitudes
    expected: tuple[np.ndarray, ...] = field(default=(), repr=False)  # the reference, for relative figures
    roundings: int = 0  # (method "reference") the R of the formula
    narrowed: int = 0  # (method "reference") its C

    def reshaped(self, shapes) -> "Tolerance":
        """The same bounds on outputs of other shapes (a packed kernel's views of its outputs)."""
        return Tolerance(tuple(b.reshape(sh) for b, sh in zip(self.bounds, shapes)), self.precision, self.reduction,
                         self.method, tuple(x.reshape(sh) for x, sh in zip(self.expected, shapes)), self.roundings,
                         self.narrowed)

    def formula(self) -> str:
        if self.method == "program":
            return ("forward error analysis of the program, per element the smaller of the worst case "
                    "(intervals through each element-wise primitive, gamma_(n-1)(u_acc) sum|x| per sum, "
                    "gamma_K(u_acc) |A||B| per matmul) and the probabilistic model (fixed + "
                    f"{LAMBDA:g} x the L2 norm of independent roundings), plus u_out |ref| at the output")
        return (f"(u_out + {self.roundings} u_mid) |ref| + (gamma_K(u_acc) + {self.narrowed} u_mid) "
                f"max(|ref|, |f(|x|)|) with K = {self.reduction}, plus the reference's own rounding")

    def summary(self) -> dict:
        """What a report says about the bound: the formula's parameters and its size on this data."""
        b = np.concatenate([np.ravel(x) for x in self.bounds]) if self.bounds else np.zeros(0)
        finite = b[np.isfinite(b)]
        out = {"method": self.method, "formula": self.formula(),
               "unit_roundoff": {"out": [unit_roundoff(_np_dtype(d)) for d in self.precision.out],
                                 "mid": self.precision.u("mid"), "acc": self.precision.u("acc")},
               "dtypes": {"out": list(self.precision.out), "mid": self.precision.mid, "acc": self.precision.acc},
               "longest_reduction": self.reduction, "elements": int(b.size),
               "unbounded_elements": int(b.size - finite.size),
               "bound_median": float(np.median(finite)) if finite.size else None,
               "bound_max": float(finite.max()) if finite.size else None}
        if self.expected:
            ref = np.concatenate([np.ravel(np.abs(x)) for x in self.expected])
            big = np.isfinite(b) & (ref > 0)
            out["bound_over_ref_median"] = float(np.median(b[big] / ref[big])) if big.any() else None
        return out


def describe(summary: dict) -> str:
    """A `Tolerance.summary()` in one line, for reports."""
    rel = summary.get("bound_over_ref_median")
    med = summary["bound_median"]
    return (f"|out - ref| <= {summary['formula']}; out {', '.join(summary['dtypes']['out'])}, intermediates "
            f"{summary['dtypes']['mid']}, accumulation {summary['dtypes']['acc']}, longest reduction "
            f"{summary['longest_reduction']}; median bound " + ("none" if med is None else f"{med:.3g}")
            + (f" = {rel:.3g} |ref|" if rel is not None else "") + _width_note(rel)
            + (f"; {summary['unbounded_elements']} element(s) unbounded" if summary["unbounded_elements"] else ""))


LOOSE = 0.05  # a median bound past this share of |ref| is said to be loose: a kernel off by that passes


def _width_note(rel) -> str:
    """What a wide bound lets through, in words (a bf16 attention's chained roundings bound each
    element at 0.3-0.7 of its value: a softmax scale 6% off passes)."""
    if rel is None or rel < LOOSE:
        return ""
    if rel >= 1:
        return ("; the bound is wider than the values it checks, so this check is weak: an error of the "
                "size of the output itself can pass")
    return f"; this check is loose: a kernel off by {rel:.0%} of a typical element can pass"


# --- the forward error analysis ----------------------------------------------------------------
@dataclass
class _Val:
    """A value and its error under both models: `det` bounds |computed - v| in the worst case; the
    probabilistic model splits the error into `fixed` (bounded, any sign, possibly shared with
    other elements) and `rand`, the L2 norm of the coefficients of independent mean-zero rounding
    errors that belong to this element alone (so that a sum over elements adds them in L2).
    In the probabilistic model a value may also carry `row`: the computed value is v (1 + d) plus
    those errors, |d| <= row, one d for all elements along the last axis (a row scaled by the
    error of its norm, x * rsqrt(mean(x^2))). A matmul keeps it a scale of its rows: d h, where
    counted as fixed errors it would be d sum|a||b|, sqrt(K) times more (`_row_rules`)."""

    v: np.ndarray
    det: np.ndarray
    fixed: np.ndarray
    rand: np.ndarray
    row: Optional[np.ndarray] = None  # [.., 1]: a relative error common to the last axis

    def likely(self) -> np.ndarray:
        """The probabilistic model's bound: fixed + LAMBDA rand (+ row |v|)."""
        out = self.fixed + LAMBDA * self.rand
        return out if self.row is None else _clean(out + self.row * np.abs(self.v))

    def shared(self) -> "_Val":
        """The same error, once other elements share it (a broadcast, a matmul's row, a scan's
        prefix): its independent part is spent into the fixed one at LAMBDA."""
        return _Val(self.v, self.det, np.fmin(self.det, self.likely()), _zeros(np.shape(self.v)))

    def plain(self) -> "_Val":
        """The same value with its row error counted as fixed (an operation that does not keep it)."""
        return self if self.row is None else _Val(self.v, self.det, _clean(self.fixed + self.row * np.abs(self.v)),
                                                  self.rand)

    def unrowed(self) -> "_Val":
        """The value's other errors, its row error set aside (a rule carries it)."""
        return self if self.row is None else _Val(self.v, self.det, self.fixed, self.rand)

    def with_row(self, row) -> "_Val":
        """This value with row error `row`, its other errors scaled by 1 + row (they and the
        roundings after are of the scaled value)."""
        if row is None or not _any(row):
            return self
        grow = 1.0 + row
        return _Val(self.v, self.det, _clean(self.fixed * grow), _clean(self.rand * grow), _clean(np.asarray(row, np.float64)))


def _clean(x):
    """An error bound with NaN (inf - inf, 0 * inf) where nothing bounds it: inf there. Bounds are
    non-negative, so their sum is NaN exactly when one of them is (one cheap pass)."""
    return np.where(np.isnan(x), np.inf, x) if np.isnan(np.sum(x)) else x


def _zeros(shape) -> np.ndarray:
    """No error, at a value's shape: a read-only view of one zero, not an array (at Llama sizes
    an input's error parts would be GBs of zeros, written on reused memory)."""
    return np.broadcast_to(np.float64(0.0), shape)


def _any(e) -> bool:
    """np.any(e), at once for a view of one value (`_zeros`)."""
    e = np.asarray(e)
    if e.size and not any(e.strides):
        return bool(e.flat[0])
    return bool(np.any(e))


def _full(x, shape) -> np.ndarray:
    """An error part at the value's full shape (a read-only view where it is broadcast)."""
    x = np.asarray(x, np.float64)
    return x if x.shape == shape else np.broadcast_to(x, shape)


def _reach(absv: np.ndarray, err) -> float:
    """An upper bound on max(|v| + err) over the finite errors, in two cheap passes."""
    e = np.asarray(err)
    top = float(np.max(e, initial=0.0)) if e.size else 0.0
    if not np.isfinite(top):
        top = float(np.max(e, where=np.isfinite(e), initial=0.0))
    return float(np.max(absv, initial=0.0)) + top


def _l2(a, b, shape=None) -> np.ndarray:
    """sqrt(a^2 + b^2) of non-negative error parts, broadcast to `shape`: np.hypot's value (to an
    ulp or two of a probabilistic bound) at a quarter of its cost (hypot was a third of a check's
    reference time at Llama sizes); hypot itself only where the squares overflow."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    shape = np.broadcast_shapes(a.shape, b.shape, *(() if shape is None else (shape,)))
    if not _any(a):
        return _full(b, shape)
    with np.errstate(over="ignore"):
        out = np.add(np.square(a), np.square(b), out=np.empty(shape))
        np.sqrt(out, out=out)
    over = np.isinf(out)
    if np.any(over):  # a square past float64's range: hypot there
        out[over] = np.broadcast_to(np.hypot(a, b), shape)[over]
    return out


class _Bounded:
    """Evaluation of the graph's operations on `_Val`s."""

    def __init__(self, precision: Precision):
        self.u_acc = precision.u("acc")
        mid = _np_dtype(precision.mid)
        self.mid = mid
        # storing at u_mid only costs where the intermediate dtype is narrower than the arithmetic
        self.u_store = unit_roundoff(mid) if unit_roundoff(mid) > self.u_acc else 0.0
        self.tiny = _tiny(mid)
        # past this a value overflows: float32's limit, or the intermediate dtype's where the kernel
        # stores the value in it (`_whole_reference` sets it per node, as it does u_store)
        self.largest_stored = min(float(np.finfo(np.float32).max), float(_finfo(mid).max))
        self.largest = self.largest_stored
        self.depth = 0  # how deep inside derived operators' definitions the evaluation is

    def narrowed(self, x: np.ndarray) -> np.ndarray:
        """|x - fl_mid(x)|: what narrowing x to the intermediate dtype loses (exactly)."""
        return np.abs(x - x.astype(self.mid).astype(np.float64))

    def rounded(self, value, det, fixed, rand, arith_u: float, times: int = 1) -> _Val:
        """The value computed in float32 (within arith_u relative) and stored at u_mid, `times`
        over, from a computation within (det | fixed, rand) of it: each rounding errs by at most
        u (|value| + err), an independent mean-zero error in the probabilistic model. Where the
        computation is exact (a relu, a max, a negation of exact operands) the store's error is
        known: |value - fl_mid(value)|, fixed. (At Llama sizes each array here is a pass over
        GBs: temporaries are updated in place.)"""
        value = np.asarray(value, np.float64)
        shape = value.shape
        absv = np.abs(value)
        # a value the kernel's float32 (or a narrower store) cannot hold may overflow to inf, and
        # what is computed from it (1 / (1 + exp(-x)) at x < -88.7) has no bound from here
        # (a step inside a derived operator's definition is never held: silu(-89) is one instruction)
        if not self.depth and _reach(absv, det) > self.largest:
            over = absv + np.where(np.isfinite(det), det, 0.0) > self.largest
            if np.any(over):
                det, fixed = np.where(over, np.inf, det), np.where(over, np.inf, fixed)
        k = arith_u + self.u_store
        if not k:  # exact arithmetic kept in float32: only the underflow term
            fresh = times * self.tiny
            return _Val(value, _clean(det + fresh), _clean(_full(fixed, shape)), _clean(_l2(rand, fresh, shape)))
        fresh_det = absv + det
        fresh_det *= times * k
        fresh_det += times * self.tiny
        fresh_rand = np.fmin(det, fixed + LAMBDA * rand) if _any(rand) else np.fmin(det, fixed)
        fresh_rand = absv + fresh_rand
        fresh_rand *= times * k
        fresh_rand += times * self.tiny
        if not arith_u:  # a store of an exact computation is known exactly where its operands are
            exact = np.asarray(det) == 0
            if np.any(exact):
                known = times * self.narrowed(value)
                fresh_det = np.where(exact, known, fresh_det)
                fixed = fixed + np.where(exact, known, 0.0)
                fresh_rand = np.where(exact, 0.0, fresh_rand)
        fresh_det += det
        return _Val(value, _clean(fresh_det), _clean(_full(fixed, shape)), _clean(_l2(rand, fresh_rand, shape)))

    def exact(self, x) -> _Val:
        """An input or a constant: the kernel holds it exactly, or narrowed (a known, fixed error).
        An array whose dtype the intermediate one holds (a bf16 weight) loses nothing: no pass
        over it (at Llama sizes each is a pass over GBs)."""
        src = np.asarray(x)
        x = np.asarray(src, np.float64)
        e = _zeros(x.shape) if _holds(self.mid, src.dtype) else self.narrowed(x)
        return _Val(x, e, e, _zeros(x.shape))

    def const(self, value) -> _Val:
        return self.exact(np.float64(value))

    def apply(self, op: ScalarOp, *args: _Val) -> _Val:
        spec = SCALAR_SPECS[op]
        vals = [a.v for a in args]
        with np.errstate(all="ignore"):
            if op not in _ARITH_U:  # a derived operator: its value as the reference computes it, its
                self.depth += 1  # error through its definition's primitive steps
                try:
                    r = spec.definition(self, *args)
                finally:
                    self.depth -= 1
                return _Val(np.asarray(spec.numpy(*vals), np.float64), r.det, r.fixed, r.rand, r.row)
            args, row = _row_rules(op, args)
            out = self._primitive(op, spec, vals, [a.plain() for a in args])
            return out if row is None else out.with_row(row)

    def _primitive(self, op: ScalarOp, spec, vals, args) -> _Val:
        with np.errstate(all="ignore"):
            value = spec.numpy(*vals)
            # an operand broadcast into this shape is shared by the elements it reaches
            args = [a if np.shape(a.v) == np.shape(value) else a.shared() for a in args]
            det = _spread(op, spec, vals, [a.det for a in args], value)
            det = np.where(_pole(op, vals, [a.det for a in args]), np.inf, det)
            # the probabilistic model is first order in the errors: through a divide or a log by
            # derivatives, so a worst-case box that reaches the pole (an exp's wide upper side
            # seen as symmetric) does not leave it unbounded
            fixed = _probable_spread(op, spec, vals, [a.fixed for a in args], value)
            rand = _probable_spread(op, spec, vals, [a.rand for a in args], value)  # |f'| rand, summed
            if op in _TRUTH:  # 0 or 1: exact in every format, wrong only where it flips
                return _Val(np.asarray(value, np.float64), det, fixed, rand)
            return self.rounded(value, det, fixed, rand, _ARITH_U[op] * self.u_acc, _ROUNDINGS.get(op, 1))


_TRUTH = (ScalarOp.GE, ScalarOp.GT, ScalarOp.EQ)


def _relative(x: _Val) -> np.ndarray:
    """A column's whole error relative to it: any bound on it will do, the smaller the better."""
    return _clean(np.fmin(x.det, x.likely()) / np.abs(x.v))


def _row_rules(op: ScalarOp, args) -> tuple[list, Optional[np.ndarray]]:
    """Where a product or quotient keeps a row error (`_Val.row`): the operands with their row
    errors set aside, and the result's row error; else (args, None). A column [.., 1] broadcast
    along a longer last axis scales each row by its own relative error, all of it (`_relative`);
    two values of one width (h * h, h * gain) multiply their row errors: (1 + d_a)(1 + d_b)."""
    if op not in (ScalarOp.MUL, ScalarOp.DIV) or len(args) != 2:
        return list(args), None
    a, b = args
    sa, sb = np.shape(a.v), np.shape(b.v)
    if not sa or not sb:
        return list(args), None
    wide = max(sa[-1], sb[-1]) > 1
    col_a, col_b = wide and sa[-1] == 1, wide and sb[-1] == 1
    row_of = lambda x: 0.0 if x.row is None else x.row
    whole = lambda x: _Val(x.v, x.det, _zeros(np.shape(x.v)), _zeros(np.shape(x.v)))  # its error is the row's
    if col_b and not col_a:  # x * c, x / c
        r_full, r_col = row_of(a), _relative(b)
        kept = [a.unrowed(), whole(b)]
    elif col_a and not col_b and op is ScalarOp.MUL:  # c * x
        r_full, r_col = row_of(b), _relative(a)
        kept = [whole(a), b.unrowed()]
    elif not col_a and not col_b and sa[-1] == sb[-1] and (a.row is not None or b.row is not None):
        r_full, r_col = row_of(a), row_of(b)  # h * h, h * gain: both rows scaled
        kept = [a.unrowed(), b.unrowed()]
    else:
        return list(args), None
    if op is ScalarOp.MUL:
        row = r_full + r_col + r_full * r_col
    else:  # (1 + d_a) / (1 + d_c) is within (r_a + r_c) / (1 - r_c) of 1 while r_c < 1
        row = np.where(r_col < 1, (r_full + r_col) / np.where(r_col < 1, 1 - r_col, 1.0), np.inf)
    return kept, _clean(np.asarray(row, np.float64))


def _spread(op: ScalarOp, spec, vals, errs, value):
    """sup |f(box) - f(v)| over the box v_i +- e_i: in closed form where f is linear or bilinear
    (the corners' own value) or a max/min (max e_i, which bounds it), else from the corners (f
    monotone in each argument on a box that avoids its poles, `_pole`)."""
    if not any(_any(e) for e in errs):
        return _zeros(np.shape(value))
    if op in (ScalarOp.ADD, ScalarOp.SUB):
        return errs[0] + errs[1]
    if op is ScalarOp.MUL:
        return np.abs(vals[0]) * errs[1] + np.abs(vals[1]) * errs[0] + errs[0] * errs[1]
    if op in (ScalarOp.MAXIMUM, ScalarOp.MINIMUM):
        return np.maximum(errs[0], errs[1])
    if op is ScalarOp.NEG:
        return errs[0]
    if op is ScalarOp.EXP:  # increasing and convex: the upper corner is the farther, e^v (e^e - 1),
        return _clean(value * np.expm1(errs[0]))  # one pass where the corners took six (softmax's logits)
    if op in _TRUTH:  # a 0/1 result flips where the boxes meet
        e = errs[0] + errs[1]
        return np.where((e > 0) & (np.abs(vals[0] - vals[1]) <= e), 1.0, 0.0)
    if op is ScalarOp.WHERE:  # the chosen branch's error, or both branches' gap where c may flip
        (c, a, b), (ec, ea, eb) = vals, errs
        chosen = np.where(c != 0, ea, eb)
        return _clean(np.where((ec > 0) & (np.abs(c) <= ec), np.abs(a - b) + np.maximum(ea, eb), chosen))
    spread = _zeros(np.shape(value))
    for signs in np.ndindex(*(2,) * len(vals)):
        corner = [v + (e if s else -e) for v, e, s in zip(vals, errs, signs)]
        if op is ScalarOp.SQRT:
            corner = [np.maximum(corner[0], 0.0)]  # sqrt is 1/2-Holder at 0: clip to its domain
        spread = np.maximum(spread, np.abs(spec.numpy(*corner) - value))
    return _clean(spread)


def _probable_spread(op: ScalarOp, spec, vals, errs, value):
    """`_spread` for the probabilistic model: first order through the primitives with a pole."""
    if op is ScalarOp.DIV and any(_any(e) for e in errs):
        a, b = vals
        return _clean(errs[0] / np.abs(b) + errs[1] * np.abs(a) / (b * b))
    if op is ScalarOp.LOG and _any(errs[0]):
        return _clean(errs[0] / np.abs(vals[0]))
    return _spread(op, spec, vals, errs, value)


def _pole(op: ScalarOp, vals, errs) -> np.ndarray:
    """Where the box reaches a pole of f (a divisor or a log argument that may be 0): no bound."""
    if op is ScalarOp.DIV:
        return np.abs(vals[1]) <= errs[1]
    if op is ScalarOp.LOG:
        return vals[0] <= errs[0]
    return np.zeros((), bool)


def program_reference(graph: Graph, arrays: Mapping[str, np.ndarray], precision: Precision,
                      narrow: Optional[Collection[Node]] = None,
                      binding: Optional[Mapping[str, int]] = None) -> tuple[tuple[np.ndarray, ...], Tolerance]:
    """The float64 reference of `graph` on `arrays` and, per output element, the bound on what a
    kernel computing it in `precision` may differ from it (module docstring). `narrow`: the nodes
    the kernel may store in the intermediate dtype (None: every computed value, which holds for
    any kernel; a kernel builder knows better, e.g. `tiling.build.narrow_values`). Intermediate
    values are released after their last use: a check at Llama sizes holds weights in float64.
    A large graph is evaluated over slices of a batch axis (`batch.in_slices`), whose values and
    bounds concatenate: attention at Llama-3-70B sizes keeps [heads, rows, t] logits, 24 GB of
    reference and bounds at once."""
    with reusing_freed_memory():
        return _program_reference(graph, arrays, precision, narrow, binding)


def _program_reference(graph, arrays, precision, narrow, binding):
    from axon.semantics.evaluate import bind_sizes

    if binding is None:
        binding = bind_sizes(graph, {k: np.shape(v) for k, v in arrays.items()})

    def join(parts, at: int):
        values = tuple(np.concatenate(vs, axis=at) for vs in zip(*(v for v, _ in parts)))
        bounds = tuple(np.concatenate(bs, axis=at) for bs in zip(*(t.bounds for _, t in parts)))
        return values, Tolerance(bounds, precision, parts[0][1].reduction, "program", values)
    return batch.in_slices(graph, arrays, binding, lambda a, b: _whole_reference(graph, a, precision, narrow, b), join)


def _whole_reference(graph: Graph, arrays, precision: Precision, narrow, binding):
    alg = _Bounded(precision)
    u_store = alg.u_store
    nodes = graph.nodes()
    last = {}
    for i, n in enumerate(nodes):
        for x in n.inputs:
            last[x] = i
    env: dict = {}
    longest = 1
    exact = positional(nodes)  # evaluated exactly by the kernel (tiling.positions)
    shifts = normalized_shifts(graph)
    for i, node in enumerate(nodes):
        if node.op is Op.INPUT:
            env[node] = alg.exact(arrays[node.params.name])
            continue
        held_narrow = narrow is None or node in narrow
        alg.u_store = u_store if held_narrow else 0.0
        alg.largest = alg.largest_stored if held_narrow else float(np.finfo(np.float32).max)
        env[node], k = _node(node, [env[x] for x in node.inputs], alg, binding)
        if node in exact:
            env[node] = _exact_integer(env[node])
        elif node in shifts:  # a softmax's row max: its error cancels in the normalization
            zero = _zeros(np.shape(env[node].v))
            env[node] = _Val(env[node].v, zero, zero, zero)
        longest = max(longest, k)
        for x in set(node.inputs):
            if last[x] == i and x not in graph.outputs:
                del env[x]
    values, bounds = [], []
    for out, dt in zip(graph.outputs, precision.out):
        r = env[out]
        dt = _np_dtype(dt)
        values.append(r.v)
        # the output's rounding: its last operation stored it at u_mid, unless out is narrower
        stored = u_store if narrow is None or out in narrow else 0.0
        u_out = unit_roundoff(dt) if unit_roundoff(dt) > stored else 0.0
        e = np.broadcast_to(np.fmin(r.det, r.likely()), r.v.shape)
        bounds.append(e + _scaled(u_out, np.abs(r.v) + e) + _tiny(dt))
    return tuple(values), Tolerance(tuple(bounds), precision, longest, "program", tuple(values))


def normalized_shifts(graph: Graph) -> set:
    """Row maxima m = max(x) whose error cancels: used only in exp(x - m), each such e only in its
    own row sum s and in numerators divided by s (e itself, or e @ w). A kernel's m + d gives
    exp(x - m) exp(-d) in numerator and denominator alike, so the output does not depend on d."""
    users: dict = {}
    for n in graph.nodes():
        for x in n.inputs:
            users.setdefault(x, []).append(n)
    outputs = set(graph.outputs)
    last_axis = lambda n: n.params.axis == n.inputs[0].rank - 1 and n.params.keepdims

    def normalized(e: Node) -> bool:
        sums = [u for u in users.get(e, []) if u.op is Op.REDUCE_SUM and last_axis(u)]
        if e in outputs or len(sums) != 1 or sums[0] in outputs:
            return False
        s = sums[0]
        divided = lambda num: all(u.op is Op.DIV and u.inputs == (num, s) for u in users.get(num, ()))
        for u in users[e]:
            if u is s or (u.op is Op.DIV and u.inputs == (e, s)):
                continue
            if not (u.op is Op.MATMUL and u.inputs[0] is e and u not in outputs and divided(u)):
                return False
        return all(u.op is Op.DIV and u.inputs[1] is s and u.inputs[0] is not s for u in users[s])

    out = set()
    for m in graph.nodes():
        if m.op is not Op.REDUCE_MAX or not last_axis(m) or m in outputs:
            continue
        x = m.inputs[0]
        subs = users.get(m, [])
        if subs and all(u.op is Op.SUB and u.inputs == (x, m) and u not in outputs and users.get(u)
                        and all(e.op is Op.EXP and normalized(e) for e in users[u]) for u in subs):
            out.add(m)
    return out


def _exact_integer(x: _Val) -> _Val:
    if not np.all(np.asarray(x.v) == np.round(x.v)):
        return x  # a fraction of positions (a scale) is rounded like any other value
    zero = _zeros(np.shape(x.v))
    return _Val(x.v, zero, zero, zero)


def kernel_reference(graph: Graph, arrays: Mapping[str, np.ndarray], dtype: str,
                     narrow: Optional[Collection[Node]] = None,
                     binding: Optional[Mapping[str, int]] = None) -> tuple[tuple[np.ndarray, ...], Tolerance]:
    """`program_reference` for a kernel whose inputs, outputs and narrow intermediates are `dtype`."""
    return program_reference(graph, arrays, Precision.of_kernel(dtype, len(graph.outputs)), narrow, binding)


def _node(node, ins: list[_Val], alg: _Bounded, binding) -> tuple[_Val, int]:
    """One node's `_Val`, and the reduction length it adds (1 for none)."""
    op, p = node.op, node.params
    if op is Op.CONST:
        return alg.const(const_value(p.value, binding)), 1
    spec = OP_SPECS[op]
    if spec.kind is OpKind.LEAF:  # arange: exact integers, narrowed as a constant would be
        return alg.exact(spec.numpy([], p, bind_shape(node.shape, binding))), 1
    if spec.kind is OpKind.ELEMENTWISE:
        return alg.apply(spec.scalar, *ins), 1
    if spec.kind is OpKind.LAYOUT:  # moves values: each part of the error moves with them
        shape, p = bind_shape(node.shape, binding), concrete_params(p, binding)
        ins = [x.plain() for x in ins]  # a row error no longer along the last axis

        def f(part):
            return np.asarray(spec.numpy([np.broadcast_to(getattr(x, part), np.shape(x.v)) for x in ins], p, shape),
                              np.float64)
        return _Val(f("v"), f("det"), f("fixed"), f("rand")), 1
    if op is Op.MATMUL:  # A's row error is a scale of the result's rows: (A diag) B = diag (A B)
        a, b = ins
        out, k = _matmul(a.unrowed(), b.plain(), alg)
        return out.with_row(a.row), k
    (x,) = ins
    ax, keep = p.axis, getattr(p, "keepdims", True)
    n = np.shape(x.v)[ax]
    # along the last axis, kept: sum and max of a row scaled by 1 + d are scaled by 1 + d
    row = x.row if ax == x.v.ndim - 1 and keep and op is not Op.CUMSUM else None
    x = x.unrowed() if row is not None else x.plain()
    if op is Op.REDUCE_MAX:  # its independent parts do not add, so they are spent
        v, y = np.max(x.v, axis=ax, keepdims=keep), x.shared()
        return alg.rounded(v, _max_spread(x.v, x.det, v, ax, keep), _max_spread(x.v, y.fixed, v, ax, keep),
                           _zeros(np.shape(v)), 0.0).with_row(row), 1
    if op is Op.REDUCE_SUM:
        v = np.sum(x.v, axis=ax, keepdims=keep)
        mag = np.sum(np.abs(x.v), axis=ax, keepdims=keep)
        det = np.sum(x.det, axis=ax, keepdims=keep) + gamma(n - 1, alg.u_acc) * mag
        # n - 1 additions, each an independent error of at most u |partial sum| <= u sum|x|
        rand = _l2(np.sqrt(np.sum(x.rand ** 2, axis=ax, keepdims=keep)), alg.u_acc * np.sqrt(n - 1) * mag)
        return alg.rounded(v, det, np.sum(x.fixed, axis=ax, keepdims=keep), rand, 0.0).with_row(row), n
    if op is Op.CUMSUM:
        v = np.cumsum(x.v, axis=ax)
        shape = [1] * v.ndim
        shape[ax] = n
        j = np.arange(n).reshape(shape)  # prefix j+1 has j additions
        g = np.array([gamma(i, alg.u_acc) for i in range(n)]).reshape(shape)
        mag = np.cumsum(np.abs(x.v), axis=ax)
        det = np.cumsum(x.det, axis=ax) + g * mag
        # a prefix's roundings are shared by every later prefix: spent into the fixed part
        rand = _l2(np.sqrt(np.cumsum(x.rand ** 2, axis=ax)), alg.u_acc * np.sqrt(j) * mag)
        fixed = np.cumsum(x.fixed, axis=ax) + LAMBDA * rand
        return alg.rounded(v, det, fixed, _zeros(v.shape), 0.0), n
    raise AssertionError(f"no error rule for {op.value}")


def _max_spread(x, e, m, ax, keep):
    """sup |max(x + d) - max(x)| over |d| <= e: the max of the box lies between max(x - e) and
    max(x + e), so an element far below the maximum (a masked score) adds nothing, however
    loose its own bound."""
    with np.errstate(invalid="ignore"):
        lo, hi = np.max(x - e, axis=ax, keepdims=keep), np.max(x + e, axis=ax, keepdims=keep)
        return _clean(np.maximum(m - lo, hi - m))


_F32_SAFE = float(np.finfo(np.float32).max) / 4  # K max|x| max|y| below this: no float32 overflow


def _abs_matmul(x, y) -> np.ndarray:
    """x @ y for non-negative x, y (magnitudes and error bounds), in float32 for speed (a check at
    Llama sizes spends most of its reference time here): every term is non-negative, so each of
    the float32 roundings only scales a term by at least (1 - u): the K - 1 additions, the product,
    and up to three in each operand (rounded to float32, squared there: _matmul), K + 6 in all.
    Dividing by (1 - gamma_(K+6)) keeps the result an upper bound. Where a result could pass
    float32's range (error bounds squared in the probabilistic part grow fast) it is computed in
    float64, the same way: a float32 overflow would make a finite bound infinite."""
    K = np.shape(x)[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        reach = K * float(np.max(x, initial=0.0)) * float(np.max(y, initial=0.0))
    dtype = np.float32 if reach < _F32_SAFE else np.float64
    out = np.matmul(np.asarray(x, dtype), np.asarray(y, dtype)).astype(np.float64)
    return out / (1 - gamma(K + 6, unit_roundoff(dtype)))


def _matmul(a: _Val, b: _Val, alg: _Bounded) -> tuple[_Val, int]:
    K = a.v.shape[-1]
    v = np.matmul(a.v, b.v)
    # |A| and |B| in float32 once: at Llama sizes B is a GB-sized weight that every term below reads
    absa, absb = np.abs(a.v, dtype=np.float32), np.abs(b.v, dtype=np.float32)
    mag = _abs_matmul(absa, absb)

    def propagated(ea, eb):  # (|A| + E_A)(|B| + E_B) - |A||B| = E_A (|B| + E_B) + |A| E_B
        out = _zeros(v.shape)
        exact_b = not _any(eb)
        if _any(ea):
            out = out + _abs_matmul(np.broadcast_to(ea, a.v.shape), absb if exact_b else np.abs(b.v) + eb)
        if not exact_b:
            out = out + _abs_matmul(absa, np.broadcast_to(eb, b.v.shape))
        return out

    with np.errstate(invalid="ignore"):  # inf * 0 where an operand is unbounded: NaN, made inf
        det = _clean(propagated(a.det, b.det) + gamma(K, alg.u_acc) * mag)
    # the operands' independent errors add in L2 over k, but an element of A reaches a whole row
    # of the result: spent into the fixed part (first order in them)
    spent = _zeros(v.shape)
    if _any(a.rand):
        spent = spent + _abs_matmul(np.broadcast_to(a.rand, a.v.shape) ** 2, np.square(absb))
    if _any(b.rand):
        spent = spent + _abs_matmul(np.square(absa), np.broadcast_to(b.rand, b.v.shape) ** 2)
    fixed = propagated(a.fixed, b.fixed) + LAMBDA * np.sqrt(spent)
    # K products and K - 1 additions into PSUM, each an independent error of at most u sum|a||b|
    rand = alg.u_acc * np.sqrt(2 * K) * mag
    return alg.rounded(v, det, fixed, rand, 0.0), K


# --- an opaque reference function ------------------------------------------------------------
def function_tolerance(expected, magnitude, precision: Precision, reduction: int, roundings: int = 1,
                       narrowed: int = 0) -> Tolerance:
    """Bounds for a kernel checked against a NumPy function f that Axon cannot see into:
    (u_out + R u_mid) |ref| + (gamma_K(u_acc) + C u_mid) M, M = max(|ref|, |f(|x|)|) (`magnitude`:
    f on the inputs' absolute values, or None), K = `reduction`, R = `roundings` (intermediates
    the kernel rounds to u_mid, relative to the result), C = `narrowed` (inputs wider than u_mid
    the kernel may narrow: each perturbs every term of a multilinear f by u_mid). The reference's
    own rounding in its result dtype (float32 in a typical NumPy reference) is added the same way."""
    u_acc, u_mid = precision.u("acc"), precision.u("mid")
    bounds, values = [], []
    for i, (ref, dt) in enumerate(zip(expected, precision.out)):
        ref = np.asarray(ref)
        r = np.abs(ref.astype(np.float64))
        m = r if magnitude is None else np.maximum(r, np.abs(np.asarray(magnitude[i], np.float64)))
        u_out, u_ref = unit_roundoff(_np_dtype(dt)), unit_roundoff(ref.dtype) if ref.dtype.kind == "f" else 0.0
        kernel = (u_out + roundings * u_mid) * r + _tiny(_np_dtype(dt)) + (gamma(reduction, u_acc) + narrowed * u_mid) * m
        own = u_ref * r + gamma(reduction, u_ref) * m
        bounds.append(kernel + own)
        values.append(ref)
    return Tolerance(tuple(bounds), precision, reduction, "reference", tuple(values), roundings, narrowed)


# --- the comparison ------------------------------------------------------------------------------
@dataclass
class Check:
    ok: bool
    max_abs_err: float
    scale: float  # max |ref|, for context only: nothing is scaled by it
    error: str = ""
    worst_ratio: float = 0.0  # max over elements of |out - ref| / bound: at most 1 passes
    failed: int = 0  # elements over their bound
    worst: Optional[tuple] = None  # (output number, element index) of the worst ratio
    tolerance: dict = field(default_factory=dict)  # Tolerance.summary()

    def explain(self) -> str:
        if self.error:
            return self.error
        at = f" at output {self.worst[0]} {self.worst[1]}" if self.worst else ""
        return (f"max |err| {self.max_abs_err:.3g}; {self.failed} element(s) over their bound, worst "
                f"{self.worst_ratio:.3g}x the bound{at}")


MAX_UNBOUNDED = 0.01  # of a check's output elements; an element with no finite bound is unchecked


def compare(outputs, expected, tol: Tolerance) -> Check:
    """Element by element: |out - ref| <= bound (a non-finite reference must be matched exactly)."""
    outputs, expected = list(outputs), list(expected)
    summary = tol.summary()
    if len(outputs) != len(expected):
        return Check(False, float("inf"), 0.0, f"{len(outputs)} outputs, expected {len(expected)}", tolerance=summary)
    worst, scale, ratio, failed, where = 0.0, 0.0, 0.0, 0, None
    unchecked, total = 0, 0
    for i, (got, want, bound) in enumerate(zip(outputs, expected, tol.bounds)):
        g = np.asarray(got).astype(np.float64)
        w = np.asarray(want).astype(np.float64)
        if g.shape != w.shape:
            return Check(False, float("inf"), 0.0, f"output {i} has shape {g.shape}, expected {w.shape}",
                         tolerance=summary)
        if g.size == 0:
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.abs(g - w)
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            r = np.where(same, 0.0, err / bound)  # an infinite bound leaves its element unchecked
        r = np.where(np.isnan(r), np.inf, r)  # a NaN output, or values that differ where the bound is 0
        unbounded = ~np.isfinite(np.broadcast_to(bound, g.shape))
        r = np.where(unbounded, 0.0, r)  # unchecked (an overflow may give inf or NaN there): counted
        unchecked += int(np.count_nonzero(~same & unbounded))
        total += g.size
        e = np.where(same, 0.0, err)
        worst = float("nan") if np.isnan(e).any() or np.isnan(worst) else max(worst, float(e.max()))
        fw = np.abs(w[np.isfinite(w)])
        scale = max(scale, float(fw.max()) if fw.size else 0.0)
        failed += int(np.count_nonzero(r > 1))
        j = int(np.argmax(r))
        if r.flat[j] > ratio or where is None:
            ratio, where = float(r.flat[j]), (i, tuple(int(k) for k in np.unravel_index(j, r.shape)))
    if unchecked > MAX_UNBOUNDED * total:  # the analysis says nothing there: not a pass
        return Check(False, worst, scale, f"inconclusive: {unchecked} of {total} output elements have no finite "
                     f"error bound and differ from the reference (at most {MAX_UNBOUNDED:.0%} may)",
                     worst_ratio=ratio, failed=failed, worst=where, tolerance=summary)
    return Check(failed == 0, worst, scale, worst_ratio=ratio, failed=failed, worst=where, tolerance=summary)
