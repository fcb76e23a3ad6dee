"""The clue claims (ch. 8.1, 8.5): what the α edits write (copies, broken clues), and clue
quality against the number of shots k; per target, paired with the trained model's clues."""

from __future__ import annotations

from collections.abc import Callable

from attnscope import stats
from attnscope.claims.records import Contrast, Result, Setting, Thresholds, not_measured, verdict_of
from attnscope.claims.views import PromptTable, paired_table, pick_variant, prompt_table
from attnscope.evidence import Evidence
from attnscope.stats import Interval
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
    steps = {(a, b): stats.cluster_mean_interval(paired[b] - paired[a]) for a, b in zip(ks, ks[1:])}
    contrasts = {**steps, (ks[0], ks[-1]): stats.cluster_mean_interval(paired[ks[-1]] - paired[ks[0]])}
    verdict, rests_on = _shot_verdict(steps, contrasts)
    of_category = trained[trained["category"] == category]
    n_all = of_category.groupby("k")["target"].nunique()
    levels = ", ".join(
        f"k={k} {per_target[k].mean():.3g} ({n} of {n_all[k]} targets with a reference)"
        for k, n in per_target.notna().sum().items()
    )
    step_text = ", ".join(f"k{b} − k{a} {interval}" for (a, b), interval in contrasts.items())
    draws = of_category.drop_duplicates(["experiment"]).groupby("k").size()
    draw_text = ", ".join(f"k={k} {n}" for k, n in draws.items())
    a, b = rests_on
    measured = (
        f"{category}: mean chrF {levels}; paired per target: {step_text}; the verdict rests on k{b} − k{a}"
        f"{_inverted_u(steps)}; shot draws {draw_text}"
    )
    contrast = Contrast("chrf", f"k{b}", f"k{a}")
    return Result(verdict, contrasts[rests_on], measured, n_seeds=int(draws.min()), contrast=contrast)


def _shot_verdict(
    steps: dict[tuple[int, int], Interval], contrasts: dict[tuple[int, int], Interval]
) -> tuple[str, tuple[int, int]]:
    """The verdict of clue quality against k and the contrast it rests on: supported if every step
    rises (resting on the weakest rise, the lowest lower bound), contradicted if a step or the whole
    range falls (resting on the clearest fall, the lowest upper bound), else inconclusive (resting
    on the step whose lower bound keeps it from supported)."""
    weakest = min(steps, key=lambda pair: steps[pair].low)
    if steps[weakest].low > 0:
        return SUPPORTED, weakest
    clearest = min(contrasts, key=lambda pair: contrasts[pair].high)
    if contrasts[clearest].high < 0:
        return CONTRADICTED, clearest
    return INCONCLUSIVE, weakest


def _inverted_u(steps: dict[tuple[int, int], Interval]) -> str:
    """`` (an inverted U: …)`` where a step that rises (estimate > 0) precedes one that falls
    (interval < 0), saying whether the rise's interval excludes 0; else nothing."""
    pairs = list(steps)
    for i, rise in enumerate(pairs):
        falls = [fall for fall in pairs[i + 1 :] if steps[fall].high < 0]
        if steps[rise].estimate > 0 and falls:
            (a, b), (c, d) = rise, falls[0]
            unsure = "" if steps[rise].low > 0 else " (its interval includes 0: the rise is not established)"
            fall = f"k{d} − k{c} {steps[c, d]} falls"
            return f" (an inverted U: k{b} − k{a} {steps[rise]} rises{unsure}, then {fall})"
    return ""
