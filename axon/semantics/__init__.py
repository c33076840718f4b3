"""Semantics: one specification per operator (shape rule, element meaning, NumPy reference)."""
