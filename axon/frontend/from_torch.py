"""`axon.from_torch`: a PyTorch function or module as an Axon program, through `torch.export`.

    program = axon.from_torch(block, (x, cos, sin), dims={"x": ("s", "h")})

torch.export gives the ATen graph of one call at the example inputs, with the module's parameters
and buffers lifted to inputs (named after them: `q.weight` becomes the input `q_weight`; their
values and the example inputs are `program.examples`). Each ATen operator is replayed on Axon's traced tensors by the
table below. The first operator with no entry stops the import with one line naming it and the
line of the user's code that called it. Dtype conversions are the identity: an Axon program
computes over the reals, and the kernel's dtype is chosen at optimize.
"""
from __future__ import annotations

import inspect
import os
import re
import traceback
from typing import Optional

import axon.frontend.functions as F
from axon.errors import InputError, UnsupportedError
from axon.frontend.tracer import _PACKAGE_DIR
from axon.frontend.imported import (attention, declared_dims, identifier, make_program, size_of,
                                    softmax, unsupported)

_INT64_MAX = 2**63 - 1


def from_torch(fn, example_inputs, dims=None, name: Optional[str] = None):
    """The Axon program of `fn` (a function or `torch.nn.Module`) at `example_inputs` (a tuple of
    tensors). `dims` names input dimensions ({"x": ("s", "h")}); unnamed ones stay literal."""
    try:
        import torch
    except ImportError:
        raise InputError("axon.from_torch needs PyTorch: pip install 'axon[torch]'") from None
    module = fn if isinstance(fn, torch.nn.Module) else _Wrapped(fn)
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    try:
        exported = torch.export.export(module, example_inputs)
    except Exception as err:  # torch's own message, in one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UnsupportedError(f"torch.export could not trace {_name(fn)}: {type(err).__name__}: {first}") from None
    graph = exported.graph
    names, shapes, examples = _inputs(exported, example_inputs, torch)
    for node in graph.nodes:
        if node.op == "call_function" and _key(node) not in ATEN:
            where = _where(node) or _where_eager(module, example_inputs, node.target)
            raise unsupported("torch", str(node.target), where)
    declared = declared_dims(shapes, dims)

    def interpret(tensors: dict):
        env = {}
        for node in graph.nodes:
            if node.op == "placeholder":
                env[node] = tensors[names[node.name]]
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, env.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                ctx = _Context(node, lambda v: size_of(v, declared, shapes))
                try:
                    env[node] = ATEN[_key(node)](ctx, *args, **kwargs)
                except UnsupportedError as err:
                    raise UnsupportedError(f"{_where(node)}: {node.target}: {err}") from None
            elif node.op == "output":
                outs = [env[o] for o in node.args[0]]
                return outs[0] if len(outs) == 1 else tuple(outs)
        raise InputError(f"{_name(fn)}: the exported graph has no output")

    return make_program(name or identifier(_name(fn), set()), shapes, declared, interpret, examples)


