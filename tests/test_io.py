"""Provenance: the config digest a job records, computed by a real Snakemake job's script from
its params, extra values and the digests its inputs record."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import zarr

from attnscope import io

SNAKEFILE = """
rule job:
    input:
        table="upstream.parquet",
        nothing=lambda wildcards: [],
        more=["manifest.json", "store.zarr"],
    output:
        "digest_{name}.txt",
    params:
        options={"epsilon": 0.5},
        dpi=72,
        name=lambda wildcards: [wildcards.name, 2],
    script:
        "job.py"
"""

SCRIPT = """
import json

from attnscope import io

inputs = ["table", "nothing", "more"]
digests = {
    "all": io.job_digest(snakemake, snakemake.wildcards.name, inputs=inputs),
    "without_name": io.job_digest(snakemake, snakemake.wildcards.name, inputs=inputs, leave_out=["name"]),
}
try:
    io.job_digest(snakemake, leave_out=["name", "variants"])
except ValueError as error:
    digests["unknown"] = str(error)
io.write_text(json.dumps(digests), snakemake.output[0])
"""


@pytest.fixture
def upstream(tmp_path):
    """A folder with three upstream outputs that record digests: a table, a manifest, a store."""
    io.write_parquet(pd.DataFrame({"x": [1]}), tmp_path / "upstream.parquet", {"config_digest": "table0"})
    (tmp_path / "manifest.json").write_text(json.dumps({"spec_digest": "manifest0"}))
    zarr.open_group(tmp_path / "store.zarr", mode="w").attrs["config_digest"] = "store0"
    return tmp_path


def test_recorded_digest_of_each_kind(upstream):
    assert [
        io.recorded_digest(upstream / name) for name in ("upstream.parquet", "manifest.json", "store.zarr")
    ] == [
        "table0",
        "manifest0",
        "store0",
    ]


def test_a_json_without_a_spec_digest_names_the_file(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"config_digest": "x"}))
    with pytest.raises(ValueError, match=r"report\.json: not a model manifest \(no 'spec_digest' key\)"):
        io.recorded_digest(report)


def test_job_digest_in_a_snakemake_job(upstream):
    """Params in the rule's order (but a figure's dpi, which decides no table, and those named in
    ``leave_out``), then the extra values, then each named input's recorded digest; an input given
    as an empty list adds nothing; a ``leave_out`` that names no param is an error."""
    (upstream / "Snakefile").write_text(textwrap.dedent(SNAKEFILE))
    (upstream / "job.py").write_text(textwrap.dedent(SCRIPT))
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "-d", str(upstream), "digest_n.txt"],
        cwd=upstream,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    digests = json.loads((upstream / "digest_n.txt").read_text())
    digest = digests["all"]
    params = ({"epsilon": 0.5}, ["n", 2])
    assert digest == io.config_digest(*params, "n", "table0", "manifest0", "store0")
    assert digest != io.config_digest(*params, "n", "manifest0", "store0", "table0")  # inputs out of order
    assert digest != io.config_digest(*params, "table0", "manifest0", "store0")  # the extra value left out
    assert digests["without_name"] == io.config_digest({"epsilon": 0.5}, "n", "table0", "manifest0", "store0")
    assert digests["unknown"] == "leave_out names no param of rule job: variants"


def test_markdown_and_html_tables_write_a_cell_alike():
    """Empty for None and NaN, four significant digits for a float, text as it is: the Markdown
    tables escape ``|`` and newlines, the HTML tables escape markup."""
    from attnscope import report

    table = pd.DataFrame(
        {"a": pd.Series([None, 0.123456, 2.0], dtype=object), "b": [float("nan"), "x|y\nz", "<b>"]}
    )
    assert io.markdown_table(table).splitlines()[2:] == ["|  |  |", "| 0.1235 | x\\|y z |", "| 2 | <b> |"]
    html = report.table_html(table, verdict_column=None)
    assert (
        "<td></td><td></td></tr><tr><td>0.1235</td><td>x|y\nz</td></tr><tr><td>2</td><td>&lt;b&gt;</td>"
        in html
    )
