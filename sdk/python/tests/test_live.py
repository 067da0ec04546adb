"""The SDK against a running portal with a fleet of (simulated) hosts.

`cargo xtask test` runs these after the API conformance checks, with the environment below;
without it they say SKIPPED.

    GPUAAS_API      the API's base URL
    GPUAAS_TOKEN    an API token with the read and launch scopes
    GPUAAS_PROJECT  a project it launches in, with no policies in the way
"""

import os
import unittest
import uuid

from gpuaas import Cloud, errors

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl sdk@tests"
NEEDED = ("GPUAAS_API", "GPUAAS_TOKEN", "GPUAAS_PROJECT")
MISSING = [n for n in NEEDED if not os.environ.get(n)]


@unittest.skipIf(MISSING, f"SKIPPED: no portal to test against ({', '.join(MISSING)} unset)")
class Live(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cloud = Cloud()
        cls.project = os.environ["GPUAAS_PROJECT"]
        ready = [o for o in cls.cloud.offers() if o.launchable > 0 and o.gpu_count == 1]
        if not ready:
            raise AssertionError("no 1-GPU offer can launch now")
        cls.offer = ready[0]

    @classmethod
    def tearDownClass(cls):
        cls.cloud.close()

    def launch(self, name, **kw):
        return self.cloud.launch(
            project=self.project,
            sku=self.offer.sku,
            region=self.offer.region,
            image="ubuntu-24.04-cuda",
            name=name,
            ssh_public_keys=[KEY],
            **kw,
        )

    def test_launch_wait_list_with_pages_and_release(self):
        key = str(uuid.uuid4())
        first = self.launch(f"sdk-{uuid.uuid4().hex[:8]}", idempotency_key=key)
        again = self.launch(first.name, idempotency_key=key)
        self.assertEqual(again.id, first.id, "one key, one instance")
        second = self.launch(f"sdk-{uuid.uuid4().hex[:8]}", tags={"suite": "sdk"})
        try:
            running = self.cloud.wait_until_running(first.id, timeout=180)
            self.assertTrue(running.ssh.startswith("ssh "), running.ssh)
            self.cloud.wait_until_running(second.id, timeout=180)

            # One instance a page: the iterator follows the cursors, each once.
            seen = [i.id for i in self.cloud.instances(project=self.project, page_size=1)]
            self.assertEqual(len(seen), len(set(seen)), "no instance twice")
            self.assertIn(first.id, seen)
            self.assertIn(second.id, seen)
            tagged = [i.id for i in self.cloud.instances(tag="suite=sdk", page_size=1)]
            self.assertIn(second.id, tagged)
            self.assertNotIn(first.id, tagged)

            # A volume of its own: made, attached, detached, deleted.
            volume = self.cloud.create_volume(
                project=self.project, name=f"sdk-{uuid.uuid4().hex[:8]}",
                region=self.offer.region, size_gib=1,
            )
            self.cloud.wait_for_volume(volume.id, "available")
            self.cloud.attach_volume(volume.id, first.id)
            attached = self.cloud.wait_for_volume(volume.id, "in_use")
            self.assertEqual(attached.attached_to, first.id)
            with self.assertRaises(errors.Conflict) as refused:
                self.cloud.delete_volume(volume.id)
            self.assertEqual(refused.exception.status, 409)
            self.cloud.detach_volume(volume.id)
            self.cloud.wait_for_volume(volume.id, "available")
            self.cloud.delete_volume(volume.id)
        finally:
            for i in (first, second):
                self.cloud.release(i.id)
        self.assertEqual(self.cloud.release(first.id).id, first.id, "releasing again answers")
        done = self.cloud.wait_until_released(first.id, timeout=180)
        self.assertEqual(done.projected, "released")

    def test_an_instance_stops_and_starts_again_under_its_id(self):
        first = self.launch(f"sdk-{uuid.uuid4().hex[:8]}", tags={"suite": "stop"})
        try:
            self.cloud.wait_until_running(first.id, timeout=180)
            with self.assertRaises(errors.Conflict):
                self.cloud.start(first.id)
            self.assertEqual(self.cloud.stop(first.id).projected, "stopping")
            stopped = self.cloud.wait_until_stopped(first.id, timeout=180)
            self.assertIsNone(stopped.ssh)
            self.assertGreaterEqual(stopped.stopped_disk.size_gib, 1)
            self.assertEqual(stopped.tags.to_dict(), {"suite": "stop"})
            started = self.cloud.start(first.id)
            self.assertEqual((started.id, started.name), (first.id, first.name))
            running = self.cloud.wait_until_running(first.id, timeout=180)
            self.assertTrue(running.ssh.startswith("ssh "), running.ssh)
        finally:
            self.cloud.release(first.id)
        self.assertEqual(self.cloud.wait_until_released(first.id, timeout=180).projected, "released")

    def test_a_cluster_launches_whole_runs_and_is_released_whole(self):
        # The demo fleet's eu-west-1 HGX hosts are on one fabric (a leaf each, one spine).
        name = f"sdk-{uuid.uuid4().hex[:6]}"
        order = dict(
            project=self.project, sku="h100.2x", region="eu-west-1",
            image="ubuntu-24.04-cuda", name=name, ssh_public_keys=[KEY],
        )
        with self.assertRaises(errors.NoCapacity) as refused:
            self.cloud.launch_cluster(members=5, locality="leaf", locality_required=True, **order)
        self.assertIn("one leaf", str(refused.exception))
        key = str(uuid.uuid4())
        c = self.cloud.launch_cluster(members=2, locality="leaf", idempotency_key=key, **order)
        try:
            self.assertEqual(
                self.cloud.launch_cluster(members=2, locality="leaf", idempotency_key=key, **order).id,
                c.id,
                "one key, one cluster",
            )
            self.assertEqual([m.name for m in c.members], [f"{name}-1", f"{name}-2"])
            running = self.cloud.wait_until_cluster_running(c.id, timeout=300)
            self.assertEqual(running.placed_within, "leaf")
            self.assertTrue(all(m.ssh.startswith("ssh ") for m in running.members))
            self.assertIn(c.id, [x.id for x in self.cloud.clusters(project=self.project)])
            topology = self.cloud.cluster_topology(c.id)
            leaf = running.members[0].leaf
            self.assertIn(f"SwitchName={leaf} Nodes={name}-1,{name}-2", topology)
            hosts = self.cloud.cluster_topology(c.id, format="hosts")
            self.assertTrue(hosts.startswith(f"# {name}:"), hosts)
            # A member is released with its cluster, not alone.
            with self.assertRaises(errors.Conflict):
                self.cloud.release(c.members[0].id)
        finally:
            released = self.cloud.release_cluster(c.id)
        self.assertIn(released.state, ("releasing", "released"))
        for m in c.members:
            self.assertEqual(self.cloud.wait_until_released(m.id, timeout=180).projected, "released")

    def test_refusals_are_typed(self):
        with self.assertRaises(errors.Invalid) as bad:
            self.launch("Not A Valid Name!")
        self.assertEqual((bad.exception.status, bad.exception.field), (400, "name"))
        with self.assertRaises(errors.NotFound) as missing:
            self.cloud.instance(uuid.uuid4())
        self.assertEqual(missing.exception.code, "not_found")
        with self.assertRaises(errors.Unauthenticated):
            Cloud(os.environ["GPUAAS_API"], "gpk_not-a-token", max_retries=0).instance(uuid.uuid4())

    def test_rate_limited_calls_are_retried_after_retry_after(self):
        # More calls than the organization's tokens may make in 10 s (100): the ones over
        # are answered 429 with Retry-After, and sent again after it; all succeed.
        before = self.cloud.retries
        for _ in range(130):
            self.cloud.volumes(project=self.project)
        self.assertGreater(self.cloud.retries, before, "some calls were limited and retried")


class Errors(unittest.TestCase):
    def test_a_problem_becomes_its_class(self):
        e = errors.from_response(409, {"code": "sku_unavailable", "detail": "nothing fits"})
        self.assertIsInstance(e, errors.NoCapacity)
        e = errors.from_response(403, {"code": "quota_exceeded", "detail": "max 8 GPUs"})
        self.assertIsInstance(e, errors.PolicyDenied)
        e = errors.from_response(400, {"code": "invalid", "detail": "bad", "field": "sku"})
        self.assertEqual((type(e), e.field), (errors.Invalid, "sku"))
        e = errors.from_response(502, None)
        self.assertIsInstance(e, errors.ServerError)


if __name__ == "__main__":
    unittest.main()
