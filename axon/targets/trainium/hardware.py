"""Hardware descriptions of NeuronCore-v2 (trn1) and NeuronCore-v3 (trn2), as data.

One source of truth for every Trainium number: the simulator's rule checks, the performance
model, tiling and emission all read from here. Each number names its source; where sources
disagree the choice and the reason stand next to the number.
Sources: AWS Neuron docs (nki/guides/architecture/trainium_inferentia2_arch.rst,
trainium2_arch.rst, nki/api/nki.isa.rst, nki.isa docstrings at docs tag v2.26.0), as gathered
in shared/trainium.md.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryLimits:
    partitions: int  # SBUF/PSUM partition count (nl.tile_size.pmax) [arch guide]
    sbuf_bytes_per_partition: int  # usable SBUF bytes per partition [nki.language docs]
    psum_bytes_per_partition: int  # 16 KiB per partition [arch guide]
    psum_bank_bytes: int  # 2 KiB per partition per bank = 512 fp32 [arch guide]
    psum_banks: int  # 8 banks [arch guide]


@dataclass(frozen=True)
class TileLimits:
    """nl.tile_size and per-instruction size limits [nki.language.tile_size, nki.isa docstrings]."""

    pmax: int = 128  # partition dimension of any tile
    matmul_stationary_free_max: int = 128  # gemm_stationary_fmax
    matmul_moving_free_max: int = 512  # gemm_moving_fmax (one PSUM bank of fp32)
    matmul_contraction_max: int = 128  # K on the partition axis per nc_matmul
    free_max_sbuf_elems: int = 65536  # Vector/Scalar engine free size reading SBUF
    free_max_psum_elems: int = 4096  # Vector/Scalar engine free size reading PSUM
    bn_stats_free_max: int = 512


@dataclass(frozen=True)
class HardwareDescription:
    name: str  # "trn1" or "trn2"
    core: str  # "NeuronCore-v2" / "NeuronCore-v3"
    memory: MemoryLimits
    tiles: TileLimits


TRN1 = HardwareDescription(
    name="trn1",
    core="NeuronCore-v2",
    # SBUF 24 MiB = 128 x 192 KiB; 180224 B per partition usable by kernels [nki.language.sbuf].
    memory=MemoryLimits(partitions=128, sbuf_bytes_per_partition=180224,
                        psum_bytes_per_partition=16384, psum_bank_bytes=2048, psum_banks=8),
    tiles=TileLimits(),
)

TRN2 = HardwareDescription(
    name="trn2",
    core="NeuronCore-v3",
    # SBUF 28 MiB = 128 x 224 KiB; 212984 B per partition usable by kernels [nki.language.sbuf].
    memory=MemoryLimits(partitions=128, sbuf_bytes_per_partition=212984,
                        psum_bytes_per_partition=16384, psum_bank_bytes=2048, psum_banks=8),
    tiles=TileLimits(),
)

TARGETS = {hw.name: hw for hw in (TRN1, TRN2)}


def get_target(name: str) -> HardwareDescription:
    try:
        return TARGETS[name]
    except KeyError:
        from axon.errors import InputError

        raise InputError(f"unknown Trainium target {name!r}; expected one of {', '.join(TARGETS)}") from None
