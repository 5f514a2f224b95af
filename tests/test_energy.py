"""Energy and CO₂ accounting: RAPL reading (fake sysfs), the TDP estimate, intensity resolution, manifests."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenadapt.artifacts.stage import StageRun
from greenadapt.errors import UsageError
from greenadapt.machine import energy, intensity
from greenadapt.machine.codecarbon_meter import CODECARBON_ENV, codecarbon_wanted

MAX = 262_143_328_850  # a real package counter's max_energy_range_uj
NO_CODECARBON = {CODECARBON_ENV: "0"}


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(intensity.INTENSITY_ENV, raising=False)
    monkeypatch.delenv(energy.WATTS_ENV, raising=False)
    intensity.configure()
    yield
    intensity.configure()


def _domain(root: Path, name: str, label: str, uj: int, max_uj: int = MAX) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(label + "\n")
    (folder / "energy_uj").write_text(f"{uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return folder


def _fake_rapl(root: Path) -> dict[str, Path]:
    return {
        "pkg0": _domain(root, "intel-rapl:0", "package-0", MAX - 1_000_000),  # about to wrap
        "core0": _domain(root, "intel-rapl:0:0", "core", 5_000),  # inside the package figure: not counted again
        "dram0": _domain(root, "intel-rapl:0:1", "dram", 10_000),
        "pkg1": _domain(root, "intel-rapl:1", "package-1", 2_000_000),
    }


def test_rapl_domains_take_packages_and_dram_but_not_core(tmp_path: Path) -> None:
    _fake_rapl(tmp_path)
    names = [d.name for d in energy.rapl_domains(tmp_path)]
    assert names == ["intel-rapl:0:package-0", "intel-rapl:0:1:dram", "intel-rapl:1:package-1"]
    assert energy.rapl_domains(tmp_path / "absent") == []


def test_rapl_delta_undoes_one_wrap_around() -> None:
    assert energy.rapl_delta_uj(100, 250, MAX) == 150
    assert energy.rapl_delta_uj(MAX - 100, 50, MAX) == 150
    assert energy.rapl_delta_uj(500, 100, 0) == 0  # no range known: no guess


def test_probe_measures_with_rapl_across_a_wrap(tmp_path: Path) -> None:
    files = _fake_rapl(tmp_path)
    probe = energy.EnergyProbe(rapl_root=tmp_path, environ=NO_CODECARBON)
    # 3.6e12 µJ is 1 kWh: package 0 wraps after 1e6 µJ and goes on to 0.05 kWh; package 1 adds 0.025 kWh.
    (files["pkg0"] / "energy_uj").write_text(f"{int(1.8e11) - 1_000_000}\n")
    (files["pkg1"] / "energy_uj").write_text(f"{2_000_000 + int(0.9e11)}\n")
    (files["dram0"] / "energy_uj").write_text(f"{10_000 + int(0.36e11)}\n")
    (files["core0"] / "energy_uj").write_text(f"{int(3e11)}\n")
    cost = probe.finish(wall_seconds=10.0, cpu_seconds=5.0, peak_rss_mib=1024.0, cpu_count=2)
    assert cost["energy_method"] == "rapl"
    assert cost["energy_parts"]["cpu_kwh"] == {"kwh": pytest.approx(0.075), "method": "rapl", "label": "measured"}
    assert cost["energy_parts"]["ram_kwh"] == {"kwh": pytest.approx(0.01), "method": "rapl", "label": "measured"}
    assert cost["energy_kwh"] == pytest.approx(0.085)
    assert cost["co2_kg"] == pytest.approx(0.085 * 481 / 1000)


def test_a_resumed_runs_cost_adds_its_earlier_processes_up_to_their_checkpoint(tmp_path: Path) -> None:
    """A run stopped and resumed (``--resume``) costs its processes together: seconds summed, the earlier ones' energy the
    estimate of their seconds (RAPL read them, but nothing kept it), so a measured last process makes it partly measured."""
    from greenadapt.machine.cost import CostMeter

    first = CostMeter(probe=energy.EnergyProbe(rapl_root=tmp_path / "none", environ=NO_CODECARBON))
    spent = {**first.spent(), "wall_seconds": 3600.0, "cpu_seconds": 7200.0}  # what a checkpoint records
    files = _fake_rapl(tmp_path)
    meter = CostMeter(probe=energy.EnergyProbe(rapl_root=tmp_path, environ=NO_CODECARBON))
    meter.carry({**spent, "attempt": meter.attempt})  # a checkpoint this process wrote itself: nothing earlier
    assert meter.earlier == {}
    meter.carry(spent)
    assert meter.spent()["processes"] == 2 and meter.spent()["cpu_seconds"] >= 7200.0
    (files["pkg0"] / "energy_uj").write_text(f"{int(3.6e10)}\n")  # 0.01 kWh measured for this process
    cost = meter.snapshot()
    earlier_kwh = 7200 * 10 / 3.6e6 + 3600 * cost["peak_rss_mib"] / 1024 * 0.3725 / 3.6e6
    assert cost["processes"] == 2
    assert cost["cpu_seconds"] == pytest.approx(7200.0 + cost["last_process"]["cpu_seconds"], abs=2e-3)
    assert cost["wall_seconds"] == pytest.approx(3600.0 + cost["last_process"]["wall_seconds"], abs=2e-3)
    assert cost["energy_parts"]["earlier_processes_kwh"] == {"kwh": pytest.approx(earlier_kwh), "method": "tdp-estimate",
                                                             "label": "estimated"}
    assert cost["energy_kwh"] == pytest.approx(earlier_kwh + cost["last_process"]["energy_kwh"])
    assert cost["co2_kg"] == pytest.approx(cost["energy_kwh"] * 481 / 1000)
    assert cost["energy_method"] == "rapl+tdp-estimate" and cost["energy_label"] == "partly measured"
    for damaged in ({"cpu_seconds": "many"}, {**spent, "processes": float("nan")}, {**spent, "wall_seconds": -1.0}):
        meter.carry({**damaged, "attempt": "a damaged record"})  # unknown, never a guess (nor a crash at the next save)
        assert meter.earlier == {} and meter.spent()["processes"] == 1


def test_unreadable_rapl_falls_back_to_the_estimate(tmp_path: Path) -> None:
    files = _fake_rapl(tmp_path)
    (files["pkg1"] / "energy_uj").unlink()
    (files["pkg1"] / "energy_uj").mkdir()  # reading it fails, as a root-only counter does
    probe = energy.EnergyProbe(rapl_root=tmp_path, environ=NO_CODECARBON)
    cost = probe.finish(wall_seconds=3600.0, cpu_seconds=7200.0, peak_rss_mib=2048.0, cpu_count=2)
    assert cost["energy_method"] == "tdp-estimate"
    assert cost["cpu_utilisation"] == pytest.approx(1.0)
    assert cost["energy_kwh"] == pytest.approx(7200 * 10 / 3.6e6 + 3600 * 2 * 0.3725 / 3.6e6)


def test_tdp_estimate_formula() -> None:
    parts = energy.tdp_estimate_kwh(
        cpu_seconds=3600, wall_seconds=3600, peak_rss_gib=2.0, gpu_seconds=1800, gpu_model="Tesla V100-SXM2-16GB"
    )
    assert parts["cpu_kwh"] == pytest.approx(0.010)  # one core-hour at 10 W
    assert parts["ram_kwh"] == pytest.approx(2 * 0.3725 / 1000)
    assert parts["gpu_kwh"] == pytest.approx(0.150)  # half an hour at 300 W
    assert energy.gpu_watts("NVIDIA H100 80GB HBM3") == 700
    assert energy.gpu_watts("some new board") == energy.GPU_DEFAULT_WATTS


@settings(max_examples=50, deadline=None)
@given(
    cores=st.integers(1, 128),
    wall=st.floats(1, 1e6),
    utilisation=st.floats(0, 1),
    watts=st.floats(1, 50),
)
def test_estimate_is_tdp_times_utilisation(cores: int, wall: float, utilisation: float, watts: float) -> None:
    cpu_seconds = utilisation * wall * cores
    kwh = energy.tdp_estimate_kwh(cpu_seconds=cpu_seconds, wall_seconds=wall, peak_rss_gib=0, watts_per_core=watts)["cpu_kwh"]
    assert kwh == pytest.approx(cores * watts * utilisation * wall / 3.6e6)


def test_intensity_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    world = intensity.resolve_intensity({})
    assert world.g_per_kwh == 481 and world.source.startswith("default:")
    assert intensity.resolve_intensity({intensity.INTENSITY_ENV: "250.5"}) == intensity.Intensity(250.5, "$GREENADAPT_CO2_INTENSITY")
    fr = intensity.resolve_intensity({intensity.INTENSITY_ENV: "fr"})
    assert fr.g_per_kwh == 56 and "FR" in fr.source and "2023" in fr.source
    intensity.configure(country="DE")
    assert intensity.resolve_intensity({intensity.INTENSITY_ENV: "250"}).g_per_kwh == 381  # the option beats the env
    intensity.configure(intensity=12.0)
    assert intensity.resolve_intensity({intensity.INTENSITY_ENV: "250"}) == intensity.Intensity(12.0, "--co2-intensity")
    intensity.configure()
    assert intensity.resolve_intensity({intensity.INTENSITY_ENV: "250"}).g_per_kwh == 250


def test_bad_intensities_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="either --co2-intensity or --country"):
        intensity.configure(intensity=10, country="DE")
    with pytest.raises(UsageError, match="no grid intensity for 'XX'.*known: .*DE"):
        intensity.configure(country="XX")
    with pytest.raises(UsageError, match="not a number"):
        intensity.resolve_intensity({intensity.INTENSITY_ENV: "-3"})
    with pytest.raises(UsageError):
        intensity.resolve_intensity({intensity.INTENSITY_ENV: "Atlantis"})


def test_country_table_is_documented_and_sane() -> None:
    table = intensity.country_table()
    assert intensity.WORLD in table and len(table) >= 20
    for code, (value, source) in table.items():
        assert (len(code) == 2 or code == intensity.WORLD) and 0 < value < 1500, code
        assert "Ember" in source and "2023" in source


def test_a_real_stage_records_gpu_energy_and_co2(tmp_path: Path) -> None:
    intensity.configure(intensity=200.0)
    with StageRun("demo", tmp_path / "out", {"x": 1}, []) as run:
        deadline = time.process_time() + 0.05
        while time.process_time() < deadline:  # some CPU work to account for
            pass
        (run.tmp / "data.txt").write_text("x")
        manifest = run.commit()
    cost = manifest["cost"]
    assert cost["cpu_seconds"] > 0 and cost["wall_seconds"] > 0
    assert cost["gpu_seconds"] == 0 and cost["gpu_model"] is None and cost["gpu_count"] == 0  # no CUDA here
    assert cost["energy_method"] in ("tdp-estimate", "rapl", "rapl+tdp-estimate")
    assert cost["energy_kwh"] > 0
    # The total and each part are rounded to 1e-9 kWh on their own: their sum may be off by half a unit each.
    rounding = 0.5e-9 * (len(cost["energy_parts"]) + 1)
    assert sum(p["kwh"] for p in cost["energy_parts"].values()) == pytest.approx(cost["energy_kwh"], rel=1e-6, abs=rounding)
    assert cost["co2_intensity_g_per_kwh"] == 200.0 and cost["co2_intensity_source"] == "--co2-intensity"
    assert cost["co2_kg"] == pytest.approx(cost["energy_kwh"] * 0.2, rel=1e-6, abs=1e-9)


def test_bad_env_intensity_fails_before_the_stage_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(intensity.INTENSITY_ENV, "nowhere")
    with pytest.raises(UsageError):
        StageRun("demo", tmp_path / "out", {}, [])
    assert not (tmp_path / "out").exists()


def test_global_cli_options_set_the_intensity(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from greenadapt.cli import _register, app

    _register()
    result = CliRunner().invoke(app, ["--country", "SE", "report", str(tmp_path)])
    assert result.exit_code != 0  # an empty folder is no run folder; the callback ran before the command
    assert intensity.resolve_intensity({}).g_per_kwh == 41
    result = CliRunner().invoke(app, ["--co2-intensity", "-1", "report", str(tmp_path)])
    assert result.exit_code == 2


class _FakeCuda:
    def is_initialized(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def get_device_name(self, index: int) -> str:
        return "NVIDIA H100 80GB HBM3"


class _FakeNvml:
    """pynvml's calls the probe makes; the energy counter (mJ) advances 0.01 kWh per reading."""

    def __init__(self) -> None:
        self.total_mj = 5_000_000

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self.total_mj += int(0.01 * 3.6e9)
        return self.total_mj


