"""The record types of the claims table: the bars of every verdict, an analysis setting, a
claim's measured result, a claim; and the verdict of an interval against two bars."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnscope import stats
from attnscope.claims.views import band_name
from attnscope.stats import Interval
from attnscope.store import WEIGHTS
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, SUPPORTED

if TYPE_CHECKING:
    from attnscope.evidence import Evidence

RESULT_COLUMNS = ("setting", "contrast", "estimate", "low", "high", "bounds", "n_prompts", "n_seeds")
"""What a row says of its result under one setting: the setting, the contrast its estimate is, the
estimate with its interval, the bounds its verdict is read against and the draws behind it."""
COLUMNS = [
    *("model", "claim", "section", "statement", "quote", "metric"),
    *RESULT_COLUMNS,
    *("measured", "threshold", "verdict", "robust", "value_weighted", "experiment", "variants"),
]
SENSITIVITY_COLUMNS = ["model", "claim", "statement", "weighting", *RESULT_COLUMNS, "verdict"]


@dataclass(frozen=True)
class Thresholds:
    """The bars of every verdict (see ``docs/figures.md``, "The claims table")."""

    dominant_share: float = 0.5
    """share of a band's rows that must be diagonally dominant (the diagonal at least the rest of the
    row: a_ii ≥ Σ_{j≠i} a_ij) for the band to be 'diagonal-dominant'; wholly below it, it is not"""
    resemblance: float = 0.1
    """largest difference of the diagonally dominant share between two bands that still counts as
    'resembling' (an equivalence margin: the whole interval must lie within ±margin)"""
    entropy_step: float = 0.05
    """entropy difference between bands that counts as dispersion / contraction"""
    layer_share: float = 0.8
    """share of layers an effect must hold in (at adjusted p < 0.05) to be supported"""
    layer_share_contradicted: float = 0.5
    """share of heads at or below which an alignment claim is contradicted"""
    boundary_drop: float = 0.25
    """log ratio by which a row's own-shot keys beat the previous shot's keys at the shot boundary, past
    the row's decay with distance and its key segments (``row_drop``, :mod:`attnscope.choices`), that
    counts as attending within the shot: e^0.25 ≈ 1.28×; maps that depend on distance and segments
    alone score 0"""
    small_mass: float = 0.5
    """share of the attention mass carried by values ≤ 0.1 that counts as 'mostly in [0, 0.1]'"""
    weak_correlation: float = 0.3
    """largest per-layer |correlation| with the cosine that is still 'weak'"""
    strong_correlation: float = 0.5
    uniform_entropy: float = 0.9
    """smallest per-layer normalised entropy of the random model that is 'near uniform'"""
    uniform_entropy_contradicted: float = 0.8
    """... below which (the whole interval) the random model is not near uniform"""
    ablation_step: float = 0.02
    """mean per-layer change (entropy or self mass) an α edit must make"""
    predominant: float = 0.5
    """self mass at which tokens 'predominantly attend to themselves'"""
    alignment_z: float = 2.0
    """|z| of Tr(W_qᵀW_k) counted as 'small' (within 2σ of random init)"""
    copy_share: float = 0.5
    """mean share of a clue's word bigrams found in its prompt that counts as copying"""
    broken_share: float = 0.5
    """share of empty or unterminated clues that counts as 'empty or broken'"""
    alpha: float = 0.05
    """false discovery rate of the per-layer tests (Benjamini–Hochberg)"""


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Setting:
    """One analysis setting of a claim: the maps' choice and layer band, or the weights' form."""

    choice: str | None = None
    band: str | int | None = None
    form: str | None = None
    scale_free: bool = False
    null: str | None = None
    weighting: str = WEIGHTS
    """The maps the attention claims read: the weights, or the value-weighted maps."""

    def label(self) -> str:
        parts = [
            None if self.weighting == WEIGHTS else self.weighting,
            self.choice,
            band_name(self.band) if self.band is not None else None,
            self.form,
            self.null,
        ]
        if self.scale_free:
            parts.append("scale-free")
        return ", ".join(p for p in parts if p) or "–"


CI, RANGE, POINT = "95 % CI", "range over init seeds", "point"
"""What a row's low and high are (its ``bounds``): a bootstrap confidence interval; the lowest and
highest value one init seed alone gives (a spread, not an interval: three seeds cover no 95 %); or
the estimate itself (the population, nothing resampled)."""

QUANTITIES = {
    "row_entropy": "normalised entropy",
    "self_mass": "self mass",
    "diagonal_share": "share of diagonally dominant rows",
    "chrf": "sentence chrF against the reference clues",
    "delta_token": "Δ log-probability per token of the trained model's greedy clue",
}
"""The evidence columns a contrast subtracts, in words."""
BANDS = ("early", "middle", "late")


