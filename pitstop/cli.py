"""Provides the `pitstop` command: run | attach | ls | view | profile | tune | doctor | demo | compare | report.

Every PitstopError becomes one line on stderr (`pitstop: error: ...`) and a
non-zero exit; a training script's own exit code is passed through. A reader
that closes our stdout early (`pitstop view R --summary | head -3`) ends the
command quietly with EXIT_BROKEN_PIPE, as a process killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pitstop._version import __version__
from pitstop.errors import PitstopError, TransportError, UsageError
from pitstop.profiling.cmdline import split_target
from pitstop.profiling.launch import Target, parse_prometheus
from pitstop.runflow import DEFAULT_PROFILE, Run, RunRequest, TuneLaunch, tune_in_view
from pitstop.tuning.options import VALUE_OPTIONS as TUNE_VALUE_OPTIONS

# 128 + SIGPIPE: what a shell reports for `yes | head`, so `set -o pipefail`
# scripts see the output was cut, as with any other Unix tool.
EXIT_BROKEN_PIPE = 141
# Options (per command) that take a value, so the target's start can be found
# without argparse reading the script's own options as ours.
VALUE_OPTIONS = {
    "run": {"--config", "--record", "--profile", "--trace-dir", "--prometheus", "--listen", "--token-file",
            "--stall-after", "--prometheus-front"},
    "tune": TUNE_VALUE_OPTIONS,
}


def _profile_setting(text: str | None) -> dict[str, int | None] | None:
    if text is None:
        return dict(DEFAULT_PROFILE)
    if text == "off":
        return None
    if text == "demand":
        return {"every": None, "active": 5, "first": 0}
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError as err:
        raise UsageError(f"--profile {text!r}: use off, demand, EVERY or EVERY:ACTIVE[:FIRST]") from err
    every = parts[0]
    active = parts[1] if len(parts) > 1 else 5
    first = parts[2] if len(parts) > 2 else min(50, every)
    if every <= 0 or active <= 0 or first < 0:
        raise UsageError(f"--profile {text!r}: numbers must be positive")
    return {"every": every, "active": active, "first": first}


def _run_request(args: argparse.Namespace, target: Target) -> RunRequest:
    """`pitstop run|demo`'s options, each checked for form (a bad one named in one line)."""
    return RunRequest(
        target=target,
        headless=args.headless,
        config=getattr(args, "config", None),
        record=getattr(args, "record", None),
        profile=_profile_setting(getattr(args, "profile", None)),
        trace_dir=getattr(args, "trace_dir", None),
        prometheus=parse_prometheus(getattr(args, "prometheus", None)),
        prometheus_front=parse_prometheus(getattr(args, "prometheus_front", None), "--prometheus-front"),
        listen=getattr(args, "listen", None),
        token_file=getattr(args, "token_file", None),
        plot=getattr(args, "plot", False),
        color=not getattr(args, "no_color", False),
        stall_after=_stall_after(getattr(args, "stall_after", None)),
    )


