"""Attention maps of every layer: the prompts to capture and their streaming capture into the Zarr
store, one prompt group each (:mod:`attnscope.promptgroup`: its layout and what it computes).

One forward pass per prompt through the decoder stack (no LM head). Two capture routes
(``attention.kernel``): ``eager``, where a forward hook on every layer's self-attention
takes the probabilities the eager kernel returns, and ``sdpa``, where the model runs its
fused kernel and each layer's probabilities are recomputed from that layer's queries and
keys in query chunks (a registered transformers attention function: the model's own
scaling, causal or sliding-window mask and GQA mapping). Either way that layer's
probabilities ``[head, query, key]`` are cast to float16 on the CPU and stored before the
forward pass goes on with the next layer: the per-head maps (for the prompts that keep them) and the head
mean are encoded chunk by chunk and appended to their arrays' shard files
(:class:`attnscope.zarrwrite.ShardWriter`, the bytes zarr would write), and the word-level maps, the
metrics of every map (:mod:`attnscope.metrics`), the singular values of every stored map and
the head mean's metrics under the analysis choices (:mod:`attnscope.choices`, layers in chunks
of ``choices.CHUNK_VALUES`` map values) are computed; those arrays, whole in memory at the end
of the prompt, are written by zarr itself (:func:`attnscope.zarrwrite.write_whole_array`), so the
metrics tables are assembled from them without reading a map back.
Besides the model's own tensors one float16 layer copy exists at a time, whatever the number
of layers.

The store is written to ``.{name}.partial`` next to its final path and renamed into place
when every prompt is complete; a prompt group's ``zarr.json`` is written after its arrays.
A killed job leaves only the partial store; a rerun with the same config digest keeps its
finished prompt groups and computes the rest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import zarr
from threadpoolctl import ThreadpoolController
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from attnscope import architecture, choices, generation, metrics, prompts, streamed
from attnscope.capture import ValueNorms, capture
from attnscope.promptgroup import PromptGroup, PromptInput
from attnscope.store import STORE_VERSION, open_attention  # noqa: F401 (open_attention: public API)

log = logging.getLogger("attnscope")

PREFIX_BYTES = 256 << 20
"""Most float16 bytes of the shared prefix's maps (every layer) kept for reuse; a longer
prefix is not shared."""


def wants_heads(target: str, keep_heads: str | Sequence[str]) -> bool:
    """Whether a target's prompt keeps the per-head maps (``keep_heads``: ``all`` or targets)."""
    if keep_heads == "all":
        return True
    return target.casefold() in {t.casefold() for t in keep_heads}


def prompt_inputs(
    prompt_table: pd.DataFrame,
    tokenizer: PreTrainedTokenizerBase,
    clues: pd.DataFrame | None = None,
    keep_heads: str | Sequence[str] = "all",
) -> list[PromptInput]:
    """The prompts of a prompt table; with a clue table, each with its generated clue appended."""
    by_index = clues.set_index("prompt_index") if clues is not None else None
    inputs = []
    for row in prompt_table.to_dict("records"):
        annotation = prompts.prompt_annotation(row)
        clue = None
        if by_index is not None:
            if row["prompt_index"] not in by_index.index:
                raise ValueError(f"prompt {row['prompt_id']}: no generated clue in the clue table")
            generated = by_index.loc[row["prompt_index"]]
            if generated["prompt_id"] != row["prompt_id"]:
                raise ValueError(f"prompt {row['prompt_id']}: the clue table is of {generated['prompt_id']}")
            clue = str(generated["clue"])
            annotation = prompts.annotate_generated(
                tokenizer, annotation, [int(i) for i in generated["generated_ids"]], clue
            )
        inputs.append(
            PromptInput(
                index=int(row["prompt_index"]),
                prompt_id=row["prompt_id"],
                target=row["target"],
                annotation=annotation,
                n_prompt_tokens=int(row["n_tokens"]),
                clue=clue,
                keep_heads=wants_heads(row["target"], keep_heads),
            )
        )
    return inputs


