"""Attention knockout: the attention along an edge set (:mod:`attnscope.edgesets`) blocked at run time
in a range of layers.

A knockout variant (``knockout-{edges}-L{first}-{last}``, :mod:`attnscope.variants`) edits no
weight. For one sequence it blocks the variant's edges [query, key]
(:func:`attnscope.edgesets.blocked_edges`). The blocking happens in the layers' attention masks: a
forward pre-hook on the self-attention module of each layer in the range sets the blocked positions
to masked in the mask transformers built for that layer (causal, sliding window; boolean for SDPA,
additive −∞ for eager), before the module's attention function reads it. Every attention
implementation then sees the same mask: the eager kernel, SDPA and the ``sdpa`` capture route's
recomputed probabilities (:mod:`attnscope.attention`), so the captured maps hold the blocked edges
at exactly zero, whichever context is entered first. Key positions come from the KV cache's own
``get_mask_sizes`` (a sliding-window layer keeps only its last keys), query positions from
``position_ids``, so a knockout holds under a cache, token by token. One sequence at a time (batch
of one, no padding): ``with applied(model, variant, annotation, n_prompt):
generation.generate(model, tokenizer, [prompt_ids], ...)`` gives that prompt's greedy clue under the
knockout (tested); or one sequence per row of a batch, each row under its own knockout
(:class:`RowKnockouts`: the teacher-forced scores).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from attnscope import architecture, capture, generation, models, prompts, variants
from attnscope.edgesets import BlockedEdges, blocked_edges


def blocked_mass(maps: Sequence[np.ndarray], blocked: np.ndarray) -> float:
    """The attention mass on the blocked keys (``blocked`` [query, key], the sequence's) in the maps
    of a knockout's layers (each [head, query, key], of the model without the knockout), averaged
    over layers, heads and the query rows that lose a key. Maps of the last queries only (a
    :func:`layer_maps` continued from a prefix) are read against ``blocked``'s last rows, which
    must then hold every blocked edge."""
    first = len(blocked) - np.shape(maps[0])[1] if len(maps) else 0
    if first and blocked[:first].any():
        raise ValueError(f"blocked_mass: maps from query {first} on, but an earlier query loses a key")
    blocked = blocked[first:]
    rows = blocked.any(axis=1)
    if not rows.any():
        return 0.0
    stacked = np.stack([np.asarray(m, dtype=np.float64)[:, rows] for m in maps])  # [layer, head, row, key]
    return float((stacked * blocked[rows]).sum(axis=-1).mean())


def layer_maps(
    model: PreTrainedModel,
    ids: Sequence[int],
    layers: Iterable[int],
    prefix: generation.Prefix | None = None,
) -> list[np.ndarray]:
    """The attention maps [head, query, key] of ``layers`` in one forward pass over ``ids``, on one
    torch thread (as :func:`clue_logprobs`); continued from ``prefix`` (a KV cache of the first
    ids, copied; :func:`context_prefix`), the maps of the queries after it over every key."""
    wanted, maps = set(layers), {}
    ids, cached = [int(i) for i in ids], prefix.ids if prefix is not None else []
    if ids[: len(cached)] != cached or len(cached) >= len(ids):
        raise ValueError(f"layer_maps: a prefix of {len(cached)} tokens is not the first of these {len(ids)}")

    def keep(layer: int, weights: torch.Tensor) -> None:
        if layer in wanted:
            maps[layer] = weights.double().cpu().numpy()

    device = next(model.parameters()).device
    cache = copy.deepcopy(prefix.cache) if prefix is not None else None
    with torch.inference_mode(), models.torch_threads(1), capture.capture(model, keep):
        model(input_ids=torch.tensor([ids[len(cached) :]], device=device), cache=cache, logits_to_keep=1)
    return [maps[layer] for layer in sorted(wanted)]


class Knockout:
    """Context manager: ``blocked`` applied in the attention of ``layers`` (any iterable of layer
    indices; empty: the model runs unchanged) of ``model`` (module docstring), on one sequence."""

    def __init__(self, model: PreTrainedModel, blocked: BlockedEdges, layers: Iterable[int]):
        modules = architecture.attention_modules(model)
        self.layers = sorted(set(layers))
        outside = [layer for layer in self.layers if not 0 <= layer < len(modules)]
        if outside:
            raise ValueError(f"knockout layers {outside}: the model has layers 0-{len(modules) - 1}")
        self.model, self.blocked = model, blocked

    def __enter__(self) -> Knockout:
        self.rows = RowKnockouts(self.model, [self]).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.rows.__exit__(*exc)


class RowKnockouts:
    """Context manager: each row of a batch of sequences (the same positions, no padding) under its
    own knockout (``None``: the row runs unchanged), so contexts that share their inputs and KV
    cache run as one batch: a matmul of many rows costs far less than as many of one row."""

    def __init__(self, model: PreTrainedModel, rows: Sequence[Knockout | None]):
        modules = architecture.attention_modules(model)
        self.rows = list(rows)
        layers = sorted(set().union(*(row.layers for row in self.rows if row is not None)))
        self.modules = [modules[layer] for layer in layers]
        self.cache_kwarg = architecture.family(model.config).cache_kwarg
        self.handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> RowKnockouts:
        self.blocked: dict[tuple[int, ...], torch.Tensor] = {}
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
        """The module's inputs with each row's blocked positions of its queries and keys masked."""
        implementation = getattr(module.config, "_attn_implementation", "eager")
        if implementation.startswith("flash"):
            raise ValueError(
                f"a knockout needs an attention mask; {implementation} takes none (use eager or sdpa)"
            )
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        if hidden.shape[0] != len(self.rows):
            raise ValueError(
                f"a knockout runs one sequence per row ({len(self.rows)}), not a batch of {hidden.shape[0]}"
            )
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
        mask = kwargs.get("attention_mask")
        if mask is None:  # SDPA's plain causal case, left to its is_causal flag: made explicit
            mask = (keys[None, :] <= queries[:, None])[None, None]
        if mask.shape[-2:] != (n_query, n_key):
            raise RuntimeError(
                f"layer {module.layer_idx}: mask {tuple(mask.shape)} for {(n_query, n_key)} positions"
            )
        mask = mask.expand(len(self.rows), *mask.shape[1:]).clone()
        for row, knockout in enumerate(self.rows):
            if knockout is None or module.layer_idx not in knockout.layers:
                continue
            positions = (row, int(queries[0]), n_query, offset, n_key)  # the same in most layers of a pass
            if positions not in self.blocked:
                self.blocked[positions] = knockout.blocked.between(queries, keys)
            blocked = self.blocked[positions]
            if mask.dtype == torch.bool:
                mask[row] &= ~blocked
            else:
                mask[row] = mask[row].masked_fill(blocked, torch.finfo(mask.dtype).min)
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


def context_prefix(
    model: PreTrainedModel,
    prompt_ids: Sequence[int],
    shared: int,
    prefix: generation.Prefix | None = None,
) -> generation.Prefix:
    """The KV cache of the prompt's first ``shared`` positions (at most the prompt's but one), the
    context every knockout whose first blocked query is ``shared`` or later continues from
    (:func:`clue_logprobs`, which copies it per context): ``prefix`` itself when it holds them
    all, else a copy of it (the prompt's first tokens) continued on one torch thread."""
    ids = [int(i) for i in prompt_ids]
    shared = max(0, min(shared, len(ids) - 1))
    cached = prefix.ids if prefix is not None else []
    done = len(cached)
    if done > shared or ids[:done] != cached:
        raise ValueError(
            f"clue_logprobs: the prefix ({done} tokens) is not the prompt's first tokens before "
            f"position {shared}"
        )
    if prefix is not None and done == shared:
        return prefix
    cache = copy.deepcopy(prefix.cache) if prefix is not None else DynamicCache()
    if shared > done:
        with torch.inference_mode(), models.torch_threads(1):
            own = torch.tensor([ids[done:shared]], device=next(model.parameters()).device)
            model(input_ids=own, cache=cache, logits_to_keep=1)
    return generation.Prefix(ids[:shared], cache)


KNOCKOUT_BATCH = 16
"""Most contexts :func:`clue_logprobs` runs as one batch (a control's 15 knockouts of 5 seeds × 3
windows and the unchanged model): a matmul of a batch of short continuations costs far less than
its rows one by one (docs/performance.md, "Knockouts")."""


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
    first tokens, at most ``shared`` of them, run on one thread; or :func:`context_prefix`) is
    continued from instead of running them again, so prompts that begin alike, and the clues
    scored after one prompt, share it. The contexts run as batches of :data:`KNOCKOUT_BATCH`
    rows (:class:`RowKnockouts`) on one torch thread: how many threads split a matmul changes its
    rounding, so a cluster job and a laptop would write different bytes."""
    if not clue_ids:
        raise ValueError("clue_logprobs: the clue has no tokens")
    context = context_prefix(model, prompt_ids, shared, prefix)
    ids = [int(i) for i in prompt_ids] + [int(i) for i in clue_ids]
    device = next(model.parameters()).device
    targets = torch.tensor(ids[len(prompt_ids) :], device=device)[None, :, None]
    rows = list(knockouts)
    out = []
    with torch.inference_mode(), models.torch_threads(1):
        for start in range(0, len(rows), KNOCKOUT_BATCH):
            batch = rows[start : start + KNOCKOUT_BATCH]
            cache = copy.deepcopy(context.cache)
            cache.batch_repeat_interleave(len(batch))
            with RowKnockouts(model, batch):
                logits = model(
                    input_ids=torch.tensor([ids[len(context.ids) : -1]] * len(batch), device=device),
                    cache=cache,
                    logits_to_keep=len(clue_ids),
                ).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            scored = logprobs.gather(-1, targets.expand(len(batch), -1, -1))[:, :, 0]
            out += list(scored.double().cpu().numpy())
    return out


def _scores(prefix: str, before: np.ndarray, after: np.ndarray) -> dict[str, float]:
    """One clue's columns: its log-probability without and with the knockout, their differences."""
    return {
        f"{prefix}n_clue_tokens": len(before), f"{prefix}logprob_trained": before.sum(),
        f"{prefix}logprob_knockout": after.sum(), f"{prefix}delta_total": after.sum() - before.sum(),
        f"{prefix}delta_token": float(np.mean(after - before)),
    }  # fmt: skip


