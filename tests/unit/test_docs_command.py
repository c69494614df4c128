"""`pitstop docs`: the shipped docs listed, printed, written out; never overwriting; one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitstop.cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_list_names_every_doc_and_the_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line and not line.startswith("pitstop")}
    assert listed == {p.stem for p in DOCS.iterdir() if p.suffix in (".md", ".json")}


def test_the_dashboard_is_written_out_and_an_existing_file_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dashboard.json"
    assert main(["docs", "grafana-dashboard", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["panels"]  # a dashboard Grafana can import
    assert capsys.readouterr().err == f"pitstop: wrote {out}\n"
    out.write_text("mine")
    assert main(["docs", "grafana-dashboard", "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"pitstop: error: {out} exists: pitstop never overwrites a file; choose another name\n"
    assert out.read_text() == "mine"


def test_a_doc_is_printed_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "config"]) == 0
    assert capsys.readouterr().out == (DOCS / "config.md").read_text()


def test_an_unknown_doc_is_one_line_naming_the_ones_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "grafana"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pitstop: error: no doc named 'grafana': one of compare, config,")
    assert "grafana-dashboard" in err[0]


def _pointers(text: str) -> set[str]:
    """The docs a text sends its reader to: `pitstop docs NAME` and docs/NAME.md links."""
    import re

    return set(re.findall(r"pitstop docs ([a-z][a-z-]*)", text)) | set(re.findall(r"docs/([a-z-]+)\.(?:md|json)", text))


def test_what_the_readme_the_docs_and_a_written_config_point_to_is_in_the_package(tmp_path: Path) -> None:
    """A pip user has no docs/ folder: every pointer must be something `pitstop docs` can show."""
    from pitstop import docs
    from pitstop.config import Config, save_config

    header = save_config(Config(), tmp_path / "pitstop.toml").read_text()
    assert "pitstop docs config" in header  # the written file says how to read its format
    texts = {"README.md": (DOCS.parent / "README.md").read_text(), "pitstop.toml": header}
    texts.update({p.name: p.read_text() for p in DOCS.glob("*.md")})
    shipped = {d.name for d in docs.available()}
    missing = {(where, name) for where, text in texts.items() for name in _pointers(text) if name not in shipped}
    assert not missing
