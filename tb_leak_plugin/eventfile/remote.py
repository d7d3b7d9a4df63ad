"""Logdirs on object storage (``s3://``, ``gs://``, ...), through TensorBoard's I/O layer.

Every remote path is read and written through TensorBoard's TensorFlow-free
``gfile`` (``tensorboard.compat.tensorflow_stub.io.gfile``), the layer
TensorBoard itself uses when TensorFlow is not installed: ``s3://`` through
boto3 and any other scheme through fsspec (``gs://`` with gcsfs, ``az://``
with adlfs, ...). Credentials and endpoints are therefore the ones
TensorBoard and boto3 read: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(or a profile, or an instance role), ``AWS_REGION``, ``S3_ENDPOINT``
(TensorBoard's) or ``AWS_ENDPOINT_URL`` (boto3's), ``AWS_MAX_ATTEMPTS``;
fsspec's own configuration for the other schemes. tb-leak adds none of its own.

This module adds what the stub lacks for reading whole logdirs cheaply:

* a logdir at a bucket's root (``s3://bucket``), which the stub's S3 paths
  cannot name;
* :func:`list_tree`: every file under a logdir grouped by directory, for S3
  in one paginated listing of the prefix (1,000 keys a request) instead of a
  listing and a ``HEAD`` per directory entry;
* :func:`describe_error`: one line for a missing bucket, bad credentials or
  an endpoint that cannot be reached, instead of a botocore traceback.
"""

from __future__ import annotations

import collections

from tensorboard.compat.tensorflow_stub.io import gfile


def is_remote(path: str) -> bool:
    return "://" in path


def scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if is_remote(path) else ""


def normalize(path: str) -> str:
    """A remote directory path without trailing slashes (``s3://bucket/a/b``)."""
    head, _, rest = path.partition("://")
    trimmed = rest.rstrip("/")
    if not trimmed and rest.startswith("/"):
        trimmed = "/"  # file:/// is the root, not nothing
    return f"{head}://{trimmed}"


def join(*parts: str) -> str:
    out = normalize(parts[0])
    for part in parts[1:]:
        part = part.strip("/")
        if part:
            out = out + part if out.endswith("/") else out + "/" + part
    return out


def is_stub_s3(path: str) -> bool:
    """Whether ``path`` is served by TensorBoard's own (boto3) S3 filesystem."""
    if scheme(path) != "s3":
        return False
    try:
        return type(gfile.get_filesystem(path)).__name__ == "S3FileSystem"
    except Exception:
        return False


def bucket_and_key(path: str) -> tuple[str, str]:
    rest = normalize(path).partition("://")[2]
    bucket, _, key = rest.partition("/")
    return bucket, key


class RemoteError(OSError):
    """A remote logdir cannot be listed or read (the message says why, in one line)."""


def list_tree(logdir: str) -> dict[str, list[str]]:
    """Every file under ``logdir``: directory path -> file names (directories
    that hold only subdirectories are listed with no names).

    Raises RemoteError (one line) when ``logdir`` cannot be listed, and
    FileNotFoundError when nothing is stored under it.
    """
    logdir = normalize(logdir)
    if is_stub_s3(logdir):
        return _list_tree_s3(logdir)
    return _list_tree_walk(logdir)


def _list_tree_s3(logdir: str) -> dict[str, list[str]]:
    bucket, key = bucket_and_key(logdir)
    if not bucket:
        raise RemoteError(f"{logdir!r} names no bucket")
    prefix = f"s3://{bucket}/" + (key + "/" if key else "")
    try:
        # The stub's S3 glob of "<prefix>*" lists every key under the prefix,
        # paginated (its "*" is not limited to one level).
        paths = gfile.glob(prefix + "*")
    except Exception as error:
        raise RemoteError(describe_error(error)) from None
    tree: dict[str, list[str]] = collections.defaultdict(list)
    for path in paths:
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix):]
        if not rest:
            continue
        directory, _, name = rest.rpartition("/")
        full_dir = prefix.rstrip("/") + ("/" + directory if directory else "")
        if name:
            tree[full_dir].append(name)
        else:
            tree.setdefault(full_dir, [])  # a "directory/" marker object
        # Parents exist too (S3 has no directories, only key prefixes).
        while directory:
            directory = directory.rpartition("/")[0]
            tree.setdefault(prefix.rstrip("/") + ("/" + directory if directory else ""), [])
    if not tree:
        raise FileNotFoundError(f"nothing is stored under {logdir!r}")
    return {directory: sorted(names) for directory, names in tree.items()}


def _list_tree_walk(logdir: str) -> dict[str, list[str]]:
    try:
        if not gfile.exists(logdir):
            raise FileNotFoundError(f"nothing is stored under {logdir!r}")
        if not gfile.isdir(logdir):
            raise RemoteError(f"{logdir!r} is not a directory")
    except (FileNotFoundError, RemoteError):
        raise
    except Exception as error:
        raise RemoteError(describe_error(error)) from None
    tree: dict[str, list[str]] = {}
    stack = [logdir]
    while stack:
        directory = stack.pop()
        try:
            names = [name.rstrip("/") for name in gfile.listdir(directory)]
        except Exception as error:
            if directory == logdir:
                raise RemoteError(describe_error(error)) from None
            tree[directory] = []
            continue
        files = []
        for name in names:
            path = join(directory, name)
            if gfile.isdir(path):
                stack.append(path)
            else:
                files.append(name)
        tree[directory] = sorted(files)
    return tree


def describe_error(error: BaseException) -> str:
    """One line saying why a remote operation failed (no traceback)."""
    if isinstance(error, (RemoteError, FileNotFoundError)):
        return str(error)
    response = getattr(error, "response", None)
    if isinstance(response, dict) and "Error" in response:
        code = response["Error"].get("Code", "")
        message = response["Error"].get("Message", "") or str(error)
        hints = {
            "NoSuchBucket": "the bucket does not exist",
            "404": "not found",
            "AccessDenied": "access denied: check the credentials' permissions",
            "403": "access denied: check the credentials' permissions",
            "InvalidAccessKeyId": "the access key is not known to this endpoint (AWS_ACCESS_KEY_ID)",
            "SignatureDoesNotMatch": "the secret key does not match (AWS_SECRET_ACCESS_KEY)",
        }
        hint = hints.get(code)
        return f"{code}: {message}" + (f" ({hint})" if hint and hint not in message.lower() else "")
    name = type(error).__name__
    text = str(error).strip().splitlines()[0] if str(error).strip() else name
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        return f"{text} (is the endpoint right? it comes from S3_ENDPOINT or AWS_ENDPOINT_URL)"
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return f"{text} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an AWS profile)"
    if name == "ImportError" or isinstance(error, ImportError):
        return f"{text}"
    if isinstance(error, ValueError) and "filesystem" in text.lower():
        return f"{text} (install the fsspec implementation of this scheme, e.g. gcsfs for gs://)"
    return f"{name}: {text}" if name not in text else text
