"""The fifth reliability round (issue 63, items 2-4): trackers that cannot hang or leak, config and task files parsed
defensively, and the silent accepts and wrong exit codes the round-5 probe found. compare's interruptions (item 1) are
in tests/test_reliability_round5_compare.py.

The tracker tests talk only to servers they start on 127.0.0.1: one that accepts and never answers, a closed port, and
a small MLflow REST store that refuses the final scores. Their verdicts are exit codes and output, never a duration.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli
from conftest import HANG_S, REPO, build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file

from greenadapt.errors import EXIT_BAD_INPUT, EXIT_STAGE_CONFLICT, EXIT_USAGE

PASSWORD = "S3cr3tPW"
MLFLOW = importlib.util.find_spec("mlflow") is not None


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A plain and an expanded tiny model, NER and classification files, and a finished NER run of each model."""
    from greenadapt.api import finetune

    root = tmp_path_factory.mktemp("round5")
    made = {
        "root": root,
        "plain": build_tiny_bert(root / "plain", head="base"),
        "expanded": build_tiny_expanded(root / "expanded"),
        "ner": write_ner_file(root / "ner.tsv", 24, seed=1),
        "ner_test": write_ner_file(root / "ner-test.tsv", 12, seed=2),
        "classify": write_classify_file(root / "classify.jsonl", 24, seed=1),
    }
    for name in ("plain", "expanded"):
        finetune(task="ner", train=made["ner"], model=made[name], out=root / f"run-{name}", max_steps=4, device="cpu", progress=False)
        made[f"run-{name}"] = root / f"run-{name}"
    return made


def _one_line(code: int, err: str, expected: int) -> None:
    assert code == expected, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "GREENADAPT_HEARTBEAT": "0", **extra}


def _greenadapt(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greenadapt", *args], capture_output=True, text=True, env=_env(**env),
                          timeout=HANG_S, check=False)


# -- 2. trackers --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A server that accepts connections and never answers (a hung tracking server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


class _MlflowStore(BaseHTTPRequestHandler):
    """Just enough of MLflow's REST API for a run; a log-batch holding test scores (sent after training) gets HTTP 400."""

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    _RUN = {"info": {"run_id": "r1", "run_uuid": "r1", "experiment_id": "1", "run_name": "run", "status": "RUNNING",
                     "start_time": 1, "lifecycle_stage": "active", "artifact_uri": "/tmp/none"}, "data": {}}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if "experiments/get-by-name" in self.path:
            self._send(200, {"experiment": {"experiment_id": "1", "name": "greenadapt", "lifecycle_stage": "active"}})
        elif "runs/get" in self.path:
            self._send(200, {"run": self._RUN})
        else:
            self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": self.path})

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        if "runs/create" in self.path:
            self._send(200, {"run": self._RUN})
        elif "runs/log-batch" in self.path:
            if "test/" in body:
                self._send(400, {"error_code": "INVALID_PARAMETER_VALUE", "message": "the store refuses this batch"})
            else:
                self._send(200, {})
        elif "runs/update" in self.path:
            self._send(200, {"run_info": self._RUN["info"]})
        elif "experiments/create" in self.path:
            self._send(200, {"experiment_id": "1"})
        else:
            self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": self.path})


def _finetune_tracked(data: dict[str, Path], out: Path) -> list[str]:
    return ["finetune", "--task", "ner", "--train", str(data["ner"]), "--test", str(data["ner_test"]), "--model", str(data["expanded"]),
            "--out", str(out), "--max-steps", "3", "--device", "cpu", "--report-to", "mlflow"]


@pytest.mark.skipif(not MLFLOW, reason="the trackers extra (mlflow-skinny) is not installed")
def test_a_tracking_server_that_never_answers_is_a_line_before_training(data: dict[str, Path], tmp_path: Path) -> None:
    with _silent_server() as port:
        done = _greenadapt(_finetune_tracked(data, tmp_path / "run"), MLFLOW_TRACKING_URI=f"http://bob:{PASSWORD}@127.0.0.1:{port}",
                           GREENADAPT_TRACKER_TIMEOUT="1")
    _one_line(done.returncode, done.stderr, EXIT_USAGE)
    assert "--report-to mlflow" in done.stderr and "did not answer" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not MLFLOW, reason="the trackers extra (mlflow-skinny) is not installed")