def test_gpu_time_and_nvml_energy_when_cuda_is_in_use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys
    import types

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=_FakeCuda()))
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    probe = energy.EnergyProbe(rapl_root=tmp_path, environ=NO_CODECARBON)
    cost = probe.finish(wall_seconds=60.0, cpu_seconds=30.0, peak_rss_mib=1024.0, cpu_count=2)
    assert cost["gpu_model"] == "NVIDIA H100 80GB HBM3" and cost["gpu_count"] == 1 and cost["gpu_seconds"] == 60.0
    assert cost["energy_parts"]["gpu_kwh"] == {"kwh": pytest.approx(0.01), "method": "nvml", "label": "measured"}
    assert cost["energy_method"] == "tdp-estimate+nvml"

    # Without NVML the GPU term is estimated from the board's power, at full load.
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setenv("WORLD_SIZE", "4")  # torchrun: one GPU per process
    probe = energy.EnergyProbe(rapl_root=tmp_path, environ=NO_CODECARBON)
    cost = probe.finish(wall_seconds=60.0, cpu_seconds=30.0, peak_rss_mib=1024.0, cpu_count=2)
    assert cost["gpu_count"] == 4 and cost["gpu_seconds"] == 240.0
    assert cost["energy_parts"]["gpu_kwh"] == {"kwh": pytest.approx(240 * 700 / 3.6e6), "method": "tdp-estimate", "label": "estimated"}
    assert cost["energy_method"] == "tdp-estimate"


