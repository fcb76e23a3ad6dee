"""Render docs/performance.md from the benchmarks' JSON results in benchmarks/out/.

    python benchmarks/render_performance.py           # rewrite docs/performance.md
    python benchmarks/render_performance.py --check   # exit 1 if it is out of date

Every figure in the page comes from one JSON file and is printed once, under the machine,
command, commit and date that produced it. The same JSON gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
PAGE = ROOT / "docs" / "performance.md"


@dataclass(frozen=True)
class Row:
    """One figure of a table: what it is, its value, the target and whether it is met."""

    figure: str
    value: str
    target: str = ""
    met: bool | None = None


class Result:
    """One benchmark's JSON, read by dotted key paths; a missing key names the file and key."""

    def __init__(self, name: str, data: dict[str, Any]):
        self.name, self.data = name, data

    def __getitem__(self, path: str) -> Any:
        value: Any = self.data
        for key in path.split("."):
            if not isinstance(value, dict) or key not in value:
                raise ValueError(f"benchmarks/out/{self.name}.json: no key {path!r}")
            value = value[key]
        return value

    def get(self, path: str) -> Any:
        try:
            return self[path]
        except ValueError:
            return None


def seconds(s: float) -> str:
    """Seconds with a precision that suits their size."""
    if s >= 100:
        return f"{s:.0f} s"
    return f"{s:.2f} s" if s >= 0.1 else f"{1000 * s:.1f} ms"


def times(x: float) -> str:
    return f"{x:.2f}×"


def short_commit(commit: str) -> str:
    """The first 12 hex digits of a commit, keeping a ``-dirty`` mark."""
    digits, dirty, _ = commit.partition("-dirty")
    return digits[:12] + dirty


def source(result: Result) -> str:
    """The line that says which machine and command produced a result."""
    m = result["machine"]
    parts = [f"{result['machine.cores']} cores", result["machine.cpu"]]
    if m.get("ram_gib") is not None:
        parts.append(f"{m['ram_gib']} GiB RAM")
    parts.append(m.get("gpu") or "no GPU")
    parts.append(f"Python {result['machine.python']}")
    if m.get("torch"):
        parts.append(f"torch {m['torch']}")
    if m.get("load_average_1min_start_end") is not None:
        parts.append("1-min load average {} → {}".format(*m["load_average_1min_start_end"]))
    elif m.get("load_average_1min") is not None:
        parts.append(f"1-min load average {m['load_average_1min']} at the end")
    line = (
        f"Source: `{result['command']}` at commit `{short_commit(result['commit'])}`, {result['date']}; "
        f"{', '.join(parts)}."
    )
    if result.get("transcribed"):
        line += f" *Transcribed:* {result['transcribed']}."
    return line


def table(rows: Iterable[Row]) -> list[str]:
    lines = ["| figure | value | target | met |", "|---|---|---|---|"]
    for row in rows:
        met = {True: "yes", False: "**no**", None: ""}[row.met]
        lines.append(f"| {row.figure} | {row.value} | {row.target} | {met} |")
    return lines


JOB_SECONDS_BAR = 0.6
"""Issue 40's bar on the default run's job seconds when work beside it added jobs first: this
fraction of the run just before its first commit (``--compare``), measured back to back."""


WORKFLOW_BARS = {
    "workflow": {"cold_run_s": 600, "noop_rerun_s": 3, "job_s": 1200},
    "workflow-families": {"cold_run_s": 300},
}
"""Per workflow benchmark, the bars its figures are held to (seconds): the default run's of issue 40
(cold run, no-op rerun, job seconds), the families example's of issue 42 (≤ 5 min on 2 cores)."""


def noop_runs(r: Result) -> str:
    """The reruns a no-op figure is the median of, and the commit they ran at if not the cold run's."""
    if not r.get("noop_rerun_runs_s"):
        return ""
    at = f", measured again at `{r['noop_commit'][:12]}` (`--noop`)" if r.get("noop_commit") else ""
    return f"; median of {', '.join(seconds(s) for s in r['noop_rerun_runs_s'])}{at}"


