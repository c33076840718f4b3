"""Instruction lowerings per operator, asked of the synthesis stage through a target.

`Lowerer(target).lower(node)` abstracts the operator application `node` into a pattern (its tensor
operands become inputs a0, a1, ...; constants stay) and returns the first lowering whose proof
did not fail: from `axon.synthesis.Synthesizer` when that stage is present, else from the
target's stand-in table (`target.fallback_lowering`). Results are cached per pattern.

Invariant: shared stage; the target object is the only source of instruction knowledge.
"""
from __future__ import annotations

from typing import Optional

from axon.ir import Node, input_node
from dataclasses import replace

from axon.semantics.ops import AxisParams, Op


def pattern_of(node: Node) -> Node:
    """The operator on one tile: leading (batch) axes dropped, operands renamed a0, a1, ..."""
    ins = []
    for i, x in enumerate(node.inputs):
        ins.append(x if x.op is Op.CONST else input_node(f"a{i}", x.shape[-2:] if x.rank > 2 else x.shape))
    params = node.params
    if isinstance(params, AxisParams) and node.rank > 2:
        params = replace(params, axis=params.axis - (node.rank - 2))
    return Node(node.op, tuple(ins), params, node.shape[-2:] if node.rank > 2 else node.shape)


class Lowerer:
    def __init__(self, target, use_synthesis: bool = True):
        self.target = target
        self.cache: dict[Node, Optional[object]] = {}
        self.synthesizer = target.synthesizer() if use_synthesis else None
        self.sources: dict[str, str] = {}  # op name -> "synthesis" | "fallback"
        self.statuses: list[str] = []

    def lower(self, node: Node):
        pat = pattern_of(node)
        if pat in self.cache:
            return self.cache[pat]
        found = None
        if self.synthesizer is not None:
            try:
                for lw in self.synthesizer.lower(pat):
                    if getattr(lw, "verdict_status", "PROVED") != "REFUTED" and self.target.can_emit(lw):
                        found = lw
                        self.sources[node.op.value] = "synthesis"
                        break
            except Exception:  # a stage still being built must not sink selection
                found = None
        if found is None:
            found = self.target.fallback_lowering(pat)
            if found is not None:
                self.sources.setdefault(node.op.value, "fallback")
        self.cache[pat] = found
        if found is not None:
            self.statuses.append(getattr(found, "verdict_status", "UNKNOWN"))
        return found
