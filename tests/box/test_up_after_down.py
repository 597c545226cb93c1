"""`gpufleet down --keep-data`, then `gpufleet up`: the checkpoints on shared storage are found again (run after every
other box test, as the name sorts: it takes the whole cluster down and brings a new one up).

The file system is the box's shared folder and FSx's data repository association and export task are the emulator's
(tests/box/fsx_emulation.py: the files and their POSIX metadata to and from moto's S3); `cdk deploy` and `cdk destroy`
go to the box through the CDK CLI's stand-in. What is real: gpufleet's commands, the nodes, which write the
checkpoint as the cluster user and read it after the new boot, and every step between them."""

from __future__ import annotations

import hashlib

from tests.box.conftest import GpufleetRun

USER = "gpufleet"
CHECKPOINT = "/fsx/data/checkpoints/keep/step-000100.pt"


def test_down_keeping_the_data_then_up_finds_the_checkpoint_again(box_cluster):
    cluster = box_cluster.cluster
    head = box_cluster.head
    payload = "".join(f"{index:08d}" for index in range(4096))
    written = head.sh(f"mkdir -p $(dirname {CHECKPOINT}) && printf %s {payload} > {CHECKPOINT}", user=USER)
    assert written.returncode == 0, written.stderr
    digest = hashlib.sha256(payload.encode()).hexdigest()

    down = GpufleetRun(cluster, "down", cluster.env.name, "--keep-data").run()

    assert down.returncode == 0, "\n".join(down.lines)
    assert not (cluster.box.shared_dir / "data").exists(), "the file system was deleted with its data"
    s3 = cluster.aws.client("s3")
    bucket, prefix = cluster.env.data_repository_location
    keys = {item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/data/")["Contents"]}
    assert f"{prefix}/data/checkpoints/keep/step-000100.pt" in keys
    assert not any(head.alive() for head in (box_cluster.head, box_cluster.spot))

    up = GpufleetRun(cluster, "up", cluster.env.name, "--skip-acceptance").run()

    assert up.returncode == 0, "\n".join(up.lines)
    new_head = up.nodes[0]
    read = new_head.sh(f"sha256sum {CHECKPOINT} && stat -c '%U %a' {CHECKPOINT}", user=USER)
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == [f"{digest}  {CHECKPOINT}", f"{USER} 644"]
    # The cluster user can go on writing next to it.
    assert new_head.sh(f"touch $(dirname {CHECKPOINT})/step-000200.pt", user=USER).returncode == 0
