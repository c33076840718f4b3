"""The NKI API of one documented release, as data: what `axon simulate --lint` checks in a kernel's
source, what the simulator enforces when it runs Axon's own kernels (`strict_api`), and which
engines the emitter may place an instruction on.

NKI 0.7.0, Neuron SDK 2.33.0. The signatures are the generated API pages
(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.<name>.html).
Those pages are incomplete in the stored docs for tensor_copy, tensor_reduce, tensor_tensor_scan,
nc_transpose, affine_select, dma_copy, dma_transpose and iota, so their rules come from the
2.32.0 pages (the same generated text one release earlier; `Api.page` names the version read).

One `Api` per call: its parameters in order (`dst` first: none is keyword-only), how many of them
have no default, where each tile argument may live, which engines `engine=` may name, and the
engine it runs on when it has no choice. Rules that span calls are the functions below the table.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable, Optional

NKI_VERSION = "2.33.0"
_PAGE = "https://awsdocs-neuron.readthedocs-hosted.com/en/v{}/nki/api/generated/nki.{}.{}.html"

SBUF, PSUM, HBM = "sbuf", "psum", "hbm"
ONCHIP = frozenset({SBUF, PSUM})
SBUF_ONLY = frozenset({SBUF})
DMA_SIDES = frozenset({SBUF, HBM})  # dma_copy reads no PSUM since NKI 0.3.0


@dataclass(frozen=True)
class Api:
    module: str  # "isa" or "language"
    name: str
    params: tuple[str, ...]
    required: int  # the first `required` parameters have no default
    tiles: dict = field(default_factory=dict)  # tile parameter -> memories it may be in
    engines: frozenset = frozenset()  # what engine= may name ("unknown": the compiler picks)
    runs_on: str = ""  # the engine when it has no engine parameter
    version: str = NKI_VERSION  # the release whose page this entry was read from

    @property
    def page(self) -> str:
        return _PAGE.format(self.version, self.module, self.name)


def _isa(name, params, required, tiles=None, engines=(), runs_on="", version=NKI_VERSION) -> Api:
    return Api("isa", name, tuple(params.split()), required, dict(tiles or {}), frozenset(engines), runs_on, version)


_ANY = ("vector", "scalar", "gpsimd", "unknown")
VIEWS = ("reshape", "ap")  # tensor methods that give a view of the same memory and dtype
ISA = {a.name: a for a in (
    _isa("activation", "dst op data bias scale reduce_op reduce_res reduce_cmd engine name", 3,
         {"dst": ONCHIP, "data": ONCHIP, "bias": ONCHIP, "scale": ONCHIP, "reduce_res": ONCHIP},
         ("scalar", "unknown")),  # GpSimd only from NeuronCore-v4 (trn3)
    _isa("activation_reduce", "dst op data reduce_op reduce_res bias scale name", 5,
         {"dst": ONCHIP, "data": ONCHIP, "bias": ONCHIP, "scale": ONCHIP, "reduce_res": ONCHIP}, runs_on="scalar"),
    _isa("tensor_scalar", "dst data op0 operand0 reverse0 op1 operand1 reverse1 engine name", 4,
         {"dst": ONCHIP, "data": ONCHIP, "operand0": ONCHIP, "operand1": ONCHIP}, _ANY),
    _isa("tensor_tensor", "dst data1 data2 op engine name", 4,
         {"dst": ONCHIP, "data1": ONCHIP, "data2": ONCHIP}, ("vector", "gpsimd", "unknown")),
    _isa("scalar_tensor_tensor", "dst data op0 operand0 op1 operand1 reverse0 reverse1 reduce_cmd reduce_op "
         "reduce_res name", 6, {"dst": ONCHIP, "data": ONCHIP, "operand0": ONCHIP, "operand1": ONCHIP,
                                 "reduce_res": ONCHIP}, runs_on="vector"),
    _isa("tensor_reduce", "dst op data axis negate keepdims name", 4, {"dst": ONCHIP, "data": ONCHIP},
         runs_on="vector", version="2.32.0"),
    _isa("tensor_tensor_scan", "dst data0 data1 initial op0 op1 reverse0 reverse1 name", 6,
         {"dst": ONCHIP, "data0": ONCHIP, "data1": ONCHIP, "initial": ONCHIP}, runs_on="vector", version="2.32.0"),
    _isa("reciprocal", "dst data name", 2, {"dst": ONCHIP, "data": ONCHIP}, runs_on="vector"),
    _isa("tensor_copy", "dst src engine name", 2, {"dst": ONCHIP, "src": ONCHIP}, _ANY, version="2.32.0"),
    _isa("memset", "dst value engine name", 2, {"dst": ONCHIP}, ("vector", "gpsimd", "unknown")),
    _isa("tensor_copy_predicated", "dst src predicate reverse_pred name", 3,
         {"dst": ONCHIP, "src": ONCHIP, "predicate": ONCHIP}, runs_on="vector"),
    _isa("select_reduce", "dst predicate on_true on_false reduce_res reduce_cmd reduce_op reverse_pred name", 4,
         {"dst": ONCHIP, "predicate": ONCHIP, "on_true": ONCHIP, "on_false": ONCHIP, "reduce_res": ONCHIP},
         runs_on="vector"),
    _isa("nc_matmul", "dst stationary moving is_stationary_onezero is_moving_onezero is_transpose accumulate "
         "tile_position tile_size perf_mode name", 3,
         {"dst": frozenset({PSUM}), "stationary": SBUF_ONLY, "moving": SBUF_ONLY}, runs_on="tensor"),
    _isa("nc_transpose", "dst data engine name", 2, {"dst": ONCHIP, "data": ONCHIP},
         ("tensor", "vector", "unknown"), version="2.32.0"),
    _isa("affine_select", "dst pattern channel_multiplier on_true_tile on_false_value cmp_op offset name", 5,
         {"dst": SBUF_ONLY, "on_true_tile": SBUF_ONLY}, runs_on="gpsimd", version="2.32.0"),
    _isa("iota", "dst pattern offset channel_multiplier name", 2, {"dst": SBUF_ONLY}, runs_on="gpsimd",
         version="2.32.0"),
    _isa("dma_copy", "dst src priority oob_mode dge_mode engine name", 2, {"dst": DMA_SIDES, "src": DMA_SIDES},
         ("sync", "scalar", "unknown"), runs_on="dma", version="2.32.0"),
    _isa("dma_transpose", "dst src axes priority dge_mode oob_mode name", 2,
         {"dst": SBUF_ONLY, "src": DMA_SIDES}, runs_on="dma", version="2.32.0"),
)}
LANGUAGE = {a.name: a for a in (
    Api("language", "ndarray", ("shape", "dtype", "buffer", "name", "address"), 2),
    Api("language", "zeros", ("shape", "dtype", "buffer", "name"), 2, version="2.32.0"),
    Api("language", "ds", ("start", "size"), 2),  # t[nl.ds(start, size)] is t[start:start + size]
    *(Api("language", r, ("start", "stop", "step"), 1, version="2.32.0")
      for r in ("affine_range", "sequential_range", "static_range")),
)}
DEPRECATED = {("language", r): "an alias of Python's range since NKI 0.6.0" for r in
              ("affine_range", "sequential_range", "static_range")}
REMOVED = {("language", "par_dim"): "block dimensions were removed: the partition axis is dim 0",
           ("language", "dynamic_range"): "removed in NKI 0.7.0: nl.fori_loop / nl.while_loop",
           ("language", "arange"): "removed in NKI 0.2.0: index tiles by slicing"}
BUFFERS = {"sbuf": SBUF, "psum": PSUM, "hbm": HBM, "shared_hbm": HBM, "private_hbm": HBM}

# tensor_scalar on the Scalar Engine runs only multiply and add, in this order (the trn2 page); on
# GpSimd only rsqrt [tensor_scalar, 2.32.0 engine parameter]; both as (op0, op1)
SCALAR_TENSOR_SCALAR = {("multiply", None), ("add", None), ("multiply", "add")}
GPSIMD_TENSOR_SCALAR = {("rsqrt", None)}
_OP_NAMES = {"mul": "multiply", "sub": "subtract", "div": "divide"}


def tensor_scalar_engines(op0: str, op1: Optional[str]) -> set[str]:
    """The engines that may run tensor_scalar(op0, op1) (Axon's or NKI's operator names)."""
    ops = (_OP_NAMES.get(op0, op0), _OP_NAMES.get(op1, op1) if op1 else None)
    out = {"vector"}
    if ops in SCALAR_TENSOR_SCALAR:
        out.add("scalar")
    if ops in GPSIMD_TENSOR_SCALAR:
        out.add("gpsimd")
    return out


# ----- the checks, on whatever describes an argument ------------------------------------------
@dataclass(frozen=True)
class Facts:
    """How the checks read an argument: its memory (sbuf/psum/hbm, or None: not known), dtype name
    (or None), and an enum or operator argument's name (engine.gpsimd -> "gpsimd")."""

    memory: Callable[[object], Optional[str]]
    dtype: Callable[[object], Optional[str]]
    name: Callable[[object], Optional[str]]


