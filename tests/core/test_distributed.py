"""Gated training under fairseq's data-parallel training on CPU: 2 processes, gloo."""
import json
import os
import socket
import subprocess

from .helpers import BIN_DIR, TINY_SIZES, USER_DIR, run_cli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_worker_train(train, tmp_path) -> subprocess.CompletedProcess:
    """fairseq-train `train` (a command line) as 2 gloo workers of one thread each."""
    # torchrun sets RANK per process; fairseq takes it through --distributed-rank.
    command = " ".join(f"'{a}'" for a in train) + ' --distributed-rank "$RANK"'
    return subprocess.run(
        [os.path.join(BIN_DIR, "torchrun"), "--nproc_per_node", "2", "--master_port", str(free_port()),
         "--no-python", "bash", "-c", command],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1", PATH=BIN_DIR + os.pathsep + os.environ["PATH"]))


DISTRIBUTED = ["--cpu", "--num-workers", "0", "--no-progress-bar", "--no-epoch-checkpoints",
               "--distributed-world-size", "2", "--distributed-init-method", "env://",
               "--distributed-no-spawn", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]


def test_two_worker_gated_training_keeps_gates_identical(toy_data_bin, tmp_path):
    trace = tmp_path / "trace.{rank}.jsonl"
    train = [os.path.join(BIN_DIR, "fairseq-train"), str(toy_data_bin.data_bin), "--user-dir", USER_DIR,
             "--task", "translation_heads", "-s", "src", "-t", "tgt", "--arch", "gated_transformer",
             *TINY_SIZES, "--gated-attention", "enc-self,dec-self,enc-dec",
             "--criterion", "label_smoothed_cross_entropy_l0", "--l0-lambda", "1.0",
             "--optimizer", "gate_adam", "--lr", "1e-3", "--gate-lr-scale", "50",
             "--max-tokens", "1000", "--max-update", "12", "--save-dir", str(tmp_path / "ckpt"),
             "--gate-trace", str(trace), "--gate-trace-interval", "4", "--seed", "1", *DISTRIBUTED]
    process = two_worker_train(train, tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "distributed init (rank 1)" in process.stdout + process.stderr
    records = {}
    for rank in (0, 1):
        lines = (tmp_path / f"trace.{rank}.jsonl").read_text().splitlines()
        records[rank] = [json.loads(line) for line in lines]
    assert [r["update"] for r in records[0]] == [r["update"] for r in records[1]] == [0, 4, 8]
    last = [[h["log_alpha"] for h in records[rank][-1]["heads"]] for rank in (0, 1)]
    first = [h["log_alpha"] for h in records[0][0]["heads"]]
    assert last[0] == last[1]  # bit-identical across workers
    assert last[0] != first    # and they did train
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_two_workers_fine_tune_from_a_plain_checkpoint(toy_data_bin, tmp_path):
    """The recipes' L0 fine-tune under data parallelism: rank 0 loads the plain checkpoint and
    broadcasts it to rank 1 as a pickle (fairseq.distributed.utils.broadcast_object), which
    torch >= 2.6's weights_only default refuses unless the user dir lifts it (compat.py)."""
    common = [str(toy_data_bin.data_bin), "--user-dir", USER_DIR, "--task", "translation_heads",
              "-s", "src", "-t", "tgt", *TINY_SIZES, "--max-tokens", "1000", "--seed", "1",
              "--lr", "1e-3"]
    plain = run_cli(["fairseq-train", *common, "--arch", "transformer", "--optimizer", "adam",
                     "--max-update", "2", "--save-dir", str(tmp_path / "plain"), "--cpu",
                     "--num-workers", "0", "--no-progress-bar", "--no-epoch-checkpoints"])
    assert plain.returncode == 0, plain.stderr[-3000:]
    train = [os.path.join(BIN_DIR, "fairseq-train"), *common, "--arch", "gated_transformer",
             "--gated-attention", "enc-self", "--finetune-from-model",
             str(tmp_path / "plain" / "checkpoint_last.pt"),
             "--criterion", "label_smoothed_cross_entropy_l0", "--l0-lambda", "1.0",
             "--optimizer", "gate_adam", "--gate-lr-scale", "50", "--max-update", "4",
             "--save-dir", str(tmp_path / "gated"), *DISTRIBUTED]
    process = two_worker_train(train, tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "loaded checkpoint" in (process.stdout + process.stderr).lower()
    assert (tmp_path / "gated" / "checkpoint_last.pt").exists()
