"""Head-mean attention metrics under the thesis's analysis choices, with a shot-boundary test
that locality and segment preferences cannot pass: one row per prompt × layer × choice.

An *analysis choice* (:data:`CHOICES`) says which tokens of a prompt a map is measured on;
queries and keys are both restricted to them, and a query sees the restricted keys j ≤ i:

- ``words``: the thesis's choice (ch. 8.2: "I chose to plot only the attention scores that
  address the words and clues; therefore, they do not sum to 1"): the tokens of
  :data:`attnscope.store.WORD_SEGMENTS` (shot words, shot clues, target, generated clue);
  template, instruction and sink are left out and the rows keep the values the model gave
  them, so a row's *visible mass* is below 1;
- ``words_renormalised``: the same tokens, every row renormalised over its visible keys;
- ``full``: the full causal rows as stored (the streamed metrics of :mod:`attnscope.metrics`);
- ``no_sink``: the full rows without the first token (the attention sink), renormalised.

Row averages run over the rows with at least two visible keys (``n_queries`` of them; a
row with no mass on its visible keys is left out too). On the choice's rows (for ``words``
the values as stored, whose row sums are the visible masses m_i ≤ 1):

- ``row_entropy``: mean of H(row) / log(number of visible keys). Entropy is a property of a
  distribution, so on ``words`` it is the entropy of the row's shape over its visible keys
  (the row divided by its visible mass; equal to ``words_renormalised``'s): a uniform row
  stays 1 however much mass lies outside;
- ``self_mass``, ``previous_mass``: mean attention on the query itself and on the previous
  *visible* key; ``sink_mass``: mean attention on the first token (NaN where it is not
  visible: ``words``, ``words_renormalised``, ``no_sink``);
- ``diagonal_share``: the share of rows that are diagonally dominant, a_ii ≥ Σ_{j≠i} a_ij over
  the visible keys (Horn & Johnson, *Matrix Analysis*, def. 6.1.9, row-wise; for a row of
  mass 1: a_ii ≥ ½); on ``words`` it is the dominance the thesis's plotted matrix shows;
- ``within_shot_mass``, ``across_shot_mass``: as :func:`attnscope.streamed.shot_masses`,
  over the visible queries of shots ≥ 2 (on ``words``: shares of the full row's mass);
- ``small_share``: the share of causal values ≤ :data:`SMALL_VALUE` (the thesis's "values
  lie mostly in [0, 0.1]"; it cannot fail: a row of mass ≤ 1 has at most 9 values above
  0.1); ``small_mass``: the share of the visible *mass* carried by those values, which can
  fail: 0 for one-hot rows, 1 for uniform rows over ≥ 10 keys.

``row_drop`` tests *within-shot > across-shot* inside one query row, the design of a
regression discontinuity (Imbens & Lemieux 2008, "Regression discontinuity designs: a guide to
practice", *J. Econometrics* 142: 615–635; placebo cutoffs, their sec. 7.3): each word row of a
shot ≥ 2 is fitted on its earlier keys of its own and the previous shot (the values as the model
gave them, values at or below :data:`FLOAT16_STEP` left out), log a_ij = c_i + β_i·own_j + δ_i·d_ij +
γ_i,kind(j), d the distance in the full prompt: a decay of the row's own sharpness, a level per key
segment (a shot's template tokens by their place), and a step β_i at the shot boundary. Own keys
are nearer and sit past a segment change, so distance and segments are in the row's model; a
decay whose sharpness depends on the query scores 0, since every row has its own δ and c.
``row_drop`` is the mean of β_i over the rows (a row needs :data:`MIN_SIDE_KEYS` keys on each side
and a cutoff its segments do not confound); ``row_placebo_previous`` and ``row_placebo_own`` are the
same step at placebo cutoffs inside a segment where no boundary is (:func:`_placebo_near`: the
middle of the previous shot's clue, fitted on its keys alone; the middle of the own shot's clue
keys before the query, fitted on those alone). A step those show as well is a misfit of the decay
(its curvature), not the shots.

``boundary_drop``, the statistic the claim read before, pools pairs over rows: over the causal
pairs from a query of shot ≥ 2 to a key of shot ≥ 1, a *cell* is a (distance pos(i) − pos(j) in
the full prompt, query segment, key segment) triple (a shot's template tokens are told apart by
their place: the label before the word, the end marker after the clue); the null E of a pair is
the map's mean over the pairs of its cell. Over the cells that hold both an own-shot and an
across-shot pair, ``boundary_drop`` = log(O_own / E_own) − log(O_across / E_across), O the
observed mass. Within a cell the null is the same for both, so a map that depends only on
distance and segments, the same way in every row, scores 0 (a shot-word preference, pure
locality), > 0 when attention drops at the shot boundaries, < 0 when it crosses them. Where no
cell holds both (a prompt format whose shots keep own- and other-shot keys of the same segments
at different distances) it is NaN: not identifiable. It is measured on the values as the model
gave them under every choice (renormalising scales each row by its own visible mass, which a
null built from pairs of different rows cannot match). Two placebos take the same statistic
with fake shots: ``placebo_drop`` with the shot boundaries moved to the middle of every shot
(:func:`placebo_shots`), and ``permuted_drop`` with the shot tokens' labels permuted at random
(:func:`permuted_shots`: own and other shots then mix at every distance, so any map scores
about 0). Inside a cell its own-shot pairs come from queries late in their shot and its
across-shot pairs from queries early in theirs, so a map without shots whose rows sharpen along
a segment scores far above 0: it compares different rows (``tests/test_within_shot.py`` keeps
that map as its regression test).

The metrics are vectorised over a prompt's layers and computed in the capture
(:mod:`attnscope.attention`) from the head-mean maps in memory, layers in chunks of
:data:`CHUNK_VALUES` map values; each prompt group stores them in its ``choices`` array
[layer, choice, :data:`STORED`], which :func:`choices_table` assembles into the table.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from attnscope.metrics import ROW_METRICS, as_float32, xlogx
from attnscope.store import TEMPLATE, WEIGHTS, WORD_SEGMENTS, open_store, prompt_groups, weighted_array

CHOICES = ("words", "words_renormalised", "full", "no_sink")
"""The analysis choices, the thesis's first."""
WORD_SUMS = "word_sums"
"""The thesis's word maps (Fig. 8.5; ch. 8.2: "Token aggregation involves summing all individual
pair-wise attention scores between all combinations of subword tokens to maintain the total sum so
that only the attention scores for entire words are visualized"): the stored ``word_attn_sum``
over the words of :data:`attnscope.store.WORD_SEGMENTS`, measured by :func:`word_sum_metrics`."""
TABLE_CHOICES = (*CHOICES, WORD_SUMS)
"""The choices of the choices table: the capture's, then the word maps."""
RENORMALISED = frozenset({"words_renormalised", "no_sink"})
"""The choices whose rows are renormalised over their visible keys."""
PARTIAL = frozenset({"words"})
"""The choices whose rows keep the model's values over a part of the keys (they sum to less than 1)."""
CHOICE_METRICS = (
    *ROW_METRICS,
    "diagonal_share",
    "boundary_drop",
    "placebo_drop",
    "permuted_drop",
    "row_drop",
    "row_placebo_previous",
    "row_placebo_own",
    "small_mass",
    "small_share",
)
"""The metric columns of the choices table, in order."""
COLUMNS = ("prompt_index", "prompt_id", "target", "layer", "choice", "n_queries", *CHOICE_METRICS)
"""The columns of the choices table, in order."""
STORED = ("n_queries", *CHOICE_METRICS)
"""The last axis (``choice_metric``) of a prompt group's ``choices`` array, float64."""
SMALL_VALUE = 0.1
"""The thesis's value domain of token-level attention, [0, 0.1] (ch. 8.2)."""
PERMUTATION_SEED = 0
"""Seeds the random permutation of the shot tokens' labels (:func:`permuted_shots`), the same for
every prompt and layer."""
MIN_SIDE_KEYS = 3
"""A row's jump at a cutoff (:func:`_row_jump`) is fitted where each side holds at least this many
keys: a line per side and a residual."""
FLOAT16_STEP = 2.0**-24
"""The smallest positive float16: the log-linear fits of :func:`_row_jump` leave out values at or
below it (the store rounds them to 0 or to this one step)."""
CHUNK_VALUES = 1 << 22
"""The capture measures a prompt's layers in chunks of about this many map values, which
bounds the float32 copies (16 MiB each) for long prompts of many layers."""


