"""Knockout effects: what blocking an edge set does to the trained model's clue, per edge set
and layer window, with its uncertainty (which knockouts a run makes is
:func:`attnscope.variants.knockout_plan`).

A knockout job (:func:`attnscope.knockout.prompt_effects`) writes one row per prompt: the
trained clue's log-probability under teacher forcing with and without the knockout and, with
``greedy``, the knocked-out greedy clue scored against the trained one. :func:`effects_table`
turns those rows into one row per knockout: the mean change with its cluster-bootstrap interval
over target words, and the paired difference to the random control of the same edge set and
window with a sign-flip test over targets (Benjamini–Hochberg over the set's windows;
:mod:`attnscope.stats`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnscope import stats, variants
from attnscope.io import markdown_table

PROMPT_KEYS = ["experiment", "prompt_index"]
"""The columns that name one prompt of a run: a knockout and its control are paired on them."""
GREEDY = {"chrf": "chrF of the greedy clue against the trained one", "exact_match": "exact match",
          "end_marker": "ends at the end marker"}  # fmt: skip
"""The greedy clue's scores (per prompt) and what they mean."""


def _labels(names: Sequence[str]) -> pd.DataFrame:
    """edges, control, seed, first, last, window of each knockout variant name."""
    parsed = [variants.parse(name) for name in names]
    return pd.DataFrame(
        {
            "variant": list(names),
            "edges": [v.edges for v in parsed],
            "control": [v.control for v in parsed],
            "seed": pd.array([v.seed for v in parsed], dtype="Int64"),
            "first": [v.layers[0] for v in parsed],
            "last": [v.layers[1] for v in parsed],
            "window": [f"L{v.layers[0]}-{v.layers[1]}" for v in parsed],
        }
    )


def of_edges(rows: pd.DataFrame, edges: str, controls: bool = True) -> pd.DataFrame:
    """The per-prompt rows of the knockouts of the edge set ``edges`` (and of its controls)."""
    parsed = [variants.parse(name) for name in rows["variant"]]
    keep = [v.edges == edges and (controls or not v.control) for v in parsed]
    return rows[keep]


def _interval(rows: pd.DataFrame, column: str) -> stats.Interval:
    values = rows[column].astype(float).to_numpy()
    return stats.cluster_mean_interval(values, rows["target"].to_numpy())


def control_of(names: Sequence[str], variant: str) -> str | None:
    """The random control of a named knockout among ``names``: same edge set and window, the
    lowest seed (``None``: none ran)."""
    named = variants.parse(variant)
    controls = [
        (v.seed, v.name)
        for v in map(variants.parse, names)
        if v.control and v.edges == named.edges and v.layers == named.layers
    ]
    return min(controls)[1] if controls and not named.control else None


def control_comparison(rows: pd.DataFrame, edges: str, alpha: float = 0.05) -> pd.DataFrame:
    """Per window of the named set ``edges`` that has a control: Δ log-probability per token of
    the set minus its control's, paired per prompt (estimate, low, high: cluster bootstrap over
    targets), and the two-sided sign-flip test of the per-target mean difference, its p-value
    adjusted by Benjamini–Hochberg over the windows (``p_adjusted``)."""
    names = list(dict.fromkeys(rows["variant"]))
    found, per_target = [], []
    for name in names:
        parsed = variants.parse(name)
        control = control_of(names, name)
        if parsed.control or parsed.edges != edges or control is None:
            continue
        pair = [rows[rows["variant"] == v].set_index(PROMPT_KEYS) for v in (name, control)]
        common = pair[0].index.intersection(pair[1].index)
        difference = pd.DataFrame(
            {
                "difference": pair[0].loc[common, "delta_token"] - pair[1].loc[common, "delta_token"],
                "target": pair[0].loc[common, "target"],
            }
        )
        interval = _interval(difference, "difference")
        found.append(
            {"variant": name, "versus": control, "vs_control": interval.estimate,
             "vs_control_low": interval.low, "vs_control_high": interval.high}
        )  # fmt: skip
        per_target.append(difference.groupby("target")["difference"].mean().rename(name))
    if not found:
        return pd.DataFrame(columns=["variant", "versus", "vs_control", "vs_control_low", "vs_control_high",
                                     "p_adjusted"])  # fmt: skip
    matrix = pd.concat(per_target, axis=1)  # [target, window]
    test = stats.paired_layer_test(matrix.to_numpy(), alpha=alpha)
    return pd.DataFrame(found).assign(p_adjusted=test.p_adjusted)


