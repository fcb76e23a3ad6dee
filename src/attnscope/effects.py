"""Knockout effects: what blocking an edge set does to the trained model's clues, per edge set
and layer window, with its uncertainty (which knockouts a run makes is
:func:`attnscope.variants.knockout_plan`).

A knockout job (:func:`attnscope.knockout.prompt_effects`) writes one row per prompt (and per
seed of a matched control): the log-probability under teacher forcing, with and without the
knockout, of the trained model's greedy clue and of the reference clue, the edges blocked and the
attention mass they carry, and, with ``greedy``, the knocked-out greedy clue scored against the
trained one. :func:`effects_table` turns those rows into one row per knockout: the mean change
with its cluster-bootstrap interval over target words, and the paired difference to the matched
control of the same edge set and window (its seeds averaged per prompt) with a sign-flip test
over targets (Benjamini–Hochberg over the set's windows; :mod:`attnscope.stats`). A control's
seeds draw independently for every prompt (:func:`attnscope.edgesets.control_edges`), so the
draw is noise within each target and the bootstrap over targets covers both prompts and seeds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnscope import stats, variants
from attnscope.io import markdown_table
from attnscope.variants import KNOCKOUT_CLUES

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
            "n_seeds": [len(v.seeds) or 1 for v in parsed],
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


def interval_of(rows: pd.DataFrame, column: str) -> stats.Interval:
    """The mean of ``column`` over ``rows`` with its cluster-bootstrap interval over targets."""
    values = rows[column].astype(float).to_numpy()
    return stats.cluster_mean_interval(values, rows["target"].to_numpy())


def paired_difference(rows: pd.DataFrame, minuend: str, subtrahend: str, column: str) -> pd.DataFrame:
    """Per prompt both knockouts ran, ``column`` of the knockout ``minuend`` minus that of
    ``subtrahend`` (each the mean over its seeds) as ``difference``, with the prompt's ``target``."""
    sides = [
        rows[rows["variant"] == name]
        .groupby(PROMPT_KEYS)
        .agg(value=(column, "mean"), target=("target", "first"))
        for name in (minuend, subtrahend)
    ]
    common = sides[0].index.intersection(sides[1].index)
    difference = sides[0].loc[common, "value"] - sides[1].loc[common, "value"]
    return pd.DataFrame({"difference": difference, "target": sides[0].loc[common, "target"]}).dropna()


def control_of(names: Sequence[str], variant: str) -> str | None:
    """The matched control of a named knockout among ``names``: same edge set and window, the
    lowest first seed (``None``: none ran)."""
    named = variants.parse(variant)
    controls = [
        (v.seed, v.name)
        for v in map(variants.parse, names)
        if v.control and v.edges == named.edges and v.layers == named.layers
    ]
    return min(controls)[1] if controls and not named.control else None


def vs_control(prefix: str = "") -> str:
    """The column of a named set's Δ minus its control's, for the clue of ``prefix``
    (:data:`attnscope.variants.KNOCKOUT_CLUES`)."""
    return f"{prefix}vs_control"


def control_comparison(rows: pd.DataFrame, edges: str, prefix: str = "", alpha: float = 0.05) -> pd.DataFrame:
    """Per window of the named set ``edges`` that has a control: Δ log-probability per token of the
    clue of ``prefix`` under the set minus under its control (the mean over the control's seeds),
    paired per prompt (:func:`vs_control`, low, high: cluster bootstrap over targets), and the
    two-sided sign-flip test of the per-target mean difference, its p-value adjusted by
    Benjamini–Hochberg over the windows (``{prefix}p_adjusted``)."""
    column, name_of = f"{prefix}delta_token", vs_control(prefix)
    names = list(dict.fromkeys(rows["variant"]))
    found, per_target = [], []
    for name in names:
        parsed = variants.parse(name)
        control = control_of(names, name)
        if parsed.control or parsed.edges != edges or control is None:
            continue
        difference = paired_difference(rows, name, control, column)
        if difference.empty:
            continue
        interval = interval_of(difference, "difference")
        found.append(
            {"variant": name, "versus": control, name_of: interval.estimate,
             f"{name_of}_low": interval.low, f"{name_of}_high": interval.high}
        )  # fmt: skip
        per_target.append(difference.groupby("target")["difference"].mean().rename(name))
    if not found:
        return pd.DataFrame(columns=["variant", "versus", name_of, f"{name_of}_low", f"{name_of}_high",
                                     f"{prefix}p_adjusted"])  # fmt: skip
    matrix = pd.concat(per_target, axis=1)  # [target, window]
    test = stats.paired_layer_test(matrix.to_numpy(), alpha=alpha)
    return pd.DataFrame(found).assign(**{f"{prefix}p_adjusted": test.p_adjusted})


EFFECT_COLUMNS = {
    **{f"{p}delta_token": f"Δ log-probability per token, {clue}" for p, clue in KNOCKOUT_CLUES.items()},
    **{f"{p}delta_total": f"Δ log-probability, {clue}" for p, clue in KNOCKOUT_CLUES.items()},
    "blocked_mass": "attention mass on the blocked edges (trained)",
}