# --------------------------------------------------------------------------
# codecarbon and the measured/estimated label


def test_labels_say_measured_only_for_counters() -> None:
    assert energy.energy_label(["rapl", "nvml", "codecarbon:intel_rapl"]) == "measured"
    assert energy.energy_label(["tdp-estimate", "codecarbon:cpu_load", "codecarbon:model"]) == "estimated"
    assert energy.energy_label(["rapl", "codecarbon:model"]) == "partly measured"
    assert energy.energy_label(["codecarbon:unknown"]) == "estimated"  # an unknown mode is never called a measurement
    assert energy.energy_label([]) == "estimated"


class _FakeTrackerMeter:
    def __init__(self, parts: dict[str, tuple[float, str]]) -> None:
        self.parts = parts

    def stop(self) -> dict[str, tuple[float, str]]:
        return self.parts


def _probe_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: dict[str, tuple[float, str]]) -> energy.EnergyProbe:
    monkeypatch.setattr(energy, "CodecarbonMeter", lambda: _FakeTrackerMeter(parts))
    monkeypatch.setattr(energy.importlib.util, "find_spec", lambda name: object())
    probe = energy.EnergyProbe(rapl_root=tmp_path, environ={CODECARBON_ENV: "1"})
    probe.track()
    return probe


def test_codecarbon_replaces_the_estimate_and_is_labelled_by_its_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _probe_with(tmp_path, monkeypatch, {"cpu_kwh": (0.002, "codecarbon:cpu_load"), "ram_kwh": (0.001, "codecarbon:model")})
    cost = probe.finish(wall_seconds=60.0, cpu_seconds=30.0, peak_rss_mib=1024.0, cpu_count=2)
    assert cost["energy_kwh"] == pytest.approx(0.003)
    assert cost["energy_method"] == "codecarbon:cpu_load+codecarbon:model"
    assert cost["energy_label"] == "estimated"

    probe = _probe_with(tmp_path, monkeypatch, {"cpu_kwh": (0.002, "codecarbon:intel_rapl"), "ram_kwh": (0.001, "codecarbon:model")})
    cost = probe.finish(wall_seconds=60.0, cpu_seconds=30.0, peak_rss_mib=1024.0, cpu_count=2)
    assert cost["energy_parts"]["cpu_kwh"] == {"kwh": pytest.approx(0.002), "method": "codecarbon:intel_rapl", "label": "measured"}
    assert cost["energy_label"] == "partly measured"

    # A GPU codecarbon sees is not this CPU stage's energy.
    probe = _probe_with(tmp_path, monkeypatch, {"cpu_kwh": (0.002, "codecarbon:cpu_load"), "gpu_kwh": (5.0, "codecarbon:nvml")})
    cost = probe.finish(wall_seconds=60.0, cpu_seconds=30.0, peak_rss_mib=1024.0, cpu_count=2)
    assert "gpu_kwh" not in cost["energy_parts"] and cost["energy_kwh"] < 0.01


