"""`axon.from_jax`: a JAX function as an Axon program, through its jaxpr.

    program = axon.from_jax(block, (params, x, cos, sin), dims={"x": ("s", "h")})

`jax.make_jaxpr` gives the primitives of one call at the example inputs; pytree inputs are
flattened and each leaf is one program input, named by its path (`params["wq"]` becomes `params_wq`).
Arrays the function closes over become inputs too (their values and the example inputs' are
`program.examples`). Each
primitive is replayed on Axon's traced tensors by the table below; nested jaxprs (jit, custom_jvp
such as jax.nn.silu and softmax) are replayed inline. The first primitive with no entry stops the
import with one line naming it and the user's line that made it.

lax's element-wise primitives take operands of equal shapes, so jnp inserts `broadcast_in_dim`
before them. Axon's operators broadcast as NumPy does, so a broadcast is replayed as the reshape
that adds its unit axes and stays implicit; an operator that is not element-wise must see its
operand at its full shape, and a broadcast that reaches one stops the import.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

import axon.frontend.functions as F
from axon.errors import InputError, UnsupportedError
from axon.frontend.imported import declared_dims, identifier, make_program, size_of, unsupported
from axon.frontend.tracer import _PACKAGE_DIR, Tensor
from axon.ir import positional, toposort
from axon.semantics.ops import Op
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size


def from_jax(fn, example_inputs, dims=None, name: Optional[str] = None):
    """The Axon program of the JAX function `fn` at `example_inputs` (a tuple of arrays or pytrees,
    one per positional argument). `dims` names input dimensions by input name."""
    try:
        import jax
    except ImportError:
        raise InputError("axon.from_jax needs JAX: pip install 'axon[jax]'") from None
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    try:
        closed = jax.make_jaxpr(fn)(*example_inputs)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UnsupportedError(f"jax.make_jaxpr could not trace {_name(fn)}: {type(err).__name__}: {first}") from None
    jaxpr = closed.jaxpr
    taken: set[str] = set()
    names = [identifier(n, taken) for n in _leaf_names(fn, example_inputs, jax)]
    consts = [identifier(f"const{i}", taken) for i in range(len(jaxpr.constvars))]
    shapes = {}
    for n, var in zip(consts + names, list(jaxpr.constvars) + list(jaxpr.invars)):
        if "float" not in str(var.aval.dtype):
            raise UnsupportedError(f"input {n} has dtype {var.aval.dtype}; Axon's inputs are float arrays")
        shapes[n] = tuple(int(d) for d in var.aval.shape)
    _check(jaxpr)
    declared = declared_dims(shapes, dims)
    values = list(closed.consts) + jax.tree_util.tree_leaves(example_inputs)
    examples = {n: _numpy(v) for n, v in zip(consts + names, values)}

    def interpret(tensors: dict):
        env = {v: tensors[n] for n, v in zip(consts + names, list(jaxpr.constvars) + list(jaxpr.invars))}
        outs = _run(jaxpr, env, lambda v: size_of(v, declared, shapes))
        outs = [o.tensor.reshape(*var.aval.shape) if isinstance(o, _Kept) else o for o, var in zip(outs, jaxpr.outvars)]
        for out, var in zip(outs, jaxpr.outvars):
            _full(out, var.aval.shape, "the output")
        return outs[0] if len(outs) == 1 else tuple(outs)

    return make_program(name or identifier(_name(fn), set()), shapes, declared, interpret, examples)


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _numpy(value):
    return np.asarray(value, dtype=np.float32)


def _leaf_names(fn, example_inputs, jax) -> list[str]:
    """One name per flattened input leaf: the parameter's name, then its path in the pytree."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    out = []
    for i, arg in enumerate(example_inputs):
        base = params[i] if i < len(params) else f"arg{i}"
        for path, _ in jax.tree_util.tree_flatten_with_path(arg)[0]:
            parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
            out.append("_".join([base, *parts]))
    return out