def workflow(r: Result) -> list[str]:
    default = r.name == "workflow"
    bars = WORKFLOW_BARS.get(r.name, {})

    def held(figure: str, value: float, ok: bool = True) -> tuple[str, bool | None]:
        """The target column and whether it is met, for a figure with a bar in :data:`WORKFLOW_BARS`."""
        if figure not in bars:
            return "", None
        return f"≤ {bars[figure]:g} s", value <= bars[figure] and ok

    profile = r["cold_run_profile"]
    rows = [
        Row(
            f"cold {'default ' if default else ''}run ({r['cold_run_jobs']} jobs, `--cores {r['cores']}`)",
            seconds(r["cold_run_s"]),
            *held("cold_run_s", r["cold_run_s"]),
        ),
        Row(
            f"no-op rerun ({r['noop_rerun_jobs']} jobs run{noop_runs(r)})",
            seconds(r["noop_rerun_s"]),
            *held("noop_rerun_s", r["noop_rerun_s"], r["noop_rerun_jobs"] == 0),
        ),
    ]
    if r.get("snakemake_start_s"):
        rows.append(
            Row(
                "Snakemake's own start beside it (`snakemake --version`: its imports and plugins, "
                f"no workflow; median of {', '.join(seconds(s) for s in r['snakemake_start_runs_s'])})",
                seconds(r["snakemake_start_s"]),
            )
        )
    if "job_s" in profile:
        before = r.get("compared_profile.job_s")
        if before and "job_s" in bars:
            bar = JOB_SECONDS_BAR * before
            of = f" (`{r['baseline']}`)" if r.get("baseline") else ""
            target = (f"≤ {JOB_SECONDS_BAR} × {seconds(before)}{of}", profile["job_s"] <= bar)
        else:
            target = held("job_s", profile["job_s"])
        rows += [
            Row(
                "job seconds (all jobs; CPU seconds {})".format(seconds(profile["job_cpu_s"])),
                seconds(profile["job_s"]),
                *target,
            ),
            Row(f"critical path ({len(profile['critical_path'])} jobs)", seconds(profile["critical_path_s"])),
        ]
    if r.get("compared_with"):
        diffs = r["differences"]
        named = ", ".join(f"`{name}` ± {value:g}" for name, value in (r.get("tolerances") or {}).items())
        rows.append(
            Row(
                f"outputs against {r['compared_with']}: Parquet columns, Zarr arrays (float16: one step"
                + (f"; {named}" if named else "")
                + ")",
                "equal" if not diffs else f"{len(diffs)} differ",
                "equal",
                not diffs,
            )
        )
    compared = r.get("compared_profile.rules") or {}
    rows += [
        Row(
            f"`{rule}` job seconds ({entry['jobs']} jobs)",
            seconds(entry["s"])
            + (f" (before: {seconds(compared[rule]['s'])})" if rule in compared else "")
            + (f"; {seconds(entry['critical_s'])} on the critical path" if entry.get("critical_s") else ""),
        )
        for rule, entry in r["cold_run_profile.rules"].items()
    ]
    lines = table(rows)
    if profile.get("critical_path"):
        chain = " → ".join(f"`{job['rule']}` {seconds(job['s'])}" for job in profile["critical_path"])
        lines += ["", f"Critical path: {chain}."]
    return lines


def ratio_row(figure: str, value: float | None, limit: float | None = None) -> Row | None:
    """A ratio with its ≤ target; None where the JSON does not carry the figure."""
    if value is None:
        return None
    if limit is None:
        return Row(figure, times(value))
    return Row(figure, times(value), f"≤ {limit:g}×", value <= limit)


ATTENTION_RATIOS = (
    ("capture + write / forward", "median_round_ratio_to_forward", "capture_write", 1.2),
    ("capture + write / decoder", "median_round_ratio_to_decoder_forward", "capture_write", 1.15),
    ("naive `output_attentions` + write / forward", "median_round_ratio_to_forward", "naive", None),
    ("naive `output_attentions` + write / decoder", "median_round_ratio_to_decoder_forward", "naive", None),
    (
        "decoder forward on one thread (the extraction's, beside its layer thread) / decoder",
        "median_round_ratio_to_decoder_forward",
        "forward_decoder_one_thread",
        None,
    ),
    ("full extraction, heads kept / decoder", "median_round_ratio_to_decoder_forward", "extract", 1.4),
    (
        "full extraction, head means / decoder",
        "median_round_ratio_to_decoder_forward",
        "extract_head_means",
        1.4,
    ),
)
"""Per prompt: the figure, the JSON's ratio table, its mode, the target (≤, None: none)."""


