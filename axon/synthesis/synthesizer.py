"""Sketch-based synthesis: find short instruction sequences equal to a pattern, and prove them.

`Synthesizer.lower(pattern)` enumerates sketches of length 1, then 2 (a second instruction that
reads the first one's output), bottom-up: every filled sketch's meaning is evaluated on the same
random inputs at small distinct sizes, first steps with the same values (on the same engine) are
kept once (observational equivalence), and a sequence whose outputs equal the pattern's there is
a candidate. Candidates go to the SMT verifier cheapest first; only Status.PROVED is accepted.
Without a verifier (module absent, or `verifier=False`) candidates that pass the numeric check
are returned marked UNPROVED.

Pruning, in order: hole domains and sketches by basic operations (the pattern's, with the
decompositions below); memories and shape letters; symmetries; Inexpressible meanings; copies;
the numeric check. Every count is in `stats`.

Invariant: results depend only on (pattern, ISA, options): the memo, counters and evaluation
caches live in this object (or the `SynthesisCache` it is given), never in module state, and the
enumeration order is fixed, so a run is reproducible.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np

from axon.errors import ShapeError
from axon.ir import Node, input_node, make_node, toposort
from axon.semantics.algebra import const_value
from axon.semantics.ops import OP_SPECS, Op, OpKind, TransposeParams, concrete_params
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size, bind_shape
from axon.synthesis.lowering import PROVED, UNPROVED, Arg, Lowering, Step
from axon.synthesis.pattern import Abstraction, abstract, pattern_constraints, pattern_inputs, pattern_nodes
from axon.synthesis.sketch import ONE, OpsCache, Value, instances, ops_with_layout
from axon.synthesis.spec import HBM, ISA, SBUF, Form, Hole, Inexpressible, InstructionSpec, Slot, apply, const_node

S = ScalarOp
# Decompositions that let an instruction sequence use operations the pattern does not name, as
# (operations a sequence may use instead, constants it may need, alternative covers):
#   a - b = a + neg(b) = a + (-1)*b;   -a = (-1)*a;   a / b = a * (1/b), 1/b = 1 / b.
DECOMPOSITIONS: dict = {
    S.SUB: ({S.ADD, S.MUL, S.NEG}, {-1}, ({S.ADD, S.NEG}, {S.ADD, S.MUL})),
    S.NEG: ({S.MUL}, {-1}, ({S.MUL},)),
    S.DIV: ({S.MUL}, {1}, ()),
}


def covered(required: frozenset, ops: frozenset) -> bool:
    """`ops` provide every required operation, directly or through a decomposition."""
    return all(r in ops or any(alt <= ops for alt in DECOMPOSITIONS.get(r, ((), (), ()))[2]) for r in required)


RTOL = 1e-9  # float64 evaluation of equal real functions differs by ~1e-15 here
MAX_TILE = 64  # elements per dimension at the sizes the numeric check uses


def _view(h, x):
    return {"out": make_node(h["op"], [x["data"]], h["params"])}


# Addressing: a layout operator realised by an access pattern (DMA descriptors, strides); every
# target has one, so it is not part of any ISA. Its meaning is the layout operator itself.
VIEW = InstructionSpec("view", "addressing", (Slot("data", frozenset({Form.TILE}), memories=frozenset({SBUF, "hbm"})),),
                       (Hole("op", (), "layout"), Hole("params", (), "layout")), _view, weight=4.0,
                       doc="a layout operator realised as an access pattern by the emitter")


@dataclass
class SynthesisCache:
    """The memo: (pattern, ISA name, options) -> lowerings. Shareable between synthesizers."""

    table: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.table)


@dataclass
class _Inst:
    spec: InstructionSpec
    holes: dict
    args: dict  # slot -> Value
    outs: dict  # output name -> Node
    _ops: Optional[frozenset] = None

    @property
    def ops(self) -> frozenset:
        """Basic operations of everything computed up to this step's outputs (views included)."""
        if self._ops is None:
            self._ops = ops_with_layout(toposort(tuple(self.outs.values())))
        return self._ops

    @property
    def engine(self) -> str:
        return self.holes.get("engine", self.spec.engine)

    def step(self) -> Step:
        return Step(self.spec.name, tuple((h.name, self.holes[h.name]) for h in self.spec.holes),
                    tuple((s.name, self.args[s.name].arg) for s in self.spec.slots if s.name in self.args))