def _nested(eqn):
    """The jaxpr an equation calls (jit, custom_jvp, custom_vjp), or None."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(key)
        if inner is not None:
            return getattr(inner, "jaxpr", inner), getattr(inner, "consts", ())
    return None


def _check(jaxpr):
    """Stop at the first primitive Axon has no entry for, before anything is traced."""
    for eqn in jaxpr.eqns:
        nested = _nested(eqn)
        if nested is not None:
            _check(nested[0])
        elif eqn.primitive.name not in LAX:
            raise unsupported("jax", eqn.primitive.name, _where(eqn))


def _where(eqn) -> str:
    """'file.py:line' of the user's code that made the equation."""
    frame = getattr(getattr(eqn, "source_info", None), "traceback", None)
    frames = getattr(frame, "frames", None) if frame is not None else None
    for f in frames or ():
        path = f.file_name
        if not any(f"{os.sep}{p}{os.sep}" in path for p in ("jax", "jaxlib")) and \
                not os.path.abspath(path).startswith(_PACKAGE_DIR + os.sep):
            return f"{os.path.basename(path)}:{f.line_num}"
    return ""


def _run(jaxpr, env: dict, size) -> list:
    def read(v):
        if hasattr(v, "val"):  # a literal
            return float(v.val)
        return env[v]

    for eqn in jaxpr.eqns:
        args = [read(v) for v in eqn.invars]
        nested = _nested(eqn)
        try:
            if nested is not None:
                inner, consts = nested
                if consts:
                    raise UnsupportedError("a nested function that closes over arrays")
                outs = _run(inner, dict(zip(inner.invars, args)), size)
            else:
                entry, ctx = LAX[eqn.primitive.name], _Eqn(eqn, size)
                if eqn.primitive.name in _ELEMENTWISE and any(isinstance(a, _Kept) for a in args):
                    out = _on_kept(entry, ctx, args)
                else:
                    out = entry(ctx, *args)
                outs = list(out) if eqn.primitive.multiple_results else [out]
        except UnsupportedError as err:
            raise UnsupportedError(f"{_where(eqn)}: {eqn.primitive.name}: {err}") from None
        for var, out in zip(eqn.outvars, outs):
            env[var] = out
    return [read(v) for v in jaxpr.outvars]


class _Eqn:
    """What a primitive's entry may read: its parameters and its result's shape."""

    def __init__(self, eqn, size):
        self.params, self.size = eqn.params, size
        self.shape = tuple(int(d) for d in eqn.outvars[0].aval.shape)
        self.in_shapes = [tuple(int(d) for d in getattr(v.aval, "shape", ())) for v in eqn.invars]


class _Kept:
    """A reduction's result whose reduced axes Axon keeps (as units) where JAX drops them: a kernel
    needs the [rows, 1] column, and jnp broadcasts it back (broadcast_in_dim) before using it.
    `dropped`: those axes, in the tensor's own numbering."""

    def __init__(self, tensor: Tensor, dropped: tuple[int, ...]):
        self.tensor, self.dropped = tensor, tuple(sorted(dropped))

    def axes(self) -> list[int]:
        """The tensor's axis of each of JAX's axes."""
        return [i for i in range(self.tensor.ndim) if i not in self.dropped]


def _on_kept(entry, ctx, args):
    """An element-wise primitive on kept values (with numbers): computed on their tensors."""
    kept = [a for a in args if isinstance(a, _Kept)]
    if any(isinstance(a, Tensor) for a in args) or len({k.dropped for k in kept}) > 1:
        raise UnsupportedError("an element-wise operator between a reduction's result and another tensor "
                               "without broadcasting it first")
    out = entry(ctx, *[a.tensor if isinstance(a, _Kept) else a for a in args])
    return _Kept(out, kept[0].dropped) if isinstance(out, Tensor) else out


