"""Monte-Carlo checks of the thesis's theoretical formulas, and the pure helpers they share.

The checks (:mod:`attnscope.theory.checks`, one module per topic) simulate the statements
of thesis chapters 2.5, 5.2.4, 5.3, 6.2 and 7.2.1 and return rows of the theory table: the
thesis's prediction, a seeded Monte-Carlo estimate with its standard error and a verdict
at a tolerance stated in the row. Where a formula is wrong, a second row tests the
corrected formula. :func:`run_checks` collects all rows in a DataFrame,
:func:`checks_markdown` renders it.

The pure helpers are reused by spectra, metrics and the figures:
:mod:`~attnscope.theory.rmt` (Marchenko–Pastur law, Gram matrix, ε-rank, Haar rotations),
:mod:`~attnscope.theory.softmax` (SLERP–KL curve, cosine fit, synthetic attention),
:mod:`~attnscope.theory.sphere` (SLERP, points on the sphere) and
:mod:`~attnscope.theory.forms` (moments of bilinear forms and traces).
"""

from attnscope.theory import checks
from attnscope.theory.checks import *  # noqa: F403 (its __all__, re-exported below)
from attnscope.theory.forms import (
    bilinear_form_moments,
    constructed_base_alignment,
    edited_spectrum_trace,
    thesis_bilinear_mean,
    thesis_bilinear_variance,
)
from attnscope.theory.rmt import (
    TW1_MEAN,
    epsilon_rank,
    epsilon_rank_of_spectrum,
    gram,
    haar_orthogonal,
    ks_distance_mp,
    marchenko_pastur_cdf,
    marchenko_pastur_curve,
    marchenko_pastur_edges,
    marchenko_pastur_pdf,
    mp_figure_samples,
    mp_ks_statistic,
    random_covariance,
)
from attnscope.theory.softmax import (
    CosineFit,
    SlerpKLCurve,
    fit_cosine,
    pair_product_sum,
    slerp_kl,
    slerp_kl_curve,
    synthetic_attention,
)
from attnscope.theory.sphere import orthogonal_pairs, slerp, uniform_sphere, unit_pair
from attnscope.theory.table import COLUMNS, Statement, checks_markdown

__all__ = [
    *checks.__all__,
    "COLUMNS",
    "TW1_MEAN",
    "CosineFit",
    "SlerpKLCurve",
    "Statement",
    "bilinear_form_moments",
    "checks_markdown",
    "constructed_base_alignment",
    "edited_spectrum_trace",
    "epsilon_rank",
    "epsilon_rank_of_spectrum",
    "fit_cosine",
    "gram",
    "haar_orthogonal",
    "ks_distance_mp",
    "marchenko_pastur_cdf",
    "marchenko_pastur_curve",
    "marchenko_pastur_edges",
    "marchenko_pastur_pdf",
    "mp_figure_samples",
    "mp_ks_statistic",
    "orthogonal_pairs",
    "pair_product_sum",
    "random_covariance",
    "slerp",
    "slerp_kl",
    "slerp_kl_curve",
    "synthetic_attention",
    "thesis_bilinear_mean",
    "thesis_bilinear_variance",
    "uniform_sphere",
    "unit_pair",
]
