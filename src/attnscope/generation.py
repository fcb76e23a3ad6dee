"""Greedy clue generation, batched, and the thesis's post-processing and scores.

All prompts of an experiment begin with the same tokens (chat template, instruction,
acknowledgement): the KV cache of that shared prefix is computed once and copied into
every batch. Behind it, each batch's own tokens are grouped by length (little padding)
and padded on the left of the suffix; finished rows leave the batch and the KV cache at
once. Greedy decoding gives the same tokens as one prompt at a time without a prefix.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import sacrebleu
import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

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
        past_key_values=cache,
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


def _batch_cache(prefix: Prefix | None, batch: int) -> DynamicCache:
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


@torch.inference_mode()
def generate_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    end_marker: str | None = END_MARK,
    prefix: Prefix | None = None,
    clean_up: str = "attnscope",
) -> list[Generation]:
    """Greedy-decode prompts until the end marker, end of turn or ``max_new_tokens``.

    Every prompt must begin with ``prefix.ids``; the rest is left-padded behind the
    prefix: [prefix | pad … pad | own tokens], the pads masked, positions counted without them.
    """
    device = model.device
    stop_ids = stop_token_ids(model, tokenizer)
    step_ids, mask, positions = _left_padded(
        prompts, len(prefix.ids) if prefix else 0, tokenizer.pad_token_id, device
    )
    cache = _batch_cache(prefix, len(prompts))
    active = list(range(len(prompts)))
    generated: list[list[int]] = [[] for _ in prompts]
    results: list[Generation | None] = [None] * len(prompts)
    start = time.perf_counter()
    for step in range(max_new_tokens):
        logits = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        next_ids = logits.argmax(-1).tolist()
        keep = []
        for row, (index, token) in enumerate(zip(active, next_ids)):
            generated[index].append(token)
            text = tokenizer.decode(generated[index], skip_special_tokens=True)
            reason = _stop_reason(
                token in stop_ids, end_marker is not None and end_marker in text, step + 1 == max_new_tokens
            )
            if reason is None:
                keep.append(row)
            else:
                clue, elapsed = postprocess(text, end_marker, clean_up), time.perf_counter() - start
                results[index] = Generation(generated[index], text, clue, reason, elapsed)
        if not keep:
            break
        rows = torch.tensor(keep, device=device)
        if len(keep) < len(active):
            cache.batch_select_indices(rows)
        active = [active[r] for r in keep]
        step_ids = torch.tensor([[next_ids[r]] for r in keep], device=device)
        mask = torch.cat([mask[rows], torch.ones(len(keep), 1, dtype=mask.dtype, device=device)], dim=1)
        positions = positions[rows, -1:] + 1
    return [r for r in results if r is not None]


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
) -> list[Generation]:
    """Greedy generations for ``prompts`` in input order, batched by length.

    ``share_prefix``: prefill the prompts' common prefix once (same tokens as without);
    ``clean_up``: how the clue is cut from the text (:data:`CLEAN_UPS`).
    """
    results: list[Generation | None] = [None] * len(prompts)
    prefix = prefill_prefix(model, prompts[0][: shared_prefix_length(prompts)]) if share_prefix else None
    batches = length_batches([len(p) for p in prompts], batch_size)
    with tqdm(total=len(prompts), desc="generate", unit="prompt", disable=not progress) as bar:
        for batch in batches:
            for index, result in zip(
                batch,
                generate_batch(
                    model,
                    tokenizer,
                    [prompts[i] for i in batch],
                    max_new_tokens,
                    end_marker,
                    prefix,
                    clean_up,
                ),
            ):
                results[index] = result
            bar.update(len(batch))
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
