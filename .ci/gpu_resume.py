"""`scaling train` on a GPU, preempted and resumed (.ci/gpu's `resume` step).

Trains one run twice from the same config: once straight through, once stopped by SLURM's
preemption signal (SIGUSR1) after its first checkpoint and relaunched with the same command. Checks
what a GPU run must do (exit 75 with a checkpoint and no result.json when preempted, exit 0 and a
completed result.json after the relaunch) and prints both runs' records side by side: on a GPU the
two need not agree to the bit (cuBLAS and atomics), so their difference is reported, not asserted.

    python .ci/gpu_resume.py OUT_DIR [scaling train arguments]
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

PREEMPTED = 75  # scaling.train.PREEMPTED_EXIT_CODE (not imported: this script must not need torch to fail clearly)


def train(args: list[str], run_dir: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "scaling.cli", "train", *args, "--out", str(run_dir), "--no-progress"]
    print("$", " ".join(command), flush=True)
    return subprocess.Popen(command)


def wait_for_checkpoint(proc: subprocess.Popen, run_dir: Path, timeout_s: float = 540) -> None:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + timeout_s
    while not ckpt.exists():
        if proc.poll() is not None:
            sys.exit(f"the run ended (exit {proc.returncode}) before its first checkpoint")
        if time.time() > deadline:
            proc.kill()
            sys.exit(f"no checkpoint within {timeout_s:.0f} s")
        time.sleep(0.05)


def main() -> int:
    out, args = Path(sys.argv[1]), sys.argv[2:]
    straight, stopped = out / "straight", out / "preempted"
    start = time.time()
    if train(args, straight).wait() != 0:
        sys.exit("the uninterrupted run failed")
    print(f"uninterrupted run: {time.time() - start:.0f} s", flush=True)

    proc = train(args, stopped)
    wait_for_checkpoint(proc, stopped)
    proc.send_signal(signal.SIGUSR1)
    if (code := proc.wait()) != PREEMPTED:
        sys.exit(f"preempted run exited {code}, not {PREEMPTED}")
    if (stopped / "result.json").exists():
        sys.exit("a preempted run wrote result.json")
    print("preempted: exit 75, checkpoint kept, no result.json", flush=True)
    if train(args, stopped).wait() != 0:
        sys.exit("the relaunch failed")

    a, b = (json.loads((d / "result.json").read_text()) for d in (straight, stopped))
    if b["status"] != "completed" or a["run_id"] != b["run_id"]:
        sys.exit(f"relaunch ended {b['status']} (run ids {a['run_id']}, {b['run_id']})")
    for key in ("status", "tokens", "epochs", "val_loss", "val_bpb", "tokens_per_s", "mfu", "wall_s"):
        print(f"{key:>13}: uninterrupted {a.get(key)!s:>22}   preempted + resumed {b.get(key)!s:>22}")
    print(f"val_loss difference: {b['val_loss'] - a['val_loss']:+.3e} nats", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