def check_call(api: Api, args: tuple, kwargs: dict, facts: Facts, target: str,
               hardware_only: bool = False) -> list[str]:
    """What is wrong with calling `api` with these arguments under NKI_VERSION (empty: nothing).
    `hardware_only`: only what no compiler can make right (GpSimd has no path to PSUM)."""
    call = f"nki.{api.module}.{api.name}"
    bound, problems = _bind(call, api, args, kwargs)
    engine = facts.name(bound["engine"]) if "engine" in bound else None
    on = engine if engine and engine != "unknown" else api.runs_on
    if hardware_only:
        return _psum_on_gpsimd(call, api, bound, facts, on)
    missing = [p for p in api.params[:api.required] if p not in bound]
    if missing:
        problems.append(f"{call} needs {', '.join(missing)}")
    if engine and api.engines and engine not in api.engines:
        problems.append(f"{call} runs on {' or '.join(sorted(api.engines - {'unknown'}))}, not engine.{engine}")
    for p, allowed in api.tiles.items():
        mem = facts.memory(bound.get(p))
        if mem is not None and mem not in allowed:
            problems.append(f"{call}: {p} is in {mem.upper()}; it must be in "
                            f"{' or '.join(m.upper() for m in sorted(allowed))}")
    problems += _psum_on_gpsimd(call, api, bound, facts, on)
    if api.name == "tensor_scalar" and engine in ("scalar", "gpsimd"):
        op0, op1 = facts.name(bound.get("op0")), facts.name(bound.get("op1"))
        if op0 and engine not in tensor_scalar_engines(op0, op1):
            problems.append(f"{call} on engine.{engine} cannot compute ({op0}, {op1})")
    if api.name in ("activation", "activation_reduce") and target == "trn1":
        bias = bound.get("bias")
        if bias is not None and facts.memory(bias) is None and facts.name(bias) is None and _is_number(bias):
            problems.append(f"{call}: on NeuronCore-v2 (trn1) bias is a [P, 1] tile, not a number")
    # dma_copy is dst = src in every DGE mode (its 2.32.0 page); only the beta-1 page casts
    if api.name in ("nc_transpose", "dma_transpose", "dma_copy"):
        src = bound.get("data", bound.get("src"))
        a, b = facts.dtype(bound.get("dst")), facts.dtype(src)
        if _differ(a, b):
            problems.append(f"{call} does not convert: dst is {a}, its source {b}")
    if api.name == "nc_matmul" and target in ("trn1", "trn2"):
        dt = facts.dtype(bound.get("dst"))
        if dt and "." not in dt and dt != "float32":
            problems.append(f"{call}: dst is {dt}; it must be float32 before NeuronCore-v4")
    return problems


