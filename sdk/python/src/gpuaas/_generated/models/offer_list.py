from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from typing import cast

if TYPE_CHECKING:
  from ..models.offer import Offer





T = TypeVar("T", bound="OfferList")



@_attrs_define
class OfferList:
    """ 
        Attributes:
            offers (list[Offer]):
     """

    offers: list[Offer]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.offer import Offer # noqa: PLC0415
        offers = []
        for offers_item_data in self.offers:
            offers_item = offers_item_data.to_dict()
            offers.append(offers_item)




        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "offers": offers,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.offer import Offer # noqa: PLC0415
        d = dict(src_dict)
        offers = []
        _offers = d.pop("offers")
        for offers_item_data in (_offers):
            offers_item = Offer.from_dict(offers_item_data)



            offers.append(offers_item)


        offer_list = cls(
            offers=offers,
        )


        offer_list.additional_properties = d
        return offer_list

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
