"""The one exception type the command line turns into a clean, one-line-per-problem message."""


class GpufleetError(Exception):
    """A problem the user can fix; each line of ``problems`` is printed on its own line."""

    def __init__(self, *problems: str, exit_code: int = 1) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.exit_code = exit_code
