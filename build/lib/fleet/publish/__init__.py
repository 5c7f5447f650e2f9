"""Landing persisted artifacts in the Git-LFS data repository (only under the data prefix)."""
from fleet.publish.commit import CommitResult, commit_files
from fleet.publish.datarepo import DataRepo, check_remote, create_remote, ensure_remote, redact, verify_remote

__all__ = ["DataRepo", "CommitResult", "check_remote", "commit_files", "create_remote", "ensure_remote", "redact",
           "verify_remote"]
