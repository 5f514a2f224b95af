#!/usr/bin/env python3
"""Hostile-input probes: bad inputs over every command, and attempts to lose a user's data.

Each probe runs ``greenadapt`` as a real process (``python -m greenadapt``) on
tiny models and data built in code, and is classified:

- ``one-line``: the expected exit code, one line on stderr, no traceback;
- ``wrong code``: refused in one line, but with another exit code than the
  README's table gives for that kind of mistake;
- ``traceback``: a traceback or a multi-line error;
- ``silently accepted``: exit 0 where the input should have been refused (or
  warned about, for the probes that expect a warning).

Data-safety probes also check afterwards that every file the user had is
still there, byte for byte, and that nothing of greenadapt's replaced it.
Exit status 1 when any probe is not ``one-line`` or any data-safety check fails.

    PYTHONPATH=.:tests python bench/probe_bad_inputs.py            # a table on stdout
    PYTHONPATH=.:tests python bench/probe_bad_inputs.py --json     # one JSON object

Results and the date they were taken: docs/reliability.md, "Probes".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
USAGE, BAD_INPUT, STAGE, OK = 2, 3, 4, 0


@dataclass
class Probe:
    name: str
    args: list[str]
    expect: int  # the exit code the README's table gives; OK with `warning` set: accepted with a one-line warning
    warning: str | None = None
    keep: list[str] = field(default_factory=list)  # paths (relative to the probe folder) whose content must survive
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    secret: str | None = None  # must appear on neither stream nor in any file or folder name under the probe's folder
    expected_warning: str | None = None  # warning lines holding this may come before the error (a download's retries)


def build(root: Path) -> dict[str, Path]:
    """Tiny models and data, built once; every probe works on copies or reads them."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import build_tiny_bert
    from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    model = build_tiny_bert(root / "model")
    words = "the patients were treated with the protein and the gene expression of cancer cells was increased".split()
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(" ".join(words[i % 9 :] + words[: i % 9]) for i in range(200)) + "\n")
    ner = write_ner_file(root / "train.tsv", 24, seed=1)
    from greenadapt.api import finetune

    expanded = build_tiny_expanded(root / "expanded")
    finetune(task="ner", train=ner, model=expanded, out=root / "run", max_steps=1, device="cpu")
    return {
        "run": root / "run",
        "model": model,
        "corpus": corpus,
        "expanded": expanded,
        "qa_model": build_tiny_expanded_qa(root / "qa-model"),
        "ner": ner,
        "classify": write_classify_file(root / "train.jsonl", 12, seed=1),
        "squad": squad_file(root / "squad.json", [{"paragraphs": [paragraph("tachycardia is a fast heart rate .",
                                                                              ("q1", "what is tachycardia ?",
                                                                               [("a fast heart rate", 15)]))]}]),
    }