def _bind(call: str, api: Api, args: tuple, kwargs: dict) -> tuple[dict, list[str]]:
    """The call's arguments by parameter name, and what is wrong with how they were passed."""
    problems = []
    if len(args) > len(api.params):
        problems.append(f"{call} takes {len(api.params)} arguments, got {len(args)} positional")
    bound = dict(zip(api.params, args))
    for k, v in kwargs.items():
        if k not in api.params:
            problems.append(f"{call} has no parameter {k!r} in NKI {NKI_VERSION} (its parameters: "
                            f"{', '.join(api.params)})")
        elif k in bound:
            problems.append(f"{call} got {k!r} twice")
        else:
            bound[k] = v
    return bound, problems


def _psum_on_gpsimd(call: str, api: Api, bound: dict, facts: Facts, on: Optional[str]) -> list[str]:
    """A tile in PSUM given to an instruction that runs on GpSimd, which has no path to PSUM."""
    if on != "gpsimd":
        return []
    return [f"{call} on GpSimd: {p} is in PSUM, which GpSimd cannot access"
            for p in api.tiles if facts.memory(bound.get(p)) == PSUM]


def _differ(a: Optional[str], b: Optional[str]) -> bool:
    """Two dtypes known to differ ("x.dtype", a kernel argument's, is known only as itself)."""
    return bool(a and b and a != b and "." not in a + b)