def _stall_after(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError as err:
        raise UsageError(f"--stall-after {text!r}: give seconds, e.g. 120") from err
    if not value > 0:
        raise UsageError(f"--stall-after {text!r}: must be more than 0 seconds")
    return value


def cmd_run(args: argparse.Namespace, target: Target) -> int:
    # Options first: a bad option is named before the script is looked up.
    request = _run_request(args, target)
    target.check()
    return Run(request).execute()


def cmd_demo(args: argparse.Namespace) -> int:
    demo_args = ["--steps", str(args.steps)]
    if args.num_workers is not None:
        demo_args += ["--num-workers", str(args.num_workers)]
    return Run(_run_request(args, Target(module="pitstop.demo.train", args=tuple(demo_args)))).execute()


def _format_age(started: float) -> str:
    seconds = max(0, int(time.time() - started))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _peek(sock: Path, wait_s: float = 0.6) -> tuple[str, str]:
    """Step and samples/s of a live agent, from the history it sends on connect."""
    from pitstop.analysis import RunState, summarize
    from pitstop.profiling._linedecode import decode_events
    from pitstop.profiling.transport import Client

    run = RunState()
    try:
        client = Client(sock, timeout=1.0)
    except TransportError:
        return "-", "-"
    deadline = time.monotonic() + wait_s
    try:
        for batch in client.lines(poll=0.1):
            for line in batch:
                try:
                    events = decode_events(line)  # the agent's record lines: a `steps` line holds many steps
                except PitstopError:
                    continue
                for event in events:
                    run.add(event)
            if time.monotonic() > deadline or (not batch and run.hello is not None):
                break
    finally:
        client.close()
    if run.last_step is None:
        return "-", "-"
    summary = summarize(run)
    rate = summary.samples_per_s if summary.samples_per_s is not None else summary.steps_per_s
    unit = "" if summary.samples_per_s is not None else " steps"
    return str(run.last_step), (f"{rate:.1f}{unit}" if rate else "-")


def cmd_ls(args: argparse.Namespace) -> int:
    from pitstop.profiling.transport import list_agents

    agents = list_agents()
    if not agents:
        print("no live pitstop runs (start one with: pitstop run train.py)")
        return 0
    rows = [("PID", "RANK", "SCRIPT", "STARTED", "STEP", "SAMPLES/S", "SESSION")]
    for agent in agents:
        step, rate = _peek(agent.socket)
        rank = "-" if agent.rank is None else str(agent.rank)
        rows.append((str(agent.pid), rank, agent.script, _format_age(agent.started) + " ago", step, rate, agent.session))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _choose_agent(pid: int | None) -> tuple[str, str]:
    """(session, label) to attach to: a pid's whole job, or the only live run."""
    from pitstop.profiling.transport import list_agents, socket_for_pid

    agents = list_agents()
    if pid is not None:
        socket_for_pid(pid)  # the precise error: no such pid, no agent, stale socket
        for agent in agents:
            if agent.pid == pid:
                return agent.session, f"{agent.script} (pid {pid})"
        raise TransportError(f"pid {pid} has no readable pitstop agent info")
    sessions: dict[str, list] = {}
    for agent in agents:
        sessions.setdefault(agent.session, []).append(agent)
    if not sessions:
        raise TransportError("no live pitstop runs to attach to (pitstop ls lists them)")
    if len(sessions) == 1:
        (session, members), = sessions.items()
        return session, f"{members[0].script} (pid {members[0].pid})"
    choices = [members[0] for members in sessions.values()]
    if not sys.stdin.isatty():
        listing = ", ".join(f"{a.pid} ({a.script})" for a in choices)
        raise UsageError(f"several live runs: give a PID ({listing})")
    for i, agent in enumerate(choices, 1):
        print(f"  {i}) pid {agent.pid}  {agent.script}  started {_format_age(agent.started)} ago")
    answer = input("attach to which run? [1] ").strip() or "1"
    try:
        agent = choices[int(answer) - 1]
    except (ValueError, IndexError) as err:
        raise UsageError(f"no run number {answer!r}") from err
    return agent.session, f"{agent.script} (pid {agent.pid})"


def cmd_attach(args: argparse.Namespace) -> int:
    from pitstop.profiling.sources import SocketSource

    if args.job:
        source = _job_source(args)
        session = None
    elif args.pid and ":" in args.pid:
        from pitstop.profiling.transport import Client, TcpEndpoint, parse_hostport, read_token

        if not args.token_file:
            raise UsageError("attach HOST:PORT needs --token-file (the file pitstop run --listen printed)")
        host, port = parse_hostport(args.pid)
        token = read_token(Path(args.token_file).expanduser())
        ends = [TcpEndpoint(host, port + i, token) for i in range(max(1, args.ranks))]
        Client(ends[0]).close()  # a wrong token or no server: one line now, not inside the viewer
        source = SocketSource(f"{host}:{port}", sockets=ends)
        session = None
    else:
        if args.pid is not None and not args.pid.isdigit():
            raise UsageError(f"attach {args.pid!r}: give a PID or HOST:PORT")
        pid = int(args.pid) if args.pid else None
        session, label = _choose_agent(pid)
        from pitstop.profiling._silence import SilenceWatch

        # A process on this host whose agent goes silent (a thread holds the GIL) is read from outside;
        # the threshold is the agent's default (attach does not know a --stall-after given to the run).
        source = SocketSource(label, session=session, watch=SilenceWatch())
    if args.headless or not sys.stdout.isatty():
        from pitstop.analysis import JobState
        from pitstop.headless import STATUS_INTERVAL_S, StatusPrinter

        job = JobState()
        printer = StatusPrinter()
        next_t = 0.0
        for batch in source.batches():
            job.add(batch)
            printer.notes(batch, job)
            if time.monotonic() >= next_t:
                next_t = time.monotonic() + STATUS_INTERVAL_S
                printer.tick(job)
        printer.tick(job)
        return 0
    from pitstop.tui import run_viewer

    hint = f"training continues; reattach with: pitstop attach {args.pid or ''}".rstrip()
    # `t` in the viewer: the script rebuilt from the process's own argv (Hello.argv).
    return run_viewer(source, detach_hint=hint, tune=TuneLaunch())


def _job_source(args: argparse.Namespace) -> Any:
    """`attach --job HOST:PORT`: every rank the job's store names (profiling/jobstore.py), each over TCP."""
    from pitstop.profiling import jobstore
    from pitstop.profiling.sources import SocketSource
    from pitstop.profiling.transport import Client, TcpEndpoint, read_token

    if not args.token_file:
        raise UsageError("attach --job HOST:PORT needs --token-file (the file pitstop run --listen printed)")
    token = read_token(Path(args.token_file).expanduser())
    try:
        world, ranks = jobstore.discover(args.job)
    except (OSError, ValueError) as err:
        raise UsageError(str(err)) from err
    if not ranks:
        raise UsageError(f"no rank published a viewer endpoint in the job's store at {args.job} (each node runs "
                         "pitstop run --listen HOST:PORT ...; ranks publish once their script imports "
                         "torch.distributed)")
    where = ", ".join(f"rank {r.rank} on {r.node or '?'} at {r.host}:{r.port}" for r in ranks)
    print(f"pitstop: job at {args.job}: {len(ranks)} of world size {world} ranks: {where}", file=sys.stderr,
          flush=True)
    ends = [TcpEndpoint(r.host, r.port, token) for r in ranks]
    Client(ends[0]).close()  # a wrong token or no server: one line now, not inside the viewer
    return SocketSource(f"job {args.job}", sockets=ends)


def _plot_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", action="store_true",
                        help="also draw step time, throughput and memory as text charts (plotext)")
    parser.add_argument("--no-color", action="store_true", help="charts in plain ASCII, without colour")