def probes(data: dict[str, Path], here: Path) -> list[Probe]:
    """The probe table. ``here`` is the probe's own folder (a fresh copy of the user's files per probe)."""
    m, c, e, ner, squad = (str(data[k]) for k in ("model", "corpus", "expanded", "ner", "squad"))
    def small(epochs: str = "1", dim: str = "8") -> list[str]:
        return ["--workers", "1", "--w2v-min-count", "1", "--epochs", epochs, "--dim", dim, "--workdir", str(here / "work")]

    train = ["--max-steps", "1", "--device", "cpu", "--workdir", str(here / "work")]
    out = ["--out", str(here / "out")]
    mixed = here / "mixed.tsv"
    mixed.write_text("a\tNN\tO\nb\tO\n")
    foo = here / "foo_labels.tsv"
    foo.write_text("".join(f"w{i}\t{'X-FOO' if i % 3 == 0 else 'O'}\n" for i in range(30)))
    empty_qa = here / "empty_qa.json"
    empty_qa.write_text('{"data": []}')
    broken_qa = here / "broken.json"
    broken_qa.write_text('{"data": [ {"paragraphs": ')
    no_tokenizer = here / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy2(data["model"] / name, no_tokenizer / name)
    truncated = shutil.copytree(data["expanded"], here / "truncated")
    (truncated / "model.safetensors").write_bytes((truncated / "model.safetensors").read_bytes()[:999])
    binary = here / "binary.txt"
    binary.write_bytes(bytes(range(256)) * 40)
    empty_file = here / "empty.txt"
    empty_file.write_text("")
    user = here / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("three years of work")
    lookalikes = here / "safe"
    (lookalikes / ".photos.old-1-0123abcd").mkdir(parents=True)
    (lookalikes / ".photos.old-1-0123abcd" / "img.txt").write_text("a photo")
    (lookalikes / ".notes.tmp-2-89abcdef").write_text("notes")
    (here / "elsewhere").mkdir()
    (here / "link").symlink_to(here / "elsewhere")
    (here / "userlink").symlink_to(user)
    run = str(data["run"])

    def edited(name: str, **config: object) -> str:
        folder = shutil.copytree(data["expanded"], here / name)
        document = json.loads((folder / "config.json").read_text())
        document.update(config)
        (folder / "config.json").write_text(json.dumps(document))
        return str(folder)

    gpt2, hidden0, heads5, unparseable = edited("gpt2", model_type="gpt2"), edited("hidden0", hidden_size=0), \
        edited("heads5", num_attention_heads=5), edited("unparseable")
    (Path(unparseable) / "config.json").write_text("{not json")
    prefixed = shutil.copytree(data["expanded"], here / "prefixed")
    from safetensors.torch import load_file, save_file

    weights = load_file(str(prefixed / "model.safetensors"))
    save_file({f"module.{k}": v for k, v in weights.items()}, str(prefixed / "model.safetensors"), metadata={"format": "pt"})
    (here / "out.checkpoint").mkdir()
    (here / "out.checkpoint" / "notes.txt").write_text("precious")
    (here / "real.tsv").write_text("the user's file")
    (here / "pred-link").symlink_to(here / "real.tsv")
    (here / "cmp").mkdir()
    (here / "cmp" / "compare.json").write_text('{"mine": true}')
    deep = here / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    sparse = here / "sparse.jsonl"
    sparse.write_text(json.dumps({"text": "the patients were treated"}) + "\n" + "".join(json.dumps({"title": f"t{i}"}) + "\n"
                                                                                         for i in range(200)))
    no_manifest = shutil.copytree(data["run"], here / "no-manifest")
    (no_manifest / "manifest.json").unlink()
    edited_run = shutil.copytree(data["run"], here / "edited-run")
    (edited_run / "metrics.json").write_text((edited_run / "metrics.json").read_text().replace('"pool": "mean"', '"pool": "general"'))
    compare = ["compare", "--task", "ner", "--train", ner, "--test", ner, "-m", f"base={m}", "-m", f"green={e}", "--epochs", "1",
               "--device", "cpu"]
    round4 = [
        # round 4 (issue 54)
        Probe("finetune --out X beside the user's X.checkpoint/", ["finetune", "--task", "ner", "--train", ner, "--model", e,
                                                                   *train, *out], OK,
              keep=["out.checkpoint/notes.txt"]),
        Probe("predict -o the user's symlink --force", ["predict", "-m", run, "--input", ner, "-o", str(here / "pred-link"), "--force"], OK,
              keep=["pred-link"]),
        Probe("compare --out the user's folder", [*compare, "--out", str(here / "cmp")], STAGE, keep=["cmp/compare.json"]),
        Probe("w2v --corpus http://user:password@host/", ["w2v", "-c", "http://bob:Hunter2SECRETpw@127.0.0.1:9/", "-m", m, *small()],
              BAD_INPUT, secret="Hunter2SECRETpw", expected_warning="retry"),
        Probe("w2v --corpus s3://KEY:SECRET/WITH/SLASH@bucket/", ["w2v", "-c", "s3://AKIAEXAMPLE:wJalr/XUtnFEMI/K7MDENG@bucket/", "-m", m,
                                                                   *small()], BAD_INPUT, secret="XUtnFEMI",
              env={"AWS_EC2_METADATA_DISABLED": "true"}),
        Probe("finetune a model_type gpt2", ["finetune", "--task", "ner", "--train", ner, "--model", gpt2, *train, *out], BAD_INPUT),
        Probe("finetune weights named module.*", ["finetune", "--task", "ner", "--train", ner, "--model", str(prefixed), *train,
                                                  *out], BAD_INPUT),
        Probe("adapt hidden_size 0", ["adapt", "-c", c, "-m", hidden0, *small()], BAD_INPUT),
        Probe("finetune 5 heads for hidden 32", ["finetune", "--task", "ner", "--train", ner, "--model", heads5, *train, *out], BAD_INPUT),
        Probe("adapt an unparseable config.json", ["adapt", "-c", c, "-m", unparseable, *small()], BAD_INPUT),
        Probe("w2v --epochs 99999999999999999999999", ["w2v", "-c", c, "-m", m, *small(epochs="99999999999999999999999")], USAGE),
        Probe("w2v --seed -1", ["w2v", "-c", c, "-m", m, *small(), "--seed", "-1"], USAGE),
        Probe("finetune --seed 4294967296", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--seed",
                                             "4294967296", *out], USAGE),
        Probe("compare --seeds -1", [*compare, "--seeds", "-1", "--out", str(here / "cmp2")], USAGE),
        Probe("finetune --lr nan", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--lr", "nan", *out], USAGE),
        Probe("finetune --weight-decay nan", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train,
                                              "--weight-decay", "nan", *out],
              USAGE),
        Probe("qa: JSON nested 100,000 deep", ["qa", "--model", str(data["qa_model"]), "--data", str(deep), "--device", "cpu",
                                               *out], BAD_INPUT),
        Probe("w2v: 200 of 201 JSON lines without the text field", ["w2v", "-c", str(sparse), "-m", m, *small()], BAD_INPUT),
        Probe("finetune --seeds ''", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--seeds", "", *out], USAGE),
        Probe("finetune --seeds 1,,2", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--seeds", "1,,2", *out], USAGE),
        Probe("finetune --seed 3 --seeds 1,2", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--seed", "3",
                                                "--seeds", "1,2", *out], USAGE),
        Probe("finetune --entity-type B-X", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train,
                                             "--entity-type", "B-X", *out],
              USAGE),
        Probe("w2v --no-vectors --source context", ["w2v", "-c", c, "-m", m, "--w2v-min-count", "1", "--no-vectors", "--source", "context",
                                                     "--workdir", str(here / "work")], USAGE),
        Probe("w2v --context-layer 99", ["w2v", "-c", c, "-m", m, "--w2v-min-count", "1", "--source", "context", "--context-layer", "99",
                                         "--workdir", str(here / "work")], USAGE),
        Probe("predict --header maybe", ["predict", "-m", run, "--input", ner, "--header", "maybe"], USAGE),
        Probe("compare --comparator the baseline", [*compare, "--comparator", "base", "--out", str(here / "cmp3")], USAGE),
        Probe("predict on a run whose manifest.json was deleted", ["predict", "-m", str(no_manifest), "--input", ner], STAGE),
        Probe("report on a run whose metrics.json was edited", ["report", str(edited_run)], STAGE),
        Probe("predict --header yes --header no", ["predict", "-m", run, "--input", ner, "--header", "yes", "--header", "no"], USAGE),
    ]
    return [*round4, *earlier_probes(data, here, locals())]