def effects_table(rows: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per knockout of the per-prompt rows ``rows`` (:func:`attnscope.knockout.prompt_effects`,
    one or more experiments): edge set, window and seeds, the mean of each effect
    (:data:`EFFECT_COLUMNS`, and :data:`GREEDY` where the greedy clues ran) with its
    cluster-bootstrap interval over targets, and for a named set the comparison with its matched
    control for each clue (:func:`control_comparison`) and the control's blocked attention mass
    over the set's (``mass_ratio``)."""
    names = list(dict.fromkeys(rows["variant"]))
    table = _labels(names)
    columns = [c for c in [*EFFECT_COLUMNS, *GREEDY] if c in rows and rows[c].notna().any()]
    for column in columns:
        intervals = [
            interval_of(rows[rows["variant"] == name].dropna(subset=[column]), column) for name in names
        ]
        table[column] = [i.estimate for i in intervals]
        table[f"{column}_low"] = [i.low for i in intervals]
        table[f"{column}_high"] = [i.high for i in intervals]
    counts = (
        rows.drop_duplicates(["variant", *PROMPT_KEYS])
        .groupby("variant", sort=False)
        .agg(n_prompts=("target", "size"), n_targets=("target", "nunique"))
    )
    table = table.join(counts, on="variant")
    compared = None
    for prefix in [p for p in KNOCKOUT_CLUES if f"{p}delta_token" in columns]:
        frames = [control_comparison(rows, edges, prefix, alpha) for edges in dict.fromkeys(table["edges"])]
        frame = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
        compared = frame if compared is None else compared.merge(frame, on=["variant", "versus"], how="outer")
    table = table.merge(compared, on="variant", how="left")
    if "blocked_mass" in table:
        mass = table.set_index("variant")["blocked_mass"]
        table["mass_ratio"] = table["versus"].map(mass) / table["blocked_mass"]
    return table.sort_values(["edges", "first", "last", "control"], kind="stable").reset_index(drop=True)


def effects_title(model: str, experiment: str) -> str:
    """The title of an experiment's knockout effects, in its Markdown table and its figure."""
    return f"{model} · {experiment} · knockout effects on the trained clue"


def effects_markdown(table: pd.DataFrame, title: str) -> str:
    """The effects table as Markdown: per knockout the mean change with its 95 % interval, each
    named set's difference to its matched control and the control's blocked mass over the set's."""

    def cell(row: pd.Series, column: str) -> str:
        if column not in row or pd.isna(row[column]):
            return "–"
        interval = stats.Interval(row[column], row[f"{column}_low"], row[f"{column}_high"], 0, 0)
        return str(interval)

    def number(column: str) -> list[str]:
        return ["–" if pd.isna(v) else f"{v:.3g}" for v in table.get(column, pd.Series(np.nan, table.index))]

    shown = [c for c in [*EFFECT_COLUMNS, *GREEDY] if c in table]
    compared = {
        f"minus control, {clue}": vs_control(p)
        for p, clue in KNOCKOUT_CLUES.items()
        if vs_control(p) in table
    }
    out = pd.DataFrame(
        {
            "edge set": [("control of " if c else "") + e for e, c in zip(table["edges"], table["control"])],
            "layers": table["window"],
            "seeds": [n if c else "–" for n, c in zip(table["n_seeds"], table["control"])],
            "prompts": table["n_prompts"],
            "targets": table["n_targets"],
            **{({**EFFECT_COLUMNS, **GREEDY})[c]: [cell(r, c) for _, r in table.iterrows()] for c in shown},
            "control mass ÷ set mass": number("mass_ratio"),
            **{name: [cell(r, column) for _, r in table.iterrows()] for name, column in compared.items()},
            **{f"p, {clue} (sign flip, BH)": number(f"{p}p_adjusted") for p, clue in KNOCKOUT_CLUES.items()
               if vs_control(p) in table},
        }
    )  # fmt: skip
    greedy = (
        "Greedy decoding under the knockouts ran (chrF, exact match and end marker against the trained clue)."
        if any(c in table for c in GREEDY)
        else "Greedy decoding under the knockouts did not run (knockout.greedy: false): no clue quality "
        "under knockout."
    )
    return (
        f"# {title}\n\nΔ = knocked out − trained, log-probability under teacher forcing of the trained "
        "model's own greedy clue and of the reference clue of the clue file (negative: the knockout "
        "hurts). Mean over prompts (and a control's seeds) [95 % cluster-bootstrap interval over target "
        "words]; a control blocks as many keys per query row as its set, outside the set, never the first "
        "token, the target word or the query's own segment, stratified by distance; 'blocked mass': the "
        "attention the trained model gives the blocked edges in the window; 'minus control': Δ of the "
        "edge set minus Δ of its matched control (same window, its seeds averaged, paired per prompt), "
        "tested by sign flips of the per-target means, Benjamini–Hochberg over the set's windows. "
        f"{greedy}\n\n" + markdown_table(out) + "\n"
    )
