"""gpufleet: EFA GPU training clusters on AWS, their images and the tools to operate them.

Where gpufleet finds its data: inside the package, in gpufleet/data/, located with importlib.resources. In the
repository gpufleet/data/ami and gpufleet/data/scripts are symlinks to the top-level ami/ and scripts/, so a
checkout and an editable install read those directories; a wheel (and an sdist) carries copies of them. Every
file under ami/ and scripts/ is shipped (pyproject.toml's package-data globs them). Environments are not package
data: see gpufleet.loading.environments_dir.
"""

from importlib.resources import files
from pathlib import Path


def shipped_path(*parts: str) -> Path:
    """The file or directory ami/... or scripts/... shipped with gpufleet, with symlinks resolved (in a checkout:
    the repository's own ami/ and scripts/). Packer reads the scripts from disk, so gpufleet must be installed as
    files (as pip does), not imported from a zip archive."""
    return Path(str(files(__name__).joinpath("data", *parts))).resolve()