def attention(r: Result) -> list[str]:
    lines = [
        "Per prompt (target Ant), median over the rounds of each round's ratio; *decoder* is the",
        "decoder-only forward the capture runs (no LM head), *forward* the whole model's.",
        "",
    ]
    rows: list[Row | None] = []
    for t in r["timing"]:
        at = f"k = {t['shots']}, {t['tokens']} tokens"
        rows += [
            ratio_row(f"{f}, {at}", t.get(ratios, {}).get(mode), limit)
            for f, ratios, mode, limit in ATTENTION_RATIOS
        ]
        rows += [
            ratio_row(
                f"`kernel: sdpa` extraction / SDPA decoder, {at}",
                t.get("sdpa_extract_over_sdpa_decoder_forward"),
                1.2,
            ),
            ratio_row(f"zstd encoding of `attn` alone / decoder, {at}", t.get("encode_over_decoder_forward")),
            Row(
                f"stored `attn` bytes / raw float32, {at}",
                f"{t['stored_over_raw_float32']:.4f}",
                "≤ 0.2",
                t["stored_over_raw_float32"] <= 0.2,
            ),
            Row(
                f"stored float16 values exact, {at}",
                "yes" if t["float16_exact"] else "no",
                "exact",
                t["float16_exact"],
            ),
        ]
        rows.append(
            ratio_row(
                f"full extraction / the same without the value-weighted maps, {at}",
                t.get("extract_over_weights_only"),
            )
        )
        if "singular_values_seconds" in t:
            svd = ", ".join(f"{k} {seconds(v)}" for k, v in t["singular_values_seconds"].items())
            rows.append(Row(f"singular values of the prompt's maps, {at}", svd))
    for e in r["experiments"]:
        at = f"k = {e['shots']}, {e['prompts']} prompts of {e['tokens'][0]}–{e['tokens'][1]} tokens"
        ratio = e["median_round_ratio"]
        rows += [
            ratio_row(
                f"one experiment's extraction, shared prefix ({e['shared_prefix_tokens']} tokens) "
                f"/ decoder forwards, {at}",
                ratio["shared_over_forwards"],
                1.4,
            ),
            ratio_row(f"the same, each prompt whole / decoder forwards, {at}", ratio["whole_over_forwards"]),
        ]
    for m in r["memory"]:
        mib = f" ({m['extra_peak_mib']:.1f} MiB)" if m.get("extra_peak_mib") is not None else ""
        figure = (
            f"extra peak memory of `{m['mode']}` over a decoder forward, {m['tokens']} tokens, "
            "in one layer's float32 attention"
        )
        value = f"{m['extra_over_layer']:.2f}×{mib}"
        if m["mode"] == "naive":  # the reference the capture avoids, no target of its own
            rows.append(Row(figure, value))
        else:
            rows.append(Row(figure, value, "≤ 2×", m["extra_over_layer"] <= 2))
    for store in r["workflow_stores"]:
        ratio = store["stored_over_raw_float32"]
        rows.append(
            Row(
                f"stored `attn` bytes / raw float32, workflow store `{store['store']}`",
                f"{ratio:.4f}",
                "≤ 0.2",
                ratio <= 0.2,
            )
        )
    lines += table(row for row in rows if row is not None)
    for t in r["timing"]:
        profile = t.get("profile")
        if not profile:
            continue
        modes = list(profile)
        lines += [
            "",
            f"Where the extraction's seconds go, k = {t['shots']} ({t['tokens']} tokens), in units of "
            "the decoder forward beside them (median of the runs; the layer thread's rows run beside "
            "the forward pass, so they add up to its busy time, not to a share of the total):",
            "",
            "| phase | " + " | ".join(f"`{mode}`" for mode in modes) + " |",
            "|---|" + "---:|" * len(modes),
        ]
        for phase in profile[modes[0]]["over_decoder_forward"]:
            cells = [times(profile[mode]["over_decoder_forward"][phase]) for mode in modes]
            lines.append(f"| {phase.strip()} | " + " | ".join(cells) + " |")
    return lines


