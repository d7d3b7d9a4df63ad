"""A real S3-compatible server on 127.0.0.1 for tests and benchmarks (imported, not a conftest).

:class:`S3Server` runs ``moto``'s server mode (``python -m moto.server``,
from the ``moto[server]`` package) in its own process on a free port, and
gives the environment a client needs to reach it: the same variables
TensorBoard and boto3 read (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_DEFAULT_REGION``, and the endpoint as ``S3_ENDPOINT``, TensorBoard's,
and/or ``AWS_ENDPOINT_URL``, boto3's).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# No shared ~/.aws files, no instance-metadata lookups: only what a test sets.
BASE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


class S3Server:
    """``with S3Server() as s3:`` a moto S3 server; ``s3.endpoint``, ``s3.env()``, ``s3.client()``."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = None

    def __enter__(self) -> "S3Server":
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=2).read()
                return self
            except Exception:
                if time.time() > deadline:
                    self.__exit__()
                    raise TimeoutError("moto server did not start in 60 s")
                time.sleep(0.1)

    def __exit__(self, *exc_info) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def env(self, base=None, s3_endpoint: bool = True, aws_endpoint_url: bool = True) -> dict:
        """``base`` (default ``os.environ``) plus credentials and this endpoint."""
        env = dict(os.environ if base is None else base)
        env.update(BASE_ENV)
        env.pop("S3_ENDPOINT", None)
        env.pop("AWS_ENDPOINT_URL", None)
        if s3_endpoint:
            env["S3_ENDPOINT"] = self.endpoint
        if aws_endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint
        return env

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        paginator = self.client().get_paginator("list_objects_v2")
        return [item["Key"] for page in paginator.paginate(Bucket=bucket, Prefix=prefix)
                for item in page.get("Contents", [])]