def test_greenadapt_own_counters_beat_codecarbon_which_is_then_not_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _fake_rapl(tmp_path)
    started: list[object] = []
    monkeypatch.setattr(
        energy, "CodecarbonMeter", lambda: started.append(1) or _FakeTrackerMeter({"cpu_kwh": (9.0, "codecarbon:cpu_load")})
    )
    monkeypatch.setattr(energy.importlib.util, "find_spec", lambda name: object())
    probe = energy.EnergyProbe(rapl_root=tmp_path, environ={})
    probe.track()
    (files["pkg1"] / "energy_uj").write_text(f"{2_000_000 + int(0.9e11)}\n")
    cost = probe.finish(wall_seconds=10.0, cpu_seconds=5.0, peak_rss_mib=1024.0, cpu_count=2)
    assert cost["energy_parts"]["cpu_kwh"]["method"] == "rapl"
    assert cost["energy_parts"]["ram_kwh"]["method"] == "rapl"  # the fake sysfs has a dram domain
    assert cost["energy_label"] == "measured"
    assert started == []  # its probe would cost a second of CPU for figures RAPL replaces

    unreadable = tmp_path / "no-rapl"
    unreadable.mkdir()
    energy.EnergyProbe(rapl_root=unreadable, environ={}, platform="darwin").track()
    assert started == [1]


