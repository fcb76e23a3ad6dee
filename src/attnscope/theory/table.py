"""The theory table: what a row declares (:class:`Statement`), the row it becomes with a
measurement (a dict with the :data:`COLUMNS`) and its Markdown rendering."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from attnscope.io import canonical_json
from attnscope.verdicts import THEORY_VERDICTS

Bound = Literal["both", "upper", "lower"]

_DEVIATIONS = {
    "both": ("|estimate − prediction| ≤ ", lambda estimate, prediction: abs(estimate - prediction)),
    "upper": ("estimate − prediction ≤ ", lambda estimate, prediction: estimate - prediction),
    "lower": ("prediction − estimate ≤ ", lambda estimate, prediction: prediction - estimate),
}
"""Per bound: the tolerance rule's left side and the deviation it compares with the tolerance."""


COLUMNS = [
    "check",
    "kind",
    "statement",
    "equation",
    "parameters",
    "prediction",
    "estimate",
    "std_error",
    "rel_error",
    "tolerance",
    "tolerance_rule",
    "verdict",
    "note",
]


@dataclass(frozen=True)
class Statement:
    """A statement the theory table tests: its words, the kind of formula and how it is judged.

    ``kind`` is ``thesis`` (the thesis's formula), ``corrected`` (its correction) or
    ``extension`` (a statement the thesis does not make). The tolerance is ``abs_tolerance``
    when given (e.g. a KS critical value or float64 round-off), else
    ``k_se·SE + rel_floor·|prediction|``. ``bound`` ``upper``: the prediction is an upper
    bound and only estimate − prediction is compared; ``lower``: a lower bound.
    """

    check: str
    kind: str
    statement: str
    equation: str
    note: str = ""
    k_se: float = 4.0
    rel_floor: float = 0.0
    bound: Bound = "both"
    abs_tolerance: float | None = None

    def measured(
        self, parameters: dict[str, Any], prediction: float, estimate: float, std_error: float, **fill: Any
    ) -> dict[str, Any]:
        """The table row for one measurement; ``fill`` completes the ``{placeholders}`` of the check
        name, statement and note (texts are taken literally when there is no ``fill``)."""
        prediction, estimate, std_error = float(prediction), float(estimate), float(std_error)
        if self.abs_tolerance is not None:
            tolerance = float(self.abs_tolerance)
            rule = f"{tolerance:.3g} (stated absolute bound)"
        else:
            tolerance = self.k_se * std_error + self.rel_floor * abs(prediction)
            rule = f"{self.k_se:g}·SE" + (f" + {self.rel_floor:g}·|prediction|" if self.rel_floor else "")
        left, deviation = _DEVIATIONS[self.bound]
        holds, fails = THEORY_VERDICTS[self.kind]
        text = {name: getattr(self, name) for name in ("check", "statement", "note")}
        if fill:
            text = {name: value.format(**fill) for name, value in text.items()}
        return {
            "check": text["check"],
            "kind": self.kind,
            "statement": text["statement"],
            "equation": self.equation,
            "parameters": canonical_json(parameters),
            "prediction": prediction,
            "estimate": estimate,
            "std_error": std_error,
            "rel_error": (estimate - prediction) / abs(prediction) if prediction != 0 else float("nan"),
            "tolerance": tolerance,
            "tolerance_rule": left + rule,
            "verdict": holds if deviation(estimate, prediction) <= tolerance else fails,
            "note": text["note"],
        }


def by_check(*statements: Statement) -> dict[str, Statement]:
    """A module's statements keyed by their check name (or its template)."""
    return {s.check: s for s in statements}


def checks_markdown(df: pd.DataFrame) -> str:
    """The theory table as Markdown: one line per check, then the notes."""
    lines = [
        "# Theory checks",
        "",
        "| check | equation | prediction | estimate | SE | rel. error | tolerance | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in df.itertuples(index=False):
        rel = "–" if math.isnan(row.rel_error) else f"{row.rel_error:+.2%}"
        lines.append(
            f"| `{row.check}` | {row.equation} | {row.prediction:.5g} | {row.estimate:.5g} | "
            f"{row.std_error:.2g} | {rel} | {row.tolerance:.3g} | **{row.verdict}** |"
        )
    lines += ["", "## Statements, parameters and notes", ""]
    for row in df.itertuples(index=False):
        lines.append(
            f"- `{row.check}` ({row.equation}): {row.statement}. Tolerance: {row.tolerance_rule}. "
            f"Parameters: `{row.parameters}`." + (f" *Note:* {row.note}" if row.note else "")
        )
    return "\n".join(lines) + "\n"
