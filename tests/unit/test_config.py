"""Tests the tuned config: round trip, validation, one-line errors with file, line and key, no overwrite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pitstop
from pitstop.config import ComputeSettings, Config, DataLoaderSettings, fit_to_cpus, load_config, save_config
from pitstop.errors import ConfigError


def sample() -> Config:
    return Config(
        dataloader=DataLoaderSettings(num_workers=4, pin_memory=True, persistent_workers=True,
                                      prefetch_factor=4, batch_size=128),
        compute=ComputeSettings(amp="bf16", cudnn_benchmark=True, channels_last=False),
        provenance={"torch": "2.13.0", "cuda": None, "speedup": 1.62, "script": "train.py --lr 0.1"},
        guidance={"learning_rate": "scale by 4"},
    )


def test_round_trip_through_toml_keeps_every_setting(tmp_path: Path) -> None:
    path = save_config(sample(), tmp_path / "pitstop.toml")
    loaded = load_config(path)
    assert loaded.dataloader == sample().dataloader
    assert loaded.compute == sample().compute
    assert loaded.guidance == sample().guidance
    assert loaded.provenance == {"torch": "2.13.0", "speedup": 1.62, "script": "train.py --lr 0.1"}
    assert pitstop.load_config(str(path)) == loaded  # the name scripts use


def test_saved_file_says_how_to_use_it_and_documents_unset_keys(tmp_path: Path) -> None:
    cfg = Config(dataloader=DataLoaderSettings(num_workers=2), provenance={"script": "train.py --lr 0.1"})
    text = save_config(cfg, tmp_path / "pitstop.toml").read_text()
    assert "pitstop run --config pitstop.toml train.py --lr 0.1" in text
    assert "pitstop.load_config" in text
    assert "# pin_memory = (not set" in text
    assert load_config(tmp_path / "pitstop.toml").dataloader_kwargs() == {"num_workers": 2}


def test_dataloader_kwargs_only_has_the_keys_set() -> None:
    cfg = Config(dataloader=DataLoaderSettings(num_workers=0, pin_memory=False))
    assert cfg.dataloader_kwargs() == {"num_workers": 0, "pin_memory": False}
    assert Config().dataloader_kwargs() == {} and Config().to_dict() == {}


def test_json_by_suffix_and_null_means_unset(tmp_path: Path) -> None:
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"dataloader": {"num_workers": 3, "batch_size": None}}))
    assert load_config(path).dataloader_kwargs() == {"num_workers": 3}


def test_unknown_key_names_file_line_key_and_suggests(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("# tuned\n\n[compute]\namp = \"bf16\"\n\n[dataloader]\nnum_worker = 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message == f"{path}:7: unknown key 'dataloader.num_worker' (did you mean 'num_workers'?)"
    assert "\n" not in message


def test_unknown_section_and_dotted_keys_find_their_line(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("[dataloader]\nnum_workers = 2\n\n[dataloadr]\nx = 1\n")
    with pytest.raises(ConfigError, match=r":4: unknown section 'dataloadr' \(did you mean 'dataloader'\?\)"):
        load_config(path)
    path.write_text("compute.amp = 'bf16'\ncompute.cudnn = true\n")
    with pytest.raises(ConfigError, match=r":2: unknown key 'compute.cudnn'"):
        load_config(path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("num_workers = \"2\"", "'dataloader.num_workers' must be an integer, got a string '2'"),
        ("num_workers = true", "'dataloader.num_workers' must be an integer, got a boolean True"),
        ("pin_memory = 1", "'dataloader.pin_memory' must be true or false, got an integer 1"),
        ("num_workers = -1", "'dataloader.num_workers' must be >= 0, got -1"),
        ("prefetch_factor = 0", "'dataloader.prefetch_factor' must be >= 1, got 0"),
        ("batch_size = 0", "'dataloader.batch_size' must be >= 1, got 0"),
        ("num_workers = 99999999999999999999", "'dataloader.num_workers' must be <= 256, got 99999999999999999999"),
        ("prefetch_factor = 100000", "'dataloader.prefetch_factor' must be <= 256, got 100000"),
        ("batch_size = 4294967296", "'dataloader.batch_size' must be <= 2147483647, got 4294967296"),
    ],
)
def test_wrong_type_or_range_names_key_and_expectation(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text(f"[dataloader]\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:2: {expected}"


def test_amp_must_be_a_known_mode(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("[compute]\n\namp = \"fp8\"\n")
    with pytest.raises(ConfigError, match=r"pitstop.toml:3: 'compute.amp' must be one of bf16, fp16, off, got 'fp8'"):
        load_config(path)


def test_toml_syntax_error_reports_tomllibs_line(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("[dataloader]\nnum_workers = 2\npin_memory = \n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:3: invalid TOML: ")
    assert "\n" not in str(err.value)


def test_json_syntax_error_reports_its_line(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.json"
    path.write_text('{\n  "dataloader": {\n    "num_workers": 2,\n  }\n}\n')
    with pytest.raises(ConfigError, match=r"pitstop.json:4: invalid JSON"):
        load_config(path)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def test_from_dict_names_source_and_key() -> None:
    with pytest.raises(ConfigError, match=r"^env: 'compute.channels_last' must be true or false"):
        Config.from_dict({"compute": {"channels_last": "yes"}}, source="env")
    with pytest.raises(ConfigError, match=r"'provenance' must be a table"):
        Config.from_dict({"provenance": 3})
    assert Config.from_dict(sample().to_dict()) == Config.from_dict(json.loads(json.dumps(sample().to_dict())))


def test_save_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("# a person's own file\n")
    with pytest.raises(ConfigError, match="exists; use --force"):
        save_config(sample(), path)
    assert path.read_text() == "# a person's own file\n"
    save_config(sample(), path, force=True)
    assert load_config(path).dataloader.num_workers == 4


def test_config_module_imports_no_torch() -> None:
    code = "import sys, pitstop.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_threads_beyond_the_cpus_this_process_may_use_are_cut_and_the_reason_given(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("[compute]\nthreads = 99999999999999999999\n")
    fitted, why = fit_to_cpus(load_config(path), 2)
    assert fitted.compute.threads == 2
    assert why == ["threads=99999999999999999999 cut to 2: this process may use 2 CPU(s) (its affinity), "
                   "and more threads than CPUs only wait for one another"]
    kept, none = fit_to_cpus(Config(compute=ComputeSettings(threads=2)), 2)
    assert kept.compute.threads == 2 and none == []


def test_eval_loader_values_are_bounded_like_the_training_loaders(tmp_path: Path) -> None:
    path = tmp_path / "pitstop.toml"
    path.write_text("[eval_dataloader]\n# evaluation\nnum_workers = 100000\n")
    with pytest.raises(ConfigError, match=r"pitstop.toml:3: 'eval_dataloader.num_workers' must be <= 256, got 100000$"):
        load_config(path)
