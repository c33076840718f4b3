"""What synthesis produces: a lowering of an operator (or small operator group) to instructions.

A `Lowering` is a short straight-line instruction sequence. Each `Step` names an instruction of
the target's ISA, the values chosen for its holes, and, per operand slot, an `Arg` saying where
the value comes from: an operand of the pattern (possibly read transposed or broadcast, which the
emitter realises by addressing or a layout move), an earlier step's output, or a constant
(an immediate, or a constant-filled tile when the slot takes a tile). `outputs` says which step
output is which output of the pattern.

Invariant: a lowering whose `verdict_status` is "proved" was proved equal to its pattern by the
SMT verifier; "unproved" means it passed only the numeric check (no verifier was available) and
must not be presented as proved.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from axon.ir import Node

PROVED = "proved"
UNPROVED = "unproved"  # numeric check only: no verifier available


@dataclass(frozen=True)
class Arg:
    kind: str  # "operand" | "step" | "const"
    index: int = 0  # operand number (a0, a1, ...) or step number
    value: Any = None  # const: a number, or a symbolic Size (e.g. n for a mean)
    transposed: bool = False  # operand read in transposed layout (a layout move the emitter picks)
    broadcast: bool = False  # [1, F] row operand broadcast over partitions (a partition-stride-0 read)
    output: str = "out"  # which output of a multi-output step ("out", "reduce")

    def __str__(self) -> str:
        if self.kind == "const":
            return f"{self.value}"
        base = f"a{self.index}" if self.kind == "operand" else f"s{self.index}"
        if self.kind == "step" and self.output != "out":
            base += f".{self.output}"
        return base + (".T" if self.transposed else "") + (".bcast" if self.broadcast else "")


def arg_key(arg: Arg) -> tuple:
    """A total order on arguments (specs use it to break operand-order symmetries)."""
    return (arg.kind, arg.index, str(arg.value), arg.transposed, arg.broadcast, arg.output)


@dataclass(frozen=True)
class Step:
    instruction: str
    holes: tuple[tuple[str, Any], ...]  # e.g. (("func", ScalarOp.EXP),)
    args: tuple[tuple[str, Arg], ...]  # slot name -> Arg; absent optional slots are left out

    def hole(self, name: str, default=None):
        return dict(self.holes).get(name, default)

    def arg(self, name: str) -> Optional[Arg]:
        return dict(self.args).get(name)

    def __str__(self) -> str:
        holes = ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in self.holes)
        args = ", ".join(f"{k}={a}" for k, a in self.args)
        return f"{self.instruction}({args}{'; ' + holes if holes else ''})"


@dataclass(frozen=True)
class Lowering:
    pattern: Union[Node, tuple[Node, ...]]  # operands are INPUT nodes a0, a1, ...; a tuple: several outputs
    steps: tuple[Step, ...]
    output_step: Union[int, tuple[int, ...]]  # step producing the (each) output
    verdict_status: str  # PROVED or UNPROVED
    solver_time_s: float
    query: str  # what was asked of the verifier (readable)
    outputs: tuple[Arg, ...] = ()  # exact references: Arg("step", i, output="reduce"), one per pattern output
    isa: str = ""
    cost: float = 0.0  # the ISA's relative estimate (ordering only; the perf model decides)

    @property
    def proved(self) -> bool:
        return self.verdict_status == PROVED

    @property
    def instructions(self) -> tuple[str, ...]:
        return tuple(s.instruction for s in self.steps)

    def __str__(self) -> str:
        body = "; ".join(f"s{i} = {s}" for i, s in enumerate(self.steps))
        outs = ", ".join(str(o) for o in self.outputs)
        return f"{body} -> {outs} [{self.verdict_status}]"
