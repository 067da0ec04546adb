from enum import StrEnum

class Category(StrEnum):
    APP = "app"
    ML_STACK = "ml_stack"
    OS_IMAGE = "os_image"

    def __str__(self) -> str:
        return str(self.value)
