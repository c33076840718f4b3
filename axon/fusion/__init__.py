"""Fusion: node fusion (nodes.py) groups operators into passes; instruction fusion (instructions.py) merges steps."""