def earlier_probes(data: dict[str, Path], here: Path, made: dict[str, object]) -> list[Probe]:
    """The probes of the rounds before (issue 36)."""
    m, c, e, ner, squad = (str(data[k]) for k in ("model", "corpus", "expanded", "ner", "squad"))
    small, train, out = made["small"], made["train"], made["out"]
    assert callable(small) and isinstance(train, list) and isinstance(out, list)
    mixed, foo, empty_qa, broken_qa, no_tokenizer, truncated, binary, empty_file, user, lookalikes = (
        made[k] for k in ("mixed", "foo", "empty_qa", "broken_qa", "no_tokenizer", "truncated", "binary", "empty_file", "user",
                          "lookalikes"))
    assert isinstance(user, Path) and isinstance(lookalikes, Path)
    return [
        # options
        Probe("w2v --epochs 0", ["w2v", "-c", c, "-m", m, *small(epochs="0")], USAGE),
        Probe("w2v --dim -3", ["w2v", "-c", c, "-m", m, "--dim", "-3", "--workdir", str(here / "work")], USAGE),
        Probe("adapt --method nonsense", ["adapt", "-c", c, "-m", m, *small(), "--method", "nonsense"], USAGE),
        Probe("adapt --method identity --dim 7", ["adapt", "-c", c, "-m", m, *small(dim="7"), "--method", "identity"], USAGE),
        Probe("finetune --mix 2", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--mix", "2", *out], USAGE),
        Probe("finetune --pool bogus", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--pool", "bogus", *out], USAGE),
        Probe("finetune --task nonsense", ["finetune", "--task", "nonsense", "--train", ner, "--model", e, *train, *out], USAGE),
        Probe("finetune --seeds 1,1", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--seeds", "1,1", *out], USAGE),
        Probe("finetune --max-length 2", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--max-length", "2", *out],
              USAGE),
        Probe("finetune --max-length 3", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--max-length", "3", *out],
              USAGE),
        Probe("finetune --lr 0.5 --weight-decay 2", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train, "--lr", "0.5",
                                                     "--weight-decay", "2", *out], USAGE),
        Probe("pretrain --max-length 3", ["pretrain", "-c", c, "-m", m, *train, "--max-length", "3", *out], USAGE),
        Probe("qa --max-length 4", ["qa", "--model", str(data["qa_model"]), "--data", squad, "--device", "cpu", "--max-length",
                                    "4", *out], USAGE),
        Probe("w2v --text-field on a .txt corpus", ["w2v", "-c", c, "-m", m, *small(), "--text-field", "abstract"], USAGE),
        Probe("adapt --country DE after the command", ["adapt", "--country", "DE", "-c", c, "-m", m, *small()], USAGE),
        # corpora
        Probe("w2v on a missing corpus", ["w2v", "-c", str(here / "nope.txt"), "-m", m, *small()], BAD_INPUT),
        Probe("w2v on an empty corpus", ["w2v", "-c", str(empty_file), "-m", m, *small()], BAD_INPUT),
        Probe("w2v on a binary corpus", ["w2v", "-c", str(binary), "-m", m, *small()], BAD_INPUT),
        Probe("GREENADAPT_CORPORA=/nonexistent", ["w2v", "-c", c, "-m", m, *small()], OK, warning="GREENADAPT_CORPORA",
              env={"GREENADAPT_CORPORA": "/nonexistent"}),
        # models
        Probe("w2v -m a missing folder", ["w2v", "-c", c, "-m", str(here / "nomodel"), *small()], BAD_INPUT),
        Probe("w2v -m a folder without tokenizer", ["w2v", "-c", c, "-m", str(no_tokenizer), *small()], BAD_INPUT),
        Probe("adapt -m a folder without tokenizer", ["adapt", "-c", c, "-m", str(no_tokenizer), *small()], BAD_INPUT),
        Probe("finetune on a truncated model.safetensors", ["finetune", "--task", "ner", "--train", ner, "--model",
                                                            str(truncated), *train, *out],
              BAD_INPUT),
        Probe("pretrain on a truncated model.safetensors", ["pretrain", "-c", c, "-m", str(truncated), *train, *out], BAD_INPUT),
        Probe("w2v --source context on a truncated model", ["w2v", "-c", c, "-m", str(truncated), "--source", "context", "--w2v-min-count",
                                                            "1",
                                                             "--workdir", str(here / "work")], BAD_INPUT),
        # task files
        Probe("finetune: NER lines of 3 and 2 columns", ["finetune", "--task", "ner", "--train", str(mixed), "--model", e, *train,
                                                         *out], BAD_INPUT),
        Probe("finetune: NER label X-FOO", ["finetune", "--task", "ner", "--train", str(foo), "--model", e, *train, *out], BAD_INPUT),
        Probe("finetune: a missing train file", ["finetune", "--task", "ner", "--train", str(here / "none.tsv"), "--model",
                                                 e, *train, *out],
              BAD_INPUT),
        Probe("qa: {\"data\": []}", ["qa", "--model", str(data["qa_model"]), "--data", str(empty_qa), "--device", "cpu", *out], BAD_INPUT),
        Probe("qa: broken JSON", ["qa", "--model", str(data["qa_model"]), "--data", str(broken_qa), "--device", "cpu", *out], BAD_INPUT),
        # greenadapt folders
        Probe("info on a missing folder", ["info", str(here / "none")], STAGE),
        Probe("info on someone else's folder", ["info", str(user)], STAGE),
        Probe("report on a missing folder", ["report", str(here / "none")], STAGE),
        Probe("report on someone else's folder", ["report", str(user)], STAGE),
        Probe("predict -m a missing folder", ["predict", "-m", str(here / "none"), str(c)], STAGE),
        Probe("predict -m someone else's folder", ["predict", "-m", str(user), str(c)], STAGE),
        Probe("align --w2v someone else's folder", ["align", "--w2v", str(user)], STAGE),
        Probe("expand --align a missing folder", ["expand", "--align", str(here / "none")], STAGE),
        # data safety
        Probe("finetune --out the user's folder --force", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train,
                                                           "--out", str(user),
                                                          "--force"], STAGE, keep=["mine/thesis.tex"]),
        Probe("w2v --out the user's folder", ["w2v", "-c", c, "-m", m, *small(), "--out", str(user)], STAGE, keep=["mine/thesis.tex"]),
        Probe("adapt --out beside look-alike temporaries", ["adapt", "-c", c, "-m", m, *small(), "--out", str(lookalikes / "newout")], OK,
              keep=["safe/.photos.old-1-0123abcd/img.txt", "safe/.notes.tmp-2-89abcdef"]),
        Probe("w2v --out the user's symlink to an empty folder", ["w2v", "-c", c, "-m", m, *small(), "--out", str(here / "link")],
              OK, keep=["link"]),
        Probe("finetune --out the user's symlink to their folder", ["finetune", "--task", "ner", "--train", ner, "--model", e, *train,
                                                                    "--out", str(here / "userlink")], STAGE,
              keep=["userlink", "mine/thesis.tex"]),
    ]


def classify(probe: Probe, code: int, err: str, out: str = "", names: tuple[str, ...] = ()) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()
             and not (probe.expected_warning and probe.expected_warning in line and not line.startswith("error"))]
    if probe.secret is not None and any(probe.secret in text for text in (err, out, *names)):
        return "leaked a secret"
    if "Traceback" in err:
        return "traceback"
    if probe.expect == OK:
        if code != 0:
            return "wrong code"
        if probe.warning is not None and not any(probe.warning in line for line in lines):
            return "silently accepted"
        return "one-line"
    if code == 0:
        return "silently accepted"
    if len(lines) != 1:
        return "traceback"
    return "one-line" if code == probe.expect else "wrong code"


