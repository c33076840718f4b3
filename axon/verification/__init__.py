"""Proofs over unbounded tensors: equivalence of programs for all sizes (SMT over canonical terms)."""
from axon.verification.equivalence import Status, Verdict, Verifier, VerifierStats, verify

__all__ = ["Verifier", "Verdict", "Status", "VerifierStats", "verify"]
