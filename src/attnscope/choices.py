"""Head-mean attention metrics under the thesis's analysis choices, with a distance-matched
null (issue 17, items 4 and 5): one row per prompt × layer × choice.

An *analysis choice* (:data:`CHOICES`) says which tokens of a prompt a map is measured on;
queries and keys are both restricted to them, and a query sees the restricted keys j ≤ i:

- ``words``: the thesis's choice ("I chose to plot only the attention scores that address
  the words and clues"): the tokens of :data:`attnscope.store.WORD_SEGMENTS` (shot words,
  shot clues, target, generated clue); template, instruction and sink are left out and
  every row is renormalised over its visible keys;
- ``full``: the full causal rows as stored (the streamed metrics of :mod:`attnscope.metrics`);
- ``no_sink``: the full rows without the first token (the attention sink), renormalised.

Row averages run over the rows with at least two visible keys (``n_queries`` of them; a
row with no mass on its visible keys is left out too). On the choice's rows:

- ``row_entropy``: mean of H(row) / log(number of visible keys);
- ``self_mass``, ``previous_mass``: mean attention on the query itself and on the previous
  *visible* key; ``sink_mass``: mean attention on the first token (NaN where it is not
  visible: ``words``, ``no_sink``);
- ``within_shot_mass``, ``across_shot_mass``: as :func:`attnscope.metrics.shot_masses`,
  over the visible queries of shots ≥ 2;
- ``small_share``: the share of causal values ≤ :data:`SMALL_VALUE` (the thesis's "values
  lie mostly in [0, 0.1]"; it cannot fail: a row of mass ≤ 1 has at most 9 values above
  0.1); ``small_mass``: the share of attention *mass* carried by those values, which can
  fail: 0 for one-hot rows, 1 for uniform rows over ≥ 10 keys.

The null model tests *within-shot > across-shot* against pure locality. The
*distance-matched null* N of a (restricted, renormalised) map a puts on every causal
query–key pair the map's mean attention at that pair's distance d = pos(i) − pos(j) (token
positions of the full prompt; the mean over the rows that have a visible key at distance d),
each row renormalised over its visible keys: a map that depends only on the distance is its
own null. ``within_shot_null``, ``across_shot_null`` are the shot masses of N; a map with
within > across only through locality has within ≈ within_null.
``boundary_drop`` = log(O_own / E_own) − log(O_prev / E_prev): over the queries of shots ≥ 2
and the distances at which both a key of the query's own shot and a key of the preceding
shot occur, O is the observed and E the null mass on own-shot (preceding-shot) keys. At one
distance the null is the same for both, so locality cancels: ≈ 0 when attention depends only
on the distance, > 0 when it drops at shot boundaries (pooled masses rather than per-query
ratios, which tiny null values make unstable).

The metrics are vectorised over a prompt's layers and computed in the capture
(:mod:`attnscope.attention`) from the head-mean maps in memory, layers in chunks of
:data:`CHUNK_VALUES` map values; each prompt group stores them in its ``choices`` array
[layer, choice, :data:`STORED`], which :func:`choices_table` assembles into the table.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import as_strided

from attnscope.metrics import as_float32, xlogx
from attnscope.store import WORD_SEGMENTS, open_store, prompt_groups

CHOICES = ("words", "full", "no_sink")
"""The analysis choices, the thesis's first."""
CHOICE_METRICS = (
    "row_entropy",
    "self_mass",
    "previous_mass",
    "sink_mass",
    "within_shot_mass",
    "across_shot_mass",
    "within_shot_null",
    "across_shot_null",
    "boundary_drop",
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
    if choice == "words":
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


def choice_metrics(
    maps: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int], choice: str
) -> tuple[np.ndarray, np.ndarray]:
    """One prompt's causal maps [layer, query, key] (float16 as stored, or float; zero above
    the diagonal) under one analysis choice: (values [layer, :data:`CHOICE_METRICS`],
    n_queries [layer])."""
    maps = np.asarray(maps)
    return _measure(as_float32(maps), xlogx(maps), token_segment, np.asarray(token_shot), choice)