def input_cosine(model: PreTrainedModel, input_ids: Sequence[int]) -> np.ndarray:
    """Cosine similarity [query, key] of the input embeddings of a token sequence (fig. 8.6)."""
    embedding = model.get_input_embeddings()
    ids = torch.tensor(list(input_ids), device=embedding.weight.device)
    with torch.inference_mode():
        vectors = torch.nn.functional.normalize(embedding(ids).float(), dim=-1)
        return (vectors @ vectors.T).cpu().numpy()


@dataclass
class SharedPrefix:
    """The prompts' common token prefix, run once: its KV cache, every layer's maps of its
    rows [head, query, key] in float16 and the norms its keys' values write [head, key]
    (:class:`attnscope.capture.ValueNorms`), which causal attention makes the same in every prompt."""

    prefix: generation.Prefix
    maps: list[torch.Tensor]
    value_norms: list[torch.Tensor]

    def full_map(self, layer: int, rows: torch.Tensor) -> torch.Tensor:
        """A prompt's float16 map [head, query, key] of ``layer`` from the prefix's rows and
        the prompt's own ``rows`` [head, query after the prefix, key]."""
        prefix = self.maps[layer]
        length, n = prefix.shape[1], rows.shape[-1]
        full = torch.zeros(prefix.shape[0], n, n, dtype=torch.float16)
        full[:, :length, :length] = prefix
        full[:, length:] = rows
        return full

    def sink(self, add_layer: Callable[[int, torch.Tensor], None]) -> Callable[[int, torch.Tensor], None]:
        """A capture sink that hands ``add_layer`` the full maps of a prompt run from the prefix's end."""
        return lambda layer, rows: add_layer(layer, self.full_map(layer, rows))

    def full_norms(self, values: ValueNorms, layer: int) -> torch.Tensor:
        """A prompt's value norms [head, key] of ``layer``: the prefix's keys, then its own."""
        return torch.cat([self.value_norms[layer], values.norms[layer]], dim=1)


def shared_prefix(
    model: PreTrainedModel, inputs: Sequence[PromptInput], kernel: str, values: ValueNorms | None = None
) -> SharedPrefix | None:
    """Run the common token prefix of ``inputs`` once inside a capture (the KV cache from
    :func:`attnscope.generation.prefill_prefix`), its value norms taken by ``values`` (default: hooks
    of its own); None for fewer than two prompts, no common prefix or prefix maps over
    :data:`PREFIX_BYTES`."""
    if len(inputs) < 2:
        return None
    length = generation.shared_prefix_length([p.annotation.input_ids for p in inputs])
    num_layers, num_heads = model.config.num_hidden_layers, architecture.attention_shape(model.config)[0]
    if not length or num_layers * num_heads * length * length * 2 > PREFIX_BYTES:
        return None
    maps: dict[int, torch.Tensor] = {}

    def keep(layer: int, weights: torch.Tensor) -> None:
        maps[layer] = weights.to(torch.float16).cpu()

    values = ValueNorms(model) if values is None else values
    with capture(model, keep, kernel), values:
        prefix = generation.prefill_prefix(model, inputs[0].annotation.input_ids[:length])
    layers = range(num_layers)
    return SharedPrefix(prefix, [maps[layer] for layer in layers], [values.norms[layer] for layer in layers])


@cache
def _blas() -> ThreadpoolController:
    """The process's thread pools (found once: the search takes milliseconds)."""
    return ThreadpoolController()


def partial_path(path: str | os.PathLike) -> Path:
    """Where an unfinished store is written (renamed to ``path`` when complete)."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def _open_partial(path: Path, attrs: Mapping[str, Any]) -> zarr.Group:
    """The partial store for ``attrs``' config digest: resumed if it matches, else fresh."""
    if path.exists():
        try:
            old = zarr.open_group(path, mode="r").attrs.get("config_digest")
        except (FileNotFoundError, ValueError, KeyError):
            old = None
        if old == attrs["config_digest"]:
            log.info("resuming the partial store %s", path)
            return zarr.open_group(path, mode="a")
        shutil.rmtree(path)
    return zarr.open_group(path, mode="w", attributes=dict(attrs))


