"""Landing persisted artifacts in the Git-LFS data repository (only under the data prefix)."""
from fleet.publish.commit import CommitResult, DataRepo, commit_files, ensure_remote, read_commit_log, redact

__all__ = ["DataRepo", "CommitResult", "commit_files", "ensure_remote", "read_commit_log", "redact"]