def generation(r: Result) -> list[str]:
    at = (
        f"{r['prompts']} prompts of {r['mean_prompt_tokens']} tokens on average "
        f"({r['shared_prefix_tokens']} shared), batch {r['batch_size']}, "
        f"{r['generated_tokens']} tokens generated"
    )
    rows = [
        Row(f"one prompt at a time, {at}", seconds(r["sequential_s"])),
        Row(
            "shared-prefix KV cache, prompts joining as rows free (the rule's route): speed-up",
            f"{times(r['speedup_shared_prefix'])} ({seconds(r['shared_prefix_s'])})",
            "≥ 2.5×",
            r["speedup_shared_prefix"] >= 2.5,
        ),
        Row(
            "the same in fixed batches: speed-up",
            f"{times(r['speedup_shared_prefix_fixed_batches'])} "
            f"({seconds(r['shared_prefix_fixed_batches_s'])})",
        ),
        Row(
            "batched without the shared prefix: speed-up",
            f"{times(r['speedup_batched'])} ({seconds(r['batched_s'])})",
        ),
        Row(
            "outputs of every route identical",
            "yes" if r["same_outputs"] else "no",
            "identical",
            r["same_outputs"],
        ),
    ]
    for route in ("sequential", "shared_prefix"):
        p = r[f"profile.{route}"]
        rows.append(
            Row(
                f"`{route}`: prefill calls (tokens) / decode steps",
                f"{p['prefill_calls']} ({p['prefill_tokens']} tokens) in {seconds(p['prefill_s'])} / "
                f"{p['decode_steps']} in {seconds(p['decode_s'])}",
            )
        )
    return table(rows)


JOB_START_PHASES = {
    "import_torch_s": "import torch",
    "import_models_s": "import the model code (`attnscope.models`, transformers)",
    "load_model_s": "`load_model` (prepared safetensors, tokenizer)",
    "process_s": "the whole process",
}
"""The phases of a model job's start that bench_model_load times, in order."""


def model_load(r: Result) -> list[str]:
    rows = [
        Row("load from the safetensors cache", seconds(r["cache_load_s"])),
        Row("convert the GGUF", seconds(r["gguf_load_s"])),
        Row("speed-up of the cache", f"{r['speedup']:.1f}×"),
        Row("prepare the model once (`prepare_model`)", seconds(r["prepare_once_s"])),
    ]
    if r.get("weights_read"):
        rows.append(
            Row(
                "the cache's weights read: `from_pretrained` / assigned to a skeleton built without init",
                f"{seconds(r['weights_read.from_pretrained_s'])} / "
                f"{seconds(r['weights_read.assign_safetensors_s'])} ({r['weights_read.speedup']:.1f}×)",
            )
        )
    if r.get("job_start"):
        start = r["job_start"]
        rows += [
            Row(
                f"a model job's start, {label}: commit `{start['baseline_commit']}` → this one "
                f"(median of {start['starts']} fresh processes each, alternating)",
                f"{seconds(start['baseline'][key]['median'])} → "
                f"{seconds(start['this_checkout'][key]['median'])} ({start['speedup_median'][key]:.2f}×)",
            )
            for key, label in JOB_START_PHASES.items()
        ]
    return table(rows)


def knockout(r: Result) -> list[str]:
    rows = [
        Row("prompts (mean tokens), threads", f"{r['prompts']} ({r['prompt_tokens_mean']}), {r['threads']}")
    ]
    for edges in ("target-shotwords", "across-shots"):
        e = r[edges]
        rows += [
            Row(
                f"`{edges}`: whole / shared, per prompt",
                f"{seconds(e['whole_s_per_prompt'])} / {seconds(e['shared_s_per_prompt'])} "
                f"(first blocked query at token {e['first_blocked_query_mean']})",
            ),
            Row(
                f"`{edges}`: speed-up of sharing (max difference)",
                f"{e['speedup']:.2f}× ({e['max_abs_difference']:.1g})",
            ),
        ]
    if r.get("stage"):
        st = r["stage"]
        rows.append(
            Row(
                "stage: prompts, knockouts, edge sets",
                f"{st['prompts']}, {st['knockouts']}, {st['edge_sets']}",
            )
        )
        for route, label in (
            ("before", "one job per knockout, before"),
            ("per_knockout", "one job per knockout (prefix shared by both clues)"),
            ("per_edge_set", "one job per edge set (every window)"),
        ):
            rows.append(
                Row(
                    f"stage: {label}, per prompt ({st[route]['jobs']} jobs)",
                    f"{seconds(st[route]['s_per_prompt'])} ({st[route]['speedup']:.2f}×)",
                )
            )
        rows.append(
            Row(
                "stage: model load per job; rows equal `before`'s bytes",
                f"{seconds(st['model_load_s'])}; {st['rows_equal_before']}",
            )
        )
    return table(rows)


