"""The nuGraph: every proved-equivalent variant of a program in one e-graph, with its proofs."""
from axon.nugraph.egraph import EClass, ENode, NuGraph, ProofRecord
from axon.nugraph.extract import Variant, extract_variants

__all__ = ["NuGraph", "EClass", "ENode", "ProofRecord", "Variant", "extract_variants"]
