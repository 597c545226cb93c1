"""OS package names per OS family/version and driver or component version (ami/packages.yaml), resolved for a profile.

The provisioning scripts never compute a package name: the Packer template passes each package key's resolved
name, version string, repositories and extras topic as GPUFLEET_<KEY>_* environment variables.
"""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path

from pydantic import BaseModel, ConfigDict, RootModel, StrictBool, StrictStr, field_validator, model_validator

from gpufleet.ami import AMI_DIR, COMPONENT_KEYS
from gpufleet.ami.profile import Profile
from gpufleet.config_file import read_model
from gpufleet.errors import GpufleetError

PACKAGES_FILE = AMI_DIR / "packages.yaml"
TEMPLATE_FIELDS = frozenset({"branch", "major", "version", "cuda_major_minor"})
# Suffixes of the environment variables each package key sets (GPUFLEET_<KEY>_<SUFFIX>).
ENVIRONMENT_SUFFIXES = ("PACKAGE", "PACKAGE_VERSION", "REPOSITORIES", "EXTRAS_TOPIC")


DOTTED = re.compile(r"\d+(?:\.\d+)*")


def version_tuple(version: str) -> tuple[int, ...]:
    """Numeric fields of a version's leading dotted part: 450.80.02 -> (450, 80, 2), 1.17.8-1 -> (1, 17, 8);
    2.10 < 2.12 < 2.100."""
    match = DOTTED.match(version)
    return tuple(int(field) for field in match.group().split(".")) if match else ()


def _checked_dotted(value: str | None) -> str | None:
    if value is not None and not DOTTED.fullmatch(value):
        raise ValueError(f"'{value}' is not a dotted numeric version (e.g. 460.91)")
    return value


def _checked_template(value: str | None) -> str | None:
    if value is None:
        return value
    unknown = {field for _, field, _, _ in string.Formatter().parse(value) if field is not None} - TEMPLATE_FIELDS
    if unknown:
        raise ValueError(f"'{value}' uses {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(TEMPLATE_FIELDS))})")
    return value


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Repository(_Data):
    """An apt source with the key that signs it, or a vendor yum .repo file (it names its own key)."""

    key_url: StrictStr | None = None
    apt_source: StrictStr | None = None
    yum_repo_file: StrictStr | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Repository:
        apt = self.key_url is not None and self.apt_source is not None
        if apt == (self.yum_repo_file is not None) or (self.key_url is None) != (self.apt_source is None):
            raise ValueError("give either key_url and apt_source (apt) or yum_repo_file (yum)")
        for url in (self.key_url, self.apt_source, self.yum_repo_file):
            if url is not None and not url.startswith("https://"):
                raise ValueError(f"'{url}' is not an https URL")
            if url is not None and (";" in url or "|" in url):
                raise ValueError(f"'{url}' contains ; or |, which separate repositories in the environment")
        return self

    def encoded(self) -> str:
        return self.yum_repo_file if self.yum_repo_file else f"{self.key_url}|{self.apt_source}"


class Row(_Data):
    os_family: StrictStr
    os_versions: tuple[StrictStr, ...] | None = None
    driver_min: StrictStr | None = None
    driver_below: StrictStr | None = None
    version_min: StrictStr | None = None
    version_below: StrictStr | None = None
    name: StrictStr
    version: StrictStr | None = None
    repositories: tuple[Repository, ...] = ()
    extras_topic: StrictStr | None = None
    source: StrictStr

    _dotted = field_validator("driver_min", "driver_below", "version_min", "version_below")(_checked_dotted)
    _templates = field_validator("name", "version")(_checked_template)

    def matches(self, profile: Profile, component_version: str) -> bool:
        if self.os_family != profile.os.family:
            return False
        if self.os_versions is not None and profile.os.version not in self.os_versions:
            return False
        return _within(profile.components.driver.version, self.driver_min, self.driver_below) and _within(
            component_version, self.version_min, self.version_below
        )

    def describe(self) -> str:
        selectors = [
            f"{key}={value}"
            for key, value in self.model_dump(
                include={"os_family", "os_versions", "driver_min", "driver_below", "version_min", "version_below"}
            ).items()
            if value is not None
        ]
        return ", ".join(selectors)


