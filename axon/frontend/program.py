"""`@axon.program`: a Python function traced once into a `Graph`, callable on NumPy arrays.

    @axon.program(x=("m", "k"), w=("k", "n"))
    def rmsnorm_matmul(x, w):
        return (x / axon.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)) @ w

Each keyword names one input's dimensions; equal names are the same symbolic size across inputs,
an integer is a fixed size. Tracing happens at decoration, so a malformed program fails where it
is defined. Calling the program evaluates the NumPy reference.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np

from axon.errors import InputError, ShapeError, UnsupportedError
from axon.ir import Graph, input_node
from axon.semantics.ops import ConstParams, IotaParams, Op, ReshapeParams, SliceParams
from axon.frontend.tracer import Tensor, Trace
from axon.semantics.evaluate import bind_sizes, dtype_named, evaluate
from axon.semantics.sizes import Size, format_shape


class Program:
    def __init__(self, fn: Callable, dims: Mapping[str, tuple], name: Optional[str] = None):
        self.fn = fn
        self.name = name or fn.__name__
        self.input_dims = {k: tuple(v) for k, v in dims.items()}
        self.graph = self._trace()
        # the values an import saw for its inputs: example inputs and a module's weights (from_torch, from_jax)
        self.examples: dict[str, np.ndarray] = {}

    def _trace(self) -> Graph:
        params = list(inspect.signature(self.fn).parameters)
        if sorted(params) != sorted(self.input_dims):
            raise ShapeError(f"program {self.name}: parameters {params} and declared inputs "
                             f"{list(self.input_dims)} differ")
        shapes = {p: tuple(_parse_dim(self.name, p, d) for d in self.input_dims[p]) for p in params}
        trace = Trace(frozenset(s for shape in shapes.values() for d in shape for s in d.symbols))
        inputs, tensors = [], {}
        for pname in params:
            node = input_node(pname, shapes[pname])
            inputs.append(node)
            tensors[pname] = Tensor(node, trace, label=pname)
        outer, Trace.active = Trace.active, trace
        size_rules, Size.in_program = Size.in_program, True
        try:
            result = self.fn(**tensors)
        finally:
            Trace.active, Size.in_program = outer, size_rules
        outputs = result if isinstance(result, tuple) else (result,)
        for out in outputs:
            if not isinstance(out, Tensor):
                raise UnsupportedError(f"program {self.name} must return traced tensors, got {type(out).__name__}")
        return Graph(tuple(inputs), tuple(o.node for o in outputs), frozenset(trace.constraints))

    # -- description ----------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [n.params.name for n in self.graph.inputs]

    @property
    def dims(self) -> list[str]:
        return self.graph.dims

    def signature(self) -> str:
        args = ", ".join(f"{n.params.name}{format_shape(n.shape)}" for n in self.graph.inputs)
        outs = ", ".join(format_shape(o.shape) for o in self.graph.outputs)
        return f"{self.name}({args}) -> {outs}"

    def __repr__(self) -> str:
        return f"<axon.Program {self.signature()}>"

    def generalized(self) -> tuple["Program", dict[str, int]]:
        """This program with its literal dimensions named (`x=("m", 4096)` becomes `x=("m", "n4096")`)
        and the values of those names. Rewrites and instruction sequences are proved for every size
        of a named dimension, so they hold at the literal; the synthesizer also checks its sketches
        at small sizes, which a literal 4096 forbids. A literal that the program needs as such (a
        reshape into 64 x 64, say) keeps its value: the program retraces without it."""
        # a unit axis stays one: it broadcasts, and a named size would not
        literals = sorted({d for dims in self.input_dims.values() for d in dims if _is_literal(d) and d != 1})
        names, taken = {}, set(self.dims)
        for value in literals:
            name = f"n{value}"
            while name in taken:
                name = "_" + name
            names[value] = name
            taken.add(name)
        general = self._named(names)
        if general is None:  # some literal is needed as such: name the others, one at a time
            kept = {}
            for value, name in names.items():
                if self._named({**kept, value: name}):
                    kept[value] = name
            names, general = kept, (self._named(kept) if kept else None)
        return (general, {n: v for v, n in names.items()}) if general else (self, {})

    def _named(self, names: dict[int, str]) -> Optional["Program"]:
        dims = {k: tuple(names.get(d, d) if _is_literal(d) else d for d in v) for k, v in self.input_dims.items()}
        try:
            return Program(self.fn, dims, name=self.name)
        except (ShapeError, UnsupportedError):
            return None

    # -- evaluation -----------------------------------------------------------------------
    def bind(self, *args, **kwargs) -> dict[str, np.ndarray]:
        """Map positional/keyword arrays to input names, checking dtypes."""
        names = self.input_names
        if len(args) > len(names):
            raise InputError(f"{self.name} takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        arrays = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise InputError(f"{self.name} has no input {key!r}; inputs are {', '.join(names)}")
            if key in arrays:
                raise InputError(f"{self.name}: input {key!r} given twice")
            arrays[key] = value
        for key in names:
            if key not in arrays:
                raise InputError(f"{self.name}: missing input {key!r}")
            value = arrays[key]
            if not isinstance(value, np.ndarray):
                raise InputError(f"input {key!r} must be a NumPy array, got {type(value).__name__}")
            try:
                dtype_named(value.dtype)
            except InputError:
                raise InputError(f"input {key!r} has dtype {value.dtype}; expected a float dtype "
                                 "(float32, float16, bfloat16 or float64)") from None
        return arrays

    def sizes_of(self, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
        return bind_sizes(self.graph, {k: v.shape for k, v in arrays.items()})

    def reference(self, *args, **kwargs) -> tuple[np.ndarray, ...]:
        """All outputs in float64."""
        arrays = self.bind(*args, **kwargs)
        return evaluate(self.graph, arrays, self.sizes_of(arrays))

    def __call__(self, *args, **kwargs):
        """Evaluate on NumPy arrays; the result has the inputs' common dtype (float64 internally)."""
        arrays = self.bind(*args, **kwargs)
        outputs = evaluate(self.graph, arrays, self.sizes_of(arrays))
        dtype = np.result_type(*[a.dtype for a in arrays.values()])
        cast = tuple(o.astype(dtype) for o in outputs)
        return cast[0] if len(cast) == 1 else cast

    def input_shapes(self, sizes: Mapping[str, int], dtype="float32") -> dict[str, "InputShape"]:
        """Each input's concrete shape and dtype, without data (what timing-only runs need)."""
        dt = dtype_named(dtype)
        missing = [d for d in self.dims if d not in sizes]
        if missing:
            raise InputError(f"{self.name}: no size given for {', '.join(missing)}")
        unknown = [d for d in sizes if d not in self.dims]
        if unknown:
            raise InputError(f"{self.name} has no dimension {', '.join(unknown)}; its dimensions are "
                             f"{', '.join(self.dims)}")
        return {node.params.name: InputShape(tuple(s.evaluate_int(sizes) for s in node.shape), dt)
                for node in self.graph.inputs}

    def random_inputs(self, sizes: Mapping[str, int], dtype="float32", seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs at concrete sizes (standard normal), for checks and demos: the same for a
        seed on any machine (`standard_normal`). An input that is the condition of an axon.where
        (a mask) has its negative draws set to 0, so both branches are taken (a normal value is
        never 0: a check would never see the other branch)."""
        streams = np.random.SeedSequence(seed).spawn(len(self.graph.inputs))
        out = {name: standard_normal(spec.shape, spec.dtype, stream)
               for (name, spec), stream in zip(self.input_shapes(sizes, dtype).items(), streams)}
        for node in self.graph.nodes():
            cond = node.inputs[0] if node.op is Op.WHERE else None
            if cond is not None and cond.op is Op.INPUT:
                x = out[cond.params.name]
                x[x < 0] = 0
        return out


DRAW_BLOCK = 1 << 22  # elements drawn from one stream


def standard_normal(shape: tuple[int, ...], dtype, seed: np.random.SeedSequence) -> np.ndarray:
    """Standard normal values of `dtype`, block by block, each block from its own stream of `seed`,
    drawn on all cores: a Llama-70B weight (235M elements) takes seconds, not the check's whole
    budget. The values depend on the seed only, not on the number of threads. Drawn in float32
    unless float64 is asked for (double the time and memory of what a bf16 or fp32 check needs)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    out = np.empty(shape, dtype)
    flat = out.reshape(-1)
    draw = np.float64 if out.dtype == np.float64 else np.float32
    blocks = seed.spawn(-(-flat.size // DRAW_BLOCK))

    def fill(i: int) -> None:  # numpy draws and casts without the GIL: the threads run at once
        start = i * DRAW_BLOCK
        part = flat[start:start + DRAW_BLOCK]
        part[...] = np.random.default_rng(blocks[i]).standard_normal(part.size, dtype=draw)
    if len(blocks) == 1:
        fill(0)
    else:
        with ThreadPoolExecutor(min(len(blocks), os.cpu_count() or 1)) as pool:
            list(pool.map(fill, range(len(blocks))))
    return out


@dataclass(frozen=True)
class InputShape:
    """An input known by shape and dtype only."""

    shape: tuple[int, ...]
    dtype: np.dtype


def _is_literal(dim) -> bool:
    return isinstance(dim, int) and not isinstance(dim, bool)


def _parse_dim(program_name: str, input_name: str, dim) -> Size:
    """A declared dimension: a name ("k"), a positive integer, an integer multiple ("2*h"), or a
    `Size` (a program made from a graph: `program_of`)."""
    if isinstance(dim, Size):
        return dim
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
        return Size.of(dim)
    if isinstance(dim, str):
        factor, _, name = dim.replace(" ", "").rpartition("*")
        if name.isidentifier() and (factor == "" or (factor.isdigit() and int(factor) > 0)):
            return Size.of(name) * int(factor or 1)
    raise ShapeError(f"program {program_name}: input {input_name!r} dimension {dim!r} must be a name, a positive "
                     "integer, or INT*name")


def program_of(graph: Graph, name: str) -> Program:
    """The program whose meaning is `graph` (a piece of a partitioned program, say): its body
    replays the graph's nodes on traced tensors, so it traces back to the same graph. Traced at
    named dimensions (`generalized`), a literal size in a node's parameters (a reshape's target,
    an arange, a mean's count, a slice bound) is read as the input axis of that size, or a part of
    it (x[..., 32:] of a 64-wide axis is x[..., d // 2:]), so the piece generalizes as written."""
    def body(**tensors):
        trace = Trace.active
        env = {n: tensors[n.params.name] for n in graph.inputs}
        named = _named_literals(graph, env)
        for node in graph.nodes():
            if node not in env:
                ins = [env[i] for i in node.inputs]
                env[node] = trace.apply(node.op, ins, _renamed_params(node, ins, named))
        outs = tuple(env[o] for o in graph.outputs)
        return outs[0] if len(outs) == 1 else outs

    body.__name__ = name
    body.__signature__ = inspect.Signature(
        [inspect.Parameter(n.params.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in graph.inputs])
    literal = lambda d: d.evaluate_int({}) if not d.symbols else d  # a literal stays one (generalized)
    return Program(body, {n.params.name: tuple(literal(d) for d in n.shape) for n in graph.inputs}, name=name)


def _named_literals(graph: Graph, env) -> dict[int, Size]:
    """Literal input sizes -> the sizes the replay traces them at, where one value has one name."""
    seen: dict[int, set] = {}
    for n in graph.inputs:
        for d, t in zip(n.shape, env[n].shape):
            if not d.symbols and t.symbols:
                seen.setdefault(d.evaluate_int({}), set()).add(t)
    return {v: next(iter(ts)) for v, ts in seen.items() if len(ts) == 1}


def _renamed_params(node, ins, named: dict[int, Size]):
    p = node.params
    if not named:
        return p
    size = lambda d: named.get(d.evaluate_int({}), d) if isinstance(d, Size) and not d.symbols else d
    if node.op is Op.RESHAPE:
        return ReshapeParams(tuple(size(d) for d in p.shape))
    if node.op is Op.IOTA:
        return IotaParams(size(p.size))
    if node.op is Op.CONST and isinstance(p.value, Size):
        return ConstParams(size(p.value))
    if node.op is Op.SLICE:
        return SliceParams(tuple(_renamed_bounds(b, src, now) for b, src, now in
                                 zip(p.slices, node.inputs[0].shape, ins[0].shape)))
    return p


def _renamed_bounds(bounds, was: Size, now: Size):
    """A slice's literal bounds on an axis of literal size `was`, traced at size `now`."""
    if was.symbols or not now.symbols:
        return bounds
    n = was.evaluate_int({})
    start, stop, step = bounds

    def part(b):
        if not isinstance(b, int) or b == 0 or step != 1 or n % b:
            return b
        return now if b == n else now // (n // b)
    return part(start), part(stop), step


def program(fn: Optional[Callable] = None, /, *, name: Optional[str] = None, **dims):
    """Decorator: `@axon.program(x=("m", "k"), w=("k", "n"))`."""
    if fn is not None:
        raise ShapeError("@axon.program needs each input's dimensions, e.g. @axon.program(x=('m', 'k'))")

    def wrap(f: Callable) -> Program:
        return Program(f, dims, name=name)

    return wrap
