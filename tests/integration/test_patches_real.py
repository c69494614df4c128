"""Every torch callable pitstop patches in a real run looks like the original to introspection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import SCRIPTS, pitstop

EXPECTED = {
    "DataLoader.__init__", "_BaseDataLoaderIter.__next__", "_BaseDataLoaderIter.__init__",
    "_MultiProcessingDataLoaderIter.__init__", "TensorBase.backward", "Conv2d.__init__", "GradScaler.__init__",
    "DataParallel.__init__", "DistributedDataParallel.__init__", "autocast.__enter__",
    "torch.distributed.autograd.backward", "InstructionTranslator.__init__",
    "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_value_",
}


def test_every_patch_of_a_real_run_keeps_signature_names_and_the_users_warning_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    result = pitstop(["run", "--headless", "--profile", "off", str(SCRIPTS / "patches_report.py")], env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    rows = {row["name"]: row for row in report["patches"]}
    assert EXPECTED <= {name.replace("Tensor.backward", "TensorBase.backward") for name in rows}, sorted(rows)
    bad = {name: row for name, row in rows.items() if not all(row[k] for k in ("signature", "wrapped", "names", "kind"))}
    assert not bad, bad
    # The warnings GradScaler raises point where they point without pitstop (the script's line).
    plain = subprocess.run([sys.executable, str(SCRIPTS / "patches_report.py")], env=env, capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    expected = json.loads(plain.stdout.strip().splitlines()[-1])["warning_lines"]
    assert any(f == "patches_report.py" for f, _ in expected)  # the GradScaler() line
    assert report["warning_lines"] == expected