EFFECT_COLUMNS = {
    "delta_token": "Δ log-probability per clue token",
    "delta_total": "Δ log-probability of the clue",
}


def effects_table(rows: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per knockout of the per-prompt rows ``rows`` (:func:`attnscope.knockout.prompt_effects`,
    one or more experiments): edge set and window, the mean of each effect (:data:`EFFECT_COLUMNS`,
    and :data:`GREEDY` where the greedy clues ran) with its cluster-bootstrap interval over
    targets, and for a named set the comparison with its control (:func:`control_comparison`)."""
    names = list(dict.fromkeys(rows["variant"]))
    table = _labels(names)
    columns = [c for c in [*EFFECT_COLUMNS, *GREEDY] if c in rows and rows[c].notna().any()]
    for column in columns:
        intervals = [_interval(rows[rows["variant"] == name], column) for name in names]
        table[column] = [i.estimate for i in intervals]
        table[f"{column}_low"] = [i.low for i in intervals]
        table[f"{column}_high"] = [i.high for i in intervals]
    counts = rows.groupby("variant", sort=False).agg(
        n_prompts=("target", "size"), n_targets=("target", "nunique")
    )
    table = table.join(counts, on="variant")
    compared = [control_comparison(rows, edges, alpha) for edges in dict.fromkeys(table["edges"])]
    compared = pd.concat([c for c in compared if len(c)] or compared[:1], ignore_index=True)
    table = table.merge(compared, on="variant", how="left")
    return table.sort_values(["control", "edges", "first", "last"], kind="stable").reset_index(drop=True)


def effects_title(model: str, experiment: str) -> str:
    """The title of an experiment's knockout effects, in its Markdown table and its figure."""
    return f"{model} · {experiment} · knockout effects on the trained clue"


def effects_markdown(table: pd.DataFrame, title: str) -> str:
    """The effects table as Markdown: per knockout the mean change with its 95 % interval."""

    def cell(row: pd.Series, column: str) -> str:
        if column not in row or pd.isna(row[column]):
            return "–"
        interval = stats.Interval(row[column], row[f"{column}_low"], row[f"{column}_high"], 0, 0)
        return str(interval)

    shown = [c for c in [*EFFECT_COLUMNS, *GREEDY] if c in table]
    out = pd.DataFrame(
        {
            "edge set": [("control of " if c else "") + e for e, c in zip(table["edges"], table["control"])],
            "layers": table["window"],
            "prompts": table["n_prompts"],
            "targets": table["n_targets"],
            **{({**EFFECT_COLUMNS, **GREEDY})[c]: [cell(r, c) for _, r in table.iterrows()] for c in shown},
            "minus control": [cell(r, "vs_control") for _, r in table.iterrows()],
            "p (sign flip, BH)": [
                "–" if pd.isna(p) else f"{p:.3g}"
                for p in table.get("p_adjusted", pd.Series(np.nan, table.index))
            ],
        }
    )
    return (
        f"# {title}\n\nΔ = knocked out − trained, log-probability of the trained model's clue under "
        "teacher forcing (negative: the knockout hurts). Mean over prompts [95 % cluster-bootstrap "
        "interval over target words]; 'minus control': Δ of the edge set minus Δ of its random control "
        "(same window, paired per prompt), tested by sign flips of the per-target means, "
        "Benjamini–Hochberg over the set's windows.\n\n" + markdown_table(out) + "\n"
    )
