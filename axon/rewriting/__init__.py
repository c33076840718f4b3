"""Algebraic rewriting: operator propagation (paper Algorithm 1) proves variants into a nuGraph.

    from axon.rewriting import discover
    nu, stats = discover(axon.benchmark("rmsnorm_matmul").graph)
    for variant in nu.extract_variants(limit=10):
        print(variant.graph.pretty())
"""
from axon.rewriting.language import TENSOR, Language
from axon.rewriting.propagation import Guards, Propagator, SoundnessError, Stats, default_verifier, discover

__all__ = ["discover", "default_verifier", "Propagator", "Guards", "Stats", "SoundnessError", "Language", "TENSOR"]
