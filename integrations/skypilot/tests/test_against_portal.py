"""The GPUaaS provider, installed into the pinned SkyPilot, against a portal.

Run by ``cargo xtask test`` with the SkyPilot virtualenv's python, after
``integrations/install.py skypilot``, with ``HOME`` a fresh directory and these set:
``GPUAAS_API`` (the portal's ``/api/v1``), ``GPUAAS_TOKEN`` (read and launch
scopes) and ``GPUAAS_PROJECT``. The portal runs its demo fleet of simulated
hosts: H100 slices and one H100 bare-metal host in eu-west-1, L40S slices in
us-east-1; every SKU is sold in both regions.
"""
import csv
import json
import os
import subprocess
import sys
import unittest
import urllib.request
import uuid

API = os.environ['GPUAAS_API']
TOKEN = os.environ['GPUAAS_TOKEN']
PROJECT = os.environ['GPUAAS_PROJECT']
SKY = os.path.join(os.path.dirname(sys.executable), 'sky')
HOME = os.path.expanduser('~')


def setUpModule():
    # Refuse to write into a real user's SkyPilot state.
    assert os.environ.get('GPUAAS_TEST_HOME') == HOME, (
        'run with HOME=$GPUAAS_TEST_HOME, a directory of its own')
    os.makedirs(os.path.join(HOME, '.gpuaas'), exist_ok=True)
    path = os.path.join(HOME, '.gpuaas', 'config')
    with open(path, 'w', encoding='utf-8') as f:
        f.write(f'api = {API}\ntoken = {TOKEN}\nproject = {PROJECT}\n')
    os.chmod(path, 0o600)
    # SkyPilot canonicalizes GPU names with a table it fetches from its
    # hosted catalog on GitHub, which this machine cannot reach; these are
    # that table's rows for the GPUs the demo fleet sells.
    common = os.path.join(HOME, '.sky', 'catalogs', 'v8', 'common')
    os.makedirs(common, exist_ok=True)
    with open(os.path.join(common, 'accelerators.csv'), 'w',
              encoding='utf-8') as f:
        f.write('AcceleratorName,Clouds\n'
                'H100,"[\'AWS\', \'GCP\', \'Lambda\', \'GPUaaS\']"\n'
                'L40S,"[\'AWS\', \'GPUaaS\']"\n')


def tearDownModule():
    subprocess.run([SKY, 'api', 'stop'], capture_output=True, check=False)


def sky(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([SKY, *args],
                          capture_output=True,
                          text=True,
                          timeout=timeout,
                          check=False,
                          env=dict(os.environ, NO_COLOR='1'))
    print(f'$ sky {" ".join(args)}\n{done.stdout}{done.stderr}', flush=True)
    return done


def api(method: str, path: str) -> dict:
    request = urllib.request.Request(
        f'{API}{path}',
        method=method,
        headers={'Authorization': f'Bearer {TOKEN}'})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
    return json.loads(body) if body else {}


def tagged(cluster_name_on_cloud: str) -> list:
    return api(
        'GET', f'/instances?project={PROJECT}&limit=100'
        f'&tag=skypilot-cluster={cluster_name_on_cloud}')['instances']


class Catalog(unittest.TestCase):

    def test_every_offer_is_a_catalog_row(self):
        from sky.catalog.data_fetchers import fetch_gpuaas
        offers = api('GET', '/offers')['offers']
        path = os.path.join(HOME, 'catalog-under-test.csv')
        fetch_gpuaas.create_catalog(API, path)
        with open(path, encoding='utf-8') as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), len(offers))
        by_key = {(r['InstanceType'], r['Region']): r for r in rows}
        for offer in offers:
            row = by_key[(offer['sku'], offer['region'])]
            self.assertEqual(float(row['AcceleratorCount']),
                             offer['gpu_count'])
            self.assertEqual(float(row['Price']),
                             offer['price_per_hour']['amount_minor'] / 100)
        h100 = by_key[('h100.1x', 'eu-west-1')]
        self.assertEqual(h100['AcceleratorName'], 'H100')
        self.assertIn("'SizeInMiB': 81920", h100['GpuInfo'])
        self.assertEqual(by_key[('l40s.1x', 'us-east-1')]['AcceleratorName'],
                         'L40S')