def model_jobs(r: Result) -> list[str]:
    start, before, after = r["model_start"], r["before"], r["after"]

    def jobs(run: dict) -> str:
        return f"{run['jobs']:g}, {seconds(run['s'])} ({seconds(run['cpu_s'])})"

    rows = [
        Row(
            f"a model job's start: `{start['statement']}` in a fresh interpreter, median of "
            f"{start['starts']} (range)",
            f"{seconds(start['median_s'])} ({seconds(start['min_s'])}–{seconds(start['max_s'])})",
        ),
        *(
            Row(
                f"`{rule}`: jobs, job seconds (CPU seconds), before → after",
                f"{jobs(before['rules'][rule])} → {jobs(after['rules'][rule])}",
            )
            for rule in after["rules"]
        ),
        Row(
            "all jobs: jobs, job seconds (CPU seconds), before → after",
            f"{jobs({**before, 's': before['job_s'], 'cpu_s': before['job_cpu_s']})} → "
            f"{jobs({**after, 's': after['job_s'], 'cpu_s': after['job_cpu_s']})}",
        ),
        Row(
            "the run, first to last stamp of its Snakemake log, before → after",
            "{} → {}".format(seconds(before["span_s"]), seconds(after["span_s"])),
        ),
    ]
    outputs = r["outputs"]
    differ = ", ".join(f"`{name}`" for name in outputs["differ"])
    alone = {side: len(outputs[f"only_{side}"]) for side in ("before", "after")}
    rows.append(
        Row(
            "results files byte-identical before and after (logs and benchmark TSVs left out)",
            f"{outputs['files'] - len(outputs['differ'])} of {outputs['files']}"
            + (f"; differ: {differ}" if differ else "")
            + "".join(f"; {n} files only {side}" for side, n in alone.items() if n),
        )
    )
    if r.get("side_by_side"):
        sides = r["side_by_side"]
        rows += [
            Row(
                f"{label}, forced in copies of both runs, before and after alternating: before → after "
                f"(median of {sides['rounds']} rounds)",
                f"{seconds(sides['median']['before'][key])} → {seconds(sides['median']['after'][key])} "
                f"({times(sides['ratio'][key])})",
            )
            for key, label in (("wall_s", "both stages' snakemake command"), ("job_s", "their job seconds"))
        ]
    rows += [
        Row(
            f"`{rule}`, one job per model × variant, each job's seconds (`{run['workdir']}`)",
            "; ".join(
                f"`{model}`: " + ", ".join(f"{variant} {seconds(s)}" for variant, s in variants.items())
                for model, variants in models.items()
            ),
        )
        for run in r["per_variant"]
        for rule, models in run["rules"].items()
    ]
    lines = [f"Before: the run in `{before['workdir']}`; after: the run in `{after['workdir']}`.", ""]
    return lines + table(rows)


