"""The knockout claims: blocking attention edges in a layer window and watching the trained
model's clues (:mod:`attnscope.effects`) tests the thesis's causal reading of its maps.

Both rows read the trained model's own greedy clue under teacher forcing (the clue the knockout
would change) and give the reference clue of the clue file beside it
(:data:`attnscope.variants.KNOCKOUT_CLUES`)."""

from __future__ import annotations

import pandas as pd

from attnscope import effects
from attnscope.claims.records import Contrast, Result, Setting, Thresholds, not_measured
from attnscope.evidence import Evidence
from attnscope.stats import Interval
from attnscope.variants import ACROSS_SHOTS, KNOCKOUT_CLUES, TARGET_SHOTS, TARGET_SHOTWORDS
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED

READS, BESIDE = "", "reference_"
"""The clue a row's verdict reads (the greedy clue) and the one its measured text gives beside it."""


def _table(ev: Evidence, edge_sets: tuple[str, ...], th: Thresholds) -> pd.DataFrame | None:
    """The effects table of the reference experiment's knockouts of ``edge_sets`` and their controls."""
    rows = ev.knockout
    if rows is None or rows.empty:
        return None
    rows = rows[rows["experiment"].isin(ev.replicates)]
    rows = pd.concat([effects.of_edges(rows, edges) for edges in edge_sets])
    return effects.effects_table(rows, th.alpha) if len(rows) else None


def _interval(row: pd.Series, column: str, sign: float = 1.0) -> Interval:
    ends = sorted((sign * row[f"{column}_low"], sign * row[f"{column}_high"]))
    return Interval(sign * row[column], ends[0], ends[1], int(row["n_prompts"]), int(row["n_targets"]))


def _excess(table: pd.DataFrame, edges: str, prefix: str) -> dict[str, tuple[Interval, float, str, str]]:
    """Window → (the excess drop of ``edges`` over its matched control for the clue of ``prefix``,
    i.e. control's Δ − the set's, its adjusted p, the control's name, the set's name)."""
    column = effects.vs_control(prefix)
    if column not in table:
        return {}
    compared = table[(table["edges"] == edges) & ~table["control"]].dropna(subset=[column])
    return {
        r["window"]: (_interval(r, column, -1.0), r[f"{prefix}p_adjusted"], r["versus"], r["variant"])
        for r in compared.to_dict("records")
    }


def _windows_text(found: dict[str, tuple[Interval, float, str, str]]) -> str:
    return (
        "; ".join(f"{w}: {i} (adjusted p {p:.2g})" for w, (i, p, *_) in found.items())
        or "no matched control ran"
    )


