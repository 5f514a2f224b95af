"""A process that trained under torchrun exits cleanly (issue 33).

Gloo's worker threads drop a finished collective's tensors a moment after the
caller's wait returns. If the caller had dropped its last Python reference by
then, the worker frees the tensor's Python object, which needs the GIL; during
interpreter finalization that thread is ended inside a C++ destructor and the
whole process dies of SIGABRT ("terminate called without an active exception")
after a run that had finished. Seen in 3 of 10 isolated runs of the two-rank
pretrain resume test. The invariant pinned here: when a ``DistContext``
collective returns, every tensor the backend still holds is one the context
keeps alive, and after ``close()`` the backend holds none the context let go of.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import run_ranks

RANK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from greenadapt.compute.distributed import init_distributed

    ctx = init_distributed("cpu")
    held_at_return = unprotected = 0
    handed = []

    def check(*tensors):
        global held_at_return, unprotected
        kept = {id(t) for t, _ in ctx._handed_over}
        for t in tensors:
            if t._use_count() > 1:  # the backend still holds it
                held_at_return += 1
                unprotected += id(t) not in kept
        handed.extend(tensors)

    for i in range(150):
        t = torch.tensor([float(i)])
        ctx.all_reduce_sum(t)
        check(t)
        assert t.item() == 2 * i
        assert ctx.broadcast_int(i + ctx.rank) == i
    for i in range(20):
        got = ctx.all_gather_json({"rank": ctx.rank, "i": i})
        assert got == [{"rank": 0, "i": i}, {"rank": 1, "i": i}], got
    ctx.close()
    still_held = sum(t._use_count() > 1 for t in handed)
    print(json.dumps({"held_at_return": held_at_return, "unprotected": unprotected, "still_held_after_close": still_held}))
    """
)


def test_collectives_keep_their_tensors_until_the_backend_lets_go(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    for proc in run_ranks(script):
        assert proc.returncode == 0, proc.stderr[-3000:]
        counts = json.loads(proc.stdout.strip().splitlines()[-1])
        # Gloo usually still holds about half of the tensors when the wait returns (0 in one run of 30 under load:
        # the deterministic test below pins the mechanism whatever the timing).
        assert counts["unprotected"] == 0, counts
        assert counts["still_held_after_close"] == 0, counts


REJOIN_SCRIPT = textwrap.dedent(
    """
    import json, time
    import torch
    from greenadapt.compute.distributed import init_distributed

    sums = []
    for run in range(3):  # three runs in one process, as a script under torchrun calling finetune three times
        ctx = init_distributed("cpu")
        t = torch.tensor([float(run + ctx.rank)])
        ctx.all_reduce_sum(t)
        sums.append(t.item())
        if ctx.rank == 0:
            time.sleep(1.0)  # rank 0 ends its run late: rank 1 is already starting the next one
        ctx.close()
    print(json.dumps(sums))
    """
)


def test_runs_one_after_another_in_one_process_share_the_group_however_late_a_rank_ends(tmp_path: Path) -> None:
    """Each run used to leave the group at its end and the next to join again on the same MASTER_PORT: rank 1, there
    first, reached the store rank 0 had not yet torn down, and both waited forever (every time, with rank 0 late)."""
    script = tmp_path / "rejoin.py"
    script.write_text(REJOIN_SCRIPT)
    for proc in run_ranks(script, timeout=60):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1.0, 3.0, 5.0]


class _SlowBackend:
    """A backend that keeps a C++ reference to each tensor of a collective and lets go from another thread later.

    A view holds its base tensor from C++, as gloo's work does, so the tensor's use count says
    who holds it exactly as it does under gloo; the release comes when ``release_after`` has passed,
    or, with ``release_after=None``, once the test sets ``let_go`` (no race with a loaded machine).
    """

    def __init__(self, release_after: float | None) -> None:
        self.release_after = release_after
        self.let_go = threading.Event()
        self.threads: list[threading.Thread] = []

    def collective(self, tensor: torch.Tensor) -> None:
        holder = [tensor.view(-1)]

        def release() -> None:
            if self.release_after is None:
                self.let_go.wait()
            else:
                time.sleep(self.release_after)
            holder.clear()

        thread = threading.Thread(target=release, daemon=True)
        thread.start()
        self.threads.append(thread)


def test_the_context_holds_what_the_backend_holds_and_lets_go_only_after_it() -> None:
    from greenadapt.compute.distributed import DistContext

    ctx = DistContext(world=2)
    backend = _SlowBackend(release_after=None)
    tensor = torch.ones(1)
    ctx._collective(lambda: backend.collective(tensor), tensor)
    assert tensor._use_count() == 2  # the backend's reference, as gloo's just after the caller's wait returns
    assert [t for t, _ in ctx._handed_over] == [tensor]  # so the context keeps it: the caller may drop its own
    threading.Timer(0.3, backend.let_go.set).start()  # the backend lets go later, from its own thread
    ctx.close()  # waits for the backend (up to 5 s)
    assert tensor._use_count() == 1 and ctx._handed_over == []  # the backend's last reference went before close returned


