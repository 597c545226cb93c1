"""What every configuration rule builds on: the Rule base class, the Problem a Validator (a Rule on a configuration
file) reports, and the checks that environments (gpufleet.validators) and the AMI pipeline (gpufleet.ami.pipeline)
share. The compatibility gate's rules (gpufleet.ami.compatibility) are Rules too, reporting Verdicts.

Rules about one field alone are checked while parsing (``checked`` turns a problem function into a pydantic
validator), with the message a Validator would report; Validators are for rules that need more than one field or
outside knowledge. It imports no configuration model, so the modules that define the models and those that check
them can all import it without importing each other.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Generic, Literal, TypeVar

from pydantic import AfterValidator, StrictInt, StrictStr

Severity = Literal["error", "warning"]

# CloudWatch Logs retention periods, in days, with the name aws_cdk.aws_logs.RetentionDays gives each.
LOG_RETENTION_DAYS = {
    1: "ONE_DAY",
    3: "THREE_DAYS",
    5: "FIVE_DAYS",
    7: "ONE_WEEK",
    14: "TWO_WEEKS",
    30: "ONE_MONTH",
    60: "TWO_MONTHS",
    90: "THREE_MONTHS",
    120: "FOUR_MONTHS",
    150: "FIVE_MONTHS",
    180: "SIX_MONTHS",
    365: "ONE_YEAR",
    400: "THIRTEEN_MONTHS",
    545: "EIGHTEEN_MONTHS",
    731: "TWO_YEARS",
    1096: "THREE_YEARS",
    1827: "FIVE_YEARS",
    2192: "SIX_YEARS",
    2557: "SEVEN_YEARS",
    2922: "EIGHT_YEARS",
    3288: "NINE_YEARS",
    3653: "TEN_YEARS",
}


# An OpenPGP v4 key fingerprint as gpg --with-colons and its VALIDSIG status line print it: 40 upper-case hex digits.
OPENPGP_FINGERPRINT = re.compile(r"[0-9A-F]{40}")


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    severity: Severity = "error"

    def line(self, path: Path) -> str:
        """The line `gpufleet validate` prints: FILE: FIELD: MESSAGE, a warning marked as one."""
        marker = "warning: " if self.severity == "warning" else ""
        return f"{path}: {self.field}: {marker}{self.message}"


Subject = TypeVar("Subject")
Context = TypeVar("Context")
Finding = TypeVar("Finding")


class Rule(Generic[Subject, Context, Finding]):
    """One fact a subject (an environment, the pipeline configuration, an AMI profile) must satisfy: ``check``
    returns what it finds in the subject, given what else the rule needs to know (the context)."""

    def check(self, subject: Subject, context: Context) -> list[Finding]:
        raise NotImplementedError


class Validator(Rule[Subject, Context, Problem]):
    """A rule on a configuration file: ``check`` returns the problems it finds, each naming the field it concerns,
    an empty list when the subject satisfies it."""

    field: ClassVar[str]
    severity: ClassVar[Severity] = "error"

    def problem(self, message: str) -> list[Problem]:
        return [Problem(self.field, message, self.severity)]

    def problem_if(self, message: str | None) -> list[Problem]:
        return self.problem(message) if message else []


def account_id_problem(account: str) -> str | None:
    if not re.fullmatch(r"\d{12}", account):
        return f"'{account}' is not an AWS account id (exactly 12 digits, quoted)"
    return None


@dataclass(frozen=True)
class Partition:
    name: str
    region_pattern: str
    regions: tuple[str, ...]


def botocore_data_file(name: str) -> Path:
    """A file of the pinned botocore's bundled data, found without importing botocore: the app and `gpufleet
    validate` need the data, not the SDK (importing botocore.loaders costs every synthesis about 0.07 s)."""
    spec = importlib.util.find_spec("botocore")
    assert spec is not None and spec.submodule_search_locations, "botocore is a dependency of gpufleet"
    return Path(spec.submodule_search_locations[0]) / "data" / name


@functools.cache
def aws_partitions() -> tuple[Partition, ...]:
    """The AWS partitions and their regions, as the pinned botocore lists them (botocore/data/partitions.json, the
    partition data of its endpoint rule sets; its older endpoints.json lags it, lacking regions partitions.json has).
    A region is a name that matches its partition's regionRegex: the pseudo-regions listed beside them (aws-global,
    aws-cn-global, ...) are not."""
    data = json.loads(botocore_data_file("partitions.json").read_text())
    return tuple(
        Partition(
            name=partition["id"],
            region_pattern=pattern,
            regions=tuple(sorted(name for name in partition["regions"] if re.fullmatch(pattern, name))),
        )
        for partition in data["partitions"]
        for pattern in [partition["regionRegex"]]
    )


def partition_of(region: str) -> Partition | None:
    """The partition whose region pattern the name has (the patterns do not overlap: us-gov-west-1 is not aws's)."""
    return next((p for p in aws_partitions() if re.fullmatch(p.region_pattern, region)), None)


def region_problem(region: str) -> str | None:
    """A region botocore lists, refused otherwise: a deploy to a region that does not exist fails, and a mistyped
    one (us-east-3) has the form of a real one. A region opened after the pinned botocore was released is refused
    too, and the message says the fix (raise the pins). Refused rather than warned about: a warning would let a typo
    synthesize, and `gpufleet preflight` fails on warnings all the same; regions open a few times a year, and how soon
    botocore lists a new one is (unconfirmed)."""
    partition = partition_of(region)
    if partition is None:
        return f"'{region}' is not a region name (for example us-east-1, eu-west-2)"
    if region not in partition.regions:
        return (
            f"'{region}' is not a region of partition {partition.name} (allowed, as the pinned botocore lists them: "
            f"{', '.join(partition.regions)}; a region opened since needs newer boto3 and botocore pins)"
        )
    return None


def choice_problem(value: str, what: str, choices: tuple[str, ...]) -> str | None:
    if value not in choices:
        return f"'{value}' is not {what} (allowed: {', '.join(choices)})"
    return None


def log_retention_problem(days: int) -> str | None:
    if days not in LOG_RETENTION_DAYS:
        return f"{days} is not a CloudWatch Logs retention (allowed: {', '.join(map(str, LOG_RETENTION_DAYS))})"
    return None


Value = TypeVar("Value")


def checked(problem_of: Callable[[Value], str | None]) -> AfterValidator:
    """A one-field rule run while parsing: the problem becomes the field's error (config_file prints it as
    FILE: FIELD: MESSAGE, the line a Validator's Problem gives)."""

    def check(value: Value) -> Value:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def one_of(what: str, choices: tuple[str, ...]) -> AfterValidator:
    def problem(value: str) -> str | None:
        return choice_problem(value, what, choices)

    return checked(problem)


AccountId = Annotated[StrictStr, checked(account_id_problem)]
RegionName = Annotated[StrictStr, checked(region_problem)]
LogRetentionDays = Annotated[StrictInt, checked(log_retention_problem)]