def _plot(args: argparse.Namespace, runs: list[Any]) -> None:
    from pitstop.charts import job_plot

    print(job_plot(runs, shutil.get_terminal_size().columns, _color(args)))


def _color(args: argparse.Namespace) -> bool:
    return sys.stdout.isatty() and not args.no_color


def cmd_view(args: argparse.Namespace) -> int:
    from pitstop.headless import still_running, summary_text
    from pitstop.recorded import load_runs, sessions

    paths = [Path(p) for p in args.record]
    target: Path | list[Path] = paths[0] if len(paths) == 1 else paths
    if args.summary or args.plot or not sys.stdout.isatty():
        runs, notes = load_runs(target)
        print(summary_text(runs, notes, alive=still_running(runs)))
        if args.plot:
            _plot(args, runs)
        return 0
    from pitstop.profiling.sources import RecordSource
    from pitstop.tui import run_viewer
    from pitstop.tui.replay import Timeline

    source = RecordSource(target)
    # The viewer's one indexing pass, made here: a corrupt line or a newer schema is a one-line
    # error before the screen opens, and the record is read once, not twice (a 24-hour record
    # took 93 s more when a summary pass came first, its states held while the viewer ran).
    source.timeline = Timeline.of_files(source.files)
    groups = sessions(list(source.timeline.job.runs.values()))
    if len(groups) > 1:
        # The viewer shows one job: records of unrelated runs would pass for its ranks.
        names = ", ".join(session or "unknown" for session, _ in groups)
        where = " ".join(str(p) for p in paths)
        raise UsageError(f"{where} holds records of {len(groups)} different runs ({names}): "
                         "view one run's file or directory, or use --summary")
    return run_viewer(source)


