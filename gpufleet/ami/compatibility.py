"""The compatibility gate: one small rule per fact a pinned stack must satisfy, its data in ami/compatibility.yaml.

Each rule returns Verdicts (PASS, WARN or ERROR with a message); `gpufleet ami check` prints them and rendering
refuses a profile with any ERROR.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError, field_validator

from gpufleet import rules
from gpufleet.ami import COMPATIBILITY_FILE
from gpufleet.ami.profile import Profile
from gpufleet.catalog import load_catalog
from gpufleet.errors import GpufleetError

# Where EFA installers that ship aws-ofi-nccl put it (efa_installer_aws_ofi_nccl in compatibility.yaml).
BUNDLED_OFI_NCCL_PREFIX = "/opt/amazon/ofi-nccl"


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _checked_version(value: str) -> str:
    Version(value)
    return value


def _checked_specifier(value: str) -> str:
    SpecifierSet(value)
    return value


class CudaDriverEntry(_Data):
    cuda: StrictStr
    driver: StrictStr
    _versions = field_validator("cuda", "driver")(_checked_version)


class ArchitectureEntry(_Data):
    compute_capability: StrictStr
    gpu: StrictStr
    cuda: StrictStr
    driver_branch: StrictInt
    _versions = field_validator("cuda")(_checked_version)


class OfiNcclEntry(_Data):
    releases: StrictStr
    nccl: StrictStr
    libfabric: StrictStr
    note: StrictStr | None = None
    _specifiers = field_validator("releases", "nccl", "libfabric")(_checked_specifier)


class OfiNcclTagEntry(_Data):
    releases: StrictStr
    tag: StrictStr
    _specifiers = field_validator("releases")(_checked_specifier)


class InstallerOfiNcclEntry(_Data):
    efa_installer: StrictStr
    aws_ofi_nccl: StrictStr
    note: StrictStr | None = None
    _versions = field_validator("efa_installer", "aws_ofi_nccl")(_checked_version)


class InstallerLibfabricEntry(_Data):
    efa_installer: StrictStr
    libfabric: StrictStr
    note: StrictStr | None = None
    _versions = field_validator("efa_installer", "libfabric")(_checked_version)


class InstallerOsEntry(_Data):
    family: StrictStr
    version: StrictStr
    efa_installer: StrictStr
    note: StrictStr | None = None
    _specifiers = field_validator("efa_installer")(_checked_specifier)


class InstanceMinimumsEntry(_Data):
    instance_type: StrictStr
    cuda: StrictStr
    nccl: StrictStr
    aws_ofi_nccl: StrictStr
    efa_installer: StrictStr
    _versions = field_validator("cuda", "nccl", "aws_ofi_nccl", "efa_installer")(_checked_version)


class BranchLifecycleEntry(_Data):
    branch: StrictInt
    kind: StrictStr
    end_of_life: dt.date
    note: StrictStr | None = None


class CloudWatchAgentPackageEntry(_Data):
    family: StrictStr
    url: StrictStr


class CloudWatchAgentFeatureEntry(_Data):
    feature: StrictStr
    since: StrictStr
    _versions = field_validator("since")(_checked_version)


class PyTorchReleaseEntry(_Data):
    releases: StrictStr
    python: StrictStr
    cuda: tuple[StrictStr, ...]
    note: StrictStr | None = None
    _specifiers = field_validator("releases", "python")(_checked_specifier)


class OsPythonEntry(_Data):
    family: StrictStr
    version: StrictStr
    python: StrictStr
    note: StrictStr | None = None
    _versions = field_validator("python")(_checked_version)


class _Table(_Data):
    source: StrictStr


class CudaDriverTable(_Table):
    table: tuple[CudaDriverEntry, ...]


class ArchitectureTable(_Table):
    table: tuple[ArchitectureEntry, ...]


class OfiNcclTable(_Table):
    table: tuple[OfiNcclEntry, ...]


class OfiNcclTagTable(_Table):
    table: tuple[OfiNcclTagEntry, ...]


class InstallerOfiNcclTable(_Table):
    table: tuple[InstallerOfiNcclEntry, ...]


class InstallerLibfabricTable(_Table):
    table: tuple[InstallerLibfabricEntry, ...]


class InstallerOsTable(_Table):
    table: tuple[InstallerOsEntry, ...]


class InstanceMinimumsTable(_Table):
    table: tuple[InstanceMinimumsEntry, ...]


class BranchLifecycleTable(_Table):
    table: tuple[BranchLifecycleEntry, ...]


class PyTorchReleaseTable(_Table):
    table: tuple[PyTorchReleaseEntry, ...]


class OsPythonTable(_Table):
    table: tuple[OsPythonEntry, ...]


class AwsCliInstaller(_Data):
    source: StrictStr
    url: StrictStr


class UvRelease(_Data):
    source: StrictStr
    url: StrictStr


class CloudWatchAgentPackageTable(_Table):
    table: tuple[CloudWatchAgentPackageEntry, ...]


class CloudWatchAgentFeatureTable(_Table):
    table: tuple[CloudWatchAgentFeatureEntry, ...]


class CompatibilityData(_Data):
    cuda_minimum_driver: CudaDriverTable
    gpu_architectures: ArchitectureTable
    aws_ofi_nccl: OfiNcclTable
    aws_ofi_nccl_tags: OfiNcclTagTable
    efa_installer_aws_ofi_nccl: InstallerOfiNcclTable
    efa_installer_libfabric: InstallerLibfabricTable
    efa_installer_os: InstallerOsTable
    instance_minimums: InstanceMinimumsTable
    driver_branch_end_of_life: BranchLifecycleTable
    aws_cli_installer: AwsCliInstaller
    cloudwatch_agent_packages: CloudWatchAgentPackageTable
    cloudwatch_agent_features: CloudWatchAgentFeatureTable
    pytorch_releases: PyTorchReleaseTable
    uv_release: UvRelease
    os_python: OsPythonTable


@functools.cache
def load_compatibility(path: Path = COMPATIBILITY_FILE) -> CompatibilityData:
    try:
        return CompatibilityData.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError) as error:
        raise GpufleetError(f"{path}: cannot read the compatibility rules ({error})") from None
    except ValidationError as error:
        raise GpufleetError(*(f"{path}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())) from None


class Level(enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    ERROR = "ERROR"


@dataclass(frozen=True)
class Verdict:
    rule: str
    level: Level
    message: str


@dataclass(frozen=True)
class CheckContext:
    data: CompatibilityData
    today: dt.date


class Rule(rules.Rule[Profile, CheckContext, Verdict]):
    """One fact about a stack; ``check`` returns at least one Verdict, PASS included."""

    rule_id: ClassVar[str]

    def check(self, profile: Profile, context: CheckContext) -> list[Verdict]:
        try:
            return self.evaluate(profile, context)
        except InvalidVersion as error:
            return self.error(f"{error} (versions compared by this rule must be numeric, e.g. 2.7.8)")

    def evaluate(self, profile: Profile, context: CheckContext) -> list[Verdict]:
        raise NotImplementedError

    def passed(self, message: str) -> list[Verdict]:
        return [Verdict(self.rule_id, Level.PASS, message)]

    def warn(self, message: str) -> list[Verdict]:
        return [Verdict(self.rule_id, Level.WARN, message)]

    def error(self, message: str) -> list[Verdict]:
        return [Verdict(self.rule_id, Level.ERROR, message)]


_Entry = TypeVar("_Entry", bound=BaseModel)


def driver_branch(driver: str) -> int:
    return Version(driver).major


def _floor_entry(entries: tuple[_Entry, ...], key: str, version: Version) -> _Entry | None:
    """The entry with the greatest ``key`` version not above ``version``."""
    candidates = [entry for entry in entries if Version(getattr(entry, key)) <= version]
    return max(candidates, key=lambda entry: Version(getattr(entry, key)), default=None)


class TargetCatalogRule(Rule):
    rule_id = "TARGET-CATALOG"

    def evaluate(self, profile, context):
        catalog = load_catalog()
        unknown = [name for name in profile.target.instance_types if name not in catalog]
        if not profile.target.instance_types or unknown:
            return self.error(
                f"target.instance_types {', '.join(unknown) or '(empty)'} not in the instance catalog "
                f"(allowed: {', '.join(catalog)})"
            )
        wrong = [name for name in profile.target.instance_types if catalog[name].nvswitch != profile.target.nvswitch]
        if wrong:
            return self.error(
                f"target.nvswitch is {str(profile.target.nvswitch).lower()} but the catalog says "
                f"otherwise for {', '.join(wrong)}"
            )
        return self.passed(
            f"{', '.join(profile.target.instance_types)} in the catalog, "
            f"nvswitch {str(profile.target.nvswitch).lower()}"
        )


class FabricManagerRule(Rule):
    rule_id = "FM-EQUALS-DRIVER"

    def evaluate(self, profile, context):
        driver, fabric_manager = profile.components.driver.version, profile.components.fabric_manager.version
        if fabric_manager != driver:
            return self.error(
                f"fabric_manager {fabric_manager} differs from driver {driver} (Fabric Manager must "
                "equal the driver version exactly)"
            )
        return self.passed(f"fabric_manager {fabric_manager} equals driver {driver}")


class CudaMinimumDriverRule(Rule):
    rule_id = "CUDA-MIN-DRIVER"

    def evaluate(self, profile, context):
        cuda, driver = profile.components.cuda.version, profile.components.driver.version
        entry = _floor_entry(context.data.cuda_minimum_driver.table, "cuda", Version(cuda))
        if entry is None:
            return self.error(f"CUDA {cuda} is older than every entry of cuda_minimum_driver in compatibility.yaml")
        if Version(driver) < Version(entry.driver):
            return self.error(f"driver {driver} is older than {entry.driver}, the minimum for CUDA {cuda}")
        return self.passed(f"driver {driver} >= {entry.driver}, the minimum for CUDA {cuda}")


class GpuArchitectureRule(Rule):
    rule_id = "GPU-ARCH"

    def evaluate(self, profile, context):
        catalog = load_catalog()
        cuda, driver = Version(profile.components.cuda.version), profile.components.driver.version
        architectures = {entry.compute_capability: entry for entry in context.data.gpu_architectures.table}
        problems, supported = [], []
        for name in profile.target.instance_types:
            if name not in catalog:
                continue
            capability = catalog[name].gpu.compute_capability
            entry = architectures.get(capability)
            if entry is None:
                problems.append(f"{name}: compute capability {capability} has no entry in gpu_architectures")
            elif cuda < Version(entry.cuda) or driver_branch(driver) < entry.driver_branch:
                problems.append(
                    f"{name}: {entry.gpu} needs CUDA >= {entry.cuda} and driver branch >= "
                    f"R{entry.driver_branch} (profile: CUDA {cuda}, driver {driver})"
                )
            else:
                supported.append(f"{name} {entry.gpu}")
        if problems:
            return self.error("; ".join(problems))
        return self.passed(f"CUDA {cuda} and R{driver_branch(driver)} support {', '.join(supported)}")


def _ofi_entry(profile: Profile, context: CheckContext) -> OfiNcclEntry | None:
    release = Version(profile.components.aws_ofi_nccl.version)
    return next((entry for entry in context.data.aws_ofi_nccl.table if release in SpecifierSet(entry.releases)), None)


class OfiNcclRangeRule(Rule):
    rule_id = "OFI-NCCL-RANGE"

    def evaluate(self, profile, context):
        plugin, nccl = profile.components.aws_ofi_nccl.version, profile.components.nccl.version
        entry = _ofi_entry(profile, context)
        if entry is None:
            return self.error(f"aws-ofi-nccl {plugin} has no entry in aws_ofi_nccl in compatibility.yaml")
        if Version(nccl) not in SpecifierSet(entry.nccl):
            return self.error(f"NCCL {nccl} is outside the range aws-ofi-nccl {plugin} supports ({entry.nccl})")
        return self.passed(f"NCCL {nccl} within {entry.nccl}, supported by aws-ofi-nccl {plugin}")


class OfiLibfabricRule(Rule):
    rule_id = "OFI-LIBFABRIC"

    def evaluate(self, profile, context):
        plugin, installer = profile.components.aws_ofi_nccl.version, profile.components.efa_installer.version
        entry = _ofi_entry(profile, context)
        if entry is None:
            return self.error(f"aws-ofi-nccl {plugin} has no entry in aws_ofi_nccl in compatibility.yaml")
        shipped = _floor_entry(context.data.efa_installer_libfabric.table, "efa_installer", Version(installer))
        if shipped is None:
            return self.error(f"EFA installer {installer} has no entry in efa_installer_libfabric")
        if Version(shipped.libfabric) not in SpecifierSet(entry.libfabric):
            return self.error(
                f"EFA installer {installer} ships libfabric {shipped.libfabric}; aws-ofi-nccl {plugin} "
                f"needs {entry.libfabric}"
            )
        return self.passed(
            f"EFA installer {installer} ships libfabric >= {shipped.libfabric}, "
            f"aws-ofi-nccl {plugin} needs {entry.libfabric}"
        )


# The tag a GitHub download names: a source archive (.../archive/refs/tags/TAG.tar.gz) or a release asset
# (.../releases/download/TAG/FILE).
_GITHUB_TAG = re.compile(
    r"^https://github\.com/[^/]+/[^/]+/(?:archive/refs/tags/(?P<archive>[^/]+?)\.(?:tar\.gz|zip)"
    r"|releases/download/(?P<release>[^/]+)/)"
)


class OfiNcclTagRule(Rule):
    rule_id = "OFI-NCCL-TAG"

    def evaluate(self, profile, context):
        plugin = profile.components.aws_ofi_nccl
        if plugin.url is None:
            return self.passed(f"aws-ofi-nccl {plugin.version} is not downloaded (no url)")
        release = Version(plugin.version)
        entry = next(
            (entry for entry in context.data.aws_ofi_nccl_tags.table if release in SpecifierSet(entry.releases)), None
        )
        if entry is None:
            return self.error(f"aws-ofi-nccl {plugin.version} has no entry in aws_ofi_nccl_tags in compatibility.yaml")
        expected = entry.tag.format(version=plugin.version)
        match = _GITHUB_TAG.match(plugin.url)
        if match is None:
            return self.warn(
                f"components.aws_ofi_nccl.url {plugin.url} names no GitHub tag: cannot check that it is "
                f"the {expected} release"
            )
        tag = match["archive"] or match["release"]
        if tag != expected:
            return self.error(
                f"components.aws_ofi_nccl.url names tag {tag}, but aws-ofi-nccl {plugin.version} is "
                f"tagged {expected} (use https://github.com/aws/aws-ofi-nccl/archive/refs/tags/"
                f"{expected}.tar.gz)"
            )
        return self.passed(f"components.aws_ofi_nccl.url names tag {expected}")


class OfiNcclOneCopyRule(Rule):
    """Exactly one NCCL net plugin on the image: the EFA installer's, or one built from source when it has none."""

    rule_id = "OFI-NCCL-ONE-COPY"

    def evaluate(self, profile, context):
        installer, plugin = profile.components.efa_installer.version, profile.components.aws_ofi_nccl
        table = context.data.efa_installer_aws_ofi_nccl.table
        first = min((entry.efa_installer for entry in table), key=Version)
        if Version(installer) < Version(first):
            if plugin.url is None:
                return self.error(
                    f"EFA installer {installer} installs no aws-ofi-nccl (installers ship it from "
                    f"{first} on): set components.aws_ofi_nccl.url to the release to build"
                )
            return self.passed(
                f"aws-ofi-nccl {plugin.version} is built from source; EFA installer {installer} installs none"
            )
        entry = next((entry for entry in table if Version(entry.efa_installer) == Version(installer)), None)
        if entry is None:
            return self.error(
                f"EFA installer {installer} installs aws-ofi-nccl, but efa_installer_aws_ofi_nccl in "
                "compatibility.yaml does not say which version: add it from the EFA changelog"
            )
        problems = []
        if plugin.url is not None:
            problems.append(
                f"EFA installer {installer} already installs aws-ofi-nccl {entry.aws_ofi_nccl} under "
                f"{BUNDLED_OFI_NCCL_PREFIX}: set components.aws_ofi_nccl.url to null (a second build "
                "leaves two libnccl-net.so and the loader's search order picks one)"
            )
        if Version(plugin.version) != Version(entry.aws_ofi_nccl):
            problems.append(
                f"components.aws_ofi_nccl.version {plugin.version} is not {entry.aws_ofi_nccl}, the "
                f"version EFA installer {installer} installs"
            )
        if problems:
            return self.error("; ".join(problems))
        return self.passed(
            f"aws-ofi-nccl {plugin.version} comes with EFA installer {installer} (one copy, under "
            f"{BUNDLED_OFI_NCCL_PREFIX})"
        )