class Cli(unittest.TestCase):
    """SkyPilot's own commands, through its local API server."""

    def test_1_check_finds_the_cloud_with_the_token(self):
        done = sky('check', 'gpuaas')
        self.assertEqual(done.returncode, 0)
        self.assertRegex(done.stdout, r'GPUaaS: enabled')

    def test_2_show_gpus_lists_the_offers(self):
        done = sky('gpus', 'list', 'H100', '--infra', 'gpuaas')
        self.assertEqual(done.returncode, 0)
        for sku in ('h100.1x', 'h100.2x', 'h100.4x', 'h100.8x',
                    'h100.8x.metal'):
            self.assertRegex(done.stdout, rf'GPUaaS\s+{sku}\s')
        self.assertIn('$ 2.990', done.stdout)
        done = sky('gpus', 'list', '--infra', 'gpuaas')
        self.assertRegex(done.stdout, r'L40S\s+1, 2')

    def test_3_dryrun_chooses_it_for_a_matching_request(self):
        done = sky('launch', '--dryrun', '-y', '--gpus', 'L40S:2', 'nvidia-smi')
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout,
                         r'GPUaaS \((?:eu-west-1|us-east-1)\)\s+l40s\.2x.*✔')
        self.assertIn('Dryrun finished', done.stdout + done.stderr)

    def test_4_a_capacity_refusal_moves_on_to_the_next_region(self):
        # Three bare-metal H100 hosts: the demo fleet has one, in eu-west-1,
        # and none in us-east-1, so each region refuses on capacity in turn.
        name = f'cap-{uuid.uuid4().hex[:6]}'
        done = sky('launch', '-y', '-c', name, '--gpus', 'H100:8',
                   '--num-nodes', '3', 'true')
        out = done.stdout + done.stderr
        self.assertNotEqual(done.returncode, 0)
        self.assertIn('Launching on GPUaaS eu-west-1', out)
        self.assertIn('Launching on GPUaaS us-east-1', out)
        self.assertIn('Trying other potential resources', out)
        self.assertIn('Failed to provision all possible launchable resources',
                      out)
        # Each region's refusal was a capacity refusal, and whatever a region
        # made before refusing was torn down.
        logs = subprocess.run(['grep', '-rh', 'GPUaaS has no capacity',
                               os.path.join(HOME, 'sky_logs')],
                              capture_output=True,
                              text=True,
                              check=False).stdout
        self.assertIn('in eu-west-1', logs)
        self.assertIn('in us-east-1', logs)
        made = [
            i for i in api('GET', f'/instances?project={PROJECT}&limit=100')
            ['instances']
            if i['tags'].get('skypilot-cluster', '').startswith(name)
        ]
        self.assertEqual(
            [i['name'] for i in made if i['projected'] in
             ('placed', 'provisioning', 'running')], [])