def cmd_profile(args: argparse.Namespace) -> int:
    if args.data:
        return _profile_data(args)
    from pitstop.profiling.transport import ask, list_agents, socket_for_pid
    from pitstop.streams import process_name

    sock = socket_for_pid(args.pid)  # the precise error: no such pid, no agent, stale socket
    agents = list_agents()
    me = next((a for a in agents if a.pid == args.pid), None)
    # The pid's whole job, as `attach PID` shows it: every rank profiles the same steps.
    job = sorted((a for a in agents if me is not None and me.session and a.session == me.session),
                 key=lambda a: (a.rank is None, a.rank or 0, a.pid))
    targets = [(process_name(a.rank, a.pid), a.socket) for a in job] or [(f"pid {args.pid}", sock)]
    replies = ask(targets, "profile")
    for answer in replies.answers:
        print(answer)
    return 0 if replies.complete else 1


def cmd_stacks(args: argparse.Namespace) -> int:
    from pitstop.stackscmd import cmd_stacks as stacks

    return stacks(args.target, token_file=args.token_file, now=args.now)


def _profile_data(args: argparse.Namespace) -> int:
    """`pitstop profile --data PID`: where the DataLoader's Python time goes, sampled with py-spy."""
    from pitstop.profiling import stacks

    if not 0.5 <= args.seconds <= 600:
        raise UsageError(f"--seconds {args.seconds:g}: give 0.5 to 600 seconds")
    exe = stacks.py_spy()  # missing: one line with the fix, before anything is said to start
    pids, role = stacks.loader_pids(args.pid)
    print(f"pitstop: sampling the {role} of pid {args.pid} for {args.seconds:g} s with py-spy "
          "(--nonblocking: they are never paused)", file=sys.stderr)
    print("\n".join(stacks.format_profile(stacks.sample(pids, args.seconds, role=role, executable=exe))))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from pitstop.compare import compare_paths, comparison_text, gate, gate_text, to_json

    if args.fail_if_slower is not None and args.fail_if_slower < 0:
        raise UsageError(f"--fail-if-slower {args.fail_if_slower:g}: give a percentage of 0 or more")
    result = compare_paths(Path(args.a), Path(args.b), force=args.force)
    code = gate(result, args.fail_if_slower)
    if args.json:
        print(to_json(result, args.fail_if_slower, code))
    else:
        print(comparison_text(result, ascii_only=(sys.stdout.encoding or "").lower().replace("-", "") != "utf8"))
        if args.plot:
            from pitstop.charts import render, run_charts
            from pitstop.compare import load_job
            from pitstop.compare._model import primary

            pairs = [(name, primary(load_job(Path(path), name))) for name, path in (("A", args.a), ("B", args.b))]
            print(render(run_charts(pairs), shutil.get_terminal_size().columns, _color(args)))
    if args.fail_if_slower is not None:
        print(gate_text(result, args.fail_if_slower, code), file=sys.stderr)
    return code