class EfaInstallerOsRule(Rule):
    rule_id = "EFA-OS"

    def evaluate(self, profile, context):
        installer, os = profile.components.efa_installer.version, profile.os
        entry = next(
            (
                entry
                for entry in context.data.efa_installer_os.table
                if (entry.family, entry.version) == (os.family, os.version)
            ),
            None,
        )
        if entry is None:
            return self.error(
                f"{os.family} {os.version} has no entry in efa_installer_os (no EFA installer release "
                "is known to support it)"
            )
        if Version(installer) not in SpecifierSet(entry.efa_installer):
            return self.error(
                f"EFA installer {installer} does not support {os.family} {os.version} "
                f"(releases known to: {entry.efa_installer})"
            )
        return self.passed(f"EFA installer {installer} supports {os.family} {os.version}")


class InstanceMinimumsRule(Rule):
    rule_id = "TARGET-MINIMUMS"
    components: ClassVar[tuple[str, ...]] = ("cuda", "nccl", "aws_ofi_nccl", "efa_installer")

    def evaluate(self, profile, context):
        minimums = {entry.instance_type: entry for entry in context.data.instance_minimums.table}
        versions = profile.versions()
        problems, checked = [], []
        for name in profile.target.instance_types:
            entry = minimums.get(name)
            if entry is None:
                continue
            checked.append(name)
            problems.extend(
                f"{name} needs {key} >= {getattr(entry, key)} (profile: {versions[key]})"
                for key in self.components
                if Version(versions[key]) < Version(getattr(entry, key))
            )
        if problems:
            return self.error("; ".join(problems))
        if not checked:
            return self.passed("no target instance type has minimum versions in instance_minimums")
        return self.passed(f"meets the minimum versions of {', '.join(checked)}")


