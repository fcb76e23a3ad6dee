"""Attention capture into Zarr on the embedded model: time, extra peak memory, stored bytes.

    python benchmarks/bench_attention.py [--repeats 15] [--shots 3 8] [--memory-shots 8 24]
        [--experiment-repeats 3] [--stores results/attention]

Time: per prompt (target Ant, k shots), alternating in one run, best of ``--repeats`` and the
median over the rounds of each round's ratio to the reference (robust to the load drifting):
a plain eager forward of the whole model (the reference), the decoder-only forward that
the capture runs, the naive way (output_attentions=True, float16, zstd-3 Zarr), the
streaming capture + Zarr write of the maps (attn, head_mean, word maps, cosine), and the
full extraction the rule runs (the same plus every metric: the streamed metrics of every
map, the singular values of every stored map, the analysis choices, and the value-weighted
maps with their metrics; ``extract_weights_only``: the same without the value-weighted maps,
whose share of the extraction the pair's ratio gives), on the prompt keeping its heads
(``keep_heads``: one target per experiment in the default config) and on the same prompt
storing head means only (every other prompt of the rule); then the
``sdpa`` route: the decoder-only forward with SDPA and the full extraction with SDPA and
the maps recomputed from queries and keys (``attention.kernel: sdpa``). The
stores are written under benchmarks/out (the disk the workflow writes to), each removed
before its timed run, as a rule writes a fresh one.

Experiment: the extraction of one experiment as the rule runs it (the sample's 30 Animals
targets, heads kept for Ant, every metric; no generated clue appended) with and without the
shared prefix (``attention.share_prefix``), alternating with the decoder-only forwards of its
prompts one by one; medians over ``--experiment-repeats`` rounds.

Memory: each mode in a fresh subprocess per prompt length, after a warm-up of the mode
on a one-shot prompt: the peak resident memory (VmHWM, reset before each run through
/proc/self/clear_refs) while the mode runs minus the same peak of a plain decoder
forward of the prompt, alternating, the larger of ``--memory-repeats`` runs each;
compared with one layer's attention tensor [head, query, key] in float32. The children
run with glibc's mmap threshold fixed at 64 KiB, so every buffer above that is mapped
when allocated and unmapped when freed and the resident size follows live memory.

Stored bytes: the ``attn`` arrays' bytes on disk over the raw float32 size of all
attention tensors, and whether every stored float16 value equals float16 of the
reference; the same ratio for the stores of a workflow run (``--stores``, if there),
whose prompts carry their generated clue. Writes benchmarks/out/attention.json and
prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import yaml
import zarr
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, best_of, embedded_model_dir, write  # noqa: E402

from attnscope import attention, choices, data, models, promptgroup, prompts, streamed, zarrwrite  # noqa: E402
from attnscope.store import open_store, prompt_groups  # noqa: E402

TARGET = "Ant"
MODES = (
    "forward",
    "forward_decoder",
    "forward_decoder_one_thread",
    "naive",
    "capture_write",
    "extract",
    "extract_weights_only",
    "extract_head_means",
    "forward_decoder_sdpa",
    "extract_sdpa",
)
MMAP_THRESHOLD = 64 << 10
"""glibc serves larger allocations by mmap and unmaps them when freed, so the resident size
follows the live buffers (the default dynamic threshold keeps freed buffers resident)."""
MEMORY_KEYS = ("shots", "tokens", "mode", "extra_peak_mib", "layer_attention_mib", "extra_over_layer")


def prompt_table(tokenizer, k: int, targets: list[str] | None = None):
    """The prompt of ``TARGET`` (or of ``targets``) in an Animals experiment with k shots."""
    config = yaml.safe_load(Path("config.yaml").read_text())
    clues, _ = data.import_clues(config["data"]["clue_files"])
    spec = {"category": "Animals", "k": k, "seed": 0}
    return prompts.build_prompts(clues, f"animals-k{k}", spec, targets or [TARGET], tokenizer)


def experiment_seconds(loaded: models.LoadedModel, k: int, repeats: int, workdir: Path) -> dict:
    """One experiment's extraction as the rule runs it (the sample's Animals targets, heads
    kept for ``TARGET``, every metric) with and without the shared prefix, alternating, beside
    the decoder-only forwards of its prompts one by one; medians over ``repeats`` rounds."""
    config = yaml.safe_load(Path("config.yaml").read_text())
    targets = data.read_target_list(config["data"]["targets"]["Animals"], "Animals", "bench").words
    table = prompt_table(loaded.tokenizer, k, targets)
    inputs = attention.prompt_inputs(table, loaded.tokenizer, keep_heads=[TARGET])
    shared = attention.shared_prefix(loaded.model, inputs, "eager")
    ids = [torch.tensor([p.annotation.input_ids]) for p in inputs]

    def forwards() -> None:
        with torch.inference_mode():
            for prompt in ids:
                loaded.model.model(input_ids=prompt, use_cache=False)

    def run(share: bool) -> float:
        shutil.rmtree(workdir / f"experiment-{share}.zarr", ignore_errors=True)
        start = time.perf_counter()
        attention.extract(
            loaded.model,
            inputs,
            workdir / f"experiment-{share}.zarr",
            {"config_digest": "bench"},
            progress=False,
            share_prefix=share,
        )
        return time.perf_counter() - start

    rounds = []
    for _ in range(repeats):
        forward = best_of(1, forwards)[0]
        rounds.append({"forwards": forward, "shared": run(True), "whole": run(False)})
    median = {key: float(np.median([r[key] for r in rounds])) for key in rounds[0]}
    return {
        "shots": k,
        "prompts": len(inputs),
        "tokens": [min(len(i[0]) for i in ids), max(len(i[0]) for i in ids)],
        "shared_prefix_tokens": len(shared.prefix.ids) if shared else 0,
        "seconds": {key: round(value, 3) for key, value in median.items()},
        "median_round_ratio": {
            "shared_over_whole": round(float(np.median([r["shared"] / r["whole"] for r in rounds])), 3),
            "shared_over_forwards": round(float(np.median([r["shared"] / r["forwards"] for r in rounds])), 3),
            "whole_over_forwards": round(float(np.median([r["whole"] / r["forwards"] for r in rounds])), 3),
        },
    }


def naive_write(model, ids: torch.Tensor, path: Path) -> None:
    """All layers from output_attentions=True, then float16 numpy, then a zstd-3 Zarr write."""
    with torch.inference_mode():
        out = model.model(input_ids=ids, output_attentions=True, use_cache=False)
    maps = torch.stack([a[0] for a in out.attentions]).to(torch.float16).numpy()
    zarr.create_array(
        path,
        data=maps,
        chunks=(1, *maps.shape[1:]),
        compressors=zarr.codecs.ZstdCodec(level=3),
        overwrite=True,
    )


class Runner:
    """The modes on one prompt of the loaded embedded model."""

    def __init__(self, loaded: models.LoadedModel, table, workdir: Path):
        self.model, self.workdir = loaded.model, workdir
        self.inputs = attention.prompt_inputs(table, loaded.tokenizer, keep_heads="all")
        self.inputs_head_means = attention.prompt_inputs(table, loaded.tokenizer, keep_heads=[])
        self.ids = torch.tensor([self.inputs[0].annotation.input_ids])

    def store(self, name: str) -> Path:
        return self.workdir / f"{name}.zarr"

    def clear(self, mode: str) -> None:
        """Remove the mode's store of an earlier run (outside the timed region: a rule writes anew)."""
        shutil.rmtree(self.store(mode), ignore_errors=True)

    def run(self, mode: str) -> None:
        if mode == "forward":
            with torch.inference_mode():
                self.model(input_ids=self.ids, use_cache=False)
        elif mode == "forward_decoder":
            with torch.inference_mode():
                self.model.model(input_ids=self.ids, use_cache=False)
        elif mode == "forward_decoder_one_thread":  # the extraction's forward pass, beside its layer thread
            with streamed.one_cpu_thread(self.model.device), torch.inference_mode():
                self.model.model(input_ids=self.ids, use_cache=False)
        elif mode == "forward_decoder_sdpa":
            self.model.set_attn_implementation("sdpa")
            try:
                with torch.inference_mode():
                    self.model.model(input_ids=self.ids, use_cache=False)
            finally:
                self.model.set_attn_implementation("eager")
        elif mode == "naive":
            naive_write(self.model, self.ids, self.store("naive"))
        else:
            attention.extract(
                self.model,
                self.inputs_head_means if mode == "extract_head_means" else self.inputs,
                self.store(mode),
                {"config_digest": "bench"},
                with_metrics=mode != "capture_write",
                with_values=mode not in ("capture_write", "extract_weights_only"),
                progress=False,
                kernel="sdpa" if mode == "extract_sdpa" else "eager",
            )


