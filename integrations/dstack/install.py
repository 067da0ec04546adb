"""Installs the GPUaaS backend into the dstack of this Python environment.

    python integrations/dstack/install.py

It lays the backend out as a contributor's branch of dstack would: the new
modules under ``dstack/`` are copied into the installed package, and
``registry.patch`` (the lines that register the cloud in SkyPilot's own files)
is applied to it. The patch is made against the dstack release in
``VERSION``; installing twice changes nothing.
"""
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys

PACKAGE = 'dstack'
DISTRIBUTION = 'dstack'
VERSION = '0.19.40'
HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    installed = importlib.metadata.version(DISTRIBUTION)
    if installed != VERSION:
        print(f'registry.patch is made for {DISTRIBUTION} {VERSION}; '
              f'this environment has {installed}', file=sys.stderr)
        return 1
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.origin is not None
    package = os.path.dirname(spec.origin)
    site = os.path.dirname(package)
    for root, _, files in os.walk(os.path.join(HERE, PACKAGE)):
        for name in files:
            if name.endswith('.pyc'):
                continue
            source = os.path.join(root, name)
            target = os.path.join(site, os.path.relpath(source, HERE))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
    patch = os.path.join(HERE, 'registry.patch')
    applied = subprocess.run(
        ['patch', '-p1', '-R', '--dry-run', '-s', '-f', '-d', site, '-i', patch],
        capture_output=True,
        check=False).returncode == 0
    if not applied:
        subprocess.run(['patch', '-p1', '-s', '-d', site, '-i', patch],
                       check=True)
    print(f'GPUaaS backend installed into {package}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
