"""Tables for the HTML report: the thesis's clue table, the clue comparison across variants
and self-contained HTML pages of tables (the Snakemake report shows HTML results in a frame)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import pandas as pd

from attnscope.io import cell_text

PAGE_STYLE = """
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 1.2em; color: #222; }
h1 { font-size: 17px; } h2 { font-size: 15px; margin-top: 1.6em; }
p.note { color: #555; max-width: 70em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr:nth-child(even) td { background: #fafafa; }
td.supported { background: #e5f5e0 !important; } td.contradicted { background: #fde0dd !important; }
td.inconclusive { background: #fff7bc !important; } td.not-measured { background: #eeeeee !important; }
"""

NO_REFERENCE = "no reference"  # a target without a clue in the clue files; its chrF is empty


def thesis_table(clues: pd.DataFrame) -> pd.DataFrame:
    """The thesis's table A.1-A.3 layout: word and generated clue, plus reference and checks.

    A target without a reference clue says so, and its chrF is empty (not 0)."""
    return pd.DataFrame(
        {
            "Word": clues["target"],
            "Generated Clue": clues["clue"],
            "Reference Clue": clues["reference_clue"].fillna(NO_REFERENCE),
            "Ended with end marker": clues["format_ok"],
            "Answer leaked": clues["answer_leak"],
            "chrF": clues["chrf"].round(1),
        }
    )


def clue_comparison(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per target: the reference clue and the generated clue of every variant.

    ``tables`` maps a variant to its generated-clue table (columns prompt_index, target,
    reference_clue, clue); rows follow the first table's prompt order.
    """
    if not tables:
        raise ValueError("no clue tables to compare")
    first = next(iter(tables.values())).sort_values("prompt_index")
    out = pd.DataFrame(
        {
            "Word": first["target"].to_numpy(),
            "Reference Clue": first["reference_clue"].fillna(NO_REFERENCE).to_numpy(),
        }
    )
    for variant, table in tables.items():
        by_index = table.set_index("prompt_index")["clue"]
        out[variant] = [by_index.get(i, "") for i in first["prompt_index"]]
    return out


def _cell(value: object, verdict_column: bool) -> str:
    text = cell_text(value)
    css = f' class="{text.replace(" ", "-")}"' if verdict_column and text else ""
    return f"<td{css}>{html.escape(text)}</td>"


def table_html(table: pd.DataFrame, verdict_column: str | None = "verdict") -> str:
    """An HTML table (escaped text; a ``verdict`` column is coloured by its value)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    rows = [
        "<tr>" + "".join(_cell(v, c == verdict_column) for c, v in zip(table.columns, record)) + "</tr>"
        for record in table.itertuples(index=False)
    ]
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def html_page(title: str, sections: Sequence[tuple[str, str, pd.DataFrame]], intro: str = "") -> str:
    """A self-contained HTML page: a title, an optional intro, then (heading, note, table) sections."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    if intro:
        body.append(f'<p class="note">{html.escape(intro)}</p>')
    for heading, note, table in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            body.append(f'<p class="note">{html.escape(note)}</p>')
        body.append(table_html(table))
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
