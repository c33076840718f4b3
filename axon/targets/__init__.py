"""Compilation targets: one package per target (hardware description, instruction specs, emitter, runner).

`get(name)` is the only place the shared stages learn which targets exist; each entry is imported
on first use, so the shared stages never import a target they are not asked for.
"""
from __future__ import annotations

import importlib

from axon.errors import InputError

# target name -> (module, factory name, argument)
REGISTRY = {
    "trn1": ("axon.targets.trainium.target", "TrainiumTarget", "trn1"),
    "trn2": ("axon.targets.trainium.target", "TrainiumTarget", "trn2"),
}


def get(name: str):
    """The target object `optimize`, tiling and selection talk to (see targets/trainium/target.py)."""
    if name not in REGISTRY:
        raise InputError(f"unknown target {name!r}; expected one of {', '.join(REGISTRY)}")
    module, factory, argument = REGISTRY[name]
    return getattr(importlib.import_module(module), factory)(argument)