def spectra(r: Result) -> list[str]:
    verdict, timings = r["verdict"], r["timings_s"]
    ours = timings["attnscope compute_spectra"]
    before, after = r["load_average_before_after"]
    lines = [
        f"{verdict['matrices_compared']} matrices of {r['model']}, "
        f"{r['threads']} threads, best of {r['repeats']}; load average {before[0]:.2f} → {after[0]:.2f}.",
        "",
    ]
    rows = [
        Row(f"`{name}`", f"{seconds(s)} ({times(s / ours)} the default `compute_spectra`)")
        for name, s in sorted(timings.items(), key=lambda item: item[1])
    ]
    rows += [
        Row(
            "`randomize: false` vs WeightWatcher `analyze()`",
            times(verdict["speedup_vs_weightwatcher"]),
            "≥ 5×",
            verdict["pass_weightwatcher_5x"],
        ),
        Row(
            "default (randomisation test) vs `analyze(mp_fit=True, randomize=True)`",
            times(verdict["speedup_vs_weightwatcher_mp_fit_randomize"]),
            "≥ 5×",
            verdict["pass_weightwatcher_mp_fit_randomize_5x"],
        ),
        Row(
            "`randomize: false` / fastest bare decomposition loop",
            times(verdict["ratio_to_fastest_bare_loop"]),
            "≤ 1.2×",
            verdict["pass_within_1.2x_bare"],
        ),
        Row(
            f"largest relative eigenvalue difference to WeightWatcher "
            f"({verdict['matrices_compared']} matrices)",
            f"{verdict['max_rel_eigenvalue_diff']:.1e}",
            "≤ 1e-4",
            verdict["pass_accuracy"],
        ),
    ]
    return lines + table(rows)


def choices(r: Result) -> list[str]:
    at = f"one synthetic {r['tokens']}-token prompt, {r['layers']} layers"
    return table(
        [
            Row(
                f"layers in chunks (the capture's way), {at}",
                f"{seconds(r['chunked.seconds'])}, +{r['chunked.peak_added_mib']:.0f} MiB peak",
            ),
            Row(
                f"all layers at once, {at}",
                f"{seconds(r['all_layers_at_once.seconds'])}, "
                f"+{r['all_layers_at_once.peak_added_mib']:.0f} MiB peak",
            ),
        ]
    )


def explorer(r: Result) -> list[str]:
    kind = "synthetic store" if r["synthetic"] else "store"
    rows = [
        Row(
            f"server start to the first map ({kind} `{r['store']}`, {r['store_mib']} MiB, "
            f"{r['tokens_shown']} tokens shown)",
            seconds(r["first_map_s"]),
            "< 2 s",
            r["first_map_s"] < 2,
        ),
        Row(
            f"layer/head switch (`/api/map`{', per-head maps' if r['per_head'] else ''}) p50 / p95",
            f"{r['switch_p50_ms']:.1f} / {r['switch_p95_ms']:.1f} ms",
            "p95 < 200 ms",
            r["switch_p95_ms"] < 200,
        ),
    ]
    if r.get("curves_p95_ms") is not None:
        rows.append(Row("metric curves (`/api/metrics`) p95", f"{r['curves_p95_ms']:.1f} ms"))
    for clients in (1, 10, 20):
        p95 = r.get(f"clients{clients}_p95_ms")
        if p95 is None:
            continue
        target = ("p95 < 200 ms", p95 < 200) if clients == 20 else ("", None)
        rows.append(
            Row(
                f"100 map requests from {clients} client{'s' if clients > 1 else ''} at once, p50 / p95",
                f"{r[f'clients{clients}_p50_ms']:.1f} / {p95:.1f} ms",
                *target,
            )
        )
    if r.get("page_view_p50_ms") is not None:
        rows += [
            Row(
                "the page's own view time (headless Chromium) p50 / p95",
                f"{r['page_view_p50_ms']:.1f} / {r['page_view_p95_ms']:.1f} ms",
            ),
            Row("the page's JS heap", f"{r['page_js_heap_mib']:.0f} MiB"),
            Row("server RSS after the page", f"{r['server_rss_mib_after_page']:.0f} MiB"),
        ]
    else:
        rows.append(Row("server RSS", f"{r['server_rss_mib']:.0f} MiB"))
    return table(rows)