def test_a_tensor_the_backend_never_lets_go_is_never_freed() -> None:
    """Past the wait, the context keeps one reference for the process's lifetime: no backend thread frees it at exit."""
    from greenadapt.compute.distributed import DistContext

    ctx = DistContext(world=2)
    backend = _SlowBackend(release_after=60)
    tensor = torch.ones(1)
    ctx._collective(lambda: backend.collective(tensor), tensor)
    references = sys.getrefcount(tensor)
    ctx._release_handed_over(wait_s=0.05)
    assert ctx._handed_over == [] and sys.getrefcount(tensor) == references  # the list's reference became the kept one


def test_tensors_the_backend_released_are_not_kept() -> None:
    from greenadapt.compute.distributed import DistContext

    ctx = DistContext(world=2)
    backend = _SlowBackend(release_after=0.0)
    first = torch.ones(1)
    ctx._collective(lambda: backend.collective(first), first)
    backend.threads[-1].join()
    second = torch.ones(1)
    ctx._collective(lambda: None, second)  # a collective whose backend held nothing
    assert ctx._handed_over == []  # the first was pruned once released; the second was never held


RUN_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    kind, model, data, out = sys.argv[1:5]
    if kind == "pretrain":
        from greenadapt import pretrain

        pretrain(**dict(
            corpus=[data], model=model, out=Path(out), workdir=Path(out).parent / "work", max_length=24, heldout=4, workers=1,
            device="cpu", **dict(batch_size=8, max_steps=6, lr=3e-3, seed=5), save_every=3,
        ))
    else:
        from greenadapt import finetune

        finetune(**dict(
            task="ner", train=Path(data), model=model, out=Path(out), device="cpu", seeds=[5],
            **dict(batch_size=8, lr=3e-3, epochs=1, max_steps=6), save_every=3,
        ))
    """
)

# Per runner and suite run. The code before the fix aborted in about 1 launch of 14 (either rank): the suite's two a run
# are a smoke check (the mechanism is pinned deterministically above); the hunt is `make loop-tests
# TESTS=tests/test_distributed_exit.py N=10`, twenty launches a runner.
LAUNCHES = 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pretrain", "finetune"])
def test_two_rank_runs_through_the_python_api_always_exit_cleanly(tmp_path: Path, kind: str) -> None:
    from conftest import build_tiny_bert
    from finetune_helpers import build_tiny_expanded, write_ner_file

    if kind == "pretrain":
        model = build_tiny_bert(tmp_path / "model")
        data = tmp_path / "corpus.txt"
        words = "the patients were treated with the protein and the gene expression of cancer cells was increased".split()
        data.write_text("\n".join(" ".join(words[i % 9 :] + words[: i % 9]) for i in range(80)) + "\n")
    else:
        model = build_tiny_expanded(tmp_path / "model")
        data = write_ner_file(tmp_path / "train.tsv", 40, seed=1)
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    for launch in range(LAUNCHES):
        out = tmp_path / f"out-{launch}"
        for rank, proc in enumerate(run_ranks(script, kind, str(model), str(data), str(out))):
            assert proc.returncode == 0, f"launch {launch}, rank {rank}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        assert (out / "model.safetensors").is_file()


def test_a_rank_waiting_for_one_that_never_joins_stops_on_sigterm(tmp_path: Path) -> None:
    """torchrun stops the other ranks with SIGTERM when one fails before joining (rank 1 refused on a one-GPU machine).

    Joining blocks in C++, where Python cannot run the CLI's signal handler: rank 0 ignored the SIGTERM until torchrun's
    SIGKILL 30 s later (alone, it would wait out the group's 30-minute timeout). Rank 0 is started here without its
    partner; once it serves the group's store it is inside the join, and SIGTERM must end it as a stopped run.
    """
    from conftest import HANG_S, build_tiny_bert, free_port

    model = build_tiny_bert(tmp_path / "model")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the patients were treated with protein {i} and the gene" for i in range(40)) + "\n")
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")
    command = [sys.executable, "-m", "greenadapt", "pretrain", "--corpus", str(corpus), "--model", str(model), "--max-steps", "2",
               "--batch-size", "8", "--max-length", "24", "--heldout", "8", "--device", "cpu", "--workdir", str(tmp_path / "w"),
               "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG_S
        while not _listening(port):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "rank 0 never started the group's store"
            time.sleep(0.1)
        time.sleep(0.5)  # into the wait for rank 1
        proc.terminate()
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    assert "terminated by SIGTERM" in err and "Traceback" not in err, err[-3000:]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
