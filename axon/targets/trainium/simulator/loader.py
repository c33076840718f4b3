"""Loading NKI kernel files: builds fake `nki` (current API) and `neuronxcc.nki` (beta-1 API)
module trees bound to one `SimContext`, and executes the kernel source with an import hook
that resolves those names to them.

Invariant: nothing global changes: `sys.modules` is never touched; the hook lives only in the
kernel module's own `__builtins__`, and each simulation executes the kernel source afresh
with modules bound to that simulation's context.
"""
from __future__ import annotations

import builtins
import functools
import types

from axon.errors import KernelError

from . import dtypes, indexing, isa, language, ops


class Jit:
    """What `@nki.jit` (and friends) make of a kernel function."""

    def __init__(self, fn, **options):
        self.fn, self.options = fn, options
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __getitem__(self, grid):  # kernel[grid](...): SPMD launch, simulated as one program
        return self


def _decorator(fn=None, **options):
    if fn is None:
        return lambda f: Jit(f, **options)
    return Jit(fn, **options)


def _unsupported(module_name):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise KernelError(f"{module_name}.{name} is not supported by the Axon NKI simulator")
    return __getattr__


def _isa_function(ctx, name, impl, beta1: bool):
    arity = isa.BETA1_POSITIONAL[name]

    if name == "dma_copy":  # dst-first in both APIs
        def call(*args, **kw):
            if "dst" in kw:
                return impl(ctx, kw.pop("dst"), *args, **kw)
            return impl(ctx, *args, **kw)
    elif beta1:
        def call(*args, **kw):
            dst = kw.pop("dst", None)
            if name == "memset" and dst is None:
                return _memset_beta1(ctx, *args, **kw)
            return impl(ctx, dst, *args, **kw)
    else:
        def call(*args, **kw):
            if "dst" in kw:
                return impl(ctx, kw.pop("dst"), *args, **kw)
            if len(args) > arity:
                return impl(ctx, *args, **kw)
            if name == "memset":
                return _memset_beta1(ctx, *args, **kw)
            return impl(ctx, None, *args, **kw)
    call.__name__ = name
    return call


def _memset_beta1(ctx, shape, value, dtype=None, mask=None, engine=None, **_):
    return isa.memset(ctx, None, value, dtype=dtype, shape=tuple(shape), mask=mask, engine=engine)


class _AnyType:
    """Stand-in for nki.typing annotations such as `nt.tensor[[128, 512], nl.float32]`."""

    def __class_getitem__(cls, item):
        return cls


class LangOp:
    """nl.add, nl.exp, ...: callable as nki.language functions and usable as `op=` fields."""

    def __init__(self, ctx, op: ops.Op, kind: str):
        self.op, self._ctx, self._kind = op, ctx, kind

    def __call__(self, *args, **kw):
        if self._kind == "unary":
            return language.unary(self._ctx, self.op, *args, **kw)
        if self._kind == "binary":
            return language.binary(self._ctx, self.op, *args, **kw)
        return language.reduce(self._ctx, self.op, *args, **kw)

    def __repr__(self):
        return f"nl.{self.op.name}"


_REDUCTIONS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply",
               "all": "bitwise_and", "any": "bitwise_or"}


def _language_module(ctx, module_name: str) -> types.ModuleType:
    m = types.ModuleType(module_name)
    d = m.__dict__
    d.update(dtypes.EXPORTED)
    d.update(language.BUFFERS)
    for op in ops.UNARY:
        d[op.name] = LangOp(ctx, op, "unary")
    for op in ops.BINARY:
        d[op.name] = LangOp(ctx, op, "binary")
    d["invert"] = d["logical_not"]
    for name, opname in _REDUCTIONS.items():
        d[name] = LangOp(ctx, ops.OPS[opname], "reduce")
    d["mean"] = functools.partial(language.reduce, ctx, ops.OPS["add"], mean=True)
    for name in ("ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                 "shared_identity_matrix", "load", "store", "load_transpose2d", "matmul",
                 "transpose", "affine_range", "sequential_range", "static_range", "program_id",
                 "num_programs", "device_print", "broadcast_to"):
        d[name] = functools.partial(getattr(language, name), ctx)
    d["copy"] = LangOp(ctx, ops.OPS["copy"], "unary")
    d["arange"], d["mgrid"], d["ds"] = indexing.arange, indexing.mgrid, indexing.ds
    d["par_dim"] = language.par_dim
    d["tile_size"] = language.TileSize(ctx.hw.tiles, ctx.hw.memory)
    d["__getattr__"] = _unsupported(module_name)
    return m


def _isa_module(ctx, module_name: str, beta1: bool) -> types.ModuleType:
    m = types.ModuleType(module_name)
    for name, impl in isa.INSTRUCTIONS.items():
        m.__dict__[name] = _isa_function(ctx, name, impl, beta1)
    m.reduce_cmd, m.engine, m.dge_mode = isa.reduce_cmd, isa.engine, isa.dge_mode
    m.nc_version = types.SimpleNamespace(gen2="gen2", gen3="gen3", gen4="gen4")
    m.get_nc_version = lambda: {"trn1": "gen2", "trn2": "gen3"}.get(ctx.hw.name, "gen4")
    m.__dict__["__getattr__"] = _unsupported(module_name)
    return m


def build_modules(ctx) -> dict[str, types.ModuleType]:
    """The importable names of both API generations, bound to `ctx`."""
    mods = {}
    for top, beta1 in (("nki", False), ("neuronxcc.nki", True)):
        pkg = types.ModuleType(top)
        lang = _language_module(ctx, top + ".language")
        isam = _isa_module(ctx, top + ".isa", beta1)
        typing = types.ModuleType(top + ".typing")
        typing.tensor = _AnyType
        typing.__dict__["__getattr__"] = lambda name: _AnyType
        pkg.language, pkg.isa, pkg.typing = lang, isam, typing
        for deco in ("jit", "baremetal", "benchmark", "profile", "trace", "simulate_kernel"):
            setattr(pkg, deco, _decorator)
        pkg.__dict__["__getattr__"] = _unsupported(top)
        mods[top], mods[top + ".language"], mods[top + ".isa"], mods[top + ".typing"] = pkg, lang, isam, typing
    neuronxcc = types.ModuleType("neuronxcc")
    neuronxcc.nki = mods["neuronxcc.nki"]
    mods["neuronxcc"] = neuronxcc
    return mods


def make_builtins(mods: dict) -> dict:
    """A copy of the builtins whose __import__ resolves nki / neuronxcc names to `mods`."""
    real_import = builtins.__import__

    def hooked_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name in mods or name.split(".")[0] in ("nki", "neuronxcc")):
            if name not in mods:
                raise KernelError(f"module {name} is not provided by the Axon NKI simulator")
            if fromlist:
                return mods[name]
            return mods[name.split(".")[0]]
        return real_import(name, globals, locals, fromlist, level)

    b = dict(builtins.__dict__)
    b["__import__"] = hooked_import
    return b


def execute(code, path: str, ctx) -> dict:
    """Run the kernel module's top level with fresh fake modules; returns its namespace."""
    mods = build_modules(ctx)
    namespace = {"__name__": "nki_kernel", "__file__": path, "__builtins__": make_builtins(mods)}
    exec(code, namespace)
    return namespace