class DriverEndOfLifeRule(Rule):
    rule_id = "DRIVER-EOL"

    def evaluate(self, profile, context):
        driver = profile.components.driver.version
        branch = driver_branch(driver)
        entry = next((e for e in context.data.driver_branch_end_of_life.table if e.branch == branch), None)
        if entry is None:
            return self.warn(f"driver branch R{branch} has no end-of-life date in driver_branch_end_of_life")
        if entry.end_of_life < context.today:
            return self.warn(
                f"driver branch R{branch} ({entry.kind}) reached end of life on "
                f"{entry.end_of_life.isoformat()}: no more security fixes (move to a supported branch)"
            )
        return self.passed(f"driver branch R{branch} ({entry.kind}) supported until {entry.end_of_life.isoformat()}")


class ProfileEndOfLifeRule(Rule):
    """A profile marked end_of_life builds as before, with one warning line saying since when and why."""

    rule_id = "PROFILE-EOL"

    def evaluate(self, profile, context):
        end = profile.end_of_life
        if end is None:
            return self.passed("the profile is not marked end of life")
        return self.warn(end_of_life_line(profile))


def end_of_life_line(profile: Profile) -> str:
    end = profile.end_of_life
    assert end is not None
    return f"profile {profile.name} is end of life since {end.date.isoformat()}: {end.reason}"


