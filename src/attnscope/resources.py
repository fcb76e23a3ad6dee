"""Resource requests of the workflow's jobs: memory, wall time and GPUs from the model's size.

The rules' ``resources:`` (``rules/common.smk``) call these functions, so a job on
Mistral-7B asks a cluster for more than the same job on the embedded SmolLM2, and a
quantized or weight-edited variant for what its loading path really holds. The size is
the prepared model's manifest (exact parameter count and shape) once ``prepare_model``
has run; before that (a dry run) it is estimated from the spec. Snakemake evaluates a
job's resources again right before it submits it, so submitted jobs use the manifest.

The numbers are deliberate over-estimates (docs/cluster.md has the formulas): a job
that SLURM kills for memory or time costs more than a somewhat larger request. Memory
and time are multiplied by the attempt number, so ``--retries 1`` retries with twice.
This module must stay cheap to import: the Snakefile uses it on every invocation.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscope import variants
from attnscope.config import SMOLLM2_GGUF, Plan

BASE_MB = 1500
"""A Python job with torch, transformers and pandas imported."""

GPU_MEMORY_MB = 40_000
"""One GPU's memory when counting the GPUs a CUDA job needs (an A100-40GB, a common minimum).
Clusters with larger GPUs may pin the count: ``set-resources: {rule: {gpu: 1}}`` in the profile."""

SHARD_MB = 5000
"""The largest checkpoint shard a streamed load holds in host memory (Mistral-7B's are 5 GB)."""

CUDA_OVERHEAD_MB = 1000
"""CUDA context and workspace on each job's GPU."""

BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "8bit": 1.0, "4bit": 0.5}

# Seconds per billion parameters for one forward step of a batch: measured on 2 CPU cores
# with SmolLM2 (~2 s a step); on a GPU a generous estimate (Mistral-7B float16 with eager
# attention at ~0.2 s a step; not measured here), and the slow-down of bitsandbytes'
# quantized matmuls.
STEP_SECONDS_PER_BILLION = {"cpu": 15.0, "cuda": 0.03}
QUANTIZED_SLOWDOWN = {"none": 1.0, "8bit": 4.0, "4bit": 2.0}
LOAD_MINUTES_PER_BILLION = 1.0
SAFETY = 2.0
MIN_RUNTIME = 10


@dataclass(frozen=True)
class ModelSize:
    """Parameter count and attention shape of a model; ``exact`` when read from its manifest."""

    parameters: int
    layers: int
    heads: int
    hidden: int
    exact: bool = False


# Before prepare_model has run: the shapes of the models config.yaml names ...
KNOWN = {
    SMOLLM2_GGUF: ModelSize(134_515_008, 30, 9, 576),
    "gemma-3-270m-q4_k_m.gguf": ModelSize(268_098_176, 18, 4, 640),
    "mistralai/Mistral-7B-Instruct-v0.2": ModelSize(7_241_732_096, 32, 32, 4096),
}
# ... and, for any other hub or local model, a 7B-class guess.
ASSUMED = ModelSize(7_241_732_096, 32, 32, 4096)
TOKENIZER_VOCAB = {"mistral-v1": 32000, "smollm2": 49152}


@dataclass(frozen=True)
class Resources:
    """One job's request: ``mem_mb`` (host memory), ``runtime`` (minutes), ``gpu`` (count)."""

    mem_mb: int
    runtime: int
    gpu: int = 0

    def for_attempt(self, attempt: int) -> Resources:
        """Memory and time multiplied by the attempt number (retries ask for more)."""
        return Resources(self.mem_mb * attempt, self.runtime * attempt, self.gpu)


