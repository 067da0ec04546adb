from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.storage_price import StoragePrice





T = TypeVar("T", bound="StoragePriceList")



@_attrs_define
class StoragePriceList:
    """ 
        Attributes:
            storage_prices (list[StoragePrice]): By region; a region not listed sells no volumes.
     """

    storage_prices: list[StoragePrice]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.storage_price import StoragePrice # noqa: PLC0415
        storage_prices = []
        for storage_prices_item_data in self.storage_prices:
            storage_prices_item = storage_prices_item_data.to_dict()
            storage_prices.append(storage_prices_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "storage_prices": storage_prices,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.storage_price import StoragePrice # noqa: PLC0415
        d = dict(src_dict)
        storage_prices = []
        _storage_prices = d.pop("storage_prices")
        for storage_prices_item_data in (_storage_prices):
            storage_prices_item = StoragePrice.from_dict(storage_prices_item_data)



            storage_prices.append(storage_prices_item)


        storage_price_list = cls(
            storage_prices=storage_prices,
        )


        storage_price_list.additional_properties = d
        return storage_price_list

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
