from slurm_shockwave.loader import InputFileError


class WorkloadError(InputFileError):
    """Bad workload input.  The message is one line: `file:line: field: problem` (`file:line: problem` when the
    problem names its field itself, as validation.describe's lines do)."""

    def __init__(self, path, line, field, problem):
        super().__init__(path, f"{field}: {problem}" if field else problem, line)
        self.field = field