def os_python(profile: Profile, context: CheckContext) -> str | None:
    """The python3 of the profile's OS (os_python in compatibility.yaml), None where the table has no row."""
    key = (profile.os.family, profile.os.version)
    entry = next((e for e in context.data.os_python.table if (e.family, e.version) == key), None)
    return entry.python if entry is not None else None


class PyTorchDriverRule(Rule):
    """The PyTorch wheel's CUDA (its index, cuNNN) must run on the profile's driver: the CUDA minimum driver table."""

    rule_id = "PYTORCH-DRIVER"

    def evaluate(self, profile, context):
        pytorch, driver = profile.python.pytorch, profile.components.driver.version
        if pytorch is None:
            return self.passed("no PyTorch on the image")
        entry = _floor_entry(context.data.cuda_minimum_driver.table, "cuda", Version(pytorch.cuda))
        if entry is None:
            return self.error(
                f"python.pytorch.index_url: CUDA {pytorch.cuda} is older than every entry of cuda_minimum_driver"
            )
        if Version(driver) < Version(entry.driver):
            return self.error(
                f"python.pytorch.index_url: the CUDA {pytorch.cuda} wheel needs driver >= {entry.driver}, the profile "
                f"pins {driver} (choose a wheel index of an older CUDA, or a newer driver)"
            )
        return self.passed(f"PyTorch {pytorch.version} (CUDA {pytorch.cuda}) runs on driver {driver} >= {entry.driver}")


