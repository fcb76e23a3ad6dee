"""Attention knockout: the attention along an edge set blocked at run time in a range of layers.

A knockout variant (``knockout-{edges}-L{first}-{last}``, :mod:`attnscope.variants`) edits no
weight. For one sequence it blocks a set of edges [query, key], built from the prompt's token
segments and shots (:class:`attnscope.prompts.Annotation`), so it means the same in every task
format. The edge sets (:data:`attnscope.variants.EDGE_SETS`):

- ``target-shotwords``, ``target-shotclues``, ``target-instruction``: every query from the
  target's first token on (the target word, the template tokens after it that predict the clue,
  the generated clue) to the shot words, the shot clues, the instruction;
- ``across-shots``: every token of a shot to every token of the earlier shots;
- ``clue-ownword``: a shot's clue tokens to its own shot word;
- ``control-{edges}-s{seed}``: in each query row that ``{edges}`` blocks, as many keys drawn at
  random (seeded by ``seed`` and the prompt's token ids) from the row's other earlier keys, the
  sequence's first token excepted (most models park attention there, an attention sink, which no
  named set blocks: blocking it is another experiment).

Tokens after the prompt (a generated clue, or one appended for teacher forcing)
are queries of the ``continuation`` row: they lose the same prompt keys whatever their number.
A query always keeps itself (and every named set blocks only earlier keys), so no row is ever
fully blocked and the softmax renormalises the rest of the row.

The blocking happens in the layers' attention masks: a forward pre-hook on the self-attention
module of each layer in the range sets the blocked positions to masked in the mask transformers
built for that layer (causal, sliding window; boolean for SDPA, additive −∞ for eager), before
the module's attention function reads it. Every attention implementation then sees the same
mask: the eager kernel, SDPA and the ``sdpa`` capture route's recomputed probabilities
(:mod:`attnscope.attention`), so the captured maps hold the blocked edges at exactly zero, whichever
context is entered first. Key positions come from the KV cache's own ``get_mask_sizes`` (a
sliding-window layer keeps only its last keys), query positions from ``position_ids``, so a
knockout holds under a cache, token by token. One sequence at a time (batch of one, no padding):
``with applied(model, variant, annotation, n_prompt): generation.generate(model, tokenizer,
[prompt_ids], ...)`` gives that prompt's greedy clue under the knockout (tested).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from attnscope import architecture, generation, models, prompts, variants
from attnscope.store import INSTRUCTION_SEGMENT, SHOT_CLUE, SHOT_WORD, TARGET

TARGET_KEYS = {
    variants.TARGET_SHOTWORDS: SHOT_WORD,
    variants.TARGET_SHOTCLUES: SHOT_CLUE,
    variants.TARGET_INSTRUCTION: INSTRUCTION_SEGMENT,
}
"""The key segment of each ``target-*`` edge set."""


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
        positions = torch.arange(length)
        return self.between(positions, positions).numpy()


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
        continuation = segment == TARGET_KEYS[edges]
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


def _draw(rng: np.random.Generator, pool: np.ndarray, count: int, where: str) -> np.ndarray:
    """``count`` of the positions ``pool``, without replacement."""
    if count > len(pool):
        raise ValueError(f"{where}: {count} keys to block, only {len(pool)} eligible for the random control")
    return rng.choice(pool, size=count, replace=False)


def control_edges(
    annotation: prompts.Annotation, n_prompt: int, named: BlockedEdges, seed: int
) -> BlockedEdges:
    """The random control of ``named``: in each of its query rows (and its continuation row) as
    many keys, drawn from the row's earlier keys that ``named`` leaves open, the first token
    excepted; seeded by ``seed`` and the prompt's token ids, so a prompt gets the same draw in
    every job."""
    _prompt_labels(annotation, n_prompt)
    eligible = np.arange(n_prompt) > 0
    ids = ",".join(str(int(i)) for i in annotation.input_ids[:n_prompt])
    rng = np.random.default_rng([seed, prompts.stable_int(ids)])
    prompt = np.zeros_like(named.prompt)
    for query in np.flatnonzero(named.prompt.any(axis=1)):
        pool = np.flatnonzero(eligible[:query] & ~named.prompt[query, :query])
        prompt[query, _draw(rng, pool, int(named.prompt[query].sum()), f"query {query}")] = True
    continuation = np.zeros_like(named.continuation)
    pool = np.flatnonzero(eligible & ~named.continuation)
    continuation[_draw(rng, pool, int(named.continuation.sum()), "queries after the prompt")] = True
    return BlockedEdges(prompt, continuation)


def blocked_edges(annotation: prompts.Annotation, n_prompt: int, variant: variants.Variant) -> BlockedEdges:
    """The edges a knockout variant blocks in the prompt of ``annotation`` (its first ``n_prompt``
    tokens) and in whatever follows it."""
    if not variant.knocks_out:
        raise ValueError(f"variant {variant.name!r} is not a knockout")
    named = named_edges(annotation, n_prompt, variant.edges)
    if not variant.control:
        return named
    try:
        return control_edges(annotation, n_prompt, named, variant.seed)
    except ValueError as exc:
        raise ValueError(f"variant {variant.name!r}: {exc}") from None


class Knockout:
    """Context manager: ``blocked`` applied in the attention of ``layers`` (any iterable of layer
    indices; empty: the model runs unchanged) of ``model`` (module docstring)."""

    def __init__(self, model: PreTrainedModel, blocked: BlockedEdges, layers: Iterable[int]):
        modules = architecture.attention_modules(model)
        self.layers = sorted(set(layers))
        outside = [layer for layer in self.layers if not 0 <= layer < len(modules)]
        if outside:
            raise ValueError(f"knockout layers {outside}: the model has layers 0-{len(modules) - 1}")
        self.modules = [modules[layer] for layer in self.layers]
        self.blocked = blocked
        self.cache_kwarg = architecture.family(model.config).cache_kwarg
        self.handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Knockout:
        for module in self.modules:
            self.handles.append(module.register_forward_pre_hook(self._mask, with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _mask(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The module's inputs with the blocked positions of its queries and keys masked."""
        implementation = getattr(module.config, "_attn_implementation", "eager")
        if implementation.startswith("flash"):
            raise ValueError(
                f"a knockout needs an attention mask; {implementation} takes none (use eager or sdpa)"
            )
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        if hidden.shape[0] != 1:
            raise ValueError(f"a knockout runs one sequence at a time, not a batch of {hidden.shape[0]}")
        n_query = hidden.shape[1]
        position_ids = kwargs.get("position_ids")
        queries = position_ids[0] if position_ids is not None else torch.arange(n_query, device=hidden.device)
        cache = kwargs.get(self.cache_kwarg)
        n_key, offset = (
            cache.get_mask_sizes(n_query, module.layer_idx)
            if cache is not None
            else (n_query, int(queries[0]))
        )
        keys = torch.arange(offset, offset + n_key, device=hidden.device)
        blocked = self.blocked.between(queries, keys)
        mask = kwargs.get("attention_mask")
        if mask is None:  # SDPA's plain causal case, left to its is_causal flag: made explicit
            mask = (keys[None, :] <= queries[:, None])[None, None]
        if mask.shape[-2:] != blocked.shape:
            raise RuntimeError(
                f"layer {module.layer_idx}: mask {tuple(mask.shape)} for {tuple(blocked.shape)} positions"
            )
        if mask.dtype == torch.bool:
            mask = mask & ~blocked
        else:
            mask = mask.masked_fill(blocked, torch.finfo(mask.dtype).min)
        return args, {**kwargs, "attention_mask": mask}