class Provisioner(unittest.TestCase):
    """The provider's functions, through SkyPilot's provision router."""

    def config(self, count: int):
        from sky.provision import common
        return common.ProvisionConfig(
            provider_config={'region': 'eu-west-1'},
            authentication_config={'ssh_user': 'ubuntu'},
            docker_config={},
            node_config={
                'InstanceType': 'h100.1x',
                'ImageId': 'ubuntu-24.04-cuda',
                'PublicKey': 'ssh-ed25519 '
                             'AAAAC3NzaC1lZDI1NTE5AAAAIHxD4pbX0dk1Ff1fAxLXmtZk'
                             'vP8tr+5jg9mmv2FLYYoB skypilot@test',
            },
            count=count,
            tags={},
            resume_stopped_nodes=False,
            ports_to_open_on_launch=[8888],
        )

    def test_a_head_and_a_worker_run_answer_and_end(self):
        from sky import provision
        from sky.utils import status_lib
        cluster = f'sky-test-{uuid.uuid4().hex[:8]}'
        record = provision.run_instances('gpuaas', 'eu-west-1', cluster,
                                         cluster, self.config(2))
        self.assertEqual(len(record.created_instance_ids), 2)
        self.assertIn(record.head_instance_id, record.created_instance_ids)

        # In the portal: two instances, tagged, one the head.
        instances = {i['id']: i for i in tagged(cluster)}
        self.assertEqual(set(instances), set(record.created_instance_ids))
        head = instances[record.head_instance_id]
        self.assertEqual(head['name'], f'{cluster}-head')
        self.assertEqual(head['tags']['skypilot-node'], 'head')
        self.assertEqual(
            {i['name'] for i in instances.values()},
            {f'{cluster}-head', f'{cluster}-worker-1'})

        # Asked again (a retry), the same two: nothing is launched twice.
        again = provision.run_instances('gpuaas', 'eu-west-1', cluster,
                                        cluster, self.config(2))
        self.assertEqual(again.created_instance_ids, [])
        self.assertEqual(again.head_instance_id, record.head_instance_id)
        self.assertEqual(len(tagged(cluster)), 2)

        statuses = provision.query_instances('gpuaas', cluster, cluster,
                                             {'region': 'eu-west-1'})
        self.assertEqual(
            statuses, {
                i: (status_lib.ClusterStatus.UP, None)
                for i in record.created_instance_ids
            })

        info = provision.get_cluster_info('gpuaas', 'eu-west-1', cluster,
                                          {'region': 'eu-west-1'})
        self.assertEqual(info.head_instance_id, record.head_instance_id)
        self.assertEqual(info.ssh_user, 'ubuntu')
        for inst_id, [inst] in info.instances.items():
            endpoint = api('GET', f'/instances/{inst_id}')['ssh_endpoint']
            self.assertEqual(inst.external_ip, endpoint['host'])
            self.assertEqual(inst.ssh_port, endpoint['port'])

        ports = provision.query_ports('gpuaas', cluster, ['8888'])
        [endpoint] = ports[8888]
        published = {
            p['guest_port']: p['address']
            for p in api('GET', f'/instances/{record.head_instance_id}')
            ['published']
        }
        self.assertEqual(f'{endpoint.host}:{endpoint.port}', published[8888])

        provision.terminate_instances('gpuaas', cluster,
                                      {'region': 'eu-west-1'})
        provision.terminate_instances('gpuaas', cluster,
                                      {'region': 'eu-west-1'})
        for inst_id in record.created_instance_ids:
            state = api('GET', f'/instances/{inst_id}')['desired_state']
            self.assertEqual(state, 'released')
        self.assertEqual(
            provision.query_instances('gpuaas', cluster, cluster,
                                      {'region': 'eu-west-1'}), {})

        # The name again, after `sky down`: new instances, not the old ones
        # replayed from their idempotency keys.
        record2 = provision.run_instances('gpuaas', 'eu-west-1', cluster,
                                          cluster, self.config(1))
        self.assertEqual(len(record2.created_instance_ids), 1)
        self.assertNotIn(record2.head_instance_id,
                         record.created_instance_ids)
        self.assertEqual(
            api('GET', f'/instances/{record2.head_instance_id}')['name'],
            f'{cluster}-2-head')
        provision.terminate_instances('gpuaas', cluster,
                                      {'region': 'eu-west-1'})

    def test_a_stopped_cluster_resumes_on_its_disks(self):
        from sky import provision
        from sky.utils import status_lib
        cluster = f'sky-stop-{uuid.uuid4().hex[:8]}'
        record = provision.run_instances('gpuaas', 'eu-west-1', cluster,
                                         cluster, self.config(1))
        [head] = record.created_instance_ids
        # `sky stop`: the node's disk is kept, its GPUs released.
        provision.stop_instances('gpuaas', cluster, {'region': 'eu-west-1'})
        provision.stop_instances('gpuaas', cluster, {'region': 'eu-west-1'})
        provision.wait_instances('gpuaas', 'eu-west-1', cluster,
                                 status_lib.ClusterStatus.STOPPED)
        self.assertEqual(
            provision.query_instances('gpuaas', cluster, cluster,
                                      {'region': 'eu-west-1'}),
            {head: (status_lib.ClusterStatus.STOPPED, None)})
        self.assertGreaterEqual(
            api('GET', f'/instances/{head}')['stopped_disk']['size_gib'], 1)
        # `sky start`: the same node, resumed, not a new one.
        again = provision.run_instances('gpuaas', 'eu-west-1', cluster,
                                        cluster, self.config(1))
        self.assertEqual(
            (again.resumed_instance_ids, again.created_instance_ids,
             again.head_instance_id), ([head], [], head))
        self.assertEqual(
            provision.query_instances('gpuaas', cluster, cluster,
                                      {'region': 'eu-west-1'}),
            {head: (status_lib.ClusterStatus.UP, None)})
        # `sky down` of a stopped cluster releases it, disk and all.
        provision.stop_instances('gpuaas', cluster, {'region': 'eu-west-1'})
        provision.wait_instances('gpuaas', 'eu-west-1', cluster,
                                 status_lib.ClusterStatus.STOPPED)
        provision.terminate_instances('gpuaas', cluster,
                                      {'region': 'eu-west-1'})
        self.assertEqual(
            provision.query_instances('gpuaas', cluster, cluster,
                                      {'region': 'eu-west-1'}), {})

    def test_refusals_map_to_skypilots_failover_errors(self):
        from sky import exceptions
        from sky.provision.gpuaas import gpuaas_utils
        from sky.provision.gpuaas import instance
        cases = [
            (gpuaas_utils.NoCapacityError(409, 'sku_unavailable', 'full'),
             exceptions.ResourcesUnavailableError),
            (gpuaas_utils.PolicyRefusedError(403, 'budget_exceeded', 'no'),
             exceptions.ProvisionUnsupportedError),
            (gpuaas_utils.CredentialsError(401, 'unauthenticated', 'no'),
             exceptions.InvalidCloudCredentials),
        ]
        for error, expected in cases:
            with self.assertRaises(expected):
                instance._raise_for_refusal(error, 'eu-west-1')  # pylint: disable=protected-access

    def test_a_bad_token_is_reported_by_check(self):
        from sky.clouds import gpuaas
        path = os.path.join(HOME, '.gpuaas', 'config')
        with open(path, encoding='utf-8') as f:
            good = f.read()
        try:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(f'api = {API}\ntoken = gpk_not_a_token\n')
            ok, why = gpuaas.GPUaaS._check_compute_credentials()  # pylint: disable=protected-access
            self.assertFalse(ok)
            self.assertIn('refused the token', why)
            # And a launch with it is a credentials problem, not capacity.
            from sky import exceptions
            from sky import provision
            with self.assertRaises(exceptions.InvalidCloudCredentials):
                provision.run_instances('gpuaas', 'eu-west-1', 'sky-bad',
                                        'sky-bad', self.config(1))
        finally:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(good)


if __name__ == '__main__':
    unittest.main()
