class WorkloadError(ValueError):
    """Bad workload input.  The message is one line: `file:line: field: problem`."""

    def __init__(self, path, line, field, problem):
        where = f"{path}:{line}" if line else f"{path}"
        super().__init__(f"{where}: {field}: {problem}")
        self.path, self.line, self.field, self.problem = path, line, field, problem
