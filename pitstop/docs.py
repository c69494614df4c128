"""Provides the user docs shipped inside the package: their names, their text, and writing one out.

The repository's docs/ travels in the wheel as package data (`pitstop/_docs`:
a link to docs/ in a checkout, plain files once built), so what the README,
the generated pitstop.toml and docs/prometheus.md point to is reachable after
`pip install pitstop` with `pitstop docs NAME` (those links led into
a docs/ folder that no wheel had). Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from pitstop.errors import UsageError

# The files a person reads (.md) or imports elsewhere (the Grafana dashboard, .json).
SUFFIXES = (".md", ".json")


@dataclass(frozen=True)
class Doc:
    """One shipped doc."""

    name: str  # what `pitstop docs NAME` takes: the file name without its suffix
    file: str  # the file name in the package ("config.md")
    title: str  # its first heading, or a dashboard's title


def _title(file: str, text: str) -> str:
    if file.endswith(".json"):
        try:
            return str(json.loads(text).get("title", ""))
        except (ValueError, AttributeError):
            return ""
    return next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), "")


def available() -> list[Doc]:
    """Every shipped doc, by name."""
    root = files("pitstop") / "_docs"
    if not root.is_dir():
        return []
    docs = []
    for entry in root.iterdir():
        if entry.name.endswith(SUFFIXES) and entry.is_file():
            stem = entry.name.rsplit(".", 1)[0]
            docs.append(Doc(stem, entry.name, _title(entry.name, entry.read_text(encoding="utf-8"))))
    return sorted(docs, key=lambda d: d.name)


def find(name: str) -> Doc:
    """The doc called `name` ("config", "config.md"), or a one-line error naming the ones there are."""
    docs = available()
    for doc in docs:
        if name in (doc.name, doc.file):
            return doc
    names = ", ".join(d.name for d in docs) or "none (this install has no docs)"
    raise UsageError(f"no doc named {name!r}: one of {names}")


def read(doc: Doc) -> str:
    """The doc's text."""
    return (files("pitstop") / "_docs" / doc.file).read_text(encoding="utf-8")


def write(doc: Doc, path: Path) -> Path:
    """Write the doc to `path`, which must not exist (nothing the user made is overwritten)."""
    path = path.expanduser()
    try:
        with path.open("x", encoding="utf-8") as out:
            out.write(read(doc))
    except FileExistsError as err:
        raise UsageError(f"{path} exists: pitstop never overwrites a file; choose another name") from err
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from err
    return path
