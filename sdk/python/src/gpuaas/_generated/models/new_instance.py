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
  from ..models.new_instance_tags import NewInstanceTags





T = TypeVar("T", bound="NewInstance")



@_attrs_define
class NewInstance:
    """ What to launch.

        Example:
            {'image': 'ubuntu-24.04-cuda', 'lifetime_hours': 24, 'name': 'train-7', 'project':
                '0a0e0000-0000-4000-8001-000000000001', 'published_ports': [8888], 'region': 'eu-west-1', 'sku': 'h100.1x',
                'ssh_public_keys': ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl
                you@laptop'], 'tags': {'team': 'vision'}}

        Attributes:
            image (str): The marketplace listing's slug (an OS image is a listing too), e.g. `ubuntu-22-04`.
            name (str): 1 to 63 lowercase letters, digits and `-`; unique among the project's live instances.
            sku (str): The SKU's name, as the offers list it.
            lifetime_hours (int | None | Unset): Release it automatically after this many hours (1 to 8760); left out, when
                released.
            project (None | Unset | UUID):
            published_ports (list[int] | Unset):
            region (None | str | Unset): One of the SKU's regions; left out, any of them.
            ssh_key_ids (list[UUID] | Unset): Saved keys of the token's maker (`/ssh-keys`).
            ssh_public_keys (list[str] | Unset): Public key lines to install besides the saved ones.
            tags (NewInstanceTags | Unset): At most 16 labels to find it by: keys of lowercase letters, digits, `.`, `_`,
                `-`.
            user_data (None | str | Unset): Cloud-init user data for the VM: a `#cloud-config` document or a `#!` script, at
                most
                16 KiB, for images that accept it (`accepts_user_data` in `/images`). It runs inside
                the VM after the platform's own set-up (user, SSH keys, network), which it can add to
                but not replace.
            version (None | str | Unset): The listing's version; left out, its newest published one.
            volumes (list[UUID] | Unset): Available volumes of the project to attach (at most 8, all in one region): the
                instance goes to their region, and they are attached with the launch or not at all.
     """

    image: str
    name: str
    sku: str
    lifetime_hours: int | None | Unset = UNSET
    project: None | Unset | UUID = UNSET
    published_ports: list[int] | Unset = UNSET
    region: None | str | Unset = UNSET
    ssh_key_ids: list[UUID] | Unset = UNSET
    ssh_public_keys: list[str] | Unset = UNSET
    tags: NewInstanceTags | Unset = UNSET
    user_data: None | str | Unset = UNSET
    version: None | str | Unset = UNSET
    volumes: list[UUID] | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.new_instance_tags import NewInstanceTags # noqa: PLC0415
        image = self.image

        name = self.name

        sku = self.sku

        lifetime_hours: int | None | Unset
        if isinstance(self.lifetime_hours, Unset):
            lifetime_hours = UNSET
        else:
            lifetime_hours = self.lifetime_hours

        project: None | str | Unset
        if isinstance(self.project, Unset):
            project = UNSET
        elif isinstance(self.project, UUID):
            project = str(self.project)
        else:
            project = self.project

        published_ports: list[int] | Unset = UNSET
        if not isinstance(self.published_ports, Unset):
            published_ports = self.published_ports



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

        volumes: list[str] | Unset = UNSET
        if not isinstance(self.volumes, Unset):
            volumes = []
            for volumes_item_data in self.volumes:
                volumes_item = str(volumes_item_data)
                volumes.append(volumes_item)




        field_dict: dict[str, Any] = {}

        field_dict.update({
            "image": image,
            "name": name,
            "sku": sku,
        })
        if lifetime_hours is not UNSET:
            field_dict["lifetime_hours"] = lifetime_hours
        if project is not UNSET:
            field_dict["project"] = project
        if published_ports is not UNSET:
            field_dict["published_ports"] = published_ports
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
        if volumes is not UNSET:
            field_dict["volumes"] = volumes

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.new_instance_tags import NewInstanceTags # noqa: PLC0415
        d = dict(src_dict)
        image = d.pop("image")

        name = d.pop("name")

        sku = d.pop("sku")

        def _parse_lifetime_hours(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        lifetime_hours = _parse_lifetime_hours(d.pop("lifetime_hours", UNSET))


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


        published_ports = cast(list[int], d.pop("published_ports", UNSET))


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
        tags: NewInstanceTags | Unset
        if isinstance(_tags,  Unset):
            tags = UNSET
        else:
            tags = NewInstanceTags.from_dict(_tags)




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


        _volumes = d.pop("volumes", UNSET)
        volumes: list[UUID] | Unset = UNSET
        if _volumes is not UNSET:
            volumes = []
            for volumes_item_data in _volumes:
                volumes_item = UUID(volumes_item_data)



                volumes.append(volumes_item)


        new_instance = cls(
            image=image,
            name=name,
            sku=sku,
            lifetime_hours=lifetime_hours,
            project=project,
            published_ports=published_ports,
            region=region,
            ssh_key_ids=ssh_key_ids,
            ssh_public_keys=ssh_public_keys,
            tags=tags,
            user_data=user_data,
            version=version,
            volumes=volumes,
        )

        return new_instance

