from enum import StrEnum

class SnapshotState(StrEnum):
    AVAILABLE = "available"
    CREATING = "creating"
    DELETED = "deleted"
    DELETING = "deleting"
    ERROR = "error"

    def __str__(self) -> str:
        return str(self.value)