def visible_tokens(choice: str, token_segment: Sequence[str]) -> np.ndarray:
    """The token positions an analysis choice measures, ascending."""
    n = len(token_segment)
    if choice == "full":
        return np.arange(n)
    if choice == "no_sink":
        return np.arange(1, n)
    if choice in ("words", "words_renormalised"):
        return np.flatnonzero(np.isin(np.asarray(token_segment), WORD_SEGMENTS))
    raise ValueError(f"unknown analysis choice {choice!r}; expected one of {CHOICES}")


def _restrict(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``x[..., keep, keep]`` (a view when ``keep`` is a contiguous range)."""
    if len(keep) and keep[-1] - keep[0] + 1 == len(keep):
        return x[..., keep[0] : keep[-1] + 1, keep[0] : keep[-1] + 1]
    return x[..., keep[:, None], keep]


def _mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Σ values·weights / Σ weights over the last axis (NaN where the weights sum to 0)."""
    total = np.where(weights > 0, values * weights, 0.0).sum(axis=-1)
    count = weights.sum(axis=-1, dtype=np.float64)
    return np.divide(total, count, out=np.full(count.shape, np.nan), where=count > 0)


def _log_ratio(observed: np.ndarray, expected: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(observed / expected)
    return np.where((observed > 0) & (expected > 0), ratio, np.nan)


@dataclass(frozen=True)
class TokenLabels:
    """What the metrics know of a prompt's tokens: their shot, their shot under the placebo
    boundaries (:func:`placebo_shots`), their segment as an integer code, whether they are words
    (:data:`attnscope.store.WORD_SEGMENTS`); ``drops`` keeps
    the boundary drops of a measurement by its visible tokens, which choices share (``words``
    and ``words_renormalised`` see the same values as the model gave them)."""

    shot: np.ndarray
    placebo: np.ndarray
    permuted: np.ndarray
    kind: np.ndarray
    word: np.ndarray
    drops: dict[bytes, dict[str, np.ndarray]] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, token_segment: Sequence[str], token_shot: Sequence[int]) -> TokenLabels:
        """The labels of a prompt; a shot's template tokens are told apart by their place (the
        label before the word, the end marker after the clue), so no null matches them."""
        shot, kind = np.asarray(token_shot), np.asarray(token_segment, dtype=object).copy()
        for s in np.unique(shot[shot >= 1]):
            tokens = np.flatnonzero(shot == s)
            content = tokens[kind[tokens] != TEMPLATE]
            for t in tokens[kind[tokens] == TEMPLATE]:
                place = t - tokens[0] if not len(content) or t < content[0] else t - content[-1] + 1000
                kind[t] = f"{TEMPLATE}:{place}"
        codes = np.unique(kind.astype(str), return_inverse=True)[1].ravel()
        word = np.isin(np.asarray(token_segment), WORD_SEGMENTS)
        return cls(shot, placebo_shots(shot), permuted_shots(shot), codes, word)


def choice_metrics(
    maps: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int], choice: str
) -> tuple[np.ndarray, np.ndarray]:
    """One prompt's causal maps [layer, query, key] (float16 as stored, or float; zero above
    the diagonal) under one analysis choice: (values [layer, :data:`CHOICE_METRICS`],
    n_queries [layer])."""
    maps = np.asarray(maps)
    labels = TokenLabels.of(token_segment, token_shot)
    return _measure(as_float32(maps), xlogx(maps), token_segment, labels, choice)


