"""A Python client for the GPU cloud's API (``/api/v1``).

    from gpuaas import Cloud
    cloud = Cloud("https://portal.example/api/v1", "gpk_…")
    offer = next(o for o in cloud.offers() if o.launchable > 0)
    inst = cloud.launch(sku=offer.sku, region=offer.region, image="ubuntu-24.04-cuda",
                        name="train", ssh_public_keys=[open(key).read()])
    print(cloud.wait_until_running(inst.id).ssh)

See README.md.
"""

from . import errors
from .cloud import Cloud

__all__ = ["Cloud", "errors"]
__version__ = "0.1.0"
