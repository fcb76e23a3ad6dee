"""The theory checks, one module per topic, and :func:`run_checks`, which runs them all.

Each ``check_*`` function simulates one group of statements and returns rows of the theory
table, built from the module's ``STATEMENTS`` (one :class:`~attnscope.theory.table.Statement`
per row: the words, the kind of formula and the tolerance) and the measured numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from threadpoolctl import threadpool_limits

from attnscope.theory.checks.alignment import check_edited_spectra, check_trace_alignment
from attnscope.theory.checks.bilinear import check_bilinear_form
from attnscope.theory.checks.softmax import check_attention_rank, check_lognormal, check_slerp_kl
from attnscope.theory.checks.spectrum import MP_POWER_DRAWS, check_marchenko_pastur, check_random_spectrum
from attnscope.theory.checks.sphere import check_hypersphere
from attnscope.theory.table import COLUMNS

__all__ = [
    "MP_POWER_DRAWS",
    "check_attention_rank",
    "check_bilinear_form",
    "check_edited_spectra",
    "check_hypersphere",
    "check_lognormal",
    "check_marchenko_pastur",
    "check_random_spectrum",
    "check_slerp_kl",
    "check_trace_alignment",
    "run_checks",
]


def run_checks(
    seed: int = 0,
    trials: int = 20_000,
    samples: int = 200_000,
    n: int = 32,
    sigma: float = 0.1,
    n_spectral: int = 128,
    trials_spectral: int = 1000,
    bilinear_dim: int = 16,
    slerp_dim: int = 128,
    slerp_pairs: int = 1000,
    slerp_length: float = 1.0,
    mp_shapes: Sequence[Sequence[int]] = ((512, 512), (576, 192), (1536, 576), (1792, 512)),
    mp_trials: int = 4,
    attention_sizes: Sequence[int] = (64, 512),
    attention_head_dim: int = 64,
) -> pd.DataFrame:
    """All theory checks as one table (columns :data:`COLUMNS`); same arguments, same table.

    The keyword arguments are the ``theory`` section of the workflow config
    (documented in docs/theory.md). BLAS runs single-threaded: the matrices are small, and
    the results do not depend on the machine's core count.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        rows = [
            *check_bilinear_form(seed, bilinear_dim, samples),
            *check_random_spectrum(seed, n, trials, n_spectral, trials_spectral, sigma),
            *check_trace_alignment(seed, n, trials, sigma, trials_svd=max(1, trials // 10)),
            *check_edited_spectra(seed, n, trials, sigma),
            *check_lognormal(seed, samples),
            *check_hypersphere(seed, bilinear_dim, samples, trials, slerp_length),
            *check_slerp_kl(seed, slerp_dim, slerp_pairs, slerp_length),
            *check_marchenko_pastur(seed, mp_shapes, mp_trials, sigma),
            *check_attention_rank(seed, attention_sizes, attention_head_dim),
        ]
    return pd.DataFrame(rows, columns=COLUMNS)
