"""What importing a program from another framework needs, whichever it is (`from_torch`, `from_jax`).

An importer reads the framework's graph (torch.export's ATen graph, a jaxpr) and replays it on
Axon's traced tensors, so a foreign operator means exactly what the Axon operators it becomes
mean: nothing here has semantics of its own beyond the compositions below (softmax, attention),
written with Axon's operators. Every input's dimensions are the example input's sizes unless the
user names them; `optimize` names literal dimensions itself (`Program.generalized`).
"""
from __future__ import annotations

import inspect
import keyword
import math
from typing import Callable, Mapping, Optional

import axon.frontend.functions as F
from axon.errors import ShapeError, UnsupportedError
from axon.frontend.program import Program
from axon.semantics.sizes import Size

# A masked attention score (torch's is_causal, a boolean attn_mask): exp(MASKED - row max) is 0 in
# float32 for any row max above -29900, so the result equals the -inf mask of the framework.
MASKED = -30000.0


def identifier(name: str, taken: set[str]) -> str:
    """`name` as a fresh Python identifier ("layers.0.q.weight" -> "layers_0_q_weight")."""
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name).strip("_") or "x"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = "_" + base
    out, i = base, 1
    while out in taken:
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out


def unsupported(framework: str, operator: str, where: str, hint: str = "") -> UnsupportedError:
    """The one line that names the first operator Axon cannot import, and where the user wrote it."""
    at = f"{where}: " if where else ""
    return UnsupportedError(f"{at}{framework} operator {operator} is not supported by Axon"
                            + (f" ({hint})" if hint else ""))


def declared_dims(inputs: Mapping[str, tuple[int, ...]], dims: Optional[Mapping[str, tuple]]) -> dict[str, tuple]:
    """Each input's declared dimensions: the sizes of its example, except where `dims` names them.
    A name given for one input's axis names every axis of that size elsewhere too (a weight's k is
    the activation's k), unless two names share the size; then only the named axes are symbolic."""
    dims = dict(dims or {})
    unknown = sorted(set(dims) - set(inputs))
    if unknown:
        raise ShapeError(f"dims names {', '.join(unknown)}, which are not inputs ({', '.join(inputs)})")
    names_of: dict[int, set] = {}
    for name, given in dims.items():
        shape = inputs[name]
        if len(given) != len(shape):
            raise ShapeError(f"dims[{name!r}] has {len(given)} entries; the example input has shape {tuple(shape)}")
        for d, n in zip(given, shape):
            if isinstance(d, str):
                names_of.setdefault(n, set()).add(d)
            elif d != n:
                raise ShapeError(f"dims[{name!r}] = {tuple(given)} does not match the example's shape {tuple(shape)}")
    unique = {n: next(iter(s)) for n, s in names_of.items() if len(s) == 1}
    return {name: tuple(dims[name]) if name in dims else tuple(unique.get(n, n) for n in shape)
            for name, shape in inputs.items()}


def size_of(value: int, dims: Mapping[str, tuple], inputs: Mapping[str, tuple[int, ...]]):
    """A literal size in the foreign graph (a reshape's target) as the program's dimension of that
    value, when exactly one name has it; else the literal."""
    names = {d for name, shape in inputs.items() for d, n in zip(dims[name], shape) if isinstance(d, str) and n == value}
    return Size.of(next(iter(names))) if len(names) == 1 else value


def make_program(name: str, inputs: Mapping[str, tuple[int, ...]], dims: Mapping[str, tuple],
                 interpret: Callable[[dict], object], examples: Mapping = None) -> Program:
    """A Program whose inputs are `inputs` (in order) and whose body is `interpret(tensors)`;
    `examples`: the values the import saw (`Program.examples`)."""
    def body(**tensors):
        return interpret(tensors)

    body.__name__ = name
    body.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in inputs])
    program = Program(body, dims, name=name)
    program.examples.update(examples or {})
    return program


# --- compositions the frameworks have as one operator -------------------------------------------
def softmax(x, axis: int):
    e = F.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def causal_visible(rows: Size, cols: Size):
    """torch's is_causal: query i sees keys 0..i (the mask aligned at the top left)."""
    return F.arange(rows)[:, None] >= F.arange(cols)[None, :]


def attention(q, k, v, *, visible=None, bias=None, causal: bool = False, scale: Optional[float] = None,
              grouped: bool = False):
    """softmax(q k^T * scale + bias) v over the last two axes, the scores where `visible` is 0 (and,
    with `causal`, above the diagonal) masked; with `grouped`, query heads
    (axis -3) share kv heads in groups (q head h reads kv head h // (heads / kv heads))."""
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if grouped and heads != kv_heads:
        if heads.symbols or kv_heads.symbols or heads.evaluate_int({}) % kv_heads.evaluate_int({}):
            raise UnsupportedError(f"grouped attention needs literal head counts with kv heads dividing "
                                   f"query heads (got {heads} and {kv_heads})")
        ratio = heads.evaluate_int({}) // kv_heads.evaluate_int({})
        lead = tuple(q.shape[:-3])
        qg = q.reshape(*lead, kv_heads, ratio, q.shape[-2], q.shape[-1])
        kg = k.reshape(*lead, kv_heads, 1, k.shape[-2], k.shape[-1])
        vg = v.reshape(*lead, kv_heads, 1, v.shape[-2], v.shape[-1])
        out = attention(qg, kg, vg, visible=visible, bias=bias, causal=causal, scale=scale)
        return out.reshape(*lead, heads, q.shape[-2], v.shape[-1])
    d = q.shape[-1]
    if scale is None:
        if d.symbols:
            raise UnsupportedError("attention's default scale 1/sqrt(d) needs a literal head dimension")
        scale = 1.0 / math.sqrt(d.evaluate_int({}))
    scores = (q @ k.transpose(*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)) * scale
    if causal:
        scores = F.where(causal_visible(q.shape[-2], k.shape[-2]), scores, MASKED)
    if visible is not None:
        scores = F.where(visible, scores, MASKED)
    if bias is not None:
        scores = scores + bias
    return softmax(scores, -1) @ v