def _full(x, shape, what: str):
    """Refuse an implicit broadcast where the operator needs the whole tensor: an axis that is 1
    in Axon's value and larger in JAX's."""
    if isinstance(x, _Kept):
        raise UnsupportedError(f"{what} is a reduction's result that is not broadcast back first")
    if isinstance(x, Tensor) and any(not d.symbols and d.evaluate_int({}) == 1 and n != 1
                                     for d, n in zip(x.shape, shape)):
        raise UnsupportedError(f"{what} is a broadcast to {tuple(shape)} of a {x.describe()} value; "
                               "Axon broadcasts only inside element-wise operators")


# --- the lax primitives: one entry each, written with Axon's operators -------------------------
def _structural(fn):
    """An entry for an operator that needs its operands at their full shapes."""
    def entry(eqn, *args):
        for i, (x, shape) in enumerate(zip(args, eqn.in_shapes)):
            _full(x, shape, f"operand {i + 1}")
        return fn(eqn, *args)
    return entry


def _broadcast(eqn, x, *_):
    """The operand with unit axes where JAX broadcasts (Axon's operators broadcast them); a kept
    reduction usually has them already, so nothing is reshaped."""
    shape, kept = eqn.shape, eqn.params["broadcast_dimensions"]
    if not isinstance(x, (Tensor, _Kept)):
        return x  # a number broadcasts by itself
    tensor, axes = (x.tensor, x.axes()) if isinstance(x, _Kept) else (x, list(range(x.ndim)))
    target = [tensor.shape[axes[kept.index(i)]] if i in kept else Size.of(1) for i in range(len(shape))]
    while len(target) > tensor.ndim and target[0] == Size.of(1):
        target.pop(0)  # leading unit axes: NumPy broadcasting adds them by itself
    return tensor if tuple(target) == tuple(tensor.shape) else tensor.reshape(*target)