def prompt_choices(
    maps: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` under every choice: (values [choice, layer, metric], n_queries
    [choice, layer]); the maps are converted once for all choices."""
    maps = np.asarray(maps)
    values32, terms = as_float32(maps), xlogx(maps)
    labels = TokenLabels.of(token_segment, token_shot)
    results = [_measure(values32, terms, token_segment, labels, choice) for choice in CHOICES]
    return np.stack([v for v, _ in results]), np.stack([n for _, n in results])


def _measure(
    values32: np.ndarray, terms: np.ndarray, token_segment: Sequence[str], labels: TokenLabels, choice: str
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` from the maps as float32 and their x·log x."""
    keep = visible_tokens(choice, token_segment)
    kept = TokenLabels(
        labels.shot[keep],
        labels.placebo[keep],
        labels.permuted[keep],
        labels.kind[keep],
        labels.word[keep],
        labels.drops,
    )
    return _choice_metrics(
        _restrict(values32, keep),
        _restrict(terms, keep),
        keep,
        kept,
        renormalise=choice in RENORMALISED,
        partial=choice in PARTIAL,
    )


def _choice_metrics(
    b: np.ndarray,
    terms: np.ndarray,
    keep: np.ndarray,
    labels: TokenLabels,
    renormalise: bool,
    partial: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` of the restricted maps ``b`` [layer, m, m] (float32), their
    x·log x ``terms``, the kept positions and their labels; ``partial``: rows that keep the
    model's values over a part of the keys, whose entropy is that of their shape."""
    num_layers, m = b.shape[0], len(keep)
    if m < 2:
        return np.full((num_layers, len(CHOICE_METRICS)), np.nan), np.zeros(num_layers, dtype=np.int64)
    row = np.arange(m)
    mass = b.sum(axis=2).astype(np.float64)  # [layer, row]
    valid = (mass > 0) & (row >= 1)
    if renormalise:
        scale = np.divide(1.0, mass, out=np.zeros_like(mass), where=valid)
        r = b * scale[:, :, None].astype(np.float32)  # the choice's rows (0 for rows left out)
    else:
        scale, r = valid.astype(np.float64), b  # rows as stored (rows left out: row 0, or all 0)
    # H(b/s) = log s − Σ b log b / s: the entropy of a row's shape over its visible keys; the
    # full rows' (mass 1) is −Σ b log b.
    plogp = terms.sum(axis=2, dtype=np.float64)
    if renormalise or partial:
        entropy = np.log(np.where(valid, mass, 1.0)) - plogp * np.divide(
            1.0, mass, out=np.zeros_like(mass), where=valid
        )
    else:
        entropy = -plogp * scale
    visible_keys = row + 1
    row_mass = mass * scale
    diagonal = np.diagonal(r, axis1=1, axis2=2)
    out = dict.fromkeys(CHOICE_METRICS, np.full(num_layers, np.nan))
    out["row_entropy"] = _mean(entropy / np.log(np.maximum(visible_keys, 2)), valid)
    out["self_mass"] = _mean(diagonal, valid)
    out["diagonal_share"] = _mean(2 * diagonal.astype(np.float64) >= row_mass, valid)
    out["previous_mass"] = _mean(np.diagonal(r, -1, axis1=1, axis2=2), valid[:, 1:])
    if keep[0] == 0:
        out["sink_mass"] = _mean(r[:, :, 0], valid)
    # The values above SMALL_VALUE are few (at most 9 per row of mass ≤ 1): count them, not the rest.
    large = np.flatnonzero(r > SMALL_VALUE)
    large_row = large // m  # [layer × row] index
    n_large = np.bincount(large_row, minlength=num_layers * m).reshape(num_layers, m)
    large_mass = np.bincount(large_row, r.reshape(-1)[large], minlength=num_layers * m).reshape(num_layers, m)
    out["small_share"] = ((visible_keys - n_large) * valid).sum(axis=1) / (visible_keys * valid).sum(axis=1)
    out["small_mass"] = ((row_mass - large_mass) * valid).sum(axis=1) / (row_mass * valid).sum(axis=1)
    queries = np.flatnonzero((labels.shot >= 2) & (row >= 1))
    if len(queries):
        out |= _shot_metrics(r, b, valid, keep, labels, queries)
    return np.stack([out[name] for name in CHOICE_METRICS], axis=1), valid.sum(axis=1)


def word_sum_metrics(
    sums: np.ndarray, word_segment: Sequence[str], word_shot: Sequence[int], word_position: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` of one prompt's word maps [layer, query word, key word] (``word_attn_sum``
    of the words of :data:`WORD_SEGMENTS`, their segments, shots and first tokens' positions). A
    word row sums its subword rows' mass on the visible words, so it can exceed 1; it is read as
    the thesis plotted it, as given: the entropy of its shape, diagonal dominance a_ww ≥ Σ_{v≠w} a_wv,
    the self, within- and across-shot masses and ``small_mass`` (the share of the row's mass on
    summed values ≤ 0.1) of the summed values; the row drops fit the word rows on the words'
    distances (their first tokens')."""
    sums = np.asarray(sums, dtype=np.float32)
    labels = TokenLabels.of(word_segment, word_shot)
    return _choice_metrics(
        sums, xlogx(sums), np.asarray(word_position), labels, renormalise=False, partial=True
    )


def placebo_shots(token_shot: Sequence[int]) -> np.ndarray:
    """Shot labels with every boundary moved to the middle of a shot: the tokens of shots ≥ 1
    (token positions of the full prompt) are relabelled 1..k + 1 at the midpoints between the
    shots' first tokens (and of the last shot's span), so every fake boundary cuts a real shot
    in two. Tokens outside the shots keep 0."""
    shot = np.asarray(token_shot)
    positions = np.arange(len(shot))
    labels = np.unique(shot[shot >= 1])
    if not len(labels):
        return np.zeros_like(shot)
    firsts = np.array([positions[shot == s][0] for s in labels])
    ends = np.append(firsts[1:], positions[shot == labels[-1]][-1] + 1)
    boundaries = (firsts + ends) / 2  # the middle of each shot's span
    return np.where(shot >= 1, 1 + np.searchsorted(boundaries, positions, side="right"), 0)


def permuted_shots(token_shot: Sequence[int], seed: int = PERMUTATION_SEED) -> np.ndarray:
    """Shot labels permuted at random among the tokens of shots ≥ 1 (each shot keeps its number
    of tokens; seeded); tokens outside the shots keep 0. The fake shots are scattered, so own- and
    other-shot keys of the same segments meet at every distance."""
    shot = np.asarray(token_shot).copy()
    inside = shot >= 1
    shot[inside] = np.random.default_rng(seed).permutation(shot[inside])
    return shot


def _boundary_drop(
    r: np.ndarray, valid: np.ndarray, keep: np.ndarray, shot: np.ndarray, kind: np.ndarray
) -> np.ndarray:
    """[layer]: log(O_own / E_own) − log(O_across / E_across) over the causal pairs from a query
    of shot ≥ 2 to a key of shot ≥ 1 (``shot``: labels of the kept tokens), where E is the null
    that matches each pair on its distance pos(i) − pos(j), its query's segment and its key's
    segment (``kind``): the mean of the map over the pairs of that cell. Only cells with both an
    own-shot and an across-shot pair count, so a map that depends on distance and segments
    alone scores 0 (NaN without such a cell)."""
    num_layers, m = r.shape[0], len(keep)
    query, key = np.nonzero(np.tri(m, m, dtype=bool) & (shot[:, None] >= 2) & (shot[None, :] >= 1))
    keep_pair = query >= 1  # row 0 sees only itself
    query, key = query[keep_pair], key[keep_pair]
    if not len(query):
        return np.full(num_layers, np.nan)
    own = shot[query] == shot[key]
    kinds = int(kind.max()) + 1
    code = ((keep[query] - keep[key]) * kinds + kind[query]) * kinds + kind[key]
    _, cell = np.unique(code, return_inverse=True)
    cells = cell.max() + 1
    matched = (np.bincount(cell, own, cells) > 0) & (np.bincount(cell, ~own, cells) > 0)
    pair = matched[cell]
    if not pair.any():
        return np.full(num_layers, np.nan)
    query, key, own, cell = query[pair], key[pair], own[pair], cell[pair]
    order = np.argsort(cell, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(cell[order]) > 0])
    of_pair = np.searchsorted(cell[order][starts], cell)  # each pair's cell among the kept ones
    weight = valid[:, query].astype(np.float64)  # [layer, pair]
    # A cell counts in a layer only where its valid rows hold both an own and an across pair.
    own_valid = np.add.reduceat((weight * own)[:, order], starts, axis=1)
    across_valid = np.add.reduceat((weight * ~own)[:, order], starts, axis=1)
    weight *= ((own_valid > 0) & (across_valid > 0))[:, of_pair]
    observed = r[:, query, key].astype(np.float64) * weight
    # The null: each cell's mean over its valid pairs, layer by layer (pairs sorted by cell).
    sums = np.add.reduceat(observed[:, order], starts, axis=1)
    counts = np.add.reduceat(weight[:, order], starts, axis=1)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    expected = means[:, of_pair] * weight

    def log_ratio(part: np.ndarray) -> np.ndarray:
        return _log_ratio(observed[:, part].sum(axis=1), expected[:, part].sum(axis=1))

    return log_ratio(own) - log_ratio(~own)


ROW_DROPS = ("row_drop", "row_placebo_previous", "row_placebo_own")
"""The within-row boundary drop and its placebo cutoffs (:func:`_row_drops`)."""


def _row_jump(values: np.ndarray, distance: np.ndarray, kind: np.ndarray, near: np.ndarray) -> np.ndarray:
    """[layer]: the jump of one query row's attention ``values`` [key, layer] at a cutoff between its
    ``near`` keys and the farther rest: the least-squares fit log a = c + β·near + δ·distance +
    γ_kind of the row, a decay with distance of the row's own sharpness, a term per key segment
    (``kind``) and a step at the cutoff; β is the jump. Values at or below :data:`FLOAT16_STEP` are
    left out (censored: their log is unknown). NaN where a side holds fewer than
    :data:`MIN_SIDE_KEYS` keys or the segments confound the cutoff (a design not of full rank)."""
    jump = np.full(values.shape[1], np.nan)
    measured = values > FLOAT16_STEP
    if measured.all():  # the common case, without np.unique's sort of the columns or copies
        groups = [(slice(None), slice(None))]
    else:  # layers sharing their measured keys
        patterns, of_layer = np.unique(measured, axis=1, return_inverse=True)
        groups = [(keys, of_layer.ravel() == pattern) for pattern, keys in enumerate(patterns.T)]
    for keys, layers in groups:
        side = near[keys]
        n_near = np.count_nonzero(side)
        if min(n_near, len(side) - n_near) < MIN_SIDE_KEYS:
            continue
        _, segment = np.unique(kind[keys], return_inverse=True)  # the segments present, in code order
        segments = segment[:, None] == np.arange(1, segment.max() + 1)  # one-hot, the first left out
        design = np.column_stack([np.ones(len(side)), side, distance[keys], segments])
        coefficients, _, rank, _ = np.linalg.lstsq(design, np.log(values[keys][:, layers]), rcond=None)
        if rank == design.shape[1]:
            jump[layers] = coefficients[1]
    return jump


def _placebo_near(part: np.ndarray, position: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """The near side of a placebo cutoff among the keys of ``part``: those past the middle of the
    positions of its most frequent segment (a shot's clue), so the cutoff falls inside a segment."""
    if not part.any():
        return part
    inside = part & (kind == np.bincount(kind[part]).argmax())
    return part & (position > (position[inside].min() + position[inside].max()) / 2)


def _row_drops(b: np.ndarray, keep: np.ndarray, labels: TokenLabels) -> dict[str, np.ndarray]:
    """:data:`ROW_DROPS` [layer] of the maps as the model gave them, ``b`` [layer, m, m]: the mean
    over the word rows of shots ≥ 2 of :func:`_row_jump`, each row fitted on its earlier keys of its
    own shot and the previous shot (log attention, the row's scale in its intercept): at the shot
    boundary (near: the own shot's keys), and at placebo cutoffs inside a segment
    (:func:`_placebo_near`) of the previous shot (its keys alone) and of the own shot (its keys
    alone). A fit whose jump is not identified in a layer does not count there."""
    shot, index = labels.shot, np.arange(len(keep))
    jumps = []  # [row, drop, layer]
    for i in np.flatnonzero(labels.word & (shot >= 2) & (index >= 1)):
        keys = np.flatnonzero((index < i) & ((shot == shot[i]) | (shot == shot[i] - 1)))
        own, position = shot[keys] == shot[i], keep[keys]
        row, distance, kind = b[:, i, keys].T.astype(np.float64), keep[i] - position, labels.kind[keys]
        fits = [
            (np.ones_like(own), own),
            (~own, _placebo_near(~own, position, kind)),
            (own, _placebo_near(own, position, kind)),
        ]
        jumps.append([_row_jump(row[p], distance[p], kind[p], near[p]) for p, near in fits])
    values = np.asarray(jumps, dtype=np.float64).reshape(-1, len(ROW_DROPS), b.shape[0]).transpose(1, 2, 0)
    return {name: _mean(np.nan_to_num(v), ~np.isnan(v)) for name, v in zip(ROW_DROPS, values)}


def _shot_metrics(
    r: np.ndarray,
    b: np.ndarray,
    valid: np.ndarray,
    keep: np.ndarray,
    labels: TokenLabels,
    queries: np.ndarray,
) -> dict[str, np.ndarray]:
    """Within- and across-shot masses of the choice's rows ``r`` at ``queries`` (shots ≥ 2), and
    the boundary drop at the real shots and at the two placebos' (:func:`placebo_shots`,
    :func:`permuted_shots`) and the within-row drops (:func:`_row_drops`), on the values as the
    model gave them, ``b``: renormalising scales each row by its own visible mass, which a null of
    pairs from different rows cannot match."""
    shot = labels.shot
    query_shot = shot[queries][:, None]
    causal = keep[queries][:, None] >= keep[None, :]
    own = causal & (shot == query_shot)
    across = causal & (shot >= 1) & ~own
    rows = r[:, queries]
    q_valid = valid[:, queries]
    drops = labels.drops.get(keep.tobytes())
    if drops is None:
        drops = {
            "boundary_drop": _boundary_drop(b, valid, keep, shot, labels.kind),
            "placebo_drop": _boundary_drop(b, valid, keep, labels.placebo, labels.kind),
            "permuted_drop": _boundary_drop(b, valid, keep, labels.permuted, labels.kind),
        }
        labels.drops[keep.tobytes()] = drops
    keys = b"rows" + keep[shot >= 1].tobytes()  # the row drops read the shots' tokens alone
    row_drops = labels.drops.get(keys)
    if row_drops is None:
        row_drops = labels.drops[keys] = _row_drops(b, keep, labels)
    return {
        "within_shot_mass": _mean(np.einsum("lqk,qk->lq", rows, own), q_valid),
        "across_shot_mass": _mean(np.einsum("lqk,qk->lq", rows, across), q_valid),
        **drops,
        **row_drops,
    }


def stored_choices(maps: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int]) -> np.ndarray:
    """:func:`prompt_choices` of head-mean maps [layer, query, key] as a ``choices`` array
    [layer, choice, :data:`STORED`] (``n_queries`` as float64)."""
    values, n_queries = prompt_choices(maps, token_segment, token_shot)
    return np.concatenate([n_queries[:, :, None].astype(np.float64), values], axis=2).transpose(1, 0, 2)


def word_sum_choices(group: Any, weighting: str = WEIGHTS) -> np.ndarray:
    """:func:`word_sum_metrics` of a prompt group's stored word maps as one more choice of its
    ``choices`` array: [layer, 1, :data:`STORED`]."""
    attrs, words = group.attrs, group.attrs["map_words"]
    token_word = np.asarray(attrs["token_word"])
    values, n_queries = word_sum_metrics(
        group[weighted_array("word_attn_sum", weighting)][...],
        [attrs["word_segment"][w] for w in words],
        [attrs["word_shot"][w] for w in words],
        [np.flatnonzero(token_word == w)[0] for w in words],
    )
    return np.concatenate([n_queries[:, None].astype(np.float64), values], axis=1)[:, None]


def choices_table(path: str | os.PathLike, weighting: str = WEIGHTS) -> pd.DataFrame:
    """An attention store's head-mean maps under every analysis choice, assembled from each
    prompt group's ``choices`` array (``value_choices`` for the value-weighted maps) and its word
    maps (:data:`WORD_SUMS`): one row per prompt × layer × choice of :data:`TABLE_CHOICES` with the
    columns of :data:`COLUMNS`."""
    frames = []
    for group in prompt_groups(open_store(path)):
        attrs = group.attrs
        stored = np.concatenate(
            [group[weighted_array("choices", weighting)][...], word_sum_choices(group, weighting)], axis=1
        )
        num_layers, num_choices = stored.shape[:2]
        frame = pd.DataFrame(stored[:, :, 1:].reshape(-1, len(CHOICE_METRICS)), columns=list(CHOICE_METRICS))
        frame.insert(0, "prompt_index", attrs["prompt_index"])
        frame.insert(1, "prompt_id", attrs["prompt_id"])
        frame.insert(2, "target", attrs["target"])
        frame.insert(3, "layer", np.repeat(np.arange(num_layers), num_choices))
        frame.insert(4, "choice", np.tile(TABLE_CHOICES, num_layers))
        frame.insert(5, "n_queries", stored[:, :, 0].ravel().astype(np.int64))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
