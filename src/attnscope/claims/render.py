"""The claims table as a reader sees it: the header line of what was measured, the Markdown
page with its sensitivity tables, and the HTML page of the report."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnscope import report
from attnscope.claims.records import POINT, RANGE
from attnscope.evidence import Evidence
from attnscope.io import markdown_table
from attnscope.stats import Interval, fmt
from attnscope.variants import random_variants
from attnscope.verdicts import CLAIM_VERDICTS as VERDICTS
from attnscope.verdicts import not_replicated_on


def measured_on(ev: Evidence) -> str:
    """The header line of a model's claims: what was measured on what."""
    attention = ev.choices
    targets = attention["target"].nunique() if "target" in attention else 0
    seeds = sorted(attention["seed"].unique()) if "seed" in attention else []
    randoms = random_variants(ev.variants())
    model = ev.model + (" (the thesis's model)" if ev.thesis_model else "")
    return (
        f"Measured on {model}: {ev.description}. Reference experiment {ev.experiment}: {targets} target "
        f"words, shot seeds {', '.join(map(str, seeds)) or '–'} ({', '.join(ev.replicates)}); variants "
        f"{', '.join(ev.variants()) or '–'}; random init seeds: {len(randoms)}."
        + (
            ""
            if ev.thesis_model
            else f" Claims the thesis made about Mistral-7B that this model does not show read "
            f"*{not_replicated_on(ev.model)}*, not contradicted."
        )
    )


def _draws(n_prompts: object, n_seeds: int) -> str:
    """What a row rests on: its target words × shot draws, or (weights) its init seeds."""
    plural = "s" if n_seeds != 1 else ""
    if not n_seeds:
        return "–"
    if pd.isna(n_prompts):
        return f"{n_seeds} init seed{plural}"
    return f"{n_prompts} targets × {n_seeds} draw{plural}"


def with_interval(rows: pd.DataFrame) -> list[str]:
    """Each row's estimate with its bounds as text: its 95 % interval, its range over the init seeds
    (named so), or the estimate alone where it is a point (– where it was not measured)."""
    texts = []
    for e, lo, hi, bounds in zip(rows["estimate"], rows["low"], rows["high"], rows["bounds"]):
        interval = Interval(e, lo, hi, 0, 0)
        if np.isnan(e):
            texts.append("–")
        elif bounds == POINT:
            texts.append(f"{fmt(e, interval)} (point)")
        else:
            texts.append(str(interval) + (f" ({RANGE})" if bounds == RANGE else ""))
    return texts


INTRO = (
    "Each row: a qualitative claim of the thesis (section), the metric that tests it, the setting its "
    "verdict rests on (analysis choice and layer band, or the weights' form and null; – where the "
    "claim has none), the estimate with its 95 % interval (cluster bootstrap over target words; for "
    "weights the share of layers or heads that meet the criterion, which are the population, not a "
    "sample: for the spectra its interval runs over the init seeds, for the alignment it is a point), "
    "the draws it rests on, the verdict from the whole interval under the thesis's own analysis "
    "choice (attention: keys and queries restricted to the words and clues, the rows as the model "
    "gave them, unnormalised; over layer bands only where every band agrees; weights: the stored "
    "matrices), whether every other setting agrees (robust, with what it covers; docs/figures.md, "
    '"The claims table"), and the verdict of the same test on the value-weighted maps (each key\'s '
    "weight times the norm of what its value writes through the head; not part of robust: a "
    "different question, not another analysis choice)."
)
"""What the claims table shows, the intro of its Markdown and its HTML page."""


def claims_markdown(table: pd.DataFrame, sensitivity: pd.DataFrame, header: Mapping[str, str]) -> str:
    """The claims table as Markdown, one section per model (``header``: model → what it was
    measured on), with its verdict count and its sensitivity table."""
    parts = ["# Thesis claims against the measurements", "", INTRO]
    for model, rows in table.groupby("model", sort=False):
        counts = rows["verdict"].value_counts()
        order = [v for v in VERDICTS if v in counts] + [v for v in counts.index if v not in VERDICTS]
        summary = ", ".join(f"{counts[v]} {v}" for v in order)
        parts += ["", f"## {model} (experiment {rows['experiment'].iloc[0]}): {summary}", ""]
        parts += [header.get(model, ""), ""]
        shown = rows.assign(
            estimate=with_interval(rows),
            n=[_draws(p, s) for p, s in zip(rows["n_prompts"], rows["n_seeds"])],
            verdict=rows["verdict"].map(lambda v: f"**{v}**"),
        )[
            [
                "section",
                "statement",
                "metric",
                "setting",
                "contrast",
                "estimate",
                "n",
                "measured",
                "threshold",
                "verdict",
                "robust",
                "value_weighted",
                "quote",
            ]
        ]
        parts.append(
            markdown_table(
                shown.rename(
                    columns={
                        "estimate": "estimate [95 % CI or as noted]",
                        "n": "rests on",
                        "value_weighted": "on value-weighted maps",
                        "quote": "the thesis's sentence",
                    }
                )
            )
        )
        of_model = sensitivity[sensitivity["model"] == model]
        parts += ["", f"### {model}: every analysis choice", ""]
        parts.append(
            markdown_table(
                of_model.assign(estimate=with_interval(of_model))[
                    ["statement", "setting", "contrast", "estimate", "verdict"]
                ]
            )
        )
    return "\n".join(parts) + "\n"


def claims_html(table: pd.DataFrame, header: Mapping[str, str]) -> str:
    """The claims table as the report's HTML page, one section per model."""
    sections = [
        (
            f"{model} (experiment {rows['experiment'].iloc[0]})",
            header[model] + " " + ", ".join(f"{n} {v}" for v, n in rows["verdict"].value_counts().items()),
            rows.drop(columns=["model", "claim", "experiment"]),
        )
        for model, rows in table.groupby("model", sort=False)
    ]
    return report.html_page("Thesis claims against the measurements", sections, INTRO)