class PyTorchWheelRule(Rule):
    """PyTorch publishes the release for that CUDA and the virtualenv's Python (pytorch_releases)."""

    rule_id = "PYTORCH-WHEEL"

    def evaluate(self, profile, context):
        pytorch = profile.python.pytorch
        if pytorch is None:
            return self.passed("no PyTorch on the image")
        release = Version(pytorch.version)
        entry = next((e for e in context.data.pytorch_releases.table if release in SpecifierSet(e.releases)), None)
        if entry is None:
            return self.error(f"PyTorch {pytorch.version} has no entry in pytorch_releases in compatibility.yaml")
        python = pytorch.python or os_python(profile, context)
        if python is None:
            return self.error(
                f"{profile.os.family} {profile.os.version} has no entry in os_python: set python.pytorch.python"
            )
        problems = []
        if pytorch.cuda not in entry.cuda:
            problems.append(
                f"python.pytorch.index_url: PyTorch {pytorch.version} has no CUDA {pytorch.cuda} wheels "
                f"(it has {', '.join(entry.cuda)})"
            )
        if Version(python) not in SpecifierSet(entry.python):
            where = (
                "python.pytorch.python"
                if pytorch.python
                else f"the python3 of {profile.os.family} {profile.os.version}"
            )
            problems.append(f"{where} is Python {python}; PyTorch {pytorch.version} needs {entry.python}")
        if problems:
            return self.error("; ".join(problems))
        return self.passed(f"PyTorch {pytorch.version} has CUDA {pytorch.cuda} wheels for Python {python}")