PHASES = {
    "input cosine": (attention, "input_cosine"),
    "layer thread (all below, beside the forward pass)": (promptgroup.PromptGroup, "_derive_layer"),
    "  shard writes (attn, head_mean)": (zarrwrite.ShardWriter, "write"),
    "  word maps": (promptgroup, "word_maps"),
    "  streamed metrics": (streamed, "streamed_metrics"),
    "  singular values": (promptgroup, "singular_values"),
    "  analysis choices": (choices, "stored_choices"),
    "  value-weighted maps (their products and shares)": (promptgroup.PromptGroup, "_add_value_layer"),
    "create (arrays)": (promptgroup.PromptGroup, "create"),
    "finish (the layer thread's last layers, whole arrays, group)": (promptgroup.PromptGroup, "finish"),
}
"""The functions a profiled extraction times (wrapped with a timer in place): where its
seconds go. The layer thread's rows run beside the forward pass (``PromptGroup.add_layer``
queues each layer to it), so they add up to its busy time, not to a share of the wall time."""
LAYER_THREAD = "layer thread (all below, beside the forward pass)"


@contextmanager
def timed_phases() -> Iterator[dict[str, float]]:
    """Accumulate wall seconds in each of :data:`PHASES` while the block runs; an inner phase
    called from another inner phase (the value-weighted maps' metrics and writes) counts in its own
    row only, so the inner rows add up to the layer thread's time (each thread keeps its own
    stack of active phases)."""
    seconds = dict.fromkeys(PHASES, 0.0)
    originals = {name: getattr(owner, attr) for name, (owner, attr) in PHASES.items()}
    local = threading.local()

    def timer(name: str, fn):
        def timed(*args, **kwargs):
            active = local.__dict__.setdefault("active", [])
            parent = active[-1] if active else ""
            active.append(name)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                active.pop()
                seconds[name] += elapsed
                if parent.startswith("  ") and name.startswith("  "):
                    seconds[parent] -= elapsed

        return timed

    for name, (owner, attr) in PHASES.items():
        setattr(owner, attr, timer(name, originals[name]))
    try:
        yield seconds
    finally:
        for name, (owner, attr) in PHASES.items():
            setattr(owner, attr, originals[name])


