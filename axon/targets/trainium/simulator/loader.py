"""Loading NKI kernel files: builds fake `nki` (current API) and `neuronxcc.nki` (beta-1 API)
module trees bound to one `SimContext`, and executes the kernel source with an import hook
that resolves those names to them.

A kernel file inside a package (a folder with `__init__.py`, or one its relative imports
climb through) runs as a module of that package: relative imports, and absolute imports of the
package's own top-level name (or of a sibling file of a kernel outside any package), load those
files afresh with the same hooked builtins. While a module's top level runs, it and the modules
it loaded are registered in `sys.modules` under their names (a module-level `@dataclass` looks
its module up there); the previous entries are restored afterwards.

Invariant: nothing global outlives a load: the hook lives only in the kernel modules' own
`__builtins__`, `sys.modules` is restored after each top-level execution, and each simulation
executes the kernel source afresh with modules bound to that simulation's context.
"""
from __future__ import annotations

import builtins
import functools
import inspect
import os
import re
import sys
import types

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium import nki_api

from . import dtypes, indexing, isa, language, ops, registers
from .memory import Tile


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


def _dst_first(name, impl, arity, args, kw) -> bool:
    """Whether a current-API call without `dst=` passes dst as its first positional argument:
    it passes more positional arguments than the beta-1 form takes, or read as a beta-1 call its
    positional arguments would also be given by keyword (`nisa.activation(t, op=.., data=..)`).
    A beta-1 memset starts with a shape, never a tile."""
    if len(args) > arity:
        return True
    if name == "memset":
        return bool(args) and isinstance(args[0], Tile)
    params = list(inspect.signature(impl).parameters)[2:]  # after (ctx, dst)
    return any(p in kw for p in params[:len(args)])


def _isa_function(ctx, name, impl, beta1: bool):
    arity = isa.BETA1_POSITIONAL[name]

    if name in isa.NO_DST:
        def call(*args, **kw):
            return impl(ctx, *args, **kw)
    elif name == "dma_copy":  # dst-first in both APIs
        def call(*args, **kw):
            if "dst" in kw:
                return impl(ctx, kw.pop("dst"), *args, **kw)
            return impl(ctx, *args, **kw)
    elif beta1 and name == "nc_stream_shuffle":  # beta-1: (src, dst, shuffle_mask), both by reference
        def call(src, dst, shuffle_mask, **kw):
            return impl(ctx, dst, src, shuffle_mask, **kw)
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
            if _dst_first(name, impl, arity, args, kw):
                return impl(ctx, *args, **kw)
            if name == "memset":
                return _memset_beta1(ctx, *args, **kw)
            return impl(ctx, None, *args, **kw)
    if name == "memset":  # a memset the kernel wrote is an instruction the compiler keeps
        plain = call

        def call(*args, **kw):
            return plain(*args, explicit=True, **kw)
    call.__name__ = name
    if beta1 or name not in nki_api.ISA:
        return call

    api = nki_api.ISA[name]

    def checked(*args, **kw):
        # every current-API kernel meets the hardware rules; Axon's own (strict) the whole API
        problems = nki_api.check_call(api, args, kw, _RUNTIME_FACTS, ctx.hw.name, hardware_only=not ctx.strict_api)
        if problems:
            raise KernelError(f"{problems[0]} [{api.page}]")
        return call(*args, **kw)

    checked.__name__ = name
    return checked


def _runtime_name(value):
    """An engine (a string here), an operator (nl.add) or an enum constant, by name."""
    if isinstance(value, str):
        return value
    op = getattr(value, "op", None)
    return getattr(op, "name", None) if op is not None else None


_RUNTIME_FACTS = nki_api.Facts(
    memory=lambda v: v.buf.memory.value if isinstance(v, Tile) else None,
    dtype=lambda v: dtypes.name(v.dtype) if isinstance(v, Tile) else None,
    name=_runtime_name)


def _memset_beta1(ctx, shape, value, dtype=None, mask=None, engine=None, explicit=False, **_):
    return isa.memset(ctx, None, value, dtype=dtype, shape=tuple(shape), mask=mask, engine=engine,
                      explicit=explicit)


class _AnyType:
    """Stand-in for nki.typing annotations such as `nt.tensor[[128, 512], nl.float32]`."""

    def __class_getitem__(cls, item):
        return cls