def cmd_report(args: argparse.Namespace) -> int:
    from pitstop.report import write_report

    out = write_report(Path(args.record), Path(args.output), force=args.force)
    print(f"pitstop: report written to {out}", file=sys.stderr)
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """`pitstop docs [NAME] [-o FILE]`: the docs shipped in the package, listed, printed or written out."""
    from pitstop import docs

    if args.name is None:
        for doc in docs.available():
            print(f"{doc.name:<20} {doc.title}")
        print("\npitstop docs NAME prints one; -o FILE writes it out (the Grafana dashboard: "
              "pitstop docs grafana-dashboard -o dashboard.json)")
        return 0
    doc = docs.find(args.name)
    if args.output:
        print(f"pitstop: wrote {docs.write(doc, Path(args.output))}", file=sys.stderr)
    else:
        sys.stdout.write(docs.read(doc))
    return 0


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `pitstop` parser; `command`: the one about to run, so only its options need building.

    The tuner's and the doctor's options come with their modules: importing those for a
    `pitstop run` cost it 0.073 s of CPU, a quarter of the front's start-up. None: every command's.
    """
    parser = argparse.ArgumentParser(
        prog="pitstop", description="A terminal profiler and tuning assistant for PyTorch training."
    )
    parser.add_argument("--version", action="version", version=f"pitstop {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a training script with pitstop watching",
                         usage="pitstop run [options] (SCRIPT [ARGS...] | -m MODULE [ARGS...] | -- COMMAND...)")
    run.add_argument("--headless", action="store_true", help="no TUI: status lines and a summary on stderr")
    run.add_argument("--config", metavar="FILE", help="apply a tuned config (pitstop.toml)")
    run.add_argument("--record", metavar="PATH", help="record file (.jsonl plain, .jsonl.gz compressed) or directory")
    run.add_argument("--profile", metavar="SPEC", help="profiler windows: off, demand, EVERY[:ACTIVE[:FIRST]] (default 500:5:50)")
    run.add_argument("--trace-dir", metavar="DIR", help="also write each window's Chrome trace here")
    run.add_argument("--prometheus", metavar="[HOST:]PORT",
                     help="serve Prometheus metrics on PORT (+LOCAL_RANK for each rank), on 127.0.0.1 unless HOST is given")
    run.add_argument("--prometheus-front", metavar="[HOST:]PORT",
                     help="pitstop run itself serves, per process, seconds since it heard from it and since its last "
                          "step, and whether it is stuck: they answer while a training thread holds the GIL")
    run.add_argument("--listen", metavar="HOST:PORT",
                     help="also serve viewers over TCP on PORT (+LOCAL_RANK), token required")
    run.add_argument("--token-file", metavar="FILE", help="the TCP token (created 0600 if missing)")
    run.add_argument("--stall-after", metavar="SECONDS",
                     help="no progress for this long is a stall (default: max(60 s, 20x the p95 step)); "
                          "before the first step, a wait is said after max(this, 5 min)")
    _plot_flags(run)

    attach = sub.add_parser("attach", help="open the viewer on a live run")
    attach.add_argument("pid", nargs="?", metavar="PID|HOST:PORT",
                        help="any process of the run (default: the only live run), or a --listen address")
    attach.add_argument("--headless", action="store_true", help="print status lines instead of the TUI")
    attach.add_argument("--token-file", metavar="FILE", help="token for HOST:PORT (from the run's machine)")
    attach.add_argument("--ranks", type=int, default=1, help="with HOST:PORT: read ranks at PORT..PORT+N-1")
    attach.add_argument("--job", metavar="HOST:PORT",
                        help="the job's own store (torchrun's --rdzv_endpoint, or MASTER_ADDR:MASTER_PORT): every "
                             "rank on every node that runs with --listen, found there (--token-file still needed)")

    sub.add_parser("ls", help="list live runs")

    view = sub.add_parser("view", help="replay a recorded run")
    view.add_argument("record", nargs="+",
                      help="a record file (.jsonl, .jsonl.gz) or a session directory; several (each node's "
                           "record directory of a job over several nodes) read as one job")
    view.add_argument("--summary", action="store_true", help="print the summary instead of opening the viewer")
    _plot_flags(view)

    profile = sub.add_parser("profile", help="capture a profiler window in a live run now (every rank of the job of PID; prints each one's answer)")
    profile.add_argument("pid", type=int)
    profile.add_argument("--data", action="store_true",
                         help="instead, sample the Python stacks of its DataLoader workers (or of the process "
                              "with num_workers=0) with py-spy and show the dataset's slowest lines")
    profile.add_argument("--seconds", type=float, default=5.0, help="how long --data samples (default 5)")

    stacks = sub.add_parser("stacks", help="where every rank of a live or recorded job waits (its stall's stacks)")
    stacks.add_argument("target", metavar="PID|RECORD|HOST:PORT",
                        help="a process of a live run, a record file or directory, or a --listen address")
    stacks.add_argument("--now", action="store_true",
                        help="read a live local process's stacks now with py-spy, not the latest stall's")
    stacks.add_argument("--token-file", metavar="FILE", help="token for HOST:PORT (from the run's machine)")

    demo = sub.add_parser("demo", help="run the embedded demo workload under pitstop")
    demo.add_argument("--headless", action="store_true")
    demo.add_argument("--steps", type=int, default=200, help="training steps (default 200: under a minute on a 2-core CPU)")
    demo.add_argument("--num-workers", type=int, default=None, help="DataLoader workers (default 0: the stall to find)")
    demo.add_argument("--record", metavar="PATH")
    demo.add_argument("--config", metavar="FILE")
    demo.add_argument("--profile", metavar="SPEC")

    compare = sub.add_parser("compare", help="compare two recorded runs: faster, slower or no difference",
                             description="Exit codes: 0 compared; 1 B is slower than --fail-if-slower allows; "
                             "2 error or not comparable; 3 --fail-if-slower given but a run was too short to tell.")
    compare.add_argument("a", metavar="A", help="the baseline: a record file (.jsonl, .jsonl.gz) or a session directory")
    compare.add_argument("b", metavar="B", help="the run compared with it")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument("--fail-if-slower", type=float, metavar="PCT",
                         help="exit 1 when B is slower than A by more than PCT%% beyond the noise (for CI)")
    compare.add_argument("--force", action="store_true", help="compare runs of different scripts")
    _plot_flags(compare)

    report = sub.add_parser("report", help="write a shareable report of a recorded run (.html or .md)")
    report.add_argument("record", help="a record file (.jsonl, .jsonl.gz) or a session directory")
    report.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.html (offline, self-contained) or FILE.md")
    report.add_argument("--force", action="store_true", help="overwrite FILE if it exists")

    docs = sub.add_parser("docs", help="list, print or write out pitstop's docs (and the Grafana dashboard)")
    docs.add_argument("name", nargs="?", metavar="NAME", help="a doc: config, prometheus, grafana-dashboard, ... "
                      "(none: list them)")
    docs.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (never overwritten) instead of printing it")

    tune = sub.add_parser("tune", help="find the fastest stable configuration and export it",
                          usage="pitstop tune [options] (SCRIPT [ARGS...] | -m MODULE [ARGS...] | -- COMMAND...)")
    if command in (None, "tune"):
        try:
            from pitstop.tuning.command import add_arguments as add_tune_arguments

            add_tune_arguments(tune)
        except ImportError:
            pass

    doctor = sub.add_parser("doctor", help="check this machine for training performance problems")
    if command in (None, "doctor"):
        try:
            from pitstop.doctor import add_arguments as add_doctor_arguments

            add_doctor_arguments(doctor)
        except ImportError:
            pass
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, where a closed pipe can still be caught, not at interpreter exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE


def _quiet_stdout() -> None:
    """The reader of stdout is gone: point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(argv[0] if argv else "")
    try:
        if argv and argv[0] in VALUE_OPTIONS:
            command = argv[0]
            own, target = split_target(argv[1:], VALUE_OPTIONS[command])
            args = parser.parse_args([command, *own])
            if target is None:
                if any(a in ("-h", "--help") for a in own):
                    return 0
                raise UsageError(f"{command}: give a script, -m MODULE, or -- COMMAND (see pitstop {command} --help)")
            if command == "run":
                return cmd_run(args, target)
            from pitstop.tuning.command import run as run_tune

            target.check()
            if sys.stdout.isatty() and sys.stdin.isatty() and not args.json:
                # The Trials view: the tuner runs as a child (its own signal handlers and main
                # thread), the viewer reads its journal and output. `own` is what the user typed.
                return tune_in_view(own, target)
            return run_tune(args, target)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        handlers = {
            "attach": cmd_attach,
            "ls": cmd_ls,
            "view": cmd_view,
            "profile": cmd_profile,
            "demo": cmd_demo,
            "compare": cmd_compare,
            "report": cmd_report,
            "docs": cmd_docs,
            "stacks": cmd_stacks,
        }
        if args.command == "doctor":
            from pitstop.doctor import run as run_doctor

            return run_doctor(args)
        return handlers[args.command](args)
    except PitstopError as err:
        print(f"pitstop: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("pitstop: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