def kernels(r: Result) -> list[str]:
    first, second = r["capabilities"]
    rows = [
        Row(
            f"generated clues that differ (`{second}` against `{first}`)",
            f"{r['clues_that_differ']} of {r['clues']}",
            "0",
            r["clues_that_differ"] == 0,
        )
    ]
    for name, columns in r["tables"].items():
        if columns == "identical":
            rows.append(Row(f"`{name}`", "byte-identical"))
            continue
        moved = ", ".join(
            f"{column} ({c['rows']} rows" + (f", ≤ {c['max_abs']:.1g})" if "max_abs" in c else ")")
            for column, c in columns.items()
        )
        rows.append(Row(f"`{name}`: columns that differ", moved or "none (metadata only)"))
    by_array: dict[str, list[dict]] = {}
    for path, found in r["arrays_that_differ"].items():
        by_array.setdefault(path.rsplit("/", 1)[-1], []).append(found)
    for array, found in sorted(by_array.items()):
        elements, of = sum(f["elements"] for f in found), sum(f["of"] for f in found)
        steps = max((f.get("max_float16_steps", 0) for f in found), default=0)
        size = max(f["max_abs"] for f in found)
        rows.append(
            Row(
                f"`{array}` arrays: elements that differ",
                f"{elements} of {of} (≤ {size:.1g}" + (f", ≤ {steps} float16 steps)" if steps else ")"),
            )
        )
    return table(rows)


SECTIONS: dict[str, tuple[str, str, Callable[[Result], list[str]]]] = {
    "workflow": (
        "The default workflow",
        "A cold run of the default config in a fresh working directory (nothing cached), then the "
        "same command again, which must run no job; per-rule job seconds from Snakemake's benchmark files, "
        "and the critical path (the longest chain of jobs, each reading the one before). Computed only when "
        "a config key asks, because no table, figure, claim or explorer view of the default run reads them: "
        "the kept heads' singular values (`attention.head_spectra`; the metrics table's `effective_rank` and "
        "`epsilon_rank` of head rows come from them) and the greedy clue under each knockout "
        "(`knockout.greedy`). `a6a49a9`: the default run of the commit before the speed work began, "
        "run whole on the same machine the same morning, the reference of the job-seconds bar (the "
        "default run's ≤ 0.6 × its, `bench_workflow.py --profile RUN --baseline A6RUN`; its outputs "
        "differ on purpose: the science work landed between).",
        workflow,
    ),
    "attention": (
        "Attention capture and extraction",
        "The attention capture into Zarr on the embedded SmolLM2 against plain forwards, modes "
        "alternating in rounds; memory per mode in a fresh process; stored bytes "
        "([attention.md](attention.md#performance) explains the modes and the floor).",
        attention,
    ),
    "generation": (
        "Generation",
        "Greedy generation of the Animals k = 3 prompts on the embedded model, routes alternating "
        "in one run.",
        generation,
    ),
    "model_load": (
        "Model load",
        "The embedded SmolLM2: the prepared safetensors cache against converting the GGUF.",
        model_load,
    ),
    "knockout": (
        "Knockout effects",
        "A clue's teacher-forced log-probabilities with and without a knockout on the embedded "
        "SmolLM2 (one thread, as the `knockout` rule runs): two whole forward passes per prompt "
        "against the positions before the first blocked query run once per prompt; routes "
        "alternating in one run. The rule also runs the prompts' common tokens once for all "
        "prompts, which the first rows do not measure. `stage`: every knockout of config.yaml on a "
        "few prompts by the stage's routes, alternating edge set by edge set: before (one "
        "`prompt_effects` call per knockout, the code of commit `--before`), one call per knockout, "
        "and one call per edge set, whose windows share the unchanged model's passes. The workflow "
        "runs one job per edge set: a changed window list reruns every edge set's job, which "
        "costs about what one window's job did before (the shared passes dominate a job), so the "
        "finer rerun was not worth a model start and those passes per window. Since commit "
        "`099d6a5` a job's unchanged maps (`blocked_mass`) are those of the queries from the first "
        "blocked one on, continuing the KV cache the knockouts' rows continue, not a whole pass per "
        "prompt: float32 rounding away from it, so `blocked_mass` and the effects table's "
        "`blocked_mass_low`, `blocked_mass_high` and `mass_ratio` moved by at most 8.7e-8, 1.3e-8, "
        "1.3e-8 and 1.0e-7 on the default run, every other table and Zarr array equal "
        "(`bench_workflow.py`'s `TOLERANCES`: 1e-6, 1e-6, 1e-6, 1e-5).",
        knockout,
    ),
    "model_jobs": (
        "One job per model for weight spectra and head types",
        "Every job that loads a model first imports torch and transformers' model code (the first "
        "row; nothing in it is left to import less of), then loads its model and works: on the tiny "
        "models for less time than that start, on SmolLM2 for up to a few times it. `weight_spectra` and "
        "`head_types` therefore run one job per model that loads each variant of the spectra "
        "(trained, `spectra.variants`, the random one) in turn and frees it before the next, instead "
        "of one job per model × variant: the default run's twelve such jobs (six variants) become "
        "two, the families example's sixteen (four models, two variants) eight. Every output keeps "
        "its bytes (each variant's config digest leaves the variant list out). The rows: two cold "
        "runs of the families example, one after the other, and the two stages alone, rerun side by "
        "side. The cost: a changed `spectra.variants` list reruns each model's two jobs, every "
        "variant's spectra and head types, where it ran the new variant's two jobs alone (the last "
        "rows: each per-variant job's seconds, most of them the start on the tiny models); and a "
        "cluster no longer runs a model's variants side by side (Mistral-7B's spectra on CPU: one "
        "job of six variants' runtime, [cluster.md](cluster.md)). Every cold run pays the starts, "
        "while a config's variant list seldom changes once chosen: one start per model is worth "
        "the coarser rerun.",
        model_jobs,
    ),
    "spectra": (
        "Weight spectra",
        "Every weight spectrum of the embedded SmolLM2 with attnscope, WeightWatcher and bare "
        "decomposition loops, side by side in one process "
        "([spectra.md](spectra.md#decomposition-routes-and-speed)).",
        spectra,
    ),
    "choices": (
        "Analysis choices on a long prompt",
        "The analysis choices of one Mistral-7B-shaped synthetic prompt, layers in chunks against "
        "all at once.",
        choices,
    ),
    "kernels": (
        "Other CPUs' kernels",
        "One experiment's clues, store and metrics and the trained spectra of the default config, "
        "run cold under two `ATEN_CPU_CAPABILITY` values on one machine and compared file by file "
        "([attention.md](attention.md#reproducibility-what-holds-where) says what holds where).",
        kernels,
    ),
    "explorer": (
        "Explorer",
        "The explorer's server in its own process: first map, layer/head switches, concurrent "
        "clients ([explorer.md](explorer.md#speed)).",
        explorer,
    ),
}
"""Per benchmark (the JSON's ``benchmark``; ``explorer-*`` files share one): heading,
what it measures, and the function that turns its JSON into lines."""