def test_codecarbon_starts_only_where_it_may_read_a_counter_greenadapt_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    monkeypatch.setattr(
        energy, "CodecarbonMeter", lambda: started.append(1) or _FakeTrackerMeter({"cpu_kwh": (9.0, "codecarbon:cpu_load")})
    )
    monkeypatch.setattr(energy.importlib.util, "find_spec", lambda name: object())
    unreadable = tmp_path / "no-rapl"
    unreadable.mkdir()
    # Linux without readable RAPL: codecarbon could only model the CPU, so the estimate stands and no probe is paid.
    probe = energy.EnergyProbe(rapl_root=unreadable, environ={}, platform="linux")
    probe.track()
    cost = probe.finish(wall_seconds=10.0, cpu_seconds=5.0, peak_rss_mib=1024.0, cpu_count=2)
    assert started == [] and cost["energy_method"] == "tdp-estimate"
    for platform, environ, expected in [
        ("linux", {CODECARBON_ENV: "1"}, True),  # asked for: its TDP database
        ("linux", {CODECARBON_ENV: "auto"}, False),
        ("darwin", {}, True),  # powermetrics, Intel Power Gadget
        ("win32", {}, True),  # Windows EMI
        ("win32", {CODECARBON_ENV: "off"}, False),
    ]:
        assert codecarbon_wanted(environ, platform) is expected, (platform, environ)
    energy.EnergyProbe(rapl_root=unreadable, environ={CODECARBON_ENV: "1"}, platform="linux").track()
    assert started == [1]


def test_a_real_stage_with_codecarbon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    import logging

    pytest.importorskip("codecarbon")  # in the test extra, so CI runs this
    monkeypatch.setenv(CODECARBON_ENV, "1")
    logging.getLogger("codecarbon").setLevel(logging.INFO)  # as a fresh import leaves it
    with StageRun("demo", tmp_path / "out", {"x": 1}, []) as run:
        deadline = time.process_time() + 0.5
        while time.process_time() < deadline:
            pass
        (run.tmp / "data.txt").write_text("x")
        manifest = run.commit()
    cost = manifest["cost"]
    cpu = cost["energy_parts"]["cpu_kwh"]
    assert cpu["method"] == "rapl" or cpu["method"].startswith("codecarbon:"), cost["energy_parts"]
    assert cost["energy_parts"]["ram_kwh"]["method"] in ("rapl", "codecarbon:model")
    assert cost["energy_kwh"] > 0 and cost["energy_label"] in ("measured", "estimated", "partly measured")
    assert not list(tmp_path.glob("*.csv")) and not Path("emissions.csv").exists()  # codecarbon wrote no files
    assert "codecarbon" not in capfd.readouterr().err  # nor chatter on the user's stderr

    monkeypatch.setenv(CODECARBON_ENV, "0")
    with StageRun("demo", tmp_path / "off", {"x": 1}, []) as run:
        (run.tmp / "data.txt").write_text("x")
        manifest = run.commit()
    assert "codecarbon" not in manifest["cost"]["energy_method"]


def test_codecarbon_runs_only_for_a_stage_that_runs_and_stops_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    class Meter:
        def __init__(self) -> None:
            events.append("start")

        def stop(self) -> None:
            events.append("stop")

    monkeypatch.setattr(energy, "CodecarbonMeter", Meter)
    monkeypatch.setattr(energy.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setenv(CODECARBON_ENV, "1")
    with StageRun("demo", tmp_path / "out", {"x": 1}, []) as run:
        (run.tmp / "data.txt").write_text("x")
        run.commit()
    assert events == ["start", "stop"]
    with StageRun("demo", tmp_path / "out", {"x": 1}, []) as run:  # up to date: skipped
        assert run.skipped
    assert events == ["start", "stop"]  # a skipped stage starts no tracker
    with pytest.raises(ValueError), StageRun("demo", tmp_path / "failed", {"x": 1}, []):
        raise ValueError("the stage's work failed")
    assert events == ["start", "stop", "start", "stop"]  # no tracker outlives a failed stage