def test_a_closed_tracking_port_is_a_line_before_training(data: dict[str, Path], tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens there
    done = _greenadapt(_finetune_tracked(data, tmp_path / "run"), MLFLOW_TRACKING_URI=f"http://bob:{PASSWORD}@127.0.0.1:{port}")
    _one_line(done.returncode, done.stderr, EXIT_USAGE)
    assert PASSWORD not in done.stderr + done.stdout
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not MLFLOW, reason="the trackers extra (mlflow-skinny) is not installed")
def test_a_store_that_refuses_a_write_after_training_costs_a_warning_not_the_run(data: dict[str, Path], tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MlflowStore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = _greenadapt([*_finetune_tracked(data, tmp_path / "run"), "--json"],
                           MLFLOW_TRACKING_URI=f"http://bob:{PASSWORD}@127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "metrics.json").is_file() and (tmp_path / "run" / "manifest.json").is_file()
    assert "--report-to mlflow failed" in done.stderr and "the run goes on without it" in done.stderr
    assert json.loads(done.stdout)["kind"] == "finetune"  # stdout is greenadapt's result alone: no "View run at" from MLflow
    assert "View run" not in done.stdout
    assert PASSWORD not in done.stderr + done.stdout


# -- 3. config and task files --------------------------------------------------------------------------------


def _deep_config(path: Path, kind: str) -> Path:
    if kind == "json-document":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "json-value":
        path.write_text('{"lr": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif kind == "json-shallow-enough-to-parse":
        path.write_text('{"lr": ' + "[" * 900 + "]" * 900 + "}")
    elif kind == "toml-array":
        path.write_text("lr = " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "toml-inline-table":
        path.write_text("lr = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n")
    elif kind == "latin-1-toml":
        path.write_text('entity_type = "Ma\u00eflle"\n', encoding="latin-1")
    elif kind == "latin-1-json":
        path.write_text('{"entity_type": "Ma\u00eflle"}', encoding="latin-1")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    return path


@pytest.mark.parametrize("kind", ["json-document", "json-value", "json-shallow-enough-to-parse", "toml-array", "toml-inline-table",
                                  "latin-1-toml", "latin-1-json", "binary"])
def test_a_config_file_that_cannot_be_read_is_one_line_naming_it(kind: str, data: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    suffix = ".toml" if kind.startswith("toml") or kind == "latin-1-toml" else ".json"
    config = _deep_config(tmp_path / f"config{suffix}", kind)
    code, err = run_cli(["finetune", "--config", str(config), "--task", "ner", "--train", str(data["ner"])], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert str(config) in err


def _deep_json_line(path: Path, first: str) -> Path:
    path.write_text(first + "\n" + '{"text": ' + "[" * 100_000 + "]" * 100_000 + ', "label": "x"}\n')
    return path


@pytest.mark.parametrize("command", ["finetune-classify", "finetune-ner", "evaluate", "predict"])
def test_a_json_line_nested_too_deeply_in_a_task_file_is_one_line(command: str, data: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    if command == "finetune-ner":
        bad = tmp_path / "ner.jsonl"
        bad.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O", "O"]}) + "\n" + '{"tokens": ' + "[" * 100_000 + "]" * 100_000
                       + "}\n")
        args = ["finetune", "--task", "ner", "--train", str(bad), "--model", str(data["expanded"]), "--out", str(tmp_path / "run"),
                "--device", "cpu"]
    else:
        bad = _deep_json_line(tmp_path / "texts.jsonl", json.dumps({"text": "the disease", "label": "disease"}))
        if command == "finetune-classify":
            args = ["finetune", "--task", "classify", "--train", str(bad), "--model", str(data["expanded"]), "--out", str(tmp_path / "run"),
                    "--device", "cpu"]
        else:
            classify_run = data["root"] / "run-classify"
            if not classify_run.exists():
                from greenadapt.api import finetune

                finetune(task="classify", train=data["classify"], model=data["expanded"], out=classify_run, max_steps=2,
                         device="cpu", progress=False)
            args = (["evaluate", str(bad), "--model", str(classify_run)] if command == "evaluate"
                    else ["predict", str(bad), "--model", str(classify_run), "--output", str(tmp_path / "out.jsonl")])
    code, err = run_cli(args, monkeypatch, capsys)
    _one_line(code, err, EXIT_BAD_INPUT)
    assert "nested too deeply" in err and f"{bad}:2" in err


def test_a_multitask_tasks_file_nested_too_deeply_is_one_line(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks.toml"
    tasks.write_text("[[task]]\nname = " + "[" * 5000 + "]" * 5000 + "\n")
    code, err = run_cli(["multitask", "--model", str(data["expanded"]), "--tasks", str(tasks), "--out", str(tmp_path / "mt")],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_BAD_INPUT)
    assert str(tasks) in err


def test_a_corpus_recipe_nested_too_deeply_is_one_line(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "deep.toml").write_text("description = " + "[" * 5000 + "]" * 5000 + "\n")
    monkeypatch.setenv("GREENADAPT_CORPORA", str(recipes))
    code, err = run_cli(["w2v", "--corpus", "deep", "--model", str(data["expanded"]), "--workdir", str(tmp_path / "work")],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_BAD_INPUT)
    assert "deep.toml" in err


@pytest.mark.parametrize("where", ["config-value", "train", "test", "model", "predict-input", "evaluate-input", "qa-data",
                                   "multitask-train"])
def test_no_message_shows_a_credential(where: str, data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://bob:{PASSWORD}@127.0.0.1:9/data.tsv"
    run = str(data["run-expanded"])
    if where == "config-value":
        config = tmp_path / "w2v.toml"
        config.write_text(f'corpus = {{url="{url}"}}\n')
        args = ["w2v", "--config", str(config), "--model", str(data["expanded"])]
    else:
        args = {
            "train": ["finetune", "--task", "ner", "--train", url, "--model", str(data["expanded"])],
            "test": ["finetune", "--task", "ner", "--train", str(data["ner"]), "--test", url, "--model", str(data["expanded"])],
            "model": ["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", url],
            "predict-input": ["predict", url, "--model", run],
            "evaluate-input": ["evaluate", url, "--model", run],
            "qa-data": ["qa", "--data", url, "--model", str(data["expanded"]), "--out", str(tmp_path / "qa")],
            "multitask-train": ["multitask", "--model", str(data["expanded"]), "--task", f"name=x,type=ner,train={url}", "--out",
                                str(tmp_path / "mt")],
        }[where]
    code, err = run_cli(args, monkeypatch, capsys)
    assert code in (EXIT_USAGE, EXIT_BAD_INPUT), err
    assert len(err.strip().splitlines()) == 1, err
    assert PASSWORD not in err and "bob:" not in err, err


@pytest.mark.parametrize("keys", [("max_length", "max-length"), ("max_length", "--max-length")])
def test_a_config_that_names_an_option_twice_is_refused(keys: tuple[str, str], data: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "twice.json"
    config.write_text(json.dumps({keys[0]: 64, keys[1]: 32}))
    code, err = run_cli(["finetune", "--config", str(config), "--task", "ner", "--train", str(data["ner"])], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "both set max_length" in err


def test_predicts_output_and_out_in_one_config_are_refused(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "predict.toml"
    config.write_text(f'output = "{tmp_path / "a.tsv"}"\nout = "{tmp_path / "b.tsv"}"\n')
    code, err = run_cli(["predict", str(data["ner_test"]), "--model", str(data["run-expanded"]), "--config", str(config)],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert not (tmp_path / "a.tsv").exists() and not (tmp_path / "b.tsv").exists()


def test_info_on_a_damaged_manifest_exits_4(data: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(data["run-expanded"], folder)
    (folder / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    done = _greenadapt(["info", str(folder)])
    _one_line(done.returncode, done.stderr, EXIT_STAGE_CONFLICT)  # the description is on stdout, the verdict in the exit code
    assert "damaged" in done.stderr and "damaged" in done.stdout


def test_editing_a_runs_options_json_keeps_the_model_usable_and_is_what_a_replay_reads(
        data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(data["run-expanded"], folder)
    document = json.loads((folder / "options.json").read_text())
    document["options"]["lr"] = 0.002  # a user's edit of the replay file
    (folder / "options.json").write_text(json.dumps(document, indent=2))
    for args in (["predict", str(data["ner_test"]), "--model", str(folder), "--output", str(tmp_path / "tagged.tsv")],
                 ["evaluate", str(data["ner_test"]), "--model", str(folder)],
                 ["info", str(folder), "--check"]):
        code, err = run_cli(args, monkeypatch, capsys)
        assert code == 0, err
    from greenadapt.runners.finetune.settings import FinetuneSettings

    assert FinetuneSettings.build(folder).lr == 0.002
    # what ran stays recorded: the manifest's own options section
    assert json.loads((folder / "manifest.json").read_text())["options"]["options"]["lr"] != 0.002


def test_a_replayed_boolean_option_can_be_turned_off_on_the_command_line(data: dict[str, Path], tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gpu.toml"
    config.write_text(f'task = "ner"\ntrain = "{data["ner"]}"\nmodel = "{data["expanded"]}"\ncuda_graphs = true\nmax_steps = 2\ndevice = '
                      f'"cpu"\n')
    code, err = run_cli(["finetune", "--config", str(config), "--out", str(tmp_path / "on")], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)  # the GPU run's option, on a CPU
    assert "--cuda-graphs" in err
    code, err = run_cli(["finetune", "--config", str(config), "--no-cuda-graphs", "--out", str(tmp_path / "off")], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "off" / "options.json").read_text())["options"]["cuda_graphs"] is False


# -- 4. silent accepts and wrong codes -----------------------------------------------------------------------


@pytest.mark.parametrize("option", [("--epochs", str(10**18)), ("--max-steps", str(2**63 - 1)), ("--entity-type", "D" * 1_000_000)])
def test_training_lengths_and_entity_types_past_any_real_run_are_refused(option: tuple[str, str], data: dict[str, Path], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.json"  # (a megabyte does not fit a command line: the config file carries it)
    config.write_text(json.dumps({option[0].lstrip("-").replace("-", "_"): option[1] if option[0] == "--entity-type" else int(option[1])}))
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["expanded"]),
                         "--config", str(config),
                         "--out", str(tmp_path / "run")], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert option[0] in err and len(err) < 500
    assert not (tmp_path / "run").exists()


def test_compare_refuses_a_bootstrap_past_memory_before_training(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "compare.toml"
    config.write_text("bootstrap = 1000000000\n")
    code, err = run_cli(["compare", "--config", str(config), "--task", "ner", "--train", str(data["ner"]), "--test", str(data["ner_test"]),
                         "--model", f"a={data['plain']}", "--model", f"b={data['expanded']}", "--out", str(tmp_path / "cmp")],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "--bootstrap" in err and not (tmp_path / "cmp").exists()


def test_an_ensembles_answer_does_not_depend_on_the_order_of_its_members(data: dict[str, Path], tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt

    plain, expanded = str(data["run-plain"]), str(data["run-expanded"])
    outputs = []
    for order in ((plain, expanded), (expanded, plain)):
        out = tmp_path / f"{Path(order[0]).name}-first.tsv"
        code, err = run_cli(["predict", str(data["ner_test"]), "-m", order[0], "-m", order[1], "--output", str(out)], monkeypatch, capsys)
        assert code == 0, err
        outputs.append(out.read_text())
        code, err = run_cli(["evaluate", str(data["ner_test"]), "-m", order[0], "-m", order[1], "--json"], monkeypatch, capsys)
        assert code == 0, err
    assert outputs[0] == outputs[1]
    texts = ["the disease cancer of the heart", "sleep and heart rate"]
    assert greenadapt.load([plain, expanded]).predict(texts) == greenadapt.load([expanded, plain]).predict(texts)


def test_ensemble_member_seeds_never_collide_with_the_seeds_asked_for(data: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["compare", "--task", "ner", "--train", str(data["ner"]), "--test", str(data["ner_test"]), "--model",
                         f"base={data['plain']}",
                         "--model", f"green={data['expanded']}", "--ensemble", "green=2", "--seeds", "1,100001", "--out",
                         str(tmp_path / "cmp")],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "100001" in err and not (tmp_path / "cmp").exists()


def test_compares_models_may_be_a_list_in_a_toml_config(data: dict[str, Path], tmp_path: Path) -> None:
    from greenadapt.comparison.settings import CompareSettings

    config = tmp_path / "compare.toml"
    config.write_text(f'task = "ner"\ntrain = "{data["ner"]}"\ntest = "{data["ner_test"]}"\nmodels = ["base={data["plain"]}", '
                      f'"green={data["expanded"]}"]\n')
    assert CompareSettings.build(config).models == (("base", str(data["plain"])), ("green", str(data["expanded"])))
    config.write_text(f'task = "ner"\ntrain = "{data["ner"]}"\ntest = "{data["ner_test"]}"\nmodels = ["base"]\n')
    with pytest.raises(Exception, match="is not NAME=MODEL"):
        CompareSettings.build(config)


@pytest.mark.parametrize("extra", [["--eval-every", "2"], ["--early-stopping", "2"], ["--cuda-graphs", "--device", "cpu"]])
def test_finetune_qa_refuses_what_it_does_not_do(extra: list[str], tmp_path: Path, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "the heart rate", "qas": [
        {"id": "1", "question": "what rate", "answers": [{"text": "heart rate", "answer_start": 4}]}]}]}]}))
    code, err = run_cli(["finetune", "--task", "qa", "--train", str(squad), "--dev", str(squad), "--model", str(data["expanded"]),
                         "--out", str(tmp_path / "qa"), *extra], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert extra[0] in err and not (tmp_path / "qa").exists()


def test_an_unknown_cpu_auto_precision_is_refused(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GREENADAPT_CPU_AUTO_PRECISION", "fp16")
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["expanded"]), "--device", "cpu",
                         "--out", str(tmp_path / "run")], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "GREENADAPT_CPU_AUTO_PRECISION" in err and not (tmp_path / "run").exists()