class LangOp:
    """nl.add, nl.exp, ...: callable as nki.language functions and usable as `op=` fields."""

    def __init__(self, ctx, op: ops.Op, kind: str, name: str = ""):
        self.op, self._ctx, self._kind = op, ctx, kind
        self.name = name or op.name  # nl.mean: the sum, divided ("mean" kind)

    def __call__(self, *args, **kw):
        if self._kind == "unary":
            return language.unary(self._ctx, self.op, *args, **kw)
        if self._kind == "binary":
            return language.binary(self._ctx, self.op, *args, **kw)
        return language.reduce(self._ctx, self.op, *args, mean=self._kind == "mean", **kw)

    def __repr__(self):
        return f"nl.{self.name}"


_REDUCTIONS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply",
               "all": "bitwise_and", "any": "bitwise_or"}


def _language_module(ctx, module_name: str) -> types.ModuleType:
    m = types.ModuleType(module_name)
    d = m.__dict__
    d.update(dtypes.EXPORTED)
    d.update(dtypes.MX_PACKED)
    d.update(language.BUFFERS)
    for op in ops.UNARY:
        d[op.name] = LangOp(ctx, op, "unary")
    for op in ops.BINARY:
        d[op.name] = LangOp(ctx, op, "binary")
    d["invert"] = d["logical_not"]
    for name, opname in _REDUCTIONS.items():
        d[name] = LangOp(ctx, ops.OPS[opname], "reduce")
    d["mean"] = LangOp(ctx, ops.OPS["add"], "mean", name="mean")
    for name in ("ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
                 "shared_identity_matrix", "load", "store", "load_transpose2d", "matmul",
                 "transpose", "affine_range", "sequential_range", "static_range", "program_id",
                 "num_programs", "program_ndim", "device_print", "broadcast_to", "shared_constant",
                 "loop_reduce", "where"):
        d[name] = functools.partial(getattr(language, name), ctx)
    d["copy"] = LangOp(ctx, ops.OPS["copy"], "unary")
    d["dynamic_range"] = functools.partial(registers.dynamic_range, ctx)
    d["arange"], d["mgrid"], d["ds"] = indexing.arange, indexing.mgrid, indexing.ds
    d["par_dim"] = language.par_dim
    d["finfo"], d["iinfo"], d["NKIObject"] = language.finfo, language.iinfo, language.NKIObject
    f32 = np.finfo(np.float32)  # nl.fp32.min etc. (beta-1 constants)
    d["fp32"] = types.SimpleNamespace(min=float(f32.min), max=float(f32.max), eps=float(f32.eps))
    d["tile_size"] = language.TileSize(ctx.hw.tiles, ctx.hw.memory)
    d["__getattr__"] = _unsupported(module_name)
    return m


def _isa_module(ctx, module_name: str, beta1: bool) -> types.ModuleType:
    m = types.ModuleType(module_name)
    for name, impl in isa.INSTRUCTIONS.items():
        m.__dict__[name] = _isa_function(ctx, name, impl, beta1)
    m.reduce_cmd, m.engine, m.dge_mode = isa.reduce_cmd, isa.engine, isa.dge_mode
    for name in ("register_alloc", "register_move", "register_load"):  # sequencer registers
        m.__dict__[name] = functools.partial(getattr(registers, name), ctx)
    m.VirtualRegister = registers.VirtualRegister
    for eng in ("tensor", "vector", "scalar", "gpsimd", "unknown"):  # nisa.vector_engine, ...
        m.__dict__[eng + "_engine"] = getattr(isa.engine, eng)
    m.oob_mode = types.SimpleNamespace(error="error", skip="skip")
    m.matmul_perf_mode = types.SimpleNamespace(none=None, double_row="double_row",
                                               double_row_gen3="double_row_gen3")
    m.nc_version = types.SimpleNamespace(gen2="gen2", gen3="gen3", gen4="gen4")
    m.get_nc_version = lambda: {"trn1": "gen2", "trn2": "gen3"}.get(ctx.hw.name, "gen4")
    m.__dict__["__getattr__"] = _unsupported(module_name)
    return m


