from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
import datetime






T = TypeVar("T", bound="Certificate")



@_attrs_define
class Certificate:
    """ A slot's verified cleanup certificate.

        Attributes:
            firmware_ok (bool):
            gpu_reset (bool):
            nvme_serial (str):
            received_at (datetime.datetime):
            signature (str):
            slot_index (int):
            wipe_method (str):
            wipe_verified (bool):
            gpu_firmware (None | str | Unset):
            verified_samples (int | None | Unset):
            wipe_ms (int | None | Unset):
     """

    firmware_ok: bool
    gpu_reset: bool
    nvme_serial: str
    received_at: datetime.datetime
    signature: str
    slot_index: int
    wipe_method: str
    wipe_verified: bool
    gpu_firmware: None | str | Unset = UNSET
    verified_samples: int | None | Unset = UNSET
    wipe_ms: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        firmware_ok = self.firmware_ok

        gpu_reset = self.gpu_reset

        nvme_serial = self.nvme_serial

        received_at = self.received_at.isoformat()

        signature = self.signature

        slot_index = self.slot_index

        wipe_method = self.wipe_method

        wipe_verified = self.wipe_verified

        gpu_firmware: None | str | Unset
        if isinstance(self.gpu_firmware, Unset):
            gpu_firmware = UNSET
        else:
            gpu_firmware = self.gpu_firmware

        verified_samples: int | None | Unset
        if isinstance(self.verified_samples, Unset):
            verified_samples = UNSET
        else:
            verified_samples = self.verified_samples

        wipe_ms: int | None | Unset
        if isinstance(self.wipe_ms, Unset):
            wipe_ms = UNSET
        else:
            wipe_ms = self.wipe_ms


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "firmware_ok": firmware_ok,
            "gpu_reset": gpu_reset,
            "nvme_serial": nvme_serial,
            "received_at": received_at,
            "signature": signature,
            "slot_index": slot_index,
            "wipe_method": wipe_method,
            "wipe_verified": wipe_verified,
        })
        if gpu_firmware is not UNSET:
            field_dict["gpu_firmware"] = gpu_firmware
        if verified_samples is not UNSET:
            field_dict["verified_samples"] = verified_samples
        if wipe_ms is not UNSET:
            field_dict["wipe_ms"] = wipe_ms

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        firmware_ok = d.pop("firmware_ok")

        gpu_reset = d.pop("gpu_reset")

        nvme_serial = d.pop("nvme_serial")

        received_at = datetime.datetime.fromisoformat(d.pop("received_at"))




        signature = d.pop("signature")

        slot_index = d.pop("slot_index")

        wipe_method = d.pop("wipe_method")

        wipe_verified = d.pop("wipe_verified")

        def _parse_gpu_firmware(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        gpu_firmware = _parse_gpu_firmware(d.pop("gpu_firmware", UNSET))


        def _parse_verified_samples(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        verified_samples = _parse_verified_samples(d.pop("verified_samples", UNSET))


        def _parse_wipe_ms(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        wipe_ms = _parse_wipe_ms(d.pop("wipe_ms", UNSET))


        certificate = cls(
            firmware_ok=firmware_ok,
            gpu_reset=gpu_reset,
            nvme_serial=nvme_serial,
            received_at=received_at,
            signature=signature,
            slot_index=slot_index,
            wipe_method=wipe_method,
            wipe_verified=wipe_verified,
            gpu_firmware=gpu_firmware,
            verified_samples=verified_samples,
            wipe_ms=wipe_ms,
        )


        certificate.additional_properties = d
        return certificate

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