def reference_ids(tokenizer: PreTrainedTokenizerBase, fmt: prompts.PromptFormat, clue: object) -> list[int]:
    """The tokens of a reference clue as the shots' answers show it (``shot_assistant``); none when
    the clue file has no clue for the target."""
    if not isinstance(clue, str) or not clue:
        return []
    return tokenizer.encode(fmt.shot_assistant.format(clue=clue), add_special_tokens=False)


def prompt_effects(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_table: pd.DataFrame,
    trained_clues: pd.DataFrame,
    variant: str | Sequence[str],
    greedy: bool = True,
    max_new_tokens: int = 32,
    clean_up: str = "attnscope",
) -> pd.DataFrame:
    """Per knockout ``variant`` (one name, or several: the windows of one edge set), per prompt
    (and per seed of a control, ``seed``), what the knockout does: for the trained model's greedy
    clue (its rows of ``trained_clues``, by ``prompt_index``) and for the reference clue (its
    ``reference_clue``, as the shots show a clue; NaN where there is none; the columns of
    :data:`attnscope.variants.KNOCKOUT_CLUES`' prefix) the log-probability under teacher forcing
    without and with the knockout (``logprob_trained``, ``logprob_knockout``: sums over
    ``n_clue_tokens`` tokens) and their differences (``delta_total``, ``delta_token``: the mean
    per token); the edges blocked (``n_blocked``) and the attention mass the model without the
    knockout gives them in the knockout's layers, over the prompt and the greedy clue
    (``blocked_mass``, :func:`blocked_mass`); with ``greedy``, the knocked-out greedy clue (``clue``)
    and its :data:`attnscope.effects.GREEDY` scores against the trained clue (chrF as
    :func:`attnscope.generation.clue_table` scores it against a reference).

    Several knockouts share every pass that does not depend on their layers: each prompt's
    positions before its first blocked query (:func:`context_prefix`, once for both clues), the
    unchanged context's scores and the unchanged model's maps after those positions (one capture
    of all their layers; the queries before them lose no key); the contexts after that position
    run as rows of one batch (:func:`clue_logprobs`). Each control seed's edges are drawn once
    for all windows.
    On the CPU a batch row's values do not depend on the rows beside it, so the rows have the
    bytes of each knockout run alone (tested); the knockouts' rows follow in their order."""
    names = [variant] if isinstance(variant, str) else list(variant)
    parsed = [variants.parse(name) for name in names]
    seeds = [p.seeds or (None,) for p in parsed]
    layers = [layer_range(p) for p in parsed]
    trained = trained_clues.set_index("prompt_index")
    fmt = prompts.table_format(prompt_table)
    all_ids = [[int(i) for i in ids] for ids in prompt_table["input_ids"]]
    annotations = [prompts.prompt_annotation(row) for _, row in prompt_table.iterrows()]
    drawn: dict[tuple[int, str, bool, int | None], BlockedEdges] = {}

    def edges_of(prompt: int, p: variants.Variant, seed: int | None) -> BlockedEdges:
        """A prompt's edges of an edge set (a control's of one seed), drawn once for all windows."""
        key = (prompt, p.edges, p.control, seed)
        if key not in drawn:
            drawn[key] = blocked_edges(annotations[prompt], len(all_ids[prompt]), p, seed)
        return drawn[key]

    blockers = [  # [prompt][knockout][seed]
        [
            [Knockout(model, edges_of(prompt, p, seed), window) for seed in drawn_seeds]
            for p, drawn_seeds, window in zip(parsed, seeds, layers, strict=True)
        ]
        for prompt in range(len(all_ids))
    ]
    firsts = [
        [min(first_blocked_query(b.blocked) for b in seeded) for seeded in prompt] for prompt in blockers
    ]
    # Per knockout, the prompts' common tokens before every first blocked query, run once for
    # all prompts (knockouts with the same first blocked queries share it).
    common = generation.shared_prefix_length(all_ids)
    starts = [min(common, *(prompt[k] for prompt in firsts)) for k in range(len(names))]
    with models.torch_threads(1):
        prefixes = {n: generation.prefill_prefix(model, all_ids[0][:n]) for n in set(starts)}
    windowed = bool(architecture.sliding_windows(model.config))
    rows: list[list[dict[str, Any]]] = [[] for _ in names]
    generations: list[list[generation.Generation]] = [[] for _ in names]
    for (_, row), prompt_ids, knockouts, first in zip(prompt_table.iterrows(), all_ids, blockers, firsts):
        clues = {
            "": [int(i) for i in trained.loc[row["prompt_index"], "generated_ids"]],
            "reference_": reference_ids(tokenizer, fmt, row["reference_clue"]),
        }
        sequence = prompt_ids + clues[""]
        scored: list[dict[str, list[np.ndarray]]] = [{} for _ in names]  # [knockout][clue][context]
        windows: list[list[np.ndarray]] = [[] for _ in names]  # [knockout][layer]: unchanged maps
        for start, shared in dict.fromkeys(zip(starts, first)):
            group = [k for k in range(len(names)) if (starts[k], first[k]) == (start, shared)]
            context = context_prefix(model, prompt_ids, shared, prefixes[start])
            for p, ids in clues.items():
                if not ids:
                    continue
                unchanged, *changed = clue_logprobs(
                    model, prompt_ids, ids, [None, *(b for k in group for b in knockouts[k])], shared, context
                )
                per_knockout = iter(changed)
                for k in group:
                    scored[k][p] = [unchanged, *islice(per_knockout, len(knockouts[k]))]
            # The group's layers' unchanged maps of the queries after its context, which hold
            # every query that loses a key (a sliding-window layer's cache keeps only its last
            # keys: there, of every query).
            captured = sorted(set().union(*(layers[k] for k in group)))
            maps = dict(
                zip(
                    captured,
                    layer_maps(model, sequence, captured, None if windowed else context),
                    strict=True,
                )
            )
            for k in group:
                windows[k] = [maps[layer] for layer in layers[k]]
        for k, seeded in enumerate(knockouts):
            for i, (seed, blocker) in enumerate(zip(seeds[k], seeded)):
                dense = blocker.blocked.dense(len(sequence))
                found = {
                    "seed": seed,
                    "n_blocked": int(dense.sum()),
                    "blocked_mass": blocked_mass(windows[k], dense),
                }
                for p in variants.KNOCKOUT_CLUES:
                    found |= _scores(p, scored[k][p][0], scored[k][p][i + 1]) if p in scored[k] else {}
                rows[k].append(found)
                if greedy:
                    with blocker:
                        generations[k] += generation.generate(
                            model, tokenizer, [prompt_ids], max_new_tokens, batch_size=1, progress=False,
                            end_marker=fmt.end_marker, clean_up=clean_up,
                        )  # fmt: skip
    return pd.concat(
        [
            _effects_table(prompt_table, trained, name, len(drawn), found, made if greedy else None)
            for name, drawn, found, made in zip(names, seeds, rows, generations, strict=True)
        ],
        ignore_index=True,
    )


