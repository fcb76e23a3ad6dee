"""Seeded random streams and Monte-Carlo estimates with their standard errors.

Every check and simulation draws from ``numpy.random.default_rng([seed, crc32(name)])``,
so each has its own stream and the same seed gives the same numbers.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator

import numpy as np

CHUNK_ENTRIES = 2_000_000
"""Matrix entries generated per batch (bounds peak memory at ~16 MB per array)."""


def check_rng(seed: int, name: str) -> np.random.Generator:
    """The random stream of the check or simulation ``name``."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def mean_se(samples: np.ndarray) -> tuple[float, float]:
    """Sample mean and its standard error."""
    return float(samples.mean()), float(samples.std(ddof=1) / math.sqrt(samples.size))


def var_se(samples: np.ndarray) -> tuple[float, float]:
    """Sample variance and its standard error sqrt((m4 − s⁴)/N)."""
    centred = samples - samples.mean()
    var = float(centred.var(ddof=1))
    m4 = float(np.mean(centred**4))
    return var, math.sqrt(max(m4 - var**2, 0.0) / samples.size)


def batches(total: int, per_item: int) -> Iterator[int]:
    """Batch sizes that split ``total`` items of ``per_item`` entries into :data:`CHUNK_ENTRIES` chunks."""
    size = max(1, CHUNK_ENTRIES // per_item)
    for start in range(0, total, size):
        yield min(size, total - start)