def profile(runner: Runner, repeats: int) -> dict:
    """Seconds per phase of the two extractions (median of ``repeats`` runs, each beside a
    decoder-only forward): the rest of the main thread's wall time is the forward pass, with the
    hooks' copies and their waits for the layer thread."""
    rows = {}
    for mode in ("extract", "extract_head_means"):
        runs, forwards = [], []
        for _ in range(repeats):
            forwards.append(best_of(1, lambda: runner.run("forward_decoder"))[0])
            runner.clear(mode)
            with timed_phases() as seconds:
                total = best_of(1, lambda m=mode: runner.run(m))[0]
            layer_thread = seconds[LAYER_THREAD]
            inside = sum(v for k, v in seconds.items() if k.startswith("  "))
            main_thread = sum(v for k, v in seconds.items() if not k.startswith("  ") and k != LAYER_THREAD)
            runs.append(
                {
                    **seconds,
                    "  casts, head sum, rest of the layer": layer_thread - inside,
                    "forward pass, the hooks' copies and waits (the rest)": total - main_thread,
                    "total": total,
                }
            )
        forward = float(np.median(forwards))
        rows[mode] = {
            "decoder_forward_seconds": round(forward, 4),
            "seconds": {k: round(float(np.median([r[k] for r in runs])), 4) for k in runs[0]},
            "over_decoder_forward": {
                k: round(float(np.median([r[k] for r in runs])) / forward, 3) for k in runs[0]
            },
        }
    return rows