_CONSTANTS = ("reduce_cmd", "engine", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version")


def _constants_module(isam, module_name: str) -> types.ModuleType:
    """`nki.isa.constants`: the enum namespaces nki.isa also exports."""
    m = types.ModuleType(module_name)
    for name in _CONSTANTS:
        m.__dict__[name] = isam.__dict__[name]
    m.__dict__["__getattr__"] = _unsupported(module_name)
    return m


class _Allocator:
    """What `ncc.sbuf.mod_alloc(...)`, `ncc.psum.alloc(...)` and friends return: the simulator
    allocates the buffer itself; the placement names the memory and, for a tensor placed where
    an earlier one was, carries that one's data over (language.Placement)."""

    def __init__(self, kind):
        self.kind = kind

    def __call__(self, *args, **kwargs):
        return language.Placement(self.kind, args, kwargs)


def _directive(*args, **kwargs):
    """Compiler directives and decorators (`ncc.no_reorder()`, `@ncc.skip_middle_end_transformations`,
    `@ncc.enable_stack_allocator(...)`): no effect on what the kernel computes."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return _directive


def _compiler_module(ctx, module_name: str) -> types.ModuleType:
    m = types.ModuleType(module_name)
    for mem in ("sbuf", "psum"):
        kind = language.BUFFERS[mem]
        m.__dict__[mem] = types.SimpleNamespace(mod_alloc=_Allocator(kind), alloc=_Allocator(kind),
                                                auto_alloc=_Allocator(kind))
    m.__dict__["hbm"] = types.SimpleNamespace(alloc=_Allocator(language.BUFFERS["shared_hbm"]))
    for name in ("skip_middle_end_transformations", "enable_stack_allocator", "no_reorder",
                 "force_auto_alloc", "multi_buffer", "tile_pool", "enable_stack_allocator"):
        m.__dict__[name] = _directive
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
        comp = _compiler_module(ctx, top + ".compiler")
        pkg.language, pkg.isa, pkg.typing, pkg.compiler = lang, isam, typing, comp
        mods[top + ".compiler"] = comp
        mods[top + ".isa.constants"] = isam.constants = _constants_module(isam, top + ".isa.constants")
        for deco in ("jit", "baremetal", "benchmark", "profile", "trace", "simulate_kernel"):
            setattr(pkg, deco, _decorator)
        pkg.__dict__["__getattr__"] = _unsupported(top)
        mods[top], mods[top + ".language"], mods[top + ".isa"], mods[top + ".typing"] = pkg, lang, isam, typing
    neuronxcc = types.ModuleType("neuronxcc")
    neuronxcc.nki = mods["neuronxcc.nki"]
    mods["neuronxcc"] = neuronxcc
    return mods


_RELATIVE = re.compile(r"^\s*from\s+(\.+)", re.M)


def package_of(path: str, source: str = "") -> tuple[str, str | None]:
    """(root, module name) of a kernel file: the folder to import its package from and its dotted
    name there, or (its folder, None) outside any package. A folder is a package when it has an
    `__init__.py`, or when the file's relative imports climb through it (a namespace package)."""
    folder = os.path.dirname(os.path.abspath(path))
    depth = max((len(m.group(1)) for m in _RELATIVE.finditer(source)), default=0)
    parts = [os.path.splitext(os.path.basename(path))[0]]
    while True:
        climbing = len(parts) <= depth
        if not (climbing or os.path.isfile(os.path.join(folder, "__init__.py"))):
            break
        parent = os.path.dirname(folder)
        if parent == folder or not os.path.basename(folder).isidentifier():
            break
        parts.insert(0, os.path.basename(folder))
        folder = parent
    if len(parts) == 1:
        return folder, None
    return folder, ".".join(parts)


class _Importer:
    """The kernel's own package (or sibling files): loaded from `root` with the hooked builtins,
    once per simulation; `registered` lists what was put into `sys.modules` and what it hid."""

    def __init__(self, root: str):
        self.root, self.modules, self.saved = root, {}, {}
        self.builtins: dict = {}

    def owns(self, name: str) -> bool:
        top = name.split(".")[0]
        if top in self.modules:
            return True
        base = os.path.join(self.root, top)
        return os.path.isfile(base + ".py") or os.path.isdir(base)

    def register(self, name: str, module):
        if name not in self.saved:
            self.saved[name] = sys.modules.get(name)
        sys.modules[name] = module

    def restore(self):
        for name, old in self.saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        self.saved = {}

    def load(self, name: str) -> types.ModuleType:
        if name in self.modules:
            return self.modules[name]
        parts = name.split(".")
        parent = self.load(".".join(parts[:-1])) if len(parts) > 1 else None
        base = os.path.join(self.root, *parts)
        if os.path.isdir(base):
            file = os.path.join(base, "__init__.py")
            file = file if os.path.isfile(file) else None
            pkg_path = [base]
        elif os.path.isfile(base + ".py"):
            file, pkg_path = base + ".py", None
        else:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        m = types.ModuleType(name)
        m.__file__ = file
        m.__package__ = name if pkg_path else ".".join(parts[:-1])
        if pkg_path:
            m.__path__ = pkg_path
        m.__builtins__ = self.builtins
        self.modules[name] = m
        self.register(name, m)
        if file is not None:
            with open(file, encoding="utf-8") as f:
                code = compile(f.read(), file, "exec")
            try:
                exec(code, m.__dict__)
            except BaseException:
                del self.modules[name]
                raise
        if parent is not None:
            setattr(parent, parts[-1], m)
        return m


class _Missing(types.ModuleType):
    """A module the kernel file imports for its host-side code (torch, torch_xla, ...) that is not
    installed: importing it succeeds, using anything from it inside the simulation fails."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        raise KernelError(f"{self.__name__} is not installed (the kernel file imports it for host code; "
                          f"the simulator runs only the kernel)")

    def __getitem__(self, key):
        return self

    def __mro_entries__(self, bases):
        return (object,)


def _importlib_for(importer: _Importer) -> types.ModuleType:
    """`importlib` as the kernel's package sees it: `import_module` of the package's own modules
    goes to `importer` (the hooked builtins, restored `sys.modules`) instead of Python's import
    system, which would run them with the real builtins and leave them in `sys.modules`."""
    import importlib
    import importlib.util

    m = types.ModuleType("importlib")
    m.__dict__.update(importlib.__dict__)

    def import_module(name, package=None):
        absname = importlib.util.resolve_name(name, package) if name.startswith(".") else name
        return importer.load(absname) if importer.owns(absname) else importlib.import_module(absname)

    m.import_module = import_module
    return m


def make_builtins(mods: dict, importer: _Importer | None = None) -> dict:
    """A copy of the builtins whose __import__ resolves nki / neuronxcc names to `mods`, and the
    kernel's own package and sibling files to `importer`."""
    real_import = builtins.__import__

    def hooked_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name in mods or name.split(".")[0] in ("nki", "neuronxcc")):
            if name not in mods:
                raise KernelError(f"module {name} is not provided by the Axon NKI simulator")
            if fromlist:
                return mods[name]
            return mods[name.split(".")[0]]
        if importer is not None and level == 0 and name.split(".")[0] == "importlib":
            real = real_import(name, globals, locals, fromlist, level)
            return real if fromlist and name != "importlib" else own_importlib
        if importer is not None and (level > 0 or importer.owns(name)):
            if level > 0:
                package = (globals or {}).get("__package__") or ""
                bits = package.split(".") if package else []
                if level - 1 > len(bits) or not package:
                    raise ImportError("attempted relative import beyond top-level package")
                base = ".".join(bits[:len(bits) - (level - 1)])
                absname = f"{base}.{name}" if name else base
            else:
                absname = name
            module = importer.load(absname)
            if fromlist:
                for item in fromlist:
                    if item != "*" and not hasattr(module, item) and getattr(module, "__path__", None):
                        try:
                            importer.load(f"{absname}.{item}")
                        except ModuleNotFoundError:
                            pass
                return module
            return module if level > 0 else importer.load(absname.split(".")[0])
        try:
            return real_import(name, globals, locals, fromlist, level)
        except ModuleNotFoundError as err:  # a host-side dependency (torch, torch_xla) not installed
            if level or not err.name or name.split(".")[0] != err.name.split(".")[0]:
                raise
            return _Missing(name if fromlist else name.split(".")[0])

    own_importlib = _importlib_for(importer) if importer is not None else None
    b = dict(builtins.__dict__)
    b["__import__"] = hooked_import
    if importer is not None:
        importer.builtins = b
    return b


def execute(code, path: str, ctx, source: str | None = None) -> dict:
    """Run the kernel module's top level with fresh fake modules; returns its namespace."""
    if source is None:
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
        except OSError:
            source = ""
    root, modname = package_of(path, source)
    mods = build_modules(ctx)
    importer = _Importer(root) if os.path.isfile(path) else None
    module = types.ModuleType(modname or "nki_kernel")
    namespace = module.__dict__
    namespace.update({"__file__": path, "__builtins__": make_builtins(mods, importer)})
    if modname:
        namespace["__package__"] = modname.rpartition(".")[0]
    try:
        if importer is not None:
            if modname:
                importer.load(modname.rpartition(".")[0])  # its packages' __init__ first
                importer.modules[modname] = module
            importer.register(module.__name__, module)
        exec(code, namespace)
    finally:
        if importer is not None:
            importer.restore()
    return namespace
