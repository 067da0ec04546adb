from enum import StrEnum

class Shape(StrEnum):
    BAREMETAL = "baremetal"
    GPU_SLICE = "gpu_slice"

    def __str__(self) -> str:
        return str(self.value)
