"""A profiler window on a real GPU (issue 15): CUDA kernels with device times, H2D copies pinned vs pageable,
the script's syncs per step and no more."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.events import ProfileWindow
from tests.gpu._kit import CONV, GPU, keep
from tests.integration.conftest import events_of, run_pitstop

pytestmark = GPU


def test_a_conv_net_window_has_cuda_kernels_copies_and_the_scripts_syncs(
        env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    record = tmp_path / "window.jsonl"
    # Windows of 5 steps from step 10 and 30; per step: images and labels from a pinning
    # loader, one tensor made on the CPU (pageable), one loss.item() (the script's only sync).
    proc = run_pitstop(["run", "--headless", "--profile", "20:5:10", "--record", str(record), str(CONV),
                        "--steps", "45", "--batch", "32", "--workers", "2", "--pin-memory", "--pageable-extra",
                        "--no-scaler", "--item-every", "1"], env, tmp_path, timeout=240)
    keep(request, record)
    assert proc.returncode == 0, proc.stderr[-3000:]
    windows = [e for e in events_of(record) if isinstance(e, ProfileWindow)]
    assert len(windows) >= 2, proc.stderr[-2000:]
    for win in windows:
        k = win.step_end - win.step_start
        assert win.device == "cuda" and win.kernels_unavailable is None and k == 5, win
        # The kernel table: CUDA kernels, each with device time.
        assert win.kernels and all(kern.total_us > 0 and kern.mean_us > 0 and kern.calls > 0 for kern in win.kernels)
        names = " ".join(kern.name.lower() for kern in win.kernels)
        assert any(word in names for word in ("conv", "gemm", "cudnn", "xmma")), names[:500]
        assert any((op.device_self_us or 0) > 0 for op in win.ops), [(o.name, o.device_self_us) for o in win.ops]
        # Copies: 2 pinned (images, labels) and 1 pageable a step.
        copies = win.copies
        assert copies is not None and copies.h2d_bytes > 0 and copies.h2d_us > 0
        pinned = copies.h2d_count - copies.h2d_pageable
        assert k <= copies.h2d_pageable <= k + 2 and 2 * k <= pinned <= 2 * k + 2, copies
        # Syncs: the script's one .item() a step (give or take the one at a window's edge: 4 to 6 in 5
        # steps), and nothing of pitstop's beside it (a sync of its own each step would make it 2).
        for name in ("aten::item", "aten::_local_scalar_dense"):
            assert 0.8 <= win.syncs_per_step.get(name, 0.0) <= 1.2, win.syncs_per_step
        for phase in ("forward", "backward", "optimizer"):
            assert win.phases_ms.get(phase, 0) > 0, win.phases_ms
