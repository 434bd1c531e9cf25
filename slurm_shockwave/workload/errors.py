class WorkloadError(ValueError):
    """Bad workload input.  The message is one line: `file:line: field: problem`."""

    def __init__(self, path, line, field, problem):
        where = f"{path}:{line}" if line else f"{path}"
        super().__init__(f"{where}: {field}: {problem}")
        self.path, self.line, self.field, self.problem = path, line, field, problem


def read_text(path):
    """A workload file's text; a missing or unreadable file is a one-line WorkloadError."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise WorkloadError(path, 0, "file", "not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(path, 0, "file", str(e)) from None
