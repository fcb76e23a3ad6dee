"""The HTML report end to end: a real Snakemake run of the named `report` target on a tiny
config with three variants (the session's tiny_variants_run), then the report opened in headless
Chromium: every embedded figure decodes (no broken image), the app renders its categories, and a
screenshot shows a figure."""

from __future__ import annotations

import html as html_module
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from attnscope import claims, report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

# Injected into a copy of the report: show one figure in the report's own viewer, then decode
# every embedded PNG and write their sizes (0 × 0 = broken) into the DOM.
PROBE = """
<script>
(function probe() {
  if (typeof app === "undefined" || !app) { setTimeout(probe, 50); return; }  // React not mounted yet
  var images = Object.keys(results).filter(function (p) { return results[p].mime_type === "image/png"; });
  var shown = images.filter(function (p) { return p.indexOf("word_grid") >= 0; })[0] || images[0];
  app.setView({content: "img", contentPath: results[shown].data_uri, resultPath: shown});
  var checks = images.map(function (p) {
    return new Promise(function (resolve) {
      var img = new Image();
      img.onload = function () { resolve([p, img.naturalWidth, img.naturalHeight]); };
      img.onerror = function () { resolve([p, 0, 0]); };
      img.src = results[p].data_uri;
    });
  });
  Promise.all(checks).then(function (sizes) {
    setTimeout(function () {
      var viewer = Array.from(document.querySelectorAll("#app img")).filter(function (img) {
        return img.src.indexOf("data:image/png") === 0;
      })[0];
      var pre = document.createElement("pre");
      pre.id = "attnscope-probe";
      pre.textContent = JSON.stringify({
        shown: shown, images: sizes, viewer: viewer ? [viewer.naturalWidth, viewer.naturalHeight] : null
      });
      document.body.appendChild(pre);
    }, 300);
  });
})();
</script>
"""


@pytest.fixture
def report_run(tiny_variants_run) -> Path:
    return tiny_variants_run


def embedded_results(html: str) -> dict:
    """The report's `results` object: path → name, caption, mime type, data URI."""
    match = re.search(r"var results = (\{.*?\});\n", html, re.S)
    assert match, "no results object in the report"
    return json.loads(match.group(1))


def test_clue_comparison_and_html_tables():
    trained = pd.DataFrame(
        {
            "prompt_index": [1, 0],
            "target": ["Bee", "Ant"],
            "reference_clue": ["b", "a"],
            "clue": ["Buzz", "Tiny"],
        }
    )
    random = pd.DataFrame({"prompt_index": [0, 1], "target": ["Ant", "Bee"], "clue": ["xq", "<|x|>"]})
    table = report.clue_comparison({"trained": trained, "random-s0": random})
    assert list(table.columns) == ["Word", "Reference Clue", "trained", "random-s0"]
    assert table.values.tolist() == [["Ant", "a", "Tiny", "xq"], ["Bee", "b", "Buzz", "<|x|>"]]
    page = report.html_page(
        "Clues & claims", [("All", "note", table.assign(verdict=["supported", "not measured"]))]
    )
    assert page.startswith("<!doctype html>") and "<title>Clues &amp; claims</title>" in page
    assert "&lt;|x|&gt;" in page and "<|x|>" not in page, "cells are escaped"
    assert '<td class="supported">supported</td>' in page and '<td class="not-measured">' in page


