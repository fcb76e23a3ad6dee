"""Greedy clue generation, batched, and the thesis's post-processing and scores.

All prompts of an experiment begin with the same tokens (chat template, instruction,
acknowledgement): the KV cache of that shared prefix is computed once and copied into
every group of prompts prefilled behind it. The groups are taken by length (little
padding) and padded on the left of their own tokens; finished rows leave the batch and the
KV cache at once, and the next group joins when half the rows are free. Greedy decoding
gives the same tokens as one prompt at a time without a prefix.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from attnscope.data import answer_in_clue
from attnscope.prompts import END_MARK, table_format

STOP_MARK = "stop_mark"  # the model wrote the end marker ("#" in the thesis)
EOS = "eos"  # the model ended its turn
MAX_NEW_TOKENS = "max_new_tokens"


@dataclass
class Generation:
    """One prompt's greedy continuation."""

    generated_ids: list[int]
    raw_text: str
    clue: str
    stop_reason: str
    seconds: float


CLEAN_UPS = ("attnscope", "thesis")
"""``generation.clean_up``: the clue is the text before the end marker, its first line, stripped;
``thesis`` also drops what the thesis notebook's ``postprocess_generated_text`` drops, a leading
"1. " and a trailing three-character ")?(" remnant (checked after stripping; the notebook checks
the unstripped text and keeps the whitespace)."""


def postprocess(raw_text: str, end_marker: str | None = END_MARK, clean_up: str = "attnscope") -> str:
    """The generated clue in ``raw_text`` (:data:`CLEAN_UPS`)."""
    if end_marker is not None:
        raw_text = raw_text.split(end_marker, 1)[0]
    clue = raw_text.strip().split("\n", 1)[0].strip()
    if clean_up == "thesis":
        clue = clue.removeprefix("1. ")
        if len(clue) >= 3 and clue[-1] == "(" and clue[-3] == ")":
            clue = clue[:-3]
    return clue.strip()


def stop_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """End-of-turn ids: the tokenizer's EOS and the model's generation EOS ids."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if i is not None}


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (stable sort by length)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix all prompts share, leaving each at least one token of its own."""
    shared = os.path.commonprefix([list(p) for p in prompts])  # works on any sequences, not only paths
    return max(0, min(len(shared), min(len(p) for p in prompts) - 1))


@dataclass
class Prefix:
    """The KV cache of the tokens every prompt begins with (batch of one)."""

    ids: list[int]
    cache: DynamicCache