def tiny_random_size(spec: Mapping[str, Any]) -> ModelSize:
    """The exact size of a ``tiny-random`` spec (Llama/Mistral/Gemma 3 layout, untied embeddings)."""
    hidden, layers, heads = spec["hidden_size"], spec["num_layers"], spec["num_heads"]
    kv_dim = hidden // heads * spec["num_kv_heads"]
    # Llama/Mistral: two RMSNorms per layer; Gemma 3: four, and q_norm, k_norm of head_dim
    norms = 4 * hidden + 2 * (hidden // heads) if spec["architecture"] == "gemma3" else 2 * hidden
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_dim + 3 * hidden * spec["intermediate_size"] + norms
    vocab = TOKENIZER_VOCAB[spec["tokenizer"]]
    return ModelSize(2 * vocab * hidden + layers * per_layer + hidden, layers, heads, hidden)


def model_size(spec: Mapping[str, Any], manifest: str | os.PathLike | None = None) -> ModelSize:
    """The prepared model's size from its manifest, else an estimate from the spec."""
    if manifest is not None and Path(manifest).is_file():
        facts = json.loads(Path(manifest).read_text())
        if "num_parameters" in facts:
            return ModelSize(
                facts["num_parameters"], facts["num_layers"], facts["num_heads"], facts["hidden_size"], True
            )
    if spec["source"] == "tiny-random":
        return tiny_random_size(spec)
    key = {"embedded": "gguf_file", "hub": "id"}.get(spec["source"])
    return KNOWN.get(spec.get(key, ""), ASSUMED) if key else ASSUMED


def weights_mb(parameters: int, dtype: str, quantization: str = "none") -> float:
    """Memory of the weights in ``dtype``, or at bitsandbytes' 8 or 4 bits."""
    return parameters * BYTES[dtype if quantization == "none" else quantization] / 1e6


def prompt_tokens(prompts: str | os.PathLike | None, k: int) -> int:
    """The longest prompt's length from the prompt table, else estimated from the shot count."""
    if prompts is not None and Path(prompts).is_file():
        import pyarrow.parquet as pq

        return int(pq.read_table(prompts, columns=["n_tokens"]).column("n_tokens").to_pandas().max())
    return 120 + 30 * k


def gpus_for(spec: Mapping[str, Any], gpu_mb: float) -> int:
    """GPUs to request: none unless the spec asks for CUDA, else enough for ``gpu_mb``."""
    if spec["device"] != "cuda":
        return 0
    return max(1, math.ceil(gpu_mb / GPU_MEMORY_MB))


def _round_mb(mb: float) -> int:
    return int(math.ceil(mb / 100) * 100)


def _host_weights_mb(spec: Mapping[str, Any], size: ModelSize, variant: str) -> float:
    """Host memory of the weights as ``models.load_model`` holds them.

    Trained weights bound for the GPU or for quantization stream through (one checkpoint
    shard at a time); a weight edit
    is made on an unquantized CPU copy first (a ``random-s*`` variant is initialised in
    float32 and cast); weights quantized on the CPU stay in host memory.
    """
    kind = variants.parse(variant).kind
    unquantized = weights_mb(size.parameters, spec["dtype"])
    streamed = spec["device"] == "cuda" or spec["quantization"] != "none"
    held = min(unquantized, SHARD_MB) if kind == "trained" and streamed else unquantized
    if kind == "random" and spec["dtype"] != "float32":
        held += weights_mb(size.parameters, "float32")
    if spec["device"] != "cuda" and spec["quantization"] != "none":
        held += weights_mb(size.parameters, spec["dtype"], spec["quantization"])
    return held


def _step_seconds(spec: Mapping[str, Any], size: ModelSize) -> float:
    device = "cuda" if spec["device"] == "cuda" else "cpu"
    slowdown = QUANTIZED_SLOWDOWN[spec["quantization"]]
    return size.parameters / 1e9 * STEP_SECONDS_PER_BILLION[device] * slowdown


def _runtime(size: ModelSize, compute_seconds: float) -> int:
    load = size.parameters / 1e9 * LOAD_MINUTES_PER_BILLION
    return max(MIN_RUNTIME, math.ceil(5 + load + SAFETY * compute_seconds / 60))


def prepare_resources(spec: Mapping[str, Any], size: ModelSize) -> Resources:
    """``prepare_model``: dequantize the embedded GGUF, build a tiny model, or read a config."""
    copies = {"embedded": 3, "tiny-random": 2}.get(spec["source"], 0)
    mem = BASE_MB + copies * weights_mb(size.parameters, "float32")
    return Resources(_round_mb(mem), _runtime(size, 0) if copies else MIN_RUNTIME)


def generation_resources(
    spec: Mapping[str, Any],
    size: ModelSize,
    variant: str,
    n_prompts: int,
    tokens: int,
    max_new_tokens: int,
    batch_size: int,
) -> Resources:
    """``generate_clues``: greedy decoding of ``n_prompts`` prompts in batches."""
    length = tokens + max_new_tokens
    batch = min(batch_size, n_prompts)
    # key/value cache of every layer (no grouped-query saving assumed), one layer's scores
    cache_mb = batch * length * size.layers * size.hidden * 2 * BYTES[spec["dtype"]] / 1e6
    scores_mb = batch * size.heads * length * length * BYTES[spec["dtype"]] / 1e6
    activations = cache_mb + scores_mb
    weights = weights_mb(size.parameters, spec["dtype"], spec["quantization"])
    gpu = gpus_for(spec, weights + activations + CUDA_OVERHEAD_MB)
    host = BASE_MB + _host_weights_mb(spec, size, variant) + (0 if gpu else activations)
    steps = math.ceil(n_prompts / batch) * (max_new_tokens + 1)
    return Resources(_round_mb(host), _runtime(size, steps * _step_seconds(spec, size)), gpu)


def attention_resources(
    spec: Mapping[str, Any], size: ModelSize, variant: str, n_prompts: int, tokens: int
) -> Resources:
    """Attention capture: one forward pass per prompt, every layer's maps kept in float16.

    The maps of one prompt (layers × heads × tokens², float16) are held until they are
    written, plus one layer in float32 while it is captured.
    """
    maps_mb = size.layers * size.heads * tokens * tokens * 2 / 1e6
    layer_mb = size.heads * tokens * tokens * 4 / 1e6
    cache_mb = tokens * size.layers * size.hidden * 2 * BYTES[spec["dtype"]] / 1e6
    weights = weights_mb(size.parameters, spec["dtype"], spec["quantization"])
    gpu = gpus_for(spec, weights + cache_mb + layer_mb + CUDA_OVERHEAD_MB)
    host = BASE_MB + _host_weights_mb(spec, size, variant) + maps_mb + (0 if gpu else cache_mb + layer_mb)
    # a forward pass costs about as much as one generation step; writing compresses ~50 MB/s
    compute = n_prompts * (_step_seconds(spec, size) + maps_mb / 50)
    return Resources(_round_mb(host), _runtime(size, compute), gpu)


def spectra_resources(size: ModelSize, device: str = "cpu") -> Resources:
    """Weight spectra: the unquantized model in float32 and the SVD of one matrix at a time."""
    weights = weights_mb(size.parameters, "float32")
    largest = 4 * weights_mb(4 * size.hidden * size.hidden, "float32")  # an MLP matrix and its SVD workspace
    gpu = max(1, math.ceil((weights + largest + CUDA_OVERHEAD_MB) / GPU_MEMORY_MB)) if device == "cuda" else 0
    # full SVDs: ~10 s per billion parameters on a GPU, ~5 min on a few CPU cores
    compute = size.parameters / 1e9 * (10 if gpu else 300)
    return Resources(_round_mb(BASE_MB + weights + largest), _runtime(size, compute), gpu)


def in_turn(requests: Iterable[Resources]) -> Resources:
    """The request of one job that does the work of ``requests`` one after another, freeing each
    model before the next: the largest memory and GPU count, the runtimes summed."""
    requests = list(requests)
    return Resources(
        max(r.mem_mb for r in requests), sum(r.runtime for r in requests), max(r.gpu for r in requests)
    )


def model_job(
    rule: str, config: Mapping[str, Any], plan: Plan, wildcards: Mapping[str, str], inputs: Mapping[str, Any]
) -> Resources:
    """The request of one job of a rule that runs a model (``wildcards`` and ``inputs``: the job's,
    as Snakemake passes them to a resource function), sized from its manifest once there. A job of
    weight_spectra or head_types loads every variant of ``plan.spectra_variants`` in turn
    (:func:`in_turn`); the other rules' wildcards name the one variant they load."""
    spec = config["models"][wildcards["model"]]
    if rule == "prepare_model":  # sized from the spec: the manifest is its output
        return prepare_resources(spec, model_size(spec))
    size = model_size(spec, inputs.get("manifest"))
    if rule == "weight_spectra":  # one job per model: every spectra variant in turn
        return in_turn([spectra_resources(size, config["spectra"]["device"])] * len(plan.spectra_variants))
    if rule == "head_types":  # the same; probe_count prompts of BOS + two copies of probe_length tokens
        heads = config["heads"]
        return in_turn(
            [
                attention_resources(
                    spec, size, variant, n_prompts=heads["probe_count"], tokens=2 * heads["probe_length"] + 1
                )
                for variant in plan.spectra_variants
            ]
        )
    experiment = plan.experiments[wildcards["experiment"]]
    n_prompts, tokens = len(experiment.targets), prompt_tokens(inputs.get("prompts"), experiment.k)
    if rule == "generate_clues":
        generation = config["generation"]
        return generation_resources(
            spec,
            size,
            wildcards["variant"],
            n_prompts=n_prompts,
            tokens=tokens,
            max_new_tokens=generation["max_new_tokens"],
            batch_size=generation["batch_size"],
        )
    if rule == "extract_attention":
        return attention_resources(spec, size, wildcards["variant"], n_prompts=n_prompts, tokens=tokens)
    raise ValueError(f"no resource estimate for rule {rule!r}")


class CudaUnavailableError(RuntimeError):
    """A job asks for CUDA where none exists; the message says what to change."""


def require_cuda(models: Iterable[str], executor: str) -> None:
    """Fail before any job when a model with ``device: cuda`` cannot get a GPU.

    Locally (``executor == "local"``) torch must see a GPU on this machine. On a
    cluster the head node running Snakemake may well have none; there the cluster must
    offer GPUs (a ``gpu`` GRES in ``sinfo``), and each job checks its node at start.
    """
    names = ", ".join(f"models.{name}.device" for name in models)
    if executor == "local":
        import torch

        if not torch.cuda.is_available():
            raise CudaUnavailableError(
                f"{names}: cuda, but torch sees no CUDA GPU on this machine (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'none'}). Set device: cpu or auto, or run on a "
                "cluster with GPUs: snakemake --workflow-profile profiles/slurm"
            )
    elif executor == "slurm":
        try:
            gres = subprocess.run(
                ["sinfo", "--noheader", "--format=%G"], capture_output=True, text=True, timeout=30, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise CudaUnavailableError(
                f"{names}: cuda, but sinfo could not list the cluster's GPUs: {exc}"
            ) from exc
        if "gpu" not in gres:
            raise CudaUnavailableError(
                f"{names}: cuda, but no partition of this SLURM cluster offers GPUs (sinfo GRES: "
                f"{' '.join(sorted(set(gres.split()))) or 'none'}). Set device: cpu or auto, or submit to a "
                "cluster with GPU nodes."
            )