@pytest.mark.integration
def test_report_bundles_figures_tables_and_claims(report_run):
    html = (report_run / "results" / "report.html").read_text(encoding="utf-8")
    results = embedded_results(html)
    names = set(results)
    figures = report_run / "results" / "figures" / "tiny-mistral"
    for variant in ("trained", "random-s0", "qkscale-a2"):
        for name in ("token_grid", "word_grid", "cosine"):
            assert f"results/figures/tiny-mistral/{variant}/animals-k2/Ant/{name}.png" in names
            assert (figures / variant / "animals-k2" / "Ant" / f"{name}.svg").stat().st_size > 1000
    for name in ("word_pass", "token_pass"):
        assert f"results/figures/tiny-mistral/trained/animals-k2/Ant/{name}.png" in names
    for name in (
        "spectra_random",
        "spectra_attention",
        "spectra_mlp",
        "base_alignment",
        "animals-k2_metric_curves",
    ):
        assert f"results/figures/tiny-mistral/{name}.png" in names
    assert {"results/figures/theory/mp_density.png", "results/figures/theory/slerp_kl.png"} <= names
    assert {"results/claims.html", "results/figures/tiny-mistral/animals-k2_clues.html"} <= names
    captions = {path: entry["caption"] for path, entry in results.items()}
    assert "fig. 8.7" in captions["results/figures/tiny-mistral/random-s0/animals-k2/Ant/word_grid.png"]
    assert "fig. 8.8" in captions["results/figures/tiny-mistral/qkscale-a2/animals-k2/Ant/word_grid.png"]
    assert "fig. A.22" in captions["results/figures/tiny-mistral/base_alignment.png"]
    # One job draws a store's maps; each map is still its own result with its own caption and labels.
    maps = "results/figures/tiny-mistral/trained/animals-k2/Ant"
    for kind, caption, figure in (
        ("cosine", "cosine similarity beside attention", "embedding cosine beside attention"),
        ("word_grid", "Word-level attention maps, layers", "word-level maps, 2×2 layers"),
        ("token_pass", "Token-level attention maps, every layer", "token-level maps, every layer"),
    ):
        entry = results[f"{maps}/{kind}.png"]
        assert caption in entry["caption"] and "<em>Ant</em>" in entry["caption"], entry["caption"]
        assert entry["labels"] == {"target": "Ant", "figure": f"{figure}, prompt + generated clue"}
        assert entry["job_properties"]["rule"] == "attention_figures"
    # The heads and knockout stages' figures: each drawn by its figure rule from its stage's table.
    for path, rule, label in (
        ("trained_head_types", "head_types_figure", "head types"),
        ("trained/animals-k2_rollout", "rollout_figures", "attention rollout"),
        ("trained/animals-k2_rollout_value", "rollout_figures", "value-weighted rollout"),
        ("head_correlations", "head_correlations_figure", "weights vs behaviour of heads"),
        ("animals-k2_knockout", "knockout_figure", None),
    ):
        entry = results[f"results/figures/tiny-mistral/{path}.png"]
        assert entry["job_properties"]["rule"] == rule and entry["labels"].get("figure") == label, entry
    assert all(caption.strip() for caption in captions.values()), "every result has a caption"
    table = pd.read_parquet(report_run / "results" / "claims.parquet")
    known = {*claims.VERDICTS, "not replicated on tiny-mistral"}  # not the thesis's model
    assert set(table["verdict"]) <= known and len(table) >= len(claims.CLAIMS)
    measured = table[table["verdict"] != claims.NOT_MEASURED]
    assert (measured["low"] <= measured["high"]).all() and measured["estimate"].notna().all()
    assert "random-uniform" in set(table["claim"])
    comparison = pd.read_csv(report_run / "results" / "tables" / "tiny-mistral" / "animals-k2_variants.csv")
    assert list(comparison.columns) == ["Word", "Reference Clue", "trained", "random-s0", "qkscale-a2"]
    assert list(comparison["Word"]) == ["Ant", "Bee", "Fox"]


def chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    profile = cwd / "chromium-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


@pytest.mark.integration
def test_report_renders_in_chromium(report_run, tmp_path):
    if CHROMIUM is None:
        message = "Debian chromium is not installed (apt-get install chromium)"
        if os.environ.get("ATTNSCOPE_CHROMIUM") == "1":  # set by .ci/run, which installs it
            pytest.fail(message)
        pytest.skip(message)
    html = (report_run / "results" / "report.html").read_text(encoding="utf-8")
    head, body_end, tail = html.rpartition("</body>")  # the last one: scripts contain the string too
    assert body_end, "no </body> in the report"
    probed = tmp_path / "report-probe.html"
    probed.write_text(head + PROBE + body_end + tail, encoding="utf-8")
    url = probed.as_uri()

    dom = chromium("--virtual-time-budget=20000", "--dump-dom", url, cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    match = re.search(r'<pre id="attnscope-probe">(.*?)</pre>', dom.stdout, re.S)
    assert match, "the probe did not run: the report's scripts failed in Chromium"
    probe = json.loads(html_module.unescape(match.group(1)))
    images = probe["images"]
    assert len(images) >= 20
    broken = [path for path, width, height in images if width == 0 or height == 0]
    assert not broken, f"broken images in the report: {broken}"
    assert probe["viewer"] is not None and probe["viewer"][0] > 100, "the report's viewer shows no figure"
    assert "Attention maps" in dom.stdout and "Thesis claims" in dom.stdout, "the app rendered no categories"

    shot = tmp_path / "report.png"
    run = chromium(
        "--virtual-time-budget=20000", "--window-size=1600,1100", f"--screenshot={shot}", url, cwd=tmp_path
    )
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (1100, 1600)
    content = pixels[:, 400:]  # right of the navigation bar: the figure viewer
    # The tiny model's maps are pale (near-uniform attention): count every non-white pixel.
    non_white = (content < 0.99).any(axis=-1).mean()
    colours = len(np.unique((content * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    blues = ((content[..., 2] > 0.55) & (content[..., 0] < 0.45)).mean()  # the colour bar's dark end
    assert non_white > 0.05, f"the figure area is blank ({non_white:.1%} non-white)"
    assert colours > 200, f"only {colours} colours: no rendered figure"
    assert blues > 0.0002, f"no attention-map colours in the screenshot ({blues:.3%})"
