"""Instruction programs for the operators of a pass, all of them from the synthesis stage.

`Lowerer(target)` asks the target's `Synthesizer` for every instruction sequence; there is no
table of operator -> instruction anywhere. Three levels, all cached per pattern:

  * `lower(node)`: the cheapest proved lowering of one operator (its tile pattern from
    `axon.synthesis.abstract`, so x*x is one pattern with a single operand). No lowering raises
    UnsupportedError("no instruction sequence implements <op> on <target>").
  * `program(nodes, needed)`: a phase's operators as one straight-line `Program`. Windows of 2-3
    consecutive connected operators are lowered as groups and kept where the group's proved
    lowering is cheaper (by the ISA's weights) than its operators' own; the units are
    concatenated, and instruction fusion (`axon.fusion.instructions.fuse_steps`) then merges
    producer/consumer pairs across units into single proved instructions (activation + reduce
    -> activation_reduce, tensor_scalar + tensor_tensor -> scalar_tensor_tensor, ...).
  * `matmul(node)`: the contraction's lowering, which must read its stationary operand
    transposed (the layout the tiling gives it).

Second round of propagation (paper step 8): the IR meaning of each fused program (what its steps
compute, `sequence_meaning`, over the phase's inputs a_k) is handed to `discover` under tight
guards; its proved variants are re-lowered over the a_k, and the cheapest, when it beats the fused
program (`second_round_cheaper`), replaces it (`second_round_used`), its outputs bound by position
to the graph nodes the fused program gives. The meaning is shared by phases of different variants
(whose graph nodes differ), so only the a_k form is cached per meaning and operand memories.

Invariant: shared stage; the target object (its synthesizer and `can_emit`) is the only source of
instruction knowledge, and every program is proved step by step (or marked unproved when no
verifier exists).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from axon.errors import AxonError, UnsupportedError
from axon.ir import Graph, Node
from axon.semantics.ops import OP_SPECS, Op, OpKind
from axon.semantics.sizes import Size

PROVED = "proved"
# per Lowerer (one optimize run): distinct instruction meanings propagation runs on (a count, not
# seconds, so the same search on any machine; layernorm meets it, each meaning ~0.3 s)
SECOND_ROUND_MEANINGS = 16


GROUP_SKETCHES = 12_000  # per group pattern (the synthesizer's default is 60,000 for one operator)
MAX_ALTERNATIVES = 4  # lowering alternatives per phase beyond the fused program (a search dimension)
GROUP_MISSES = 6  # 3-operator group patterns per run that may come back without a shorter lowering


def _second_round_guards():
    from axon.rewriting.propagation import Guards

    return Guards(max_rounds=2, max_enodes=80)


def pattern_of(node: Node) -> Node:
    """The operator on one tile: operands renamed a0, a1, ... (see axon.synthesis.abstract)."""
    from axon.synthesis import abstract

    return abstract([node]).pattern


@dataclass(frozen=True)
class Program:
    """A straight-line instruction sequence computing graph nodes from other graph nodes.

    Step args: ("operand", k) is the graph node operands[k]; ("step", i, output) an earlier step;
    ("const", value), value a number or a Size over the canonical names in `dims`.
    `outputs` maps each needed graph node to the step output holding it. `widths[(i, name)]` is
    the symbolic free size of a step output (1 for a [P, 1] column)."""

    steps: tuple
    operands: tuple
    outputs: tuple  # ((Node, Arg), ...)
    widths: dict = field(hash=False, compare=False)
    dims: tuple = ()  # (canonical name, graph name)
    status: str = PROVED
    cost: float = 0.0
    fusions: tuple = ()  # "a+b->c" per applied instruction fusion
    groups: tuple = ()  # operator names of the units lowered together ("max+sub+exp")
    second_round: str = ""  # what the second round of propagation changed, if anything

    def binding(self, sizes) -> dict:
        return {canon: sizes[orig] for canon, orig in self.dims if orig in sizes}

    def describe(self) -> str:
        return "; ".join(f"s{i} = {s}" for i, s in enumerate(self.steps))


def _described(node: Node) -> tuple[str, str]:
    """The operator that found no lowering, as an error names it (its operands' operators), and
    why where it is known: a reduction or scan over another axis than the last (instructions
    reduce and scan along a tile's free axis, the last)."""
    what = f"{node.op.value}({', '.join(i.op.value for i in node.inputs)})"
    axis = getattr(node.params, "axis", None)
    if OP_SPECS[node.op].kind in (OpKind.REDUCE, OpKind.SCAN) and axis not in (None, len(node.inputs[0].shape) - 1):
        shape = ", ".join(map(str, node.inputs[0].shape))
        return (f"{what} over axis {axis} of ({shape})",
                "instructions reduce and scan along the last axis only")
    return what, ""


def _rename(size: Size, names: dict) -> Size:
    return Size({tuple(sorted(names.get(s, s) for s in mono)): c for mono, c in size.terms})


class Lowerer:
    def __init__(self, target, use_synthesis: bool = True, groups: bool = True, fuse: bool = True,
                 second_round: bool = True):
        self.target = target
        self.synthesizer = target.synthesizer() if use_synthesis else None
        self.groups, self.fuse, self.second = groups, fuse, second_round
        self.cache: dict = {}
        self.programs: dict = {}
        self.sources: dict[str, str] = {}  # op name -> how it was lowered (for the kernel header)
        self.statuses: list[str] = []
        self.stats = {"fusions": 0, "groups": 0, "second_round_proved": 0, "second_round_used": 0,
                      "second_round_s": 0.0}
        self._second_seen: dict = {}

    @property
    def target_name(self) -> str:
        return getattr(self.target, "name", "this target")

    def _fail(self, what: str, why: str = ""):
        raise UnsupportedError(f"no instruction sequence implements {what} on {self.target_name}" + (f": {why}" if why else ""))

    # -- one operator, or a group --------------------------------------------------------------
    def _group_synthesizer(self):
        """Synthesis for operator groups: sketches bounded tighter (a group only pays when short)."""
        if getattr(self, "_gsynth", None) is None:
            from axon.synthesis import Synthesizer

            s = self.synthesizer
            self._gsynth = Synthesizer(s.isa, s.verifier if s.verifier is not None else False, s.max_steps,
                                       max_sketches=GROUP_SKETCHES)
        return self._gsynth

    def _lowerings(self, outputs, group, memories=None, max_steps=None, only_cached=False):
        """(abstraction, proved emittable lowerings) of a group, cheapest first; [] if none."""
        from axon.synthesis import abstract

        if self.synthesizer is None:
            return None, []
        try:
            ab = abstract(outputs, group)
        except AxonError:
            return None, []
        key = (ab.pattern, tuple(sorted((memories or {}).items())), max_steps)
        if key not in self.cache and only_cached:
            return ab, []
        if key not in self.cache:
            synth = self.synthesizer if len(group) == 1 else self._group_synthesizer()
            try:
                found = synth.lower(ab.pattern, operand_memories=memories, max_steps=max_steps)
            except AxonError:
                found = []
            self.cache[key] = [lw for lw in found if lw.verdict_status in ("proved", "unproved")
                               and self.target.can_emit(lw)]
        return ab, self.cache[key]

    def lower(self, node: Node, memories: Optional[dict] = None):
        """The cheapest proved lowering of one operator (UnsupportedError when there is none);
        `memories`: graph node -> memory of operands not in SBUF."""
        if node.op is Op.MATMUL:
            return self.matmul(node)
        _, found = self._lowerings([node], [node], _memories_for([node], [node], memories))
        found = [lw for lw in found if not _reads_transposed(lw)]
        if not found:
            self._fail(*_described(node))
        self.sources[node.op.value] = f"synthesis, {found[0].verdict_status}"
        return found[0]

    def matmul(self, node: Node):
        """The contraction as one instruction reading the stationary operand transposed."""
        _, found = self._lowerings([node], [node])
        for lw in found:
            if len(lw.steps) != 1:
                continue
            args = dict(lw.steps[0].args)
            trans = [s for s, a in args.items() if a.kind == "operand" and a.transposed and a.index == 0]
            plain = [s for s, a in args.items() if a.kind == "operand" and not a.transposed and a.index == 1]
            if len(args) == 2 and trans and plain:
                self.sources[node.op.value] = f"synthesis, {lw.verdict_status}"
                return lw
        self._fail("matmul with a transposed stationary operand")

    # -- a phase -----------------------------------------------------------------------------
    def program(self, nodes: Sequence[Node], needed: Sequence[Node], memories: Optional[dict] = None,
                alt: int = 0) -> Program:
        """One program for `nodes` (topological order) giving every node of `needed`.
        `memories`: graph node -> memory for operands not in SBUF (a matmul's PSUM chunk).
        `alt`: which lowering alternative (see `alternatives`); 0 is the fused program (fewest
        instructions by the ISA's weights), an index past the phase's alternatives gives it too."""
        nodes = tuple(nodes)
        needed = tuple(n for n in nodes if n in set(needed))
        mkey = tuple(sorted(((n, m) for n, m in (memories or {}).items()), key=lambda e: repr(e[0])))
        key = (nodes, needed, mkey)
        if key not in self.programs:
            self.programs[key] = self._program(nodes, needed, dict(memories or {}))
        prog = self.programs[key]
        if alt:
            alts = self._alternatives(key, prog, nodes, needed, dict(memories or {}))
            if alt <= len(alts):
                prog = alts[alt - 1]
        for n in nodes:
            self.sources.setdefault(n.op.value, f"synthesis, {prog.status}")
        return prog

    def _alternatives(self, key, prog: Program, nodes, needed, memories) -> list:
        """The phase's other proved lowerings, at most MAX_ALTERNATIVES, each different from the
        fused program: the same units with one kind of instruction fusion left undone (its pair of
        instructions may spread over two engines where the fused instruction holds one), then
        reductions *offloaded* (each takes its cheapest proved lowering on another engine than its
        cheapest one's), alone, with every operator lowered alone and unfused, and with the last
        fusion undone. Which is faster is the performance model's call (the candidates carry it)."""
        akey = ("alt",) + key
        if akey not in self.programs:
            pairs = []
            for f in prog.fusions:
                pair = tuple(f.split("->")[0].split("+"))
                if pair not in pairs:
                    pairs.append(pair)
            # (fusions left undone, reductions offloaded, operator groups): the last fusions applied
            # (the wide element-wise tail) first; then offloaded, and offloaded with every unit
            # alone and none of the fused program's fusions, in either order (each instruction
            # free to move)
            policies = [(frozenset({pair}), False, True) for pair in pairs[::-1][:2]] + \
                [(frozenset(), True, True), (frozenset(pairs + [p[::-1] for p in pairs]), True, False)] + \
                [(frozenset({pair}), True, True) for pair in pairs[::-1][:1]]
            out = []
            for blocked, offload, grouped in policies:
                if len(out) >= MAX_ALTERNATIVES:
                    break
                try:
                    p = self._program(nodes, needed, memories, blocked=blocked, offload=offload, grouped=grouped)
                except AxonError:
                    continue
                if p.steps != prog.steps and p.status == prog.status and \
                        all(p.steps != q.steps for q in out):
                    out.append(p)
            self.programs[akey] = out
        return self.programs[akey]

    def alternatives(self, nodes: Sequence[Node], needed: Sequence[Node], memories: Optional[dict] = None) -> int:
        """How many lowering alternatives the phase has beyond its fused program."""
        nodes = tuple(nodes)
        needed = tuple(n for n in nodes if n in set(needed))
        mkey = tuple(sorted(((n, m) for n, m in (memories or {}).items()), key=lambda e: repr(e[0])))
        prog = self.program(nodes, needed, memories)
        return len(self._alternatives((nodes, needed, mkey), prog, nodes, needed, dict(memories or {})))

    def _program(self, nodes, needed, memories, blocked=frozenset(), offload=False, grouped=True) -> Program:
        from axon.synthesis import abstract

        outs = list(needed) or [nodes[-1]]
        phase = abstract(outs, nodes)
        canon_of = {orig: canon for canon, orig in phase.dims}
        index = {n: k for k, n in enumerate(phase.operands)}
        steps: list = []
        produced: dict = {}  # graph node -> Arg in the program
        groups = []
        i = 0
        while i < len(nodes):
            unit = None
            if self.groups and grouped:
                for k in (3, 2):
                    win = nodes[i:i + k]
                    if offload and any(OP_SPECS[n.op].kind is OpKind.REDUCE for n in win):
                        continue  # the reduction is lowered alone, on its other engine
                    if len(win) == k and _connected(win):
                        unit = self._group_unit(win, nodes, needed, memories)
                        if unit is not None:
                            break
            if unit is None:
                win = nodes[i:i + 1]
                unit = self._single_unit(win[0], memories, offload)
            ab, lw = unit
            if len(win) > 1:
                groups.append("+".join(n.op.value for n in win))
                self.stats["groups"] += 1
            names = {canon: orig for canon, orig in ab.dims}
            base = len(steps)

            def remap(arg, ab=ab, names=names, base=base):
                if arg.kind == "operand":
                    g = ab.operands[arg.index]
                    if g in produced:
                        src = produced[g]
                        return replace(src, transposed=arg.transposed, broadcast=arg.broadcast) \
                            if (arg.transposed or arg.broadcast) else src
                    if g not in index:
                        raise UnsupportedError(f"{g.op.value} is read by the pass but not one of its operands")
                    return replace(arg, index=index[g])
                if arg.kind == "step":
                    return replace(arg, index=arg.index + base)
                if isinstance(arg.value, Size):
                    return replace(arg, value=_rename(_rename(arg.value, names), canon_of))
                return arg

            for st in lw.steps:
                steps.append(replace(st, args=tuple((s, remap(a)) for s, a in st.args)))
            unit_outs = _unit_outputs(win, nodes, needed)
            for g, out in zip(unit_outs, lw.outputs):
                produced[g] = remap(out)
            i += len(win)
        outputs = tuple((n, produced[n]) for n in outs)
        prog = self._finish(phase, steps, outputs, memories, groups, blocked)
        if self.second and not blocked and not offload and grouped:
            prog = self._second_round(prog, phase, nodes, needed, memories)
        return prog

    def _single_unit(self, node, memories, offload=False):
        mem = _memories_for([node], [node], memories)
        ab, found = self._lowerings([node], [node], mem)
        found = [lw for lw in found if not _reads_transposed(lw)]
        if not found:
            self._fail(f"{node.op.value}({', '.join(i.op.value for i in node.inputs)})")
        if offload and OP_SPECS[node.op].kind is OpKind.REDUCE:
            engines = lambda lw: {self.synthesizer.spec(st.instruction).engine for st in lw.steps}
            other = [lw for lw in found[1:] if not engines(lw) & engines(found[0])]
            if other:
                return ab, other[0]
        return ab, found[0]

    def _group_unit(self, win, nodes, needed, memories):
        outs = _unit_outputs(win, nodes, needed)
        mem = _memories_for(outs, win, memories)
        # a group pays only when it takes fewer instructions than its operators; a 3-operator
        # search costs about a second, so only so many fruitless ones are tried per run
        spent = len(win) > 2 and self.stats.get("group_misses", 0) >= GROUP_MISSES
        ab, found = self._lowerings(outs, win, mem, max_steps=len(win) - 1, only_cached=spent)
        found = [lw for lw in found if not _reads_transposed(lw)]
        best = self._cheaper(win, found, memories)
        if best is None and len(win) > 2 and ab is not None and ("miss", ab.pattern) not in self.cache:
            self.cache[("miss", ab.pattern)] = True
            self.stats["group_misses"] = self.stats.get("group_misses", 0) + 1
        return None if best is None else (ab, best)

    def _cheaper(self, win, found, memories):
        """The cheapest of `found` if it beats the window's operators lowered one by one."""
        if not found:
            return None
        single = 0.0
        for n in win:
            _, one = self._lowerings([n], [n], _memories_for([n], [n], memories))
            one = [lw for lw in one if not _reads_transposed(lw)]
            if not one:
                return None
            single += one[0].cost
        best = min(found, key=lambda lw: lw.cost)
        return best if best.cost < single - 1e-9 else None

    def _finish(self, phase, steps, outputs, memories, groups, blocked=frozenset()) -> Program:
        """Fuse instructions across the units, and read off every step output's width."""
        from axon.synthesis import Lowering, sequence_meaning

        synth = self.synthesizer
        # the emitter reads a row operand broadcast across partitions from a full on-chip tile, so
        # fusion sees it as one (its pattern is the widened operands: fuse_steps reads only those)
        steps = [replace(st, args=tuple((sl, replace(a, broadcast=False)) for sl, a in st.args)) for st in steps]
        outputs = [(n, replace(a, broadcast=False)) for n, a in outputs]
        wide = _widened_inputs(phase.pattern, steps)
        lw = Lowering(tuple(wide[k] for k in sorted(wide)) or phase.pattern, tuple(steps), 0, "proved", 0.0, "",
                      tuple(a for _, a in outputs),
                      getattr(synth.isa, "name", ""), sum(synth.spec(s.instruction).weight for s in steps))
        fusions = []
        if self.fuse:
            mem = {f"a{k}": memories[g] for k, g in enumerate(phase.operands) if g in memories}
            log: list = []
            try:
                fused = _fuse(lw, synth, mem, log, blocked)
            except AxonError:
                fused, log = lw, []
            if self.target.can_emit(fused) and not _reads_transposed(fused):
                lw = fused
                fusions = [f"{'+'.join(r.pair)}->{r.fused}" for r in log]
                self.stats["fusions"] += len(fusions)
        inputs = _widened_inputs(phase.pattern, steps)
        refs = [_arg("step", i, name) for i, s in enumerate(lw.steps) for name in synth.spec(s.instruction).outputs]
        meanings = sequence_meaning(synth.spec, inputs, lw.steps, refs)
        widths = {(r.index, r.output): m.shape[-1] if m.shape else Size.of(1) for r, m in zip(refs, meanings)}
        outputs = tuple((n, a) for (n, _), a in zip(outputs, lw.outputs))
        return Program(tuple(lw.steps), phase.operands, outputs, widths, phase.dims, lw.verdict_status,
                       lw.cost, tuple(fusions), tuple(groups))

    # -- second round of propagation ---------------------------------------------------------
    def _second_round(self, prog: Program, phase, nodes, needed, memories) -> Program:
        """Propagation over the program's IR meaning; a cheaper re-lowered variant replaces it."""
        if not 2 <= len(prog.steps) <= 6:
            return prog
        from axon.synthesis import sequence_meaning
        from axon.synthesis.pattern import pattern_inputs

        start = time.perf_counter()
        try:
            inputs = {int(n.params.name[1:]): n for n in pattern_inputs(phase.pattern)}
            meaning = sequence_meaning(self.synthesizer.spec, inputs, prog.steps, [a for _, a in prog.outputs])
            graph = Graph(tuple(inputs[k] for k in sorted(inputs)), tuple(meaning))
            # the meaning is over the a_k, so phases of different variants share it: what is kept
            # per meaning is a re-lowering over the a_k, bound to each phase's own graph nodes below
            mem = tuple(sorted((f"a{k}", memories[g]) for k, g in enumerate(phase.operands) if g in memories))
            key = (graph.outputs, mem)
            if key not in self._second_seen:
                if len(self._second_seen) >= SECOND_ROUND_MEANINGS:
                    return prog
                self._second_seen[key] = self._cheapest_variant(graph, mem)
            found = self._second_seen[key]
            if (found is None or found.cost >= prog.cost - 1e-9 or found.status != prog.status
                    or len(found.outputs) != len(prog.outputs)):
                return prog
            self.stats["second_round_cheaper"] = self.stats.get("second_round_cheaper", 0) + 1
            self.stats["second_round_used"] += 1
            return _bind(found, phase, prog)
        except AxonError:
            pass
        finally:
            self.stats["second_round_s"] += time.perf_counter() - start
        return prog

    def _cheapest_variant(self, graph: Graph, mem) -> Optional[Program]:
        """The cheapest re-lowering, over the meaning's inputs a_k, of the proved variants of
        `graph` (a program's meaning); None when no variant lowers."""
        from axon.rewriting import discover

        nu, _ = discover(graph, guards=_second_round_guards())
        self.stats["second_round_proved"] += sum(1 for p in nu.proofs if p.status == "PROVED")
        best = None
        for v in nu.extract_variants(limit=4)[1:]:
            try:
                cand = self._relower(v.graph, dict(mem))
            except AxonError:
                continue
            if cand is not None and (best is None or cand.cost < best.cost - 1e-9):
                best = cand
        return best

    def _relower(self, graph: Graph, memories: dict) -> Optional[Program]:
        """Lower a variant of a program's meaning to a Program over the variant's inputs a_k, its
        outputs in the order of `graph.outputs` (`_program` keeps `needed` in order), which is the
        meaning's (the e-graph keeps its roots in order); `memories`: a_k name -> memory."""
        inner_nodes = [n for n in graph.nodes() if n.op not in (Op.INPUT, Op.CONST)]
        if any(n.op is Op.TRANSPOSE or n.op is Op.MATMUL for n in inner_nodes):
            return None
        if any(o.op in (Op.INPUT, Op.CONST) for o in graph.outputs):
            return None  # an output that is an operand or a constant: nothing for a program to write
        sub = Lowerer.__new__(Lowerer)
        sub.__dict__.update(self.__dict__)
        sub.second = False
        sub.programs = {}
        sub.stats = dict(self.stats)
        inner_mem = {n: memories[n.params.name] for n in graph.inputs if n.params.name in memories}
        return sub._program(tuple(inner_nodes), tuple(graph.outputs), inner_mem)


def _bind(found: Program, phase, prog: Program) -> Program:
    """A re-lowering of `prog`'s meaning (`_relower`, over the a_k) as a program over the phase's
    graph operands giving the graph nodes `prog` gives: output k of the meaning is the value of
    prog.outputs[k], and so is output k of every proved variant of it."""
    by_name = {f"a{k}": g for k, g in enumerate(phase.operands)}
    operands = tuple(by_name[n.params.name] for n in found.operands)
    names = {canon: orig for canon, orig in phase.dims}
    dims = tuple((canon, names.get(inner, inner)) for canon, inner in found.dims)
    outputs = tuple((g, a) for (g, _), (_, a) in zip(prog.outputs, found.outputs))
    return replace(found, operands=operands, outputs=outputs, dims=dims,
                   second_round=f"{len(prog.steps)} -> {len(found.steps)} instructions, "
                                f"cost {prog.cost:g} -> {found.cost:g}")


def _widened_inputs(pattern, steps) -> dict:
    """k -> the pattern's input a_k, a [1, F] row read broadcast widened to the rows' [P, F]."""
    from axon.ir import input_node
    from axon.synthesis.pattern import pattern_inputs

    outs = pattern if isinstance(pattern, tuple) else (pattern,)
    rows = next((o.shape[-2] for o in outs if len(o.shape) >= 2), None)
    wide = {a.index for st in steps for _, a in st.args if a.kind == "operand" and a.broadcast}
    out = {}
    for n in pattern_inputs(pattern):
        k = int(n.params.name[1:])
        shape = n.shape if len(n.shape) >= 2 else (Size.of(1),) + tuple(n.shape)
        if (k in wide or shape[0] == Size.of(1)) and rows is not None and shape[0] == Size.of(1) and \
                shape[-1] != Size.of(1):
            n = input_node(n.params.name, (rows, shape[-1]))
        out[k] = n
    return out


def _fuse(lw, synth, memories, log, blocked=frozenset()):
    from axon.fusion.instructions import fuse_steps

    return fuse_steps(lw, synth, memories, log, blocked)


def _arg(kind, index, output="out"):
    from axon.synthesis import Arg

    return Arg(kind, index, output=output)


def _memories_for(outputs, group, memories) -> dict:
    """a_k -> memory for the abstraction of `group`, from graph-node memories."""
    if not memories:
        return {}
    from axon.synthesis import abstract

    ab = abstract(outputs, group)
    return {f"a{k}": memories[g] for k, g in enumerate(ab.operands) if g in memories}


def _reads_transposed(lw) -> bool:
    """An element-wise program cannot read an operand transposed (only a matmul's stationary can)."""
    return any(a.transposed for s in lw.steps for _, a in s.args)


def _connected(win) -> bool:
    return all(any(x in win[:j] for x in n.inputs) for j, n in enumerate(win) if j)


def _unit_outputs(win, nodes, needed) -> list:
    """The window's nodes that anything after it (or outside the phase) reads, in order; the
    last node always."""
    later = nodes[nodes.index(win[-1]) + 1:]
    out = [n for n in win if n in needed or any(n in m.inputs for m in later)]
    if win[-1] not in out:
        out.append(win[-1])
    return out
