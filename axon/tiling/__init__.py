"""Symbolic tiling (space.py) and kernel construction from tiled passes (build.py)."""