def prompt_choices(
    maps: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` under every choice: (values [choice, layer, metric], n_queries
    [choice, layer]); the maps are converted once for all choices."""
    maps = np.asarray(maps)
    values32, terms, shot = as_float32(maps), xlogx(maps), np.asarray(token_shot)
    results = [_measure(values32, terms, token_segment, shot, choice) for choice in CHOICES]
    return np.stack([v for v, _ in results]), np.stack([n for _, n in results])


def _measure(
    values32: np.ndarray, terms: np.ndarray, token_segment: Sequence[str], shot: np.ndarray, choice: str
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` from the maps as float32 and their x·log x."""
    keep = visible_tokens(choice, token_segment)
    return _choice_metrics(
        _restrict(values32, keep), _restrict(terms, keep), keep, shot[keep], renormalise=choice != "full"
    )


def _choice_metrics(
    b: np.ndarray, terms: np.ndarray, keep: np.ndarray, shot: np.ndarray, renormalise: bool
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choice_metrics` of the restricted maps ``b`` [layer, m, m] (float32), their
    x·log x ``terms``, the kept positions and their shots."""
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
    # H(b/s) = log s − Σ b log b / s; the stored rows' entropy is −Σ b log b.
    entropy = -terms.sum(axis=2, dtype=np.float64) * scale
    if renormalise:
        entropy += np.log(np.where(valid, mass, 1.0))
    visible_keys = row + 1
    out = dict.fromkeys(CHOICE_METRICS, np.full(num_layers, np.nan))
    out["row_entropy"] = _mean(entropy / np.log(np.maximum(visible_keys, 2)), valid)
    out["self_mass"] = _mean(np.diagonal(r, axis1=1, axis2=2), valid)
    out["previous_mass"] = _mean(np.diagonal(r, -1, axis1=1, axis2=2), valid[:, 1:])
    if keep[0] == 0:
        out["sink_mass"] = _mean(r[:, :, 0], valid)
    # The values above SMALL_VALUE are few (at most 9 per row of mass ≤ 1): count them, not the rest.
    large = np.flatnonzero(r > SMALL_VALUE)
    large_row = large // m  # [layer × row] index
    n_large = np.bincount(large_row, minlength=num_layers * m).reshape(num_layers, m)
    large_mass = np.bincount(large_row, r.reshape(-1)[large], minlength=num_layers * m).reshape(num_layers, m)
    row_mass = mass * scale
    out["small_share"] = ((visible_keys - n_large) * valid).sum(axis=1) / (visible_keys * valid).sum(axis=1)
    out["small_mass"] = ((row_mass - large_mass) * valid).sum(axis=1) / (row_mass * valid).sum(axis=1)
    queries = np.flatnonzero((shot >= 2) & (row >= 1))
    if len(queries):
        out |= _shot_metrics(r, valid, keep, shot, queries)
    return np.stack([out[name] for name in CHOICE_METRICS], axis=1), valid.sum(axis=1)


def _distance_sums(r: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distances, sums [layer, distance]): the sum of ``r`` [layer, m, m] over the causal pairs
    of rows ≥ 1 at each query–key distance pos(i) − pos(j) that occurs."""
    num_layers, m = r.shape[0], len(keep)
    if keep[-1] - keep[0] + 1 == m:  # consecutive positions: distance d is the d-th subdiagonal
        # A view by_distance[l, i, d] = r[l, 1 + i, 1 + i − d] of the C-ordered maps: where
        # 1 + i − d < 0 it reads the tail of row i, above the diagonal, so 0 (one pass, no copy).
        r = np.ascontiguousarray(r)
        step = r.strides[2]
        by_distance = as_strided(
            r[:, 1:, 1:], (num_layers, m - 1, m), (r.strides[0], r.strides[1] + step, -step), writeable=False
        )
        return np.arange(m), by_distance.sum(axis=1, dtype=np.float64)
    causal = np.tri(m, m, dtype=bool)
    causal[0] = False
    flat = np.flatnonzero(causal)
    pair_distance = (keep[:, None] - keep[None, :]).ravel()[flat]
    order = np.argsort(pair_distance, kind="stable")
    distances, starts = np.unique(pair_distance[order], return_index=True)
    sums = np.add.reduceat(r.reshape(num_layers, -1)[:, flat[order]], starts, axis=1, dtype=np.float64)
    return distances, sums


def _by_distance(keys: np.ndarray, distance: np.ndarray, bins: int) -> np.ndarray:
    """[row, distance]: 1 where the row has a key of ``keys`` (bool [row, key]) at that distance."""
    out = np.zeros((keys.shape[0], bins))
    rows, cols = np.nonzero(keys)
    out[rows, distance[rows, cols]] = 1
    return out


def _distance_means(r: np.ndarray, valid: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """[layer, distance]: the mean of the maps ``r`` over the valid rows' causal pairs at each
    distance pos(i) − pos(j) (0 where no pair has that distance)."""
    distance = keep[:, None] - keep[None, :]
    bins = int(distance.max()) + 1
    distances, sums = _distance_sums(r, keep)
    counts = (valid.astype(np.float64) @ _by_distance(distance >= 0, distance, bins))[:, distances]
    means = np.zeros((r.shape[0], bins))
    means[:, distances] = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    return means


def _shot_metrics(
    r: np.ndarray, valid: np.ndarray, keep: np.ndarray, shot: np.ndarray, queries: np.ndarray
) -> dict[str, np.ndarray]:
    """Observed and null shot masses and the boundary drop of the rows ``queries`` (shots ≥ 2).

    A row has at most one key at each distance, so the null's mass of query q on a key set K
    is Σ_d mean(d)·[q has a key of K at d] / Σ_d mean(d)·[q has a key at d]: one product of
    the distance means with per-query indicators, no null map."""
    query_shot = shot[queries][:, None]
    distance = keep[queries][:, None] - keep[None, :]  # [query, key]
    causal = distance >= 0
    own = causal & (shot == query_shot)
    previous = causal & (shot == query_shot - 1)
    matched = np.isin(distance, np.intersect1d(distance[own], distance[previous]))
    key_sets = {"own": own, "across": causal & (shot >= 1) & ~own, "own_matched": own & matched}
    key_sets["previous_matched"] = previous & matched
    rows = r[:, queries]
    observed = {name: np.einsum("lqk,qk->lq", rows, keys) for name, keys in key_sets.items()}
    means = _distance_means(r, valid, keep)
    indicators = [_by_distance(keys, distance, means.shape[1]) for keys in (causal, *key_sets.values())]
    null_mass = means @ np.concatenate(indicators).T  # [layer, key set × query]
    total, *masses = np.split(null_mass, len(indicators), axis=1)
    q_valid = valid[:, queries]
    share = np.divide(masses, total, out=np.zeros_like(masses), where=(total > 0) & q_valid)
    null = dict(zip(key_sets, share))

    def drop(name: str) -> np.ndarray:
        return _log_ratio(observed[name].sum(axis=1), null[name].sum(axis=1))

    return {
        "within_shot_mass": _mean(observed["own"], q_valid),
        "across_shot_mass": _mean(observed["across"], q_valid),
        "within_shot_null": _mean(null["own"], q_valid),
        "across_shot_null": _mean(null["across"], q_valid),
        "boundary_drop": drop("own_matched") - drop("previous_matched"),
    }


def stored_choices(maps: np.ndarray, token_segment: Sequence[str], token_shot: Sequence[int]) -> np.ndarray:
    """:func:`prompt_choices` of head-mean maps [layer, query, key] as a ``choices`` array
    [layer, choice, :data:`STORED`] (``n_queries`` as float64)."""
    values, n_queries = prompt_choices(maps, token_segment, token_shot)
    return np.concatenate([n_queries[:, :, None].astype(np.float64), values], axis=2).transpose(1, 0, 2)


def choices_table(path: str | os.PathLike) -> pd.DataFrame:
    """An attention store's head-mean maps under every analysis choice, assembled from each
    prompt group's ``choices`` array: one row per prompt × layer × choice with the columns of
    :data:`COLUMNS`."""
    frames = []
    for group in prompt_groups(open_store(path)):
        attrs, stored = group.attrs, group["choices"][...]
        num_layers, num_choices = stored.shape[:2]
        frame = pd.DataFrame(stored[:, :, 1:].reshape(-1, len(CHOICE_METRICS)), columns=list(CHOICE_METRICS))
        frame.insert(0, "prompt_index", attrs["prompt_index"])
        frame.insert(1, "prompt_id", attrs["prompt_id"])
        frame.insert(2, "target", attrs["target"])
        frame.insert(3, "layer", np.repeat(np.arange(num_layers), num_choices))
        frame.insert(4, "choice", np.tile(CHOICES, num_layers))
        frame.insert(5, "n_queries", stored[:, :, 0].ravel().astype(np.int64))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