def extract(
    model: PreTrainedModel,
    inputs: Sequence[PromptInput],
    path: str | os.PathLike,
    attrs: Mapping[str, Any],
    with_metrics: bool = True,
    progress: bool = True,
    kernel: str = "eager",
    share_prefix: bool = True,
    with_values: bool = True,
    head_spectra: bool = False,
) -> dict[str, int]:
    """Capture every prompt's attention maps into the Zarr store at ``path``.

    ``attrs`` become the root attributes and must hold ``config_digest``. With
    ``with_metrics=False`` only the maps are stored (no ``metrics``, ``singular_values``
    or ``choices`` arrays: the benchmark's capture + write figure). ``kernel``: the capture
    route (:func:`capture`). ``share_prefix``: run the prompts' common token prefix once
    (:func:`shared_prefix`) and each prompt from its end, behind a copy of its KV cache (the
    stored maps are the same; tested).
    ``with_values``: store the value-weighted maps beside the weights (``value_*`` arrays;
    off only for the benchmark's share of them). ``head_spectra``: also the singular values of the
    kept heads (``attention.head_spectra``; the head means' are always computed).
    Returns the counts of prompts computed and resumed.
    """
    config = model.config
    num_layers = config.num_hidden_layers
    num_heads, num_kv_heads, _ = architecture.attention_shape(config)
    root_attrs = {
        **attrs,
        "store_version": STORE_VERSION,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "kv_head": architecture.kv_head_index(num_heads, num_kv_heads).tolist(),
        "metrics": list(metrics.STREAMED),
        "choices": list(choices.CHOICES),
        "choice_metrics": list(choices.STORED),
        "prompts": [{"group": p.group, "prompt_id": p.prompt_id, "target": p.target} for p in inputs],
    }
    final, tmp = Path(path), partial_path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    root = _open_partial(tmp, root_attrs)
    done = {p.group for p in inputs if p.group in root and root[p.group].attrs.get("complete")}
    todo = [p for p in inputs if p.group not in done]
    device = next(model.parameters()).device
    workers = torch.get_num_threads()  # the rule's threads, for the singular values
    # numpy's BLAS in the metrics one map at a time; with the metrics, on the CPU the forward pass on
    # one torch thread and the layer thread's torch on another (PromptGroup.add_layer), side by side
    split = streamed.one_cpu_thread(device) if with_metrics else contextlib.nullcontext()
    with _blas().limit(limits=1, user_api="blas"), split:
        values = ValueNorms(model) if with_values else contextlib.nullcontext()
        shared = shared_prefix(model, todo, kernel, values if with_values else None) if share_prefix else None
        start = len(shared.prefix.ids) if shared else 0
        if share_prefix:
            log.info("shared prefix: %s", f"{start} tokens, run once" if shared else "none")
        norms = None
        if with_values:
            norms = partial(shared.full_norms, values) if shared else values.norms.__getitem__
        for prompt in tqdm(todo, desc="attention", unit="prompt", disable=not progress):
            ids = prompt.annotation.input_ids
            cosine = input_cosine(model, ids)
            group = PromptGroup(
                tmp, prompt, cosine, num_layers, num_heads, with_metrics, workers, norms, head_spectra
            )
            group.create()
            sink, cache = group.add_layer, None
            if shared:
                sink = shared.sink(group.add_layer)
                cache = generation.batch_cache(shared.prefix, 1)
            with torch.inference_mode(), values, capture(model, sink, kernel):
                model.base_model(
                    input_ids=torch.tensor([ids[start:]], device=device),
                    cache=cache,
                    use_cache=cache is not None,
                )
            group.finish()
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return {"computed": len(inputs) - len(done), "resumed": len(done)}


def store_bytes(path: str | os.PathLike, array: str | None = None) -> int:
    """Bytes on disk of a store, or of one array name summed over all prompt groups."""
    total = 0
    for directory, _, files in os.walk(path):
        if array is None or Path(directory).relative_to(path).parts[1:2] == (array,):
            total += sum(os.path.getsize(Path(directory, f)) for f in files)
    return total
