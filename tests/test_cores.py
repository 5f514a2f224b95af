"""The default worker count: the cores this process may use (affinity mask, cgroup v1/v2 quota, $GREENADAPT_WORKERS)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from greenadapt.errors import UsageError
from greenadapt.machine import cores


def _v2(root: Path, cgroup: str, limits: dict[str, str]) -> Path:
    """A fake unified cgroup tree: ``limits`` maps a cgroup path ('' = root) to its cpu.max line."""
    for path, line in limits.items():
        folder = root / path if path else root
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.max").write_text(line + "\n")
    proc = root.parent / "proc-self-cgroup"
    proc.write_text(f"0::{cgroup}\n")
    return proc


def test_cgroup_v2_quota_is_the_tightest_of_the_process_cgroup_and_its_parents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "affinity_cores", lambda: 8)  # a bigger machine than this one, so the quota decides
    root = tmp_path / "cgroup"
    proc = _v2(root, "/kubepods/pod1/box", {"": "max 100000", "kubepods/pod1": "250000 100000", "kubepods/pod1/box": "max 100000"})
    assert cores.cgroup_quota(root, proc) == pytest.approx(2.5)
    # 2.5 cores of CPU time: 3 workers, never more than the affinity mask allows.
    n = cores.available_cores(environ={}, cgroup_root=root, proc_cgroup=proc)
    assert n == min(3, cores.affinity_cores()) == 3


def test_no_quota_means_the_affinity_mask(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    proc = _v2(root, "/", {"": "max 100000"})
    assert cores.cgroup_quota(root, proc) is None
    assert cores.available_cores(environ={}, cgroup_root=root, proc_cgroup=proc) == len(os.sched_getaffinity(0))
    assert cores.cgroup_quota(root, tmp_path / "absent") is None  # not Linux, or no /proc


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    mount = tmp_path / "cgroup" / "cpu,cpuacct"
    (mount / "docker" / "abc").mkdir(parents=True)
    (mount / "cpu.cfs_quota_us").write_text("-1\n")
    (mount / "cpu.cfs_period_us").write_text("100000\n")
    (mount / "docker" / "abc" / "cpu.cfs_quota_us").write_text("50000\n")
    (mount / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cores.cgroup_quota(tmp_path / "cgroup", proc) == pytest.approx(0.5)
    assert cores.available_cores(environ={}, cgroup_root=tmp_path / "cgroup", proc_cgroup=proc) == 1  # at least one


def test_the_affinity_mask_is_respected() -> None:
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        pytest.skip("needs two cores to pin to one")
    try:
        os.sched_setaffinity(0, {min(before)})
        assert cores.available_cores(environ={}) == 1
    finally:
        os.sched_setaffinity(0, before)


def test_the_environment_variable_is_an_explicit_choice() -> None:
    assert cores.available_cores(environ={cores.WORKERS_ENV: "7"}) == 7
    for bad in ("0", "two", "-1"):
        with pytest.raises(UsageError, match="GREENADAPT_WORKERS"):
            cores.available_cores(environ={cores.WORKERS_ENV: bad})


def test_stages_default_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.adaptation.settings import W2vSettings
    from greenadapt.adaptation.w2v import w2v_workers

    monkeypatch.setenv(cores.WORKERS_ENV, "3")
    assert w2v_workers(W2vSettings(corpus=("x",))) == 3
    assert w2v_workers(W2vSettings(corpus=("x",), workers=1)) == 1  # --workers wins


# -- torch's CPU threads (issue 94, item 3) ------------------------------------------------------------------------------


@pytest.fixture
def torch_threads() -> object:
    """torch's thread count, restored after the test (the tests here change it in this worker's process)."""
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_torch_threads_stay_within_the_usable_cores_and_below_a_lower_choice(torch_threads: object,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.machine.devices import use_cpu_threads

    torch = torch_threads
    torch.set_num_threads(4)  # torch's own default on a 4-core host (it reads neither cpu.max nor cpu.cfs_quota_us)
    monkeypatch.setattr(cores, "usable_cores", lambda: 1)  # a container of 1 CPU (the quota's reading: the tests above)
    assert use_cpu_threads(0) == 1 and torch.get_num_threads() == 1  # the quota, not the host's 4
    assert use_cpu_threads(3) == 3 and torch.get_num_threads() == 3  # --threads 3: the user's choice
    torch.set_num_threads(1)  # OMP_NUM_THREADS=1, or a compare worker's share
    monkeypatch.setattr(cores, "usable_cores", lambda: 4)
    assert use_cpu_threads(0) == 1  # never raised above a lower count set before


def test_threads_reach_torch_from_a_command_and_from_load(torch_threads: object, tiny_bert: Path, tmp_path: Path) -> None:
    import greenadapt
    from finetune_helpers import write_ner_file

    torch = torch_threads
    train = write_ner_file(tmp_path / "train.tsv", 8, seed=1)
    torch.set_num_threads(2)
    run = greenadapt.finetune("ner", train, model=str(tiny_bert), out=tmp_path / "run", max_steps=1, device="cpu", progress=False,
                              threads=1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    greenadapt.load(run.path, device="cpu", threads=1, runtime="torch")
    assert torch.get_num_threads() == 1
    if importlib.util.find_spec("onnxruntime") is not None:  # ONNX Runtime's threads are its model's: torch's left alone
        torch.set_num_threads(2)
        assert greenadapt.load(run.path, threads=1, runtime="onnx").model.threads == 1  # type: ignore[union-attr]
        assert torch.get_num_threads() == 2
    torch.set_num_threads(2)  # qa declares its own --device: --threads is its too (the group, not DeviceSettings)
    from greenadapt.inference.qa.settings import QaSettings

    from greenadapt.machine.devices import pick_device

    QaSettings(data=train, threads=1).configure_process()  # deferred, as predict's: an ONNX answer never imports torch
    assert torch.get_num_threads() == 2
    pick_device("cpu", allow_mps=False)  # where a torch QA model is opened
    assert torch.get_num_threads() == 1
    with pytest.raises(UsageError, match="threads must be at least 0"):
        greenadapt.load(run.path, threads=-1)


def test_onnx_runtimes_threads_are_found_without_torch_and_a_deferred_choice_yields_to_a_later_one(
        torch_threads: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.machine import devices

    torch = torch_threads
    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch now fails: none is made
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    devices.defer_cpu_threads(0)
    assert devices.inference_threads() == 2  # OMP_NUM_THREADS, never past the usable cores
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert devices.inference_threads() == 1
    devices.defer_cpu_threads(3)
    assert devices.inference_threads() == 3  # --threads 3
    monkeypatch.setitem(sys.modules, "torch", torch)
    torch.set_num_threads(2)
    devices.pick_device("cpu")  # the first torch model: the deferred choice is set
    assert torch.get_num_threads() == 3 and devices.inference_threads() == 3
    devices.defer_cpu_threads(1)
    devices.use_cpu_threads(2)  # a later command's own choice voids the deferred one
    devices.pick_device("cpu")
    assert torch.get_num_threads() == 2


def test_busy_share_counts_full_priority_work_and_not_niced_or_idle_time(tmp_path: Path) -> None:
    from greenadapt.machine.load import busy_share, cpu_times

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 50 20 800 10 5 5 3 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert cpu_times(stat) == (130, 993)
    readings = iter([(100, 1000), (160, 1200)])  # 60 busy ticks of 200: 30% at full priority
    assert busy_share(0.0, read=lambda: next(readings), sleep=lambda s: None) == pytest.approx(0.3)
    assert busy_share(0.0, read=lambda: None, sleep=lambda s: None) is None
    (tmp_path / "bad").write_text("intr 1 2 3\n")
    assert cpu_times(tmp_path / "bad") is None and cpu_times(tmp_path / "missing") is None


def test_torch_threads_wait_passively_only_on_a_machine_busy_with_other_work() -> None:
    from greenadapt.machine.load import BUSY_SHARE, choose_wait_policy

    for share, expected in ((0.9, "PASSIVE"), (BUSY_SHARE, "PASSIVE"), (0.1, None), (None, None)):
        environ: dict[str, str] = {}
        assert choose_wait_policy(environ, modules={}, share=lambda share=share: share) == expected
        assert environ.get("OMP_WAIT_POLICY") == expected
    kept = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert choose_wait_policy(kept, modules={}, share=lambda: 0.9) is None and kept == {"OMP_WAIT_POLICY": "ACTIVE"}
    environ = {}
    assert choose_wait_policy(environ, modules={"torch": object()}, share=lambda: 0.9) is None and not environ  # too late


def test_the_machine_is_sampled_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's settings and its process set-up both ask: the tenth of a second is spent once."""
    import greenadapt.machine.load as load

    calls: list[float] = []
    monkeypatch.setattr(load, "busy_share", lambda *a, **k: calls.append(1) or 0.1)
    load.busy_share_once.cache_clear()
    try:
        assert load.choose_wait_policy({}, modules={}) is None and load.choose_wait_policy({}, modules={}) is None
    finally:
        load.busy_share_once.cache_clear()
    assert calls == [1]


