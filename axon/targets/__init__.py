"""Compilation targets: one package per target (hardware description, instruction specs, emitter, runner)."""