def _default_verifier():
    try:
        from axon.verification import Verifier
    except ImportError:
        return None
    return Verifier()


def _status_name(status) -> str:
    return str(getattr(status, "name", status)).lower()


class Synthesizer:
    def __init__(self, isa: ISA, verifier=None, max_steps: int = 2, *, cache: Optional[SynthesisCache] = None,
                 max_results: int = 6, max_sketches: int = 60_000, seed: int = 0):
        self.isa = isa
        self.verifier = _default_verifier() if verifier is None else (verifier or None)
        self.max_steps = max_steps
        self.max_results = max_results
        self.max_sketches = max_sketches  # per pattern, for sketches of length 2: bounds the worst case
        self.seed = seed
        self.cache = cache if cache is not None else SynthesisCache()
        self.stats: Counter = Counter()
        self._ops = OpsCache()

    # -- public -----------------------------------------------------------------------------
    def lower(self, pattern, *, operand_memories: Optional[Mapping[str, str]] = None, max_steps: Optional[int] = None,
              views: bool = True, exhaustive: bool = False) -> list[Lowering]:
        """All proved lowerings of `pattern` found (cheapest first); `pattern` is a Node or a tuple of Nodes.

        Sketches grow in length until one length yields candidates (`exhaustive`: up to max_steps
        regardless); `operand_memories` maps a0, a1, ... to where they live (default SBUF);
        `views=False` offers no transposed or broadcast reads of operands.
        """
        steps = self.max_steps if max_steps is None else max_steps
        memories = tuple(sorted((operand_memories or {}).items()))
        key = (pattern, self.isa.name, steps, memories, views, exhaustive, self.max_results, self.verifier is None)
        if key in self.cache.table:
            self.stats["cache_hits"] += 1
            return list(self.cache.table[key])
        self.stats["patterns"] += 1
        start = time.perf_counter()
        result = _Search(self, tile_form(pattern), dict(memories), steps, views, exhaustive).run()
        self.stats["time_s"] += time.perf_counter() - start
        self.cache.table[key] = tuple(result)
        return result

    def lower_group(self, outputs: Sequence[Node], group=None, **options) -> tuple[Abstraction, list[Lowering]]:
        """Cut `group` (default: the outputs alone) out of a graph, abstract it, and lower it."""
        abstraction = abstract(outputs, group)
        return abstraction, self.lower(abstraction.pattern, **options)

    def spec(self, name: str) -> InstructionSpec:
        return VIEW if name == "view" else self.isa[name]

    # -- proof ------------------------------------------------------------------------------
    def verify(self, targets: tuple, candidates: tuple, constraints) -> tuple[str, float, str]:
        query = "; ".join(f"{t!r} == {c!r}" for t, c in zip(targets, candidates))
        if self.verifier is None:
            return UNPROVED, 0.0, query
        total, status, asked = 0.0, "proved", []
        for t, c in zip(targets, candidates):
            start = time.perf_counter()
            verdict = self.verifier.check_nodes(t, c, constraints)
            total += getattr(verdict, "solver_time_s", 0.0) or (time.perf_counter() - start)
            asked.append(getattr(verdict, "query", None) or f"{t!r} == {c!r}")
            status = _status_name(verdict.status)
            if status != "proved":
                break
        self.stats[status] += 1
        return (PROVED if status == "proved" else status), total, "; ".join(asked)


def _moves_to_sbuf(spec, holes, args) -> bool:
    """A copy out of another memory into SBUF (a PSUM chunk for an instruction that cannot read
    PSUM): it computes nothing, but a later step may need its operand where it puts it."""
    return spec.out_memory(holes) == SBUF and any(v.memory not in (SBUF, HBM) for v in args.values()
                                                  if not v.is_const)


def tile_form(pattern):
    """`pattern` with rank-1 operands read as [1, F] rows (the layout a tile gives them); names kept."""
    outs = pattern if isinstance(pattern, tuple) else (pattern,)
    nodes = toposort(outs)
    if not any(n.op is Op.INPUT and n.rank == 1 for n in nodes):
        return pattern
    env: dict = {}
    for n in nodes:
        if n.op is Op.INPUT:
            env[n] = input_node(n.params.name, (ONE,) + n.shape) if n.rank == 1 else n
        elif n.op is Op.CONST:
            env[n] = n
        else:
            env[n] = make_node(n.op, [env[i] for i in n.inputs], n.params)
    built = tuple(env[o] for o in outs)
    return built if isinstance(pattern, tuple) else built[0]