def svd_seconds(heads: np.ndarray, means: np.ndarray, repeats: int) -> dict[str, float]:
    """Best time to decompose one prompt's maps (every layer's heads [layer, head, query, key]
    and head means [layer, query, key]): the capture's route (numpy's LAPACK on the rule's
    threads, head means batched over layers), the same on one thread, and the previous route
    (torch's batched ``svdvals`` per layer's heads, each head mean on its own)."""
    workers = torch.get_num_threads()

    def capture(threads: int) -> None:
        for layer in heads:
            promptgroup.singular_values(layer, threads)
        promptgroup.singular_values(means, threads)

    def torch_svdvals() -> None:
        for layer, mean in zip(heads, means):
            torch.linalg.svdvals(torch.from_numpy(layer).double())
            torch.linalg.svdvals(torch.from_numpy(mean[None]).double())

    with threadpool_limits(limits=1, user_api="blas"):  # as in the capture
        return {
            f"numpy_{workers}_threads": round(best_of(repeats, lambda: capture(workers))[0], 4),
            "numpy_1_thread": round(best_of(repeats, lambda: capture(1))[0], 4),
            "torch_svdvals": round(best_of(repeats, torch_svdvals)[0], 4),
        }


def encode_seconds(maps: np.ndarray, repeats: int) -> float:
    """Best time to encode every layer's heads-last ``attn`` chunk with the store's compressor
    (the part of capture + write that is compression alone)."""
    chunks = [np.ascontiguousarray(layer.transpose(1, 2, 0)) for layer in maps]
    encoder = zarrwrite.blosc_encoder(promptgroup.COMPRESSOR)
    return best_of(repeats, lambda: [encoder.encode(chunk) for chunk in chunks])[0]


def time_modes(loaded, shots: int, repeats: int, workdir: Path) -> dict:
    runner = Runner(loaded, prompt_table(loaded.tokenizer, shots), workdir)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    runner.run("forward")
    for _ in range(repeats):  # alternate, so every mode sees the same machine load
        for mode in MODES:
            runner.clear(mode)
            times[mode].append(best_of(1, lambda m=mode: runner.run(m))[0])
    best = {mode: min(t) for mode, t in times.items()}

    def pair_ratios(reference: str) -> dict[str, float]:
        """Median over the rounds of mode time / reference time of the same round (robust to drift)."""
        ref = np.array(times[reference])
        return {mode: round(float(np.median(np.array(t) / ref)), 3) for mode, t in times.items()}

    n, config = runner.ids.shape[1], loaded.model.config
    raw32 = config.num_hidden_layers * config.num_attention_heads * n * n * 4
    with torch.inference_mode():
        out = loaded.model(input_ids=runner.ids, output_attentions=True)
    reference = torch.stack([a[0] for a in out.attentions]).to(torch.float16)
    stored = open_store(workdir / "extract.zarr")["000"]["attn"][...]
    encode = encode_seconds(stored, repeats)
    means = open_store(workdir / "extract.zarr")["000"]["head_mean"][...]
    return {
        "shots": shots,
        "tokens": n,
        "seconds": {mode: round(s, 3) for mode, s in best.items()},
        "ratio_to_forward": {mode: round(s / best["forward"], 3) for mode, s in best.items()},
        "ratio_to_decoder_forward": {mode: round(s / best["forward_decoder"], 3) for mode, s in best.items()},
        "median_round_ratio_to_forward": pair_ratios("forward"),
        "median_round_ratio_to_decoder_forward": pair_ratios("forward_decoder"),
        "extract_over_weights_only": pair_ratios("extract_weights_only")["extract"],
        "attn_bytes": attention.store_bytes(workdir / "extract.zarr", "attn"),
        "raw_float32_bytes": raw32,
        "stored_over_raw_float32": round(attention.store_bytes(workdir / "extract.zarr", "attn") / raw32, 4),
        "naive_zstd3_over_raw_float32": round(attention.store_bytes(workdir / "naive.zarr") / raw32, 4),
        "float16_exact": bool(np.array_equal(stored, reference.numpy())),
        "sdpa_max_abs_difference": float(
            np.abs(
                zarr.open_group(workdir / "extract_sdpa.zarr", mode="r")["000"]["attn"][...].astype(
                    np.float32
                )
                - stored.astype(np.float32)
            ).max()
        ),
        "sdpa_extract_over_sdpa_decoder_forward": round(
            best["extract_sdpa"] / best["forward_decoder_sdpa"], 3
        ),
        "encode_seconds": round(encode, 4),
        "profile": profile(runner, min(repeats, 5)),
        "singular_values_seconds": svd_seconds(stored, means, min(repeats, 5)),
        "encode_over_decoder_forward": round(encode / best["forward_decoder"], 3),
    }


