"""pip install bindings/python: the tern package (pure Python, ctypes).

A setup.py rather than a pyproject.toml: pip then needs only setuptools
to install it (a PEP 517 build would need the wheel package too, which a
fresh venv of Debian's Python 3.11 lacks), so
`pip install --no-index --no-build-isolation bindings/python` works
offline."""
from setuptools import setup

setup(
    name="tern",
    version="0.2.0",
    description="Python binding of tern, the embeddable HTTP server "
                "library (ctypes, no compile step)",
    license="MIT",
    python_requires=">=3.9",
    packages=["tern"],
)
