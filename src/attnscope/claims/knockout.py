"""The knockout claims: blocking attention edges in a layer window and watching the trained
model's clue (:mod:`attnscope.effects`) tests the thesis's causal reading of its maps."""

from __future__ import annotations

import pandas as pd

from attnscope import effects
from attnscope.claims.records import Result, Setting, Thresholds, equivalence_of, not_measured
from attnscope.evidence import Evidence
from attnscope.stats import Interval
from attnscope.variants import ACROSS_SHOTS, TARGET_SHOTWORDS
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED


def _rows(ev: Evidence, edges: str, controls: bool) -> pd.DataFrame | None:
    """The reference experiment's knockout rows of the edge set ``edges`` (and its controls)."""
    rows = ev.knockout
    if rows is None or rows.empty:
        return None
    rows = effects.of_edges(rows[rows["experiment"].isin(ev.replicates)], edges, controls)
    return rows if len(rows) else None


def _interval(row: pd.Series, column: str, sign: float = 1.0) -> Interval:
    ends = sorted((sign * row[f"{column}_low"], sign * row[f"{column}_high"]))
    return Interval(sign * row[column], ends[0], ends[1], int(row["n_prompts"]), int(row["n_targets"]))


def built_from_shots(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """Blocking target → shot words lowers the trained clue's log-probability more than blocking
    as many random edges: in some window the paired excess drop (control's Δ − the set's Δ, per
    token) has its interval above 0 and a sign-flip p < alpha (BH over windows); contradicted
    when every window's interval lies at or below 0."""
    rows = _rows(ev, TARGET_SHOTWORDS, controls=True)
    table = None if rows is None else effects.effects_table(rows, th.alpha)
    if table is None or table["vs_control"].isna().all():
        return not_measured(f"no knockout of {TARGET_SHOTWORDS} with its random control ran", "knockout")
    compared = table.dropna(subset=["vs_control"])
    windows = {
        w: _interval(r, "vs_control", -1.0) for w, r in zip(compared["window"], compared.to_dict("records"))
    }
    p = dict(zip(compared["window"], compared["p_adjusted"]))
    if any(i.low > 0 and p[w] < th.alpha for w, i in windows.items()):
        verdict = SUPPORTED
    elif all(i.high <= 0 for i in windows.values()):
        verdict = CONTRADICTED
    else:
        verdict = INCONCLUSIVE
    strongest = max(windows, key=lambda w: windows[w].estimate)
    text = "; ".join(f"{w}: {i} (adjusted p {p[w]:.2g})" for w, i in windows.items())
    measured = (
        f"excess drop in log-probability per clue token, {TARGET_SHOTWORDS} over its random control: {text}"
    )
    names = ", ".join(compared["variant"].tolist() + compared["versus"].tolist())
    n_seeds = rows["experiment"].nunique()
    return Result(verdict, windows[strongest], measured, f"trained, {names}", n_seeds, draws="shot draw")


def within_shots(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """Blocking every edge from a shot to the earlier shots barely moves the trained clue's
    log-probability: every window's interval of Δ per token within ±``knockout_small``;
    contradicted when some window's lies wholly outside."""
    rows = _rows(ev, ACROSS_SHOTS, controls=False)
    if rows is None:
        return not_measured(f"no knockout of {ACROSS_SHOTS} ran", "knockout")
    table = effects.effects_table(rows, th.alpha)
    windows = {w: _interval(r, "delta_token") for w, r in zip(table["window"], table.to_dict("records"))}
    verdicts = {w: equivalence_of(i, th.knockout_small) for w, i in windows.items()}
    if CONTRADICTED in verdicts.values():
        verdict = CONTRADICTED
    else:
        verdict = SUPPORTED if set(verdicts.values()) == {SUPPORTED} else INCONCLUSIVE
    largest = max(windows, key=lambda w: abs(windows[w].estimate))
    text = "; ".join(f"{w}: {i}" for w, i in windows.items())
    measured = f"Δ log-probability per clue token with {ACROSS_SHOTS} blocked: {text}"
    names = "trained, " + ", ".join(table["variant"])
    return Result(verdict, windows[largest], measured, names, rows["experiment"].nunique(), draws="shot draw")