def built_from_shots(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """Blocking target → shots (their words and clues) lowers the trained model's greedy clue's
    log-probability more than its matched control: in some window the paired excess drop (control's
    Δ − the set's Δ, per token) has its interval above 0 and a sign-flip p < alpha (BH over windows);
    contradicted when every window's interval lies at or below 0. Beside it: the same on the
    reference clue, and the shot words alone (their clues visible)."""
    table = _table(ev, (TARGET_SHOTS, TARGET_SHOTWORDS), th)
    windows = {} if table is None else _excess(table, TARGET_SHOTS, READS)
    if not windows:
        return not_measured(f"no knockout of {TARGET_SHOTS} with its matched control ran", "knockout")
    clear = [w for w, (i, p, *_) in windows.items() if i.low > 0 and p < th.alpha]
    if clear:
        verdict = SUPPORTED
    elif all(i.high <= 0 for i, *_ in windows.values()):
        verdict = CONTRADICTED
    else:
        verdict = INCONCLUSIVE
    # The headline is a window the verdict rests on: the strongest of those that support it.
    headline = max(clear or windows, key=lambda w: windows[w][0].estimate)
    interval, _, control, named = windows[headline]
    seeds = table.set_index("variant").loc[control, "n_seeds"]
    measured = (
        f"excess drop per token over the matched control ({seeds} seeds), {KNOCKOUT_CLUES[READS]}: "
        f"{_windows_text(windows)}. Beside it, {KNOCKOUT_CLUES[BESIDE]}: "
        f"{_windows_text(_excess(table, TARGET_SHOTS, BESIDE))}; {TARGET_SHOTWORDS} alone (shot clues "
        f"visible), {KNOCKOUT_CLUES[READS]}: {_windows_text(_excess(table, TARGET_SHOTWORDS, READS))}"
    )
    names = ", ".join(table["variant"])
    return Result(
        verdict, interval, measured, f"trained, {names}", ev.knockout["experiment"].nunique(),
        draws="shot draw", contrast=Contrast("delta_token", control, named),
    )  # fmt: skip


def within_shots(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """Blocking every edge from a shot to the earlier shots hurts little, against a reference
    effect rather than a margin: the target → shots knockout of the same window, paired per prompt
    (Δ across-shots − Δ target-shots, per token of the greedy clue; > 0: across-shots hurts less).
    A window supports where the reference hurts (its Δ interval < 0) and across-shots hurts less
    (the difference's interval > 0), or where the reference does not hurt and across-shots does not
    either (its Δ interval reaches 0 or above); it contradicts where across-shots hurts more (the
    difference's interval < 0). Supported when every window supports and the reference hurts in
    one; contradicted when a window contradicts; else inconclusive."""
    table = _table(ev, (ACROSS_SHOTS, TARGET_SHOTS), th)
    if table is None or not {ACROSS_SHOTS, TARGET_SHOTS} <= set(table["edges"]):
        return not_measured(
            f"no knockout of {ACROSS_SHOTS} with its reference {TARGET_SHOTS} ran", "knockout"
        )
    named = table[~table["control"]].set_index(["edges", "window"])
    rows = ev.knockout[ev.knockout["experiment"].isin(ev.replicates)]
    found = {}
    for window in named.loc[ACROSS_SHOTS].index.intersection(named.loc[TARGET_SHOTS].index):
        across, reference = (named.loc[(e, window)] for e in (ACROSS_SHOTS, TARGET_SHOTS))
        difference = effects.paired_difference(rows, across["variant"], reference["variant"], "delta_token")
        found[window] = (
            effects.interval_of(difference, "difference"), _interval(across, "delta_token"),
            _interval(reference, "delta_token"), across["variant"], reference["variant"],
        )  # fmt: skip
    if not found:
        return not_measured(f"no window of {ACROSS_SHOTS} has its reference {TARGET_SHOTS}", "knockout")
    hurts = {w: ref.high < 0 for w, (_, _, ref, *_) in found.items()}
    supports = {w: (d.low > 0) if hurts[w] else across.high >= 0 for w, (d, across, *_) in found.items()}
    if any(d.high < 0 for d, *_ in found.values()):
        verdict = CONTRADICTED
    elif all(supports.values()) and any(hurts.values()):
        verdict = SUPPORTED
    else:
        verdict = INCONCLUSIVE
    weakest = min(found, key=lambda w: found[w][0].estimate)
    difference, _, _, across_name, reference_name = found[weakest]
    text = "; ".join(
        f"{w}: {d} ({ACROSS_SHOTS} {a}, {TARGET_SHOTS} {r}{'' if hurts[w] else ', which does not hurt'})"
        for w, (d, a, r, *_) in found.items()
    )
    measured = f"Δ {ACROSS_SHOTS} − Δ {TARGET_SHOTS} per token, {KNOCKOUT_CLUES[READS]}: {text}"
    names = "trained, " + ", ".join(table[~table["control"]]["variant"])
    return Result(
        verdict, difference, measured, names, rows["experiment"].nunique(), draws="shot draw",
        contrast=Contrast("delta_token", across_name, reference_name),
    )  # fmt: skip
