"""tb-leak: memory-leak detection for training loops, inside TensorBoard."""

import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def frontend_files():
    root = os.path.join(HERE, "frontend")
    files = []
    for directory, _subdirs, names in os.walk(root):
        for name in names:
            if name.endswith((".js", ".css", ".html", ".svg")):
                files.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(files)


setup(
    name="tb-leak",
    version="0.1.0",
    description="Find memory leaks in training loops: summaries, analysis, a TensorBoard tab and a CLI",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tb_leak_plugin", "tb_leak_plugin.*"]) + ["tb_leak_plugin.frontend"],
    # The top-level frontend/ folder ships inside the package as
    # tb_leak_plugin/frontend, so the plugin can serve it from the wheel.
    package_dir={"tb_leak_plugin.frontend": "frontend"},
    package_data={
        "tb_leak_plugin": ["plugin_data.proto"],
        "tb_leak_plugin.plugin": ["http_api.md"],
        "tb_leak_plugin.frontend": frontend_files(),
    },
    install_requires=[
        "tensorboard>=2.12",
        "protobuf>=4.21",
        "numpy>=1.22",
        "psutil>=5.8",
        "google-crc32c>=1.5",
    ],
    extras_require={
        "tf": ["tensorflow-cpu>=2.12; platform_machine=='x86_64'", "tensorflow>=2.12; platform_machine!='x86_64'"],
        "test": [
            "tensorflow-cpu>=2.12; platform_machine=='x86_64'",
            "tensorflow>=2.12; platform_machine!='x86_64'",
            # Multi-worker model.fit runs on tf_keras. It requires "tensorflow",
            # which on x86 would install a second TensorFlow beside tensorflow-cpu:
            # there .ci/run installs it with --no-deps.
            "tf-keras>=2.16; platform_machine!='x86_64'",
            "pytest>=7",
            "playwright>=1.40",
            "werkzeug>=2",
            # A real S3-compatible server for the remote-logdir tests.
            "boto3>=1.26",
            "moto[server]>=5",
            # fsspec's in-memory filesystem, reached through TensorBoard's gfile.
            "fsspec>=2023.1",
        ],
        # s3:// logdirs (TensorBoard's gfile reaches S3 through boto3).
        "s3": ["boto3>=1.26"],
        "bench": ["xprof"],
    },
    entry_points={
        "tensorboard_plugins": ["leak = tb_leak_plugin.plugin.leak_plugin:LeakPluginLoader"],
        "console_scripts": ["tb-leak = tb_leak_plugin.reporting.cli:main"],
        "pytest11": ["tb_leak = tb_leak_plugin.pytest_plugin"],
    },
    classifiers=["Programming Language :: Python :: 3", "Framework :: TensorFlow"],
)