def _exactly_simplified(pattern):
    """`pattern` rebuilt with `spec.apply`'s exact identities (x * 1 -> x, x + 0 -> x)."""
    outs = pattern if isinstance(pattern, tuple) else (pattern,)
    env: dict = {}
    for n in toposort(outs):
        env[n] = n if n.op in (Op.INPUT, Op.CONST) else apply(n.op, *(env[i] for i in n.inputs), params=n.params)
    return tuple(env[o] for o in outs)


def _streams_row(inst: "_Inst") -> bool:
    """Whether an instruction writes a whole row (its outputs are not all [.., 1] columns)."""
    return any(n.shape and n.shape[-1] != 1 for n in inst.outs.values())


def sequence_meaning(spec_of, operands, steps: Sequence[Step], outputs: Sequence[Arg]) -> tuple:
    """The IR meaning of an instruction sequence over the operand nodes (a list, or a mapping from k to a_k)."""
    env = step_meanings(spec_of, operands, steps)
    return tuple(_arg_node(env, operands, o) for o in outputs)


def _arg_node(env: dict, operands, arg: Arg) -> Node:
    if arg.kind == "const":
        return const_node(arg.value)
    node = operands[arg.index] if arg.kind == "operand" else env[(arg.index, arg.output)]
    return make_node(Op.TRANSPOSE, [node], TransposeParams((1, 0))) if arg.transposed else node


def step_meanings(spec_of, operands, steps: Sequence[Step]) -> dict:
    """(step number, output name) -> the IR meaning of that output, over the operand nodes."""
    env: dict = {}
    for i, step in enumerate(steps):
        spec = spec_of(step.instruction)
        slots = {s.name: (_arg_node(env, operands, step.arg(s.name)) if step.arg(s.name) is not None else None)
                 for s in spec.slots}
        for name, node in spec.meaning(dict(step.holes), slots).items():
            env[(i, name)] = node
    return env