def layer_range(variant: variants.Variant) -> range:
    """The layers a knockout variant blocks in."""
    first, last = variant.layers
    return range(first, last + 1)


def applied(
    model: PreTrainedModel,
    variant: str | variants.Variant,
    annotation: prompts.Annotation,
    n_prompt: int,
) -> Knockout:
    """The knockout ``variant`` of one prompt (its annotation, prompt length ``n_prompt``) on ``model``."""
    variant = variants.parse(variant) if isinstance(variant, str) else variant
    return Knockout(model, blocked_edges(annotation, n_prompt, variant), layer_range(variant))


def first_blocked_query(blocked: BlockedEdges) -> int:
    """The first query position that loses a key; every position before it runs unchanged
    (``len(continuation)`` when only the queries after the prompt lose keys; a huge number when
    none does)."""
    rows = np.flatnonzero(blocked.prompt.any(axis=1))
    if len(rows):
        return int(rows[0])
    return len(blocked.continuation) if blocked.continuation.any() else np.iinfo(np.int64).max


def clue_logprobs(
    model: PreTrainedModel,
    prompt_ids: Sequence[int],
    clue_ids: Sequence[int],
    knockouts: Sequence[Knockout | None],
    shared: int = 0,
    prefix: generation.Prefix | None = None,
) -> list[np.ndarray]:
    """Per context of ``knockouts`` (``None``: the model unchanged), per clue token its
    log-probability under teacher forcing after ``prompt_ids`` (float64). The first ``shared``
    positions (at most the prompt's but one) run once, into a KV cache each context continues
    from: pass the first position a knockout blocks (:func:`first_blocked_query`), before which
    it changes nothing. ``prefix`` (:func:`attnscope.generation.prefill_prefix` of the prompt's
    first tokens, at most ``shared`` of them, run on one thread) is continued from instead of
    running them again, so prompts that begin alike share it. On one torch thread: how many
    threads split a matmul changes its rounding, so a cluster job and a laptop would write
    different bytes."""
    if not clue_ids:
        raise ValueError("clue_logprobs: the clue has no tokens")
    ids = [int(i) for i in prompt_ids] + [int(i) for i in clue_ids]
    shared = max(0, min(shared, len(prompt_ids) - 1))
    cached = prefix.ids if prefix is not None else []
    cache = copy.deepcopy(prefix.cache) if prefix is not None else DynamicCache()
    done = len(cached)
    if done > shared or ids[:done] != cached:
        raise ValueError(
            f"clue_logprobs: the prefix ({done} tokens) is not the prompt's first tokens before "
            f"position {shared}"
        )
    device = next(model.parameters()).device
    targets = torch.tensor(ids[len(prompt_ids) :], device=device)[:, None]
    out = []
    with torch.inference_mode(), models.torch_threads(1):
        if shared > done:
            own = torch.tensor([ids[done:shared]], device=device)
            model(input_ids=own, cache=cache, logits_to_keep=1)
        for knockout in knockouts:
            with knockout or nullcontext():
                logits = model(
                    input_ids=torch.tensor([ids[shared:-1]], device=device),
                    cache=copy.deepcopy(cache),
                    logits_to_keep=len(clue_ids),
                ).logits[0]
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            out.append(logprobs.gather(-1, targets)[:, 0].double().cpu().numpy())
    return out


