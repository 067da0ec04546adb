"""GPUaaS instance provisioning.

A SkyPilot cluster is a set of GPUaaS instances sharing the tag
``skypilot-cluster=<cluster_name_on_cloud>``; the head is named
``<cluster>-head`` and the workers ``<cluster>-worker-<i>``. A cluster launched
again after ``sky down`` (or in the next region after a refusal) is a new
generation: its names carry the generation (``<cluster>-2-head``), since a
name stays taken while its instance is being released. Each launch carries an
``Idempotency-Key`` made from the cluster, its generation and the node, so a
launch whose answer was lost is answered again rather than made twice.

Refusals are told apart so that failover works (see
``FailoverCloudErrorHandlerV2``): a capacity refusal (``sku_unavailable``) is
``ResourcesUnavailableError`` and SkyPilot tries the next region; a policy,
quota or budget refusal would be the same in every region of this cloud, so it
is ``ProvisionUnsupportedError``, which failover does not retry here; a bad
token is ``InvalidCloudCredentials``.
"""
import hashlib
import time
import typing
from typing import Any, Dict, List, Optional, Set, Tuple

from sky import exceptions
from sky import sky_logging
from sky.provision import common
from sky.provision.gpuaas import gpuaas_utils
from sky.utils import resources_utils
from sky.utils import status_lib

logger = sky_logging.init_logger(__name__)

CLUSTER_TAG = 'skypilot-cluster'
NODE_TAG = 'skypilot-node'
HEAD_NODE_SUFFIX = '-head'
WORKER_NODE_SUFFIX = '-worker'

POLL_INTERVAL_SECONDS = 2
LAUNCH_TIMEOUT_SECONDS = 900

# The instance's state as the API projects it (`projected`), to SkyPilot's.
# An instance that is being released, or has been, or failed (a failed launch
# is released by the platform) no longer exists for SkyPilot; a stopped one
# keeps its disk and its id until it is started again.
_STATUS_MAP: Dict[str, Optional[status_lib.ClusterStatus]] = {
    'placed': status_lib.ClusterStatus.INIT,
    'provisioning': status_lib.ClusterStatus.INIT,
    'running': status_lib.ClusterStatus.UP,
    'stopping': status_lib.ClusterStatus.STOPPED,
    'stopped': status_lib.ClusterStatus.STOPPED,
    'releasing': None,
    'cleaning': None,
    'released': None,
    'failed': None,
}
_LIVE = tuple(state for state, status in _STATUS_MAP.items() if status is not None)
_STOPPED = ('stopping', 'stopped')


def _client() -> gpuaas_utils.GpuaasClient:
    try:
        return gpuaas_utils.GpuaasClient.from_credentials()
    except (OSError, ValueError) as e:
        raise exceptions.InvalidCloudCredentials(
            f'GPUaaS credentials: {e}') from e


def _cluster_tag(cluster_name_on_cloud: str) -> str:
    return f'{CLUSTER_TAG}={cluster_name_on_cloud}'


def _all_instances(client: gpuaas_utils.GpuaasClient,
                   cluster_name_on_cloud: str) -> List[Dict[str, Any]]:
    return list(client.instances(_cluster_tag(cluster_name_on_cloud)))


def _live_instances(client: gpuaas_utils.GpuaasClient,
                    cluster_name_on_cloud: str) -> Dict[str, Dict[str, Any]]:
    return {
        inst['id']: inst
        for inst in _all_instances(client, cluster_name_on_cloud)
        if inst['projected'] in _LIVE
    }


def _is_head(instance: Dict[str, Any]) -> bool:
    return instance['tags'].get(NODE_TAG) == 'head'


def _head_id(instances: Dict[str, Dict[str, Any]]) -> Optional[str]:
    for inst_id, inst in instances.items():
        if _is_head(inst):
            return inst_id
    return None


def _idempotency_key(cluster_name_on_cloud: str, generation: int,
                     node: str) -> str:
    digest = hashlib.sha256(
        f'{cluster_name_on_cloud}/{generation}/{node}'.encode()).hexdigest()
    return f'skypilot-{digest[:40]}'


def _raise_for_refusal(e: gpuaas_utils.GpuaasApiError,
                       region: str) -> typing.NoReturn:
    if isinstance(e, gpuaas_utils.NoCapacityError):
        raise exceptions.ResourcesUnavailableError(
            f'GPUaaS has no capacity for this in {region}: {e.detail}') from e
    if isinstance(e, gpuaas_utils.PolicyRefusedError):
        raise exceptions.ProvisionUnsupportedError(
            f'GPUaaS refused the launch ({e.code}): {e.detail}') from e
    if isinstance(e, gpuaas_utils.CredentialsError):
        raise exceptions.InvalidCloudCredentials(
            f'GPUaaS refused the token ({e.code}): {e.detail}') from e
    raise e


def run_instances(region: str, cluster_name: str, cluster_name_on_cloud: str,
                  config: common.ProvisionConfig) -> common.ProvisionRecord:
    """Runs instances for the given cluster."""
    del cluster_name  # unused
    try:
        return _run_instances(_client(), region, cluster_name_on_cloud, config)
    except gpuaas_utils.GpuaasApiError as e:
        # What was made before a refusal stays: SkyPilot tears the cluster
        # down (terminate_instances) before it fails over.
        _raise_for_refusal(e, region)


