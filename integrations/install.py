"""Installs one of this cloud's integrations into the Python environment running it.

    python integrations/install.py skypilot      # into SkyPilot 0.14.1
    python integrations/install.py dstack        # into dstack 0.19.40

Each integration is laid out as a contributor's branch of its project would
be: the new modules under its package directory (``skypilot/sky/``,
``dstack/dstack/``) are copied into the installed package, and its
``registry.patch`` (the lines that register it in the project's own files) is
applied there. A patch is made against one release of its project, so that
release must be the one installed; installing twice changes nothing.
"""
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# integration -> (package directory, distribution, the release its patch is for)
INTEGRATIONS = {
    'skypilot': ('sky', 'skypilot', '0.14.1'),
    'dstack': ('dstack', 'dstack', '0.19.40'),
}


def install(integration: str) -> str:
    package, distribution, version = INTEGRATIONS[integration]
    try:
        installed = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f'{distribution} is not installed here: '
                         f'pip install {distribution}=={version}') from None
    if installed != version:
        raise SystemExit(f'{integration}/registry.patch is made for '
                         f'{distribution} {version}; this environment has '
                         f'{installed}')
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    site = os.path.dirname(os.path.dirname(spec.origin))
    source_root = os.path.join(HERE, integration)
    for root, _, files in os.walk(os.path.join(source_root, package)):
        for name in files:
            if name.endswith('.pyc'):
                continue
            source = os.path.join(root, name)
            target = os.path.join(site, os.path.relpath(source, source_root))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
    patch = os.path.join(source_root, 'registry.patch')
    applied = subprocess.run(
        ['patch', '-p1', '-R', '--dry-run', '-s', '-f', '-d', site, '-i', patch],
        capture_output=True,
        check=False).returncode == 0
    if not applied:
        subprocess.run(['patch', '-p1', '-s', '-d', site, '-i', patch],
                       check=True)
    return os.path.join(site, package)


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in INTEGRATIONS:
        print(f'usage: install.py {"|".join(INTEGRATIONS)}', file=sys.stderr)
        return 2
    print(f'GPUaaS {sys.argv[1]} integration installed into '
          f'{install(sys.argv[1])}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