def _dot_general(eqn, a, b):
    """[batch, free.., c] @ [batch, c, n]: several free axes on the left broadcast against unit
    axes of the right (a grouped query against its kv head)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lfree = [i for i in range(a.ndim) if i not in lc and i not in lb]
    rfree = [i for i in range(b.ndim) if i not in rc and i not in rb]
    if len(lc) != 1 or len(rfree) > 1:
        raise UnsupportedError("a contraction over several axes, or several free axes on the right")
    left = _permuted(a, [*lb, *lfree, *lc])
    extra, nb = len(lfree) - 1, len(rb)
    if extra > 0 and list(rb) == list(range(nb)):
        # unit axes after the batch, before the permutation: k^T stays a transpose of the last two
        b = b.reshape(*b.shape[:nb], *[1] * extra, *b.shape[nb:])
        rb, rc, rfree = [*range(nb + extra)], [c + extra for c in rc], [f + extra for f in rfree]
        extra = 0
    right = _permuted(b, [*rb, *rc, *rfree])
    if not lfree:
        left = left[..., None, :]
    if not rfree:
        right = right[..., None]
    if extra > 0:
        right = right.reshape(*right.shape[:nb], *[1] * extra, *right.shape[nb:])
    out = left @ right
    return out.reshape(*(eqn.size(d) for d in eqn.shape)) if not lfree or not rfree else out


def _permuted(x, perm):
    return x if list(perm) == list(range(x.ndim)) else x.transpose(*perm)


def _reduce(method):
    """A reduction, its axes kept as units (see _Kept)."""
    def entry(eqn, x):
        x = x if isinstance(x, _Kept) else _Kept(x, ())
        axes = [x.axes()[a] for a in eqn.params["axes"]]
        return _Kept(getattr(x.tensor, method)(axis=tuple(axes), keepdims=True), x.dropped + tuple(axes))
    return entry


def _reshape(eqn, x, *_):
    x = x.tensor if isinstance(x, _Kept) else x
    return x.reshape(*(eqn.size(d) for d in eqn.shape))


def _slice(eqn, x):
    starts, limits, strides = eqn.params["start_indices"], eqn.params["limit_indices"], eqn.params["strides"]
    key = tuple(slice(s, None if not x.shape[i].symbols and l >= x.shape[i].evaluate_int({}) else l, st or 1)
                for i, (s, l, st) in enumerate(zip(starts, limits, strides or [1] * len(starts))))
    return x[key]


def _select(eqn, pred, *cases):
    if len(cases) != 2:
        raise UnsupportedError("select_n with more than two cases")
    return F.where(pred, cases[1], cases[0])  # select_n picks cases[pred]


def _iota(eqn):
    dim, shape = eqn.params["dimension"], eqn.shape
    vec = F.arange(eqn.size(shape[dim]))
    return vec.reshape(*[eqn.size(n) if i == dim else 1 for i, n in enumerate(shape)])


_ELEMENTWISE = {"add", "sub", "mul", "div", "max", "min", "ge", "gt", "le", "lt", "eq", "neg", "exp", "log", "sqrt",
                "rsqrt", "logistic", "tanh", "square", "integer_pow", "select_n", "stop_gradient", "copy", "copy_p",
                "convert_element_type"}


def _same(eqn, x):
    return x


def _integer_pow(eqn, x):
    return x ** eqn.params["y"]


def _convert(eqn, x, **_):
    """The identity, except into an integer type where the value may not be integral (programs
    compute over the reals: positions and comparisons are integers already)."""
    new = str(eqn.params["new_dtype"])
    integral = not isinstance(x, Tensor) or x.node.op in _COMPARISONS or x.node in positional(toposort([x.node]))
    if "float" not in new and "bool" not in new and not integral:
        raise UnsupportedError(f"conversion to {new}")
    return x


_COMPARISONS = {Op.GE, Op.GT, Op.LE, Op.LT, Op.EQ}


_IDENTITY = {Op.MAXIMUM: -np.inf, Op.MINIMUM: np.inf}


def _scalar(name: str):
    """An element-wise primitive as Axon's operator of that name; on numbers alone (a constant
    the function computes, e.g. jnp.sqrt(128)) the operator's own NumPy meaning evaluates it."""
    op, spec = Op[name], SCALAR_SPECS[ScalarOp[name]]

    def entry(eqn, *args):
        if not any(isinstance(a, Tensor) for a in args):
            return float(spec.numpy(*(np.float64(a) for a in args)))
        if op in _IDENTITY:  # max(x, -inf) (jnp.max's initial value) is x
            args = [a for a in args if isinstance(a, Tensor) or a != _IDENTITY[op]]
            if len(args) == 1:
                return args[0]
        return F._traced(op, *args)
    return entry


LAX = {
    **{prim: _scalar(name) for prim, name in [
        ("add", "ADD"), ("sub", "SUB"), ("mul", "MUL"), ("div", "DIV"), ("max", "MAXIMUM"), ("min", "MINIMUM"),
        ("ge", "GE"), ("gt", "GT"), ("le", "LE"), ("lt", "LT"), ("eq", "EQ"), ("neg", "NEG"), ("exp", "EXP"),
        ("log", "LOG"), ("sqrt", "SQRT"), ("rsqrt", "RSQRT"), ("logistic", "SIGMOID"), ("tanh", "TANH"),
        ("square", "SQUARE")]},
    "integer_pow": _integer_pow,
    "select_n": _select, "stop_gradient": _same, "copy": _same, "copy_p": _same, "convert_element_type": _convert,
    "broadcast_in_dim": _broadcast, "iota": _iota,
    "dot_general": _structural(_dot_general),
    "reduce_sum": _reduce("sum"), "reduce_max": _reduce("max"),
    "reshape": _reshape, "squeeze": _reshape, "expand_dims": _reshape,
    "transpose": _structural(lambda eqn, x: x.transpose(*eqn.params["permutation"])),
    "slice": _structural(_slice),
    "concatenate": _structural(lambda eqn, *xs: F.concatenate(xs, axis=eqn.params["dimension"])),
}
