"""The README and docs/: length, no tracker references, links that resolve, and
docs/performance.md rendered from the benchmarks' JSON."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 220
ISSUE_REFERENCE = re.compile(r"\bissue\s*#?\d+", re.IGNORECASE)
BARE_REFERENCE = re.compile(r"(?<![\w&/`])#\d+\b")
"""``#17`` in prose (Markdown only: ``#222`` is a colour in CSS and JS)."""
LINK = re.compile(r"\]\(([^)\s]+)\)")


def renderer():
    spec = importlib.util.spec_from_file_location(
        "render_performance", ROOT / "benchmarks" / "render_performance.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def references(path: Path) -> list[str]:
    """Lines of ``path`` that name a tracker issue ("issue 17", "Issue #17", and "#17" in Markdown)."""
    text = path.read_text(errors="replace")
    found = [m.group() for m in ISSUE_REFERENCE.finditer(text)]
    if path.suffix == ".md":
        found += BARE_REFERENCE.findall(ISSUE_REFERENCE.sub("", text))
    return found


def anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file, as GitHub makes them (code blocks skipped)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken_links(path: Path) -> list[str]:
    """Relative link targets in the Markdown file ``path`` that name no existing file, or no
    heading of an existing Markdown file."""
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = path.parent / file if file else path
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    return broken


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES


def test_no_issue_numbers_in_code_or_docs(tmp_path):
    files = [
        p for p in (ROOT / "src").rglob("*") if p.is_file() and p.suffix in {".py", ".js", ".css", ".html"}
    ]
    found = {str(p.relative_to(ROOT)): refs for p in files + markdown_pages() if (refs := references(p))}
    assert not found
    # the check finds what it is for, and leaves colours alone
    wrong = tmp_path / "wrong.md"
    wrong.write_text("As Issue 17 asks (see issue #3 and #12), colour `#222`.\n")
    assert references(wrong) == ["Issue 17", "issue #3", "#12"]
    css = tmp_path / "style.css"
    css.write_text("body { color: #222; }\n")
    assert references(css) == []


def test_relative_links_resolve(tmp_path):
    assert {str(p.relative_to(ROOT)): b for p in markdown_pages() if (b := broken_links(p))} == {}
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Top\n\n## The `x` table (`.y.parquet`)\n")
    page.write_text(
        "# Here\n[a](there.md#the-x-table-yparquet) [b](missing.md) [c](https://x.org/y) [d](#here)"
        " [e](there.md#nowhere) [f](#nowhere)\n"
    )
    assert broken_links(page) == ["missing.md", "there.md#nowhere", "#nowhere"]


def small_results() -> dict[str, dict]:
    """Two benchmark results as the benchmarks write them, with figures no real run gives."""
    source = {
        "machine": {"cores": 3, "cpu": "Test CPU 9000", "ram_gib": 7.5, "gpu": None, "python": "3.11.1"},
        "commit": "0123456789abcdef0123",
        "date": "2001-02-03 04:05 UTC",
    }
    return {
        "model_load": {
            **source,
            "benchmark": "model_load",
            "command": "python benchmarks/bench_model_load.py --repeats 7",
            "gguf_load_s": 12.34,
            "cache_load_s": 0.56,
            "speedup": 22.0,
            "prepare_once_s": 13.57,
        },
        "choices": {
            **source,
            "benchmark": "choices",
            "command": "python benchmarks/bench_choices.py --synthetic-tokens 77",
            "commit": "fedcba98765432100000-dirty",
            "tokens": 77,
            "layers": 32,
            "chunked": {"seconds": 4.321, "peak_added_mib": 85.0},
            "all_layers_at_once": {"seconds": 2.468, "peak_added_mib": 512.0},
        },
    }


def test_render_shows_each_figure_with_its_source():
    render = renderer().render
    text = render(small_results())
    for figure in ("12.34 s", "0.56 s", "22.0×", "13.57 s", "4.32 s, +85 MiB peak", "2.47 s, +512 MiB peak"):
        assert text.count(figure) == 1, figure
    for source in (
        "`python benchmarks/bench_model_load.py --repeats 7` at commit `0123456789ab`, 2001-02-03 04:05 UTC",
        "`python benchmarks/bench_choices.py --synthetic-tokens 77` at commit `fedcba987654-dirty`",
        "3 cores, Test CPU 9000, 7.5 GiB RAM, no GPU, Python 3.11.1",
    ):
        assert source in text
    # the model-load figures sit under their own source line, not under the other benchmark's
    section = text.split("## Model load")[1].split("## ")[0]
    assert "--repeats 7" in section and "12.34 s" in section and "4.32 s" not in section
    assert "Not measured yet: run `benchmarks/bench_spectra.py`" in text  # no JSON, no figures
    assert render(small_results()) == text  # deterministic


def test_render_names_the_file_and_key_of_a_missing_figure():
    results = small_results()
    del results["model_load"]["cache_load_s"]
    with pytest.raises(ValueError, match=r"benchmarks/out/model_load\.json: no key 'cache_load_s'"):
        renderer().render(results)
    with pytest.raises(ValueError, match=r"benchmarks/out/nosuch\.json: no section"):
        renderer().render({"nosuch": small_results()["choices"]})


def test_performance_page_is_rendered_from_the_committed_json(tmp_path):
    module = renderer()
    assert (ROOT / "docs" / "performance.md").read_text() == module.render(module.load())
    # a changed figure in the JSON changes the page
    results = module.load()
    name = next(iter(results))
    for path in (ROOT / "benchmarks" / "out").glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    changed = json.loads((tmp_path / f"{name}.json").read_text())
    changed["commit"] = "fedcba9876543210"
    (tmp_path / f"{name}.json").write_text(json.dumps(changed))
    assert module.render(module.load(tmp_path)) != module.render(results)