def _tensor_params(fn: ast.FunctionDef) -> set[str]:
    """The kernel's parameters used as tensors (indexed, or their shape or dtype read): the others
    may be scalar arguments (eps)."""
    params = {a.arg for a in fn.args.args}
    used = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
            used.add(n.value.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.attr in ("shape", "dtype",
                                                                                           "reshape"):
            used.add(n.value.id)
    return params & used


def _is_false(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _is_number(value) -> bool:
    if isinstance(value, ast.AST):
        return isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) or (
            isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ----- the static checker (axon simulate --lint) ----------------------------------------------
@dataclass(frozen=True)
class Finding:
    line: int
    text: str
    severity: str = "error"  # or "deprecated": reported, not a failure

    def format(self, path: str) -> str:
        return f"{path}:{self.line}: {self.severity}: {self.text}"


def lint(source: str, target: str = "trn2") -> list[Finding]:
    """Every call of nki.isa / nki.language in `source` checked against the table: unknown and
    removed names, arguments, engines, the memories of tiles whose buffer the source names
    (kernel parameters are HBM), and dtypes where they are literal."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return [Finding(err.lineno or 0, f"does not parse: {err.msg}")]
    return _Linter(tree, target).run()


class _Linter(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, target: str):
        self.tree, self.target = tree, target
        self.modules: dict[str, str] = {}  # local name -> "isa" / "language" / "nki"
        self.memory: dict[str, str] = {}
        self.dtype: dict[str, str] = {}  # tile -> dtype name, or "<param>.dtype"
        self.alias: dict[str, str] = {}  # DT = x.dtype
        self.asserted: dict[str, str] = {}  # "x.dtype" -> "bfloat16", from the kernel's entry checks
        self.zeroed: dict[str, int] = {}  # PSUM tile -> the line of the memset that zeroed it
        self.saw_beta1 = False
        self.findings: list[Finding] = []
        self.facts = Facts(self._memory_of, self._dtype_of, self._name_of)

    def run(self) -> list[Finding]:
        self.visit(self.tree)
        return sorted(self.findings, key=lambda f: f.line)

    # imports: import nki.isa as nisa / from nki import isa, language as nl / import nki
    def visit_Import(self, node):
        for a in node.names:
            parts = a.name.split(".")
            if parts[0] == "nki":
                self.modules[a.asname or parts[0]] = parts[-1] if a.asname and len(parts) > 1 else "nki"
            self._beta1(node, a.name)

    def _beta1(self, node, module: Optional[str]) -> None:
        """One finding, at the first import of the beta-1 namespace."""
        if module and module.split(".")[:2] == ["neuronxcc", "nki"] and not self.saw_beta1:
            self.saw_beta1 = True
            self._add(node, f"{module} is the beta-1 API; NKI {NKI_VERSION} is `import nki` (its calls are not "
                            "checked)")

    def visit_ImportFrom(self, node):
        self._beta1(node, node.module)
        if node.module == "nki":
            for a in node.names:
                if a.name in ("isa", "language"):
                    self.modules[a.asname or a.name] = a.name

    def visit_FunctionDef(self, node):
        if any(self._module_of(d) == "jit" for d in node.decorator_list):
            for name in _tensor_params(node):  # a kernel's tensor arguments live in HBM
                self.memory[name] = HBM
                self.dtype[name] = f"{name}.dtype"
        self.generic_visit(node)

    def visit_Assert(self, node):
        """`assert x.dtype == nl.bfloat16` (an entry check) makes x's dtype, and DT's, known."""
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            a, b = t.left, t.comparators[0]
            for side, other in ((a, b), (b, a)):
                said, named = self._dtype_expr(side), self._dtype_expr(other)
                if said and said.endswith(".dtype") and named and "." not in named:
                    self.asserted[said] = named
        self.generic_visit(node)

    def visit_Assign(self, node):
        self.generic_visit(node)
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return
        name, value = node.targets[0].id, node.value
        if isinstance(value, ast.Attribute) and value.attr == "dtype" and isinstance(value.value, ast.Name):
            self.alias[name] = f"{value.value.id}.dtype"
        elif isinstance(value, ast.Call) and self._module_of(value.func) == "language" and \
                value.func.attr in ("ndarray", "zeros"):
            kw = {k.arg: k.value for k in value.keywords}
            buf = kw.get("buffer", value.args[2] if len(value.args) > 2 else None)
            self.memory[name] = BUFFERS.get(self._name_of(buf) or "", SBUF) if buf is not None else SBUF
            dt = kw.get("dtype", value.args[1] if len(value.args) > 1 else None)
            dt_name = self._dtype_expr(dt)
            if dt_name:
                self.dtype[name] = dt_name
        elif isinstance(value, (ast.Name, ast.Subscript)):
            base = self._base(value)
            if base in self.memory:
                self.memory[name] = self.memory[base]
                if base in self.dtype:
                    self.dtype[name] = self.dtype[base]

    def visit_Call(self, node):
        self.generic_visit(node)
        module = self._module_of(node.func)
        if module not in ("isa", "language"):
            return
        name = node.func.attr
        if (module, name) in REMOVED:
            self._add(node, f"nki.{module}.{name}: {REMOVED[module, name]}")
            return
        if (module, name) in DEPRECATED:
            self._add(node, f"nki.{module}.{name} is deprecated ({DEPRECATED[module, name]})", "deprecated")
        api = (ISA if module == "isa" else LANGUAGE).get(name)
        if api is None:
            if module == "isa" and not self._simulated(name):
                self._add(node, f"nki.isa.{name} is not in Axon's table of NKI {NKI_VERSION}: not checked", "note")
            return
        kwargs = {k.arg: k.value for k in node.keywords if k.arg is not None}
        for text in check_call(api, tuple(node.args), kwargs, self.facts, self.target):
            self._add(node, f"{text} [{api.page}]")
        self._zeroed_psum(name, node.args[0] if node.args else kwargs.get("dst"), kwargs, api)

    def _zeroed_psum(self, name: str, dst, kwargs: dict, api: Api) -> None:
        """A PSUM tile zeroed by memset, then accumulated into by nc_matmul: undefined on
        NeuronCore-v2/v3 (nc_matmul's `accumulate`); a fresh PSUM tile needs no zeroing."""
        base = self._base(dst) if dst is not None else None
        if name == "memset" and self.memory.get(base) == PSUM:
            self.zeroed[base] = dst.lineno
        elif name == "nc_matmul" and base in self.zeroed and not _is_false(kwargs.get("accumulate")):
            self._add(dst, f"nki.isa.nc_matmul accumulates onto PSUM {base} zeroed by memset (line "
                           f"{self.zeroed.pop(base)}): undefined before NeuronCore-v4; leave a fresh PSUM tile "
                           f"unzeroed (the first matmul overwrites) [{api.page}]")

    # ---- what the source says about a value ----------------------------------------------------
    def _add(self, node, text: str, severity: str = "error") -> None:
        self.findings.append(Finding(node.lineno, text, severity))

    @staticmethod
    def _simulated(name: str) -> bool:
        from axon.targets.trainium.simulator.isa import INSTRUCTIONS

        return name in INSTRUCTIONS

    def _module_of(self, node) -> Optional[str]:
        """"isa"/"language" for nisa.X / nki.isa.X, "jit" for nki.jit, else None."""
        if not isinstance(node, ast.Attribute):
            return None
        owner = node.value
        if isinstance(owner, ast.Name):
            mod = self.modules.get(owner.id)
            if mod == "nki":
                return "jit" if node.attr == "jit" else None
            return mod
        if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and \
                self.modules.get(owner.value.id) == "nki" and owner.attr in ("isa", "language"):
            return owner.attr
        return None

    @staticmethod
    def _base(node) -> Optional[str]:
        """The tensor a view is of: t[...], t.reshape(...), t.ap(...)."""
        while isinstance(node, ast.Subscript) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in VIEWS):
            node = node.value if isinstance(node, ast.Subscript) else node.func.value
        return node.id if isinstance(node, ast.Name) else None

    def _memory_of(self, node) -> Optional[str]:
        base = self._base(node) if isinstance(node, ast.AST) else None
        return self.memory.get(base) if base else None

    def _dtype_of(self, node) -> Optional[str]:
        base = self._base(node) if isinstance(node, ast.AST) else None
        dt = self.dtype.get(base) if base else None
        return self.asserted.get(dt, dt)

    def _dtype_expr(self, node) -> Optional[str]:
        if isinstance(node, ast.Name):
            return self.alias.get(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and self._module_of(node) == "language":
                return node.attr
            if node.attr == "dtype" and isinstance(node.value, ast.Name):
                return f"{node.value.id}.dtype"
        return None

    @staticmethod
    def _name_of(node) -> Optional[str]:
        """engine.gpsimd / nisa.engine.gpsimd / nl.multiply -> its last name (the deprecated
        nisa.gpsimd_engine -> gpsimd); None for anything else."""
        if isinstance(node, ast.Attribute):
            return node.attr.removesuffix("_engine")
        return None