def load(out: Path = OUT) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` under ``out`` by file stem, sorted."""
    results = {}
    for path in sorted(out.glob("*.json")):
        try:
            results[path.stem] = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON: {error}") from error
    return results


def render(results: dict[str, dict[str, Any]]) -> str:
    """The page for ``results`` (file stem → JSON); the same input gives the same text."""
    by_kind: dict[str, list[str]] = {kind: [] for kind in SECTIONS}
    for name in sorted(results):
        kind = name.split("-", 1)[0]
        if kind not in SECTIONS:
            raise ValueError(
                f"benchmarks/out/{name}.json: no section for benchmark {kind!r} in {Path(__file__).name}"
            )
        by_kind[kind].append(name)
    lines = [
        "# Performance",
        "",
        "<!-- Generated by benchmarks/render_performance.py from benchmarks/out/*.json; do not edit. -->",
        "",
        "Every figure below comes from the JSON a script in `benchmarks/` wrote to `benchmarks/out/`,",
        "and is given once, under the command, commit, date and machine that produced it. Ratios are",
        "measured side by side in one run, so they hold where absolute times drift with the machine's",
        "load. To update: run the benchmark, then `python benchmarks/render_performance.py`.",
    ]
    for kind, (heading, what, fn) in SECTIONS.items():
        lines += ["", f"## {heading}", "", what]
        if not by_kind[kind]:
            lines += [
                "",
                f"Not measured yet: run `benchmarks/bench_{kind}.py` (its `--help` gives the options).",
            ]
        for name in by_kind[kind]:
            result = Result(name, results[name])
            if name != kind:
                lines += ["", f"### `{name.split('-', 1)[1]}`"]
            lines += ["", source(result), "", *fn(result)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/performance.md is out of date")
    args = parser.parse_args()
    text = render(load())
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            sys.exit(f"{PAGE.relative_to(ROOT)} is out of date: run python benchmarks/render_performance.py")
        return
    tmp = PAGE.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(PAGE)
    print(f"wrote {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
