"""The GPUaaS backend, installed into the pinned dstack, against a portal.

Run by ``cargo xtask test`` with the dstack virtualenv's python, after
``integrations/install.py dstack``, with ``GPUAAS_API`` (the portal's ``/api/v1``),
``GPUAAS_TOKEN`` (read and launch scopes) and ``GPUAAS_PROJECT`` set. The
portal runs its demo fleet of simulated hosts: H100 slices and one H100
bare-metal host in eu-west-1, L40S slices in us-east-1; every SKU is sold in
both regions.
"""
import json
import os
import sys
import time
import unittest
import urllib.request
import uuid

import yaml

# gpuhunt's RunPod module asks RunPod's API for its GPU list when it is imported, and this
# machine cannot reach RunPod; marking it absent makes dstack leave the RunPod backend out, as
# it does for any backend whose dependencies are missing (its registry imports each in a
# `try ... except ImportError`).
sys.modules["gpuhunt.providers.runpod"] = None

from dstack._internal.core.backends.configurators import list_available_configurator_classes
from dstack._internal.core.backends.features import BACKENDS_WITH_CREATE_INSTANCE_SUPPORT
from dstack._internal.core.backends.gpuaas.configurator import GpuaasConfigurator
from dstack._internal.core.backends.gpuaas.models import GpuaasBackendConfigWithCreds
from dstack._internal.core.backends.models import AnyBackendFileConfigWithCreds
from dstack._internal.core.errors import BackendInvalidCredentialsError, NoCapacityError
from dstack._internal.core.models.backends.base import BackendType
from dstack._internal.core.models.instances import (
    InstanceAvailability,
    InstanceConfiguration,
    SSHKey,
)
from dstack._internal.core.models.resources import ResourcesSpec
from dstack._internal.core.models.runs import Requirements
from pydantic import parse_obj_as

API = os.environ["GPUAAS_API"]
TOKEN = os.environ["GPUAAS_TOKEN"]
PROJECT = os.environ["GPUAAS_PROJECT"]
KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHxD4pbX0dk1Ff1fAxLXmtZkvP8tr+5jg9mmv2FLYYoB dstack@test"
)


def api(path: str) -> dict:
    request = urllib.request.Request(
        f"{API}{path}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def server_config(token: str = TOKEN) -> GpuaasBackendConfigWithCreds:
    """The backend as an operator writes it in dstack's server/config.yaml, read by dstack's
    own model of that file."""
    text = f"""
type: gpuaas
api_url: {API}
project: {PROJECT}
creds:
  type: api_token
  token: {token}
"""
    config = parse_obj_as(AnyBackendFileConfigWithCreds, yaml.safe_load(text))
    assert isinstance(config, GpuaasBackendConfigWithCreds), config
    return config


def backend():
    configurator = GpuaasConfigurator()
    config = server_config()
    configurator.validate_config(config, default_creds_enabled=False)
    record = configurator.create_backend("main", config)
    return configurator.get_backend(record)


def instance_config(name: str) -> InstanceConfiguration:
    return InstanceConfiguration(
        project_name="main", instance_name=name, user="admin", ssh_keys=[SSHKey(public=KEY)]
    )


class Registration(unittest.TestCase):
    def test_the_backend_is_registered_and_creates_instances(self):
        types = [c.TYPE for c in list_available_configurator_classes()]
        self.assertIn(BackendType.GPUAAS, types)
        self.assertIn(BackendType.GPUAAS, BACKENDS_WITH_CREATE_INSTANCE_SUPPORT)

    def test_a_bad_token_is_refused_as_invalid_credentials(self):
        with self.assertRaises(BackendInvalidCredentialsError):
            GpuaasConfigurator().validate_config(
                server_config("gpk_not_a_token"), default_creds_enabled=False
            )


class Compute(unittest.TestCase):
    def test_offers_follow_the_portals_with_availability(self):
        compute = backend().compute()
        requirements = Requirements(resources=ResourcesSpec.parse_obj({"gpu": "H100:1"}))
        offers = {(o.instance.name, o.region): o for o in compute.get_offers(requirements)}
        portal = {(o["sku"], o["region"]): o for o in api("/offers")["offers"]}
        self.assertIn(("h100.1x", "eu-west-1"), offers)
        self.assertNotIn(("l40s.1x", "us-east-1"), offers)
        for key, offer in offers.items():
            self.assertEqual(offer.instance.resources.gpus[0].name, "H100")
            self.assertEqual(offer.instance.resources.gpus[0].memory_mib, 80 * 1024)
            self.assertEqual(len(offer.instance.resources.gpus), 1)
            self.assertEqual(offer.price, portal[key]["price_per_hour"]["amount_minor"] / 100)
            available = portal[key]["launchable"] > 0
            self.assertEqual(offer.availability == InstanceAvailability.AVAILABLE, available)
        # No H100 host in us-east-1: sold there, but not available now.
        self.assertEqual(
            offers[("h100.1x", "us-east-1")].availability, InstanceAvailability.NOT_AVAILABLE
        )

    def test_an_instance_is_created_reached_and_terminated(self):
        compute = backend().compute()
        requirements = Requirements(resources=ResourcesSpec.parse_obj({"gpu": "H100:1"}))
        [offer] = [
            o
            for o in compute.get_offers(requirements)
            if (o.instance.name, o.region) == ("h100.1x", "eu-west-1")
        ]
        jpd = compute.create_instance(offer, instance_config(f"t-{uuid.uuid4().hex[:6]}"), None)
        launched = api(f"/instances/{jpd.instance_id}")
        self.assertEqual(launched["sku"], "h100.1x")
        self.assertEqual(launched["region"], "eu-west-1")
        self.assertTrue(launched["name"].startswith("dstack-main-t-"), launched["name"])
        self.assertEqual(jpd.username, "ubuntu")

        deadline = time.time() + 120
        while jpd.hostname is None:
            self.assertLess(time.time(), deadline, "not running after 120 s")
            time.sleep(1)
            compute.update_provisioning_data(jpd, KEY, "unused")
        endpoint = api(f"/instances/{jpd.instance_id}")["ssh_endpoint"]
        self.assertEqual(
            (jpd.hostname, jpd.ssh_port, jpd.username),
            (endpoint["host"], endpoint["port"], endpoint["user"]),
        )

        compute.terminate_instance(jpd.instance_id, jpd.region)
        compute.terminate_instance(jpd.instance_id, jpd.region)
        self.assertEqual(api(f"/instances/{jpd.instance_id}")["desired_state"], "released")

    def test_a_capacity_refusal_lets_dstack_try_its_next_offer(self):
        compute = backend().compute()
        requirements = Requirements(resources=ResourcesSpec.parse_obj({"gpu": "H100:8"}))
        [offer] = [
            o
            for o in compute.get_offers(requirements)
            if (o.instance.name, o.region) == ("h100.8x.metal", "us-east-1")
        ]
        with self.assertRaises(NoCapacityError):
            compute.create_instance(offer, instance_config("nope"), None)


if __name__ == "__main__":
    unittest.main()
