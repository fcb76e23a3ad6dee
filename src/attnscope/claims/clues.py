"""The clue claims (ch. 8.1, 8.5): what the α edits write (copies, broken clues), and clue
quality against the number of shots k; per target, paired with the trained model's clues."""

from __future__ import annotations

from collections.abc import Callable

from attnscope import stats
from attnscope.claims.records import Result, Setting, Thresholds, not_measured, verdict_of
from attnscope.claims.views import PromptTable, paired_table, pick_variant, prompt_table
from attnscope.evidence import Evidence
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED


def _reference_clues(ev: Evidence, name: str, column: str) -> tuple[PromptTable, PromptTable] | None:
    """``column`` per clue of ``name`` and of trained on the reference experiment's prompts:
    (edited, edited − trained)."""
    clues = ev.clues
    rows = clues[clues["experiment"].isin(ev.replicates)]
    rows = rows.assign(layer=0, broken=(rows["clue"].str.strip() == "") | ~rows["format_ok"].astype(bool))
    edited = prompt_table(rows, [name], [column])
    delta = paired_table(rows, name, [column], None)
    return None if edited is None or delta is None else (edited, delta)


def clue_claim(
    direction: str, alpha: float, column: str, bar: Callable[[Thresholds], float], what: str
) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """A claim on the α edit's clues: its mean ``column`` clears the bar and exceeds trained's
    (paired per prompt); contradicted if it does not exceed trained's or lies wholly below the bar."""
    label = "qkscale-a" + ("2" if direction == "up" else "0.5")

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
        clues = ev.clues
        name = (
            None
            if clues is None or clues.empty
            else pick_variant(clues["variant"].unique(), "qkscale", direction, alpha)
        )
        pair = None if name is None else _reference_clues(ev, name, column)
        if pair is None:
            return not_measured(f"no qkscale variant with α {'>' if direction == 'up' else '<'} 1", label)
        edited, delta = pair
        level = edited.interval(lambda m: m[..., 0, 0])
        above = delta.interval(lambda m: m[..., 0, 0])
        verdict = verdict_of(above, 1e-12, 0.0)
        if verdict != CONTRADICTED:
            at_bar = verdict_of(level, bar(th), bar(th))
            verdict = at_bar if at_bar == CONTRADICTED or verdict == SUPPORTED else verdict
        measured = f"{what}: {name} {level}, minus trained (paired) {above}"
        return Result(verdict, level, measured, f"trained, {name}", edited.n_seeds)

    return measure


def more_shots(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    clues = ev.clues
    if clues is None or clues.empty:
        return not_measured("no generated clues")
    trained = clues[clues["variant"] == "trained"]
    scored = trained.dropna(subset=["chrf"])  # chrF needs a reference clue
    if scored.empty:
        return not_measured("no target has a reference clue in the clue files")
    counts = scored.groupby("category")["k"].nunique()
    if counts.empty or counts.max() < 2:
        return not_measured("fewer than two shot counts k of one category")
    category = counts.idxmax()
    per_target = scored[scored["category"] == category].groupby(["k", "target"])["chrf"].mean().unstack("k")
    ks = list(per_target.columns)
    paired = per_target.dropna()
    if len(paired) < 2:
        return not_measured(f"{category}: fewer than two targets scored at every k")
    steps = [stats.cluster_mean_interval(paired[b] - paired[a]) for a, b in zip(ks, ks[1:])]
    overall = stats.cluster_mean_interval(paired[ks[-1]] - paired[ks[0]])
    if all(step.low > 0 for step in steps):
        verdict = SUPPORTED
    elif any(step.high < 0 for step in (*steps, overall)):
        verdict = CONTRADICTED  # a step in k (or the whole range) lowers quality
    else:
        verdict = INCONCLUSIVE
    of_category = trained[trained["category"] == category]
    n_all = of_category.groupby("k")["target"].nunique()
    levels = ", ".join(
        f"k={k} {per_target[k].mean():.3g} ({n} of {n_all[k]} targets with a reference)"
        for k, n in per_target.notna().sum().items()
    )
    step_text = ", ".join(f"k{b} − k{a} {step}" for (a, b), step in zip(zip(ks, ks[1:]), steps))
    draws = of_category.drop_duplicates(["experiment"]).groupby("k").size()
    draw_text = ", ".join(f"k={k} {n}" for k, n in draws.items())
    measured = f"{category}: mean chrF {levels}; paired per target: {step_text}; shot draws {draw_text}"
    return Result(verdict, overall, measured, n_seeds=int(draws.min()))  # the fewest of any k
