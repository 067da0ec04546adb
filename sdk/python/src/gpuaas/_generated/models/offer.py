from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.shape import Shape
from typing import cast

if TYPE_CHECKING:
  from ..models.money import Money





T = TypeVar("T", bound="Offer")



@_attrs_define
class Offer:
    """ One SKU in one region, as other GPU clouds list their offers: what it is, what it costs per
    hour, and how many could launch there now (the number placement would honour).

        Attributes:
            disk_gib (int): Local NVMe.
            display_name (str):
            gpu_count (int):
            gpu_model (str):
            launchable (int):
            memory_gib (int):
            price_per_hour (Money): Integer minor units (cents) of a currency.
            region (str):
            shape (Shape):
            sku (str): The SKU's name, what a launch asks for: `h100.1x`.
            vcpus (int):
     """

    disk_gib: int
    display_name: str
    gpu_count: int
    gpu_model: str
    launchable: int
    memory_gib: int
    price_per_hour: Money
    region: str
    shape: Shape
    sku: str
    vcpus: int
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.money import Money # noqa: PLC0415
        disk_gib = self.disk_gib

        display_name = self.display_name

        gpu_count = self.gpu_count

        gpu_model = self.gpu_model

        launchable = self.launchable

        memory_gib = self.memory_gib

        price_per_hour = self.price_per_hour.to_dict()

        region = self.region

        shape = self.shape.value

        sku = self.sku

        vcpus = self.vcpus


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "disk_gib": disk_gib,
            "display_name": display_name,
            "gpu_count": gpu_count,
            "gpu_model": gpu_model,
            "launchable": launchable,
            "memory_gib": memory_gib,
            "price_per_hour": price_per_hour,
            "region": region,
            "shape": shape,
            "sku": sku,
            "vcpus": vcpus,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.money import Money # noqa: PLC0415
        d = dict(src_dict)
        disk_gib = d.pop("disk_gib")

        display_name = d.pop("display_name")

        gpu_count = d.pop("gpu_count")

        gpu_model = d.pop("gpu_model")

        launchable = d.pop("launchable")

        memory_gib = d.pop("memory_gib")

        price_per_hour = Money.from_dict(d.pop("price_per_hour"))




        region = d.pop("region")

        shape = Shape(d.pop("shape"))




        sku = d.pop("sku")

        vcpus = d.pop("vcpus")

        offer = cls(
            disk_gib=disk_gib,
            display_name=display_name,
            gpu_count=gpu_count,
            gpu_model=gpu_model,
            launchable=launchable,
            memory_gib=memory_gib,
            price_per_hour=price_per_hour,
            region=region,
            shape=shape,
            sku=sku,
            vcpus=vcpus,
        )


        offer.additional_properties = d
        return offer

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
