"""Sketch-based ISA synthesis (paper §7): lower operators to short proved instruction sequences.

Public interface (the emission stage codes against it):
  Arg, Step, Lowering            what a lowering is (lowering.py)
  Synthesizer(isa, verifier=None, max_steps=2).lower(pattern) -> list[Lowering], cheapest first
  Synthesizer.lower_group(outputs, group) -> (Abstraction, list[Lowering]) for a graph's nodes
  abstract(outputs, group)       a graph's operator (group) as a tile pattern over a0, a1, ...
  sequence_meaning(...)          the IR meaning of a step sequence (what was proved)
Target instruction sets are data (axon.synthesis.spec.ISA), e.g. axon.targets.trainium.isa.TRN2_ISA.
"""
from axon.synthesis.lowering import PROVED, UNPROVED, Arg, Lowering, Step
from axon.synthesis.pattern import Abstraction, abstract, operator_pattern
from axon.synthesis.spec import ISA, Form, Hole, InstructionSpec, Slot
from axon.synthesis.synthesizer import SynthesisCache, Synthesizer, sequence_meaning

__all__ = ["Arg", "Step", "Lowering", "PROVED", "UNPROVED", "Synthesizer", "SynthesisCache", "sequence_meaning",
           "Abstraction", "abstract", "operator_pattern", "ISA", "InstructionSpec", "Slot", "Hole", "Form"]