def prompt_effects(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_table: pd.DataFrame,
    trained_clues: pd.DataFrame,
    variant: str,
    greedy: bool = True,
    max_new_tokens: int = 32,
    clean_up: str = "attnscope",
) -> pd.DataFrame:
    """Per prompt, what the knockout ``variant`` does to the trained model's clue (its rows of
    ``trained_clues``, by ``prompt_index``): the clue's log-probability under teacher forcing
    without and with the knockout (``logprob_trained``, ``logprob_knockout``: sums over its
    ``n_clue_tokens`` generated tokens) and their differences (``delta_total``, ``delta_token``:
    the mean per token); with ``greedy``, the knocked-out greedy clue (``clue``) and its
    :data:`attnscope.effects.GREEDY` scores against the trained clue (chrF as
    :func:`attnscope.generation.clue_table` scores it against a reference)."""
    parsed = variants.parse(variant)
    trained = trained_clues.set_index("prompt_index")
    end_marker = prompts.table_format(prompt_table).end_marker
    rows, generations = [], []
    all_ids = [[int(i) for i in ids] for ids in prompt_table["input_ids"]]
    blockers = [
        applied(model, parsed, prompts.prompt_annotation(row), len(ids))
        for (_, row), ids in zip(prompt_table.iterrows(), all_ids, strict=True)
    ]
    firsts = [first_blocked_query(blocker.blocked) for blocker in blockers]
    # The prompts' common tokens before every first blocked query: run once for all of them.
    with models.torch_threads(1):
        prefix = generation.prefill_prefix(
            model, all_ids[0][: min(generation.shared_prefix_length(all_ids), *firsts)]
        )
    for (_, row), prompt_ids, blocker, first in zip(prompt_table.iterrows(), all_ids, blockers, firsts):
        clue_ids = [int(i) for i in trained.loc[row["prompt_index"], "generated_ids"]]
        before, after = clue_logprobs(model, prompt_ids, clue_ids, [None, blocker], first, prefix)
        rows.append(
            {"n_clue_tokens": len(clue_ids), "logprob_trained": before.sum(), "logprob_knockout": after.sum(),
             "delta_total": after.sum() - before.sum(), "delta_token": float(np.mean(after - before))}
        )  # fmt: skip
        if greedy:
            with blocker:
                generations += generation.generate(
                    model, tokenizer, [prompt_ids], max_new_tokens, batch_size=1, progress=False,
                    end_marker=end_marker, clean_up=clean_up,
                )  # fmt: skip
    table = prompt_table[["prompt_index", "prompt_id", "experiment", "target"]].reset_index(drop=True)
    table = pd.concat([table.assign(variant=variant), pd.DataFrame(rows)], axis=1)
    if greedy:
        trained_clue = trained.loc[table["prompt_index"], "clue"].to_numpy()
        scored = generation.clue_table(prompt_table.assign(reference_clue=trained_clue), generations)
        table["trained_clue"] = trained_clue
        table["clue"] = scored["clue"].to_numpy()
        table["chrf"] = scored["chrf"].to_numpy()
        table["exact_match"] = (table["clue"] == table["trained_clue"]).astype(float)
        table["end_marker"] = scored["format_ok"].astype(float).to_numpy()
    return table
