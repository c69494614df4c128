"""pitstop: a terminal profiler and tuning assistant for PyTorch training.

Scripts may use two names directly:

    import pitstop
    pitstop.step()                         # mark a step in a loop pitstop cannot see
    cfg = pitstop.load_config("pitstop.toml")
    loader = DataLoader(ds, **cfg.dataloader_kwargs())

Both are cheap and safe outside `pitstop run`: `step()` does nothing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pitstop._version import __version__

if TYPE_CHECKING:
    from pitstop.config import Config


def step(samples: int | None = None) -> None:
    """Mark the end of one training step (for loops with no optimizer pitstop can hook)."""
    from pitstop.profiling import agent

    current = agent.current()
    if current is not None:
        current.manual_step(samples)


def load_config(path: Any) -> Config:
    """Load and validate a tuned config (`pitstop.toml`); raises ConfigError naming file, line, key."""
    from pitstop.config import load_config as _load

    return _load(path)


__all__ = ["__version__", "load_config", "step"]