class UvReleaseRule(Rule):
    """python.uv is the pinned release's Linux x86_64 tarball on GitHub, checked against the sha256 GitHub publishes
    beside it (uv_release in compatibility.yaml)."""

    rule_id = "UV-RELEASE"

    def evaluate(self, profile, context):
        uv = profile.python.uv
        expected = context.data.uv_release.url.format(version=uv.version)
        problems = []
        if uv.url != expected:
            problems.append(f"python.uv.url {uv.url} is not the x86_64 Linux tarball of uv {uv.version} ({expected})")
        if uv.sha256 is None:
            problems.append(f"python.uv.sha256 is null: copy the digest GitHub publishes in {expected}.sha256")
        if problems:
            return self.error("; ".join(problems))
        return self.passed(f"python.uv.url is the tarball of uv {uv.version}, with its sha256")


class AwsCliInstallerRule(Rule):
    rule_id = "AWS-CLI-INSTALLER"

    def evaluate(self, profile, context):
        cli = profile.components.aws_cli
        if Version(cli.version).major != 2:
            return self.error(f"components.aws_cli.version {cli.version} is not an AWS CLI version 2 release")
        expected = context.data.aws_cli_installer.url.format(version=cli.version)
        if cli.url != expected:
            return self.error(f"components.aws_cli.url {cli.url} is not the installer of {cli.version} ({expected})")
        return self.passed(f"components.aws_cli.url is the installer of AWS CLI {cli.version}")


