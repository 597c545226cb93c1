"""Render a profile into a directory of Packer HCL2 files (ami/templates/*.pkr.hcl.j2), all or nothing.

Jinja uses [[ ]], [% %] and [# #] as delimiters so Packer's own ``{{ .Path }}`` and HCL's ``${...}`` pass through
untouched. Output is deterministic (no timestamps; components in contract order) so golden files stay stable.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from gpufleet.ami import REBOOT_SUFFIX, SCRIPT_NAMES, SSM_AGENT_ACTIONS, TEMPLATES_DIR
from gpufleet.ami.compatibility import check_profile, gate_errors
from gpufleet.ami.packages import package_environment
from gpufleet.ami.profile import Profile
from gpufleet.errors import GpufleetError

AMAZON_PLUGIN_VERSION = "1.3.3"
PLUGINS_FILE = "plugins.pkr.hcl"
RENDERED_FILES = ("variables.pkr.hcl", "locals.pkr.hcl", "source.pkr.hcl", "build.pkr.hcl", PLUGINS_FILE)
# IAM's rule for instance profile names.
INSTANCE_PROFILE_NAME = re.compile(r"[\w+=,.@-]{1,128}", re.ASCII)


@dataclass(frozen=True)
class ScriptStep:
    name: str
    reboot: bool
    after_reboot: bool


def script_steps(names: tuple[str, ...] = SCRIPT_NAMES) -> list[ScriptStep]:
    return [ScriptStep(name=name, reboot=name.endswith(REBOOT_SUFFIX),
                       after_reboot=index > 0 and names[index - 1].endswith(REBOOT_SUFFIX))
            for index, name in enumerate(names)]


def hcl_literal(value: object) -> str:
    """An HCL literal: strings are JSON-quoted with HCL's template sequences (``${``, ``%{``) escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value).replace("${", "$${").replace("%{", "%%{")
    raise TypeError(f"no HCL literal for {type(value).__name__}")


def hcl_index(map_expression: str, key: str) -> str:
    return f"{map_expression}[{hcl_literal(key)}]"


def template_environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        block_start_string="[%", block_end_string="%]",
        variable_start_string="[[", variable_end_string="]]",
        comment_start_string="[#", comment_end_string="#]",
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False,
    )
    environment.filters["hcl"] = hcl_literal
    environment.filters["index"] = hcl_index
    return environment


def check_instance_profile_name(name: str) -> None:
    if not INSTANCE_PROFILE_NAME.fullmatch(name):
        raise GpufleetError(f"--instance-profile {name!r}: not an IAM instance profile name (1 to 128 characters: "
                            "letters, digits and + = , . @ _ -)")


def render_files(profile: Profile, packer_1_6: bool = False, instance_profile: str | None = None) -> dict[str, str]:
    """File name -> content. packer_1_6 leaves out what Packer 1.6.6 cannot parse (plugins file, IMDS options).

    instance_profile names an existing instance profile for the build instance; without it Packer creates a
    temporary one (and the caller needs the IAM rights to create roles)."""
    if instance_profile is not None:
        check_instance_profile_name(instance_profile)
    environment = template_environment()
    context = {
        "profile": profile,
        "components": profile.components.items(),
        "scripts": script_steps(),
        "amazon_plugin_version": AMAZON_PLUGIN_VERSION,
        "packer_1_6": packer_1_6,
        "instance_profile": instance_profile,
        "ssm_agent_actions": SSM_AGENT_ACTIONS,
        "package_environment": package_environment(profile),
    }
    names = [name for name in RENDERED_FILES if not (packer_1_6 and name == PLUGINS_FILE)]
    return {name: environment.get_template(f"{name}.j2").render(context) for name in names}


def refuse_failing_gate(profile: Profile) -> None:
    errors = gate_errors(check_profile(profile))
    if errors:
        raise GpufleetError(*(f"{profile.name}: {verdict.rule}: {verdict.message}" for verdict in errors),
                            f"{profile.name}: refused: the compatibility gate has errors (see gpufleet ami check)")


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise GpufleetError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in RENDERED_FILES)
        if foreign:
            raise GpufleetError(f"{out_dir}: holds files a render did not write ({', '.join(foreign)}): "
                                "choose an empty or new directory")


def render_profile(profile: Profile, out_dir: Path, packer_1_6: bool = False,
                   instance_profile: str | None = None) -> list[Path]:
    """Gate, render into a temporary sibling directory, then swap it into out_dir; nothing is written on failure."""
    refuse_failing_gate(profile)
    _check_out_dir(out_dir)
    files = render_files(profile, packer_1_6=packer_1_6, instance_profile=instance_profile)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, content in files.items():
            (staging / name).write_text(content)
        if out_dir.exists():
            for old in out_dir.iterdir():
                old.unlink()
            out_dir.rmdir()
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out_dir / name for name in files]