class _Search:
    """One synthesis run for one pattern."""

    def __init__(self, owner: Synthesizer, pattern, memories: dict, max_steps: int, views: bool, exhaustive: bool):
        self.owner, self.stats, self.exhaustive = owner, owner.stats, exhaustive
        self.targets = pattern if isinstance(pattern, tuple) else (pattern,)
        self.pattern = pattern
        self.memories, self.max_steps, self.views = memories, max_steps, views
        nodes = pattern_nodes(pattern)
        # the operations an instruction must contribute, after the exact identities instruction
        # meanings drop (x * 1: the scores evacuated as x * 1 so that a max rides on the copy)
        self.required = ops_with_layout(pattern_nodes(_exactly_simplified(pattern)))
        self.allowed, consts = self._allowed(nodes)
        self.constraints = pattern_constraints(pattern)
        self.inputs = pattern_inputs(pattern)
        self.trials = self._trials(nodes)
        self._verdicts: dict = {}
        self.expected = [self._expectation(t) for t in self.targets]
        self.pool = self._pool(nodes, consts)

    # -- setup ------------------------------------------------------------------------------
    def _allowed(self, nodes):
        from axon.synthesis.spec import basic_ops

        ops, consts = basic_ops(nodes)
        # the pattern's own operations, also those its exact identities drop (x * 1 may be done
        # by a multiply that a max rides on)
        allowed = set(self.required) | set(ops)
        for op in list(ops):
            extra_ops, extra_consts, _ = DECOMPOSITIONS.get(op, ((), (), ()))
            allowed |= set(extra_ops)
            consts |= set(extra_consts)
        for n in nodes:
            kind = OP_SPECS[n.op].kind
            if kind is OpKind.CONTRACTION:
                allowed.add(Op.TRANSPOSE)  # the stationary operand of a contraction may be read transposed
            if kind in (OpKind.REDUCE, OpKind.SCAN) and OP_SPECS[n.op].scalar is not None:
                identity = SCALAR_SPECS[OP_SPECS[n.op].scalar].fold_identity
                if np.isfinite(identity):
                    consts = consts | {identity}  # a scan or reduction starts from its identity
        return frozenset(allowed), consts

    def _trials(self, nodes):
        dims = sorted({s for n in nodes for d in n.shape for s in d.symbols}
                      | {s for n in nodes if n.op is Op.CONST and isinstance(n.params.value, Size)
                         for s in n.params.value.symbols})
        binding = None
        for base in ((3, 5, 7, 11, 13, 17), (4, 6, 10, 14, 8, 12), (4, 8, 12, 16, 20, 24)):
            cand = {d: base[i % len(base)] + 2 * len(base) * (i // len(base)) for i, d in enumerate(dims)}
            if self._valid_binding(cand, nodes):
                binding = cand
                break
        if binding is None:
            raise ShapeError("no small size binding satisfies the pattern's preconditions")
        rng = np.random.default_rng(self.owner.seed)
        # the condition of a where is a mask: 0 on about half of it, or every candidate that
        # ignores the condition agrees with the pattern on the trials
        conds = {n.inputs[0] for n in nodes if n.op is Op.WHERE}
        mask = lambda s: (rng.standard_normal(s) > 0).astype(np.float64)
        trials = []
        for draw in (lambda s: rng.standard_normal(s), lambda s: rng.uniform(0.5, 2.0, s)):
            arrays = {n.params.name: (mask if n in conds else draw)(bind_shape(n.shape, binding)) for n in self.inputs}
            trials.append((binding, arrays, {}))
        return trials

    def _valid_binding(self, binding, nodes) -> bool:
        from axon.verification.numeric import valid_binding

        return valid_binding(binding, nodes, self.constraints, max_size=MAX_TILE)

    def _pool(self, nodes, consts) -> list[Value]:
        pool: list[Value] = []
        for node in self.inputs:
            i = int(node.params.name[1:])
            memory = self.memories.get(node.params.name, SBUF)
            pool.append(Value(Arg("operand", i), node, memory, node.shape))
            if not self.views or len(node.shape) != 2:
                continue
            p, f = node.shape
            if Op.TRANSPOSE in self.allowed and p != ONE and f != ONE:
                t = make_node(Op.TRANSPOSE, [node], TransposeParams((1, 0)))
                pool.append(Value(Arg("operand", i, transposed=True), t, SBUF, t.shape, frozenset({Op.TRANSPOSE})))
            if p == ONE and f != ONE:
                pool.append(Value(Arg("operand", i, broadcast=True), node, SBUF, (None, f)))
        seen = []
        for n in nodes:
            if n.op is Op.CONST and n.params.value not in seen:
                seen.append(n.params.value)
                pool.append(Value(Arg("const", value=n.params.value), n, SBUF, ()))
        for c in sorted(consts, key=lambda c: (abs(float(c)), float(c))):
            if not any(_same_const(c, s) for s in seen):
                seen.append(c)
                pool.append(Value(Arg("const", value=c), const_node(c), SBUF, ()))
        return pool

    # -- numeric check ----------------------------------------------------------------------
    def _eval(self, node: Node, trial) -> np.ndarray:
        binding, arrays, cache = trial
        value = cache.get(node)
        if value is None:
            if node.op is Op.INPUT:
                value = arrays[node.params.name]
            elif node.op is Op.CONST:
                value = np.float64(const_value(node.params.value, binding))
            else:
                args = [self._eval(i, trial) for i in node.inputs]
                with np.errstate(all="ignore"):
                    value = np.asarray(OP_SPECS[node.op].numpy(args, concrete_params(node.params, binding),
                                                               bind_shape(node.shape, binding)),
                                       dtype=np.float64)
            cache[node] = value
        return value

    def _values(self, node: Node) -> tuple:
        return tuple(self._eval(node, t) for t in self.trials)

    @staticmethod
    def _fingerprint(node: Node, values: tuple) -> tuple:
        return (node.shape,) + tuple((np.round(v, 9) + 0.0).tobytes() for v in values)

    def _expectation(self, target: Node) -> tuple:
        """Per trial: the target's values, the tolerance per element, and where they are NaN."""
        out = []
        for v in self._values(target):
            finite = np.abs(v[np.isfinite(v)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            out.append((v, RTOL * (scale + np.nan_to_num(np.abs(v), posinf=0.0)), np.isnan(v)))
        return tuple(out)

    def _equals(self, node: Node, k: int) -> bool:
        """Does `node` take target k's values on every trial (NaN where it is NaN)?"""
        key = (node, k)
        if key not in self._verdicts:
            ok = node.shape == self.targets[k].shape
            for trial, (t, tol, nan) in zip(self.trials, self.expected[k]) if ok else ():
                x = self._eval(node, trial)
                with np.errstate(invalid="ignore"):
                    good = np.abs(x - t) <= tol
                if nan.any():
                    good |= nan & np.isnan(x)
                inf = np.isinf(t)
                if inf.any():
                    good |= inf & (x == t)
                if not good.all():
                    ok = False
                    break
            self._verdicts[key] = ok
        return self._verdicts[key]

    # -- enumeration ------------------------------------------------------------------------
    def _build(self, spec, holes, args) -> Optional[_Inst]:
        try:
            outs = spec.meaning(holes, {k: v.node for k, v in args.items()})
        except ShapeError:
            self.stats["pruned_shape"] += 1
            return None
        except Inexpressible:
            self.stats["pruned_inexpressible"] += 1
            return None
        if all(any(o is v.node or o == v.node for v in args.values()) for o in outs.values()) \
                and not _moves_to_sbuf(spec, holes, args):
            self.stats["pruned_copy"] += 1  # computes nothing: every output is one of its operands
            return None
        return _Inst(spec, holes, args, outs)

    def _specs(self):
        return sorted(self.owner.isa.instructions, key=lambda s: s.weight)

    def _match(self, insts: Sequence[_Inst]) -> Optional[tuple]:
        """For each target, the (step, output) equal to it; the last step must give one of them."""
        last = insts[-1]
        if not any(self._equals(node, k) for node in last.outs.values() for k in range(len(self.targets))):
            return None
        found = []
        for k in range(len(self.targets)):
            hit = next(((i, name) for i in reversed(range(len(insts))) for name, node in insts[i].outs.items()
                        if self._equals(node, k)), None)
            if hit is None:
                return None
            found.append(hit)
        return tuple(found)

    def run(self) -> list[Lowering]:
        solutions: list[tuple] = []  # (insts, refs)
        if self.views and len(self.targets) == 1 and OP_SPECS[self.targets[0].op].kind is OpKind.LAYOUT \
                and len(self.targets[0].inputs) == 1:  # an access pattern reads one tensor (not a concatenation)
            solutions.extend(self._view_solutions())
        need_first = (lambda ops: covered(self.required, ops)) if self.max_steps == 1 else (lambda ops: True)
        first: list[_Inst] = []
        seen: dict = {}
        for spec in self._specs():
            for holes, args in instances(spec, self.pool, self.allowed, need_first, None, self.owner._ops, self.stats):
                inst = self._build(spec, holes, args)
                if inst is None:
                    continue
                refs = self._match([inst])
                if refs is not None and covered(self.required, inst.ops):
                    if self._minimal(inst):
                        solutions.append(([inst], refs))
                    continue
                self.stats["pruned_numeric" if refs is None else "pruned_ops"] += 1
                fingerprints = tuple(self._fingerprint(o, self._values(o)) for o in inst.outs.values())
                key = (fingerprints, inst.engine, spec.out_memory(holes)) if self.exhaustive else fingerprints
                if key in seen:  # one instance per value: the one with fewest arguments
                    self.stats["pruned_duplicate"] += 1
                    k = seen[key]
                    if len(inst.args) < len(first[k].args):
                        first[k] = inst
                    continue
                seen[key] = len(first)
                first.append(inst)
        if self.max_steps >= 2 and (self.exhaustive or not solutions):
            # first steps that already do more of the pattern's work are tried first; the search
            # stops once enough candidates are in hand or the sketch budget is spent
            # Goal direction: a first step that computes one of the pattern's own subexpressions
            # is tried before the others (tier 0); the search stops after the first tier that
            # yields candidates, or when the sketch budget is spent.
            subexpressions = {self._fingerprint(n, self._values(n)) for n in pattern_nodes(self.pattern)
                              if n.op not in (Op.INPUT, Op.CONST) and n not in self.targets}
            tier = lambda i: 0 if any(self._fingerprint(o, self._values(o)) in subexpressions
                                      for o in i.outs.values()) else 1
            first.sort(key=lambda i: (tier(i), i.spec.weight))
            budget = self.stats["sketches"] + self.owner.max_sketches
            done_tier = None
            for s1 in first:
                if self.stats["sketches"] > budget:
                    self.stats["budget_exhausted"] += 1
                    break
                if done_tier is not None and tier(s1) > done_tier:
                    break
                more = list(self._second(s1))
                if more:
                    done_tier = tier(s1)
                solutions.extend(more)
        return self._prove(solutions)

    def _second(self, s1: _Inst):
        extra = [Value(Arg("step", 0, output=name), node, s1.spec.out_memory(s1.holes), node.shape)
                 for name, node in s1.outs.items()]
        pool = self.pool + extra
        must = {id(v) for v in extra}
        need = lambda ops: covered(self.required, s1.ops | ops)
        for spec in self._specs():
            for holes, args in instances(spec, pool, self.allowed, need, must, self.owner._ops, self.stats):
                s2 = self._build(spec, holes, args)
                if s2 is None:
                    continue
                refs = self._match([s1, s2])
                if refs is None:
                    self.stats["pruned_numeric"] += 1
                elif not covered(self.required, s1.ops | s2.ops) or (
                        covered(self.required, self._own_ops(s2, s1)) and not _moves_to_sbuf(s1.spec, s1.holes, s1.args)):
                    self.stats["pruned_ops"] += 1  # incomplete, or the first step adds nothing needed
                elif self._minimal(s2):
                    yield [s1, s2], refs

    def _own_ops(self, inst: _Inst, before: _Inst) -> frozenset:
        """Basic operations of `inst` alone, reading `before`'s outputs as given."""
        prior = set(toposort(tuple(before.outs.values())))
        return ops_with_layout([n for n in toposort(tuple(inst.outs.values())) if n not in prior])

    def _minimal(self, inst: _Inst) -> bool:
        """No optional part of the instruction can be left out with the same values (x*1, max(max(x,0),0))."""
        for slot in inst.spec.slots:
            if not slot.optional or slot.name not in inst.args:
                continue
            holes = dict(inst.holes, **({slot.hole: None} if slot.hole else {}))
            args = {k: v.node for k, v in inst.args.items() if k != slot.name}
            args[slot.name] = None
            try:
                outs = inst.spec.meaning(holes, args)
            except (ShapeError, Inexpressible):
                continue
            if all(outs[k].shape == inst.outs[k].shape and
                   all(np.array_equal(x, y, equal_nan=True) or np.allclose(x, y, rtol=RTOL, atol=RTOL, equal_nan=True)
                       for x, y in zip(self._values(outs[k]), self._values(inst.outs[k]))) for k in inst.outs):
                self.stats["pruned_redundant"] += 1
                return False
        return True

    def _view_solutions(self):
        node = self.targets[0]
        a0 = next(v for v in self.pool if v.arg == Arg("operand", 0))
        holes = {"op": node.op, "params": node.params}
        outs = VIEW.meaning(holes, {"data": a0.node})
        inst = _Inst(VIEW, holes, {"data": a0}, outs, frozenset())  # a view computes nothing
        yield [inst], ((0, "out"),)

    # -- proof ------------------------------------------------------------------------------
    def _prove(self, solutions) -> list[Lowering]:
        # equal counts and weights: fewer instructions that stream a whole row (rather than a
        # [P, 1] column) first, since weights do not see operand widths
        ranked = sorted(enumerate(solutions), key=lambda e: (len(e[1][0]), sum(i.spec.weight for i in e[1][0]),
                                                             sum(map(_streams_row, e[1][0])),
                                                             sum(len(i.args) for i in e[1][0]), e[0]))
        self.stats["candidates"] += len(ranked)
        out: list[Lowering] = []
        tried = set()
        for _, (insts, refs) in ranked:
            if len(out) >= self.owner.max_results:
                break
            candidates = tuple(insts[i].outs[name] for i, name in refs)
            meaning = (tuple(i.engine for i in insts), candidates)
            if meaning in tried:  # the same expression on the same engines: keep the cheapest
                self.stats["pruned_duplicate"] += 1
                continue
            tried.add(meaning)
            steps = tuple(i.step() for i in insts)
            status, seconds, query = self.owner.verify(self.targets, candidates, self.constraints)
            if status not in (PROVED, UNPROVED):
                continue
            outputs = tuple(Arg("step", i, output=name) for i, name in refs)
            output_step = outputs[0].index if len(outputs) == 1 else tuple(o.index for o in outputs)
            out.append(Lowering(self.pattern, steps, output_step, status, seconds, query, outputs,
                                self.owner.isa.name, sum(i.spec.weight for i in insts)))
        return out


def _same_const(a, b) -> bool:
    if isinstance(a, Size) or isinstance(b, Size):
        return a == b
    return float(a) == float(b)