MEMORY_CHILD = """
import json, sys, tempfile
from pathlib import Path
import torch
sys.path.insert(0, {benchmarks!r})
from bench_attention import Runner, peak_kib, prompt_table
from common import OUT, embedded_model_dir
from attnscope import models

torch.set_num_threads({threads})
loaded = models.load_model(embedded_model_dir())
peaks = {{"forward_decoder": [], {mode!r}: []}}
with tempfile.TemporaryDirectory(dir=OUT) as tmp:
    runner = Runner(loaded, prompt_table(loaded.tokenizer, {shots}), Path(tmp))
    Runner(loaded, prompt_table(loaded.tokenizer, 1), Path(tmp)).run({mode!r})  # warm-up
    for _ in range({repeats}):
        for mode in peaks:
            peaks[mode].append(peak_kib(lambda: runner.run(mode)))
print(json.dumps({{"peaks_kib": peaks, "tokens": int(runner.ids.shape[1])}}))
"""


def peak_kib(fn) -> int:
    """Peak resident memory (VmHWM, KiB) while ``fn`` runs: the peak is reset first (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")
    fn()
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))


def extra_peak(mode: str, shots: int, repeats: int, threads: int) -> dict:
    """Peak RSS of ``mode`` minus that of a plain decoder forward, alternating in a fresh process."""
    code = MEMORY_CHILD.format(
        benchmarks=str(Path(__file__).resolve().parent),
        threads=threads,
        shots=shots,
        mode=mode,
        repeats=repeats,
    )
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    peaks = result["peaks_kib"]
    return {"tokens": result["tokens"], "extra_kib": max(peaks[mode]) - max(peaks["forward_decoder"])}


def memory(shots_list: list[int], repeats: int, threads: int, config) -> list[dict]:
    rows = []
    for shots in shots_list:
        for mode in ("capture_write", "extract", "extract_sdpa", "naive"):
            run = extra_peak(mode, shots, repeats, threads)
            n = run["tokens"]
            layer_mib = config.num_attention_heads * n * n * 4 / 2**20
            extra_mib = run["extra_kib"] / 1024
            rows.append(
                {
                    "shots": shots,
                    "tokens": n,
                    "mode": mode,
                    "extra_peak_mib": round(extra_mib, 2),
                    "layer_attention_mib": round(layer_mib, 2),
                    "extra_over_layer": round(extra_mib / layer_mib, 2),
                }
            )
    return rows


def workflow_stores(root: Path) -> list[dict]:
    """``attn`` bytes on disk over raw float32 in the stores a workflow run wrote under ``root``
    (prompts with the generated clue appended, as the rule captures them)."""
    rows = []
    for path in sorted(root.glob("*/*/*.zarr")):
        groups = prompt_groups(open_store(path))
        shapes = [group["attn"].shape for group in groups if "attn" in group]
        if shapes:
            raw32 = sum(4 * int(np.prod(shape)) for shape in shapes)
            stored = attention.store_bytes(path, "attn")
            rows.append(
                {
                    "store": str(path.relative_to(root)),
                    "tokens": [shape[-1] for shape in shapes],
                    "attn_bytes": stored,
                    "raw_float32_bytes": raw32,
                    "stored_over_raw_float32": round(stored / raw32, 4),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--shots", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--memory-shots", type=int, nargs="+", default=[8, 24])
    parser.add_argument("--memory-repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--experiment-repeats", type=int, default=3)
    parser.add_argument(
        "--stores", type=Path, default=Path("results/attention"), help="a workflow run's attention stores"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = models.load_model(embedded_model_dir())
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:  # on the disk the workflow writes to
        timing = [time_modes(loaded, k, args.repeats, Path(tmp)) for k in args.shots]
        experiments = [
            experiment_seconds(loaded, k, args.experiment_repeats, Path(tmp))
            for k in (args.shots if args.experiment_repeats > 0 else [])
        ]
    mem = memory(args.memory_shots, args.memory_repeats, args.threads, loaded.model.config)
    header = ["k", "tokens", *MODES, "stored / raw f32", "naive zstd-3 / raw f32", "f16 exact"]
    print("\n| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    for row in timing:
        forward, decoder = row["ratio_to_forward"], row["ratio_to_decoder_forward"]
        cells = [f"{row['seconds'][m]:.3f} s ({forward[m]:.2f}× / {decoder[m]:.2f}×)" for m in MODES]
        tail = [row["stored_over_raw_float32"], row["naive_zstd3_over_raw_float32"], row["float16_exact"]]
        print("| " + " | ".join(map(str, [row["shots"], row["tokens"], *cells, *tail])) + " |")
    print("(best of --repeats; in brackets: over the forward / over the decoder-only forward)")
    for row in timing:
        print(
            f"k = {row['shots']}: encoding the attn chunks alone {row['encode_seconds']:.4f} s "
            f"({row['encode_over_decoder_forward']:.2f}× the decoder forward)"
        )
    print("\n| k | tokens | reference | " + " | ".join(MODES) + " |\n" + "|---" * (len(MODES) + 3) + "|")
    for row in timing:
        for reference in ("forward", "decoder_forward"):
            ratios = row[f"median_round_ratio_to_{reference}"]
            cells = [f"{ratios[m]:.2f}×" for m in MODES]
            print("| " + " | ".join(map(str, [row["shots"], row["tokens"], reference, *cells])) + " |")
    print("(median over the rounds of each round's ratio)")
    for row in timing:
        print(f"\nk = {row['shots']} ({row['tokens']} tokens): where the extraction's seconds go")
        print("| phase | " + " | ".join(row["profile"]) + " |\n|---|---|---|")
        runs = list(row["profile"].values())
        for phase in runs[0]["seconds"]:
            cells = [f"{r['seconds'][phase]:.3f} s ({r['over_decoder_forward'][phase]:.2f}×)" for r in runs]
            print(f"| {phase} | " + " | ".join(cells) + " |")
        print("(median of 5 runs; in brackets: over the decoder-only forward's median beside them)")
        svd = ", ".join(f"{route} {sec:.3f} s" for route, sec in row["singular_values_seconds"].items())
        print(f"singular values of the prompt's {row['tokens']}-token maps (best of 5): {svd}")
    header = ["k", "prompts", "tokens", "prefix", "forwards", "extract, shared", "extract, whole", "ratio"]
    print("\n| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    for row in experiments:
        sec, ratio = row["seconds"], row["median_round_ratio"]
        print(
            f"| {row['shots']} | {row['prompts']} | {row['tokens'][0]}-{row['tokens'][1]} | "
            f"{row['shared_prefix_tokens']} | {sec['forwards']:.2f} s | {sec['shared']:.2f} s "
            f"({ratio['shared_over_forwards']:.2f}×) | {sec['whole']:.2f} s "
            f"({ratio['whole_over_forwards']:.2f}×) | {ratio['shared_over_whole']:.3f} |"
        )
    print(
        "(an experiment's extraction, median of --experiment-repeats rounds; in brackets: over its "
        "prompts' decoder forwards; ratio: shared over whole)"
    )
    stores = workflow_stores(args.stores) if args.stores.is_dir() else []
    if stores:
        print(f"\n| store under {args.stores} | tokens | attn bytes / raw f32 |\n|---|---|---|")
        for row in stores:
            print(f"| {row['store']} | {row['tokens']} | {row['stored_over_raw_float32']} |")
    header = ["k", "tokens", "mode", "extra peak MiB", "one layer MiB", "extra / layer"]
    print("\n| " + " | ".join(header) + " |\n" + "|---" * len(header) + "|")
    for row in mem:
        print("| " + " | ".join(str(row[key]) for key in MEMORY_KEYS) + " |")
    write(
        "attention",
        {
            "repeats": args.repeats,
            "timing": timing,
            "experiments": experiments,
            "memory": mem,
            "workflow_stores": stores,
            "memory_method": "peak RSS (VmHWM, reset through /proc/self/clear_refs) of the mode minus "
            "that of a plain decoder forward of the same prompt, alternating in a fresh process after "
            "a warm-up of the mode on a one-shot prompt; the larger peak of --memory-repeats runs each; "
            "MALLOC_MMAP_THRESHOLD_=65536",
        },
    )


if __name__ == "__main__":
    main()
