"""The report's files: JSON, Markdown, a self-contained HTML page, and the plots."""

from __future__ import annotations

import json
import struct

from report_samples import T0, sample_report, sample_timeline

from lakestack import plots
from lakestack.report import markdown_to_html
from lakestack.timeline import CostModel, build_timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _timeline(*, stream: bool = False):
    return sample_timeline(stream=stream, cost=CostModel(note="no charges"))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_markdown_subset_becomes_html():
    page = markdown_to_html(
        "# Title <x>\n\n**PASS: ok**\n\n| measure | value |\n|---|---|\n| p50 | `1.0 s` |\n\n- one\n- two\n\n"
        "plain text\ncontinued\n\n```\n  ok  yes <b>\n```\n",
        title="T & t",
    )
    assert "<title>T &amp; t</title>" in page
    body = page.split("<body>\n", 1)[1].split("\n</body>", 1)[0]
    assert body.splitlines() == [
        "<h1>Title &lt;x&gt;</h1>",
        "<p><strong>PASS: ok</strong></p>",
        "<table><thead><tr><th>measure</th><th>value</th></tr></thead>",
        "<tbody><tr><td>p50</td><td><code>1.0 s</code></td></tr></tbody></table>",
        "<ul><li>one</li><li>two</li></ul>",
        "<p>plain text continued</p>",
        "<pre><code>  ok  yes &lt;b&gt;</code></pre>",
    ]


def test_the_one_line_json_leaves_the_timeline_out():
    data = sample_report(_timeline()).to_dict()
    assert "timeline" not in data
    assert (data["events_landed"], data["ok"]) == (2, True)


def test_write_renders_four_plots_on_a_run_that_cost_nothing_and_embeds_them_in_the_html(tmp_path):
    json_path, md_path = sample_report(_timeline()).write(tmp_path)
    names = ["latency", "backlog", "sent_landed", "batches"]
    for name in names:
        assert _png_size((tmp_path / "plots" / f"{name}.png").read_bytes()) == (880, 462)
    # A local run costs nothing: no flat zero cost plot.
    assert not (tmp_path / "plots" / "cost.png").exists()
    document = json.loads(json_path.read_text())
    assert document["plots"] == [f"plots/{name}.png" for name in names]
    assert document["timeline"]["sent"] == [10] * 10 + [0, 0]
    assert document["events_landed"] == 2
    markdown = md_path.read_text()
    assert "![End-to-end latency percentiles, by commit time](plots/latency.png)" in markdown
    page = (tmp_path / "report.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 4
    assert "<figcaption>Micro-batch durations (trigger start to Delta commit)</figcaption>" in page


def test_a_run_that_cost_something_gets_its_cost_plot(tmp_path):
    sent = [T0 + i * 0.1 for i in range(100)]
    timeline = build_timeline(
        sent=sent, landed=[(t, t + 1.5) for t in sent], cost=CostModel(hourly_usd=0.84, note="list prices")
    )
    json_path, _ = sample_report(timeline).write(tmp_path)
    assert json.loads(json_path.read_text())["plots"][-1] == "plots/cost.png"
    # 12 one-second intervals at 0.84 USD/h.
    assert '<div class="value">0.0028 USD</div>' in (tmp_path / "report.html").read_text()


def test_stream_metrics_add_a_sixth_plot(tmp_path):
    json_path, _ = sample_report(_timeline(stream=True)).write(tmp_path)
    assert json.loads(json_path.read_text())["plots"][-1] == "plots/stream.png"
    width, height = _png_size((tmp_path / "plots" / "stream.png").read_bytes())
    assert (width, height) == (880, 330)


def test_without_matplotlib_the_report_says_how_to_get_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "plots_available", lambda: False)
    json_path, md_path = sample_report(_timeline()).write(tmp_path)
    assert "Not drawn: matplotlib is missing (`pip install 'lakestack[report]'`)." in md_path.read_text()
    assert json.loads(json_path.read_text())["plots"] == []
    assert not (tmp_path / "plots").exists()
    assert (
        "<p>Plots not drawn: matplotlib is missing (<code>pip install 'lakestack[report]'</code>).</p>"
        in (tmp_path / "report.html").read_text()
    )


def test_a_run_without_a_timeline_has_no_plot_section(tmp_path):
    _, md_path = sample_report().write(tmp_path)
    assert "## Plots" not in md_path.read_text()
    assert (tmp_path / "report.html").is_file()