def _run_instances(client: gpuaas_utils.GpuaasClient, region: str,
                   cluster_name_on_cloud: str,
                   config: common.ProvisionConfig) -> common.ProvisionRecord:
    everything = _all_instances(client, cluster_name_on_cloud)
    live = {i['id']: i for i in everything if i['projected'] in _LIVE}
    # Instances of an earlier launch of this cluster name (released since)
    # make a new generation, so that their idempotency keys are not reused.
    generation = len(everything) - len(live)
    head_id = _head_id(live)
    to_start = config.count - len(live)
    if to_start < 0:
        raise RuntimeError(
            f'Cluster {cluster_name_on_cloud} already has {len(live)} nodes, '
            f'but {config.count} are required.')

    # Stopped nodes start again on their disks, under their ids (`sky start`).
    resumed = [
        inst_id for inst_id, inst in live.items()
        if inst['projected'] in _STOPPED
    ]
    for inst_id in resumed:
        _wait_for(client, cluster_name_on_cloud, {inst_id}, ('stopped',))
        client.start(inst_id)
        logger.debug(f'Started {live[inst_id]["name"]} ({inst_id}) again.')

    taken = {inst['tags'].get(NODE_TAG) for inst in live.values()}
    prefix = (cluster_name_on_cloud if generation == 0 else
              f'{cluster_name_on_cloud}-{generation}')
    created: List[str] = []
    worker = 0
    while len(created) < to_start:
        if head_id is None and 'head' not in taken:
            node = 'head'
            name = f'{prefix}{HEAD_NODE_SUFFIX}'
        else:
            worker += 1
            node = f'worker-{worker}'
            if node in taken:
                continue
            name = f'{prefix}{WORKER_NODE_SUFFIX}-{worker}'
        key = _idempotency_key(cluster_name_on_cloud, generation, node)
        launched = client.launch(
            _launch_body(region, cluster_name_on_cloud, config, name, node),
            key)
        logger.debug(f'Launched {name} ({launched["id"]}).')
        created.append(launched['id'])
        taken.add(node)
        if node == 'head':
            head_id = launched['id']

    _wait_running(client, cluster_name_on_cloud, set(live) | set(created))
    assert head_id is not None, 'the head is launched first'
    return common.ProvisionRecord(provider_name='gpuaas',
                                  cluster_name=cluster_name_on_cloud,
                                  region=region,
                                  zone=None,
                                  head_instance_id=head_id,
                                  resumed_instance_ids=resumed,
                                  created_instance_ids=created)


def _launch_body(region: str, cluster_name_on_cloud: str,
                 config: common.ProvisionConfig, name: str,
                 node: str) -> Dict[str, Any]:
    node_config = config.node_config
    body: Dict[str, Any] = {
        'sku': node_config['InstanceType'],
        'region': region,
        'image': node_config['ImageId'],
        'name': name,
        'ssh_public_keys': [node_config['PublicKey'].strip()],
        'tags': {
            CLUSTER_TAG: cluster_name_on_cloud,
            NODE_TAG: node
        },
    }
    ports = sorted(
        resources_utils.port_ranges_to_set(
            [str(p) for p in config.ports_to_open_on_launch or []]))
    if ports:
        body['published_ports'] = ports
    return body


def _wait_running(client: gpuaas_utils.GpuaasClient,
                  cluster_name_on_cloud: str, nodes: Set[str]) -> None:
    """Until every node runs; a node that failed fails the launch."""
    deadline = time.time() + LAUNCH_TIMEOUT_SECONDS
    while True:
        mine = [
            i for i in _all_instances(client, cluster_name_on_cloud)
            if i['id'] in nodes
        ]
        ended = [i for i in mine if i['projected'] not in _LIVE]
        if ended:
            detail = client.instance(ended[0]['id']).get('failure') or ''
            raise exceptions.ResourcesUnavailableError(
                f'GPUaaS instance {ended[0]["name"]} is '
                f'{ended[0]["projected"]} instead of running: {detail}')
        running = [i for i in mine if i['projected'] == 'running']
        if len(running) == len(nodes):
            return
        if time.time() > deadline:
            raise TimeoutError(
                f'{len(running)} of {len(nodes)} GPUaaS instances of '
                f'{cluster_name_on_cloud} running after '
                f'{LAUNCH_TIMEOUT_SECONDS} s')
        time.sleep(POLL_INTERVAL_SECONDS)


def _wait_for(client: gpuaas_utils.GpuaasClient, cluster_name_on_cloud: str,
              nodes: Set[str], states: Tuple[str, ...]) -> None:
    """Until every node in `nodes` is in one of `states`."""
    deadline = time.time() + LAUNCH_TIMEOUT_SECONDS
    while True:
        mine = [
            i for i in _all_instances(client, cluster_name_on_cloud)
            if i['id'] in nodes
        ]
        if all(i['projected'] in states for i in mine):
            return
        if time.time() > deadline:
            raise TimeoutError(
                f'GPUaaS instances of {cluster_name_on_cloud} not '
                f'{" or ".join(states)} after {LAUNCH_TIMEOUT_SECONDS} s')
        time.sleep(POLL_INTERVAL_SECONDS)