class _Wrapped:
    """A plain function as the module torch.export takes; its inputs keep the function's names."""

    def __new__(cls, fn):
        import torch

        def forward(self, *args):
            return fn(*args)

        try:
            params = list(inspect.signature(fn).parameters.values())
            forward.__signature__ = inspect.Signature(
                [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + params)
        except (TypeError, ValueError):
            pass  # a builtin: torch names the inputs args_0, args_1, ...
        return type("Function", (torch.nn.Module,), {"forward": forward})()


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _inputs(exported, example_inputs, torch):
    """Program input names (placeholder -> name), example shapes in order, and the values of the
    example inputs and of the lifted parameters, buffers and constants."""
    taken: set[str] = set()
    names, shapes, examples = {}, {}, {}
    state = {**exported.state_dict, **getattr(exported, "constants", {})}
    user = [s for s in exported.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    lifted = [s for s in exported.graph_signature.input_specs if s.kind.name != "USER_INPUT"]
    by_name = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    for spec in user + lifted:  # the function's own inputs first, then the module's state
        node = by_name[spec.arg.name]
        value = node.meta.get("val")
        if value is None or not hasattr(value, "shape"):
            raise UnsupportedError(f"input {spec.arg.name} is not a tensor; pass numbers as constants in the code")
        if not value.dtype.is_floating_point:
            raise UnsupportedError(f"input {spec.arg.name} has dtype {value.dtype}; Axon's inputs are float tensors")
        pname = identifier(spec.target if spec.kind.name != "USER_INPUT" else spec.arg.name, taken)
        names[node.name] = pname
        shapes[pname] = tuple(int(d) for d in value.shape)
        value = state[spec.target] if spec.kind.name != "USER_INPUT" else example_inputs[user.index(spec)]
        examples[pname] = value.detach().to(torch.float32).numpy()
    return names, shapes, examples


def _key(node) -> str:
    """`aten.add.Tensor` -> "add": overloads of one ATen operator share an entry."""
    return str(node.target).split(".")[1] if str(node.target).startswith("aten.") else str(node.target)


def _where(node) -> str:
    """'file.py:line' of the user's code that made the node (its innermost frame outside torch and Axon)."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    for path, line in reversed(frames):
        if f"{os.sep}torch{os.sep}" not in path and not os.path.abspath(path).startswith(_PACKAGE_DIR + os.sep):
            return f"{os.path.basename(path)}:{line}"
    return ""


def _where_eager(module, example_inputs, target) -> str:
    """'file.py:line' of the user's first call of the ATen operator `target`, found by running the
    module once eagerly (torch.export keeps no stack for a function's own frames)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    found = []

    class Find(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func == target and not found:
                for frame in reversed(traceback.extract_stack()):
                    path = os.path.abspath(frame.filename)
                    if f"{os.sep}torch{os.sep}" not in path and not path.startswith(_PACKAGE_DIR + os.sep):
                        found.append(f"{os.path.basename(path)}:{frame.lineno}")
                        break
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Find():
            module(*example_inputs)
    except Exception:  # only a location was looked for
        pass
    return found[0] if found else ""


class _Context:
    """What an operator's entry may ask of the node it replays: its example shape, and a literal
    size as the program's dimension."""

    def __init__(self, node, size):
        self.node, self.size = node, size

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.node.meta["val"].shape)


# --- the ATen operators: one entry each, written with Axon's operators -------------------------
def _reshape(ctx, x, *_):
    return x.reshape(*(ctx.size(d) for d in ctx.shape))


def _permute(ctx, x, dims):
    return x.transpose(*[d % x.ndim for d in dims])


def _swap(ctx, x, a, b):
    perm = list(range(x.ndim))
    perm[a % x.ndim], perm[b % x.ndim] = perm[b % x.ndim], perm[a % x.ndim]
    return x.transpose(*perm)


def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    if (start or 0) < 0 or (end is not None and end < 0):
        start, end, _ = slice(start, end).indices(x.shape[dim].evaluate_int({}))
    stop = None if end is None or end >= _INT64_MAX else end
    if stop is not None and not x.shape[dim].symbols and stop >= x.shape[dim].evaluate_int({}):
        stop = None
    key = [slice(None)] * x.ndim
    key[dim] = slice(start or 0, stop, step)
    return x[tuple(key)]


def _reduce(method):
    def entry(ctx, x, dim=None, keepdim=False, *, dtype=None):
        axes = None if dim is None or dim == [] else tuple(dim) if isinstance(dim, (list, tuple)) else dim
        return getattr(x, method)(axis=axes, keepdims=keepdim)
    return entry


def _binary(op):
    def entry(ctx, a, b, *, alpha=1, rounding_mode=None):
        if rounding_mode is not None:
            raise UnsupportedError(f"rounding_mode={rounding_mode!r}")
        return op(a, b * alpha if alpha != 1 else b)
    return entry


def _unary(fn):
    return lambda ctx, x, *_, **__: fn(x)


def _gelu(ctx, x, approximate="none"):
    if approximate != "tanh":
        raise UnsupportedError("exact (erf) gelu; Axon's gelu is the tanh approximation: "
                               "use approximate='tanh'")
    return F.gelu(x)


def _pow(ctx, x, exponent):
    if not isinstance(exponent, (int, float)):
        raise UnsupportedError("a tensor exponent")
    return x ** exponent


def _identity(ctx, x, *_, **kwargs):
    dtype = kwargs.get("dtype")
    if dtype is not None and not dtype.is_floating_point:
        raise UnsupportedError(f"conversion to {dtype}")
    return x


def _sdpa(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise UnsupportedError("dropout")
    node_mask = ctx.node.args[3] if len(ctx.node.args) > 3 else ctx.node.kwargs.get("attn_mask")
    boolean = node_mask is not None and not node_mask.meta["val"].dtype.is_floating_point
    return attention(q, k, v, visible=attn_mask if boolean else None, bias=None if boolean else attn_mask,
                     causal=is_causal, scale=scale, grouped=enable_gqa)


def _where_(ctx, cond, a, b):
    return F.where(cond, a, b)


def _masked_fill(ctx, x, mask, value):
    return F.where(mask, value, x)


def _triangle(lower: bool):
    def entry(ctx, x, diagonal=0):
        rows, cols = x.shape[-2], x.shape[-1]
        i, j = F.arange(rows)[:, None], F.arange(cols)[None, :]
        keep = (i + diagonal >= j) if lower else (i + diagonal <= j)
        return F.where(keep, x, 0.0)
    return entry


def _arange(ctx, *args, **kwargs):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
    if step != 1:
        raise UnsupportedError("a step other than 1")
    out = F.arange(ctx.size(end - start))
    return out + start if start else out


def _cat(ctx, tensors, dim=0):
    return F.concatenate(tensors, axis=dim)


def _unsqueeze(ctx, x, dim):
    return x.reshape(*(ctx.size(d) for d in ctx.shape))


def _linear(ctx, x, w, b=None):
    y = x @ w.T
    return y + b if b is not None else y


def _softmax(ctx, x, dim, *_):
    return softmax(x, dim % x.ndim)


def _expand(ctx, x, *_):
    if tuple(d.evaluate_int({}) if not d.symbols else d for d in x.shape) != ctx.shape:
        raise UnsupportedError("expand to a larger shape (broadcast in the operator that uses it instead)")
    return x


def _dropout(ctx, x, p=0.5, train=False):
    if train and p:
        raise UnsupportedError("dropout in training mode")
    return x


ATEN = {
    "add": _binary(lambda a, b: a + b), "sub": _binary(lambda a, b: a - b),
    "mul": _binary(lambda a, b: a * b), "div": _binary(lambda a, b: a / b),
    "rsub": _binary(lambda a, b: b - a),
    "maximum": _binary(F.maximum), "minimum": _binary(F.minimum),
    "ge": _binary(lambda a, b: a >= b), "gt": _binary(lambda a, b: a > b),
    "le": _binary(lambda a, b: a <= b), "lt": _binary(lambda a, b: a < b), "eq": _binary(F.equal),
    "neg": _unary(lambda x: -x), "exp": _unary(F.exp), "log": _unary(F.log), "sqrt": _unary(F.sqrt),
    "rsqrt": _unary(F.rsqrt), "reciprocal": _unary(F.reciprocal), "sigmoid": _unary(F.sigmoid),
    "tanh": _unary(F.tanh), "relu": _unary(F.relu), "silu": _unary(F.silu), "square": _unary(F.square),
    "gelu": _gelu, "pow": _pow,
    "mean": _reduce("mean"), "sum": _reduce("sum"), "amax": _reduce("max"),
    "linear": _linear, "matmul": lambda ctx, a, b: a @ b, "mm": lambda ctx, a, b: a @ b,
    "bmm": lambda ctx, a, b: a @ b,
    "t": lambda ctx, x: x.T, "transpose": _swap, "permute": _permute,
    "view": _reshape, "reshape": _reshape, "_unsafe_view": _reshape, "unsqueeze": _unsqueeze,
    "squeeze": _reshape, "flatten": _reshape, "expand": _expand,
    "slice": _slice, "cat": _cat, "concat": _cat,
    "softmax": _softmax, "_softmax": _softmax,
    "scaled_dot_product_attention": _sdpa,
    "where": _where_, "masked_fill": _masked_fill, "tril": _triangle(True), "triu": _triangle(False),
    "arange": _arange,
    "clone": _identity, "contiguous": _identity, "alias": _identity, "detach": _identity,
    "_to_copy": _identity, "to": _identity, "type_as": lambda ctx, x, other: x, "lift_fresh_copy": _identity,
    "dropout": _dropout,
}
