"""The edges a knockout blocks: sets of [query, key] pairs of one sequence, built from the prompt's
token segments and shots (:class:`attnscope.prompts.Annotation`), so that a set means the same in
every task format; :mod:`attnscope.knockout` blocks them at run time. The edge sets
(:data:`attnscope.variants.EDGE_SETS`):

- ``target-shots``, ``target-shotwords``, ``target-shotclues``, ``target-instruction``: every query
  from the target's first token on (the target word, the template tokens after it that predict the
  clue, the generated clue) to the shots (their words and their clues), the shot words, the shot
  clues, the instruction;
- ``across-shots``: every token of a shot to every token of the earlier shots;
- ``clue-ownword``: a shot's clue tokens to its own shot word;
- ``control-{edges}-s{seed}``: the matched random control of ``{edges}`` (:func:`control_edges`):
  in each query row that ``{edges}`` blocks, as many keys drawn (seeded by ``seed`` and the
  prompt's token ids) from the row's earlier keys outside the set, never the sequence's first token
  (most models park attention there, an attention sink, which no named set blocks), the target word
  or the query's own segment, stratum by stratum of the distance to the query.

Tokens after the prompt (a generated clue, or one appended for teacher forcing)
are queries of the ``continuation`` row: they lose the same prompt keys whatever their number.
A query always keeps itself (and every named set blocks only earlier keys), so no row is ever
fully blocked and the softmax renormalises the rest of the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from attnscope import prompts, variants
from attnscope.store import INSTRUCTION_SEGMENT, SHOT_CLUE, SHOT_WORD, TARGET

TARGET_KEYS = {
    variants.TARGET_SHOTS: (SHOT_WORD, SHOT_CLUE),
    variants.TARGET_SHOTWORDS: (SHOT_WORD,),
    variants.TARGET_SHOTCLUES: (SHOT_CLUE,),
    variants.TARGET_INSTRUCTION: (INSTRUCTION_SEGMENT,),
}
"""The key segments of each ``target-*`` edge set."""


@dataclass(frozen=True)
class BlockedEdges:
    """The edges a knockout blocks in one sequence whose first ``n`` tokens are the prompt:
    ``prompt`` [query, key] (n × n, bool) among the prompt's tokens, and ``continuation`` [key]
    (n, bool): the prompt keys blocked for every query after the prompt. Keys after the prompt
    are never blocked, nor a query's own key (so no row is fully blocked)."""

    prompt: np.ndarray
    continuation: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.continuation)
        if self.prompt.shape != (n, n):
            raise ValueError(f"blocked edges: prompt {self.prompt.shape} for a continuation of {n} keys")
        if np.diagonal(self.prompt).any():
            raise ValueError("blocked edges: a query must keep its own key (its row would be empty)")

    @cached_property
    def _table(self) -> torch.Tensor:
        """The prompt's rows, then the continuation row [n + 1, n]."""
        return torch.from_numpy(np.vstack([self.prompt, self.continuation[None]]))

    def between(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """[query, key] bool: whether each (query, key) pair of absolute positions is blocked."""
        n = len(self.continuation)
        rows = self._table.to(queries.device)[queries.clamp(max=n)]
        blocked = torch.zeros(len(queries), len(keys), dtype=torch.bool, device=queries.device)
        inside = keys < n
        blocked[:, inside] = rows[:, keys[inside]]
        return blocked

    def dense(self, length: int) -> np.ndarray:
        """[query, key] bool of a sequence of ``length`` tokens (the prompt and what follows it)."""
        n = len(self.continuation)
        blocked = np.zeros((length, length), dtype=bool)
        blocked[: min(n, length), : min(n, length)] = self.prompt[:length, :length]
        blocked[n:, : min(n, length)] = self.continuation[:length]
        return blocked


def _prompt_labels(annotation: prompts.Annotation, n_prompt: int) -> tuple[np.ndarray, np.ndarray]:
    """(segment, shot) of the prompt's tokens."""
    if not 0 < n_prompt <= len(annotation.input_ids):
        raise ValueError(f"n_prompt={n_prompt}: the annotation has {len(annotation.input_ids)} tokens")
    return np.asarray(annotation.token_segment[:n_prompt]), np.asarray(annotation.token_shot[:n_prompt])


def named_edges(annotation: prompts.Annotation, n_prompt: int, edges: str) -> BlockedEdges:
    """The edges of a named set (module docstring) in the prompt of ``annotation`` (its first
    ``n_prompt`` tokens)."""
    segment, shot = _prompt_labels(annotation, n_prompt)
    earlier = np.tri(n_prompt, k=-1, dtype=bool)  # key before query: the query keeps itself
    continuation = np.zeros(n_prompt, dtype=bool)
    if edges in TARGET_KEYS:
        targets = np.flatnonzero(segment == TARGET)
        if not len(targets):
            raise ValueError(f"knockout {edges}: the prompt has no {TARGET} token")
        continuation = np.isin(segment, TARGET_KEYS[edges])
        prompt = (np.arange(n_prompt) >= targets[0])[:, None] & continuation[None, :]
    elif edges == variants.ACROSS_SHOTS:
        prompt = (shot[:, None] > shot[None, :]) & (shot[None, :] > 0)
    elif edges == variants.CLUE_OWNWORD:
        own_shot = (shot[:, None] == shot[None, :]) & (shot[:, None] > 0)
        prompt = (segment[:, None] == SHOT_CLUE) & (segment[None, :] == SHOT_WORD) & own_shot
    else:
        raise ValueError(
            f"unknown knockout edge set {edges!r}; expected one of {', '.join(variants.EDGE_SETS)}"
        )
    return BlockedEdges(prompt & earlier, continuation)


def segment_runs(annotation: prompts.Annotation, n_prompt: int) -> np.ndarray:
    """Each prompt token's segment run: a run ends wherever the segment or the shot changes (a
    shot's word and its clue are two runs, the template between them a third)."""
    segment, shot = _prompt_labels(annotation, n_prompt)
    return np.cumsum(np.r_[True, (segment[1:] != segment[:-1]) | (shot[1:] != shot[:-1])])


STRATA_PER_OCTAVE = 4
"""Distance strata per doubling of the distance: within a stratum distances differ by < 2^(1/4) ≈ 1.19×."""


def distance_stratum(distance: np.ndarray) -> np.ndarray:
    """The distance stratum of query − key distances ≥ 1: ⌊4 log₂ d⌋ (:data:`STRATA_PER_OCTAVE`)."""
    return np.floor(STRATA_PER_OCTAVE * np.log2(distance)).astype(int)


def _matched(
    rng: np.random.Generator, pool: np.ndarray, blocked: np.ndarray, query: int, where: str
) -> np.ndarray:
    """As many keys of ``pool`` as ``blocked`` holds, drawn stratum by stratum of their distance to
    ``query`` (:func:`distance_stratum`); a stratum the pool cannot fill takes the rest from the
    nearest strata the pool still holds, at random among equally near keys."""
    if len(blocked) > len(pool):
        raise ValueError(
            f"{where}: {len(blocked)} keys to block, only {len(pool)} eligible for the matched control"
        )
    pool_strata, wanted = distance_stratum(query - pool), distance_stratum(query - blocked)
    left = np.ones(len(pool), dtype=bool)
    short = []
    for stratum, count in zip(*np.unique(wanted, return_counts=True)):
        here = np.flatnonzero(left & (pool_strata == stratum))
        taken = rng.choice(here, size=min(count, len(here)), replace=False)
        left[taken] = False
        short += [stratum] * (count - len(taken))
    for stratum in short:
        gap = np.where(left, np.abs(pool_strata - stratum), np.iinfo(np.int64).max)
        left[rng.choice(np.flatnonzero(gap == gap.min()))] = False
    return pool[~left]


def control_edges(
    annotation: prompts.Annotation, n_prompt: int, named: BlockedEdges, seed: int
) -> BlockedEdges:
    """The matched random control of ``named``: in each of its query rows (and its continuation
    row, whose distances count from the first token after the prompt) as many keys, drawn from the
    row's earlier keys outside ``named`` that are neither the first token, nor the target word,
    nor in the query's own segment run (:func:`segment_runs`), stratified by distance
    (:func:`_matched`); seeded by ``seed`` and the prompt's token ids, so a prompt gets the same
    draw in every job."""
    segment, _ = _prompt_labels(annotation, n_prompt)
    runs = segment_runs(annotation, n_prompt)
    eligible = (np.arange(n_prompt) > 0) & (segment != TARGET)
    ids = ",".join(str(int(i)) for i in annotation.input_ids[:n_prompt])
    rng = np.random.default_rng([seed, prompts.stable_int(ids)])
    prompt = np.zeros_like(named.prompt)
    for query in np.flatnonzero(named.prompt.any(axis=1)):
        pool = np.flatnonzero(eligible[:query] & ~named.prompt[query, :query] & (runs[:query] != runs[query]))
        prompt[query, _matched(rng, pool, np.flatnonzero(named.prompt[query]), query, f"query {query}")] = (
            True
        )
    continuation = np.zeros_like(named.continuation)
    if named.continuation.any():
        pool = np.flatnonzero(eligible & ~named.continuation)
        blocked = np.flatnonzero(named.continuation)
        continuation[_matched(rng, pool, blocked, n_prompt, "queries after the prompt")] = True
    return BlockedEdges(prompt, continuation)


def blocked_edges(
    annotation: prompts.Annotation, n_prompt: int, variant: variants.Variant, seed: int | None = None
) -> BlockedEdges:
    """The edges a knockout variant blocks in the prompt of ``annotation`` (its first ``n_prompt``
    tokens) and in whatever follows it; a control's with ``seed`` (default: its first)."""
    if not variant.knocks_out:
        raise ValueError(f"variant {variant.name!r} is not a knockout")
    named = named_edges(annotation, n_prompt, variant.edges)
    if not variant.control:
        return named
    try:
        return control_edges(annotation, n_prompt, named, variant.seed if seed is None else seed)
    except ValueError as exc:
        raise ValueError(f"variant {variant.name!r}: {exc}") from None