def wait_instances(region: str, cluster_name_on_cloud: str,
                   state: Optional[status_lib.ClusterStatus]) -> None:
    """run_instances waits for running; this waits for a stop to finish."""
    del region  # unused
    if state == status_lib.ClusterStatus.STOPPED:
        client = _client()
        live = _live_instances(client, cluster_name_on_cloud)
        _wait_for(client, cluster_name_on_cloud, set(live), ('stopped',))


def stop_instances(
    cluster_name_on_cloud: str,
    provider_config: Optional[Dict[str, Any]] = None,
    worker_only: bool = False,
) -> None:
    """See sky/provision/__init__.py. Each node's disk is kept (billed as
    storage) and its GPUs are released; stopping again changes nothing."""
    del provider_config  # unused
    client = _client()
    for inst_id, inst in _live_instances(client,
                                         cluster_name_on_cloud).items():
        if worker_only and _is_head(inst):
            continue
        if inst['projected'] in _STOPPED:
            continue
        try:
            client.stop(inst_id)
        except gpuaas_utils.GpuaasApiError as e:
            if e.status != 404:
                raise


def terminate_instances(
    cluster_name_on_cloud: str,
    provider_config: Optional[Dict[str, Any]] = None,
    worker_only: bool = False,
) -> None:
    """See sky/provision/__init__.py. Releasing is idempotent."""
    del provider_config  # unused
    client = _client()
    for inst_id, inst in _live_instances(client,
                                         cluster_name_on_cloud).items():
        if worker_only and _is_head(inst):
            continue
        try:
            client.release(inst_id)
        except gpuaas_utils.GpuaasApiError as e:
            if e.status != 404:
                raise


def get_cluster_info(
        region: str,
        cluster_name_on_cloud: str,
        provider_config: Optional[Dict[str, Any]] = None) -> common.ClusterInfo:
    del region  # unused
    client = _client()
    instances: Dict[str, List[common.InstanceInfo]] = {}
    head_id = None
    ssh_user = None
    for inst_id, inst in _live_instances(client,
                                         cluster_name_on_cloud).items():
        if inst['projected'] != 'running':
            continue
        endpoint = inst.get('ssh_endpoint') or {}
        instances[inst_id] = [
            common.InstanceInfo(
                instance_id=inst_id,
                # Instances reach each other at their public SSH endpoints;
                # a GPUaaS cluster's private network is for `POST /clusters`.
                internal_ip=endpoint.get('host'),
                external_ip=endpoint.get('host'),
                ssh_port=endpoint.get('port', 22),
                tags=inst['tags'],
                node_name=inst['name'],
            )
        ]
        if _is_head(inst):
            head_id = inst_id
            ssh_user = endpoint.get('user')
    return common.ClusterInfo(
        instances=instances,
        head_instance_id=head_id,
        provider_name='gpuaas',
        provider_config=provider_config,
        ssh_user=ssh_user,
        custom_ray_options={'use_external_ip': True},
    )


def query_instances(
    cluster_name: str,
    cluster_name_on_cloud: str,
    provider_config: Optional[Dict[str, Any]] = None,
    non_terminated_only: bool = True,
    retry_if_missing: bool = False,
) -> Dict[str, Tuple[Optional[status_lib.ClusterStatus], Optional[str]]]:
    """See sky/provision/__init__.py"""
    del cluster_name, provider_config, retry_if_missing  # unused
    client = _client()
    statuses: Dict[str, Tuple[Optional[status_lib.ClusterStatus],
                              Optional[str]]] = {}
    for inst in _all_instances(client, cluster_name_on_cloud):
        status = _STATUS_MAP.get(inst['projected'])
        if non_terminated_only and status is None:
            continue
        statuses[inst['id']] = (status, None)
    return statuses


def cleanup_ports(
    cluster_name_on_cloud: str,
    ports: List[str],
    provider_config: Optional[Dict[str, Any]] = None,
) -> None:
    # Published ports end with the instance.
    del cluster_name_on_cloud, ports, provider_config


def query_ports(
    cluster_name_on_cloud: str,
    ports: List[str],
    head_ip: Optional[str] = None,
    provider_config: Optional[Dict[str, Any]] = None,
) -> Dict[int, List[common.Endpoint]]:
    """The head's published ports: each guest port at its public address."""
    del head_ip, provider_config  # unused
    wanted = resources_utils.port_ranges_to_set(ports)
    client = _client()
    head = _head_id(_live_instances(client, cluster_name_on_cloud))
    if head is None:
        return {}
    out: Dict[int, List[common.Endpoint]] = {}
    for published in client.instance(head)['published']:
        if published['guest_port'] not in wanted:
            continue
        host, _, port = published['address'].rpartition(':')
        out[published['guest_port']] = [
            common.SocketEndpoint(host=host, port=int(port))
        ]
    return out
