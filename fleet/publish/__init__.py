"""Landing persisted artifacts in the Git-LFS data repository (only under the data prefix)."""
from fleet.publish.commit import CommitResult, commit_files
from fleet.publish.datarepo import DataRepo, check_remote, ensure_remote, redact

__all__ = ["DataRepo", "CommitResult", "check_remote", "commit_files", "ensure_remote", "redact"]
