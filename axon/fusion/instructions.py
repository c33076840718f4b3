"""Instruction fusion (paper §9): replace a producer/consumer pair of steps by one instruction.

For each pair (i, j) where step j reads step i, the pair's meaning is cut out as a pattern: the
pair's external arguments become inputs a0, a1, ... (each remembering where it lives, so an
operand in HBM can only be read by an instruction that reads HBM), constants stay constants, and
the pattern's outputs are the pair's outputs that anything else reads. That pattern is handed
to the synthesizer with sketches of length one; a proved single instruction that the ISA rates
cheaper than the pair replaces it. Nothing here names an instruction: tensor_scalar +
tensor_tensor -> scalar_tensor_tensor, two tensor_scalar -> one dual-op tensor_scalar,
activation + tensor_reduce -> activation_reduce and dma_copy + nc_transpose -> dma_transpose
(where the ISA has it) are what the synthesizer finds for those pairs on Trainium.

Invariant: every replacement is proved (or, without a verifier, marked UNPROVED like the
lowerings it came from); the fused lowering's outputs are the same values as before.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional

from axon.ir import Node, input_node, make_node
from axon.semantics.ops import Op, TransposeParams
from axon.synthesis.lowering import PROVED, UNPROVED, Arg, Lowering
from axon.synthesis.pattern import pattern_inputs
from axon.synthesis.spec import SBUF, const_node
from axon.synthesis.synthesizer import step_meanings


@dataclass(frozen=True)
class Fusion:
    """One applied fusion: which steps were merged, into what, and its proof."""

    pair: tuple[str, str]
    fused: str
    verdict_status: str
    solver_time_s: float
    query: str


def _pair_pattern(synth, operands, steps, outputs, memories, i, j):
    """The pair's meaning over fresh inputs, with the Arg behind each input and its memory."""
    env = step_meanings(synth.spec, operands, steps)
    leaves: dict = {}  # Arg -> INPUT node
    leaf_memory: dict = {}

    def leaf(arg: Arg, node: Node) -> Node:
        if arg.kind == "const":
            return const_node(arg.value)
        if arg not in leaves:
            name = f"a{len(leaves)}"
            leaves[arg] = input_node(name, node.shape)
            if arg.kind == "operand":
                leaf_memory[name] = SBUF if arg.transposed or arg.broadcast else memories.get(f"a{arg.index}", SBUF)
            else:
                leaf_memory[name] = synth.spec(steps[arg.index].instruction).out_memory(dict(steps[arg.index].holes))
        return leaves[arg]

    local: dict = {}
    for k in (i, j):
        spec = synth.spec(steps[k].instruction)
        slots = {}
        for s in spec.slots:
            a = steps[k].arg(s.name)
            if a is None:
                slots[s.name] = None
            elif a.kind == "step" and a.index == i and k == j:
                slots[s.name] = local[(i, a.output)]
            else:
                slots[s.name] = leaf(a, _arg_node(a, operands, env))
        for name, node in spec.meaning(dict(steps[k].holes), slots).items():
            local[(k, name)] = node
    needed = []
    for k in (i, j):
        for name in synth.spec(steps[k].instruction).outputs:
            used = any(a.kind == "step" and a.index == k and a.output == name
                       for m, s in enumerate(steps) if m not in (i, j) for _, a in s.args)
            used |= any(o.kind == "step" and o.index == k and o.output == name for o in outputs)
            if used:
                needed.append((k, name))
    return needed, tuple(local[n] for n in needed), {v.params.name: a for a, v in leaves.items()}, leaf_memory


def _arg_node(arg, operands, env):
    node = operands[arg.index] if arg.kind == "operand" else env[(arg.index, arg.output)]
    return make_node(Op.TRANSPOSE, [node], TransposeParams((1, 0))) if arg.transposed else node


def fuse_steps(lowering: Lowering, synth, operand_memories: Optional[Mapping[str, str]] = None,
               log: Optional[list] = None, blocked=frozenset()) -> Lowering:
    """`lowering` with producer/consumer pairs replaced by single proved instructions, to a fixed point.
    `blocked`: (producer instruction, consumer instruction) pairs left unfused (a lowering
    alternative: the pair's two instructions may balance engines better than the fused one)."""
    memories = dict(operand_memories or {})
    operands = {int(n.params.name[1:]): n for n in pattern_inputs(lowering.pattern)}  # a_k by number
    steps, outputs = list(lowering.steps), list(lowering.outputs)
    statuses = [lowering.verdict_status]
    changed = True
    while changed:
        changed = False
        for j in range(len(steps)):
            producers = sorted({a.index for _, a in steps[j].args if a.kind == "step"})
            for i in producers:
                if (steps[i].instruction, steps[j].instruction) in blocked:
                    continue
                found = _fuse_pair(synth, operands, steps, outputs, memories, i, j)
                if found is None:
                    continue
                steps, outputs, record = found
                statuses.append(record.verdict_status)
                if log is not None:
                    log.append(record)
                changed = True
                break
            if changed:
                break
    if len(steps) == len(lowering.steps):
        return lowering
    status = PROVED if all(s == PROVED for s in statuses) else UNPROVED
    weight = sum(synth.spec(s.instruction).weight for s in steps)
    output_step = outputs[0].index if len(outputs) == 1 else tuple(o.index for o in outputs)
    return replace(lowering, steps=tuple(steps), outputs=tuple(outputs), output_step=output_step,
                   verdict_status=status, cost=weight)


def _fuse_pair(synth, operands, steps, outputs, memories, i, j):
    needed, pattern, arg_of, leaf_memory = _pair_pattern(synth, operands, steps, outputs, memories, i, j)
    if not needed:
        return None
    pair_weight = synth.spec(steps[i].instruction).weight + synth.spec(steps[j].instruction).weight
    lowerings = synth.lower(pattern[0] if len(pattern) == 1 else pattern, operand_memories=leaf_memory,
                            max_steps=1, views=False)
    best = min((lw for lw in lowerings if len(lw.steps) == 1 and lw.cost < pair_weight), key=lambda lw: lw.cost,
               default=None)
    if best is None:
        return None
    # the fused step takes j's place, or i's where a step between them reads i (j's other operands
    # must then come before i): either way every step still follows the steps it reads
    reads = lambda k, src: any(a.kind == "step" and a.index == src for _, a in steps[k].args)
    if any(reads(k, i) for k in range(i + 1, j)):
        if any(a.kind == "step" and i < a.index < j for _, a in steps[j].args):
            return None
        position, removed = i, j
    else:
        position, removed = j, i
    new_index = position - (1 if position > removed else 0)

    def remap(arg: Arg) -> Arg:
        if arg.kind != "step":
            return arg
        if arg.index in (i, j):
            k = needed.index((arg.index, arg.output))
            return Arg("step", new_index, output=best.outputs[k].output)
        return replace(arg, index=arg.index - (1 if arg.index > removed else 0))

    (fused,) = best.steps  # its operands a_k are the pair's external arguments, mapped back
    fused = replace(fused, args=tuple((slot, remap(arg_of[f"a{a.index}"]) if a.kind == "operand" else a)
                                      for slot, a in fused.args))
    new_steps = []
    for k, step in enumerate(steps):
        if k == removed:
            continue
        new_steps.append(fused if k == position else replace(step, args=tuple((s, remap(a)) for s, a in step.args)))
    record = Fusion((steps[i].instruction, steps[j].instruction), fused.instruction, best.verdict_status,
                    best.solver_time_s, best.query)
    return new_steps, [remap(o) for o in outputs], record