@dataclass(frozen=True)
class Contrast:
    """What a row's estimate is: ``quantity`` (a column of the evidence) of ``minuend`` minus the same
    of ``subtrahend``, each a variant of the attention, clue or knockout tables (``qkscale-a2``,
    ``trained``, ``knockout-across-shots-L0-9``), a layer band of the trained model (``late``) or a
    shot count (``k8``). The metric text is written from
    it and the estimate's sign follows it; the table stores it as ``quantity: minuend − subtrahend``."""

    quantity: str
    minuend: str
    subtrahend: str

    @property
    def axis(self) -> str:
        """What the two sides are: ``band``, ``k``, ``knockout`` or ``variant``."""
        if self.quantity == "delta_token":
            return "knockout"
        if {self.minuend, self.subtrahend} <= set(BANDS):
            return "band"
        if all(re.fullmatch(r"k\d+", side) for side in (self.minuend, self.subtrahend)):
            return "k"
        return "variant"

    def __str__(self) -> str:
        return f"{self.quantity}: {self.minuend} − {self.subtrahend}"

    def text(self) -> str:
        """The contrast in words, the start of the row's metric."""
        band = " band" if self.axis == "band" else ""
        return f"{QUANTITIES[self.quantity]}, {self.minuend}{band} − {self.subtrahend}{band}"

    @classmethod
    def parse(cls, text: str) -> Contrast:
        """The contrast of the table's ``contrast`` column (its ``str``)."""
        quantity, sides = text.split(": ", 1)
        minuend, subtrahend = sides.split(" − ")
        return cls(quantity, minuend, subtrahend)


@dataclass(frozen=True)
class Result:
    """A claim's measurement: the estimate with its interval, a readable account, the verdict."""

    verdict: str
    interval: Interval
    measured: str
    variants: str = "trained"
    n_seeds: int = 1
    per_prompt: bool = True
    """False for weight claims: their estimate counts layers (heads), its bounds span init seeds
    (the spectra: a range) or are a point (the alignment)."""
    draws: str = ""
    """What ``n_seeds`` counts ("shot draw", "init seed"; default: from ``per_prompt``)."""
    contrast: Contrast | None = None
    """What the estimate subtracts, where it is a difference (default: the claim's)."""
    bounds: str = CI
    """What the interval's low and high are (:data:`CI`, :data:`RANGE`, :data:`POINT`)."""


@dataclass(frozen=True)
class Claim:
    """One claim of the thesis and how it is measured."""

    claim: str
    section: str
    statement: str
    metric: str
    """What is measured, a template of the thresholds (``{t.alignment_z:g}``) like ``threshold`` and of
    the row's contrast in words (``{contrast}``)."""
    threshold: str
    """The bars, a template of the thresholds the table is evaluated with (``{t.small_mass:.0%}``)."""
    measure: Callable[[Evidence, Thresholds, Setting], Result | list[tuple[str, Result | None]] | None]
    """One result (``None``: the setting does not apply), or (statement, result) rows."""
    varies: tuple[str, ...] = ()
    """The setting fields the claim is measured under: ``choice``, ``band``, ``form``."""
    contrast: Contrast | None = None
    """The difference the estimate is, where the measurement names none (not measured)."""
    premise: str | None = None
    """The claim this one presupposes (late layers contract *again*: the middle ones dispersed); its
    verdict under the same setting bounds this one's (:func:`attnscope.claims.evaluation.given`)."""
    quote: str = ""
    """The thesis's sentence the claim tests, verbatim (" … " where a figure interrupts it)."""
    reads: str | None = None
    """The analysis choice of the maps that sentence describes, the headline's: the token maps of
    Fig. 8.4 on the words (``words``) or the summed word maps of Fig. 8.5 (``word_sums``); the other
    choices stay in the sensitivity table (``None``: the thesis's choice, ``words``)."""


NAN_INTERVAL = Interval(float("nan"), float("nan"), float("nan"), 0, 0)


def not_measured(reason: str, variants: str = "trained") -> Result:
    return Result(NOT_MEASURED, NAN_INTERVAL, reason, variants, 0)


def verdict_of(interval: Interval, supported_at: float, contradicted_at: float) -> str:
    """The verdict of an interval against two bars (their order says which way supports)."""
    if np.isnan(interval.estimate):
        return NOT_MEASURED  # e.g. a layer band the model is too shallow for
    side = stats.interval_side(interval, supported_at, contradicted_at)
    return {1: SUPPORTED, -1: CONTRADICTED, 0: INCONCLUSIVE}[side]


def equivalence_of(interval: Interval, margin: float) -> str:
    """The verdict of a difference that should be about 0: supported when the whole interval lies
    within ±``margin``, contradicted when it lies wholly outside, else inconclusive."""
    if np.isnan(interval.estimate):
        return NOT_MEASURED
    if -margin <= interval.low and interval.high <= margin:
        return SUPPORTED
    if interval.low > margin or interval.high < -margin:
        return CONTRADICTED
    return INCONCLUSIVE