def snapshot(folder: Path, paths: list[str]) -> dict[str, bytes | str]:
    seen: dict[str, bytes | str] = {}
    for rel in paths:
        path = folder / rel
        seen[rel] = "link->" + os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "missing"
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("-k", default="", help="only probes whose name contains this")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a probe may run before it counts as a hang")
    parser.add_argument("--old", type=Path, default=None,
                        help="probe the greenadapt of this checkout instead (e.g. a worktree of an older commit: the 'before' row)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="greenadapt-probes-") as scratch:
        root = Path(scratch)
        data = build(root / "data")
        for index in range(len(probes(data, _fresh(root / "count")))):
            here = _fresh(root / f"probe-{index}")
            probe = probes(data, here)[index]  # the user's files, made afresh for each probe
            if args.k not in probe.name:
                continue
            before = snapshot(here, probe.keep)
            env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", GREENADAPT_CODECARBON="0", **probe.env)
            env.pop("GREENADAPT_DEBUG", None)
            if args.old is not None:
                env["PYTHONPATH"] = str(args.old.resolve())
            quiet = [] if probe.warning else ["--quiet"]
            try:
                done = subprocess.run([sys.executable, "-m", "greenadapt", *probe.args, *quiet], capture_output=True, text=True, env=env,
                                      input=probe.stdin, timeout=args.timeout, cwd=here)
            except subprocess.TimeoutExpired as expired:
                done = subprocess.CompletedProcess(expired.cmd, -9, _text(expired.stdout), _text(expired.stderr) + "\n(hung: killed)")
            names = tuple(p.name for p in here.rglob("*"))
            verdict = "hang" if done.returncode == -9 else classify(probe, done.returncode, done.stderr, done.stdout, names)
            safe = snapshot(here, probe.keep) == before
            rows.append({"probe": probe.name, "expect": probe.expect, "exit": done.returncode, "verdict": verdict,
                         "data_safe": safe if probe.keep else None, "stderr": done.stderr.strip().splitlines()[-1:] or [""]})
    counts = Counter(row["verdict"] for row in rows)
    unsafe = sum(row["data_safe"] is False for row in rows)
    summary = {"tried": len(rows), **{k: counts.get(k, 0) for k in ("one-line", "wrong code", "traceback", "silently accepted",
                                                                     "leaked a secret", "hang")},
               "data_safety_probes": sum(row["data_safe"] is not None for row in rows), "data_safety_failures": unsafe}
    if args.json:
        print(json.dumps({"summary": summary, "probes": rows}, indent=1))
    else:
        for row in rows:
            mark = "" if row["verdict"] == "one-line" and row["data_safe"] is not False else "  <--"
            print(f"{row['verdict']:<18} exit {row['exit']:>3} (want {row['expect']})  {row['probe']}{mark}")
            if mark:
                print(f"{'':18}   {row['stderr'][0][:200]}")
        print(json.dumps(summary))
    return 0 if counts.get("one-line", 0) == len(rows) and not unsafe else 1


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


if __name__ == "__main__":
    sys.exit(main())
