"""A script that generates the GPUaaS catalog from a deployment's offers.

Usage:
    python fetch_gpuaas.py [-h] [--api API] [--output OUTPUT]

A GPUaaS deployment prices its own SKUs, so its catalog is not one of
SkyPilot's hosted catalogs: ``gpuaas_catalog`` runs ``create_catalog`` against
the deployment in ``~/.gpuaas/config`` when the local file is missing or an
hour old. ``GET /offers`` is public; no token is needed.
"""
import argparse
import csv
import json
import re
from typing import Any, Dict, List

from sky.provision.gpuaas import gpuaas_utils

COLUMNS = [
    'InstanceType', 'AcceleratorName', 'AcceleratorCount', 'vCPUs',
    'MemoryGiB', 'Price', 'SpotPrice', 'Region', 'GpuInfo'
]

# ISO 4217 currencies without minor units; every other one has two.
_ZERO_DECIMAL = ('JPY', 'KRW')


def accelerator_name(gpu_model: str) -> str:
    """SkyPilot's short name for a GPU model as the deployment spells it.

    'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA L40S' -> 'L40S',
    'NVIDIA A100-SXM4-80GB' -> 'A100-80GB' (SkyPilot's name for it).
    """
    words = gpu_model.split()
    if words and words[0].upper() in ('NVIDIA', 'AMD', 'INTEL'):
        words = words[1:]
    if not words:
        return gpu_model
    name = words[0]
    if name.startswith('A100') and '80GB' in gpu_model:
        return 'A100-80GB'
    return name.split('-')[0]


# Device memory of the models whose names do not say it, in GiB.
_DEVICE_MEMORY_GIB = {
    'L40S': 48,
    'L40': 48,
    'L4': 24,
    'A10': 24,
    'A10G': 24,
    'A40': 48,
    'A6000': 48,
    'T4': 16,
    'GH200': 96,
    'B200': 180,
    'B300': 288,
    'MI300X': 192,
}


def gpu_memory_mib(gpu_model: str) -> int:
    """The device memory, from the name ('80GB') or the known models; 0 when
    neither says (SkyPilot's tables need a number)."""
    match = re.search(r'(\d+)\s*GB', gpu_model)
    if match:
        return int(match.group(1)) * 1024
    return _DEVICE_MEMORY_GIB.get(accelerator_name(gpu_model), 0) * 1024


def manufacturer(gpu_model: str) -> str:
    first = gpu_model.split()[0].upper() if gpu_model.split() else ''
    return {'AMD': 'AMD', 'INTEL': 'Intel'}.get(first, 'NVIDIA')


def price_per_hour(money: Dict[str, Any]) -> float:
    """Money in minor units as a price in the currency's major unit."""
    divisor = 1 if money['currency'] in _ZERO_DECIMAL else 100
    return money['amount_minor'] / divisor


def rows(offers: List[Dict[str, Any]]) -> List[List[Any]]:
    """One catalog row per SKU and region the deployment sells it in.

    Every offer is listed, with or without capacity now: capacity is found at
    launch, and a refusal there makes SkyPilot fail over (see
    ``sky/provision/gpuaas/instance.py``).
    """
    out = []
    for offer in offers:
        if offer['gpu_count'] < 1:
            continue
        name = accelerator_name(offer['gpu_model'])
        memory = gpu_memory_mib(offer['gpu_model'])
        gpu: Dict[str, Any] = {
            'Name': name,
            'Manufacturer': manufacturer(offer['gpu_model']),
            'Count': float(offer['gpu_count']),
            'MemoryInfo': {
                'SizeInMiB': memory
            },
            'TotalGpuMemoryInMiB': memory * offer['gpu_count'],
        }
        gpu_info = json.dumps({'Gpus': [gpu]}).replace('"', "'")
        out.append([
            offer['sku'],
            name,
            float(offer['gpu_count']),
            float(offer['vcpus']),
            float(offer['memory_gib']),
            price_per_hour(offer['price_per_hour']),
            '',  # No spot instances.
            offer['region'],
            gpu_info,
        ])
    out.sort(key=lambda r: (r[0], r[7]))
    return out


def create_catalog(api: str, output_path: str) -> None:
    """Writes the catalog of the deployment at ``api`` to ``output_path``."""
    offers = gpuaas_utils.GpuaasClient(api, token=None, project=None).offers()
    with open(output_path, mode='w', encoding='utf-8', newline='') as f:
        writer = csv.writer(f, delimiter=',', quotechar='"')
        writer.writerow(COLUMNS)
        writer.writerows(rows(offers))


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--api',
                        required=True,
                        help='The deployment\'s API, e.g. '
                        'https://portal.example/api/v1')
    parser.add_argument('--output', default='gpuaas/vms.csv')
    args = parser.parse_args()
    create_catalog(args.api, args.output)
    print(f'GPUaaS catalog saved to {args.output}')
