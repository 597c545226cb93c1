"""Fake EFA installer trees under a node root, for the scripts that find libfabric and Open MPI on it.

The EFA installer puts both libraries in lib on Ubuntu and in lib64 on Amazon Linux 2 (EC2 user guide,
efa-start-nccl-base: LD_LIBRARY_PATH per OS; aws-samples/aws-efa-nccl-baseami-pipeline nvidia-efa-ml-al2.yml and
nvidia-efa-ml-ubuntu2004.yml write /opt/amazon/{openmpi,efa}/lib64 and .../lib respectively)."""

from pathlib import Path

LIBRARY_DIR = {"ubuntu": "lib", "al2": "lib64"}
# A library as installed: the versioned file and the unversioned link to it.
LIBRARIES = {"efa": ("libfabric.so.1", "libfabric.so"), "openmpi": ("libmpi.so.40", "libmpi.so")}


def install_efa(root: Path, layout: str) -> str:
    """Installs libfabric and Open MPI under root in the layout ("ubuntu" or "al2"); returns their library path as
    the node sees it (without root)."""
    directories = []
    for package, (library, link) in LIBRARIES.items():
        directory = f"/opt/amazon/{package}/{LIBRARY_DIR[layout]}"
        (root / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / directory.lstrip("/") / library).write_text("")
        (root / directory.lstrip("/") / link).symlink_to(library)
        directories.append(directory)
    return ":".join(directories)