def _within(version: str, minimum: str | None, below: str | None) -> bool:
    current = version_tuple(version)
    return (minimum is None or current >= version_tuple(minimum)) and (below is None or current < version_tuple(below))


class Table(_Data):
    component: StrictStr
    none_when_url: StrictBool = False
    rows: tuple[Row, ...]

    @field_validator("component")
    @classmethod
    def _known_component(cls, value: str) -> str:
        if value not in COMPONENT_KEYS:
            raise ValueError(f"'{value}' is not a component key ({', '.join(COMPONENT_KEYS)})")
        return value


class PackagesFile(RootModel[dict[str, Table]]):
    pass


@functools.cache
def load_tables(path: Path = PACKAGES_FILE) -> dict[str, Table]:
    return read_model(path, PackagesFile, reference="ami/packages.yaml (header)").root


class Resolved(_Data):
    """One package key resolved for a profile; an empty name: not installed from an OS package."""

    name: str = ""
    version: str = ""
    repositories: tuple[Repository, ...] = ()
    extras_topic: str = ""

    def environment(self, key: str) -> dict[str, str]:
        values = (
            self.name,
            self.version,
            ";".join(repository.encoded() for repository in self.repositories),
            self.extras_topic,
        )
        pairs = zip(ENVIRONMENT_SUFFIXES, values, strict=True)
        return {f"GPUFLEET_{key.upper()}_{suffix}": value for suffix, value in pairs}


def _not_installed(profile: Profile, table: Table) -> bool:
    component = getattr(profile.components, table.component)
    if table.component == "fabric_manager" and not profile.target.nvswitch:
        return True
    return table.none_when_url and component.url is not None


def resolve(
    profile: Profile, tables: dict[str, Table] | None = None, path: Path = PACKAGES_FILE
) -> dict[str, Resolved]:
    """Package key -> its resolved row for the profile; one line per key whose rows do not select exactly one."""
    tables = load_tables(path) if tables is None else tables
    resolved: dict[str, Resolved] = {}
    problems: list[str] = []
    for key, table in tables.items():
        if _not_installed(profile, table):
            resolved[key] = Resolved()
            continue
        component_version = getattr(profile.components, table.component).version
        matching = [row for row in table.rows if row.matches(profile, component_version)]
        where = (
            f"{profile.os.family} {profile.os.version}, driver {profile.components.driver.version}, "
            f"{table.component} {component_version}"
        )
        if not matching:
            problems.append(f"{path}: {key}: no row for {where} (profile {profile.name}): add one with its source")
            continue
        if len(matching) > 1:
            problems.append(
                f"{path}: {key}: rows overlap for {where}: "
                + "; ".join(row.describe() for row in matching)
                + " (narrow their selectors)"
            )
            continue
        resolved[key] = _fill(matching[0], profile, component_version)
    if problems:
        raise GpufleetError(*problems)
    return resolved


def _fill(row: Row, profile: Profile, component_version: str) -> Resolved:
    fields = {
        "branch": profile.components.driver.version.split(".")[0],
        "major": component_version.split(".")[0],
        "version": component_version,
        "cuda_major_minor": ".".join(profile.components.cuda.version.split(".")[:2]),
    }
    return Resolved(
        name=row.name.format(**fields),
        version=(row.version or "").format(**fields),
        repositories=row.repositories,
        extras_topic=row.extras_topic or "",
    )


def package_names(profile: Profile) -> dict[str, str]:
    """Package key -> OS package name for the profile ("" when not installed from an OS package)."""
    return {key: entry.name for key, entry in resolve(profile).items()}


def package_environment(profile: Profile) -> dict[str, str]:
    """Every GPUFLEET_<KEY>_* variable the scripts read, in the data file's key order."""
    environment: dict[str, str] = {}
    for key, entry in resolve(profile).items():
        environment.update(entry.environment(key))
    return environment