@torch.inference_mode()
def prefill_prefix(model: PreTrainedModel, ids: Sequence[int]) -> Prefix | None:
    """Run the shared prefix once; ``None`` if there is none."""
    ids = [int(i) for i in ids]
    if not ids:
        return None
    cache = DynamicCache()
    model(
        input_ids=torch.tensor([ids], device=model.device),
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return Prefix(ids, cache)


def _left_padded(
    prompts: Sequence[Sequence[int]], shared: int, pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, attention mask, position ids) of prompts whose first ``shared`` tokens are
    cached: the rest of each left-padded, the mask covering the cached prefix too."""
    suffixes = [list(p[shared:]) for p in prompts]
    width = max(len(s) for s in suffixes)
    input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in suffixes], device=device)
    mask = torch.tensor(
        [[1] * shared + [0] * (width - len(s)) + [1] * len(s) for s in suffixes], device=device
    )
    positions = ((mask.cumsum(-1) - 1).clamp(min=0))[:, shared:]
    return input_ids, mask, positions


def batch_cache(prefix: Prefix | None, batch: int) -> DynamicCache:
    """An empty cache, or a copy of the prefix's cache for each of ``batch`` prompts."""
    if prefix is None:
        return DynamicCache()
    cache = copy.deepcopy(prefix.cache)
    cache.batch_repeat_interleave(batch)
    return cache


def _stop_reason(stop_token: bool, end_marker_seen: bool, budget_spent: bool) -> str | None:
    """Why a sequence stops after this token (None: it goes on); a stop token wins."""
    if stop_token:
        return EOS
    if end_marker_seen:
        return STOP_MARK
    return MAX_NEW_TOKENS if budget_spent else None


@dataclass
class _Rows:
    """Prompts decoding together: their prompt indices, KV cache, the mask over the cache and
    the next input, the next input ids and their positions (one row each)."""

    index: list[int]
    cache: DynamicCache
    mask: torch.Tensor
    step_ids: torch.Tensor
    positions: torch.Tensor

    def step_inputs(self) -> dict[str, torch.Tensor | DynamicCache]:
        """The model's inputs for the rows' next step: their next tokens, against their cache."""
        inputs = {"input_ids": self.step_ids, "attention_mask": self.mask, "position_ids": self.positions}
        return {**inputs, "cache": self.cache}

    def select(self, keep: list[int], next_ids: list[int]) -> None:
        """Keep the rows ``keep``, each fed its next token."""
        device = self.mask.device
        rows = torch.tensor(keep, device=device)
        if len(keep) < len(self.index):
            self.cache.batch_select_indices(rows)
        self.index = [self.index[r] for r in keep]
        self.step_ids = torch.tensor([[next_ids[r]] for r in keep], device=device)
        ones = torch.ones(len(keep), 1, dtype=self.mask.dtype, device=device)
        self.mask = torch.cat([self.mask[rows], ones], dim=1)
        self.positions = self.positions[rows, -1:] + 1

    def extend(self, other: _Rows) -> None:
        """Take ``other``'s rows in (both ready for a one-token step): the shorter cache is padded
        on the left with masked zeros, so every row keeps its own positions and keys."""
        width = max(self.mask.shape[1], other.mask.shape[1])  # cached tokens + the next input

        def left_padded(t: torch.Tensor, dim: int, length: int) -> torch.Tensor:
            shape = list(t.shape)
            shape[dim] = length - t.shape[dim]
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            mine.keys = torch.cat(
                [left_padded(mine.keys, 2, width - 1), left_padded(theirs.keys, 2, width - 1)]
            )
            mine.values = torch.cat(
                [left_padded(mine.values, 2, width - 1), left_padded(theirs.values, 2, width - 1)]
            )
        self.mask = torch.cat([left_padded(self.mask, 1, width), left_padded(other.mask, 1, width)])
        self.index += other.index
        self.step_ids = torch.cat([self.step_ids, other.step_ids])
        self.positions = torch.cat([self.positions, other.positions])


def _mergeable(cache: DynamicCache) -> bool:
    """Whether rows of different cache lengths can share this cache (plain growing layers; a
    sliding window's layers keep their own offsets)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    batch_size: int = 8,
    progress: bool = True,
    end_marker: str | None = END_MARK,
    share_prefix: bool = True,
    clean_up: str = "attnscope",
    join: bool = True,
) -> list[Generation]:
    """Greedy generations for ``prompts`` in input order, until the end marker, end of turn or
    ``max_new_tokens``: at most ``batch_size`` prompts decode together, taken in order of length.

    ``share_prefix``: prefill the prompts' common prefix once (same tokens as without). Each
    group of prompts is prefilled behind it, left-padded: [prefix | pad … pad | own tokens],
    the pads masked, positions counted without them. Finished prompts leave the batch at once;
    when half of its rows are free, the next prompts are prefilled and join the running ones
    (their caches padded to one length), so long clues do not decode with an almost empty
    batch (``join=False``: the next group waits until the batch is empty, the earlier route, kept
    for the benchmark). ``clean_up``: how the clue is cut from the text (:data:`CLEAN_UPS`).
    """
    device = model.device
    stop_ids = stop_token_ids(model, tokenizer)
    prefix = prefill_prefix(model, prompts[0][: shared_prefix_length(prompts)]) if share_prefix else None
    shared = len(prefix.ids) if prefix else 0
    pending = [i for batch in length_batches([len(p) for p in prompts], batch_size) for i in batch]
    generated: list[list[int]] = [[] for _ in prompts]
    started = [0.0] * len(prompts)
    results: list[Generation | None] = [None] * len(prompts)
    running: _Rows | None = None
    with tqdm(total=len(prompts), desc="generate", unit="prompt", disable=not progress) as bar:
        while pending or running is not None:
            free = batch_size - (len(running.index) if running else 0)
            admit = running is None or (
                join and free >= max(1, batch_size // 2) and _mergeable(running.cache)
            )
            if pending and admit:
                group, pending = pending[:free], pending[free:]
                step_ids, mask, positions = _left_padded(
                    [prompts[i] for i in group], shared, tokenizer.pad_token_id, device
                )
                rows = _Rows(group, batch_cache(prefix, len(group)), mask, step_ids, positions)
                for i in group:
                    started[i] = time.perf_counter()
            else:
                rows = running
                running = None
            logits = model(**rows.step_inputs(), use_cache=True, logits_to_keep=1).logits[:, -1]
            next_ids = logits.argmax(-1).tolist()
            keep = []
            for row, (index, token) in enumerate(zip(rows.index, next_ids)):
                generated[index].append(token)
                text = tokenizer.decode(generated[index], skip_special_tokens=True)
                reason = _stop_reason(
                    token in stop_ids,
                    end_marker is not None and end_marker in text,
                    len(generated[index]) == max_new_tokens,
                )
                if reason is None:
                    keep.append(row)
                else:
                    clue, elapsed = (
                        postprocess(text, end_marker, clean_up),
                        time.perf_counter() - started[index],
                    )
                    results[index] = Generation(generated[index], text, clue, reason, elapsed)
                    bar.update()
            if keep:
                rows.select(keep, next_ids)
                if running is None:
                    running = rows
                else:
                    running.extend(rows)
    return [r for r in results if r is not None]


def check_context(prompt_table: pd.DataFrame, max_new_tokens: int, manifest: dict) -> None:
    """Refuse prompts that with ``max_new_tokens`` exceed the model's context window."""
    limit = manifest["max_position_embeddings"]
    too_long = prompt_table[prompt_table["n_tokens"] + max_new_tokens > limit]
    if len(too_long):
        row = too_long.iloc[0]
        experiment = row["experiment"]
        raise ValueError(
            f"experiments.{experiment}: the prompt for target {row['target']!r} has {row['n_tokens']} "
            f"tokens; with generation.max_new_tokens={max_new_tokens} it exceeds the context of model "
            f"{manifest['name']} ({limit} tokens; {len(too_long)} of {len(prompt_table)} prompts too long). "
            f"Lower experiments.{experiment}.k or generation.max_new_tokens, or use a model with a "
            "longer context."
        )


def clue_table(prompt_table: pd.DataFrame, generations: Sequence[Generation]) -> pd.DataFrame:
    """Per prompt: target, generated clue, raw text, tokens, stop reason and scores.

    A clue is well-formed (``format_ok``) when it ended at the format's end marker, or,
    for a format without one, at the end of the turn.
    """
    import sacrebleu  # here: the extraction and knockout jobs import this module for its prefill only

    closed_by = STOP_MARK if table_format(prompt_table).end_marker is not None else EOS
    table = prompt_table[
        ["prompt_index", "prompt_id", "experiment", "category", "k", "target", "reference_clue"]
    ].copy()
    table["clue"] = [g.clue for g in generations]
    table["raw_text"] = [g.raw_text for g in generations]
    table["generated_ids"] = [g.generated_ids for g in generations]
    table["n_generated"] = [len(g.generated_ids) for g in generations]
    table["stop_reason"] = [g.stop_reason for g in generations]
    table["format_ok"] = table["stop_reason"] == closed_by
    table["answer_leak"] = [answer_in_clue(t, c) for t, c in zip(table["target"], table["clue"])]
    table["clue_words"] = [len(c.split()) for c in table["clue"]]
    table["chrf"] = [
        sacrebleu.sentence_chrf(c, [r]).score if isinstance(r, str) else np.nan
        for c, r in zip(table["clue"], table["reference_clue"])
    ]
    return table


def summarize(clues: pd.DataFrame) -> dict[str, float | int]:
    """Per-experiment scores: format compliance, answer leaks, length, chrF to the reference."""
    import sacrebleu

    with_reference = clues.dropna(subset=["reference_clue"])
    corpus_chrf = (
        sacrebleu.corpus_chrf(list(with_reference["clue"]), [list(with_reference["reference_clue"])]).score
        if len(with_reference)
        else None
    )
    return {
        "prompts": int(len(clues)),
        "format_compliance": float(clues["format_ok"].mean()),
        "answer_leak_rate": float(clues["answer_leak"].mean()),
        "empty_clue_rate": float((clues["clue"] == "").mean()),
        "mean_clue_words": float(clues["clue_words"].mean()),
        "mean_generated_tokens": float(clues["n_generated"].mean()),
        "with_reference": int(len(with_reference)),
        "mean_sentence_chrf": float(with_reference["chrf"].mean()) if len(with_reference) else None,
        "corpus_chrf": corpus_chrf,
    }
