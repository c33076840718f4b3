"""Frontend: NumPy-like programs traced into the tensor IR."""
from axon.frontend.program import Program, program

__all__ = ["Program", "program"]
