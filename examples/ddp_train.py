"""A short data-parallel training run that survives a lost node: it checkpoints to shared storage and resumes.

Start it on every node of a cluster with torchrun: `gpufleet run ENV --torchrun --workdir examples -- ddp_train.py
--checkpoint-dir /fsx/data/checkpoints/demo` (the shared file system's data folder, the one exported to S3, written
out: the unit does not expand variables in the command; docs/guides/elastic-training.md walks through it). When a
spot node goes, torchrun on the other nodes restarts the workers (the script starts again and resumes from the last
checkpoint); when the replacement node joins, torchrun restarts them once more with it. The model is a linear
regression on generated data, so the loss falls step by step and a resume shows as the loss going on from where it
was rather than starting high again.

Checkpoints: one folder per saved step (DIR/step-00000040; the format: "Torch versions" below), and DIR/LATEST
naming the last complete one, replaced atomically after the save has finished on every rank, so a node lost in the
middle of a save leaves the previous checkpoint in force. Rank 0 then deletes older folders, keeping --keep in all.

Torch versions. On torch 2.x the checkpoint is written with torch.distributed.checkpoint (added in 2.0:
unconfirmed): every rank takes part and writes its own part, which is what a sharded model (FSDP) needs. Later
releases (2.2: unconfirmed) added save/load and deprecated save_state_dict/load_state_dict ("'save_state_dict' is
deprecated and will be removed in future versions. Please use 'save' instead.",
torch/distributed/checkpoint/state_dict_saver.py); the script takes save/load where they exist and passes the
storage writer/reader by keyword, which 2.0 and later accept. torch 1.13 has the same API under a private name,
torch.distributed._shard.checkpoint (Debian's python3-torch 1.13.1:
torch/distributed/_shard/checkpoint/__init__.py), but Debian pairs that torch with Python 3.11, on which the module
cannot be imported: its metadata dataclasses have dataclass defaults that 3.11 rejects ("ValueError: mutable default
<class '...TensorProperties'> for field tensor_properties is not allowed"; Python 3.11 rejects every unhashable
default, docs.python.org/3.11/library/dataclasses.html). So where torch.distributed.checkpoint is missing, rank 0
saves the same state with torch.save into the same folder layout, and every rank loads it: enough for data parallel,
where every rank holds the whole model. The start line says which format is in use. The state is a flat dict of
tensors (the step too). The optimizer is plain SGD, which keeps no state of its own; a stateful optimizer's state
belongs in the checkpoint too (torch.distributed.checkpoint.state_dict.get_state_dict on pytorch main; the first
release with it: unconfirmed).

On request. On a gpufleet node the checkpoint hook (docs/guides/interruptions.md) asks the training processes to
save now: a spot interruption notice on any node of the environment reaches every node. This script keeps that
contract when the request folder exists (GPUFLEET_CHECKPOINT_REQUESTS, default /run/gpufleet/checkpoint): each rank
registers its process id, SIGUSR1 marks a request, the ranks agree at the next step (one all_reduce) and save, and
each acknowledges with the request's id.

Collective timeout. A node lost without a word (a spot interruption, a crash) leaves the ranks on the other nodes
waiting in their next collective; only when it times out do they fail, and torchrun restarts them without that node.
So the timeout given to init_process_group bounds how long the survivors stand still, and this script sets it:
--collective-timeout SECONDS, by default DDP_TRAIN_COLLECTIVE_TIMEOUT from the environment, else 300 (5 minutes).
PyTorch's own default is 10 minutes for NCCL (since pytorch/pytorch#110947, "Change ProcessGroupNCCL default timeout to
10 min"; 30 minutes before it) and 30 minutes for Gloo (torch/distributed/constants.py default_pg_timeout); NCCL
enforces it through its watchdog, which TORCH_NCCL_ASYNC_ERROR_HANDLING turns on (the default in torch 2.x:
unconfirmed). Keep it above the longest wait a healthy run has: a checkpoint save, which every rank waits for at the
next collective, or a first step that compiles; docs/guides/elastic-training.md says how to choose it.

Output: rank 0 prints one JSON object a line: {"event": "start", ...} when the workers start (resumed_from is the
step of the checkpoint it resumed from, or null; collective_timeout the timeout in seconds), {"event": "step", ...}
per step, {"event": "checkpoint", ...} per save, {"event": "done", ...} at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

try:
    import torch.distributed.checkpoint as dcp
except ImportError:  # torch < 2.0: see "Torch versions" above
    dcp = None

FEATURES = 16
LATEST = "LATEST"
REQUESTS = Path(os.environ.get("GPUFLEET_CHECKPOINT_REQUESTS", "/run/gpufleet/checkpoint"))
# --collective-timeout's default, and the environment variable that changes it (see "Collective timeout" above).
COLLECTIVE_TIMEOUT_SECONDS = 300.0
COLLECTIVE_TIMEOUT_VARIABLE = "DDP_TRAIN_COLLECTIVE_TIMEOUT"


CHECKPOINT_FORMAT = "torch.distributed.checkpoint" if dcp else "torch.save"
SAVED_STATE = "state.pt"  # the file of the torch.save format


def save(state: dict, folder: Path) -> None:
    if dcp is None:
        if dist.get_rank() == 0:
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(state, folder / SAVED_STATE)
        dist.barrier()  # the folder is complete before any rank goes on
        return
    writer = dcp.FileSystemWriter(str(folder))
    if hasattr(dcp, "save"):
        dcp.save(state, storage_writer=writer)
    else:
        dcp.save_state_dict(state, storage_writer=writer)


def load(state: dict, folder: Path) -> None:
    """Loads into the tensors of state, in place."""
    if dcp is None:
        for key, value in torch.load(folder / SAVED_STATE, map_location="cpu").items():
            state[key].copy_(value)
        return
    reader = dcp.FileSystemReader(str(folder))
    if hasattr(dcp, "load"):
        dcp.load(state, storage_reader=reader)
    else:
        dcp.load_state_dict(state, storage_reader=reader)


def latest_checkpoint(directory: Path) -> Path | None:
    """The last complete checkpoint, as rank 0 reads it: every rank must resume from the same one."""
    found = [None]
    if dist.get_rank() == 0 and (directory / LATEST).exists():
        found = [(directory / LATEST).read_text().strip()]
    dist.broadcast_object_list(found, src=0)
    return directory / found[0] if found[0] else None


def batch(step: int, rank: int, batch_size: int, true_weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step * 1_000_003 + rank)
    inputs = torch.randn(batch_size, FEATURES, generator=generator)
    return inputs, inputs @ true_weight + 0.01 * torch.randn(batch_size, 1, generator=generator)


class CheckpointRequests:
    """The node's checkpoint hook contract (docs/guides/interruptions.md): register, hear SIGUSR1, acknowledge."""

    def __init__(self, folder: Path, name: str, device: torch.device) -> None:
        self.folder = folder
        self.name = name
        self.device = device
        self.heard = False
        self.enabled = folder.is_dir()
        if self.enabled:
            signal.signal(signal.SIGUSR1, self._hear)  # before registering: SIGUSR1's default ends the process
            (folder / f"{name}.pid").write_text(str(os.getpid()))

    def _hear(self, signum: int, frame: object) -> None:
        self.heard = True

    def agreed(self) -> bool:
        """Whether any rank heard a request: all ranks then save at the same step."""
        flag = torch.tensor([int(self.heard)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def acknowledge(self) -> str | None:
        """Acknowledge, after the save, the request this rank heard. The agreement is cluster-wide but a request is one
        node's (its hook writes the request file on that node, then signals that node's processes): a rank whose node
        asked nothing saved with the others and has nothing to acknowledge, and no request file to read."""
        heard, self.heard = self.heard, False
        if not (self.enabled and heard):
            return None
        fields = dict(line.split("=", 1) for line in (self.folder / "request").read_text().splitlines())
        (self.folder / f"{self.name}.done").write_text(fields["id"])
        return fields["id"]


def seconds(text: str) -> float:
    """A timeout in seconds: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: '{text}'") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got '{text}'")
    return value


def report(**fields: object) -> None:
    if dist.get_rank() == 0:
        print(json.dumps(fields), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        required=True,
        help="shared storage: every node reads it (the data folder, e.g. /fsx/data/..., to outlive the file system)",
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--keep", type=int, default=3, help="checkpoints kept (the newest); at least 1")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause after each step (a longer demo)")
    parser.add_argument(
        "--collective-timeout",
        type=seconds,
        default=os.environ.get(COLLECTIVE_TIMEOUT_VARIABLE, str(COLLECTIVE_TIMEOUT_SECONDS)),
        metavar="SECONDS",
        help=f"how long a collective waits for the other ranks before it fails, so that torchrun restarts the workers "
        f"without a lost node (default: ${COLLECTIVE_TIMEOUT_VARIABLE}, else {COLLECTIVE_TIMEOUT_SECONDS:g})",
    )
    args = parser.parse_args()
    if args.keep < 1:
        parser.error(f"--keep must be at least 1, got {args.keep}")

    use_gpu = torch.cuda.is_available()
    # One GPU per process, by its rank on the node (torchrun sets LOCAL_RANK); NCCL reduces only GPU tensors.
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_gpu else "gloo", timeout=dt.timedelta(seconds=args.collective_timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    true_weight = torch.randn(FEATURES, 1)
    model = torch.nn.Linear(FEATURES, 1).to(device)
    parameters = model.state_dict()
    state = {"weight": parameters["weight"], "bias": parameters["bias"], "step": torch.zeros(1, dtype=torch.int64)}

    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(args.checkpoint_dir)
    if checkpoint is not None:
        load(state, checkpoint)
        model.load_state_dict({"weight": state["weight"], "bias": state["bias"]})
    start = int(state["step"].item())
    report(
        event="start",
        resumed_from=start if checkpoint else None,
        world_size=world_size,
        format=CHECKPOINT_FORMAT,
        collective_timeout=args.collective_timeout,
    )

    ddp = DistributedDataParallel(model, device_ids=[device.index] if use_gpu else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.learning_rate)
    requests = CheckpointRequests(REQUESTS, f"ddp-train-rank{rank}", device)

    def checkpoint_at(step: int, request: str | None) -> None:
        state["step"][0] = step
        folder = args.checkpoint_dir / f"step-{step:08d}"
        save(state, folder)
        if rank == 0:
            pointer = args.checkpoint_dir / f".{LATEST}.{os.getpid()}"
            pointer.write_text(folder.name)
            os.replace(pointer, args.checkpoint_dir / LATEST)
            # Only folders older than this one: a newer one is a save cut short before a restart, to be overwritten.
            older = sorted(other for other in args.checkpoint_dir.glob("step-*") if other.name < folder.name)
            for old in older[: max(0, len(older) - (args.keep - 1))]:
                shutil.rmtree(old)
        report(event="checkpoint", step=step, folder=folder.name, request=request)

    for step in range(start, args.steps):
        inputs, targets = batch(step, rank, args.batch_size, true_weight)
        loss = torch.nn.functional.mse_loss(ddp(inputs.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        report(event="step", step=step + 1, loss=mean_loss.item() / world_size, world_size=world_size)
        if requests.agreed():
            checkpoint_at(step + 1, requests.acknowledge())
        elif (step + 1) % args.checkpoint_every == 0:
            checkpoint_at(step + 1, None)
        time.sleep(args.step_seconds)
    report(event="done", step=args.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
