"""The claims side by side across models: one row per claim × model with its estimate,
interval and verdict, and whether the models agree on the claim.

Agreement compares the verdicts' kinds: *not replicated on <model>* is the contradicted verdict
on a model other than the thesis's, so it agrees with a contradicted verdict on the thesis's
model. ``models_agree`` (:data:`AGREEMENT`) is ``yes`` where every model that measured the claim
gives the same verdict; ``no`` where one model supports it and another contradicts it (or does
not replicate it); ``unclear`` where the verdicts differ only by an inconclusive one; ``–`` where
fewer than two models measured it.
"""

from __future__ import annotations

import pandas as pd

from attnscope import report
from attnscope.claims.records import RESULT_COLUMNS
from attnscope.claims.render import with_interval
from attnscope.io import markdown_table
from attnscope.verdicts import CONTRADICTED, NOT_MEASURED, SUPPORTED, verdict_kind

AGREE, DISAGREE, UNCLEAR, TOO_FEW = "yes", "no", "unclear", "–"
AGREEMENT = (AGREE, DISAGREE, UNCLEAR, TOO_FEW)

ACROSS_COLUMNS = [
    *("claim", "section", "statement", "metric", "model"),
    *RESULT_COLUMNS,
    *("verdict", "verdict_kind", "models_agree"),
]


def agreement(kinds: list[str]) -> str:
    """Whether the verdict kinds of one claim on several models agree (:data:`AGREEMENT`)."""
    measured = [kind for kind in kinds if kind != NOT_MEASURED]
    if len(measured) < 2:
        return TOO_FEW
    if len(set(measured)) == 1:
        return AGREE
    if SUPPORTED in measured and CONTRADICTED in measured:
        return DISAGREE
    return UNCLEAR


KEY = ["claim", "statement"]
"""A row of the claims table is a claim's statement (a claim may have several: per matrix, per head)."""


def across_models(table: pd.DataFrame) -> pd.DataFrame:
    """The claims table (:data:`attnscope.claims.COLUMNS`, one row per model × claim statement)
    as one row per claim statement × model, statements in the table's order, models in theirs, with
    each row's ``verdict_kind`` and the statement's ``models_agree``."""
    missing = sorted(set(ACROSS_COLUMNS) - {"verdict_kind", "models_agree"} - set(table.columns))
    if missing:
        raise ValueError(f"claims table: missing columns {missing}")
    duplicated = table[table.duplicated(["model", *KEY])]
    if len(duplicated):
        first = duplicated.iloc[0]
        raise ValueError(
            f"claims table: model {first['model']} has two rows of {first['claim']}: {first['statement']}"
        )
    rows = table.assign(verdict_kind=table["verdict"].map(verdict_kind))
    statements = pd.MultiIndex.from_frame(rows[KEY])
    order = {key: i for i, key in enumerate(dict.fromkeys(statements))}
    models = {model: i for i, model in enumerate(dict.fromkeys(table["model"]))}
    agree = rows.groupby(KEY, sort=False)["verdict_kind"].agg(lambda kinds: agreement(list(kinds)))
    rows = rows.assign(
        models_agree=agree.reindex(statements).to_numpy(),
        statement_order=statements.map(order),
        model_order=rows["model"].map(models),
    )
    rows = rows.sort_values(["statement_order", "model_order"], kind="stable")
    return rows[ACROSS_COLUMNS].reset_index(drop=True)


def _wide(across: pd.DataFrame) -> pd.DataFrame:
    """One row per claim statement: section, statement, a cell per model (verdict: estimate
    [95 % CI], with the contrast where the estimate is one: models may rest on different steps) and
    the agreement."""
    contrasts = [f" ({c})" if isinstance(c, str) else "" for c in across["contrast"]]
    cells = across.assign(
        cell=[f"{v}: {e}{c}" for v, e, c in zip(across["verdict"], with_interval(across), contrasts)]
    )
    models = list(dict.fromkeys(across["model"]))
    wide = cells.pivot(index=KEY, columns="model", values="cell")[models].fillna("–")
    first = across.drop_duplicates(KEY).set_index(KEY)
    out = first[["section"]].join(wide).join(first["models_agree"])
    return out.reset_index().drop(columns="claim")[["section", "statement", *models, "models_agree"]]


INTRO = (
    "Each claim of the thesis on every model: the verdict under the thesis's own analysis choice and "
    "the estimate with its 95 % interval (as in the claims table, whose rows these are), and whether "
    "the models agree: yes (every model that measured the claim gives the same verdict; not replicated "
    "on a model counts as contradicted), no (supported on one, contradicted on another), unclear (they "
    "differ only by an inconclusive verdict), – (fewer than two models measured it)."
)


def across_markdown(across: pd.DataFrame) -> str:
    """The claims × models table as Markdown, with the agreement counts."""
    counts = across.drop_duplicates(KEY)["models_agree"].value_counts()
    summary = ", ".join(f"{counts[a]} {a}" for a in AGREEMENT if a in counts)
    models = ", ".join(dict.fromkeys(across["model"]))
    return "\n".join(
        [
            "# Thesis claims across models",
            "",
            INTRO,
            "",
            f"Models: {models}. Models agree: {summary}.",
            "",
            markdown_table(_wide(across)),
            "",
        ]
    )


def across_html(across: pd.DataFrame) -> str:
    """The claims × models table as the report's HTML page (verdict cells coloured)."""
    shown = across.assign(estimate=with_interval(across))[
        ["section", "statement", "model", "contrast", "estimate", "verdict", "models_agree"]
    ]
    models = ", ".join(dict.fromkeys(across["model"]))
    return report.html_page("Thesis claims across models", [(f"Models: {models}", "", shown)], INTRO)