def _effects_table(
    prompt_table: pd.DataFrame,
    trained: pd.DataFrame,
    variant: str,
    n_seeds: int,
    rows: list[dict[str, Any]],
    generations: list[generation.Generation] | None,
) -> pd.DataFrame:
    """One knockout's rows of :func:`prompt_effects`: the prompts' keys, its ``rows`` and, where
    it decoded (``generations``), the greedy clues' scores against the trained clue."""
    table = (
        prompt_table[["prompt_index", "prompt_id", "experiment", "target"]]
        .loc[prompt_table.index.repeat(n_seeds)]
        .reset_index(drop=True)
    )
    table = pd.concat([table.assign(variant=variant), pd.DataFrame(rows)], axis=1)
    table["seed"] = table["seed"].astype("Int64")
    if generations is not None:
        trained_clue = trained.loc[table["prompt_index"], "clue"].to_numpy()
        scored_clues = generation.clue_table(
            prompt_table.loc[prompt_table.index.repeat(n_seeds)].assign(reference_clue=trained_clue),
            generations,
        )
        table["trained_clue"] = trained_clue
        table["clue"] = scored_clues["clue"].to_numpy()
        table["chrf"] = scored_clues["chrf"].to_numpy()
        table["exact_match"] = (table["clue"] == table["trained_clue"]).astype(float)
        table["end_marker"] = scored_clues["format_ok"].astype(float).to_numpy()
    return table
