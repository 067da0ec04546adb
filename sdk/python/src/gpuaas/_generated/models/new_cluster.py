from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from uuid import UUID

if TYPE_CHECKING:
  from ..models.new_cluster_tags import NewClusterTags





T = TypeVar("T", bound="NewCluster")



@_attrs_define
class NewCluster:
    """ A cluster to launch.

        Example:
            {'image': 'ubuntu-24.04-cuda', 'locality': 'leaf', 'locality_required': True, 'members': 4, 'name': 'llama',
                'project': '0a0e0000-0000-4000-8001-000000000001', 'sku': 'h100.8x', 'ssh_public_keys': ['ssh-ed25519
                AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop']}

        Attributes:
            image (str): The marketplace listing's slug every member runs.
            locality (str): How close: `leaf` (one leaf switch), `spine` (one spine group) or `fabric`.
            members (int): How many members: 2 to 128.
            name (str): 1 to 56 lowercase letters, digits and `-`; members are named `<name>-1`, `<name>-2`, ….
            sku (str): The SKU every member is, as the offers list it.
            lifetime_hours (int | None | Unset): Release every member automatically after this many hours (1 to 8760).
            locality_required (bool | Unset): True: within `locality` or not at all. False (the default): within `locality`
                if it
                can be had now, else the next wider one.
            project (None | Unset | UUID):
            region (None | str | Unset): One of the SKU's regions; left out, any of them.
            ssh_key_ids (list[UUID] | Unset): Saved keys of the token's maker (`/ssh-keys`).
            ssh_public_keys (list[str] | Unset): Public key lines to install on every member besides the saved ones.
            tags (NewClusterTags | Unset): Labels every member carries.
            user_data (None | str | Unset): Cloud-init user data every member runs at first boot.
            version (None | str | Unset): The listing's version; left out, its newest published one.
     """

    image: str
    locality: str
    members: int
    name: str
    sku: str
    lifetime_hours: int | None | Unset = UNSET
    locality_required: bool | Unset = UNSET
    project: None | Unset | UUID = UNSET
    region: None | str | Unset = UNSET
    ssh_key_ids: list[UUID] | Unset = UNSET
    ssh_public_keys: list[str] | Unset = UNSET
    tags: NewClusterTags | Unset = UNSET
    user_data: None | str | Unset = UNSET
    version: None | str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.new_cluster_tags import NewClusterTags # noqa: PLC0415
        image = self.image

        locality = self.locality

        members = self.members

        name = self.name

        sku = self.sku

        lifetime_hours: int | None | Unset
        if isinstance(self.lifetime_hours, Unset):
            lifetime_hours = UNSET
        else:
            lifetime_hours = self.lifetime_hours

        locality_required = self.locality_required

        project: None | str | Unset
        if isinstance(self.project, Unset):
            project = UNSET
        elif isinstance(self.project, UUID):
            project = str(self.project)
        else:
            project = self.project

        region: None | str | Unset
        if isinstance(self.region, Unset):
            region = UNSET
        else:
            region = self.region

        ssh_key_ids: list[str] | Unset = UNSET
        if not isinstance(self.ssh_key_ids, Unset):
            ssh_key_ids = []
            for ssh_key_ids_item_data in self.ssh_key_ids:
                ssh_key_ids_item = str(ssh_key_ids_item_data)
                ssh_key_ids.append(ssh_key_ids_item)



        ssh_public_keys: list[str] | Unset = UNSET
        if not isinstance(self.ssh_public_keys, Unset):
            ssh_public_keys = self.ssh_public_keys



        tags: dict[str, Any] | Unset = UNSET
        if not isinstance(self.tags, Unset):
            tags = self.tags.to_dict()

        user_data: None | str | Unset
        if isinstance(self.user_data, Unset):
            user_data = UNSET
        else:
            user_data = self.user_data

        version: None | str | Unset
        if isinstance(self.version, Unset):
            version = UNSET
        else:
            version = self.version


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "image": image,
            "locality": locality,
            "members": members,
            "name": name,
            "sku": sku,
        })
        if lifetime_hours is not UNSET:
            field_dict["lifetime_hours"] = lifetime_hours
        if locality_required is not UNSET:
            field_dict["locality_required"] = locality_required
        if project is not UNSET:
            field_dict["project"] = project
        if region is not UNSET:
            field_dict["region"] = region
        if ssh_key_ids is not UNSET:
            field_dict["ssh_key_ids"] = ssh_key_ids
        if ssh_public_keys is not UNSET:
            field_dict["ssh_public_keys"] = ssh_public_keys
        if tags is not UNSET:
            field_dict["tags"] = tags
        if user_data is not UNSET:
            field_dict["user_data"] = user_data
        if version is not UNSET:
            field_dict["version"] = version

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.new_cluster_tags import NewClusterTags # noqa: PLC0415
        d = dict(src_dict)
        image = d.pop("image")

        locality = d.pop("locality")

        members = d.pop("members")

        name = d.pop("name")

        sku = d.pop("sku")

        def _parse_lifetime_hours(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        lifetime_hours = _parse_lifetime_hours(d.pop("lifetime_hours", UNSET))


        locality_required = d.pop("locality_required", UNSET)

        def _parse_project(data: object) -> None | Unset | UUID:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                project_type_1 = UUID(data)



                return project_type_1
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(None | Unset | UUID, data)

        project = _parse_project(d.pop("project", UNSET))


        def _parse_region(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        region = _parse_region(d.pop("region", UNSET))


        _ssh_key_ids = d.pop("ssh_key_ids", UNSET)
        ssh_key_ids: list[UUID] | Unset = UNSET
        if _ssh_key_ids is not UNSET:
            ssh_key_ids = []
            for ssh_key_ids_item_data in _ssh_key_ids:
                ssh_key_ids_item = UUID(ssh_key_ids_item_data)



                ssh_key_ids.append(ssh_key_ids_item)


        ssh_public_keys = cast(list[str], d.pop("ssh_public_keys", UNSET))


        _tags = d.pop("tags", UNSET)
        tags: NewClusterTags | Unset
        if isinstance(_tags,  Unset):
            tags = UNSET
        else:
            tags = NewClusterTags.from_dict(_tags)




        def _parse_user_data(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        user_data = _parse_user_data(d.pop("user_data", UNSET))


        def _parse_version(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        version = _parse_version(d.pop("version", UNSET))


        new_cluster = cls(
            image=image,
            locality=locality,
            members=members,
            name=name,
            sku=sku,
            lifetime_hours=lifetime_hours,
            locality_required=locality_required,
            project=project,
            region=region,
            ssh_key_ids=ssh_key_ids,
            ssh_public_keys=ssh_public_keys,
            tags=tags,
            user_data=user_data,
            version=version,
        )

        return new_cluster

