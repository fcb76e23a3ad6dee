"""Learned against random weights: layer means of the spectra measures of the trained model and
its random init side by side, and the thesis's observations of ch. 7.2.2 (learned/random ratios)
judged on them. Reads spectra tables only, so the comparison and claims jobs need no torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnscope.matrices import EMBEDDING_TYPES, MATRIX_FORMS, MATRIX_TYPES
from attnscope.verdicts import yes_no

COMPARISON_COLUMNS = [
    "row_type",
    "form",
    "matrix",
    "statement",
    "trained",
    "random",
    "ratio",
    "thesis_ratio",
    "criterion",
    "holds",
    "in_thesis_range",
]

_MEASURES = {
    "sum_sigma2": "mean Σσ² (‖W‖_F²)",
    "lambda_max": "mean σ_max²",
    "sv_max": "mean σ_max",
    "stable_rank": "mean stable rank",
    "num_spikes_init": "mean spikes above the init λ₊",
    "num_spikes": "mean spikes above the fitted MP bulk (WW)",
    "alpha": "mean power-law α of the tail (WW)",
    "rand_distance": "mean JS distance to the shuffled spectrum (WW)",
}


@dataclass(frozen=True)
class Observation:
    """A thesis statement (ch. 7.2.2) tested as a learned/random ratio of a layer mean."""

    matrices: tuple[str, ...]
    measure: str
    statement: str
    thesis_range: tuple[float, float]
    criterion: str
    test: Callable[[float], bool]


OBSERVATIONS = (
    Observation(
        ("q", "k"),
        "sum_sigma2",
        "learned Σσ² far below random (thesis: n/20–n/10 vs n)",
        (0.05, 0.10),
        "ratio < 0.5",
        lambda r: r < 0.5,
    ),
    Observation(
        ("q", "k"),
        "sv_max",
        "learned σ_max larger than random (thesis: 3–4 vs 2)",
        (1.5, 2.0),
        "ratio > 1",
        lambda r: r > 1.0,
    ),
    Observation(
        ("v",),
        "sum_sigma2",
        "learned Σσ² near random (thesis: 0.9n–1.2n vs n)",
        (0.9, 1.2),
        "2/3 ≤ ratio ≤ 3/2",
        lambda r: 2 / 3 <= r <= 1.5,
    ),
    Observation(
        ("v",),
        "sv_max",
        "learned σ_max larger than random (thesis: 2–3 vs 2)",
        (1.0, 1.5),
        "ratio > 1",
        lambda r: r > 1.0,
    ),
)
"""Ratios are learned/random means over layers, so they do not depend on the init's scale."""


def compare_learned_random(trained_df: pd.DataFrame, random_df: pd.DataFrame) -> pd.DataFrame:
    """Per form (raw, folded) and matrix type: layer means of the spectra measures, trained vs
    random, and their ratio; then one ``observation`` row per thesis statement, form and matrix
    with its measured verdict (the random model's γ is 1: its folded and raw forms agree)."""
    forms = [f for f in MATRIX_FORMS if f in set(trained_df["form"]) and f in set(random_df["form"])]
    keys = [
        (form, m)
        for form in forms
        for m in (EMBEDDING_TYPES[0], *MATRIX_TYPES, EMBEDDING_TYPES[1])
        if ((trained_df["form"] == form) & (trained_df["matrix"] == m)).any()
        and ((random_df["form"] == form) & (random_df["matrix"] == m)).any()
    ]
    means = {
        name: df.groupby(["form", "matrix"])[list(_MEASURES)].mean()
        for name, df in (("trained", trained_df), ("random", random_df))
    }
    rows: list[dict[str, Any]] = []

    def ratio(key: tuple[str, str], measure: str) -> dict[str, Any]:
        t, r = float(means["trained"].at[key, measure]), float(means["random"].at[key, measure])
        return {
            "form": key[0],
            "matrix": key[1],
            "trained": t,
            "random": r,
            "ratio": t / r if r else math.nan,
        }

    for key in keys:
        for measure, label in _MEASURES.items():
            rows.append({"row_type": "measure", "statement": label, **ratio(key, measure)})
    for obs in OBSERVATIONS:
        for key in [k for k in keys if k[1] in obs.matrices]:
            measured = ratio(key, obs.measure)
            low, high = obs.thesis_range
            rows.append(
                {
                    "row_type": "observation",
                    "statement": obs.statement,
                    **measured,
                    "thesis_ratio": f"{low:g}–{high:g}",
                    "criterion": obs.criterion,
                    "holds": bool(obs.test(measured["ratio"])),
                    "in_thesis_range": bool(low <= measured["ratio"] <= high),
                }
            )
    df = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    for column in ("holds", "in_thesis_range"):
        df[column] = df[column].astype("boolean")
    return df


def comparison_markdown(df: pd.DataFrame, title: str, notes: Sequence[str] = ()) -> str:
    """The comparison table as Markdown: the thesis's observations first, then all measures, then notes."""

    obs = df[df["row_type"] == "observation"]
    lines = [
        f"# {title}",
        "",
        "## Thesis observations (ch. 7.2.2)",
        "",
        "| matrix | form | statement | trained | random | ratio | thesis ratio | criterion | holds "
        "| in range |",
        "|---|---|---|---:|---:|---:|---|---|---|---|",
    ]
    for row in obs.itertuples(index=False):
        lines.append(
            f"| {row.matrix} | {row.form} | {row.statement} | {row.trained:.4g} | {row.random:.4g} "
            f"| {row.ratio:.3f} | {row.thesis_ratio} | {row.criterion} | **{yes_no(row.holds)}** "
            f"| {yes_no(row.in_thesis_range)} |"
        )
    lines += [
        "",
        "Ratios are learned/random layer means; the thesis's numbers are in units of its Xavier-like",
        "init (E Σσ² = n), this model's random variant uses the model's own init scheme. Raw: the",
        "stored weights; folded: W·diag(γ) of the RMSNorm each matrix reads (q, k, v, gate, up).",
        "",
        "## Layer means per matrix type",
        "",
        "| matrix | form | measure | trained | random | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in df[df["row_type"] == "measure"].itertuples(index=False):
        lines.append(
            f"| {row.matrix} | {row.form} | {row.statement} | {row.trained:.4g} | {row.random:.4g} "
            f"| {'–' if math.isnan(row.ratio) else f'{row.ratio:.3f}'} |"
        )
    if notes:
        lines += ["", *(f"Note: {note}." for note in notes)]
    return "\n".join(lines) + "\n"