def test_the_choice_says_nothing_a_user_sees(caplog: pytest.LogCaptureFixture) -> None:
    """A command that then refuses its options must say one line (round 5-7's tests caught an INFO line before it)."""
    import logging

    from greenadapt.machine.load import choose_wait_policy

    with caplog.at_level(logging.INFO):
        assert choose_wait_policy({}, modules={}, share=lambda: 0.9) == "PASSIVE"
    assert not caplog.records


def test_a_command_chooses_before_its_checks_import_torch(tmp_path: Path) -> None:
    """The policy must be in the environment before torch loads its OpenMP runtime: finetune's settings import torch
    in their checks where a GPU driver is (to ask torch for a GPU), so the choice is made when the settings are built."""
    from finetune_helpers import write_ner_file

    train = write_ner_file(tmp_path / "train.tsv", 8, seed=1)
    code = ("import os, sys\nimport greenadapt.machine.load as load\nload.busy_share = lambda *a, **k: 0.9\n"
            "seen = []\nreal = load.choose_wait_policy\n"
            "def spy(*a, **k):\n    seen.append('torch' in sys.modules)\n    return real(*a, **k)\n"
            "load.choose_wait_policy = spy\n"
            "import greenadapt.machine.devices as devices\ndevices.GPU_DRIVER_PATHS = (sys.executable,)  # a driver\n"
            "from greenadapt.runners.finetune.settings import FinetuneSettings\n"
            "FinetuneSettings.build(task='ner', train=sys.argv[1], device='auto')\n"
            "print(os.environ.get('OMP_WAIT_POLICY'), seen[0], 'torch' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", code, str(train)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["PASSIVE", "False", "True"], done.stdout  # chosen with torch not yet loaded; loaded after
