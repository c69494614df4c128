"""Provides the tune journal: the tune's records as JSON lines; an interrupted tune resumes from its finished trials."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pitstop.errors import TuneError
from pitstop.profiling.launch import Target
from pitstop.tuning.journalformat import JOURNAL_VERSION, READABLE_VERSIONS, Record, TrialEnd, encode
from pitstop.tuning.results import Candidate, TrialResult

SUFFIX = ".journal.jsonl"


def default_journal(out: Path, target: Target, cwd: Path) -> Path:
    """`.pitstop-tune/<stem>-<key>.journal.jsonl` next to --out; the key is the target's identity.

    Named after the script alone, two `main.py` in different folders tuned with
    one --out folder shared a journal, and the second was told to --resume a tune
    that --resume then refused. The key hashes the working directory and the
    whole command (the script's path made absolute), so each gets its own.
    """
    words = list(target.command("python"))
    if target.script:
        words[1] = str((cwd / target.script).resolve())
    identity = "\0".join([str(cwd.resolve()), *words])
    key = hashlib.sha1(identity.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return (cwd / out).parent / ".pitstop-tune" / f"{target.stem}-{key}{SUFFIX}"


def companion(journal: Path, suffix: str) -> Path:
    """A file beside the journal, of the same tune: `.records`, `.tune.log`, `.guard`."""
    name = journal.name[: -len(SUFFIX)] if journal.name.endswith(SUFFIX) else journal.stem
    return journal.with_name(name + suffix)


def read_header(path: Path) -> dict[str, Any] | None:
    """The header of a journal, None when it has none (not a journal, or empty)."""
    try:
        with open(path, "rb") as handle:
            first = json.loads(handle.readline())
    except (OSError, ValueError):
        return None
    return first if isinstance(first, dict) and first.get("kind") == "header" else None


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The header keys two tunes differ in (version and kind aside)."""
    keys = (set(old) | set(new)) - {"kind", "version"}
    return sorted(k for k in keys if old.get(k) != new.get(k))


def unreadable_version(header: dict[str, Any]) -> str:
    """Why this pitstop cannot resume a journal of this header's format version; "" when it can."""
    version = header.get("version", 1)  # the first journals had no version: the same lines as version 1
    if version in READABLE_VERSIONS:
        return ""
    known = ", ".join(str(v) for v in READABLE_VERSIONS)
    return f"journal format version {version!r}, and this pitstop reads versions {known}"


class Journal:
    """An append-only JSON-lines file: a header, then the tune's records (journalformat), one a line.

    A finished trial's line is written whole and fsync'd before the next trial
    starts, so a Ctrl+C, an SSH drop or a killed tuner leaves at most a torn
    last line, which reading skips: the journal is always consistent. The
    progress lines in between are only flushed: losing one loses nothing.
    """

    def __init__(self, path: Path, header: dict[str, Any], resume: bool = False,
                 force: bool = False) -> None:
        self.path = path
        self.header = dict(header, kind="header", version=JOURNAL_VERSION)
        self.entries: dict[tuple[str, int, int], TrialResult] = {}
        self.resumed = 0
        if path.exists() and resume:
            self._load()
        elif path.exists() and not force:
            old = read_header(path)
            changed = differences(old, self.header) if old is not None else ["(not a journal)"]
            why = unreadable_version(old) if old is not None else ""
            if why:
                raise TuneError(f"{path}: {why}; --force replaces it, or --journal PATH keeps both")
            if not changed:
                raise TuneError(f"a journal of an earlier tune of this script exists: {path}; --resume "
                                "continues it, --force starts afresh")
            raise TuneError(f"{path} holds the journal of another tune (it differs in: {', '.join(changed)}); "
                            "--force replaces it, or --journal PATH keeps both")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._replace([self.header])

    def _load(self) -> None:
        lines = self.path.read_bytes().split(b"\n")
        records = []
        for raw in lines:
            if not raw.strip():
                continue
            try:
                records.append(json.loads(raw))
            except ValueError:
                continue  # the torn line of an interrupted write: that trial did not finish
        if not records or not isinstance(records[0], dict) or records[0].get("kind") != "header":
            raise TuneError(f"{self.path}: not a pitstop tune journal; remove it or use --force")
        why = unreadable_version(records[0])
        if why:
            raise TuneError(f"{self.path}: cannot resume: {why}; --force starts afresh")
        changed = differences(records[0], self.header)
        if changed:
            raise TuneError(f"{self.path}: journal of a different tune (differs in: "
                            f"{', '.join(changed)}); rerun with the same options, or --force to start afresh")
        for rec in records[1:]:
            if isinstance(rec, dict) and rec.get("kind") == TrialEnd.KIND:
                result = TrialResult.from_dict(rec["result"])
                self.entries[(rec["key"], int(rec["steps"]), int(rec["occurrence"]))] = result
        # Rewrite without a torn tail, so appends start on a fresh line; the header of
        # a version-1 journal becomes version 2's, as the lines this run adds are.
        self._replace([self.header, *records[1:]])

    def _replace(self, records: list[dict[str, Any]]) -> None:
        """Write the journal anew as a new file put in place: a reader following the old one sees it replaced."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            for rec in records:
                handle.write(json.dumps(rec, separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def _write(self, record: dict[str, Any], sync: bool = True) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())

    def record(self, record: Record, sync: bool = False) -> None:
        """Append a record: `sync` for those a resume or the view's verdict must not lose."""
        self._write(encode(record), sync)

    def lookup(self, candidate: Candidate, steps: int, occurrence: int) -> TrialResult | None:
        return self.entries.get((candidate.key(), steps, occurrence))

    def append(self, result: TrialResult, occurrence: int) -> None:
        self.record(TrialEnd(result.candidate.key(), result.steps, occurrence, result), sync=True)


class JournaledEvaluator:
    """Replays finished trials from the journal; runs and journals the others.

    The search is deterministic given its results, so replaying them in order
    walks the same path; the n-th run of one (candidate, steps) pair maps to
    the n-th journal entry for it (confirmation runs repeat a pair).
    """

    def __init__(self, journal: Journal, evaluate: Callable[[Candidate, int, str], TrialResult],
                 on_replay: Callable[[TrialResult], None] | None = None) -> None:
        self.journal = journal
        self.evaluate = evaluate
        self.on_replay = on_replay
        self.seen: Counter[tuple[Candidate, int]] = Counter()

    def __call__(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
        occurrence = self.seen[(candidate, steps)]
        self.seen[(candidate, steps)] += 1
        old = self.journal.lookup(candidate, steps, occurrence)
        if old is not None:
            self.journal.resumed += 1
            if self.on_replay:
                self.on_replay(old)
            return old
        result = self.evaluate(candidate, steps, stage)
        self.journal.append(result, occurrence)
        return result