class CloudWatchAgentPackageRule(Rule):
    rule_id = "CWAGENT-PACKAGE"

    def evaluate(self, profile, context):
        agent, family = profile.components.cloudwatch_agent, profile.os.family
        entry = next((e for e in context.data.cloudwatch_agent_packages.table if e.family == family), None)
        if entry is None:
            return self.error(f"{family} has no entry in cloudwatch_agent_packages in compatibility.yaml")
        expected = entry.url.format(version=agent.version)
        if agent.url != expected:
            return self.error(
                f"components.cloudwatch_agent.url {agent.url} is not the {family} package of {agent.version} "
                f"({expected})"
            )
        return self.passed(f"components.cloudwatch_agent.url is the {family} package of {agent.version}")


class CloudWatchAgentFeaturesRule(Rule):
    rule_id = "CWAGENT-FEATURES"

    def evaluate(self, profile, context):
        version = profile.components.cloudwatch_agent.version
        release = Version(version).release
        missing = [
            f"{entry.feature} needs {entry.since}"
            for entry in context.data.cloudwatch_agent_features.table
            if release < Version(entry.since).release
        ]
        if missing:
            return self.error(f"CloudWatch agent {version} lacks what the nodes use: {'; '.join(missing)}")
        return self.passed(f"CloudWatch agent {version} has every feature the nodes use")


class DownloadVerificationRule(Rule):
    rule_id = "DOWNLOAD-VERIFIED"

    def evaluate(self, profile, context):
        downloads = [*profile.components.items(), ("python.uv", profile.python.uv)]
        unverified = [(key, component) for key, component in downloads if not component.verified]
        if not unverified:
            return self.passed("every download has a checksum or a signature")
        return [
            Verdict(
                self.rule_id, Level.WARN, f"{key} {component.url}: no checksum or signature ({component.verification})"
            )
            for key, component in unverified
        ]


RULES: tuple[Rule, ...] = (
    TargetCatalogRule(),
    FabricManagerRule(),
    CudaMinimumDriverRule(),
    GpuArchitectureRule(),
    OfiNcclRangeRule(),
    OfiLibfabricRule(),
    OfiNcclTagRule(),
    OfiNcclOneCopyRule(),
    EfaInstallerOsRule(),
    InstanceMinimumsRule(),
    DriverEndOfLifeRule(),
    ProfileEndOfLifeRule(),
    PyTorchDriverRule(),
    PyTorchWheelRule(),
    UvReleaseRule(),
    AwsCliInstallerRule(),
    CloudWatchAgentPackageRule(),
    CloudWatchAgentFeaturesRule(),
    DownloadVerificationRule(),
)


def check_profile(profile: Profile, today: dt.date | None = None) -> list[Verdict]:
    context = CheckContext(data=load_compatibility(), today=today or dt.date.today())
    return [verdict for rule in RULES for verdict in rule.check(profile, context)]


def gate_errors(verdicts: list[Verdict]) -> list[Verdict]:
    return [verdict for verdict in verdicts if verdict.level is Level.ERROR]
