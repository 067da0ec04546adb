from enum import StrEnum

class VolumeState(StrEnum):
    ATTACHING = "attaching"
    AVAILABLE = "available"
    CREATING = "creating"
    DELETED = "deleted"
    DELETING = "deleting"
    DETACHING = "detaching"
    ERROR = "error"
    IN_USE = "in_use"

    def __str__(self) -> str:
        return str(self.value)
